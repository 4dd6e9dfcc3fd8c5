# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_cpp_help_dialect filter: a thin wrapper over module_utils/_llama_cpp.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _llama_cpp_help_dialect
short_description: Read the flag dialect of a built llama-server from its --help output
version_added: 0.1.0
description:
  - Returns the same keys as the C(dialect) of M(gpufleet.inference.llama_cpp_source_info), read
    from what the binary says rather than from its source, so a build can be checked against the
    dialect its preflight used.
options:
  _input:
    description: Output of C(llama-server --help).
    type: str
    required: true
  rpc_server_binary:
    description: Name of the RPC worker binary, copied into the result.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read the dialect of a build
  ansible.builtin.set_fact:
    __dialect: "{{ help.stdout | gpufleet.inference._llama_cpp_help_dialect('ggml-rpc-server') }}"
"""

RETURN = r"""
_value:
  description: C(rpc_server_binary), C(flash_attn_value), C(load_mode), C(legacy_mmap_flags).
  type: dict
"""

from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import dialect_from_help


def llama_cpp_help_dialect(help_text, rpc_server_binary=""):
    return dialect_from_help(help_text or "", rpc_server_binary)


class FilterModule(object):
    def filters(self):
        return {"_llama_cpp_help_dialect": llama_cpp_help_dialect}
