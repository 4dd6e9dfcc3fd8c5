# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the llama_rpc_instances, llama_server_argv and llama_cpp_help_dialect filters."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import (
    _llama_cpp_help_dialect as help_filter,
)
from ansible_collections.gpufleet.inference.plugins.filter import (
    _llama_rpc_instances as rpc_filter,
)
from ansible_collections.gpufleet.inference.plugins.filter import (
    _llama_server_argv as argv_filter,
)

llama_rpc_instances = rpc_filter.llama_rpc_instances
llama_server_argv = argv_filter.llama_server_argv
llama_cpp_help_dialect = help_filter.llama_cpp_help_dialect

NEW = {"rpc_server_binary": "ggml-rpc-server", "flash_attn_value": True, "load_mode": True, "legacy_mmap_flags": False}
SETTINGS = {"model_path": "/models/m.gguf", "host": "127.0.0.1", "port": 8080, "n_gpu_layers": 99}
SUBNET = "10.10.0.0/24"
# Lines of `llama-server --help` (llama.cpp 0c1e570), copied verbatim.
NEW_HELP = """\
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
                                        (env: LLAMA_ARG_FLASH_ATTN)
-lm,   --load-mode MODE                 model loading mode (default: auto)
"""
OLD_HELP = """\
-fa,   --flash-attn                     enable Flash Attention (default: disabled)
--no-mmap                               do not memory-map model (slower load but may reduce pageouts if not
"""


def error_of(function, *args, **kwargs):
    with pytest.raises(AnsibleFilterError) as excinfo:
        function(*args, **kwargs)
    return str(excinfo.value)


def test_filters_are_registered():
    assert rpc_filter.FilterModule().filters() == {"_llama_rpc_instances": llama_rpc_instances}
    assert argv_filter.FilterModule().filters() == {"_llama_server_argv": llama_server_argv}
    assert help_filter.FilterModule().filters() == {"_llama_cpp_help_dialect": llama_cpp_help_dialect}


# llama_rpc_instances


def test_rpc_instances_one_per_gpu():
    instances = llama_rpc_instances("10.10.0.11", 50052, per_device=True, gpu_count=8, subnet=SUBNET)
    assert instances == [
        {"port": 50052 + i, "device": f"CUDA{i}", "endpoint": f"10.10.0.11:{50052 + i}"} for i in range(8)
    ]


def test_rpc_instances_single_server_by_default():
    assert llama_rpc_instances("10.10.0.11", 50052, gpu_count=8) == [
        {"port": 50052, "device": "", "endpoint": "10.10.0.11:50052"}
    ]


def test_rpc_instances_refuse_ipv6():
    # ggml-rpc.cpp parse_endpoint() splits HOST:PORT at the first ':'.
    assert error_of(llama_rpc_instances, "fd00::11", 50052, subnet="fd00::/64") == (
        "llama_rpc_bind_address=fd00::11 is IPv6; ggml-rpc reads --rpc endpoints as HOST:PORT split at the first ':', "
        "so IPv6 endpoints cannot work. Use the node's IPv4 fabric address"
    )


def test_rpc_instances_outside_subnet():
    assert error_of(llama_rpc_instances, "192.168.1.5", 50052, subnet=SUBNET) == (
        "llama_rpc_bind_address=192.168.1.5 is outside the fabric subnet 10.10.0.0/24 (gpufleet_fabric_subnet); "
        "the RPC traffic must stay on the fabric. Use the node's fabric address"
    )


def test_rpc_instances_unspecified_address():
    assert error_of(llama_rpc_instances, "0.0.0.0", 50052) == (
        "llama_rpc_bind_address=0.0.0.0 would expose the unauthenticated RPC server on every interface; "
        "set it to the node's fabric address"
    )


def test_rpc_instances_hostname():
    assert error_of(llama_rpc_instances, "worker1", 50052) == (
        "llama_rpc_bind_address='worker1' is not an IP address; set it to the node's fabric address"
    )


@pytest.mark.parametrize("port", [0, 65536, -5])
def test_rpc_instances_bad_port(port):
    assert error_of(llama_rpc_instances, "10.10.0.11", port) == (
        f"llama_rpc_port={port!r} is not a TCP port; set it to 1..65535"
    )


def test_rpc_instances_ports_run_past_65535():
    assert error_of(llama_rpc_instances, "10.10.0.11", 65530, per_device=True, gpu_count=8) == (
        "llama_rpc_port=65530 leaves no room for 8 servers"
    )
    assert llama_rpc_instances("10.10.0.11", 65528, per_device=True, gpu_count=8)[-1]["port"] == 65535


def test_rpc_instances_non_numeric_port():
    assert "llama_rpc_port='fifty' is not a TCP port" in error_of(llama_rpc_instances, "10.10.0.11", "fifty")


@pytest.mark.parametrize("device", ['CUDA0" --foo "', "CUDA0\nExecStartPre=+/bin/id", "CUDA0\n", "CUDA 0", "", 0])
def test_rpc_instances_refuse_a_device_that_is_not_a_ggml_name(device):
    # Rendered into ExecStart as --device "<name>": a quote or a newline would add arguments or directives.
    message = error_of(llama_rpc_instances, "10.10.0.11", 50052, per_device=True, devices=["CUDA1", device])
    assert f"llama_rpc_devices[1]={device!r} is not a ggml device name" in message
    assert "llama_rpc_devices[0]" not in message


@pytest.mark.parametrize("source", ["beef", "10.10.0.0/24", "coordinator.example", "1.2.3", "10.10.0.1\n"])
def test_rpc_instances_refuse_a_source_that_is_not_an_ip(source):
    # 'beef' passed the old character check and was then left out of both nftables sets.
    message = error_of(llama_rpc_instances, "10.10.0.11", 50052, sources=["10.10.0.1", source])
    assert f"llama_rpc_allowed_sources[1]={source!r} is not an IP address" in message
    assert "llama_rpc_allowed_sources[0]" not in message


