# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl_env filter: a thin wrapper over module_utils/_nccl.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nccl_env
short_description: Build and validate the NCCL environment of a host
version_added: 0.1.0
description:
  - Merges the variables a NCCL transport sets with O(_input), the operator's overrides, and
    validates the result before anything is written.
  - Fails with one message per problem, naming the role variable, the bad value and the fix.
  - Rejects unknown C(NCCL_*) names (suggesting the closest known one), C(NCCL_SOCKET_NTHREADS)
    outside 1..16, C(NCCL_NSOCKS_PERTHREAD) x C(NCCL_SOCKET_NTHREADS) over 64,
    C(NCCL_IB_DISABLE=1) under C(roce) or C(ib), and a C(NCCL_SOCKET_IFNAME) that selects no
    interface of the host (with NCCL's prefix, C(=) exact and C(^) exclude semantics).
options:
  _input:
    description: Overrides, a mapping of C(NCCL_*) names to values; C(null) drops a transport default.
    type: dict
    required: true
  transport:
    description: The NCCL transport design.
    type: str
    choices: [socket, roce, ib]
    required: true
  socket_ifname:
    description: Value for C(NCCL_SOCKET_IFNAME); empty leaves it unset.
    type: str
    default: ""
  ib_hca:
    description: Value for C(NCCL_IB_HCA) under C(roce) and C(ib).
    type: str
    default: ""
  ib_gid_index:
    description: Value for C(NCCL_IB_GID_INDEX) under C(roce).
    type: int
  ib_tc:
    description: Value for C(NCCL_IB_TC) under C(roce) and C(ib).
    type: int
  interfaces:
    description: Interface names of the host; when given, C(NCCL_SOCKET_IFNAME) must select one.
    type: list
    elements: str
  origins:
    description: Maps an C(NCCL_*) name to the role variable that supplied it, for messages.
    type: dict
"""

EXAMPLES = r"""
- name: Build the validated NCCL environment
  ansible.builtin.set_fact:
    __nccl_env: >-
      {{ nccl_env_overrides | gpufleet.inference.nccl_env(transport='socket',
         socket_ifname='=bond0', interfaces=ansible_facts['interfaces']) }}
"""

RETURN = r"""
_value:
  description: The merged environment, C(NCCL_*) name to string value.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl import build_env, format_problems


def nccl_env(
    overrides, transport, socket_ifname="", ib_hca="", ib_gid_index=None, ib_tc=None, interfaces=None, origins=None
):
    env, problems = build_env(overrides, transport, socket_ifname, ib_hca, ib_gid_index, ib_tc, interfaces, origins)
    if env is None:
        raise AnsibleFilterError("gpufleet.inference.nccl_env: %s" % problems[0]["msg"])
    if problems:
        raise AnsibleFilterError(
            "gpufleet.inference.nccl_env: %d problem(s): %s" % (len(problems), format_problems(problems))
        )
    return {to_text(key): to_text(value) for key, value in env.items()}


class FilterModule:
    def filters(self):
        return {"nccl_env": nccl_env}
