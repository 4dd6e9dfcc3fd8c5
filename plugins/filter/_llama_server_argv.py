# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_server_argv filter: a thin wrapper over module_utils/_llama_cpp.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _llama_server_argv
short_description: Build and validate llama-server's arguments for a llama.cpp version
version_added: 0.1.0
description:
  - Turns the llama_server role's settings into llama-server's argument list, written in the
    flag dialect of the llama.cpp being deployed (from
    M(gpufleet.inference.llama_cpp_source_info)).
  - Fails with one line per problem, naming the variable, the bad value and the fix, for example
    a bare C(-fa) where C(-fa) takes V(on|off|auto), C(--no-mmap) on a C(--load-mode) build, a
    flag the deployed build's C(--help) does not list (O(flags)), a worker endpoint outside the
    fabric subnet, or a coordinator without workers.
options:
  _input:
    description:
      - Settings, keys C(model_path), C(host), C(port), C(n_gpu_layers), C(n_cpu_moe),
        C(override_tensor), C(ctx_size), C(parallel), C(load_mode), C(flash_attn), C(extra_args).
    type: dict
    required: true
  dialect:
    description: The C(dialect) that M(gpufleet.inference.llama_cpp_source_info) returns.
    type: dict
    required: true
  workers:
    description: Inventory names of the RPC workers, in C(--rpc) order.
    type: list
    elements: str
    required: true
  endpoints:
    description: For each worker, the C(host:port) endpoints its RPC servers listen on.
    type: list
    elements: list
    required: true
  addresses:
    description: For each worker, the addresses its RPC servers bind to.
    type: list
    elements: list
    required: true
  subnet:
    description: The fabric subnet every worker address must be in; empty skips the check.
    type: str
    default: ""
  flags:
    description:
      - The flags of the llama-server being deployed, as C(gpufleet.inference._llama_cpp_help_flags)
        reads them from its C(--help) (the C(llama_cpp_server_flags) fact). Every flag in
        C(extra_args) must be one of them; the message names the closest real flag. Empty or
        C(none) skips the check, while the build is not installed yet.
    type: dict
"""

EXAMPLES = r"""
- name: Build the arguments
  ansible.builtin.set_fact:
    __argv: >-
      {{ settings | gpufleet.inference._llama_server_argv(dialect=dialect, workers=['w1'],
           endpoints=[['10.10.0.11:50052']], addresses=[['10.10.0.11']], subnet='10.10.0.0/24') }}
"""

RETURN = r"""
_value:
  description: llama-server's arguments, without the binary.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import format_problems, server_plan


def llama_server_argv(settings, dialect, workers, endpoints, addresses, subnet="", flags=None):
    try:
        argv, problems = server_plan(settings, dialect, workers, endpoints, addresses, subnet, flags)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None
    if problems:
        raise AnsibleFilterError("llama_server settings are invalid:\n%s" % format_problems(problems))
    return argv


class FilterModule(object):
    def filters(self):
        return {"_llama_server_argv": llama_server_argv}
