# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the vllm_config filter: validate vllm_args and fail with every problem at once."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter._vllm_config import FilterModule, vllm_config


def error_of(*args, **kwargs):
    with pytest.raises(AnsibleFilterError) as excinfo:
        vllm_config(*args, **kwargs)
    return str(excinfo.value)


def test_filter_is_registered():
    assert FilterModule().filters() == {"_vllm_config": vllm_config}


def test_returns_the_config_mapping():
    assert vllm_config(
        {"max_num_batched_tokens": 8192, "--enable-prefix-caching": True, "compilation-config": '{"mode": 3}'},
        version="0.33.0",
    ) == {"max-num-batched-tokens": 8192, "enable-prefix-caching": True, "compilation-config": {"mode": 3}}


def test_none_is_empty():
    assert vllm_config(None, version="0.32.0") == {}


def test_all_problems_in_one_message():
    assert error_of({"swap-space": 16, "-tp": 8, "dtype": "float8", "enable-prefix-cachin": True}, "0.33.0") == (
        "vllm_args has 4 problem(s) for vLLM 0.33.0:\n"
        "vllm_args: vLLM 0.33.0 has no 'swap-space' (the V0 engine's CPU swap space went with V0; V1 recomputes "
        "preempted requests): drop it; to keep KV cache in host RAM use --kv-offloading-size (GiB) with "
        "--kv-offloading-backend native\n"
        "vllm_args: '-tp' (tensor-parallel-size) is set by the role: use vllm_tensor_parallel_size\n"
        "vllm_args: 'dtype: float8' is not valid: --dtype is the activation/weight float type (auto, bfloat16, "
        "float, float16, float32, half); float8 weights come from a quantized checkpoint and --quantization "
        "(gptq, awq, compressed-tensors ...)\n"
        "vllm_args: 'enable-prefix-cachin' is not a flag of vLLM 0.33.0; did you mean 'enable-prefix-caching'?"
    )


def test_owned_override():
    assert vllm_config({"port": 8001}, version="0.33.0", owned={}) == {"port": 8001}
    assert error_of({"seed": 1}, "0.33.0", owned={"seed": "my_seed"}) == (
        "vllm_args has 1 problem(s) for vLLM 0.33.0:\nvllm_args: 'seed' is set by the role: use my_seed"
    )


def test_unknown_version():
    assert error_of({}, "0.6.3") == (
        "gpufleet.inference._vllm_config: no flag catalogue for vLLM '0.6.3'; shipped: 0.32.0, 0.33.0"
    )


def test_not_a_mapping():
    assert error_of("--enforce-eager", "0.33.0") == (
        "vllm_args has 1 problem(s) for vLLM 0.33.0:\n"
        "vllm_args must be a mapping of vLLM flag names to values, got str '--enforce-eager'"
    )
