# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_llama_rpc_worker_rules.py: the llama_rpc_worker preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _render
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_rpc_worker_rules import (
    settings_problems,
)

# A few entries of the flags the pinned build's ggml-rpc-server --help lists
# (tests/unit/plugins/module_utils/fixtures/llama.cpp/).
RPC_FLAGS = {"-t": True, "--threads": True, "-d": True, "--device": True, "-H": True, "--host": True, "-p": True,
             "--port": True, "-c": False, "--cache": False, "-h": False, "--help": False}  # fmt: skip


def settings(**overrides):
    base = {
        "llama_rpc_bind_address": "10.10.0.11",
        "llama_rpc_port": 50052,
        "llama_rpc_per_device": False,
        "llama_rpc_devices": [],
        "llama_rpc_threads": 0,
        "llama_rpc_extra_args": [],
        "llama_rpc_allowed_sources": ["10.10.0.1"],
        "llama_rpc_firewall": True,
        "llama_rpc_firewall_action": "drop",
        "gpufleet_fabric_subnet": "10.10.0.0/24",
        "llama_cpp_gpu_count": 8,
        "llama_cpp_rpc_server_flags": {},
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"llama_rpc_per_device": True, "llama_rpc_devices": ["CUDA0", "CUDA1"], "llama_rpc_threads": "8"},
        {"llama_rpc_firewall": False, "llama_rpc_allowed_sources": [], "llama_rpc_firewall_action": "reject"},
        {"llama_rpc_firewall": "no", "llama_rpc_allowed_sources": []},
        {"llama_rpc_extra_args": ["-h"], "llama_cpp_rpc_server_flags": RPC_FLAGS},
        {"gpufleet_fabric_subnet": "", "llama_rpc_port": "50052"},
        {"llama_rpc_per_device": True, "llama_rpc_port": 65528},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"llama_rpc_firewall_action": "accept"}, "llama_rpc_firewall_action=accept must be drop or reject"),
        ({"llama_rpc_threads": "all"}, "llama_rpc_threads=all must be a whole number, 0 for all CPUs"),
        ({"llama_rpc_threads": -2}, "llama_rpc_threads=-2 must be a whole number"),
        ({"llama_rpc_allowed_sources": []}, "llama_rpc_allowed_sources is empty with the firewall on"),
        ({"llama_rpc_firewall": "yes", "llama_rpc_allowed_sources": []}, "llama_rpc_allowed_sources is empty"),
        ({"llama_rpc_allowed_sources": ["beef"]}, "llama_rpc_allowed_sources[0]='beef' is not an IP address"),
        ({"llama_rpc_bind_address": ""}, "llama_rpc_bind_address='' is not an IP address"),
        ({"llama_rpc_bind_address": "0.0.0.0"}, "llama_rpc_bind_address=0.0.0.0 would expose the unauthenticated"),
        ({"llama_rpc_bind_address": "10.99.0.11"}, "llama_rpc_bind_address=10.99.0.11 is outside the fabric subnet"),
        (
            {"llama_rpc_bind_address": "fd00::11", "gpufleet_fabric_subnet": ""},
            "llama_rpc_bind_address=fd00::11 is IPv6",
        ),
        (
            {"llama_rpc_devices": ['CUDA0" --foo "']},
            "llama_rpc_devices[0]='CUDA0\" --foo \"' is not a ggml device name",
        ),
        ({"llama_rpc_port": 0}, "llama_rpc_port=0 is not a TCP port; set it to 1..65535"),
        ({"llama_rpc_port": "fifty"}, "llama_rpc_port='fifty' is not a TCP port"),
        ({"llama_rpc_per_device": True, "llama_rpc_port": 65530}, "llama_rpc_port=65530 leaves no room for 8 servers"),
        ({"llama_rpc_extra_args": ["--port=50060"]}, "llama_rpc_extra_args has --port, which the role sets from"),
        ({"llama_rpc_extra_args": ["x\nExecStartPre=+/bin/sh -c id"]}, "llama_rpc_extra_args[0]="),
        ({"llama_rpc_extra_args": "--metrics"}, "llama_rpc_extra_args must be a list of arguments"),
        (
            {"llama_rpc_extra_args": ["--thread", "4"], "llama_cpp_rpc_server_flags": RPC_FLAGS},
            "llama_rpc_extra_args[0]='--thread': --thread is not a flag of the RPC server being deployed",
        ),
    ],
)
def test_each_problem_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(settings(**overrides))
    assert len(problems) == 1, problems
    assert problems[0].startswith(message)


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(
            llama_rpc_firewall_action="accept",
            llama_rpc_bind_address="0.0.0.0",
            llama_rpc_devices=["CUDA 0"],
            llama_rpc_extra_args=["--host", "10.0.0.1"],
        )
    )
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "llama_rpc_firewall_action",
        "llama_rpc_bind_address",
        "llama_rpc_devices[0]",
        "llama_rpc_extra_args",
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), ("yes", True), ("On", True), ("1", True), (1, True), (1.0, True), (False, False), ("no", False),
     ("maybe", False), (None, False), (2, False), ([], False)],
)  # fmt: skip
def test_as_bool_reads_values_as_ansible_bool_filter_does(value, expected):
    assert _render.ansible_bool(value) is expected


@pytest.mark.parametrize(("value", "expected"), [(8, 8), ("8", 8), ("8.7", 8), (None, 0), ("many", 0), ([], 0)])
def test_as_int_reads_values_as_jinja_int_filter_does(value, expected):
    assert _render.jinja_int(value) == expected
