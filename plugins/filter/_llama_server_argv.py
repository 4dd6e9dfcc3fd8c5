# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_server_argv filter: a thin wrapper over module_utils/_llama_cpp.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: llama_server_argv
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
      - The flags of the llama-server being deployed, as P(gpufleet.inference.llama_cpp_help_flags#filter)
        reads them from its C(--help) (the C(llama_cpp_server_flags) fact). Every flag in
        C(extra_args) must be one of them; the message names the closest real flag. Empty or
        C(none) skips the check, while the build is not installed yet.
    type: dict
"""

EXAMPLES = r"""
- name: Build the arguments
  ansible.builtin.set_fact:
    __argv: >-
      {{ settings | gpufleet.inference.llama_server_argv(dialect=dialect, workers=['w1'],
           endpoints=[['10.10.0.11:50052']], addresses=[['10.10.0.11']], subnet='10.10.0.0/24') }}
"""

RETURN = r"""
_value:
  description: llama-server's arguments, without the binary.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import (
    check_fabric_address,
    format_problems,
    server_argv,
)


def llama_server_argv(settings, dialect, workers, endpoints, addresses, subnet="", flags=None):
    problems = []
    if not workers:
        problems.append(
            "the coordinator has no RPC workers: the llama_rpc_workers group is empty or its hosts did not run "
            "the llama_rpc_worker role. Add the workers to the llama_rpc_workers group"
        )
    if not len(workers or []) == len(endpoints or []) == len(addresses or []):
        raise AnsibleFilterError(
            "llama_server_argv: workers, endpoints and addresses must have one entry per worker, got %d, %d and %d"
            % (len(workers or []), len(endpoints or []), len(addresses or []))
        )
    rpc = []
    for worker, worker_endpoints, worker_addresses in zip(workers or [], endpoints or [], addresses or []):
        for address in worker_addresses or []:
            problem = check_fabric_address("llama_rpc_bind_address of %s" % worker, address, subnet)
            if problem:
                problems.append(problem)
        rpc += worker_endpoints or []
    settings = dict(settings, rpc=rpc)
    argv, more = server_argv(settings, dialect, flags)
    problems += more
    if problems:
        raise AnsibleFilterError("llama_server settings are invalid:\n%s" % format_problems(problems))
    return argv


class FilterModule(object):
    def filters(self):
        return {"llama_server_argv": llama_server_argv}
