# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _serving_plan filter: a thin wrapper over module_utils/_serving_acceptance.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _serving_plan
short_description: The load a serving acceptance run sends to each replica and the front door (internal)
version_added: 0.1.0
description:
  - Internal to the serving_acceptance role; its interface may change without notice.
  - Finds the replicas as the front door does (C(vllm_nodes) by C(vllm_replica), each
    C(llama_coordinator)), and the front door when given, and plans the points of each - a
    concurrency sweep up to what the replica's capacity plan admits, the concurrencies or request
    rates the variables give, or a prompt-length sweep up to its max-model-len.
  - Returns every problem of the variables and of each target at once, naming the variable, the
    value and the fix (a prompt that does not fit, a concurrency over the plan, a target of 0, an
    unknown preset), so the role refuses before any load is sent.
options:
  _input:
    description: The serving_acceptance role's variables by name.
    type: dict
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  groups:
    description: C(groups).
    type: dict
    required: true
  load_host:
    description: The host that sends the load; a replica listening on loopback is reachable only from its own host.
    type: str
    required: true
  defaults:
    description: The engine roles' defaults for the variables a serving host does not set.
    type: dict
    default: {}
  frontdoor:
    description: The front door to measure, C(host), C(address), C(port) and C(tls); omit for none.
    type: dict
"""

EXAMPLES = r"""
- name: Plan the run
  ansible.builtin.set_fact:
    __serving_acceptance_plan: >-
      {{ __serving_acceptance_settings | gpufleet.inference._serving_plan(hostvars, groups, inventory_hostname) }}
"""

RETURN = r"""
_value:
  description:
    - C(problems), a list of messages, empty when the run can go.
    - C(run), the workload and the targets with their points; null with problems.
  type: dict
"""

from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance


def serving_plan(settings, hostvars, groups, load_host, defaults=None, frontdoor=None):
    try:
        run = _serving_acceptance.run_plan(dict(settings), hostvars, groups, load_host, defaults, frontdoor or None)
    except _serving_acceptance.ServingError as exc:
        return {"problems": exc.problems, "run": None}
    return {"problems": [], "run": run}


class FilterModule(object):
    def filters(self):
        return {"_serving_plan": serving_plan}
