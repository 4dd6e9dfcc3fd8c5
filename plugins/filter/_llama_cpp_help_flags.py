# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_cpp_help_flags filter: a thin wrapper over module_utils/_llama_cpp.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _llama_cpp_help_flags
short_description: Read the flags a llama.cpp binary lists in its --help output
version_added: 0.1.0
description:
  - Returns every flag spelling that C(llama-server --help) or C(ggml-rpc-server --help) lists,
    each mapped to whether it takes a value (a placeholder such as C(N) or C(FNAME) follows it).
  - The roles check C(llama_server_extra_args) and C(llama_rpc_extra_args) against it, so a
    misspelled flag fails the preflight instead of crash-looping the unit.
options:
  _input:
    description: The binary's C(--help) output (stdout and stderr together; the RPC server prints it on stderr).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the flags of the installed llama-server
  ansible.builtin.set_fact:
    __flags: "{{ (help.stdout ~ '\n' ~ help.stderr) | gpufleet.inference._llama_cpp_help_flags }}"
"""

RETURN = r"""
_value:
  description: Flag spelling (C(-ngl), C(--n-gpu-layers)) to whether it takes a value.
  type: dict
"""

from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import help_flags


def llama_cpp_help_flags(help_text):
    return help_flags(help_text or "")


class FilterModule(object):
    def filters(self):
        return {"_llama_cpp_help_flags": llama_cpp_help_flags}
