# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the capacity planner, checked against vLLM's own figures where they were measured."""

import json
import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _capacity
from ansible_collections.gpufleet.inference.plugins.module_utils._capacity import (
    CapacityError,
    name_origins,
    plan,
    table,
)

FIXTURES = Path(__file__).parent / "fixtures"
TINY_CONFIG = json.loads((FIXTURES / "vllm" / "tiny-llama-config.json").read_text())
VLLM_LOG = (FIXTURES / "capacity" / "vllm-0.32.0-cpu-tiny-llama.log").read_text()
FLAGSHIP = dict(
    gpu="rtx-5090",
    tensor_parallel_size=8,
    pipeline_parallel_size=10,
    quantization="fp8",
    max_model_len=32768,
    gpu_memory_utilization=0.92,
)
# Qwen3-32B's fields (https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json): head_dim 128 is
# not hidden_size / num_attention_heads (80).
QWEN3_32B = {
    "num_hidden_layers": 64,
    "hidden_size": 5120,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def vllm_runs():
    """(kv tokens, max_model_len, concurrency) of each 'KV cache size' line in the captured log."""
    pattern = r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
    return [
        (int(tokens.replace(",", "")), int(length.replace(",", "")), float(conc))
        for tokens, length, conc in re.findall(pattern, VLLM_LOG)
    ]


def refusal(**kwargs):
    with pytest.raises(CapacityError) as exc:
        plan(**kwargs)
    return exc.value


# ---------------------------------------------------------------------------- vLLM cross-check


def test_vllm_fixture_holds_both_runs():
    assert vllm_runs() == [(524288, 512, 1024.0), (64000, 500, 128.0)]
    assert "version 0.32.0" in VLLM_LOG


def test_matches_vllm_cpu_with_kvcache_space_one_gib():
    tokens, length, concurrency = vllm_runs()[0]
    result = plan(
        TINY_CONFIG,
        platform="cpu",
        dtype="float32",
        max_model_len=length,
        max_num_seqs=8,
        kv_cache_memory_bytes=1 << 30,
    )
    assert result["block_size"] == 128  # vllm/platforms/cpu.py default for non-MLA models
    assert result["kv_tokens_reported"] == tokens
    assert result["kv_tokens"] == tokens
    assert round(result["max_concurrency"], 2) == concurrency
    assert result["effective_concurrency"] == 8


def test_matches_vllm_when_max_model_len_is_not_a_block_multiple():
    tokens, length, concurrency = vllm_runs()[1]
    result = plan(
        TINY_CONFIG,
        platform="cpu",
        dtype="float32",
        max_model_len=length,
        block_size=32,
        kv_cache_memory_bytes=134217728,
    )
    # vLLM logs int(concurrency * max_model_len), not num_blocks * block_size.
    assert result["kv_tokens_reported"] == tokens == 64000
    assert result["kv_tokens"] == 65536
    assert round(result["max_concurrency"], 2) == concurrency


def test_tiny_llama_kv_bytes_match_the_lab_comment():
    # 2 KV heads x 32 x float32, K and V, 4 layers: 2 KiB per token (molecule/vllm/molecule.yml).
    result = plan(TINY_CONFIG, platform="cpu", dtype="float32", max_model_len=512, kv_cache_memory_bytes=134217728)
    assert result["kv_bytes_per_token_per_layer"] == 512
    assert result["stages"][0]["kv_bytes_per_token"] == 2048
    assert result["kv_tokens"] == 65536
    assert result["max_num_seqs"] == 128


# ---------------------------------------------------------------------------- flagship


@pytest.mark.parametrize("model", ["kimi-k2", "deepseek-v3"])
def test_flagship_fits_with_a_balanced_partition(model):
    result = plan(model, **FLAGSHIP)
    assert result["fits"] is True
    assert result["pp_layer_partition"] == "7,6,6,6,6,6,6,6,6,6"
    assert result["default_partition"]["pp_layer_partition"] == "6,6,6,6,6,6,6,6,7,6"
    assert result["kv_tokens"] > result["default_partition"]["kv_tokens"]
    assert result["limiting_stage"] == 0
    assert result["default_partition"]["limiting_stage"] == 8
    assert [row["layers"] for row in result["stages"]] == [7] + [6] * 9
    assert result["kv_bytes_per_token_per_layer"] == 1152
    assert result["max_num_seqs"] == 256
    assert result["effective_concurrency"] == min(256, int(result["max_concurrency"]))
    rows = table(result)
    assert len(rows) == 12
    assert "limits the replica" in rows[1]
    assert "VLLM_PP_LAYER_PARTITION=7,6,6,6,6,6,6,6,6,6" in rows[-1]


def test_flagship_figures():
    kimi = plan("kimi-k2", **FLAGSHIP)
    deepseek = plan("deepseek-v3", **FLAGSHIP)
    assert round(kimi["model"]["parameters"] / 1e9) == 1026
    assert round(deepseek["model"]["parameters"] / 1e9) == 671
    assert (kimi["kv_tokens"], kimi["default_partition"]["kv_tokens"]) == (1855168, 1634224)
    assert (deepseek["kv_tokens"], deepseek["default_partition"]["kv_tokens"]) == (2718688, 2238144)
    # The embedding and the dense prefix make stage 0 lighter than a stage of MoE layers.
    assert deepseek["stages"][0]["weight_bytes"] < deepseek["stages"][1]["weight_bytes"]
    assert kimi["stages"][9]["weight_bytes"] > kimi["stages"][8]["weight_bytes"]  # lm_head


def test_explicit_partition_is_evaluated_not_replaced():
    result = plan("kimi-k2", pp_layer_partition="6,6,6,6,6,6,6,6,7,6", **FLAGSHIP)
    assert result["pp_layer_partition"] == "6,6,6,6,6,6,6,6,7,6"
    assert result["kv_tokens"] == result["default_partition"]["kv_tokens"]
    assert plan("kimi-k2", pp_layer_partition=[7] + [6] * 9, **FLAGSHIP)["kv_tokens"] == 1855168


def test_default_partition_is_kept_when_nothing_beats_it():
    result = plan(TINY_CONFIG, platform="cpu", dtype="float32", pipeline_parallel_size=3, kv_cache_memory_bytes=1 << 27)
    assert result["pp_layer_partition"] == result["default_partition"]["pp_layer_partition"] == "1,2,1"


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (61, 10, [6, 6, 6, 6, 6, 6, 6, 6, 7, 6]),
        (4, 2, [2, 2]),
        (5, 2, [3, 2]),
        (10, 4, [2, 3, 3, 2]),
        (7, 4, [2, 2, 2, 1]),
    ],
)
def test_default_partition_follows_get_pp_indices(layers, pp, expected):
    assert _capacity.default_partition(layers, pp) == expected


