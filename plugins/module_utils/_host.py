# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What kind of host a play runs on, from the facts Ansible gathers: the one place that tells a
container (which shares its host's kernel) from a host or a VM (which has a kernel of its own)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# ansible_facts['virtualization_type'] values of a guest that shares the host's kernel
# (ansible-core's facts/virtual/linux.py). A VM (kvm, xen, VMware) has its own kernel: a driver,
# sysctls and NIC settings apply there as on metal.
CONTAINER_TYPES = ("docker", "podman", "container", "containerd", "lxc", "openvz", "systemd-nspawn")


def container_kind(facts):
    """The container type ('docker', 'lxc', ...) when the facts describe a container guest, else ''.

    facts is ansible_facts, gathered with at least the 'virtual' subset."""
    if not isinstance(facts, dict):
        raise TypeError("container_kind expects ansible_facts (a dict), got %s" % type(facts).__name__)
    kind = str(facts.get("virtualization_type") or "")
    if str(facts.get("virtualization_role") or "") == "guest" and kind in CONTAINER_TYPES:
        return kind
    return ""