def test_rpc_instances_accept_v4_and_v6_sources_and_real_devices():
    instances = llama_rpc_instances(
        "10.10.0.11", 50052, per_device=True, devices=["CUDA0", "Vulkan1"], sources=["10.10.0.1", "fd00::1"]
    )
    assert [i["device"] for i in instances] == ["CUDA0", "Vulkan1"]


# llama_server_argv


@pytest.mark.parametrize(
    ("key", "value", "origin"),
    [
        ("extra_args", ["--alias", "x\nExecStartPre=+/bin/sh -c id"], "llama_server_extra_args[1]"),
        ("override_tensor", ["blk\\.1\\.=CPU\r"], "llama_server_override_tensor[0]"),
        ("model_path", "/models/m.gguf\nExecStartPre=+/bin/id", "llama_server_model_path"),
    ],
)
def test_argv_refuses_control_characters(key, value, origin):
    # ExecStart is one line of the unit: a newline inside an argument starts a directive of its own.
    message = error_of(
        llama_server_argv, dict(SETTINGS, **{key: value}), NEW, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]]
    )
    assert origin in message and "control character" in message


def test_argv_joins_endpoints_of_all_workers_in_order():
    argv = llama_server_argv(
        SETTINGS,
        NEW,
        workers=["w2", "w1"],
        endpoints=[["10.10.0.12:50052", "10.10.0.12:50053"], ["10.10.0.11:50052"]],
        addresses=[["10.10.0.12"], ["10.10.0.11"]],
        subnet=SUBNET,
    )
    assert argv == [
        "--model", "/models/m.gguf",
        "--rpc", "10.10.0.12:50052,10.10.0.12:50053,10.10.0.11:50052",
        "--host", "127.0.0.1", "--port", "8080",
        "--n-gpu-layers", "99",
    ]  # fmt: skip


def test_argv_ignores_an_rpc_key_in_the_settings():
    argv = llama_server_argv(
        dict(SETTINGS, rpc=["6.6.6.6:1"]), NEW, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]], SUBNET
    )
    assert argv[2:4] == ["--rpc", "10.10.0.11:50052"]


def test_argv_lists_every_problem():
    msg = error_of(
        llama_server_argv, dict(SETTINGS, flash_attn="yes"), NEW, [], [], [], subnet=SUBNET
    )  # no workers, and a bad value
    assert msg == (
        "llama_server settings are invalid:\n"
        "- the coordinator has no RPC workers: the llama_rpc_workers group is empty or its hosts did not run "
        "the llama_rpc_worker role. Add the workers to the llama_rpc_workers group\n"
        "- llama_server_flash_attn='yes' is invalid; use one of on, off, auto"
    )


def test_argv_no_workers_and_a_bare_fa():
    msg = error_of(llama_server_argv, dict(SETTINGS, extra_args=["-fa"]), NEW, None, None, None)
    lines = msg.splitlines()
    assert lines[0] == "llama_server settings are invalid:"
    assert len(lines) == 3
    assert lines[1].startswith("- the coordinator has no RPC workers")
    assert lines[2] == (
        "- llama_server_extra_args has a bare -fa: this llama.cpp's -fa takes on|off|auto. "
        "Remove it and set llama_server_flash_attn: on"
    )


def test_argv_worker_outside_subnet_names_the_worker():
    msg = error_of(
        llama_server_argv,
        SETTINGS,
        NEW,
        ["w1", "w2"],
        [["10.10.0.11:50052"], ["192.168.0.12:50052"]],
        [["10.10.0.11"], ["192.168.0.12"]],
        subnet=SUBNET,
    )
    assert msg == (
        "llama_server settings are invalid:\n"
        "- llama_rpc_bind_address of w2=192.168.0.12 is outside the fabric subnet 10.10.0.0/24 "
        "(gpufleet_fabric_subnet); the RPC traffic must stay on the fabric. Use the node's fabric address"
    )


def test_argv_without_subnet_skips_the_check():
    argv = llama_server_argv(SETTINGS, NEW, ["w1"], [["192.168.0.12:50052"]], [["192.168.0.12"]])
    assert argv[2:4] == ["--rpc", "192.168.0.12:50052"]


# llama_cpp_help_dialect


def test_help_dialect_current_build():
    assert llama_cpp_help_dialect(NEW_HELP, "ggml-rpc-server") == NEW


def test_help_dialect_old_build():
    assert llama_cpp_help_dialect(OLD_HELP, "rpc-server") == {
        "rpc_server_binary": "rpc-server",
        "flash_attn_value": False,
        "load_mode": False,
        "legacy_mmap_flags": True,
    }


@pytest.mark.parametrize("text", [None, ""])
def test_help_dialect_of_nothing(text):
    assert llama_cpp_help_dialect(text) == {
        "rpc_server_binary": "",
        "flash_attn_value": False,
        "load_mode": False,
        "legacy_mmap_flags": False,
    }


def test_argv_refuses_lists_of_different_lengths():
    msg = error_of(llama_server_argv, SETTINGS, NEW, ["w1", "w2"], [["10.10.0.11:50052"]], [["10.10.0.11"]])
    assert msg == ("llama_server_argv: workers, endpoints and addresses must have one entry per worker, got 2, 1 and 1")


def test_argv_refuses_an_empty_host():
    msg = error_of(llama_server_argv, dict(SETTINGS, host=""), NEW, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]])
    assert msg == (
        "llama_server settings are invalid:\n"
        "- llama_server_host is empty; set it to 127.0.0.1, or to an address clients reach"
    )