def test_article_model_on_a_24_gb_card_is_tight():
    article = dict(tensor_parallel_size=8, pipeline_parallel_size=10, kv_cache_dtype="fp8", max_num_seqs=8)
    roomy = plan("kimi-k3-article", gpu="rtx-5090", max_model_len=32768, **article)
    tight = plan("kimi-k3-article", gpu={"memory_mib": 24576}, max_model_len=32768, **article)
    assert roomy["model"]["weight_bits"] == 4
    assert roomy["kv_bytes_per_token_per_layer"] == 576
    heaviest = max(row["weight_bytes"] for row in roomy["stages"])
    assert heaviest > 17.5e9  # a stage of 6 of the 56 layers, not 1/80 of 1.4 TB
    assert tight["kv_tokens"] < roomy["kv_tokens"]
    assert tight["effective_concurrency"] == 8


# ---------------------------------------------------------------------------- KV per token


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_mla_kv_is_one_latent_replicated_on_every_tp_rank(tp):
    bf16 = plan("deepseek-v3", gpu="h200", tensor_parallel_size=tp, pipeline_parallel_size=16, max_model_len=4096)
    fp8 = _capacity.kv_bytes_per_token_layer(_capacity.model_shape(_capacity._KIMI_K2), tp, "fp8", "bfloat16")
    assert bf16["kv_bytes_per_token_per_layer"] == 1152
    assert fp8 == 576


