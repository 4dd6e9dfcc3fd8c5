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
  - The role's preflight checks the same settings first (C(_role_problems('serving_acceptance'))),
    so a plan that cannot run is refused there, naming the variable, the value and the fix.
options:
  _input:
    description:
      - The role's settings - the serving_acceptance_* variables, C(inventory_hostname) (the load
        host), C(hostvars), C(groups), C(engine_defaults) (the engine roles' defaults) and C(frontdoor)
        (C(host), C(address), C(port), C(tls), or null for none).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Keep the plan of the run
  ansible.builtin.set_fact:
    __serving_acceptance_run: "{{ __serving_acceptance_settings | gpufleet.inference._serving_plan }}"
"""

RETURN = r"""
_value:
  description:
    - The workload (C(load)), the targets with their points, where the tokenizer comes from and the
      first vLLM replica's rank 0.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance


def serving_plan(settings):
    try:
        return _serving_acceptance.plan_settings(dict(settings))
    except _serving_acceptance.ServingError as exc:
        raise AnsibleFilterError("gpufleet.inference._serving_plan:\n%s" % exc) from None


class FilterModule(object):
    def filters(self):
        return {"_serving_plan": serving_plan}
