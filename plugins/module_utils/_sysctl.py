# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel settings under /proc/sys: check the requested ones, read the live values, plan and write
the ones that differ, and read each write back. Pure logic over a proc_root directory, so that the
tests run over a tree in tmp_path; the sysctl_apply module is the thin Ansible layer over it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

# A dotted key of sysctl.conf(5); "/" as a separator is not accepted (one spelling per key).
NAME = re.compile(r"[a-z0-9_]+(\.[a-zA-Z0-9_-]+)+\Z")
# Numbers, or space-separated numbers such as tcp_rmem's "4096 87380 16777216".
VALUE = re.compile(r"-?[0-9]+( +-?[0-9]+)*\Z")
# The keys a container's network namespace may lack: net/core/sysctl_net_core.c registers
# net_core_table (rmem_max, netdev_max_backlog, ...) for the initial namespace only on the kernels
# before 6.x made some of them per namespace. Every other absent key is a typo or a missing module.
NAMESPACE_HIDDEN = ("net.core.",)


def normalize(value):
    """The value as the kernel compares it: whitespace runs (tcp_rmem prints tabs) made one space."""
    return " ".join(str(value).split())


def path_of(proc_root, key):
    return os.path.join(proc_root, *key.split("."))


def input_problems(sysctls):
    """One message per bad key or value of the requested settings."""
    problems = []
    for key in sorted(sysctls):
        value = sysctls[key]
        if not NAME.match(key):
            problems.append("%r is not a sysctl key; keys are dotted kernel names such as net.core.rmem_max" % key)
        elif isinstance(value, bool) or not VALUE.match(normalize(value)) or "\n" in str(value):
            problems.append(
                '%s=%r is not a sysctl value; use a number or space-separated numbers such as "4096 87380 16777216"'
                % (key, value)
            )
    return problems


def read(proc_root, keys):
    """{key: normalized live value, or None when the kernel has no such key}."""
    live = {}
    for key in keys:
        try:
            with open(path_of(proc_root, key)) as handle:
                live[key] = normalize(handle.read())
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
            live[key] = None
    return live


def plan(sysctls, live, container=""):
    """What to do, given the requested settings and the live values.

    Returns dict(differ=[keys to write], absent=[keys the kernel lacks that are a failure],
    hidden=[keys a container's namespace lacks, which belong to the host's kernel])."""
    result = dict(differ=[], absent=[], hidden=[])
    for key in sorted(sysctls):
        if live.get(key) is None:
            if container and key.startswith(NAMESPACE_HIDDEN):
                result["hidden"].append(key)
            else:
                result["absent"].append(key)
        elif live[key] != normalize(sysctls[key]):
            result["differ"].append(key)
    return result


def writable(proc_root, key):
    """Whether a write may take (a read-only /proc/sys, or a key the namespace may only read, says no)."""
    return os.access(path_of(proc_root, key), os.W_OK)


def write(proc_root, key, value):
    """Write one value and read it back: None when it took, else why not.

    A write can return without error and still not change the value (a container's kernel may
    ignore it), so the read-back decides, as `sysctl -w` followed by `sysctl -n` would."""
    wanted = normalize(value)
    try:
        with open(path_of(proc_root, key), "w") as handle:
            handle.write(wanted + "\n")
    except (IOError, OSError) as exc:
        return "the kernel refused the write: %s" % (exc.strerror or exc)
    now = read(proc_root, [key])[key]
    if now != wanted:
        return "the write did not take: the kernel reads back %r" % now
    return None


def render(keys, values):
    """sysctl.conf lines of the given keys, for --diff."""
    return "".join("%s = %s\n" % (key, values[key]) for key in keys)
