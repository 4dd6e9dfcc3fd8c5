#!/usr/bin/env bash
# Create the project virtual environment from the pinned requirement files (make setup).
# Works on a fresh Debian 12 or Ubuntu 22.04+ machine: ansible-core 2.19 needs Python 3.11-3.13,
# so it picks the first of those it finds and installs python3.11 from the distribution if none is.
set -euo pipefail
venv=${1:-.venv}

find_python() {
    for candidate in python3.11 python3.12 python3.13 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

python=$(find_python || true)
if [ -z "$python" ] || ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: no Python 3.11-3.13 with venv found; install python3.11-venv (or run as root)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3.11 python3.11-venv >/dev/null
    python=$(find_python)
fi

# The model fan-out's unit tests run the real rsync between local directories, and over ssh to an
# sshd they start on loopback. openssh-server is installed only where policy-rc.d keeps its
# package scripts from starting a system sshd.
packages=""
command -v rsync >/dev/null 2>&1 || packages="rsync"
if [ ! -x /usr/sbin/sshd ] && [ -x /usr/sbin/policy-rc.d ]; then
    packages="$packages openssh-server"
fi
if [ -n "$packages" ] && [ "$(id -u)" = 0 ]; then
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null; }
fi

echo "setup: creating $venv with $("$python" --version)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip
"$venv/bin/pip" install -q --disable-pip-version-check -r requirements-test.txt -c constraints.txt
