# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd_exec_line filter: a thin wrapper over module_utils/_render.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: systemd_exec_line
short_description: Quote a program and its arguments as one systemd ExecStart= command line
version_added: 0.1.0
description:
  - Every word is double-quoted, with backslash and double quote escaped, C(%) written as C(%%)
    and C($) as C($$), so systemd passes each list item to the program unchanged, as one argument
    (systemd.service(5), "Command lines").
  - Fails, naming O(origin) and the item, for a control character (a newline would start a
    directive of its own) and for a program that is not an absolute path.
options:
  _input:
    description: The absolute path of the program, then its arguments.
    type: list
    elements: str
    required: true
  origin:
    description: What the list is called in the messages, for example the role's variable.
    type: str
    default: ExecStart
"""

EXAMPLES = r"""
- name: Render a unit line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/usr/bin/llama-server', '--alias', 'a b'] | gpufleet.inference.systemd_exec_line }}"
"""

RETURN = r"""
_value:
  description: The quoted command line, without C(ExecStart=).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._render import exec_line


def systemd_exec_line(argv, origin="ExecStart"):
    try:
        return exec_line(list(argv) if isinstance(argv, (list, tuple)) else argv, origin)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule(object):
    def filters(self):
        return {"systemd_exec_line": systemd_exec_line}
