#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only view of a host's RDMA devices and their GID tables, and the RoCE v2 GID index NCCL should use."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: rdma_info
short_description: Report RDMA devices, ports and GIDs, and pick the RoCE v2 GID index for NCCL
version_added: 0.1.0
description:
  - Reads every RDMA device under C(<sysfs_root>/class/infiniband) (ConnectX C(mlx5_0), a RoCE LAG
    C(mlx5_bond_0), ...) with its firmware, ports, link state, rate, net device and non-empty GID table
    entries. Needs no RDMA userspace tools.
  - With O(netdev) and/or O(address), also picks the RoCE v2 GID to use as C(NCCL_IB_GID_INDEX) and
    returns it as RV(selected). Only RoCE v2 GIDs of that net device and address qualify; with a net
    device alone, IPv4-mapped GIDs (what NCCL uses by default) come before global IPv6 ones and
    link-local GIDs are never chosen. Ports that are not C(ACTIVE) are used only when no active
    port matches, with a warning.
  - When nothing matches it fails with a message that lists the RoCE v2 GIDs it found, unless
    O(require_selection=false).
  - With O(ibv_devinfo_path), also runs C(ibv_devinfo -v), fills in firmware version and board id
    where sysfs lacks them and warns where the two disagree.
  - It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  sysfs_root:
    description: Root of sysfs; devices are read from C(<sysfs_root>/class/infiniband). A seam for tests.
    type: path
    default: /sys
  netdev:
    description:
      - Net device whose RoCE v2 GID to select, as the GID table names it (C(ens1f0np0), or C(bond0) for
        a RoCE LAG).
    type: str
  address:
    description:
      - IPv4 or IPv6 address whose RoCE v2 GID to select. An IPv4 address matches the IPv4-mapped GID
        C(::ffff:<ipv4>), an IPv6 address the GID equal to it. No prefix length.
    type: str
  require_selection:
    description:
      - Whether to fail when O(netdev) or O(address) is given and no GID matches. With V(false),
        RV(selected) is null and RV(selection_problem) says why.
    type: bool
    default: true
  ibv_devinfo_path:
    description:
      - C(ibv_devinfo) to run with C(-v) to cross-check sysfs, a name looked up in E(PATH) or a path.
        Not run when unset, or when there is no RDMA device.
      - A path that does not exist fails the module; a name not found in E(PATH) only warns.
    type: str
notes:
  - GID indexes move when addresses are added or removed and differ inside containers, so read them
    on the host that runs NCCL, right before it runs.
  - Empty GID slots (the zero GID) are skipped; their C(gid_attrs) files fail with EINVAL on real
    kernels and are read as empty.
  - InfiniBand ports have no RoCE GIDs; NCCL ignores C(NCCL_IB_GID_INDEX) there.
seealso:
  - module: gpufleet.inference.nccl_info
"""

EXAMPLES = r"""
- name: Read the RDMA devices
  gpufleet.inference.rdma_info:
  register: __rdma_info

- name: Find the RoCE v2 GID of the fabric address on the LAG bond
  gpufleet.inference.rdma_info:
    netdev: bond0
    address: "{{ ansible_facts['bond0']['ipv4']['address'] }}"
  register: __rdma_gid

- name: Show the NCCL settings of that GID
  ansible.builtin.debug:
    msg: "NCCL_IB_HCA==={{ __rdma_gid.selected.device }}:{{ __rdma_gid.selected.port }}
      NCCL_IB_GID_INDEX={{ __rdma_gid.selected.gid_index }}"

- name: Look for a GID without failing, and cross-check with ibv_devinfo
  gpufleet.inference.rdma_info:
    netdev: ens1f0np0
    require_selection: false
    ibv_devinfo_path: ibv_devinfo
  register: __rdma_info
