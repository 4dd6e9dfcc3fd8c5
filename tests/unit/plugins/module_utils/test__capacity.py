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


# ---------------------------------------------------------------------------- hybrid KV cache groups
#
# vLLM 0.32.0, vllm/v1/core/kv_cache_utils.py: with full-attention and sliding-window (or chunked)
# layers mixed, _get_kv_cache_groups_uniform_page_size splits each kind round robin into groups of
# group_size layers (the fewest layers of any kind, or the most when under 1.5 times the fewest);
# get_kv_cache_config_from_groups gives num_blocks = budget // (page * layers of the largest group);
# get_max_concurrency_for_kv_cache_config divides it by the blocks one request holds in all groups,
# a sliding window cdiv(min(window - 1 + in flight, len), block) + 1 blocks
# (kv_cache_interface.py SlidingWindowSpec), a chunk cdiv(min(chunk + in flight, len), block)
# (ChunkedLocalAttentionSpec). In flight: (pp + 1) x max_num_batched_tokens on CUDA.

# Gemma 3 27B's text_config (https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json):
# a 1024-token sliding window on every layer but each 6th.
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
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
# gpt-oss-120b's attention (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json): 36
# layers alternating a 128-token sliding window and full attention, 8 KV heads of 64.
GPT_OSS_LIKE = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 36,
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_local_experts": 128,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "torch_dtype": "bfloat16",
}
# Llama 4 Scout's text_config attention: 48 layers, chunked local attention (8192 tokens) on the
# RoPE layers, a NoPE full-attention layer every 4th (no_rope_layers left to its default).
LLAMA4_LIKE = {
    "model_type": "llama4_text",
    "num_hidden_layers": 48,
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 8192,
    "vocab_size": 202048,
    "max_position_embeddings": 1 << 20,
    "attention_chunk_size": 8192,
    "torch_dtype": "bfloat16",
}
GIB = 1 << 30


def without(config, *names):
    return {key: value for key, value in config.items() if key not in names}


def test_gemma3_like_takes_pages_of_its_largest_group_only():
    # 62 layers, full where (i + 1) % 6 == 0: 10 full, 52 sliding. group_size = 10 (52 >= 1.5 x 10):
    # 1 full group + ceil(52 / 10) = 6 sliding groups, 7 groups. Page: 16 tokens x 2 (K, V) x 16
    # heads x 128 x 2 bytes = 131072. num_blocks = 20 GiB // (10 x 131072) = 16384 (today, all 62
    # layers per block: 20 GiB // (62 x 131072) = 2642).
    # One request of 32768: 2048 full blocks + 6 x (cdiv(min(1023 + 2 x 2048, 32768), 16) + 1 = 321)
    # = 3974 blocks; concurrency 16384 / 3974 = 4.12, logged int(4.12... x 32768) = 135095 tokens.
    # kv_tokens, every group at once: 16384 // 7 x 16 = 37440.
    result = plan(GEMMA3_LIKE, kv_cache_memory_bytes=20 * GIB, max_model_len=32768, max_num_batched_tokens=2048)
    assert result["num_blocks"] == 16384
    assert result["max_in_flight_tokens"] == 4096
    assert result["kv_layers_per_group"] == 10
    assert result["kv_cache_groups"] == [
        {"attention": "sliding_attention", "window": 1024, "layers": 52, "groups": 6, "blocks_per_request": 321},
        {"attention": "full_attention", "window": None, "layers": 10, "groups": 1, "blocks_per_request": 2048},
    ]
    assert result["stages"][0]["kv_layers_per_block"] == 10
    assert result["stages"][0]["kv_bytes_per_token"] == 10 * 8192
    assert result["max_concurrency"] == 16384 / 3974
    assert result["kv_tokens_reported"] == 135095
    assert result["kv_tokens"] == 37440
    assert result["estimated_max_model_len"] == 32768
    assert "1 x full_attention (10 layers)" in table(result)[-2]
    assert "6 x sliding_attention 1024 (52 layers)" in table(result)[-2]


