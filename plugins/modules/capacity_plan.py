#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity plan of a vLLM replica: weights and KV cache per GPU and pipeline stage, computed on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: capacity_plan
short_description: Plan the weights, KV cache and pipeline split of a vLLM replica
version_added: 0.1.0
description:
  - Computes, from a model's C(config.json) fields and a GPU's memory, what every GPU of a
    tensor- and pipeline-parallel vLLM replica holds (the weights of its stage, its KV cache
    budget, the KV tokens and the concurrency at O(max_model_len)) with vLLM's own formulas
    (C(vllm/v1/core/kv_cache_utils.py), C(vllm/v1/kv_cache_interface.py),
    C(vllm/distributed/utils.py)).
  - Chooses the C(VLLM_PP_LAYER_PARTITION) that maximises the KV tokens of the weakest stage,
    which caps the whole replica, and reports vLLM's default split beside it.
  - Fails, before anything is deployed, when the weights or one request of O(max_model_len) do
    not fit on some stage, naming the stage, the shortfall and the fixes, with vLLM's
    "estimated maximum model length".
  - It only computes; it never changes anything. See C(docs/capacity-plan.md) for the formulas
    and their limits.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  model:
    description:
      - A preset name, V(deepseek-v3), V(kimi-k2) or V(kimi-k3-article) (the shape a press article
        gives a model that has no published config), or a dict with the fields of the model's
        C(config.json); C(text_config) of a multimodal model is read as its language model.
      - The dict may add C(total_bytes), the checkpoint's real size (C(metadata.total_size) of
        C(model.safetensors.index.json)), which then scales the computed weights.
    type: raw
    required: true
  quantization:
    description:
      - Weight format of the decoder layers, such as V(fp8), V(int8), V(int4), V(gptq), V(awq),
        V(bf16). Embeddings, norms and the router stay in O(dtype).
      - Default is the model's C(quantization_config), else O(dtype).
    type: str
  weight_bits:
    description: Bits per decoder weight, instead of O(quantization).
    type: int
  gpu:
    description:
      - A preset, V(rtx-5090), V(rtx-4090), V(rtx-3090), V(a100-80gb), V(h100-sxm) or V(h200), or a
        dict with C(memory_mib) or C(memory_bytes), and optionally C(name); memory is C(memory.total)
        as nvidia-smi reports it.
      - Required unless O(kv_cache_memory_bytes) is given.
    type: raw
  platform:
    description: V(cpu) applies vLLM's CPU defaults (block size 128, C(max_num_seqs) 128 per rank).
    type: str
    choices: [cuda, cpu]
    default: cuda
  tensor_parallel_size:
    description: GPUs per pipeline stage; must divide C(num_attention_heads).
    type: int
    default: 1
  pipeline_parallel_size:
    description: Pipeline stages (nodes, usually); at most C(num_hidden_layers).
    type: int
    default: 1
  dtype:
    description: vLLM's C(--dtype); V(auto) keeps the config's dtype but runs float32 models in bfloat16.
    type: str
    default: auto
  gpu_memory_utilization:
    description: Share of each GPU's total memory vLLM may use, in (0, 1].
    type: float
    default: 0.92
  max_model_len:
    description: Longest request in tokens; defaults to the model's C(max_position_embeddings).
    type: int
  max_num_seqs:
    description: vLLM's C(--max-num-seqs); defaults to vLLM's default for the GPU (256, 1024 on 70 GiB and larger).
    type: int
  max_num_batched_tokens:
    description:
      - vLLM's C(--max-num-batched-tokens); defaults to vLLM's API-server default (2048, 8192 on 70 GiB
        and larger but not an A100, 16384 on 160 GiB and larger, 2048 per rank with O(platform=cpu)), at
        most O(max_num_seqs) times O(max_model_len).
      - Only sliding-window and chunked-local layers depend on it. They hold their window plus the
        tokens in flight, this times the batches in flight (O(pipeline_parallel_size) + 1 on CUDA,
        O(pipeline_parallel_size) on CPU).
    type: int
  disable_hybrid_kv_cache_manager:
    description:
      - V(true) when vLLM runs with its hybrid KV cache manager off (C(--disable-hybrid-kv-cache-manager),
        a C(--kv-transfer-config) connector that does not support it, chunked local attention with
        EAGLE speculative decoding, or C(VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0)). Its
        sliding-window and chunked-local layers then take KV cache as full attention does, and every
        layer is in one KV cache group.
      - V(false), vLLM's default, groups the full-attention and local layers of models that mix them
        (Gemma 2 and 3, gpt-oss, Llama 4, C(layer_types) of Llama and Mistral configs), so a block
        holds one page per layer of the largest group only.
    type: bool
    default: false
  kv_cache_dtype:
    description:
      - V(auto) (the O(dtype)), V(bfloat16), V(float16), V(fp8), V(fp8_e4m3), V(fp8_e5m2), V(fp8_inc),
        or V(fp8_ds_mla) (656 bytes per token and layer, MLA models only).
    type: str
    default: auto
  block_size:
    description: Tokens per KV block; defaults to 16 (128 with O(platform=cpu) for models without MLA).
    type: int
  overhead_bytes:
    description:
      - Memory per GPU that is neither weights nor KV cache (activation peak, CUDA context, NCCL
        buffers, CUDA graphs). Default 3 GiB, an assumption; replace it with what vLLM logs on the
        real GPU (total minus weights minus C(Available KV cache memory)).
    type: int
  overhead_mib:
    description: O(overhead_bytes) in MiB.
    type: int
  kv_cache_memory_bytes:
    description:
      - The KV budget per GPU, exactly, like vLLM's C(--kv-cache-memory-bytes) or
        C(VLLM_CPU_KVCACHE_SPACE) on CPU; O(gpu_memory_utilization) and the weights are then not
        subtracted. Required with O(platform=cpu).
    type: int
  pp_layer_partition:
    description: Layers per stage to evaluate instead of the best one, a list or a comma string like V(7,6,6).
    type: raw
  origins:
    description:
      - The caller's names for these options, put into refusals instead of the option names, so that
        a message names the variable the operator sets. Keys are option names, values what the
        caller calls them, for example C(pipeline_parallel_size) to C(vllm_pipeline_parallel_size).
    type: dict
    default: {}