def test_fp8_ds_mla_is_656_bytes_and_mla_only():
    shape = _capacity.model_shape(_capacity._DEEPSEEK_V3)
    assert _capacity.kv_bytes_per_token_layer(shape, 8, "fp8_ds_mla", "bfloat16") == 656
    error = refusal(model=QWEN3_32B, gpu="h200", kv_cache_dtype="fp8_ds_mla", max_model_len=4096)
    assert "fp8_ds_mla" in str(error)


@pytest.mark.parametrize(("tp", "expected"), [(1, 4096), (2, 2048), (8, 512), (16, 512)])
def test_gqa_kv_uses_head_dim_from_config_and_floors_at_one_head(tp, expected):
    shape = _capacity.model_shape(QWEN3_32B)
    assert shape["head_dim"] == 128
    assert _capacity.kv_bytes_per_token_layer(shape, tp, "auto", "bfloat16") == expected
    assert _capacity.kv_bytes_per_token_layer(shape, tp, "fp8", "bfloat16") == expected // 2


def test_head_dim_defaults_to_hidden_over_heads():
    config = dict(QWEN3_32B)
    del config["head_dim"]
    assert _capacity.model_shape(config)["head_dim"] == 80


def test_multimodal_config_is_read_through_text_config():
    config = {"model_type": "llava", "text_config": dict(QWEN3_32B), "vision_config": {"hidden_size": 1024}}
    assert plan(config, gpu="h200", max_model_len=4096)["model"]["num_hidden_layers"] == 64


# ---------------------------------------------------------------------------- weights


def test_total_bytes_scales_the_computed_weights():
    config = dict(QWEN3_32B, total_bytes=65_535_464_448)
    result = plan(config, gpu="h200", max_model_len=4096)
    weights = sum(row["weight_bytes"] for row in result["stages"])
    assert abs(weights - 65_535_464_448) < 100
    assert 0.99 < result["model"]["weight_scale"] < 1.01


def test_tied_embeddings_are_one_copy_only_without_pipeline():
    config = dict(TINY_CONFIG, tie_word_embeddings=True)
    untied = _capacity.weight_layout(_capacity.model_shape(TINY_CONFIG), 1, 1, 32, 32)
    tied = _capacity.weight_layout(_capacity.model_shape(config), 1, 1, 32, 32)
    tied_pp = _capacity.weight_layout(_capacity.model_shape(config), 1, 2, 32, 32)
    assert tied[2] == 128 * 4 and untied[2] == (2048 * 128 + 128) * 4
    assert tied_pp[2] == untied[2]


def test_quantization_from_config_and_options():
    shape_cfg = _capacity._KIMI_K2
    assert _capacity.decoder_bits(shape_cfg) == 8
    assert _capacity.decoder_bits(shape_cfg, "bf16") == 16
    assert _capacity.decoder_bits(shape_cfg, "AWQ") == 4
    assert _capacity.decoder_bits(shape_cfg, bits=6) == 6
    ct = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"num_bits": 4}}},
        }
    }
    assert _capacity.decoder_bits(ct) == 4
    assert _capacity.decoder_bits({}) is None


def test_auto_dtype_downcasts_float32_like_vllm():
    assert _capacity.resolve_dtype("auto", "float32") == "bfloat16"
    assert _capacity.resolve_dtype("auto", "float16") == "float16"
    assert _capacity.resolve_dtype("float32", "bfloat16") == "float32"


def test_default_max_num_seqs_follows_the_gpu():
    assert plan(QWEN3_32B, gpu="h200", max_model_len=4096)["max_num_seqs"] == 1024
    assert plan(QWEN3_32B, gpu="a100-80gb", max_model_len=4096)["max_num_seqs"] == 256


# ---------------------------------------------------------------------------- refusals


