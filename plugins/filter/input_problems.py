# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input_problems filter: a thin wrapper over module_utils/_render.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: input_problems
short_description: Check role variables by kind, one message per bad value
version_added: 0.1.0
description:
  - Takes a list of C([kind, variable name, value]) or C([kind, variable name, value, options])
    checks and returns one message for each value that fails, naming the variable, the value and
    what is allowed; an empty list when all pass. A URL's password in a value is shown as
    C(********).
  - "Kinds: C(ip) (one IPv4 or IPv6 address), C(port) (a TCP port, 1..65535; options C(min) and
    C(why)), C(file_name) (one path component: no C(/), no control characters, not empty, C(.) or
    C(..)), C(text) (a string or number without control characters), C(int) (a whole number;
    options C(min), C(max), C(why); default 0..2**31-1), C(seconds) (a number above 0; option
    C(max), default a week), C(abs_path) (an absolute path of letters, digits and C(._+@:/-),
    no C(..)), C(user) (a POSIX user name), C(network) (an IP network with its host bits clear,
    or one address), C(url) (option C(schemes), default http and https), C(regex) (a Python
    regular expression)."
  - A preflight asserts that the list is empty, so a bad value fails before anything changes.
options:
  _input:
    description: The checks.
    type: list
    elements: list
    required: true
"""

EXAMPLES = r"""
- name: Check the role variables
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('\n') }}"
  vars:
    __problems: >-
      {{ [['port', 'my_port', my_port], ['ip', 'my_address', my_address],
          ['seconds', 'my_timeout', my_timeout, {'max': 3600}]]
         | gpufleet.inference.input_problems }}
"""

RETURN = r"""
_value:
  description: One message per failing check.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _render


def input_problems(checks):
    try:
        return _render.input_problems(checks)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"input_problems": input_problems}