notes:
  - Experts are sharded over the tensor-parallel ranks, as vLLM's MoE layers do without
    C(--enable-expert-parallel). Multi-token-prediction layers are not loaded by vLLM without
    speculative decoding and are not counted.
  - Sliding-window and chunked-local layers are read from C(layer_types), C(sliding_window),
    C(sliding_window_pattern), C(use_sliding_window) and C(max_window_layers), C(attention_chunk_size)
    and C(no_rope_layers) as vLLM 0.32 reads them, and grouped as its hybrid KV cache manager groups
    them. Linear-attention and Mamba layers are not modelled (a C(layer_types) naming them is
    refused).
seealso:
  - module: gpufleet.inference.vllm_model_info
"""

EXAMPLES = r"""
- name: Plan Kimi-K2 over ten nodes of eight RTX 5090
  gpufleet.inference.capacity_plan:
    model: kimi-k2
    quantization: fp8
    gpu: rtx-5090
    tensor_parallel_size: 8
    pipeline_parallel_size: 10
    max_model_len: 32768
  register: __capacity

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ __capacity.table }}"

- name: Read the config.json of the model a node holds
  ansible.builtin.slurp:
    src: /srv/models/Qwen3-32B/config.json
  register: __config

- name: Plan it on two H100 per node
  gpufleet.inference.capacity_plan:
    model: "{{ __config.content | b64decode | from_json }}"
    gpu: {memory_mib: 81559}
    tensor_parallel_size: 2
    max_model_len: 32768

- name: Plan a CPU node with 128 MiB of KV cache
  gpufleet.inference.capacity_plan:
    model: "{{ lookup('ansible.builtin.file', '/srv/models/tiny-llama/config.json') | from_json }}"
    platform: cpu
    dtype: float32
    max_model_len: 512
    kv_cache_memory_bytes: 134217728
"""

RETURN = r"""
fits:
  description:
    - Whether the weights and one request of O(max_model_len) fit on every stage.
    - A plan that does not fit fails, with V(false).
  returned: always
  type: bool
