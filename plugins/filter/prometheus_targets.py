# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prometheus_targets filter: a thin wrapper over module_utils/_prometheus_targets.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: prometheus_targets
short_description: Build the Prometheus file_sd target lists of the collection's scrape jobs
version_added: 0.1.0
description:
  - Reads the inventory and returns, per scrape job of C(monitoring/prometheus/gpufleet-scrape.yml),
    the list a C(file_sd_configs) JSON file holds, one entry per target with the labels C(node),
    C(replica), C(rank) and C(rack) where they are known.
  - C(gpufleet-health-agent) is every host of C(vllm_nodes), C(llama_coordinator) and
    C(llama_rpc_workers) at C(health_agent_listen_address) (default C(ansible_host)) and
    C(health_agent_port) (default 9105).
  - C(gpufleet-frontdoor-haproxy) and C(gpufleet-frontdoor-controller) are every host of
    C(inference_frontends) at C(frontdoor_stats_address):C(frontdoor_stats_port) (default
    C(ansible_host):8404) and C(frontdoor_controller_metrics_address):C(frontdoor_controller_metrics_port)
    (default C(ansible_host):9106). They carry C(node) and C(rack) only, because the controller's
    samples have a C(replica) label of their own.
  - C(vllm) is rank 0 of each vLLM replica (C(vllm_node_rank) 0) at C(vllm_api_host):C(vllm_api_port)
    (default port 8000); the headless ranks serve no HTTP.
  - A wildcard address (C(0.0.0.0), C(::)) becomes C(ansible_host). A vLLM node of rank 0 without
    C(vllm_api_host), a loopback address, a bad port, or two hosts on one target fail the filter
    with one line per problem, naming the variable, the value and the fix.
  - The replica and rank of a serving node are those the gpufleet.inference.health_agent role reports,
    C(health_agent_replica) and C(health_agent_rank) where the inventory sets them, else C(vllm_replica)
    and C(vllm_node_rank) on vLLM nodes, and replica C(llama) for a llama.cpp coordinator (rank 0) and
    its RPC workers (ranks 1.. in C(llama_rpc_workers) order).
  - "With O(settings), the gpufleet.inference.monitoring role's own variables are checked too, and
    every problem of both fails the filter at once. Durations must be Prometheus durations above
    zero and at most C(5m) (the query lookback delta); C(external_labels) keys must be label names
    not starting with C(__) (reserved by Prometheus); Alertmanagers and static targets must be
    C(host:port) with a port 1..65535; each extra scrape config needs a C(job_name) of its own
    without control characters, and its C(static_configs) must be a list of
    C({targets: [host:port, ...], labels: {name: value}}); C(monitoring_url) must be http or
    https; C(monitoring_verify_timeout) 1..3600 seconds."
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  groups:
    description: C(groups).
    type: dict
    required: true
  settings:
    description:
      - The monitoring role's variables to check, by name (C(monitoring_scrape_interval),
        C(monitoring_evaluation_interval), C(monitoring_external_labels), C(monitoring_alertmanagers),
        C(monitoring_extra_scrape_configs), C(monitoring_url), C(monitoring_verify_timeout)); the
        role's preflight passes them all.
    type: dict
"""

EXAMPLES = r"""
- name: Compute the scrape targets from the inventory
  ansible.builtin.set_fact:
    __monitoring_targets: "{{ hostvars | gpufleet.inference.prometheus_targets(groups) }}"

- name: Check the role's settings as well
  ansible.builtin.set_fact:
    __monitoring_targets: >-
      {{ hostvars | gpufleet.inference.prometheus_targets(groups, settings={'monitoring_scrape_interval': '15s',
         'monitoring_alertmanagers': ['alertmanager.example:9093']}) }}

- name: Write one file_sd file per job
  ansible.builtin.copy:
    content: "{{ item.value | to_nice_json }}\n"
    dest: /etc/prometheus/file_sd/{{ item.key }}.json
    mode: "0644"
  loop: "{{ __monitoring_targets | dict2items }}"
  loop_control:
    label: "{{ item.key }}"
"""

RETURN = r"""
_value:
  description:
    - One key per job (C(gpufleet-health-agent), C(gpufleet-frontdoor-haproxy),
      C(gpufleet-frontdoor-controller), C(vllm)), always present, possibly an empty list.
    - "Each list entry is C({\"targets\": [\"address:port\"], \"labels\": {...}}) with the labels C(node),
      C(replica), C(rank) and C(rack) where known, label values as strings."
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _prometheus_targets


def prometheus_targets(hostvars, groups, settings=None):
    if not isinstance(groups, dict):
        raise AnsibleFilterError("prometheus_targets needs groups (a dict of lists), got %r" % (type(groups).__name__,))
    if settings is not None and not isinstance(settings, dict):
        raise AnsibleFilterError("prometheus_targets: settings must be a dict of variables, got %r" % (settings,))
    # The role's own settings first: they are the operator's, the rest is the inventory's.
    problems = _prometheus_targets.settings_problems(settings) if settings else []
    result, target_problems = _prometheus_targets.inventory_targets(hostvars, groups)
    problems += target_problems
    if problems:
        raise AnsibleFilterError("\n".join(problems))
    return result


class FilterModule(object):
    def filters(self):
        return {"prometheus_targets": prometheus_targets}
