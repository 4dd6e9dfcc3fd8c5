# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_nft filter: a thin wrapper over module_utils/_vllm_replica.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _vllm_nft
short_description: Render the nftables table that fences one vLLM replica
version_added: 0.1.0
description:
  - Returns the text of an nftables file that replaces only its own table. The API port is
    accepted from O(api_clients); the internode ports (the master port, which vLLM opens on every
    interface, the guard port, and the ephemeral range where gloo and ZMQ listen) from the
    replica's own nodes; new connections to those ports from anywhere else are dropped.
  - Every address, network and port is validated; a bad one fails with a message naming it.
options:
  _input:
    description: Addresses of every node of the replica.
    type: list
    elements: str
    required: true
  table:
    description: Name of the nftables table (C(inet) family).
    type: str
    required: true
  api_port:
    description: The API port.
    type: int
    required: true
  api_clients:
    description: Addresses or networks allowed to open the API port.
    type: list
    elements: str
    required: true
  internal_ports:
    description: Variable name to port, for the other ports vLLM and the guard listen on.
    type: dict
    required: true
  ephemeral:
    description: Low and high end of C(net.ipv4.ip_local_port_range).
    type: list
    elements: int
    required: true
"""

EXAMPLES = r"""
- name: Render the replica firewall
  ansible.builtin.copy:
    content: "{{ ['10.0.0.1', '10.0.0.2'] | gpufleet.inference._vllm_nft('gpufleet_vllm_r0', 8000, ['10.0.1.0/24'],
                 {'vllm_master_port': 29501}, [32768, 60999]) }}"
    dest: /etc/gpufleet/vllm/r0/firewall.nft
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The nftables file.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_replica


def vllm_nft(peers, table, api_port, api_clients, internal_ports, ephemeral):
    text, problems = _vllm_replica.nft_rules(table, peers, api_port, api_clients, internal_ports, ephemeral)
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return text


class FilterModule(object):
    def filters(self):
        return {"_vllm_nft": vllm_nft}
