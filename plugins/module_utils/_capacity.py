# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity planner for a vLLM replica: weights and KV cache per GPU, per pipeline stage.

It reproduces vLLM's own accounting (vLLM 0.32, the version the vllm role installs on CPU hosts;
the CUDA 0.33 build shares it), so that the figures it returns are the ones ``vllm serve`` logs:

- Memory per GPU (vllm/v1/worker/utils.py ``request_memory``, vllm/v1/worker/gpu_worker.py
  ``determine_available_memory``): ``ceil(total * gpu_memory_utilization)`` minus the weights of
  the stage minus everything else (activation peak, CUDA context, NCCL buffers, CUDA graphs),
  which vLLM measures and this planner takes as ``overhead_bytes``. With
  ``kv_cache_memory_bytes`` (vLLM's ``--kv-cache-memory-bytes``; ``VLLM_CPU_KVCACHE_SPACE`` GiB on
  CPU, vllm/platforms/cpu.py) the KV budget is exactly that and nothing is subtracted.
- KV bytes per token and layer (vllm/v1/kv_cache_interface.py ``AttentionSpec.page_size_bytes``
  and ``MLAAttentionSpec``; vllm/config/model.py ``get_num_kv_heads``): MLA stores one latent of
  ``kv_lora_rank + qk_rope_head_dim`` per token, not K and V, and every TP rank holds all of it;
  GQA/MHA stores K and V of ``max(1, num_key_value_heads // tp)`` heads of ``head_dim``.
- KV cache groups (vllm/v1/core/kv_cache_utils.py ``get_kv_cache_groups``,
  ``_get_kv_cache_groups_uniform_page_size``): when full-attention layers are mixed with
  sliding-window or chunked-local ones (which layers, per model: ``attention_layers``), the hybrid
  KV cache manager splits each kind into groups of equal size, and a block holds one page per
  layer of the largest group only. With ``--disable-hybrid-kv-cache-manager``
  (``unify_hybrid_kv_cache_specs``) every layer is allocated as full attention: one group.
- Blocks (``get_kv_cache_config_from_groups``, ``get_kv_cache_configs``): ``budget //
  (block_size * bytes_per_token_layer * layers of the stage's largest group)`` per stage (all the
  stage's layers when there is one group), then the minimum over all ranks, so the weakest
  pipeline stage caps the replica.
- Concurrency and the logged size (``get_max_concurrency_for_kv_cache_config``,
  ``get_kv_cache_capacity``): ``num_blocks`` over the blocks one request of max_model_len holds in
  all groups (``ceil(max_model_len / block_size)`` with one group; a sliding window or chunk holds
  only its window and the tokens in flight), and the "KV cache size: N tokens" line is
  ``int(concurrency * max_model_len)``, which is less than ``num_blocks * block_size`` when
  max_model_len is not a multiple of the block size.
- The admission check (``get_kv_cache_configs``, ``_check_enough_kv_cache_memory``): one block is
  held back for the null block, and one request of max_model_len must fit in the rest; otherwise
  vLLM refuses with an "estimated maximum model length".
- Pipeline split (vllm/distributed/utils.py ``get_pp_indices``): ``L // P`` layers per stage, the
  remainder one each to stages -2, -3, ...; VLLM_PP_LAYER_PARTITION overrides it.

Weights are counted from the config.json fields the way vLLM shards them with tensor parallelism
(column/row parallel linears, vocabulary-parallel embedding padded to 64, MoE experts sharded
over TP ranks as vLLM's TP MoE does without expert parallelism). Everything here is pure; Python
3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

MIB = 1 << 20
GIB = 1 << 30
VOCAB_PADDING = 64  # vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
DEFAULT_UTILIZATION = 0.92  # vllm/config/cache.py CacheConfig.gpu_memory_utilization
DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py, when the model is not MLA
DEFAULT_OVERHEAD_BYTES = 3 * GIB  # an assumption; replace it with what vLLM logs on the real GPU
FP8_DS_MLA_TOKEN_BYTES = 656  # vllm/v1/attention/backends/mla/flashmla_sparse.py

# What nvidia-smi reports as memory.total, in MiB. Vendor capacities: RTX 5090 32 GB GDDR7
# (https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5090/), RTX 4090 24 GB
# (https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/), H100 SXM 80 GB and
# H200 141 GB (https://www.nvidia.com/en-us/data-center/h100/, /h200/), A100 80 GB
# (https://www.nvidia.com/en-us/data-center/a100/).
GPU_PRESETS = {
    "rtx-5090": {"name": "NVIDIA GeForce RTX 5090", "memory_mib": 32607},
    "rtx-4090": {"name": "NVIDIA GeForce RTX 4090", "memory_mib": 24564},
    "rtx-3090": {"name": "NVIDIA GeForce RTX 3090", "memory_mib": 24576},
    "a100-80gb": {"name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920},
    "h100-sxm": {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559},
    "h200": {"name": "NVIDIA H200", "memory_mib": 143771},
}
GPU_ALIASES = {"5090": "rtx-5090", "4090": "rtx-4090", "3090": "rtx-3090", "a100": "a100-80gb", "h100": "h100-sxm"}

_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}
_KIMI_K2 = dict(
    _DEEPSEEK_V3,
    model_type="kimi_k2",
    num_attention_heads=64,
    num_key_value_heads=64,
    n_routed_experts=384,
    first_k_dense_replace=1,
    vocab_size=163840,
    max_position_embeddings=131072,
)
# Not a published config: the shape a widely shared article gives "Kimi K3" (56 layers, 896
# experts, 2.8 T parameters, 1.4 TB after GPTQ INT4). The fields it does not give are Kimi-K2's,
# and every layer is taken as MLA although the article speaks of linear attention, so its KV
# figures are an upper bound.
_KIMI_K3_ARTICLE = dict(
    _KIMI_K2,
    model_type="kimi_k3_article",
    num_hidden_layers=56,
    n_routed_experts=896,
    max_position_embeddings=32768,
    quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128},
    total_bytes=1400 * 10**9,
)
MODEL_PRESETS = {"deepseek-v3": _DEEPSEEK_V3, "kimi-k2": _KIMI_K2, "kimi-k3-article": _KIMI_K3_ARTICLE}
MODEL_SOURCES = {
    "deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "kimi-k2": "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
    "kimi-k3-article": "a press article's description; not a published config (see docs/capacity-plan.md)",
}

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
# Nominal bits per weight; quantisation scales add about 3% for 4-bit group-128 and 0.02% for FP8
# with 128x128 blocks. Give model.total_bytes for the checkpoint's exact size.
QUANT_BITS = {
    "fp8": 8,
    "fp8_e4m3": 8,
    "int8": 8,
    "w8a8": 8,
    "int4": 4,
    "gptq": 4,
    "awq": 4,
    "w4a16": 4,
    "nvfp4": 4,
    "mxfp4": 4,
}
OPTION_BITS = dict(QUANT_BITS, bf16=16, bfloat16=16, fp16=16, float16=16, none=16, fp32=32, float32=32)
KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}
EXPERT_FIELDS = ("n_routed_experts", "num_experts", "num_local_experts")
OPTION_DEFAULTS = {
    "gpu": None,
    "quantization": None,
    "weight_bits": None,
    "platform": "cuda",
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "dtype": "auto",
    "gpu_memory_utilization": DEFAULT_UTILIZATION,
    "max_model_len": None,
    "max_num_seqs": None,
    "kv_cache_dtype": "auto",
    "block_size": None,
    "overhead_bytes": None,
    "overhead_mib": None,
    "kv_cache_memory_bytes": None,
    "pp_layer_partition": None,
    "max_num_batched_tokens": None,
    "disable_hybrid_kv_cache_manager": False,
}


class CapacityError(ValueError):
    """A plan that cannot be made or does not fit; ``data`` holds what is known of it."""

    def __init__(self, msg, data=None):
        super().__init__(msg)
        self.data = data or {}


def _refuse(msg, **data):
    raise CapacityError(msg, data)


def name_origins(message, origins):
    """Put the caller's names for the options into a message: ``origins`` maps an option name
    (``pipeline_parallel_size``) to what the caller set (``vllm_pipeline_parallel_size``), so a
    refusal names the variable the operator has to change. Only whole option names are replaced,
    longest first, and never inside a longer identifier or a dotted path."""
    if not origins:
        return message
    names = sorted((str(key) for key in origins), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.])(%s)(?![\w])" % "|".join(re.escape(name) for name in names))
    return pattern.sub(lambda match: str(origins[match.group(1)]), message)