def test_weights_that_do_not_fit_are_refused_naming_the_fixes():
    error = refusal(model="kimi-k2", gpu="rtx-5090", tensor_parallel_size=8, quantization="bf16", max_model_len=32768)
    message = str(error)
    assert message.startswith("the weights do not fit: stage 0 holds")
    assert "smaller quantization" in message
    assert "larger pipeline_parallel_size (10 stages would fit)" in message
    assert error.data["stage"] == 0
    assert error.data["min_pipeline_parallel_size"] == 10
    assert error.data["shortfall_bytes"] > 200 * _capacity.GIB
    assert error.data["plan"]["fits"] is False


def test_kv_that_does_not_fit_gives_the_estimated_maximum_model_length():
    args = dict(FLAGSHIP, model="kimi-k2")
    args.update(gpu_memory_utilization=0.5, max_model_len=131072)
    error = refusal(**args)
    assert "estimated maximum model length is 74384" in str(error)
    assert "shorter max_model_len" in str(error)
    assert error.data["estimated_max_model_len"] == 74384
    # That estimate does fit.
    args["max_model_len"] = 74384
    assert plan(**args)["fits"]


def test_cpu_kv_budget_too_small_for_one_request():
    error = refusal(
        model=TINY_CONFIG, platform="cpu", dtype="float32", max_model_len=512, kv_cache_memory_bytes=1 << 20
    )
    assert "estimated maximum model length is 384" in str(error)


def test_kv_budget_beyond_the_gpu_is_refused():
    error = refusal(model=QWEN3_32B, gpu="rtx-5090", kv_cache_memory_bytes=30 * _capacity.GIB, max_model_len=4096)
    assert "lower kv_cache_memory_bytes" in str(error)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"model": "llama-9000"}, "model 'llama-9000' is not a known preset"),
        ({"model": 42}, "model must be a preset name or a dict"),
        ({"model": dict(QWEN3_32B, hidden_size=0)}, "model.hidden_size must be an integer >= 1, got 0"),
        ({"model": dict(QWEN3_32B, torch_dtype="int4")}, "model.torch_dtype 'int4'"),
        ({"model": dict(QWEN3_32B, total_bytes="big")}, "model.total_bytes must be an integer"),
        ({"gpu": "rtx-9090"}, "gpu 'rtx-9090' is not a known preset"),
        ({"gpu": {"memory_gb": 32}}, "gpu must hold exactly one of memory_mib or memory_bytes"),
        ({"gpu": {"memory_mib": -1}}, "gpu.memory_mib must be an integer >= 1"),
        ({"gpu": None}, "gpu is required unless kv_cache_memory_bytes is given"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be an integer >= 1, got 0"),
        ({"tensor_parallel_size": 3}, "tensor_parallel_size 3 does not divide num_attention_heads (64)"),
        ({"tensor_parallel_size": 32, "model": dict(QWEN3_32B, num_key_value_heads=12)}, "num_key_value_heads (12)"),
        ({"pipeline_parallel_size": 65}, "pipeline_parallel_size 65 is larger than num_hidden_layers (64)"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1], got 1.5"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1]"),
        ({"max_model_len": 0}, "max_model_len must be an integer >= 1"),
        ({"max_model_len": 100000}, "max_model_len 100000 is longer than the model's max_position_embeddings"),
        ({"max_num_seqs": 0}, "max_num_seqs must be an integer >= 1"),
        ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype 'fp4' is not one of auto"),
        ({"block_size": 0}, "block_size must be an integer >= 1"),
        ({"overhead_bytes": -1}, "overhead_bytes must be an integer >= 0"),
        ({"overhead_mib": -5}, "overhead_mib must be an integer >= 0"),
        ({"overhead_mib": 5, "overhead_bytes": 5}, "overhead_bytes and overhead_mib are mutually exclusive"),
        ({"kv_cache_memory_bytes": 0}, "kv_cache_memory_bytes must be an integer >= 1"),
        ({"quantization": "int3"}, "quantization 'int3' is not known"),
        ({"quantization": "fp8", "weight_bits": 8}, "quantization and weight_bits are mutually exclusive"),
        ({"weight_bits": 0}, "weight_bits must be an integer >= 1"),
        ({"dtype": "fp64"}, "dtype 'fp64' is not one of auto"),
        ({"platform": "tpu"}, "platform must be cuda or cpu"),
        ({"platform": "cpu"}, "platform=cpu needs kv_cache_memory_bytes"),
        ({"pipeline_parallel_size": 2, "pp_layer_partition": "32,31"}, "sums to 63; it must sum to num_hidden_layers"),
        ({"pipeline_parallel_size": 2, "pp_layer_partition": [64]}, "has 1 entries; it needs one per pipeline stage"),
        ({"pipeline_parallel_size": 2, "pp_layer_partition": "64,0"}, "has a stage without layers"),
        ({"pipeline_parallel_size": 2, "pp_layer_partition": "a,b"}, "is not a comma-separated list of integers"),
        ({"pipeline_parallel_size": 2, "pp_layer_partition": {"a": 1}}, "must be a list of integers"),
    ],
)
def test_bad_inputs_are_refused_naming_the_option(kwargs, expected):
    arguments = dict(model=QWEN3_32B, gpu="h200", max_model_len=4096)
    arguments.update(kwargs)
    assert expected in str(refusal(**arguments))


