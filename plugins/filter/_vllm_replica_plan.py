# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_replica_plan filter: a thin wrapper over module_utils/_vllm_replica.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _vllm_replica_plan
short_description: Check the layout of one vLLM replica and return its plan
version_added: 0.1.0
description:
  - Reads the C(__vllm_node) fact that the gpufleet.inference.vllm role's preflight publishes on
    every host, keeps the hosts of one replica, and checks that their ranks are 0..N-1, that
    they agree on the parallel sizes, version, ports and engine arguments, that their addresses
    are unique and reachable, and that TP x PP ranks split evenly over the nodes.
  - Fails with one line per problem, naming the variable, the value and the fix.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The hosts of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  replica:
    description: The replica's name (C(vllm_replica)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Plan this host's replica
  ansible.builtin.set_fact:
    __vllm_plan: "{{ hostvars | gpufleet.inference._vllm_replica_plan(ansible_play_hosts_all, vllm_replica) }}"
"""

RETURN = r"""
_value:
  description: The replica's plan.
  type: dict
  contains:
    name: {description: The replica's name., type: str}
    nnodes: {description: Number of nodes (C(--nnodes))., type: int}
    master_addr: {description: Rank 0's address (C(--master-addr))., type: str}
    nodes: {description: "C(host), C(rank) and C(address) of every node, by rank.", type: list}
    local_world_size: {description: Ranks (GPUs) per node., type: int}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_replica


def vllm_replica_plan(hostvars, hosts, replica):
    members = []
    for host in hosts:
        node = hostvars[host].get("__vllm_node") if host in hostvars else None
        if isinstance(node, dict) and node.get("replica") == replica:
            members.append(dict(node, host=host))
    result, problems = _vllm_replica.plan(replica, members)
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return result


class FilterModule(object):
    def filters(self):
        return {"_vllm_replica_plan": vllm_replica_plan}
