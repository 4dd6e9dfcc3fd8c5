# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the capacity_plan module: its options, its results and its refusals."""

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import capacity_plan

TINY_CONFIG = Path(__file__).parents[1] / "module_utils" / "fixtures" / "vllm" / "tiny-llama-config.json"
FLAGSHIP = {
    "model": "kimi-k2",
    "quantization": "fp8",
    "gpu": "rtx-5090",
    "tensor_parallel_size": 8,
    "pipeline_parallel_size": 10,
    "max_model_len": 32768,
    "gpu_memory_utilization": 0.92,
}


def test_flagship_plan(run_module):
    result = run_module(capacity_plan, FLAGSHIP)
    assert result["changed"] is False
    assert result["fits"] is True
    assert result["pp_layer_partition"] == "7,6,6,6,6,6,6,6,6,6"
    assert result["kv_tokens"] == 1855168
    assert result["kv_tokens"] > result["plan"]["default_partition"]["kv_tokens"]
    assert result["effective_concurrency"] == 56
    assert len(result["table"]) == 12
    assert len(result["plan"]["stages"]) == 10


def test_check_mode_plans_the_same(run_module):
    result = run_module(capacity_plan, dict(FLAGSHIP, _ansible_check_mode=True))
    assert result["changed"] is False
    assert result["pp_layer_partition"] == "7,6,6,6,6,6,6,6,6,6"


def test_config_dict_on_cpu(run_module):
    config = json.loads(TINY_CONFIG.read_text())
    args = {"model": config, "platform": "cpu", "dtype": "float32", "max_model_len": 512}
    result = run_module(capacity_plan, dict(args, kv_cache_memory_bytes=1 << 30))
    assert result["kv_tokens"] == 524288
    assert result["max_concurrency"] == 1024.0


def test_overhead_mib_is_bytes_times_mib(run_module):
    with_mib = run_module(capacity_plan, dict(FLAGSHIP, overhead_mib=4096))
    with_bytes = run_module(capacity_plan, dict(FLAGSHIP, overhead_bytes=4 << 30))
    assert with_mib["plan"]["overhead_bytes"] == 4 << 30
    assert with_mib["kv_tokens"] == with_bytes["kv_tokens"] < 1855168


def test_plan_that_does_not_fit_is_refused(run_module):
    result = run_module(capacity_plan, dict(FLAGSHIP, quantization="bf16", pipeline_parallel_size=1), failed=True)
    assert result["failed"] is True
    assert result["fits"] is False
    assert "\n" not in result["msg"]
    assert result["msg"].startswith("the weights do not fit: stage 0")
    assert "smaller quantization" in result["msg"]
    assert "larger pipeline_parallel_size" in result["msg"]
    assert result["min_pipeline_parallel_size"] == 10
    assert result["plan"]["stages"][0]["kv_budget_bytes"] < 0


def test_refusal_names_the_callers_variables(run_module):
    origins = {"pipeline_parallel_size": "vllm_pipeline_parallel_size", "quantization": "vllm_capacity_quantization"}
    args = dict(FLAGSHIP, quantization="bf16", pipeline_parallel_size=1, origins=origins)
    result = run_module(capacity_plan, args, failed=True)
    assert "a larger vllm_pipeline_parallel_size (10 stages would fit)" in result["msg"]
    assert "smaller vllm_capacity_quantization" in result["msg"]
    assert " pipeline_parallel_size" not in result["msg"]


def test_kv_refusal_carries_the_estimated_length(run_module):
    args = dict(FLAGSHIP, max_model_len=131072, gpu_memory_utilization=0.5)
    result = run_module(capacity_plan, args, failed=True)
    assert result["estimated_max_model_len"] == 74384
    assert "estimated maximum model length is 74384" in result["msg"]


# Gemma 3 27B's attention layout: a 1024-token window on every layer but each 6th, 16 KV heads of 128.
GEMMA3_LIKE = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 62,
    "hidden_size": 5376,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "intermediate_size": 21504,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("hybrid_off", "blocks", "groups"),
    [
        # 10 full + 52 sliding layers in 7 groups of 10: 20 GiB // (10 x 131072 bytes a page).
        (False, 16384, 2),
        # --disable-hybrid-kv-cache-manager: all 62 layers full attention, 20 GiB // (62 x 131072).
        (True, 2642, 1),
    ],
)
def test_hybrid_kv_cache_manager_option(run_module, hybrid_off, blocks, groups):
    args = {
        "model": GEMMA3_LIKE,
        "kv_cache_memory_bytes": 20 << 30,
        "max_model_len": 32768,
        "disable_hybrid_kv_cache_manager": hybrid_off,
    }
    result = run_module(capacity_plan, args)
    assert result["plan"]["num_blocks"] == blocks
    assert len(result["plan"]["kv_cache_groups"]) == groups
    assert result["plan"]["disable_hybrid_kv_cache_manager"] is hybrid_off


def test_malformed_layer_types_fail_naming_the_field(run_module):
    args = {"model": dict(GEMMA3_LIKE, layer_types=["sliding_attention"] * 10), "kv_cache_memory_bytes": 20 << 30}
    result = run_module(capacity_plan, args, failed=True)
    assert result["fits"] is False
    assert "model.layer_types has 10 entries, but model.num_hidden_layers is 62" in result["msg"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"tensor_parallel_size": 3}, "tensor_parallel_size 3 does not divide num_attention_heads (64)"),
        ({"pipeline_parallel_size": 62}, "pipeline_parallel_size 62 is larger than num_hidden_layers (61)"),
        ({"pp_layer_partition": "7,6"}, "pp_layer_partition '7,6' has 2 entries"),
        ({"gpu": "rtx-9090"}, "gpu 'rtx-9090' is not a known preset"),
        ({"weight_bits": 4}, "parameters are mutually exclusive: quantization|weight_bits"),
        ({"platform": "tpu"}, "value of platform must be one of: cuda, cpu"),
        ({"max_num_batched_tokens": -1}, "max_num_batched_tokens must be an integer >= 1, got -1"),
        ({"disable_hybrid_kv_cache_manager": "maybe"}, "we were unable to convert to bool"),
    ],
)
def test_bad_options_fail_naming_them(run_module, args, expected):
    result = run_module(capacity_plan, dict(FLAGSHIP, **args), failed=True)
    assert result["failed"] is True
    assert expected in result["msg"]
