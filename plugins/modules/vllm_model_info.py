#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only view of a Hugging Face model directory on a host: its tree digest and the shape vLLM will load."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_model_info
short_description: Read the identity and shape of a vLLM model directory
version_added: 0.1.0
description:
  - Reads a Hugging Face model directory, as given to C(vllm serve), and returns its tree digest,
    its size and the fields of its C(config.json) that a pipeline- or tensor-parallel plan needs.
  - The tree digest is the sha256 over the lines C(<sha256>  <relative path>) of every regular
    file, sorted by path, the same value as
    C(cd DIR && find . -type f | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum).
    Nodes that serve one model together must report the same digest.
  - A missing O(path) is reported as RV(exists=false), not as a failure. It never
    changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  path:
    description: The model directory, the one holding C(config.json).
    type: path
    required: true
  digest:
    description:
      - Whether to compute the tree digest. It reads every byte of the model, which takes minutes
        for models of hundreds of gigabytes; set V(false) to read only the config and file sizes.
    type: bool
    default: true
notes:
  - Symbolic links are followed when they point to a file inside O(path). A link that leaves
    O(path), such as those of a Hugging Face cache snapshot into C(../../blobs), fails the module;
    download with C(hf download MODEL --local-dir DIR) or copy with C(cp -rL) instead.
  - The config fields of a multimodal model (those under C(text_config)) are those of its language model.
"""

EXAMPLES = r"""
- name: Read the model directory
  gpufleet.inference.vllm_model_info:
    path: /srv/models/Llama-3.1-8B-Instruct
  register: __vllm_model

- name: Assert that every node holds the same model
  ansible.builtin.assert:
    that: __vllm_model.digest == hostvars[groups['vllm'][0]].__vllm_model.digest

- name: Read a large model without hashing it
  gpufleet.inference.vllm_model_info:
    path: /srv/models/DeepSeek-V3
    digest: false
  register: __vllm_model
"""

RETURN = r"""
exists:
  description: Whether O(path) exists.
  returned: always
  type: bool
digest:
  description: The tree digest, C(sha256:<hex>); null when O(digest=false) or the directory is missing.
  returned: always
  type: str
  sample: sha256:47c13f3e64edcc41b898645074c1399354427ac2680761f5ba1a6c9801e4d294
files:
  description: The number of regular files under O(path).
  returned: always
  type: int
  sample: 6
size_bytes:
  description: Their total size.
  returned: always
  type: int
  sample: 4597526
config:
  description:
    - Fields of C(config.json); empty when the directory is missing.
    - C(num_key_value_heads) and C(head_dim) are filled in as transformers does when the file omits them.
    - C(dtype) is C(dtype), or C(torch_dtype) for configs written by transformers 4.
    - C(quantization) is C(quantization_config.quant_method), null for an unquantised model.
  returned: always
  type: dict
  contains:
    architectures:
      description: Model classes, such as C(LlamaForCausalLM).
      type: list
      elements: str
    model_type:
      description: The transformers model type.
      type: str
    num_hidden_layers:
      description: Decoder layers, the unit of a pipeline-parallel split.
      type: int
    hidden_size:
      description: Width of the hidden state.
      type: int
    num_attention_heads:
      description: Query heads, which tensor parallelism divides.
      type: int
    num_key_value_heads:
      description: Key/value heads.
      type: int
    head_dim:
      description: Width of one attention head.
      type: int
    vocab_size:
      description: Vocabulary size.
      type: int
    max_position_embeddings:
      description: The longest context the model was built for.
      type: int
    dtype:
      description: The dtype the weights were saved in.
      type: str
    quantization:
      description: The quantisation method.
      type: str
    tie_word_embeddings:
      description: Whether the output projection shares the input embedding.
      type: bool
  sample:
    architectures: [LlamaForCausalLM]
    model_type: llama
    num_hidden_layers: 4
    hidden_size: 128
    num_attention_heads: 4
    num_key_value_heads: 2
    head_dim: 32
    vocab_size: 2048
    max_position_embeddings: 512
    dtype: float32
    quantization: null
    tie_word_embeddings: false
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import (
    ModelDirError,
    model_files,
    read_model_config,
    tree_digest,
    tree_size,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            digest=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]

    if not os.path.exists(path):
        module.exit_json(changed=False, exists=False, digest=None, files=0, size_bytes=0, config={})
    if not os.path.isdir(path):
        module.fail_json(msg="%s is not a directory; a vLLM model is a directory holding config.json" % path)

    try:
        config = read_model_config(path)
        files = model_files(path)
        digest = "sha256:" + tree_digest(path, files) if module.params["digest"] else None
    except ModelDirError as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read the model in %s: %s; check its permissions" % (path, exc))
    count, size = tree_size(files)

    module.exit_json(changed=False, exists=True, digest=digest, files=count, size_bytes=size, config=config)


if __name__ == "__main__":
    main()
