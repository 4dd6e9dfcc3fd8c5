# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _model_stage_layouts filter: the pipeline layouts a staged model is planned for."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _model_stage_layouts
short_description: List the distinct pipeline layouts of the play's vLLM nodes
version_added: 0.1.0
description:
  - Private to the gpufleet.inference.vllm role. Reads the C(__vllm_node) fact of every host of
    the play and returns each distinct pair of pipeline-parallel size and layer partition, as
    gpufleet.inference.model_manifest's O(gpufleet.inference.model_manifest#module:layouts) takes them.
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
"""

EXAMPLES = r"""
- name: Write the manifest and plan the stages of every layout in the play
  gpufleet.inference.model_manifest:
    path: /var/lib/gpufleet/models/model.source
    layouts: "{{ hostvars | gpufleet.inference._model_stage_layouts(ansible_play_hosts_all) }}"
"""

RETURN = r"""
_value:
  description: A list of dicts with C(pp_size) and C(partition).
  type: list
  elements: dict
"""


def model_stage_layouts(hostvars, hosts):
    """The distinct (pp_size, partition) layouts of the play's vLLM nodes, for model_manifest's layouts."""
    seen = []
    for host in hosts:
        node = hostvars[host].get("__vllm_node")
        if node:
            layout = {"pp_size": int(node["pipeline_parallel_size"]), "partition": node.get("pp_layer_partition") or ""}
            if layout not in seen:
                seen.append(layout)
    return seen


class FilterModule:
    def filters(self):
        return {"_model_stage_layouts": model_stage_layouts}
