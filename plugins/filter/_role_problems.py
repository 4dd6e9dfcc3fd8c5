# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _role_problems filter: each role's input rules, written in Python in module_utils."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _role_problems
short_description: The input rules of one of the collection's roles (internal)
version_added: 0.1.0
description:
  - Internal to the collection's roles, not public API. Each role's preflight hands its settings
    to it and refuses the play if the list is not empty. The roles it knows, the settings each
    expects and its messages change with the roles.
  - Returns one message per problem, each naming the variable, its value and the fix; an empty
    list when all pass. Every problem of the role is returned at once.
options:
  _input:
    description: The role's settings, a mapping from variable name to value, as the role's
      C(vars/main.yml) composes them.
    type: dict
    required: true
  role:
    description: The role whose rules apply.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the settings
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('\n') }}"
  vars:
    __problems: "{{ __roce_settings | gpufleet.inference._role_problems('roce') }}"
"""

RETURN = r"""
_value:
  description: One message per problem.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import (
    _cuda_repository_rules,
    _cuda_toolkit_rules,
    _fabric,
    _fabric_network,
    _frontdoor_rules,
    _gpu_acceptance_rules,
    _health_agent_rules,
    _host_tuning_rules,
    _llama_cpp_rules,
    _llama_rpc_worker_rules,
    _llama_server_rules,
    _monitoring_rules,
    _nccl,
    _nccl_tests,
    _nvidia_container_toolkit_rules,
    _nvidia_driver,
    _roce,
    _serving_acceptance,
    _vllm_rules,
)

# role: the function of module_utils that returns its problems, given its settings.
RULES = {
    "cuda_repository": _cuda_repository_rules.settings_problems,
    "cuda_toolkit": _cuda_toolkit_rules.settings_problems,
    "fabric_network": _fabric_network.settings_problems,
    "fabric_validate": _fabric.settings_problems,
    "frontdoor": _frontdoor_rules.settings_problems,
    "gpu_acceptance": _gpu_acceptance_rules.settings_problems,
    "health_agent": _health_agent_rules.settings_problems,
    "host_tuning": _host_tuning_rules.settings_problems,
    "llama_cpp": _llama_cpp_rules.settings_problems,
    "llama_rpc_worker": _llama_rpc_worker_rules.settings_problems,
    "llama_server": _llama_server_rules.settings_problems,
    "monitoring": _monitoring_rules.settings_problems,
    "nccl": _nccl.settings_problems,
    "nccl_tests": _nccl_tests.settings_problems,
    "nvidia_container_toolkit": _nvidia_container_toolkit_rules.settings_problems,
    "nvidia_driver": _nvidia_driver.settings_problems,
    "roce": _roce.settings_problems,
    "serving_acceptance": _serving_acceptance.settings_problems,
    "vllm": _vllm_rules.settings_problems,
}


def role_problems(settings, role):
    if role not in RULES:
        raise AnsibleFilterError(f"_role_problems: no rules for role {role!r}; known: {', '.join(sorted(RULES))}")
    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"_role_problems({role!r}) takes a mapping of settings, got {type(settings).__name__}")
    try:
        return list(RULES[role](settings))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"_role_problems": role_problems}