"""

RETURN = r"""
devices:
  description: One entry per RDMA device, in natural name order; empty when there is none.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The RDMA device name.
      type: str
      sample: mlx5_bond_0
    node_guid:
      description: Node GUID as sysfs prints it.
      type: str
      sample: "5c25:7303:0094:212a"
    node_type:
      description: Node type without its number (C(CA), C(RNIC), ...).
      type: str
      sample: CA
    fw_ver:
      description: Firmware version; null when neither sysfs nor ibv_devinfo give one.
      type: str
      sample: "28.39.1002"
    hca_type:
      description: Adapter type of drivers that publish it (C(MT4129)); null otherwise.
      type: str
    board_id:
      description: Board id (PSID) of drivers that publish it; null otherwise.
      type: str
      sample: MT_0000000834
    ports:
      description: The device's ports, by number.
      type: list
      elements: dict
      contains:
        number:
          description: Port number, from 1.
          type: int
        state:
          description: Logical state without its number (C(ACTIVE), C(DOWN), C(INIT), C(ARMED)).
          type: str
          sample: ACTIVE
        phys_state:
          description: Physical state without its number (C(LinkUp), C(Disabled), C(Polling)).
          type: str
          sample: LinkUp
        link_layer:
          description: C(Ethernet) (RoCE) or C(InfiniBand).
          type: str
        rate:
          description: The rate as sysfs prints it.
          type: str
          sample: 100 Gb/sec (4X EDR)
        rate_gbps:
          description: The rate in Gbit/s; null when unreadable.
          type: float
          sample: 100.0
        netdev:
          description:
            - The port's net device, from its first GID's C(ndev) (C(bond0) for a LAG), else from the
              net device of the device's PCI function; null when neither names one.
          type: str
        gids:
          description: Non-empty GID table entries.
          type: list
          elements: dict
          contains:
            index:
              description: GID index, the value for C(NCCL_IB_GID_INDEX).
              type: int
            gid:
              description: The GID as sysfs prints it.
              type: str
              sample: "0000:0000:0000:0000:0000:ffff:0a00:000b"
            type:
              description: C(RoCE v2) or C(IB/RoCE v1); null when unreadable.
              type: str
            ndev:
              description: Net device of the GID; null for InfiniBand or when unreadable.
              type: str
            ipv4:
              description: The IPv4 address of an IPv4-mapped GID; null otherwise.
              type: str
            ipv6:
              description: The IPv6 address of a GID that is neither IPv4-mapped nor link-local; null otherwise.
              type: str
            link_local:
              description: Whether the GID is link-local (C(fe80::/10)).
              type: bool
selected:
  description:
    - The RoCE v2 GID chosen for O(netdev)/O(address), with C(device), C(port), C(gid_index), C(gid),
      C(type), C(netdev), C(ipv4), C(ipv6) and C(port_state); null when neither option is given or
      nothing matched.
  returned: success
  type: dict
  sample: {"device": "mlx5_bond_0", "port": 1, "gid_index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b",
           "type": "RoCE v2", "netdev": "bond0", "ipv4": "10.0.0.11", "ipv6": null, "port_state": "ACTIVE"}
selection_problem:
  description:
    - Why nothing was selected (with O(require_selection=false)), or why the selection is doubtful
      (its port is not active); empty otherwise.
  returned: success
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._rdma import (
    CLASS_PATH,
    merge_ibv_devinfo,
    netdev_problem,
    parse_address,
    parse_ibv_devinfo,
    read_devices,
    select_gid,
)

IBV_DEVINFO_PACKAGES = "ibverbs-utils on Debian and Ubuntu, libibverbs-utils on RHEL"


def find_ibv_devinfo(module, value):
    """The binary to run, or None (with a warning) for a name not found in PATH."""
    if not value:
        module.fail_json(msg="ibv_devinfo_path must be a command name or a path, got an empty string")
    if "/" in value:
        if os.path.isfile(value) and os.access(value, os.X_OK):
            return value
        module.fail_json(
            msg="ibv_devinfo_path %s is not an executable file; install it (%s) or leave ibv_devinfo_path unset"
            % (value, IBV_DEVINFO_PACKAGES)
        )
    found = module.get_bin_path(value)
    if not found:
        module.warn("%s not found in PATH, devices not cross-checked; install it (%s)" % (value, IBV_DEVINFO_PACKAGES))
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "netdev": {"type": "str"},
            "address": {"type": "str"},
            "require_selection": {"type": "bool", "default": True},
            "ibv_devinfo_path": {"type": "str"},
        },
        supports_check_mode=True,
    )
    netdev, address = module.params["netdev"], module.params["address"]
    if netdev is not None and netdev_problem(netdev):
        module.fail_json(msg="netdev %s" % netdev_problem(netdev))
    if address is not None:
        try:
            parse_address(address)
        except ValueError as exc:
            module.fail_json(msg="address %s" % exc)

    source = os.path.join(module.params["sysfs_root"], *CLASS_PATH)
    devices = read_devices(module.params["sysfs_root"])
    if module.params["ibv_devinfo_path"] is not None and devices:
        binary = find_ibv_devinfo(module, module.params["ibv_devinfo_path"])
        if binary:
            rc, out, err = module.run_command([binary, "-v"])
            if rc != 0:
                module.fail_json(
                    msg="%s -v failed (rc %d): %s" % (binary, rc, (err or out).strip()), rc=rc, stdout=out, stderr=err
                )
            for warning in merge_ibv_devinfo(devices, parse_ibv_devinfo(out)):
                module.warn(warning)

    selected, problem = select_gid(devices, netdev, address, source=source)
    if selected is None and problem and module.params["require_selection"]:
        module.fail_json(msg=problem, devices=devices)
    if selected is not None and problem:
        module.warn(problem)
    module.exit_json(changed=False, devices=devices, selected=selected, selection_problem=problem or "")


if __name__ == "__main__":
    main()
