# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _serving_upgrade_outcome filter: a thin wrapper over module_utils/_serving_rollout.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _serving_upgrade_outcome
short_description: Say which replicas of an upgrade batch passed, and why the others are rolled back
version_added: 0.1.0
description:
  - Private to playbooks/upgrade_serving_batch.yml (docs/upgrades.md). Reads the facts the
    batch's plays set on its nodes (C(__serving_upgrade_failed), C(__serving_upgrade_times)) and
    on the load host (C(__serving_upgrade_missed)).
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  nodes:
    description: Replica name -> its hosts by rank.
    type: dict
    required: true
  replicas:
    description: The batch's replicas.
    type: list
    elements: str
    required: true
  load_host:
    description: The host the serving acceptance ran on.
    type: str
    required: true
  rest:
    description: The replicas of the later batches, named by the message as not switched.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Judge the batch
  ansible.builtin.set_fact:
    __outcome: "{{ hostvars | gpufleet.inference._serving_upgrade_outcome(nodes, ['pp'], 'lab-w9') }}"
"""

RETURN = r"""
_value:
  description:
    - C(replicas), replica -> C(upgraded), C(step), C(error), C(node), C(task),
      C(out_of_service_s) (from its drain until now), C(switch_s) (from its drain to its rank 0's
      answer), C(engine_start_s) (from its units' start to its rank 0's answer) and C(acceptance)
      (its entry in the serving acceptance report).
    - C(message), why the rollout stops, naming each replica rolled back; empty when none was.
    - C(revisions), replica -> C(nodes), host -> its record as read after the batch
      (C(__serving_upgrade_now)).
  type: dict
"""

import time

from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_rollout


def serving_upgrade_outcome(hostvars, nodes, replicas, load_host, rest=()):
    return _serving_rollout.outcome(hostvars, dict(nodes), list(replicas), load_host, time.time(), list(rest))


class FilterModule(object):
    def filters(self):
        return {"_serving_upgrade_outcome": serving_upgrade_outcome}