def test_hybrid_manager_off_plans_every_layer_as_full_attention():
    # --disable-hybrid-kv-cache-manager (unify_hybrid_kv_cache_specs): one group of all 62 layers,
    # 20 GiB // (62 x 131072) = 2642 blocks, 2642 / 2048 = 1.29 requests of 32768, 2642 x 16 tokens.
    off = plan(
        GEMMA3_LIKE,
        kv_cache_memory_bytes=20 * GIB,
        max_model_len=32768,
        max_num_batched_tokens=2048,
        disable_hybrid_kv_cache_manager=True,
    )
    full = plan(without(GEMMA3_LIKE, "sliding_window"), kv_cache_memory_bytes=20 * GIB, max_model_len=32768)
    for result in (off, full):
        assert result["num_blocks"] == 2642
        assert result["kv_tokens"] == result["kv_tokens_reported"] == 42272
        assert result["max_concurrency"] == 2642 / 2048
        assert result["kv_cache_groups"] == [
            {"attention": "full_attention", "window": None, "layers": 62, "groups": 1, "blocks_per_request": 2048}
        ]
    assert off["disable_hybrid_kv_cache_manager"] is True
    assert len(table(off)) == len(table(full)) == 3  # no groups line


def test_gemma3_like_over_two_stages_each_takes_its_largest_group():
    # Stage 0 holds layers 0-30: 5 full (5, 11, 17, 23, 29) and sliding positions 0-25, dealt
    # round robin (layers[i::6]) to 6 groups: at most ceil(26 / 6) = 5 of one group. Stage 1 the
    # same. 20 GiB // (5 x 131072) = 32768 blocks a stage (today: 20 GiB // (31 x 131072) = 5285).
    result = plan(
        GEMMA3_LIKE,
        kv_cache_memory_bytes=20 * GIB,
        max_model_len=32768,
        pipeline_parallel_size=2,
        pp_layer_partition="31,31",
    )
    assert [row["kv_layers_per_block"] for row in result["stages"]] == [5, 5]
    assert [row["num_blocks"] for row in result["stages"]] == [32768, 32768]
    assert result["num_blocks"] == 32768


def test_gpt_oss_like_alternating_layers_form_two_groups():
    # 18 sliding (128) + 18 full: 18 < 1.5 x 18, group_size 18, one group each. Page: 16 x 2 x 8 x 64
    # x 2 = 32768. num_blocks = 16 GiB // (18 x 32768) = 29127 (today 16 GiB // (36 x 32768) = 14563).
    # With max_num_batched_tokens 8192, 16384 tokens in flight: a request of 131072 holds 8192 full
    # blocks + cdiv(min(127 + 16384, 131072), 16) + 1 = 1033 sliding ones, 9225; 29127 / 9225 = 3.16,
    # logged 413846 tokens. kv_tokens 29127 // 2 x 16 = 233008.
    result = plan(GPT_OSS_LIKE, kv_cache_memory_bytes=16 * GIB, max_model_len=131072, max_num_batched_tokens=8192)
    assert result["num_blocks"] == 29127
    assert [group["blocks_per_request"] for group in result["kv_cache_groups"]] == [1033, 8192]
    assert result["max_concurrency"] == 29127 / 9225
    assert result["kv_tokens_reported"] == 413846
    assert result["kv_tokens"] == 233008
    # vLLM's gpt_oss.py slides the even layers whatever layer_types says; transformers derives the same.
    derived = plan(without(GPT_OSS_LIKE, "layer_types"), kv_cache_memory_bytes=16 * GIB, max_model_len=131072)
    assert derived["num_blocks"] == 29127


def test_llama4_like_chunked_layers_group_by_the_nope_layers():
    # NoPE every 4th layer (3, 7, ..., 47): 12 full, 36 chunked (8192). group_size 12: 1 full group
    # + 3 chunked groups. Page: 16 x 2 x 8 x 128 x 2 = 65536. num_blocks = 16 GiB // (12 x 65536) =
    # 21845 (today 16 GiB // (48 x 65536) = 5461). A request of 65536 with 16384 tokens in flight:
    # 4096 full blocks + 3 x cdiv(min(8192 + 16384, 65536), 16) = 3 x 1536, 8704; 21845 / 8704.
    # kv_tokens 21845 // 4 x 16 = 87376.
    args = dict(kv_cache_memory_bytes=16 * GIB, max_model_len=65536, max_num_batched_tokens=8192)
    result = plan(LLAMA4_LIKE, **args)
    assert result["num_blocks"] == 21845
    assert result["kv_cache_groups"][0] == {
        "attention": "chunked_attention",
        "window": 8192,
        "layers": 36,
        "groups": 3,
        "blocks_per_request": 1536,
    }
    assert result["max_concurrency"] == 21845 / 8704
    assert result["kv_tokens"] == 87376
    rope = [0 if (i + 1) % 4 == 0 else 1 for i in range(48)]
    assert plan(dict(LLAMA4_LIKE, no_rope_layers=rope), **args)["num_blocks"] == 21845
    # No chunk, no chunked layers: today's answer.
    assert plan(dict(LLAMA4_LIKE, attention_chunk_size=None), **args)["num_blocks"] == 5461
    assert plan(LLAMA4_LIKE, disable_hybrid_kv_cache_manager=True, **args)["num_blocks"] == 5461