pp_layer_partition:
  description: Layers per stage, the value for C(VLLM_PP_LAYER_PARTITION).
  returned: success
  type: str
  sample: "7,6,6,6,6,6,6,6,6,6"
kv_tokens:
  description:
    - Tokens the KV cache of the replica holds, C(num_blocks * block_size), the weakest stage's.
    - With several KV cache groups, C(num_blocks // groups * block_size), the tokens every group holds
      at once (requests within the sliding window); longer requests hold less in the sliding groups,
      which RV(max_concurrency) counts.
  returned: success
  type: int
  sample: 1855168
max_concurrency:
  description: Requests of O(max_model_len) the KV cache holds at once, as vLLM logs it.
  returned: success
  type: float
  sample: 56.62
effective_concurrency:
  description: The smaller of O(max_num_seqs) and RV(max_concurrency), rounded down.
  returned: success
  type: int
table:
  description: The plan as text, one row per stage, for a debug task.
  returned: success
  type: list
  elements: str
plan:
  description:
    - The whole plan. C(stages) lists, per stage, C(layers), C(first_layer), C(last_layer),
      C(weight_bytes), C(kv_budget_bytes), C(kv_bytes_per_token), C(num_blocks) and C(kv_tokens)
      (all per GPU); C(default_partition) holds vLLM's default split and its figures.
    - C(kv_tokens_reported) is the figure of vLLM's "KV cache size" log line,
      C(int(max_concurrency * max_model_len)).
    - C(kv_cache_groups) lists each kind of attention layer (C(full_attention), C(sliding_attention),
      C(chunked_attention)) with its window, its layers, the KV cache groups vLLM splits them into and
      the blocks one request of O(max_model_len) holds in each; C(kv_layers_per_block) of a stage is
      the layers of its largest group, whose pages one block takes.
    - Returned with a failure too, when the options were valid but the plan does not fit.
  returned: success
  type: dict
  sample:
    pp_layer_partition: "7,6,6,6,6,6,6,6,6,6"
    num_blocks: 115948
    kv_tokens: 1855168
    kv_tokens_reported: 1855168
    max_concurrency: 56.62
    limiting_stage: 0
    kv_bytes_per_token_per_layer: 1152
    estimated_max_model_len: 32768
    default_partition: {pp_layer_partition: "6,6,6,6,6,6,6,6,7,6", kv_tokens: 1634224}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._capacity import (
    CapacityError,
    name_origins,
    plan,
    table,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model=dict(type="raw", required=True),
            quantization=dict(type="str"),
            weight_bits=dict(type="int"),
            gpu=dict(type="raw"),
            platform=dict(type="str", choices=["cuda", "cpu"], default="cuda"),
            tensor_parallel_size=dict(type="int", default=1),
            pipeline_parallel_size=dict(type="int", default=1),
            dtype=dict(type="str", default="auto"),
            gpu_memory_utilization=dict(type="float", default=0.92),
            max_model_len=dict(type="int"),
            max_num_seqs=dict(type="int"),
            kv_cache_dtype=dict(type="str", default="auto"),
            block_size=dict(type="int"),
            overhead_bytes=dict(type="int"),
            overhead_mib=dict(type="int"),
            kv_cache_memory_bytes=dict(type="int"),
            pp_layer_partition=dict(type="raw"),
            max_num_batched_tokens=dict(type="int", no_log=False),
            disable_hybrid_kv_cache_manager=dict(type="bool", default=False),
            origins=dict(type="dict", default={}),
        ),
        mutually_exclusive=[["quantization", "weight_bits"], ["overhead_bytes", "overhead_mib"]],
        supports_check_mode=True,
    )
    params = dict(module.params)
    origins = params.pop("origins")
    try:
        result = plan(**params)
    except CapacityError as exc:
        module.fail_json(msg=name_origins(str(exc), origins), fits=False, **exc.data)
    module.exit_json(
        changed=False,
        fits=result["fits"],
        pp_layer_partition=result["pp_layer_partition"],
        kv_tokens=result["kv_tokens"],
        max_concurrency=result["max_concurrency"],
        effective_concurrency=result["effective_concurrency"],
        table=table(result),
        plan=result,
    )


if __name__ == "__main__":
    main()
