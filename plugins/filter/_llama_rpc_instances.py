# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_rpc_instances filter: a thin wrapper over module_utils/_llama_cpp.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _llama_rpc_instances
short_description: Plan the llama.cpp RPC servers of one worker
version_added: 0.1.0
description:
  - Returns one entry per RPC server of a worker, with its port, its ggml device (C(-d)) and the
    C(host:port) endpoint the coordinator's C(--rpc) uses.
  - With O(per_device), there is one server per device, on consecutive ports from O(port).
    Devices default to C(CUDA0..CUDA<n-1>) for the O(gpu_count) GPUs found.
  - With O(threads), each entry also carries C(argv), the RPC server's arguments without the
    binary, C(--host), C(--port), C(--threads), C(--device) and C(--cache), then O(extra_args).
  - Fails with every problem at once, each naming the variable and the fix, when the bind address
    is not an IP, is the unspecified address, an IPv6 address or outside the fabric subnet, when a
    device is not a ggml device name, when an allowed source is not an IP address, when the ports
    run past 65535, and when an extra argument is a flag the role sets, holds a control character,
    or is not listed by the deployed binary's C(--help) (O(flags)), naming the closest real flag.
options:
  _input:
    description: The address the servers bind to, the node's fabric address.
    type: str
    required: true
  port:
    description: Port of the first server.
    type: int
    required: true
  per_device:
    description: One server per device.
    type: bool
    default: false
  devices:
    description: ggml device names; empty derives them from O(gpu_count).
    type: list
    elements: str
    default: []
  gpu_count:
    description: GPUs on the host.
    type: int
    default: 0
  subnet:
    description: The fabric subnet the address must be in; empty skips the check.
    type: str
    default: ""
  sources:
    description:
      - The addresses the firewall admits (C(llama_rpc_allowed_sources)); each must be a single IP
        address, or the filter fails naming the entry.
    type: list
    elements: str
    default: []
  threads:
    description: C(--threads) of each server; without it, no C(argv) is returned.
    type: int
  cache:
    description: Pass C(--cache).
    type: bool
    default: false
  extra_args:
    description: Further arguments of each server (C(llama_rpc_extra_args)).
    type: list
    elements: str
    default: []
  flags:
    description:
      - The flags of the RPC server being deployed, as C(gpufleet.inference._llama_cpp_help_flags)
        reads them from its C(--help) (the C(llama_cpp_rpc_server_flags) fact). Empty or C(none)
        skips that check, while the build is not installed yet.
    type: dict
"""

EXAMPLES = r"""
- name: Plan the servers
  ansible.builtin.set_fact:
    __instances: >-
      {{ '10.10.0.11' | gpufleet.inference._llama_rpc_instances(port=50052, per_device=true, gpu_count=8) }}
"""

RETURN = r"""
_value:
  description: One entry per server.
  type: list
  elements: dict
  contains:
    port:
      description: TCP port.
      type: int
    device:
      description: ggml device, empty for the build's default.
      type: str
    endpoint:
      description: C(address:port) for C(--rpc).
      type: str
    argv:
      description: The server's arguments, without the binary; only with O(threads).
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import (
    format_problems,
    rpc_endpoint,
    rpc_instances,
    rpc_problems,
    rpc_server_argv,
)


def llama_rpc_instances(
    address, port, per_device=False, devices=None, gpu_count=0, subnet="", sources=None,
    threads=None, cache=False, extra_args=None, flags=None,
):  # fmt: skip
    # The extra arguments are only checked where they are used: in the argv, with threads.
    problems = rpc_problems(
        address, port, per_device, devices, gpu_count, subnet, sources,
        extra_args=None if threads is None else ([] if extra_args is None else extra_args), flags=flags,
    )  # fmt: skip
    if len(problems) == 1:
        raise AnsibleFilterError(problems[0])
    if problems:
        raise AnsibleFilterError("llama_rpc_worker settings are invalid:\n%s" % format_problems(problems))
    instances = rpc_instances(devices or [], per_device, gpu_count, int(port))
    for instance in instances:
        instance["endpoint"] = rpc_endpoint(address, instance["port"])
        if threads is not None:
            instance["argv"], _problems = rpc_server_argv(instance, address, threads, cache, extra_args, flags)
    return instances


class FilterModule(object):
    def filters(self):
        return {"_llama_rpc_instances": llama_rpc_instances}