def test_a_model_sliding_on_every_layer_keeps_its_blocks_and_holds_more_requests():
    # Mistral 7B v0.1 (https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json): a
    # 4096-token window and no layer_types, so vllm/engine/arg_utils.py gives every layer the window:
    # one group, 4 GiB // (32 x 65536) = 2048 blocks as today, but a request of 32768 holds
    # cdiv(min(4095 + 2 x 2048, 32768), 16) + 1 = 513 blocks, not 2048.
    mistral = dict(QWEN3_32B, model_type="mistral", num_hidden_layers=32, num_key_value_heads=8, sliding_window=4096)
    result = plan(mistral, kv_cache_memory_bytes=4 * GIB, max_model_len=32768, max_num_batched_tokens=2048)
    assert result["num_blocks"] == 2048
    assert result["max_concurrency"] == 2048 / 513
    assert (
        plan(mistral, kv_cache_memory_bytes=4 * GIB, max_model_len=32768, disable_hybrid_kv_cache_manager=True)[
            "max_concurrency"
        ]
        == 2048 / 513
    )  # the flag only unifies a model that also has full-attention layers


@pytest.mark.parametrize(
    "changes",
    [
        {"sliding_window": 0},  # vllm/config/model.py: 0 means no sliding window
        {"sliding_window": None},
        {"sliding_window_pattern": 1},  # every layer full
        {"model_type": "qwen3"},  # not a model whose vLLM code reads layer_types
    ],
)
def test_configs_without_local_layers_keep_todays_answer(changes):
    result = plan(dict(GEMMA3_LIKE, **changes), kv_cache_memory_bytes=20 * GIB, max_model_len=32768)
    assert result["num_blocks"] == 2642


def test_qwen2_windows_apply_only_with_use_sliding_window():
    # Qwen2.5 configs give a sliding_window with use_sliding_window false: transformers drops it.
    qwen = dict(QWEN3_32B, model_type="qwen3", sliding_window=131072, max_window_layers=64)
    plain = plan(QWEN3_32B, gpu="h200", max_model_len=4096)
    assert (
        plan(dict(qwen, use_sliding_window=False), gpu="h200", max_model_len=4096)["num_blocks"] == plain["num_blocks"]
    )
    # max_window_layers == num_hidden_layers: no layer slides.
    assert (
        plan(dict(qwen, use_sliding_window=True), gpu="h200", max_model_len=4096)["num_blocks"] == plain["num_blocks"]
    )


def test_default_max_num_batched_tokens_follows_vllm():
    assert plan(GEMMA3_LIKE, gpu="h200", max_model_len=32768)["max_num_batched_tokens"] == 8192
    assert plan(GEMMA3_LIKE, gpu="a100-80gb", max_model_len=32768)["max_num_batched_tokens"] == 2048
    two_stages = plan(GEMMA3_LIKE, gpu="h200", max_model_len=32768, pipeline_parallel_size=2)
    assert two_stages["max_in_flight_tokens"] == 3 * 8192  # async scheduling: pp + 1 batches
    cpu = plan(TINY_CONFIG, platform="cpu", dtype="float32", max_model_len=512, kv_cache_memory_bytes=1 << 27)
    assert cpu["max_num_batched_tokens"] == 2048 and cpu["max_in_flight_tokens"] == 2048  # no async on CPU
    short = plan(TINY_CONFIG, platform="cpu", max_model_len=8, max_num_seqs=4, kv_cache_memory_bytes=1 << 27)
    assert short["max_num_batched_tokens"] == 32  # at most max_num_seqs x max_model_len


