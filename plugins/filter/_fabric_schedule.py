# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric_schedule filter: a thin wrapper over module_utils/_fabric.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _fabric_schedule
short_description: Pair hosts into rounds for a fabric bandwidth test
version_added: 0.1.0
description:
  - Returns the rounds of a pairwise bandwidth test. No host is in two pairs of one round, so the
    pairs of a round can run at the same time without sharing a NIC.
  - With O(mode=circle) every unordered pair is tested exactly once (the circle method, as NVIDIA
    ClusterKit does). An even number of hosts N gives N-1 rounds of N/2 pairs; an odd N gives N
    rounds, in each of which one host sits out.
  - With O(mode=ring) each host is tested against its neighbour in the given order, host I(i) with
    host I(i+1), and the last with the first. That is N pairs in 2 rounds (even N) or 3 rounds
    (odd N), for big clusters where all N(N-1)/2 pairs take too long. Two hosts give one round of
    one pair.
  - With O(mode=sequential) every pair of the circle schedule gets a round of its own, the naive
    one-pair-at-a-time test, N(N-1)/2 rounds.
  - Fewer than two hosts give no rounds. The result depends only on the order of the hosts.
  - Fails when the hosts are not a list of distinct, non-empty names, or the mode is unknown.
options:
  _input:
    description: The hosts, usually a group such as C(groups['gpu_nodes']).
    type: list
    elements: str
    required: true
  mode:
    description: C(circle) for all pairs, C(ring) for neighbours only, C(sequential) for all pairs one at a time.
    type: str
    choices: [circle, ring, sequential]
    default: circle
"""

EXAMPLES = r"""
- name: Plan the all-pairs test
  ansible.builtin.set_fact:
    __fabric_rounds: "{{ groups['gpu_nodes'] | gpufleet.inference._fabric_schedule }}"

- name: Plan a neighbour-only test for a big cluster
  ansible.builtin.set_fact:
    __fabric_rounds: "{{ groups['gpu_nodes'] | gpufleet.inference._fabric_schedule(mode='ring') }}"
"""

RETURN = r"""
_value:
  description:
    - The rounds, in order. Each round is a list of pairs, each pair a two-element list
      C([a, b]) of host names.
    - In circle mode C(a) comes before C(b) in the input order.
  type: list
  elements: list
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric import (
    circle_schedule,
    ring_schedule,
    sequential_schedule,
)

SCHEDULES = {"circle": circle_schedule, "ring": ring_schedule, "sequential": sequential_schedule}


def fabric_schedule(hosts, mode="circle"):
    if mode not in SCHEDULES:
        raise AnsibleFilterError("fabric_schedule mode=%r is unknown; use circle, ring or sequential" % (mode,))
    try:
        rounds = SCHEDULES[mode](hosts)
    except ValueError as exc:
        raise AnsibleFilterError("fabric_schedule: %s" % exc) from None
    return [[[a, b] for a, b in pairs] for pairs in rounds]


class FilterModule(object):
    def filters(self):
        return {"_fabric_schedule": fabric_schedule}
