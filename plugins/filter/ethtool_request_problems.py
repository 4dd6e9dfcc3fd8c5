# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ethtool_request_problems filter: the nic_tuning module's own request check
(module_utils/_ethtool.py), for a role's preflight, with the role's variable name in each message."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: ethtool_request_problems
short_description: Check ring or channel sizes before anything changes
version_added: 0.1.0
description:
  - Checks a ring (C(rx), C(rx-mini), C(rx-jumbo), C(tx)) or channel (C(rx), C(tx), C(other),
    C(combined)) request the way M(gpufleet.inference.nic_tuning) does, and returns one message per
    bad key or value, naming O(variable), the key, the value and what is allowed.
  - An empty list when every entry is valid. It needs no NIC; the NIC's maximums are checked by
    M(gpufleet.inference.nic_tuning) in check mode.
options:
  _input:
    description: The request, as the O(kind) option of M(gpufleet.inference.nic_tuning) takes it.
    type: dict
    required: true
  kind:
    description: C(rings) or C(channels).
    type: str
    required: true
  variable:
    description: The role variable the request came from, named in each message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the ring sizes
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('; ') }}"
  vars:
    __problems: "{{ host_tuning_rings | gpufleet.inference.ethtool_request_problems('rings', 'host_tuning_rings') }}"
"""

RETURN = r"""
_value:
  description: One message per bad entry.
  type: list
  elements: str
  sample: ["host_tuning_rings.rx='lots' must be an integer of at least 1 or 'max'"]
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _ethtool


def ethtool_request_problems(request, kind, variable):
    if kind not in _ethtool.KINDS:
        kinds = ", ".join(_ethtool.KINDS)
        raise AnsibleFilterError("ethtool_request_problems: kind must be one of %s, got %r" % (kinds, kind))
    if request is None:
        return []
    if not isinstance(request, dict):
        return ["%s must be a dict of %s, got %r" % (variable, ", ".join(_ethtool.keys(kind)), request)]
    _normalized, problems = _ethtool.normalize_request(kind, request)
    # _ethtool names an entry <kind>.<key>; the operator set <variable>.<key>.
    return [variable + problem[len(kind) :] for problem in problems]


class FilterModule(object):
    def filters(self):
        return {"ethtool_request_problems": ethtool_request_problems}