# The largest value each input may have: far above any real model, GPU or server (the largest
# models have under 200 layers, 10M-token contexts and vocabularies under 300k; a GPU has under
# 300 GiB), so that a value past it is a mistake, refused before any computation, and the plan's
# partition search stays far below a second (its cost grows with layers squared).
LIMITS = {
    "model.num_hidden_layers": 512,
    "model.hidden_size": 1 << 20,
    "model.num_attention_heads": 1 << 14,
    "model.num_key_value_heads": 1 << 14,
    "model.head_dim": 1 << 14,
    "model.vocab_size": 1 << 24,
    "model.intermediate_size": 1 << 24,
    "model.moe_intermediate_size": 1 << 24,
    "model.shared_expert_intermediate_size": 1 << 24,
    "model.n_routed_experts": 1 << 16,
    "model.n_shared_experts": 1 << 16,
    "model.first_k_dense_replace": 512,
    "model.moe_layer_freq": 512,
    "model.max_position_embeddings": 1 << 26,
    "model.kv_lora_rank": 1 << 16,
    "model.qk_rope_head_dim": 1 << 14,
    "model.qk_nope_head_dim": 1 << 14,
    "model.v_head_dim": 1 << 14,
    "model.q_lora_rank": 1 << 16,
    "model.total_bytes": 1 << 50,
    "max_model_len": 1 << 26,
    "tensor_parallel_size": 1024,
    "pipeline_parallel_size": 512,
    "gpu.memory_mib": 1 << 21,
    "gpu.memory_bytes": 1 << 41,
    "kv_cache_memory_bytes": 1 << 50,
    "block_size": 4096,
    "overhead_mib": 1 << 21,
    "overhead_bytes": 1 << 41,
    "max_num_seqs": 1 << 20,
    "max_num_batched_tokens": 1 << 26,
    "weight_bits": 32,
    "model.sliding_window": 1 << 26,
    "model.sliding_window_pattern": 512,
    "model.max_window_layers": 1 << 20,
    "model.attention_chunk_size": 1 << 26,
    "model.no_rope_layer_interval": 512,
}


def _positive_int(option, value, minimum=1, fix=""):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _refuse("%s must be an integer >= %d, got %r%s" % (option, minimum, value, fix))
    limit = LIMITS.get(option)
    if limit is not None and value > limit:
        _refuse(
            "%s=%d is larger than any real value (at most %d here); fix it%s"
            % (option, value, limit, fix.replace("; ", ": ", 1) if fix else "")
        )
    return value


def _key(name):
    return str(name).strip().lower().replace(" ", "-").replace("_", "-")


def fmt_gib(value):
    return "%.2f GiB" % (value / GIB)


# ---------------------------------------------------------------------------- inputs


def resolve_gpu(gpu):
    """Return {'name', 'memory_bytes'} for a preset name or a {memory_mib|memory_bytes} dict."""
    if isinstance(gpu, str):
        key = _key(gpu)
        for prefix in ("nvidia-", "geforce-"):
            key = key[len(prefix) :] if key.startswith(prefix) else key
        key = GPU_ALIASES.get(key, key)
        if key not in GPU_PRESETS:
            _refuse(
                "gpu %r is not a known preset; use one of %s or a dict {memory_mib: N} with memory.total from"
                " nvidia-smi" % (gpu, ", ".join(sorted(GPU_PRESETS)))
            )
        preset = GPU_PRESETS[key]
        return {"name": preset["name"], "memory_bytes": preset["memory_mib"] * MIB}
    if not isinstance(gpu, dict):
        _refuse("gpu must be a preset name or a dict {memory_mib: N}, got %s %r" % (type(gpu).__name__, gpu))
    unknown = sorted(set(gpu) - {"name", "memory_mib", "memory_bytes"})
    if unknown or ("memory_mib" in gpu) == ("memory_bytes" in gpu):
        _refuse("gpu must hold exactly one of memory_mib or memory_bytes (and optionally name), got %r" % (gpu,))
    if "memory_mib" in gpu:
        memory = _positive_int("gpu.memory_mib", gpu["memory_mib"], fix="; use memory.total from nvidia-smi") * MIB
    else:
        memory = _positive_int("gpu.memory_bytes", gpu["memory_bytes"])
    return {"name": str(gpu.get("name") or "custom"), "memory_bytes": memory}


def resolve_model(model):
    """Return (name, flat config dict) for a preset name or a config.json dict."""
    if isinstance(model, str):
        key = _key(model)
        if key not in MODEL_PRESETS:
            _refuse(
                "model %r is not a known preset; use one of %s or pass the fields of the model's config.json as a"
                " dict" % (model, ", ".join(sorted(MODEL_PRESETS)))
            )
        return key, dict(MODEL_PRESETS[key])
    if not isinstance(model, dict):
        _refuse("model must be a preset name or a dict of config.json fields, got %s" % type(model).__name__)
    config = dict(model)
    text = config.get("text_config")
    if isinstance(text, dict):  # multimodal: the language model is what gets split
        merged = dict(text)
        merged.update((k, v) for k, v in config.items() if k not in text and k != "text_config")
        config = merged
    return str(config.get("_name_or_path") or config.get("model_type") or "custom"), config


