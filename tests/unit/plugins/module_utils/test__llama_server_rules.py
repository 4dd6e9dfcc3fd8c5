# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_llama_server_rules.py: the llama_server preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import server_plan
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_server_rules import (
    ARGV_KEYS,
    key_problems,
    settings_problems,
)

# The dialect llama_cpp_source_info reads from llama.cpp 0c1e570 (the pinned build).
NEW = {"rpc_server_binary": "ggml-rpc-server", "flash_attn_value": True, "load_mode": True, "legacy_mmap_flags": False}
SHA = "sha256:" + "ab" * 32
KEY = "3f9c1d0e5b7a4c2e8f6d9a1b0c3e5f7a"


def settings(**overrides):
    base = {
        "llama_server_model_path": "/var/lib/gpufleet/models/model.gguf",
        "llama_server_model_url": "",
        "llama_server_model_src": "",
        "llama_server_model_checksum": "",
        "llama_server_host": "127.0.0.1",
        "llama_server_port": 8080,
        "llama_server_allow_unauthenticated": False,
        "llama_server_api_key": "",
        "llama_server_n_gpu_layers": 99,
        "llama_server_n_cpu_moe": None,
        "llama_server_override_tensor": [],
        "llama_server_ctx_size": 4096,
        "llama_server_parallel": 1,
        "llama_server_load_mode": None,
        "llama_server_flash_attn": None,
        "llama_server_extra_args": [],
        "llama_server_workers": ["worker-1", "worker-2"],
        "gpufleet_fabric_subnet": "10.10.0.0/24",
        "llama_cpp_dialect": NEW,
        "llama_cpp_server_flags": {},
        "llama_rpc_endpoints": [["10.10.0.11:50052"], ["10.10.0.12:50052", "10.10.0.12:50053"]],
        "llama_rpc_addresses": [["10.10.0.11"], ["10.10.0.12"]],
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"llama_server_model_url": "https://models.example/m.gguf", "llama_server_model_checksum": SHA},
        {
            "llama_server_model_src": "/srv/models/m.gguf",
            "llama_server_model_checksum": SHA.upper().replace("SHA", "sha"),
        },
        {"llama_server_host": "10.10.0.1", "llama_server_api_key": KEY},
        {"llama_server_host": "0.0.0.0", "llama_server_allow_unauthenticated": "yes"},
        {"llama_server_host": "127.0.0.2"},
        {"llama_server_host": "localhost"},
        {"llama_server_host": "::1", "llama_server_flash_attn": "on", "llama_server_load_mode": "mmap"},
        {"gpufleet_fabric_subnet": "", "llama_server_extra_args": ["--metrics"]},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"llama_server_model_path": "models/m.gguf"},
            "llama_server_model_path=models/m.gguf must be an absolute path, such as "
            "/var/lib/gpufleet/models/model.gguf",
        ),
        (
            {"llama_server_model_url": "https://fleet:s3cret@models.example/m.gguf",
             "llama_server_model_src": "/srv/m.gguf", "llama_server_model_checksum": SHA},
            "set at most one of llama_server_model_url (https://fleet:********@models.example/m.gguf) and "
            "llama_server_model_src (/srv/m.gguf)",
        ),
        (
            {"llama_server_model_url": "https://models.example/m.gguf", "llama_server_model_checksum": "abc"},
            "llama_server_model_checksum=abc must be sha256:<64 hex digits> when the model is downloaded or copied "
            "(llama_server_model_url or llama_server_model_src)",
        ),
        (
            {"llama_server_host": "10.10.0.1"},
            "llama_server_host=10.10.0.1 serves the API beyond this host, and llama_server_api_key is empty. Set "
            "llama_server_api_key, keep llama_server_host at 127.0.0.1, or set llama_server_allow_unauthenticated: "
            "true if a proxy in front does the authentication.",
        ),
        ({"llama_server_port": 0}, "llama_server_port=0 is not a TCP port; set it to 1..65535"),
        ({"llama_server_extra_args": ["-fa"]}, "llama_server_extra_args has a bare -fa"),
        ({"llama_server_extra_args": ["--no-mmap"]}, "llama_server_extra_args has --no-mmap"),
        (
            {"llama_server_workers": [], "llama_rpc_endpoints": [], "llama_rpc_addresses": []},
            "the coordinator has no RPC workers",
        ),
        (
            {"gpufleet_fabric_subnet": "10.99.0.0/24"},
            "llama_rpc_bind_address of worker-1=10.10.0.11 is outside the fabric subnet 10.99.0.0/24",
        ),
        (
            {"llama_server_extra_args": ["--n-gpu-layer", "5"], "llama_cpp_server_flags": {"--n-gpu-layers": True}},
            "llama_server_extra_args[0]='--n-gpu-layer': --n-gpu-layer is not a flag of the llama-server being "
            "deployed",
        ),
    ],
)  # fmt: skip
def test_each_problem_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(settings(**overrides))
    assert problems and problems[0].startswith(message), problems


@pytest.mark.parametrize(
    ("key", "messages"),
    [
        ("", []),
        (KEY, []),
        ("first-key-0123456789,second-key-0123456789", ["llama_server_api_key contains a comma"]),
        ("hunter2", ["llama_server_api_key is 7 characters long: use at least 16"]),
        ("correct horse battery staple", ["llama_server_api_key contains a space or a control character"]),
        ("a,b\n", ["contains a comma", "is 4 characters long", "contains a space or a control character"]),
    ],
)
def test_the_key_is_described_never_shown(key, messages):
    problems = key_problems(key)
    assert len(problems) == len(messages)
    for problem, message in zip(problems, messages):
        assert message in problem
        assert not key or key not in problem


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(llama_server_model_path="m.gguf", llama_server_host="10.10.0.1", llama_server_port=70000)
    )
    assert [problem.split("=")[0] for problem in problems] == [
        "llama_server_model_path",
        "llama_server_host",
        "llama_server_port",
    ]


def test_good_settings_build_the_arguments_the_filter_builds():
    # The check runs the filter's code (server_plan): what it lets through, the filter turns into argv.
    values = settings(llama_server_flash_attn="on")
    argv, problems = server_plan(
        {key: values["llama_server_" + key] for key in ARGV_KEYS},
        NEW,
        values["llama_server_workers"],
        values["llama_rpc_endpoints"],
        values["llama_rpc_addresses"],
        values["gpufleet_fabric_subnet"],
    )
    assert problems == []
    assert argv[argv.index("--rpc") + 1] == "10.10.0.11:50052,10.10.0.12:50052,10.10.0.12:50053"
    assert argv[-2:] == ["--flash-attn", "on"]