def test_hybrid_refusal_gives_vllms_estimate_over_all_groups():
    # 1 GiB, 10 pages of 131072 bytes a block: one block held back, (2^30 - 1310720) // 1310720 = 818
    # usable. A request of n <= 5119 tokens holds cdiv(n, 16) blocks in each of the 7 groups, plus
    # one more in each of the 6 sliding ones: 7 x 116 + 6 = 818 at n = 1856, 825 at 1857. So 1856,
    # shorter than the 2096 of all 62 layers per block ((2^30 - 62 x 131072) // (62 x 131072) = 131
    # blocks of 16): within the window every group holds every token, and 7 groups of 10 pages are
    # 70 pages a token, not 62.
    args = dict(model=GEMMA3_LIKE, kv_cache_memory_bytes=GIB, max_model_len=32768, max_num_batched_tokens=2048)
    error = refusal(**args)
    assert "the estimated maximum model length is 1856" in str(error)
    assert error.data["estimated_max_model_len"] == 1856
    assert refusal(**dict(args, disable_hybrid_kv_cache_manager=True)).data["estimated_max_model_len"] == 2096
    assert plan(**{**args, "max_model_len": 1856})["fits"]


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
    # Per-layer attention fields.
    (
        dict(model=config(layer_types="sliding_attention")),
        "model.layer_types must be a list with one attention type per layer, got str 'sliding_attention'",
    ),
    (
        dict(model=config(layer_types=["full_attention"] * 3)),
        "model.layer_types has 3 entries, but model.num_hidden_layers is 64",
    ),
    (
        dict(model=config(layer_types=["full_attention"] * 63 + ["linear_attention"])),
        "model.layer_types[63] is 'linear_attention', not one of full_attention, sliding_attention",
    ),
    (dict(model=config(layer_types=[1] * 64)), "model.layer_types[0] is 1, not one of"),
    (dict(model=config(sliding_window=-4096)), "model.sliding_window must be an integer >= 0, got -4096"),
    (dict(model=config(sliding_window="4096")), "model.sliding_window must be an integer >= 0, got '4096'"),
    (dict(model=config(sliding_window=10**12)), "model.sliding_window=1000000000000 is larger than any real value"),
    (
        dict(model=config(model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=0)),
        "model.sliding_window_pattern must be an integer >= 1, got 0",
    ),
    (
        dict(model=config(model_type="llama4_text", attention_chunk_size=-8192)),
        "model.attention_chunk_size must be an integer >= 0, got -8192",
    ),
    (
        dict(model=config(model_type="llama4_text", no_rope_layers=[1, 0])),
        "model.no_rope_layers must give 1 (RoPE) or 0 (NoPE) for each of the 64 layers, got [1, 0]",
    ),
    (
        dict(model=config(model_type="qwen3", use_sliding_window="true")),
        "model.use_sliding_window must be true or false, got 'true'",
    ),
    (
        dict(model=config(model_type="qwen3", use_sliding_window=True, sliding_window=4096, max_window_layers=28)),
        "model.max_window_layers is 28 of 64 layers with model.use_sliding_window true",
    ),
    (dict(disable_hybrid_kv_cache_manager="yes"), "disable_hybrid_kv_cache_manager must be true or false, got 'yes'"),
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens must be an integer >= 1, got 0"),
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


@pytest.mark.parametrize("pp", [2, 64, 512])
def test_the_partition_search_with_hybrid_groups_costs_the_same(pp):
    """A stage's blocks still only fall as it takes more layers (its largest group can only grow),
    so the search keeps its bound with sliding-window groups at the largest model."""
    layers = _capacity.LIMITS["model.num_hidden_layers"]
    kinds = [("sliding_attention", 1024) if (i + 1) % 6 else ("full_attention", None) for i in range(layers)]
    kv = _capacity.KVLayout(*_capacity.kv_cache_groups(kinds), layers, 16, 4096)
    weights = ([1000 + (i % 7) * 10 for i in range(layers)], 5000, 7000, 1.0)
    ev = CountingEvaluator(weights, pp, lambda used: 10**9 - used, 16, 3, kv)
    CountingEvaluator.calls = 0
    parts, target, widest = _capacity.best_partition(ev, layers, pp)
    assert sum(parts) == layers and len(parts) == pp and min(parts) >= 1
    assert min(ev.blocks(stage, sum(parts[:stage]), sum(parts[: stage + 1])) for stage in range(pp)) == target
    assert max(parts) == widest
    assert CountingEvaluator.calls <= 3 * layers * layers
