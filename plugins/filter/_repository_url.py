# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository_url filter: a thin wrapper over module_utils/_apt_auth.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _repository_url
short_description: Split the credentials off an apt repository URL
version_added: 0.1.0
description:
  - Checks an apt repository URL (no spaces or control characters; http, https or file) and splits
    C(https://login:password@host/path) into the URL without credentials, for the deb822 source,
    and the C(machine)/C(login)/C(password) entry of an C(/etc/apt/auth.conf.d) file
    (apt_auth.conf(5)).
  - Returns the problem as text instead of failing, so a preflight can refuse the value with a
    message that names the variable and shows the URL with its password masked.
  - The result holds the password; set it with C(no_log) and write the auth file with C(no_log)
    and C(diff) off.
options:
  _input:
    description: The URL.
    type: str
    required: true
  origin:
    description: The variable the URL comes from, named in the problem.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Split the credentials off the repository URL
  ansible.builtin.set_fact:
    __my_role_repo: "{{ my_role_repo_url | gpufleet.inference._repository_url('my_role_repo_url') }}"
  no_log: true
"""

RETURN = r"""
_value:
  description: The parts.
  type: dict
  contains:
    url:
      description: The URL without credentials (empty when there is a problem).
      type: str
    shown:
      description: The URL with the password replaced by C(********), for messages.
      type: str
    auth:
      description: C(machine), C(login) and C(password) for apt's auth.conf.d, or null without credentials.
      type: dict
    auth_conf:
      description: The text of the auth.conf.d file, or an empty string without credentials.
      type: str
    problem:
      description: An empty string, or one line naming the variable, the masked URL and the fix.
      type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth


def repository_url(url, origin):
    if not isinstance(origin, str) or not origin:
        raise AnsibleFilterError("repository_url: origin must name the variable, got %r" % (origin,))
    result = _apt_auth.split(url, origin)
    result["auth_conf"] = _apt_auth.auth_conf(result["auth"]) if result["auth"] else ""
    return result


class FilterModule(object):
    def filters(self):
        return {"_repository_url": repository_url}
