# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _model_fanout_plan filter: a thin wrapper over module_utils/_model_staging.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _model_fanout_plan
short_description: Plan which model files each vLLM host fetches, and from which peers
version_added: 0.1.0
description:
  - Private to the gpufleet.inference.vllm role. Reads the C(__vllm_node) fact of every host of
    the play and the staging host's C(model_manifest) result, and returns, per host, the files
    it holds (only its pipeline stage's shards when O(stage_only)), its own generated index, the
    bytes and tree digest of its directory, and for each file the peers it fetches it from, its
    chain predecessor first and the staging host last.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The hosts of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  stage_host:
    description: The staging host.
    type: str
    required: true
  manifest:
    description: The staging host's registered C(model_manifest) result.
    type: dict
    required: true
  stage_only:
    description: Whether a pipeline stage's node holds only its stage's files.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Plan this host's part of the fan-out
  ansible.builtin.set_fact:
    __vllm_fanout: >-
      {{ (hostvars | gpufleet.inference._model_fanout_plan(ansible_play_hosts_all, __vllm_stage_host,
          hostvars[__vllm_stage_host].__vllm_manifest))[inventory_hostname] }}
"""

RETURN = r"""
_value:
  description: Host name -> its plan (stage, whole, files, generated, bytes, digest, sources, upstreams).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging


def model_fanout_plan(hostvars, hosts, stage_host, manifest, stage_only=True):
    nodes = []
    counts = {}
    for host in hosts:
        node = hostvars[host].get("__vllm_node")
        if node:
            counts[node["replica"]] = counts.get(node["replica"], 0) + 1
    for host in hosts:
        node = hostvars[host].get("__vllm_node")
        if not node:
            continue
        nodes.append(
            {
                "host": host,
                "address": node["address"],
                "model_path": node["model_path"],
                "pp_size": int(node["pipeline_parallel_size"]),
                "nnodes": counts[node["replica"]],
                "rank": int(node["rank"]),
                "partition": node.get("pp_layer_partition") or "",
            }
        )
    try:
        return _model_staging.host_plans(
            nodes, stage_host, manifest["manifest"], manifest.get("layouts") or [], boolean(stage_only, strict=False)
        )
    except _model_staging.StagingError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"_model_fanout_plan": model_fanout_plan}
