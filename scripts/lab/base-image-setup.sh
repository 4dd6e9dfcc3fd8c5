#!/bin/sh
# Runs inside the debootstrapped root (chroot) before it is imported as the lab base image.
# It turns a plain Debian root into something that boots systemd as PID 1 in a container.
set -eu

# Every container gets a fresh machine-id from systemd at first boot.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id

# Units that cannot work in an unprivileged container only add noise and failed states.
for unit in \
    getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-modules-load.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
    systemd-remount-fs.service systemd-firstboot.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
    ln -sf /dev/null "/etc/systemd/system/${unit}"
done

# Docker Engine is baked in for the container-runtime role, which enables and starts it itself.
# So are HAProxy and Prometheus, for the front-door and monitoring roles.
for unit in docker.service docker.socket containerd.service haproxy.service prometheus.service; do
    systemctl disable "${unit}" >/dev/null 2>&1 || true
done

# The package made host keys in the chroot, which every container would share: drop them and
# make each host's own at its first boot, before sshd starts.
rm -f /etc/ssh/ssh_host_*
cat > /etc/systemd/system/gpufleet-lab-ssh-hostkeys.service <<'UNIT'
[Unit]
Description=Generate this lab host's SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
RequiredBy=ssh.service
UNIT
systemctl enable gpufleet-lab-ssh-hostkeys.service ssh.service >/dev/null 2>&1

# Lab hosts have no package archive: traffic stays inside the lab. Tests that install packages
# serve their own repository from a lab host (scripts/lab/nvidia_repo.py).
: > /etc/apt/sources.list

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/* /var/tmp/*
