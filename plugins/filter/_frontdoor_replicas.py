# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The frontdoor_replicas filter: a thin wrapper over module_utils/_frontdoor.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _frontdoor_replicas
short_description: The serving replicas behind a front door, from the inventory
version_added: 0.1.0
description:
  - Groups the hosts of C(vllm_nodes) by C(vllm_replica) (rank 0 serves the API at
    C(vllm_api_host:vllm_api_port)) and makes one replica of each C(llama_coordinator) host with
    its RPC workers (C(llama_server_workers), else the C(llama_rpc_workers) group).
  - Each replica becomes one HAProxy server named after it, and one entry of the C(replicas) list
    of C(/etc/gpufleet/frontdoor/frontdoor.json), with every node's health agent URL, SSH address
    and systemd unit.
  - Refuses, naming the variable, the value and the fix, replicas that serve different model names
    or take different API keys (one backend has one health check request), a replica without
    rank 0, names that are not valid HAProxy server names, a loopback API address on another host
    than the front door, and an inventory without replicas.
  - Builds the arguments of HAProxy's C(http-check send) (a 1-token completion with the key),
    quoted per HAProxy's configuration manual section 2.2, refusing control characters.
  - Given O(settings), the front door's own variables, also refuses what the frontdoor role's
    preflight refuses of them (docs/operations.md, "Inputs the frontdoor role refuses"), among others
    a non-loopback bind address without TLS, HAProxy times of 0, C(frontdoor_max_auto_drained)
    above the number of replicas and a front door port that a serving process on the same host takes.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  groups:
    description: C(groups); C(vllm_nodes), C(llama_coordinator) and C(llama_rpc_workers) are read.
    type: dict
    required: true
  defaults:
    description:
      - Values for variables a host does not set, usually the defaults of the vllm, llama_server,
        llama_rpc_worker and health_agent roles (C(vllm_api_port), C(llama_server_port), ...).
    type: dict
    default: {}
  frontend:
    description: The front door's inventory name; a loopback API address is accepted only on that host.
    type: str
    default: ""
  check_host:
    description:
      - Value of the health check's Host header.
      - Without it, C(frontdoor_check_host) of O(settings), else C(localhost).
    type: str
  check_uri:
    description:
      - Path of the health check's completion request.
      - Without it, C(frontdoor_check_uri) of O(settings), else C(/v1/completions).
    type: str
  settings:
    description:
      - The front door's role variables by name (C(frontdoor_bind_address), C(frontdoor_port), ...), to
        check with the replicas; their problems come first. A variable left out is not checked.
    type: dict
"""

EXAMPLES = r"""
- name: Plan the replicas behind this front door
  ansible.builtin.set_fact:
    __frontdoor_plan: >-
      {{ hostvars | gpufleet.inference._frontdoor_replicas(groups, defaults={'vllm_api_port': 8000},
           frontend=inventory_hostname) }}
  no_log: true
"""

RETURN = r"""
_value:
  description: The replicas and what HAProxy needs to reach and check them.
  type: dict
  contains:
    replicas:
      description:
        - The C(replicas) of frontdoor.json, each C(name), C(server), C(kind) (C(vllm) or C(llama)),
          C(metrics_url) (null for llama) and C(nodes), each node C(name), C(rank), C(agent_url),
          C(ssh_host) and C(unit).
        - A llama.cpp worker that runs one RPC server per device appears once per unit.
      type: list
      elements: dict
    servers:
      description: One HAProxy server per replica, C(name), C(address) and C(port).
      type: list
      elements: dict
    model:
      description: The model name every replica serves.
      type: str
    api_key:
      description: The API key every replica takes (empty for none).
      type: str
    check_send:
      description: The quoted arguments of C(http-check send); it holds the API key.
      type: str
    hosts:
      description: Every serving host once, C(name), C(ssh_host) and C(units) (the units it may stop and start).
      type: list
      elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor


def frontdoor_replicas(hostvars, groups, defaults=None, frontend="", check_host=None, check_uri=None, settings=None):
    try:
        return _frontdoor.plan(hostvars, groups, defaults, frontend, check_host, check_uri, settings)
    except ValueError as exc:
        raise AnsibleFilterError("gpufleet.inference._frontdoor_replicas:\n%s" % exc) from None


class FilterModule(object):
    def filters(self):
        return {"_frontdoor_replicas": frontdoor_replicas}
