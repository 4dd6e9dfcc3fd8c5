# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_kind filter: a thin wrapper over module_utils/_host.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _container_kind
short_description: Tell a container guest from a host or a VM
version_added: 0.1.0
description:
  - Returns the container type (C(docker), C(podman), C(lxc), C(systemd-nspawn), ...) when the
    facts describe a guest that shares its host's kernel, and an empty string on a host or a VM.
  - The one place the collection decides this; roles that must not load a kernel module or write
    host-wide kernel settings inside a container use it.
  - Needs the C(virtual) fact subset.
options:
  _input:
    description: C(ansible_facts).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Record the host kind
  ansible.builtin.set_fact:
    __my_role_container: "{{ ansible_facts | gpufleet.inference._container_kind }}"
"""

RETURN = r"""
_value:
  description: The container type, or an empty string.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _host


def container_kind(facts):
    try:
        return _host.container_kind(facts)
    except TypeError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"_container_kind": container_kind}
