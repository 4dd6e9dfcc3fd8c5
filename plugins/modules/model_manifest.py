#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the manifest of a model directory where it first lands, and the files each pipeline stage loads."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_manifest
short_description: Write a model directory's manifest and plan the files of each pipeline stage
version_added: 0.1.0
description:
  - Reads every file of a Hugging Face model directory once and writes its manifest beside it,
    as C(<path>.manifest.json) by default, with each file's relative path, size and sha256, and the
    tree digest of the directory (the value C(vllm_model_checksum) names, as
    M(gpufleet.inference.vllm_model_info) computes it).
  - A manifest already there is kept when it lists exactly the files and sizes of the directory;
    O(rebuild=true) reads every file again.
  - For each layout in O(layouts) it returns the files every pipeline stage loads, namely the shards
    of C(model.safetensors.index.json) that hold the stage's layers (split as vLLM splits them), the
    tokenizer and config files, and the stage's own index, limited to those shards. vLLM refuses
    a directory whose index names a shard it lacks, so a stage directory needs its own index.
author:
  - gpufleet.inference developers (@gpufleet)
options:
  path:
    description: The model directory, the one holding C(config.json).
    type: path
    required: true
  manifest_path:
    description: Where the manifest is written; empty means C(<path>.manifest.json), outside the directory.
    type: path
    default: ""
  checksum:
    description: The tree digest (C(sha256:<hex>)) the directory must have; empty checks nothing.
    type: str
    default: ""
  rebuild:
    description: Read every file again even when the manifest lists the directory's files and sizes.
    type: bool
    default: false
  layouts:
    description: The pipeline layouts to plan.
    type: list
    elements: dict
    default: []
    suboptions:
      pp_size:
        description: The pipeline-parallel size.
        type: int
        required: true
      partition:
        description: C(VLLM_PP_LAYER_PARTITION), empty for vLLM's own split.
        type: str
        default: ""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode the manifest is computed and returned but not written.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Write the manifest where the model landed, and plan two pipeline stages
  gpufleet.inference.model_manifest:
    path: /var/lib/gpufleet/models/model.source
    checksum: "{{ vllm_model_checksum }}"
    layouts:
      - pp_size: 2
  register: __vllm_manifest
"""

RETURN = r"""
digest:
  description: The tree digest of the directory.
  type: str
  returned: always
  sample: sha256:47c13f3e64edcc41b898645074c1399354427ac2680761f5ba1a6c9801e4d294
manifest:
  description: The manifest (schema C(gpufleet.inference/model-manifest/v1)) with its entries.
  type: dict
  returned: always
manifest_path:
  description: Where the manifest is.
  type: str
  returned: always
layouts:
  description: >-
    For each requested layout, its C(pp_size), C(partition) and C(stages): per stage its
    C(layers), C(files) (path, size, sha256), C(generated) (the stage index's content and sha256),
    C(bytes), C(whole) (true when the stage holds the whole model) and C(reason).
  type: list
  elements: dict
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging, _vllm_model


def _current(manifest_path, files):
    """The manifest at manifest_path when it still describes files (names and sizes), else None."""
    try:
        with open(manifest_path) as handle:
            manifest = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    if _model_staging.problems(manifest):
        return None
    listed = [(entry["path"], entry["size"]) for entry in manifest["entries"]]
    return manifest if sorted(listed) == sorted((rel, size) for rel, _full, size in files) else None


def _read_json(path):
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return json.loads(handle.read().decode("utf-8"))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            manifest_path=dict(type="path", default=""),
            checksum=dict(type="str", default=""),
            rebuild=dict(type="bool", default=False),
            layouts=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(pp_size=dict(type="int", required=True), partition=dict(type="str", default="")),
            ),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"].rstrip("/")
    manifest_path = module.params["manifest_path"] or path + ".manifest.json"
    if not os.path.isdir(path):
        module.fail_json(
            msg="%s is not a directory; the model must have landed there before its manifest is written" % path
        )
    try:
        files = _vllm_model.model_files(path)
        config = _vllm_model.read_model_config(path)
        manifest = None if module.params["rebuild"] else _current(manifest_path, files)
        changed = manifest is None
        if manifest is None:
            manifest = _model_staging.build(path)
        index = _read_json(os.path.join(path, _model_staging.INDEX_NAME))
        layouts = []
        for layout in module.params["layouts"]:
            stages = _model_staging.stages(manifest, index, config, layout["pp_size"], layout["partition"])
            for stage in stages:
                stage["digest"] = _model_staging.stage_digest(stage)
            layouts.append(dict(layout, stages=stages))
    except (_vllm_model.ModelDirError, _model_staging.StagingError) as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError, ValueError) as exc:
        module.fail_json(msg="cannot read the model in %s: %s" % (path, exc))
    checksum = module.params["checksum"]
    if checksum and manifest["digest"] != checksum:
        module.fail_json(
            msg="the model in %s has the tree digest %s, not vllm_model_checksum=%s: the source is not the model the"
            " inventory names; fix the source or the checksum" % (path, manifest["digest"], checksum),
            digest=manifest["digest"],
        )
    if changed and not module.check_mode:
        manifest["source"] = path
        tmp = manifest_path + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(_model_staging.dumps(manifest))
        os.chmod(tmp, 0o644)
        os.replace(tmp, manifest_path)
    module.exit_json(
        changed=changed, digest=manifest["digest"], manifest=manifest, manifest_path=manifest_path, layouts=layouts
    )


if __name__ == "__main__":
    main()
