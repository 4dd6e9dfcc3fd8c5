# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric_network_reconfigure filter: which links fabric_network hands to
`networkctl reconfigure` after `networkctl reload` (rule in module_utils/_fabric_network.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _fabric_network_reconfigure
short_description: The fabric links to reconfigure after a systemd-networkd reload
version_added: 0.1.0
description:
  - Returns the links of a C(fabric_network_plan) result whose C(.network) file the apply wrote and
    that existed before the apply, in plan order (members first), for C(networkctl reconfigure).
  - A link the plan creates does not exist yet, and a bond or VLAN whose C(.netdev) file changed was
    deleted before the reload, so that systemd-networkd creates it again; neither is returned.
  - After C(networkctl reconfigure) returns, systemd-networkd no longer reports the state of the
    configuration it had before the reload (docs/fabric-network.md says why that matters).
options:
  _input:
    description: The result of the C(gpufleet.inference._fabric_network_plan) filter.
    type: dict
    required: true
  changed:
    description: The paths of the files the apply writes.
    type: list
    elements: str
    required: true
  interfaces:
    description: The links the host had before the apply (C(ansible_facts['interfaces'])).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Reconfigure the links whose .network file changed
  ansible.builtin.command:
    argv: "{{ ['networkctl', 'reconfigure'] + __links }}"
  vars:
    __links: "{{ __plan | gpufleet.inference._fabric_network_reconfigure(__changed, ansible_facts['interfaces']) }}"
  when: __links | length > 0
  changed_when: true
"""

RETURN = r"""
_value:
  description: Link names, members first, then the bond, then the VLANs.
  type: list
  elements: str
  sample: [ens1f0np0]
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric_network import reconfigure_links


def fabric_network_reconfigure(plan, changed, interfaces):
    if not isinstance(plan, dict) or not isinstance(plan.get("model"), dict):
        raise AnsibleFilterError("fabric_network_reconfigure: the input must be a fabric_network_plan result")
    return reconfigure_links(plan["model"], changed, interfaces)


class FilterModule(object):
    def filters(self):
        return {"_fabric_network_reconfigure": fabric_network_reconfigure}