def test_max_model_len_is_required_without_max_position_embeddings():
    config = dict(QWEN3_32B)
    del config["max_position_embeddings"]
    assert "max_model_len is required" in str(refusal(model=config, gpu="h200"))
    assert plan(QWEN3_32B, gpu="h200", tensor_parallel_size=2)["max_model_len"] == 40960


def test_gpu_presets_and_aliases():
    assert _capacity.resolve_gpu("NVIDIA GeForce RTX 5090")["memory_bytes"] == 32607 * _capacity.MIB
    assert _capacity.resolve_gpu("H100")["memory_bytes"] == 81559 * _capacity.MIB
    assert _capacity.resolve_gpu({"memory_bytes": 1000, "name": "x"}) == {"name": "x", "memory_bytes": 1000}


def test_name_origins_puts_the_callers_names_into_a_message():
    origins = {"pipeline_parallel_size": "vllm_pipeline_parallel_size", "max_model_len": "vllm_args max-model-len"}
    message = "use a shorter max_model_len or a larger pipeline_parallel_size (11 stages would fit)"
    assert name_origins(message, origins) == (
        "use a shorter vllm_args max-model-len or a larger vllm_pipeline_parallel_size (11 stages would fit)"
    )


def test_name_origins_replaces_whole_names_only():
    origins = {"gpu": "vllm_capacity_gpu", "block_size": "vllm_args block-size"}
    message = "gpu.memory_mib must be set; gpu_memory_utilization stays; num_blocks x block_size; per GPU"
    assert name_origins(message, origins) == (
        "vllm_capacity_gpu.memory_mib must be set; gpu_memory_utilization stays;"
        " num_blocks x vllm_args block-size; per GPU"
    )
    assert name_origins(message, {}) == message


# ---------------------------------------------------------------------------- hostile inputs


def config(**changes):
    data = dict(QWEN3_32B, **changes)
    return {key: value for key, value in data.items() if value is not None}


