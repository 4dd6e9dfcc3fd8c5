# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric_network_plan filter: a thin wrapper over module_utils/_fabric_network.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _fabric_network_plan
short_description: Validate a fabric link and render it for netplan or systemd-networkd
version_added: 0.1.0
description:
  - Validates the fabric NICs, the optional LACP bond over them, the MTU, the addresses and the
    VLANs, and renders the configuration files of the chosen backend.
  - The bond defaults to mode 802.3ad, lacp-rate fast, transmit-hash-policy layer3+4 and
    mii-monitor-interval 100 ms.
  - Fails with a message naming the role variable, the value and the fix.
options:
  _input:
    description: The fabric NICs; with O(bond) they are its members, without it there must be one.
    type: list
    elements: str
    required: true
  bond:
    description: Name of the bond, or empty for a single NIC.
    type: str
    default: ""
  mtu:
    description: MTU of the members, the bond and (unless lower per VLAN) the VLANs.
    type: int
    required: true
  addresses:
    description: Addresses with prefix length of the bond (or single NIC).
    type: list
    elements: str
    default: []
  vlans:
    description: VLANs on the link, each C({id, addresses, mtu}).
    type: list
    elements: dict
    default: []
  bond_parameters:
    description: Overrides of the bond parameters, netplan spelling.
    type: dict
    default: {}
  backend:
    description: The renderer of the files.
    type: str
    choices: [netplan, networkd]
    required: true
  renderer:
    description: The netplan renderer (C(networkd) or C(NetworkManager)).
    type: str
    default: networkd
"""

EXAMPLES = r"""
- name: Plan the fabric files
  ansible.builtin.set_fact:
    __plan: "{{ ['ens1f0np0', 'ens1f1np1'] | gpufleet.inference._fabric_network_plan(bond='bond0', mtu=9000,
                addresses=['10.10.0.11/24'], backend='netplan') }}"
"""

RETURN = r"""
_value:
  description:
    - C(model) (the validated inputs), C(files) (path to content), C(links) (every link the
      configuration sets, members first), C(virtual_links) (the bond and VLANs it creates),
      C(mtus) (link to the MTU it gets) and C(network_files) (link to the C(.network) file
      systemd-networkd must configure it from; empty for netplan, which names its own files).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric_network import (
    FabricModelError,
    build_model,
    expected_mtus,
    links,
    network_files,
    render,
    virtual_links,
)


def fabric_network_plan(
    interfaces, mtu, backend, bond="", addresses=None, vlans=None, bond_parameters=None, renderer="networkd"
):
    try:
        model = build_model(
            list(interfaces) if isinstance(interfaces, tuple) else (interfaces if interfaces is not None else []),
            bond,
            mtu,
            addresses if addresses is not None else [],
            list(vlans or []),
            bond_parameters,
        )
        files = render(model, backend, renderer)
    except FabricModelError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return {
        "model": model,
        "files": files,
        "links": links(model),
        "virtual_links": virtual_links(model),
        "mtus": expected_mtus(model),
        "network_files": network_files(model, backend),
    }


class FilterModule(object):
    def filters(self):
        return {"_fabric_network_plan": fabric_network_plan}
