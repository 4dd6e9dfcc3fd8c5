#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only view of a host's NCCL configuration, as an NCCL process would see it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nccl_info
short_description: Read the NCCL configuration of a host and check it against its interfaces
version_added: 0.1.0
description:
  - Reads the system NCCL configuration file (V(/etc/nccl.conf) by default) and, when given, the
    systemd EnvironmentFile that services load, and parses their C(KEY=value) lines.
  - Lists the host's network interfaces from sysfs and reports which of them
    C(NCCL_SOCKET_IFNAME) selects, with NCCL's prefix, C(=) exact and C(^) exclude semantics.
  - Runs the same validation rules as the P(gpufleet.inference.nccl_env#filter) filter and
    returns the problems it finds. It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  conf_path:
    description: Path of the NCCL configuration file that every NCCL process reads.
    type: path
    default: /etc/nccl.conf
  env_file:
    description: Path of the EnvironmentFile services load; omit to skip it.
    type: path
  transport:
    description:
      - The transport the configuration was written for, used by the validation rules.
      - When omitted it is inferred, C(roce) when C(NCCL_IB_HCA) is set and C(NCCL_IB_DISABLE) is
        not C(1), C(socket) otherwise.
    type: str
    choices: [socket, roce, ib]
  sysfs_root:
    description: Root of sysfs; interfaces are read from C(<sysfs_root>/class/net). A seam for tests.
    type: path
    default: /sys
notes:
  - Variables set in a process's own environment override both files; NCCL applies the files
    with C(setenv(..., overwrite=0)).
"""

EXAMPLES = r"""
- name: Read the NCCL configuration
  gpufleet.inference.nccl_info:
    env_file: /etc/gpufleet/nccl.env
  register: __nccl_info

- name: Assert that NCCL uses the fabric interface
  ansible.builtin.assert:
    that: __nccl_info.socket_ifname_selects == ['bond0']
"""

RETURN = r"""
conf_exists:
  description: Whether O(conf_path) exists.
  returned: always
  type: bool
conf:
  description: Variables in O(conf_path).
  returned: always
  type: dict
  sample: {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=bond0"}
env_file_exists:
  description: Whether O(env_file) exists; false when it was not given.
  returned: always
  type: bool
env_file_vars:
  description: Variables in O(env_file).
  returned: always
  type: dict
in_sync:
  description: Whether both files hold the same variables; true when O(env_file) was not given.
  returned: always
  type: bool
interfaces:
  description: Network interface names found under O(sysfs_root).
  returned: always
  type: list
  elements: str
socket_ifname_selects:
  description: The interfaces C(NCCL_SOCKET_IFNAME) selects; all but C(lo) and C(docker*) when unset, as NCCL does.
  returned: always
  type: list
  elements: str
transport:
  description: The transport used for validation.
  returned: always
  type: str
problems:
  description: Validation problems, each with C(variable), C(key), C(value) and C(msg).
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl import (
    ifname_selects,
    parse_env_lines,
    validate_env,
)

# What NCCL uses when NCCL_SOCKET_IFNAME is unset.
NCCL_DEFAULT_IFNAME = "^docker,lo"


def read_env_file(module, path):
    if not path or not os.path.exists(path):
        return False, {}
    try:
        with open(path, "r") as handle:
            return True, parse_env_lines(handle.read())
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s; check its permissions" % (path, exc))


def list_interfaces(module, sysfs_root):
    net_dir = os.path.join(sysfs_root, "class", "net")
    try:
        return sorted(os.listdir(net_dir))
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot list network interfaces in %s: %s; is sysfs_root right?" % (net_dir, exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            conf_path=dict(type="path", default="/etc/nccl.conf"),
            env_file=dict(type="path"),
            transport=dict(type="str", choices=["socket", "roce", "ib"]),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params

    conf_exists, conf = read_env_file(module, params["conf_path"])
    env_file_exists, env_file_vars = read_env_file(module, params["env_file"])
    interfaces = list_interfaces(module, params["sysfs_root"])

    transport = params["transport"]
    if transport is None:
        transport = "roce" if conf.get("NCCL_IB_HCA") and conf.get("NCCL_IB_DISABLE") != "1" else "socket"

    problems = validate_env(
        conf,
        transport,
        interfaces=interfaces,
        origins=dict((key, "%s:%s" % (params["conf_path"], key)) for key in conf),
    )

    module.exit_json(
        changed=False,
        conf_exists=conf_exists,
        conf=conf,
        env_file_exists=env_file_exists,
        env_file_vars=env_file_vars,
        in_sync=params["env_file"] is None or conf == env_file_vars,
        interfaces=interfaces,
        socket_ifname_selects=ifname_selects(conf.get("NCCL_SOCKET_IFNAME") or NCCL_DEFAULT_IFNAME, interfaces),
        transport=transport,
        problems=problems,
    )


if __name__ == "__main__":
    main()
