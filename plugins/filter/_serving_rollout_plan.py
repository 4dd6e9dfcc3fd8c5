# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _serving_rollout_plan filter: a thin wrapper over module_utils/_serving_rollout.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _serving_rollout_plan
short_description: Decide which vLLM replicas a rollout switches, in which batches
version_added: 0.1.0
description:
  - Private to playbooks/upgrade_serving.yml (docs/upgrades.md). Reads the front door's status
    and the facts the upgrade's staging play set on every vLLM host (C(__vllm_node),
    C(__vllm_node_changes), C(__serving_upgrade_read), C(__serving_upgrade_target)).
  - A replica whose files the target does not change, and whose nodes agree, is done; a replica
    whose nodes disagree (a switch cut off) goes first; a batch may not leave fewer than
    C(serving_upgrade_min_serving) replicas serving, and the only replica's switch needs
    C(serving_upgrade_allow_outage).
options:
  _input:
    description: The output of C(gpufleet-frontdoor status), parsed.
    type: dict
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The vLLM hosts of the staging play.
    type: list
    elements: str
    required: true
  settings:
    description:
      - C(serving_upgrade_replicas), C(serving_upgrade_batch_size), C(serving_upgrade_min_serving)
        and C(serving_upgrade_allow_outage).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Plan the rollout
  ansible.builtin.set_fact:
    __up: >-
      {{ __frontdoor_status.stdout | from_json
         | gpufleet.inference._serving_rollout_plan(hostvars, groups['vllm_nodes'],
                                                    {'serving_upgrade_batch_size': 1}) }}
"""

RETURN = r"""
_value:
  description:
    - C(batches) (lists of replica names), C(done), C(mixed), C(order), C(nodes) (replica -> its
      hosts by rank), C(members) (each batch's hosts and group), C(revisions) (replica -> C(nodes),
      host -> its record) and C(problems) (why the rollout must not start; empty when it may).
  type: dict
"""

from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_rollout


def serving_rollout_plan(status, hostvars, hosts, settings):
    return _serving_rollout.from_play(status, hostvars, list(hosts), dict(settings))


class FilterModule(object):
    def filters(self):
        return {"_serving_rollout_plan": serving_rollout_plan}