HOSTILE = [
    # Sizes beyond any real model, GPU or server: refused before any computation.
    (
        dict(model=config(num_hidden_layers=10_000_000)),
        "model.num_hidden_layers=10000000 is larger than any real value",
    ),
    (dict(model=config(num_hidden_layers=3000), pipeline_parallel_size=1500), "model.num_hidden_layers=3000"),
    (dict(model=config(num_attention_heads=10**12)), "model.num_attention_heads=1000000000000"),
    (dict(max_model_len=10**12), "max_model_len=1000000000000 is larger than any real value"),
    (dict(gpu={"memory_mib": 10**15}), "gpu.memory_mib=1000000000000000 is larger than any real value"),
    (dict(pipeline_parallel_size=4000), "pipeline_parallel_size=4000"),
    # NaN, infinity, negative, zero.
    (dict(max_model_len=float("nan")), "max_model_len must be an integer >= 1, got nan"),
    (dict(gpu={"memory_mib": float("inf")}), "gpu.memory_mib must be an integer >= 1, got inf"),
    (dict(gpu_memory_utilization=float("nan")), "gpu_memory_utilization must be in (0, 1], got nan"),
    (dict(max_model_len=-1), "max_model_len must be an integer >= 1, got -1"),
    (dict(max_num_seqs=0), "max_num_seqs must be an integer >= 1, got 0"),
    # Configs that ended in a traceback.
    (
        dict(model=config(hidden_size=32, head_dim=None)),
        "model.hidden_size (32) is smaller than model.num_attention_heads (64)",
    ),
    (
        dict(model=config(max_position_embeddings=0), max_model_len=None),
        "model.max_position_embeddings must be an integer >= 1, got 0",
    ),
    (dict(model=config(torch_dtype=["bfloat16"])), "model.torch_dtype ['bfloat16'] is not one of"),
    (dict(model=config(quantization_config="fp8")), "model.quantization_config must be a mapping"),
    (dict(model=config(quantization_config={"quant_method": "gptq", "bits": "four"})), "gives 'four' bits per weight"),
    (dict(model=config(quantization_config={"quant_method": "gptq", "bits": -4})), "gives -4 bits per weight"),
    (
        dict(model=config(quantization_config={"quant_method": "compressed-tensors", "config_groups": {"g": "w4a16"}})),
        "config_groups must map group names to mappings",
    ),
    # Accepted, and wrong.
    (
        dict(model=config(num_key_value_heads=6)),
        "model.num_key_value_heads (6) must divide model.num_attention_heads (64)",
    ),
    (dict(model=config(num_key_value_heads=128)), "model.num_key_value_heads (128) must divide"),
    (dict(model=config(tie_word_embeddings="false")), "model.tie_word_embeddings must be true or false, got 'false'"),
    (dict(model=config(total_bytes=1)), "model.total_bytes=1 is"),
]


@pytest.mark.parametrize(("changes", "message"), HOSTILE, ids=[message[:48] for _changes, message in HOSTILE])
def test_hostile_inputs_are_refused_naming_the_option(changes, message):
    kwargs = dict(model=QWEN3_32B, gpu="rtx-5090", tensor_parallel_size=8, max_model_len=32768)
    kwargs.update(changes)
    if kwargs["max_model_len"] is None:
        del kwargs["max_model_len"]
    assert message in str(refusal(**kwargs))


class CountingEvaluator(_capacity._Evaluator):
    calls = 0

    def blocks(self, stage, begin, end):
        CountingEvaluator.calls += 1
        return super().blocks(stage, begin, end)


@pytest.mark.parametrize("pp", [1, 2, 8, 64, 256, 511, 512])
def test_the_partition_search_costs_about_layers_squared_at_the_largest_model(pp):
    """At the largest model the planner takes (512 layers), every pipeline size costs at most a
    few layers-squared evaluations of a stage; the search over every stage length cost pp times
    that, minutes of CPU for thousands of layers. Counted, not timed."""
    layers = _capacity.LIMITS["model.num_hidden_layers"]
    weights = ([1000 + (i % 7) * 10 for i in range(layers)], 5000, 7000, 1.0)
    ev = CountingEvaluator(weights, pp, lambda used: 10**9 - used, 16, 3)
    CountingEvaluator.calls = 0
    parts, target, widest = _capacity.best_partition(ev, layers, pp)
    assert sum(parts) == layers and len(parts) == pp and min(parts) >= 1
    assert min(ev.blocks(stage, sum(parts[:stage]), sum(parts[: stage + 1])) for stage in range(pp)) == target
    assert max(parts) == widest
    assert CountingEvaluator.calls <= 3 * layers * layers
