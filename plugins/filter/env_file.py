# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env_file filter: a thin wrapper over module_utils/_render.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: env_file
short_description: Render a systemd EnvironmentFile from a mapping, refusing what would inject
version_added: 0.1.0
description:
  - Returns C(NAME="value") lines sorted by name, quoted for systemd's C(EnvironmentFile=).
  - Refuses names that are not environment variable names, and values with control characters
    (a newline would start a new assignment), naming O(origin), the key and the value; the value
    of a name that holds a credential by convention (C(TOKEN), C(SECRET), C(PASSWORD),
    C(API_KEY), C(ACCESS_KEY), C(AUTH) ... anywhere in it) is never shown.
options:
  _input:
    description: Variable names to values (strings or numbers).
    type: dict
    required: true
  origin:
    description: The role variable the mapping comes from, for messages.
    type: str
    required: true
  part:
    description:
      - C(all) renders every entry; C(public) only the names that do not hold a credential,
        C(secret) only those that do, so a role can write the secret ones to a file that is
        neither logged nor diffed. Every entry is checked whichever part is kept.
    type: str
    choices: [all, public, secret]
    default: all
"""

EXAMPLES = r"""
- name: Write an EnvironmentFile
  ansible.builtin.copy:
    content: "{{ {'VLLM_HOST_IP': '10.0.0.1'} | gpufleet.inference.env_file('vllm_env') }}"
    dest: /etc/gpufleet/vllm/r0/vllm.env
    mode: "0600"
"""

RETURN = r"""
_value:
  description: The file's content.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _render


def env_file(mapping, origin, part="all"):
    try:
        return "\n".join(_render.env_file(mapping, origin, part)) + "\n"
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"env_file": env_file}