def model_shape(config):
    """Validate and normalise the config.json fields the planner needs."""

    def need(name, minimum=1):
        return _positive_int("model.%s" % name, config.get(name), minimum, "; pass the model's config.json fields")

    def opt(name, default, minimum=0):
        value = config.get(name)
        return default if value is None else _positive_int("model.%s" % name, value, minimum)

    shape = {
        "layers": need("num_hidden_layers"),
        "hidden": need("hidden_size"),
        "heads": need("num_attention_heads"),
        "vocab": need("vocab_size"),
        "max_position_embeddings": opt("max_position_embeddings", None, 1),
    }
    tie = config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        _refuse("model.tie_word_embeddings must be true or false, got %r; pass the model's config.json fields" % (tie,))
    shape["tie"] = tie
    shape["kv_heads"] = opt("num_key_value_heads", shape["heads"], 1)
    if config.get("head_dim") is None and shape["hidden"] < shape["heads"]:
        _refuse(
            "model.hidden_size (%d) is smaller than model.num_attention_heads (%d), so a head has no dimension;"
            " give model.head_dim or fix the config" % (shape["hidden"], shape["heads"])
        )
    shape["head_dim"] = opt("head_dim", shape["hidden"] // shape["heads"], 1)
    shape["mla"] = config.get("kv_lora_rank") is not None
    if shape["mla"]:
        shape["kv_lora_rank"] = need("kv_lora_rank")
        shape["rope_dim"] = need("qk_rope_head_dim")
        shape["nope_dim"] = need("qk_nope_head_dim")
        shape["v_dim"] = need("v_head_dim")
        shape["q_lora_rank"] = opt("q_lora_rank", 0)
    if not shape["mla"] and (shape["kv_heads"] > shape["heads"] or shape["heads"] % shape["kv_heads"]):
        _refuse(
            "model.num_key_value_heads (%d) must divide model.num_attention_heads (%d): every KV head serves the"
            " same number of query heads; pass the model's config.json fields" % (shape["kv_heads"], shape["heads"])
        )
    experts = [config.get(name) for name in EXPERT_FIELDS if config.get(name)]
    shape["experts"] = _positive_int("model.n_routed_experts", experts[0]) if experts else 0
    if shape["experts"]:
        shape["moe_inter"] = opt("moe_intermediate_size", None, 1) or need("intermediate_size")
        shared_size = opt("shared_expert_intermediate_size", 0)
        shape["shared_inter"] = shared_size or opt("n_shared_experts", 0) * shape["moe_inter"]
        shape["first_dense"] = opt("first_k_dense_replace", 0)
        shape["moe_freq"] = opt("moe_layer_freq", 1, 1)
    shape["moe_layers"] = [
        bool(shape["experts"]) and i >= shape["first_dense"] and i % shape["moe_freq"] == 0
        for i in range(shape["layers"])
    ]
    if not all(shape["moe_layers"]):
        shape["inter"] = need("intermediate_size")
    dtype = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        _refuse("model.torch_dtype %r is not one of %s" % (dtype, ", ".join(sorted(DTYPE_BYTES))))
    shape["config_dtype"] = dtype
    total = config.get("total_bytes")
    shape["total_bytes"] = None if total is None else _positive_int("model.total_bytes", total)
    # MLA models have no local-attention layers here: every layer is full attention.
    layers = shape["layers"]
    shape["attention_layers"] = [FULL_LAYER] * layers if shape["mla"] else attention_layers(config, layers)
    return shape


# ---------------------------------------------------------------------------- attention layers

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
LAYER_TYPES = (FULL, SLIDING, CHUNKED)
FULL_LAYER = (FULL, None)
# Which layers vLLM 0.32 builds with a sliding window or chunked local attention, by the text
# model's model_type (vllm/model_executor/models/<file>.py), and the layer_types transformers
# derives when config.json has none (transformers/models/<type>/configuration_<type>.py).
PER_LAYER_TYPES = ("llama", "mistral", "gemma2", "gemma3", "gemma3_text")  # layer_types[i] is read
EVEN_LAYERS_SLIDE = ("gpt_oss",)  # gpt_oss.py: the even layers, whatever layer_types says
CHUNKED_ROPE_LAYERS = ("llama4", "llama4_text")  # llama4.py: the RoPE layers, by no_rope_layers
QWEN2_WINDOWS = ("qwen2", "qwen3")  # qwen2.py Qwen2Model: use_sliding_window, max_window_layers
LLAMA4_CHUNK = 8192  # transformers Llama4TextConfig.attention_chunk_size
LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig.no_rope_layer_interval
GEMMA3_PATTERN = 6  # transformers Gemma3TextConfig: sliding_window_pattern
QWEN2_WINDOW_LAYERS = 28  # transformers Qwen2Config.max_window_layers


def _short(value, size=80):
    text = repr(value)
    return text if len(text) <= size else text[: size - 3] + "..."


def _config_bool(name, value):
    if not isinstance(value, bool):
        _refuse("model.%s must be true or false, got %s; pass the model's config.json fields" % (name, _short(value)))
    return value


def _layer_types(config, layers):
    """config.json's layer_types, checked: one known attention type per layer; None when absent."""
    value = config.get("layer_types")
    if value is None:
        return None
    if not isinstance(value, list):
        _refuse(
            "model.layer_types must be a list with one attention type per layer, got %s %s; pass the model's"
            " config.json fields" % (type(value).__name__, _short(value))
        )
    if len(value) != layers:
        _refuse(
            "model.layer_types has %d entries, but model.num_hidden_layers is %d; give one attention type per"
            " layer (fix the config)" % (len(value), layers)
        )
    for index, kind in enumerate(value):
        if not isinstance(kind, str) or kind not in LAYER_TYPES:
            _refuse(
                "model.layer_types[%d] is %s, not one of %s; the planner does not model linear-attention or"
                " Mamba layers: leave model.layer_types out to plan every layer as full attention, which"
                " overstates their KV cache" % (index, _short(kind), ", ".join(LAYER_TYPES))
            )
    return value


def _derived_layer_types(config, layers, model_type, window):
    """The layer_types transformers derives for a config.json without them, for the models here."""
    if model_type in ("gemma2", *EVEN_LAYERS_SLIDE):
        return [SLIDING if (i + 1) % 2 else FULL for i in range(layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = config.get("sliding_window_pattern")
        if pattern is not None:
            fix = "; every Nth layer is full attention (6 in Gemma 3)"
            pattern = _positive_int("model.sliding_window_pattern", pattern, 1, fix)
        pattern = pattern or GEMMA3_PATTERN
        return [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]
    if model_type in QWEN2_WINDOWS:
        first = _qwen2_window_layers(config)
        return [SLIDING if window and i >= first else FULL for i in range(layers)]
    if model_type in CHUNKED_ROPE_LAYERS:
        return [CHUNKED if rope else FULL for rope in _rope_layers(config, layers)]
    return None


def _qwen2_window_layers(config):
    value = config.get("max_window_layers")
    if value is None:
        return QWEN2_WINDOW_LAYERS
    return _positive_int("model.max_window_layers", value, 0, "; layers from this index on use the sliding window")


def _rope_layers(config, layers):
    """Llama 4's no_rope_layers (1: RoPE, 0: NoPE), or transformers' default: NoPE every 4th layer."""
    value = config.get("no_rope_layers")
    if not value:  # transformers also reads an empty list as "derive it"
        interval = config.get("no_rope_layer_interval")
        if interval is not None:
            interval = _positive_int("model.no_rope_layer_interval", interval, 1, "; a NoPE layer every N layers")
        interval = interval or LLAMA4_NOPE_INTERVAL
        return [int((i + 1) % interval != 0) for i in range(layers)]
    flags = value if isinstance(value, list) else [None]
    if len(flags) != layers or any(
        isinstance(flag, bool) or not isinstance(flag, int) or flag not in (0, 1) for flag in flags
    ):
        _refuse(
            "model.no_rope_layers must give 1 (RoPE) or 0 (NoPE) for each of the %d layers, got %s; pass the"
            " model's config.json fields" % (layers, _short(value))
        )
    return value


def attention_layers(config, layers):
    """Each decoder layer's KV cache as vLLM 0.32 builds it: (full_attention, None),
    (sliding_attention, window) or (chunked_attention, chunk size)."""
    model_type = str(config.get("model_type") or "")
    window = config.get("sliding_window")
    if window is not None:
        # vllm/config/model.py reads a window of 0 as no sliding window.
        window = _positive_int("model.sliding_window", window, 0, "; give it in tokens, or null for none") or None
    if model_type in QWEN2_WINDOWS and not _config_bool("use_sliding_window", config.get("use_sliding_window", False)):
        window = None  # transformers' Qwen2Config keeps the window only with use_sliding_window
    given = _layer_types(config, layers)
    types = given if given is not None else _derived_layer_types(config, layers, model_type, window)
    if model_type in EVEN_LAYERS_SLIDE:
        kinds = [(SLIDING, window) if window and i % 2 == 0 else FULL_LAYER for i in range(layers)]
    elif model_type in CHUNKED_ROPE_LAYERS:
        chunk = config.get("attention_chunk_size", LLAMA4_CHUNK)
        if chunk is not None:
            chunk = _positive_int("model.attention_chunk_size", chunk, 0, "; give it in tokens, or null for none")
        kinds = [(CHUNKED, chunk) if chunk and rope else FULL_LAYER for rope in _rope_layers(config, layers)]
    elif model_type in PER_LAYER_TYPES and types is not None:
        kinds = [(SLIDING, window) if window and kind == SLIDING else FULL_LAYER for kind in types]
    else:
        kinds = [FULL_LAYER] * layers
    if model_type in QWEN2_WINDOWS and types is not None and len(set(types)) > 1:
        first = _qwen2_window_layers(config)
        if first != layers:
            _refuse(
                "model.max_window_layers is %d of %d layers with model.use_sliding_window true, so only some layers"
                " slide, which vLLM's Qwen2 model refuses to load; set use_sliding_window false, as the published"
                " configs do" % (first, layers)
            )
    # vllm/engine/arg_utils.py: without layer_types, or with every layer sliding, the model's window is
    # CacheConfig.sliding_window, which every layer without a window of its own takes.
    if window and (types is None or all(kind == SLIDING for kind in types)):
        kinds = [(SLIDING, window)] * layers
    return kinds


# ---------------------------------------------------------------------------- KV cache groups


def kv_cache_groups(kinds, disable_hybrid=False):
    """vLLM's KV cache groups (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups): a list of
    {attention, window, layers: [indices], groups} and the layers per group.

    Layers of one kind (and window) share a spec. With a single spec every layer is one group. With
    several, _get_kv_cache_groups_uniform_page_size splits each kind round robin (layers[i::n])
    into groups of group_size layers, the fewest layers of any kind, or the most when that is
    under 1.5 times the fewest; the last group of a kind may be short (padding). With
    --disable-hybrid-kv-cache-manager, unify_hybrid_kv_cache_specs allocates sliding-window and
    chunked layers as full attention when the model also has full-attention layers.
    """
    specs = {}
    for index, kind in enumerate(kinds):
        specs.setdefault(kind, []).append(index)
    if disable_hybrid and len(specs) > 1:
        if FULL_LAYER not in specs:
            _refuse(
                "disable_hybrid_kv_cache_manager is true, but the model mixes %s layers and no full-attention"
                " layer, which vLLM cannot allocate as one kind; leave the hybrid KV cache manager on"
                % " and ".join("%s %d" % kind for kind in specs)
            )
        specs = {FULL_LAYER: list(range(len(kinds)))}
    sizes = [len(indices) for indices in specs.values()]
    size = min(sizes) if max(sizes) >= 1.5 * min(sizes) else max(sizes)
    buckets = [
        {"attention": kind[0], "window": kind[1], "layers": indices, "groups": -(-len(indices) // size)}
        for kind, indices in specs.items()
    ]
    return buckets, size


class KVLayout:
    """The KV cache groups of a model, and what they cost a stage and a request."""

    def __init__(self, buckets, group_size, layers, block_size, in_flight):
        self.buckets, self.group_size = buckets, group_size
        self.groups = sum(bucket["groups"] for bucket in buckets)
        self.block_size, self.in_flight = block_size, in_flight
        self._prefixes = []
        for bucket in buckets:
            prefix, members = [0], set(bucket["layers"])
            for index in range(layers):
                prefix.append(prefix[-1] + (index in members))
            self._prefixes.append((prefix, bucket["groups"]))
        if self.groups == 1:  # one group of every layer: the stage's layers
            self.width = lambda begin, end: end - begin

    def width(self, begin, end):
        """Layers of the largest group among layers [begin, end): the pages one block takes on that stage.

        A kind's layers of a stage are a contiguous run of its list, dealt round robin to its groups,
        so its largest group there holds ceil(run / groups) of them
        (kv_cache_utils.py _project_kv_cache_groups_to_worker, _get_kv_cache_bytes_per_block)."""
        return max(-(-(prefix[end] - prefix[begin]) // groups) for prefix, groups in self._prefixes)

    def request_blocks(self, length):
        """Blocks one request of ``length`` tokens holds, over all groups
        (kv_cache_utils.py get_max_concurrency_for_kv_cache_config; kv_cache_interface.py
        max_memory_usage_bytes of FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec)."""
        return sum(bucket["groups"] * self._blocks(bucket, length) for bucket in self.buckets)

    def _blocks(self, bucket, length):
        block_size, window = self.block_size, bucket["window"]
        if bucket["attention"] == SLIDING:
            # The window's tokens plus those in flight; +1 as the window may start mid-block.
            return -(-min(window - 1 + self.in_flight, length) // block_size) + 1
        if bucket["attention"] == CHUNKED:
            return -(-min(window + self.in_flight, length) // block_size)
        return -(-length // block_size)

    def longest_request(self, usable_blocks, length):
        """The longest request up to ``length`` whose blocks fit in ``usable_blocks``; 0 if none
        (kv_cache_utils.py _estimate_max_model_len_from_groups)."""

        def fits(tokens):
            return self.request_blocks(tokens) <= usable_blocks

        return _largest(1, length, fits) if fits(1) else 0

    def describe(self, max_model_len):
        return [
            {
                "attention": bucket["attention"],
                "window": bucket["window"],
                "layers": len(bucket["layers"]),
                "groups": bucket["groups"],
                "blocks_per_request": self._blocks(bucket, max_model_len),
            }
            for bucket in self.buckets
        ]


def decoder_bits(config, quantization=None, bits=None):
    """Bits per decoder weight: weight_bits, the quantization option, or the config's quantization_config."""
    if bits is not None:
        return _positive_int("weight_bits", bits, fix="; use 16 for bf16, 8 for fp8/int8, 4 for int4")
    if quantization is not None:
        key = str(quantization).strip().lower().replace("-", "_")
        if key not in OPTION_BITS:
            _refuse(
                "quantization %r is not known; use one of %s, or give weight_bits"
                % (quantization, ", ".join(sorted(OPTION_BITS)))
            )
        return OPTION_BITS[key]
    qcfg = config.get("quantization_config") or {}
    if not isinstance(qcfg, dict):
        _refuse("model.quantization_config must be a mapping, as in config.json, got %r" % (qcfg,))
    method = str(qcfg.get("quant_method", "")).lower()
    if not method:
        return None
    found = qcfg.get("bits")
    groups = qcfg.get("config_groups") or {}
    if not isinstance(groups, dict) or not all(isinstance(group or {}, dict) for group in groups.values()):
        _refuse("model.quantization_config.config_groups must map group names to mappings, got %r" % (groups,))
    for group in groups.values():  # compressed-tensors
        weights = (group or {}).get("weights") or {}
        found = found or (weights.get("num_bits") if isinstance(weights, dict) else None)
    found = found or QUANT_BITS.get(method)
    if not found:
        _refuse(
            "model.quantization_config.quant_method %r is not known to the planner; give quantization or weight_bits"
            % method
        )
    if isinstance(found, bool) or not isinstance(found, int) or not 1 <= found <= 32:
        _refuse(
            "model.quantization_config gives %r bits per weight; it must be an integer from 1 to 32, or give"
            " weight_bits" % (found,)
        )
    return found


def resolve_dtype(dtype, config_dtype):
    """vLLM's --dtype: auto keeps the config's dtype, but float32 runs as bfloat16.

    vllm/config/model.py _resolve_auto_dtype downcasts float32 to the platform's first supported dtype.
    """
    key = _key(dtype or "auto")
    if key == "auto":
        return "bfloat16" if DTYPE_BYTES[config_dtype] == 4 else config_dtype
    if key not in DTYPE_BYTES:
        _refuse("dtype %r is not one of auto, %s" % (dtype, ", ".join(sorted(DTYPE_BYTES))))
    return key


def kv_bytes_per_token_layer(shape, tp, kv_cache_dtype, run_dtype):
    """KV cache bytes one token takes in one layer on one GPU."""
    key = (kv_cache_dtype or "auto").strip().lower()
    if key == "fp8_ds_mla":
        if not shape["mla"]:
            _refuse("kv_cache_dtype fp8_ds_mla is only for MLA models (those with kv_lora_rank); use fp8")
        return FP8_DS_MLA_TOKEN_BYTES
    if key == "auto":
        size = DTYPE_BYTES[run_dtype]
    elif key in KV_DTYPE_BYTES:
        size = KV_DTYPE_BYTES[key]
    else:
        _refuse(
            "kv_cache_dtype %r is not one of auto, %s, fp8_ds_mla" % (kv_cache_dtype, ", ".join(sorted(KV_DTYPE_BYTES)))
        )
    if shape["mla"]:
        return (shape["kv_lora_rank"] + shape["rope_dim"]) * size
    return 2 * max(1, shape["kv_heads"] // tp) * shape["head_dim"] * size


# ---------------------------------------------------------------------------- weights


def _layer_bits(shape, tp, moe, qbits, dbits):
    """Bits of one decoder layer on one TP rank."""
    h = shape["hidden"]
    heads = shape["heads"] // tp
    if shape["mla"]:
        qk = shape["nope_dim"] + shape["rope_dim"]
        replicated = h * (shape["kv_lora_rank"] + shape["rope_dim"])  # kv_a_proj_with_mqa: ReplicatedLinear
        if shape["q_lora_rank"]:
            replicated += h * shape["q_lora_rank"]
            sharded = shape["q_lora_rank"] * heads * qk
        else:
            sharded = h * heads * qk
        sharded += shape["kv_lora_rank"] * heads * (shape["nope_dim"] + shape["v_dim"]) + heads * shape["v_dim"] * h
        attn = replicated + sharded
        norms = shape["kv_lora_rank"] + shape["q_lora_rank"]
    else:
        kv = max(1, shape["kv_heads"] // tp)  # QKVParallelLinear replicates KV heads when tp > kv heads
        attn = h * heads * shape["head_dim"] * 2 + 2 * h * kv * shape["head_dim"]
        norms = 0
    if moe:
        mlp = (shape["experts"] * 3 * h * shape["moe_inter"] + 3 * h * shape["shared_inter"]) // tp
        router = h * shape["experts"]
    else:
        mlp = 3 * h * shape["inter"] // tp
        router = 0
    return (attn + mlp) * qbits + (router + norms + 2 * h) * dbits


def weight_layout(shape, tp, pp, qbits, dbits):
    """Per-TP-rank bytes: ([bytes per layer], embedding, lm_head + final norm, scale applied).

    With tied embeddings the last stage still builds its own copy of the embedding when it is not
    also the first stage (vllm/model_executor/models/llama.py LlamaModel and LlamaForCausalLM).
    """
    vocab_rows = -(-(-(-shape["vocab"] // VOCAB_PADDING) * VOCAB_PADDING) // tp)
    embed_bits = vocab_rows * shape["hidden"] * dbits
    head_bits = (0 if shape["tie"] and pp == 1 else embed_bits) + shape["hidden"] * dbits
    layers = [_layer_bits(shape, tp, moe, qbits, dbits) for moe in shape["moe_layers"]]
    scale = 1.0
    if shape["total_bytes"]:
        full = [_layer_bits(shape, 1, moe, qbits, dbits) for moe in shape["moe_layers"]]
        full_embed = -(-shape["vocab"] // VOCAB_PADDING) * VOCAB_PADDING * shape["hidden"] * dbits
        computed = (sum(full) + full_embed * (1 if shape["tie"] else 2) + shape["hidden"] * dbits) / 8.0
        scale = shape["total_bytes"] / computed

    def to_bytes(bits):
        return math.ceil(bits * scale / 8.0)

    return [to_bytes(b) for b in layers], to_bytes(embed_bits), to_bytes(head_bits), scale


def total_params(shape):
    h = shape["hidden"]
    return sum(_layer_bits(shape, 1, moe, 1, 1) for moe in shape["moe_layers"]) + shape["vocab"] * h * (
        1 if shape["tie"] else 2
    )


# ---------------------------------------------------------------------------- partitions


def default_partition(layers, pp):
    """vLLM's split when VLLM_PP_LAYER_PARTITION is unset (vllm/distributed/utils.py get_pp_indices)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def parse_partition(value, layers, pp):
    if isinstance(value, str):
        try:
            parts = [int(item) for item in value.split(",")]
        except ValueError:
            _refuse("pp_layer_partition %r is not a comma-separated list of integers, like '7,6,6'" % value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        parts = list(value)
    else:
        _refuse("pp_layer_partition must be a list of integers or a comma-separated string, got %r" % (value,))
    if len(parts) != pp:
        _refuse("pp_layer_partition %r has %d entries; it needs one per pipeline stage (%d)" % (value, len(parts), pp))
    if sum(parts) != layers:
        _refuse("pp_layer_partition %r sums to %d; it must sum to num_hidden_layers (%d)" % (value, sum(parts), layers))
    if min(parts) < 1:
        _refuse("pp_layer_partition %r has a stage without layers; every stage needs at least one" % (value,))
    return parts


class _Evaluator:
    """Blocks of a stage covering layers [begin, end), from prefix sums of the layer bytes.

    A block takes one page per layer of the stage's largest KV cache group (``kv.width``): every
    layer of the stage when all are full attention (``kv`` None)."""

    def __init__(self, layout, pp, budget, block_size, token_layer, kv=None):
        layer_bytes, self.embed, self.head, self.scale = layout
        self.prefix = [0]
        for size in layer_bytes:
            self.prefix.append(self.prefix[-1] + size)
        self.pp, self.budget = pp, budget
        self.block_size, self.page_layer = block_size, block_size * token_layer
        if kv is None:
            layers = len(layer_bytes)
            kv = KVLayout(*kv_cache_groups([FULL_LAYER] * layers), layers, block_size, 0)
        self.kv, self.width = kv, kv.width

    def weights(self, stage, begin, end):
        extra = (self.embed if stage == 0 else 0) + (self.head if stage == self.pp - 1 else 0)
        return self.prefix[end] - self.prefix[begin] + extra

    def kv_budget(self, stage, begin, end):
        return self.budget(self.weights(stage, begin, end))

    def blocks(self, stage, begin, end):
        return self.kv_budget(stage, begin, end) // (self.page_layer * self.width(begin, end))


def _greedy_reach(ev, layers, stages, target, widest):
    """Where stages 0..stages-1 end when each is taken as long as it can be (at most ``widest``
    layers, at least ``target`` blocks, one layer left for every later stage of the pipeline), or
    None when a stage cannot hold even one layer. A stage's blocks only fall as it takes more
    layers, so no partition's first stages reach further: this decides whether a partition
    exists in O(layers)."""
    begin = 0
    for stage in range(stages):
        end = begin
        last = min(layers - (ev.pp - 1 - stage), begin + widest)
        while end < last and ev.blocks(stage, begin, end + 1) >= target:
            end += 1
        if end == begin:
            return None
        begin = end
    return begin


def _fits(ev, layers, pp, target, widest):
    begin = _greedy_reach(ev, layers, pp - 1, target, widest)
    return begin is not None and layers - begin <= widest and ev.blocks(pp - 1, begin, layers) >= target


def _largest(low, high, ok):
    """The largest value in [low, high] for which ok holds, given ok(low) and ok monotone."""
    while low < high:
        middle = (low + high + 1) // 2
        if ok(middle):
            low = middle
        else:
            high = middle - 1
    return low


def best_partition(ev, layers, pp):
    """Maximise the least blocks over stages; among those, the fewest layers on the busiest stage.

    The best least-blocks and then the smallest busiest stage are found by bisection over a
    greedy check (_fits), O(layers log) each; the partition itself by the dynamic programme over
    stage lengths of at most that busiest stage, so O(pp x layers x widest) with widest about
    layers / pp: far below a second for any real model, where the programme over every length
    took minutes for thousands of layers."""
    default = default_partition(layers, pp)
    low = min(row["num_blocks"] for row in _stages(ev, default))
    if not _fits(ev, layers, pp, 0, layers):
        # No split leaves every stage room for KV (a negative budget breaks the order the search
        # needs): vLLM's own split, which the weights check then refuses with its figures.
        return default, low, max(default)
    # vLLM's own split is a partition, so its least blocks is a lower bound.
    low = max(low, 0)
    # No stage of one layer or more has more blocks than its budget with no layer's weights.
    high = max(low, max(ev.kv_budget(stage, 0, 0) for stage in (0, min(1, pp - 1), pp - 1)) // ev.page_layer)
    target = _largest(low, high, lambda blocks: _fits(ev, layers, pp, blocks, layers))
    # The smallest busiest stage that still reaches target: the largest number of layers to spare.
    spare = _largest(0, layers - -(-layers // pp), lambda spare: _fits(ev, layers, pp, target, layers - spare))
    widest = layers - spare
    # Every stage reaches target with at most widest layers: the same choice as the programme
    # over every length made (larger earlier stages first on ties), over the lengths that can win.
    inf = float("inf")
    cost = [[inf] * (layers + 1) for stage in range(pp)]
    back = [[0] * (layers + 1) for stage in range(pp)]
    for end in range(1, min(layers - pp + 1, widest) + 1):
        if ev.blocks(0, 0, end) >= target:
            cost[0][end] = end
    for stage in range(1, pp):
        for end in range(stage + 1, layers - pp + stage + 2):
            for b in range(end - 1, max(stage, end - widest) - 1, -1):  # larger earlier stages first on ties
                if cost[stage - 1][b] < inf and ev.blocks(stage, b, end) >= target:
                    value = max(cost[stage - 1][b], end - b)
                    if value < cost[stage][end]:
                        cost[stage][end], back[stage][end] = value, b
    parts, end = [], layers
    for stage in range(pp - 1, 0, -1):
        begin = back[stage][end]
        parts.append(end - begin)
        end = begin
    parts.append(end)
    return parts[::-1], target, cost[pp - 1][layers]


def min_pipeline_size(ev_for, layers, pp, need):
    """The least pipeline size > pp at which every stage fits its weights and ``need(begin, end)`` bytes of KV."""
    for size in range(pp + 1, layers + 1):
        ev = ev_for(size)
        begin, ok = 0, True
        for stage in range(size - 1):
            end = begin
            while end < layers - (size - 1 - stage) and ev.kv_budget(stage, begin, end + 1) >= need(begin, end + 1):
                end += 1
            if end == begin:
                ok = False
                break
            begin = end
        if ok and ev.kv_budget(size - 1, begin, layers) >= need(begin, layers):
            return size
    return None


# ---------------------------------------------------------------------------- plan


def _stages(ev, parts):
    rows, begin = [], 0
    for stage, count in enumerate(parts):
        end = begin + count
        budget = ev.kv_budget(stage, begin, end)
        width = ev.width(begin, end)
        blocks = budget // (ev.page_layer * width)
        rows.append(
            {
                "stage": stage,
                "layers": count,
                "first_layer": begin,
                "last_layer": end - 1,
                "weight_bytes": ev.weights(stage, begin, end),
                "kv_budget_bytes": budget,
                "kv_layers_per_block": width,
                "kv_bytes_per_token": ev.page_layer // ev.block_size * width,
                "num_blocks": blocks,
                "kv_tokens": max(0, blocks) // ev.kv.groups * ev.block_size,
            }
        )
        begin = end
    return rows


def _summary(ev, parts, max_model_len, block_size):
    stages = _stages(ev, parts)
    blocks = max(0, min(row["num_blocks"] for row in stages))
    concurrency = blocks / ev.kv.request_blocks(max_model_len)
    return {
        "pp_layer_partition": ",".join(str(p) for p in parts),
        "stages": stages,
        "limiting_stage": min(stages, key=lambda row: row["num_blocks"])["stage"],
        "num_blocks": blocks,
        # Every group holds a request's tokens up to its window, so the pool holds this many
        # tokens in every group at once: num_blocks * block_size with one group.
        "kv_tokens": blocks // ev.kv.groups * block_size,
        "kv_tokens_reported": int(concurrency * max_model_len),
        "max_concurrency": concurrency,
    }


def _check_parallelism(shape, tp, pp):
    if shape["heads"] % tp:
        divisors = [d for d in range(1, min(shape["heads"], 64) + 1) if shape["heads"] % d == 0]
        _refuse(
            "tensor_parallel_size %d does not divide num_attention_heads (%d), which vLLM requires; use one of %s"
            % (tp, shape["heads"], ", ".join(map(str, divisors)))
        )
    if not shape["mla"] and shape["kv_heads"] % tp and tp % shape["kv_heads"]:
        _refuse(
            "tensor_parallel_size %d and num_key_value_heads (%d) must divide one another, as vLLM's"
            " QKVParallelLinear requires" % (tp, shape["kv_heads"])
        )
    if pp > shape["layers"]:
        _refuse(
            "pipeline_parallel_size %d is larger than num_hidden_layers (%d); every stage needs a layer"
            % (pp, shape["layers"])
        )


def _check_length(shape, max_model_len):
    longest = shape["max_position_embeddings"]
    if max_model_len is None:
        if longest is None:
            _refuse("max_model_len is required: the model gives no max_position_embeddings")
        return longest
    _positive_int("max_model_len", max_model_len)
    if longest and max_model_len > longest:
        _refuse(
            "max_model_len %d is longer than the model's max_position_embeddings (%d); vLLM refuses it, use at most %d"
            % (max_model_len, longest, longest)
        )
    return max_model_len


def _settings(shape, options):
    """Validate the options that do not depend on the weights; return them resolved."""
    opts = dict(options)
    tp = _positive_int("tensor_parallel_size", opts["tensor_parallel_size"])
    pp = _positive_int("pipeline_parallel_size", opts["pipeline_parallel_size"])
    platform = opts["platform"]
    if platform not in ("cuda", "cpu"):
        _refuse("platform must be cuda or cpu, got %r" % (platform,))
    _check_parallelism(shape, tp, pp)
    util = opts["gpu_memory_utilization"]
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        _refuse("gpu_memory_utilization must be in (0, 1], got %r; vLLM's default is 0.92" % (util,))
    opts["max_model_len"] = _check_length(shape, opts["max_model_len"])
    kv_bytes = opts["kv_cache_memory_bytes"]
    if kv_bytes is not None:
        _positive_int("kv_cache_memory_bytes", kv_bytes)
    gpu_info = None if opts["gpu"] is None else resolve_gpu(opts["gpu"])
    if gpu_info is None and kv_bytes is None:
        _refuse("gpu is required unless kv_cache_memory_bytes is given (the KV budget then is exactly that)")
    if platform == "cpu" and kv_bytes is None:
        _refuse("platform=cpu needs kv_cache_memory_bytes (VLLM_CPU_KVCACHE_SPACE GiB, or --kv-cache-memory-bytes)")
    block_size = opts["block_size"]
    if block_size is None:
        block_size = CPU_BLOCK_SIZE if platform == "cpu" and not shape["mla"] else DEFAULT_BLOCK_SIZE
    _positive_int("block_size", block_size)
    if platform == "cpu" and shape["mla"]:
        block_size = DEFAULT_BLOCK_SIZE  # vllm/platforms/cpu.py forces 16 for the CPU MLA kernel
    if opts["quantization"] is not None and opts["weight_bits"] is not None:
        _refuse("quantization and weight_bits are mutually exclusive; give one")
    overhead = opts["overhead_bytes"]
    if opts["overhead_mib"] is not None:
        if overhead is not None:
            _refuse("overhead_bytes and overhead_mib are mutually exclusive; give one")
        overhead = _positive_int("overhead_mib", opts["overhead_mib"], 0) * MIB
    overhead = DEFAULT_OVERHEAD_BYTES if overhead is None else _positive_int("overhead_bytes", overhead, 0)
    if opts["max_num_seqs"] is None:
        opts["max_num_seqs"] = default_max_num_seqs(platform, gpu_info, tp * pp)
    _positive_int("max_num_seqs", opts["max_num_seqs"])
    if opts["max_num_batched_tokens"] is None:
        opts["max_num_batched_tokens"] = default_max_num_batched_tokens(
            platform, gpu_info, tp * pp, opts["max_num_seqs"], opts["max_model_len"]
        )
    _positive_int("max_num_batched_tokens", opts["max_num_batched_tokens"])
    if not isinstance(opts["disable_hybrid_kv_cache_manager"], bool):
        _refuse(
            "disable_hybrid_kv_cache_manager must be true or false, got %s; true when vLLM runs with"
            " --disable-hybrid-kv-cache-manager" % _short(opts["disable_hybrid_kv_cache_manager"])
        )
    # vllm/config/vllm.py max_in_flight_tokens: max_concurrent_batches x max_num_batched_tokens. By
    # default vLLM schedules asynchronously with the V2 model runner on CUDA (pp + 1 batches); on
    # CPU it never does (vllm/platforms/cpu.py), so pp batches.
    batches = pp + 1 if platform == "cuda" else pp
    opts.update(tp=tp, pp=pp, gpu_info=gpu_info, block_size=block_size, overhead=overhead)
    opts["in_flight"] = batches * opts["max_num_batched_tokens"]
    return opts


def plan(model, **options):
    """Return the plan as a JSON-able dict, or raise CapacityError with a one-line message and ``data``.

    ``options`` are the module's options, by the same names; see OPTION_DEFAULTS.
    """
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    if unknown:
        _refuse("unknown options: %s" % ", ".join(unknown))
    name, config = resolve_model(model)
    shape = model_shape(config)
    opts = _settings(shape, dict(OPTION_DEFAULTS, **options))
    tp, pp, block_size, max_model_len = opts["tp"], opts["pp"], opts["block_size"], opts["max_model_len"]
    gpu_info, kv_bytes = opts["gpu_info"], opts["kv_cache_memory_bytes"]

    run_dtype = resolve_dtype(opts["dtype"], shape["config_dtype"])
    dbits = DTYPE_BYTES[run_dtype] * 8
    qbits = decoder_bits(config, opts["quantization"], opts["weight_bits"]) or dbits
    token_layer = kv_bytes_per_token_layer(shape, tp, opts["kv_cache_dtype"], run_dtype)
    page_layer = token_layer * block_size
    buckets, group_size = kv_cache_groups(shape["attention_layers"], opts["disable_hybrid_kv_cache_manager"])
    kv = KVLayout(buckets, group_size, shape["layers"], block_size, opts["in_flight"])
    requested = None if gpu_info is None else math.ceil(gpu_info["memory_bytes"] * opts["gpu_memory_utilization"])

    def budget(weights):
        if kv_bytes is not None:
            return kv_bytes
        return requested - weights - opts["overhead"]

    def evaluator(size):
        return _Evaluator(weight_layout(shape, tp, size, qbits, dbits), size, budget, block_size, token_layer, kv)

    ev = evaluator(pp)
    if not 0.25 <= ev.scale <= 4:
        _refuse(
            "model.total_bytes=%d is %.3g times what the config and %d-bit weights give (%d bytes); give the"
            " checkpoint's size on disk (the sum of its safetensors files)"
            % (shape["total_bytes"], ev.scale, qbits, round(shape["total_bytes"] / ev.scale))
        )
    default_parts = default_partition(shape["layers"], pp)
    if opts["pp_layer_partition"] not in (None, "", []):
        parts = parse_partition(opts["pp_layer_partition"], shape["layers"], pp)
    else:
        parts, target, widest = best_partition(ev, shape["layers"], pp)
        default_blocks = min(row["num_blocks"] for row in _stages(ev, default_parts))
        if default_blocks >= target and max(default_parts) <= widest:
            parts = default_parts  # keep vLLM's own split unless another one is strictly better

    result = _summary(ev, parts, max_model_len, block_size)
    default = _summary(ev, default_parts, max_model_len, block_size)
    result.update(
        {
            "model": {
                "name": name,
                "source": MODEL_SOURCES.get(name, "the config.json given"),
                "num_hidden_layers": shape["layers"],
                "attention": "mla" if shape["mla"] else "gqa",
                "parameters": total_params(shape),
                "dtype": run_dtype,
                "weight_bits": qbits,
                "weight_scale": round(ev.scale, 6),
                "experts": shape["experts"],
            },
            "gpu": gpu_info,
            "platform": opts["platform"],
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "world_size": tp * pp,
            "gpu_memory_utilization": opts["gpu_memory_utilization"],
            "requested_bytes_per_gpu": requested,
            "overhead_bytes": opts["overhead"],
            "kv_cache_memory_bytes": kv_bytes,
            "kv_cache_dtype": opts["kv_cache_dtype"],
            "block_size": block_size,
            "max_model_len": max_model_len,
            "max_num_seqs": opts["max_num_seqs"],
            "max_num_batched_tokens": opts["max_num_batched_tokens"],
            "max_in_flight_tokens": opts["in_flight"],
            "disable_hybrid_kv_cache_manager": opts["disable_hybrid_kv_cache_manager"],
            "kv_cache_groups": kv.describe(max_model_len),
            "kv_layers_per_group": group_size,
            "kv_bytes_per_token_per_layer": token_layer,
            "effective_concurrency": min(opts["max_num_seqs"], int(result["max_concurrency"])),
            "default_partition": {
                k: default[k]
                for k in ("pp_layer_partition", "num_blocks", "kv_tokens", "max_concurrency", "limiting_stage")
            },
        }
    )
    _check_weights(result, evaluator, shape, page_layer, kv)
    _check_request(result, page_layer, kv)
    result["fits"] = True
    return result


def default_max_num_batched_tokens(platform, gpu_info, world, max_num_seqs, max_model_len):
    """vLLM's API-server default (vllm/engine/arg_utils.py get_batch_defaults and
    _set_default_max_num_seqs_and_batched_tokens_args), at most max_num_seqs x max_model_len."""
    if platform == "cpu":
        tokens = 2048 * world
    else:
        memory = gpu_info["memory_bytes"] if gpu_info else 0
        if memory >= 160 * GIB:
            tokens = 16384
        elif memory >= 70 * GIB and "a100" not in gpu_info["name"].lower():
            tokens = 8192
        else:
            tokens = 2048
    return min(max_num_seqs * max_model_len, tokens)


def default_max_num_seqs(platform, gpu_info, world):
    """vLLM's API-server default (vllm/engine/arg_utils.py _get_default_max_num_batched_tokens_and_seqs)."""
    if platform == "cpu":
        return 128 * world
    memory = gpu_info["memory_bytes"] if gpu_info else 0
    if memory >= 160 * GIB or (memory >= 70 * GIB and "a100" not in gpu_info["name"].lower()):
        return 1024
    return 256


def _check_weights(result, evaluator, shape, page_layer, kv):
    """Refuse stages whose weights leave no KV budget, or (with kv_cache_memory_bytes) overflow the GPU."""
    stages, gpu_info = result["stages"], result["gpu"]
    result["fits"] = False
    kv_bytes, overhead = result["kv_cache_memory_bytes"], result["overhead_bytes"]
    if kv_bytes is not None and gpu_info is not None:
        over = [row for row in stages if row["weight_bytes"] + kv_bytes + overhead > gpu_info["memory_bytes"]]
        if over:
            row = max(over, key=lambda r: r["weight_bytes"])
            _refuse(
                "stage %d needs %s of weights plus %s of KV cache and %s of overhead per GPU, more than the %s a"
                " %s has; lower kv_cache_memory_bytes, use a smaller quantization or a larger pipeline_parallel_size"
                % (
                    row["stage"],
                    fmt_gib(row["weight_bytes"]),
                    fmt_gib(kv_bytes),
                    fmt_gib(overhead),
                    fmt_gib(gpu_info["memory_bytes"]),
                    gpu_info["name"],
                ),
                plan=result,
            )
    short = [row for row in stages if row["kv_budget_bytes"] <= 0]
    if not short:
        return
    row = min(short, key=lambda r: r["kv_budget_bytes"])
    per_request = kv.request_blocks(result["max_model_len"])

    def need(begin, end):
        return (per_request + 1) * page_layer * kv.width(begin, end)

    more = min_pipeline_size(evaluator, shape["layers"], result["pipeline_parallel_size"], need)
    nodes = (
        "a larger pipeline_parallel_size (%d stages would fit)" % more
        if more
        else "more GPUs per stage (no pipeline_parallel_size up to num_hidden_layers fits at this TP)"
    )
    _refuse(
        "the weights do not fit: stage %d holds %s of weights per GPU, %s more than the %s left of"
        " %s x gpu_memory_utilization after %s of overhead; use a smaller quantization (fp8, int4), %s,"
        " or a GPU with more memory"
        % (
            row["stage"],
            fmt_gib(row["weight_bytes"]),
            fmt_gib(-row["kv_budget_bytes"]),
            fmt_gib(row["kv_budget_bytes"] + row["weight_bytes"]),
            fmt_gib(gpu_info["memory_bytes"]),
            fmt_gib(overhead),
            nodes,
        ),
        plan=result,
        stage=row["stage"],
        shortfall_bytes=-row["kv_budget_bytes"],
        min_pipeline_parallel_size=more,
    )


def _check_request(result, page_layer, kv):
    """vLLM holds one block back for the null block and needs one max_model_len request in the rest
    (kv_cache_utils.py get_kv_cache_configs, _max_memory_usage_bytes_from_groups)."""
    stages, length = result["stages"], result["max_model_len"]
    estimates = []
    for row in stages:
        block_bytes = page_layer * row["kv_layers_per_block"]
        usable_blocks = (row["kv_budget_bytes"] - block_bytes) // block_bytes
        estimates.append(kv.longest_request(usable_blocks, length))
    result["estimated_max_model_len"] = min(estimates)
    if result["estimated_max_model_len"] >= length:
        return
    stage = estimates.index(result["estimated_max_model_len"])
    _refuse(
        "one request of max_model_len %d needs %s of KV cache per GPU on stage %d, which has %s; the estimated"
        " maximum model length is %d: use a shorter max_model_len, kv_cache_dtype=fp8, a smaller quantization"
        " or a larger pipeline_parallel_size"
        % (
            length,
            fmt_gib(kv.request_blocks(length) * page_layer * stages[stage]["kv_layers_per_block"]),
            stage,
            fmt_gib(stages[stage]["kv_budget_bytes"]),
            result["estimated_max_model_len"],
        ),
        plan=result,
        estimated_max_model_len=result["estimated_max_model_len"],
    )


def table(result):
    """Human-readable rows, one per stage, for a debug task."""
    rows = [
        "stage  layers      weights/GPU    KV budget/GPU   KV bytes/token   KV tokens",
    ]
    for row in result["stages"]:
        rows.append(
            "%5d  %2d (%d-%d)  %13s  %15s  %15d  %10d%s"
            % (
                row["stage"],
                row["layers"],
                row["first_layer"],
                row["last_layer"],
                fmt_gib(row["weight_bytes"]),
                fmt_gib(row["kv_budget_bytes"]),
                row["kv_bytes_per_token"],
                row["kv_tokens"],
                "  <- limits the replica" if row["stage"] == result["limiting_stage"] else "",
            )
        )
    groups = result["kv_cache_groups"]
    if len(groups) > 1 or groups[0]["attention"] != FULL:
        rows.append(
            "KV cache groups of %d layers: %s; a block holds one page per layer of the largest group"
            % (
                result["kv_layers_per_group"],
                ", ".join(
                    "%d x %s%s (%d layers)"
                    % (g["groups"], g["attention"], " %d" % g["window"] if g["window"] else "", g["layers"])
                    for g in groups
                ),
            )
        )
    rows.append(
        "VLLM_PP_LAYER_PARTITION=%s: %d KV tokens, %.2fx concurrency at %d tokens; vLLM's default %s: %d tokens"
        % (
            result["pp_layer_partition"],
            result["kv_tokens"],
            result["max_concurrency"],
            result["max_model_len"],
            result["default_partition"]["pp_layer_partition"],
            result["default_partition"]["kv_tokens"],
        )
    )
    return rows
