# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_llama_cpp.py: flag dialects, llama-server arguments, RPC planning."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import (
    MANAGED_FLAGS,
    check_fabric_address,
    cuda_architecture,
    cuda_architectures,
    dialect_from_help,
    dialect_from_source,
    format_problems,
    rpc_address_problem,
    rpc_endpoint,
    rpc_extra_args_problems,
    rpc_instances,
    rpc_port_problem,
    rpc_problems,
    server_argv,
    server_plan,
)

# Excerpts of llama.cpp at 0c1e570 as vendored in the llama-cpp-python 0.3.36 sdist
# (common/arg.cpp, tools/rpc/CMakeLists.txt), copied verbatim.
NEW_ARG_CPP = """\
    add_opt(common_arg({ "-fa", "--flash-attn" }, "[on|off|auto]",
                       string_format("set Flash Attention use ('on', 'off', or 'auto', default: '%s')",
                                     llama_flash_attn_type_name(params.flash_attn_type)),
                       [](common_params & params, const std::string & value) {
                           if (is_truthy(value)) {
                               params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    add_opt(common_arg(
        {"-lm", "--load-mode"}, "MODE",
        "model loading mode (default: auto)\\n"
        "- auto: mmap, unless a device does not support it\\n"
        "- none: no special loading mode\\n"
        "- mmap: memory-map model (if mmap disabled, slower load but may reduce pageouts if not using mlock)\\n"
        "- mlock: force system to keep model in RAM rather than swapping or compressing\\n"
        "- mmap+mlock: mmap + force system to keep model in RAM rather than swapping or compressing\\n"
        "- dio: use DirectIO if available\\n",
"""
NEW_RPC_CMAKELISTS = """\
set(TARGET ggml-rpc-server)
add_executable(${TARGET} rpc-server.cpp)
target_link_libraries(${TARGET} PRIVATE ggml)
target_compile_features(${TARGET} PRIVATE cxx_std_17)
"""
# The same declarations before -fa took a value and before --load-mode replaced the mmap switches.
OLD_ARG_CPP = """\
    add_opt(common_arg(
        {"-fa", "--flash-attn"},
        string_format("enable Flash Attention (default: %s)", params.flash_attn ? "enabled" : "disabled"),
        [](common_params & params) {
            params.flash_attn = true;
        }
    ).set_env("LLAMA_ARG_FLASH_ATTN"));
    add_opt(common_arg(
        {"--mlock"},
        "force system to keep model in RAM rather than swapping or compressing",
        [](common_params & params) {
            params.use_mlock = true;
        }
    ).set_env("LLAMA_ARG_MLOCK"));
    add_opt(common_arg(
        {"--no-mmap"},
        "do not memory-map model (slower load but may reduce pageouts if not using mlock)",
        [](common_params & params) {
            params.use_mmap = false;
        }
    ).set_env("LLAMA_ARG_NO_MMAP"));
"""
OLD_RPC_CMAKELISTS = """\
set(TARGET rpc-server)
add_executable(${TARGET} rpc-server.cpp)
target_link_libraries(${TARGET} PRIVATE ggml)
"""
# Lines of `llama-server --help` from the same build, copied verbatim.
NEW_HELP = """\
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
                                        (env: LLAMA_ARG_FLASH_ATTN)
--rpc SERVERS                           comma-separated list of RPC servers (host:port)
                                        (env: LLAMA_ARG_RPC)
-lm,   --load-mode MODE                 model loading mode (default: auto)
                                        - auto: mmap, unless a device does not support it
                                        - none: no special loading mode
                                        - mmap: memory-map model (if mmap disabled, slower load but may reduce
                                        pageouts if not using mlock)
                                        - mlock: force system to keep model in RAM rather than swapping or
                                        compressing
"""
OLD_HELP = """\
-fa,   --flash-attn                     enable Flash Attention (default: disabled)
                                        (env: LLAMA_ARG_FLASH_ATTN)
--mlock                                 force system to keep model in RAM rather than swapping or compressing
                                        (env: LLAMA_ARG_MLOCK)
--no-mmap                               do not memory-map model (slower load but may reduce pageouts if not
                                        using mlock)
                                        (env: LLAMA_ARG_NO_MMAP)
--rpc SERVERS                           comma-separated list of RPC servers (host:port)
"""

NEW = dialect_from_source(NEW_ARG_CPP, NEW_RPC_CMAKELISTS)
OLD = dialect_from_source(OLD_ARG_CPP, OLD_RPC_CMAKELISTS)

BASE = {"model_path": "/models/m.gguf", "host": "127.0.0.1", "port": 8080}


def argv_of(dialect=None, **settings):
    argv, problems = server_argv(dict(BASE, **settings), dialect or NEW)
    assert problems == []
    return argv


def problems_of(dialect=None, **settings):
    _argv, problems = server_argv(dict(BASE, **settings), dialect or NEW)
    return problems


# cuda_architecture(s)


@pytest.mark.parametrize(
    "cap, arch",
    [("12.0", "120"), ("9.0", "90"), ("8.9", "89"), ("8.6", "86"), ("8.0", "80"), (" 7.5 ", "75"), ("10.0", "100")],
)
def test_cuda_architecture(cap, arch):
    assert cuda_architecture(cap) == arch


@pytest.mark.parametrize("cap", ["", "12", "sm_90", "9.0a", "N/A", "[N/A]", "9.0.1", "9,0", None])
def test_cuda_architecture_rejects_non_capabilities(cap):
    with pytest.raises(ValueError) as excinfo:
        cuda_architecture(cap)
    assert str(excinfo.value) == f"not a CUDA compute capability: {cap!r}"


def test_cuda_architectures_dedupes_and_sorts_numerically():
    assert cuda_architectures(["8.6", "12.0", "8.6", "9.0"]) == ["86", "90", "120"]
    assert cuda_architectures(["12.0", "12.0"]) == ["120"]
    assert cuda_architectures([]) == []


def test_cuda_architectures_raises_on_any_bad_value():
    with pytest.raises(ValueError):
        cuda_architectures(["9.0", "N/A"])


# dialects


def test_dialect_of_current_source():
    assert NEW == {
        "rpc_server_binary": "ggml-rpc-server",
        "flash_attn_value": True,
        "load_mode": True,
        "legacy_mmap_flags": False,
    }


def test_dialect_of_old_source():
    assert OLD == {
        "rpc_server_binary": "rpc-server",
        "flash_attn_value": False,
        "load_mode": False,
        "legacy_mmap_flags": True,
    }


def test_dialect_without_rpc_cmakelists_has_no_binary():
    assert dialect_from_source(NEW_ARG_CPP, "")["rpc_server_binary"] == ""
    assert dialect_from_source(NEW_ARG_CPP, None)["rpc_server_binary"] == ""


def test_dialect_target_spacing_is_tolerated():
    assert dialect_from_source("", "set( TARGET  ggml-rpc-server )\n")["rpc_server_binary"] == "ggml-rpc-server"


def test_dialect_of_current_help():
    assert dialect_from_help(NEW_HELP, "ggml-rpc-server") == {
        "rpc_server_binary": "ggml-rpc-server",
        "flash_attn_value": True,
        "load_mode": True,
        "legacy_mmap_flags": False,
    }


def test_dialect_of_old_help():
    assert dialect_from_help(OLD_HELP) == {
        "rpc_server_binary": "",
        "flash_attn_value": False,
        "load_mode": False,
        "legacy_mmap_flags": True,
    }


def test_help_and_source_agree():
    assert dialect_from_help(NEW_HELP, NEW["rpc_server_binary"]) == NEW
    assert dialect_from_help(OLD_HELP, OLD["rpc_server_binary"]) == OLD


# server_argv: the happy path


def test_full_argv_on_current_dialect():
    settings = {
        "model_path": "/models/m.gguf",
        "rpc": ["10.10.0.11:50052", "10.10.0.12:50052"],
        "host": "0.0.0.0",
        "port": 8080,
        "n_gpu_layers": 99,
        "n_cpu_moe": 4,
        "override_tensor": [r"blk\.(1[0-9])\.ffn_.*_exps\.=CPU"],
        "ctx_size": 8192,
        "parallel": 2,
        "load_mode": "mmap+mlock",
        "flash_attn": "on",
        "extra_args": ["--metrics", "--alias", "tiny"],
    }
    argv, problems = server_argv(settings, NEW)
    assert problems == []
    assert argv == [
        "--model", "/models/m.gguf",
        "--rpc", "10.10.0.11:50052,10.10.0.12:50052",
        "--host", "0.0.0.0",
        "--port", "8080",
        "--n-gpu-layers", "99",
        "--n-cpu-moe", "4",
        "--ctx-size", "8192",
        "--parallel", "2",
        "--override-tensor", r"blk\.(1[0-9])\.ffn_.*_exps\.=CPU",
        "--flash-attn", "on",
        "--load-mode", "mmap+mlock",
        "--metrics", "--alias", "tiny",
    ]  # fmt: skip


def test_minimal_argv_has_no_optional_flags():
    assert argv_of() == ["--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", "8080"]


def test_string_numbers_from_templates_are_accepted():
    argv = argv_of(port="8080", n_gpu_layers="99", n_cpu_moe="0", ctx_size="0", parallel="1")
    assert argv == [
        "--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", "8080",
        "--n-gpu-layers", "99", "--n-cpu-moe", "0", "--ctx-size", "0", "--parallel", "1",
    ]  # fmt: skip


@pytest.mark.parametrize("ngl", ["auto", "all", 0, "0"])
def test_n_gpu_layers_words_and_zero_are_accepted(ngl):
    assert argv_of(n_gpu_layers=ngl)[-2:] == ["--n-gpu-layers", str(ngl)]


def test_empty_rpc_list_adds_no_rpc_flag():
    assert "--rpc" not in argv_of(rpc=[])


# server_argv: one problem each


def test_empty_model_path():
    argv, problems = server_argv(dict(BASE, model_path=""), NEW)
    assert problems == ["llama_server_model_path is empty; set it to the GGUF path on the coordinator"]
    assert argv[:2] == ["--model", ""]
    assert problems_of(model_path=None) == problems


@pytest.mark.parametrize("port", [0, 65536, -1, "http", None, "80a", True, 8080.0])
def test_bad_port(port):
    assert problems_of(port=port) == [f"llama_server_port={port!r} is not a TCP port; set it to 1..65535"]


@pytest.mark.parametrize("port", [1, 65535, "443"])
def test_edge_ports_are_fine(port):
    assert problems_of(port=port) == []


@pytest.mark.parametrize("ngl", [-1, "-1", "max", "99.5", True, ""])
def test_bad_n_gpu_layers(ngl):
    argv, problems = server_argv(dict(BASE, n_gpu_layers=ngl), NEW)
    assert problems == [f"llama_server_n_gpu_layers={ngl!r} is invalid; use an integer >= 0, 'auto' or 'all'"]
    assert "--n-gpu-layers" not in argv


@pytest.mark.parametrize(
    "name, value, minimum",
    [
        ("n_cpu_moe", -1, 0),
        ("n_cpu_moe", "x", 0),
        ("ctx_size", -4096, 0),
        ("parallel", 0, 1),
        ("parallel", "0", 1),
        ("parallel", False, 1),
        ("parallel", 1.5, 1),
    ],
)
def test_bad_integer_settings(name, value, minimum):
    assert problems_of(**{name: value}) == [f"llama_server_{name}={value!r} is invalid; use an integer >= {minimum}"]


def test_override_tensor_without_equals():
    assert problems_of(override_tensor=["blk.*CPU", "=CPU", "blk="]) == [
        f"llama_server_override_tensor entry {rule!r} is not '<tensor regex>=<buffer type>'; "
        "for example 'blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU'"
        for rule in ("blk.*CPU", "=CPU", "blk=")
    ]


def test_override_tensor_with_bad_regex():
    problems = problems_of(override_tensor=["blk\\.(1[0-9]\\.ffn=CPU"])
    assert len(problems) == 1
    assert problems[0].startswith("llama_server_override_tensor entry 'blk\\\\.(1[0-9]\\\\.ffn=CPU' has a bad regex: ")
    assert "missing ), unterminated subpattern" in problems[0]


def test_override_tensor_entries_each_get_a_flag():
    argv = argv_of(override_tensor=["a=CPU", "b=CUDA0"])
    assert argv[-4:] == ["--override-tensor", "a=CPU", "--override-tensor", "b=CUDA0"]


# flash_attn


@pytest.mark.parametrize(
    "value, tail",
    [("on", ["--flash-attn", "on"]), ("off", ["--flash-attn", "off"]), ("auto", ["--flash-attn", "auto"]),
     (True, ["--flash-attn", "on"]), (False, ["--flash-attn", "off"])],
)  # fmt: skip
def test_flash_attn_on_current_dialect(value, tail):
    assert argv_of(flash_attn=value)[6:] == tail


@pytest.mark.parametrize("value, tail", [("on", ["--flash-attn"]), (True, ["--flash-attn"]), ("off", []), (False, [])])
def test_flash_attn_on_old_dialect_is_a_bare_switch(value, tail):
    assert argv_of(OLD, flash_attn=value)[6:] == tail


def test_flash_attn_auto_on_old_dialect():
    assert problems_of(OLD, flash_attn="auto") == [
        "llama_server_flash_attn=auto needs a build whose -fa takes on|off|auto; this one has a bare -fa. "
        "Use on or off, or build a newer llama.cpp"
    ]


@pytest.mark.parametrize("dialect", [NEW, OLD])
@pytest.mark.parametrize("value", ["yes", "enabled", "ON", ""])
def test_flash_attn_bad_value(dialect, value):
    assert problems_of(dialect, flash_attn=value) == [
        f"llama_server_flash_attn={value!r} is invalid; use one of on, off, auto"
    ]


def test_flash_attn_unhashable_value_is_a_problem():
    assert problems_of(flash_attn=["on"]) == ["llama_server_flash_attn=['on'] is invalid; use one of on, off, auto"]


def test_flash_attn_none_adds_nothing():
    assert argv_of(flash_attn=None) == argv_of(OLD, flash_attn=None) == argv_of()


# load_mode


@pytest.mark.parametrize("mode", ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"])
def test_load_mode_on_current_dialect(mode):
    assert argv_of(load_mode=mode)[6:] == ["--load-mode", mode]


@pytest.mark.parametrize(
    "mode, tail",
    [("auto", []), ("mmap", []), ("none", ["--no-mmap"]), ("mmap+mlock", ["--mlock"])],
)
def test_load_mode_on_old_dialect_maps_to_mmap_switches(mode, tail):
    assert argv_of(OLD, load_mode=mode)[6:] == tail


def test_load_mode_mlock_on_old_dialect_disables_mmap():
    assert argv_of(OLD, load_mode="mlock")[6:] == ["--no-mmap", "--mlock"]


def test_load_mode_dio_on_old_dialect():
    assert problems_of(OLD, load_mode="dio") == [
        "llama_server_load_mode=dio needs a build with --load-mode; this one only has --no-mmap/--mlock"
    ]


@pytest.mark.parametrize("dialect", [NEW, OLD])
@pytest.mark.parametrize("mode", ["mmap,mlock", "MMAP", "no-mmap", ""])
def test_load_mode_bad_value(dialect, mode):
    assert problems_of(dialect, load_mode=mode) == [
        f"llama_server_load_mode={mode!r} is invalid; use one of auto, none, mmap, mlock, mmap+mlock, dio"
    ]


# extra_args


@pytest.mark.parametrize("flag", ["-fa", "--flash-attn"])
def test_bare_fa_on_current_dialect(flag):
    assert problems_of(extra_args=["--metrics", flag]) == [
        f"llama_server_extra_args has a bare {flag}: this llama.cpp's -fa takes on|off|auto. "
        "Remove it and set llama_server_flash_attn: on"
    ]
    # Followed by something that is not a value, it is still bare.
    assert len(problems_of(extra_args=[flag, "--metrics"])) == 1
    assert f"has a bare {flag}" in problems_of(extra_args=[flag, "--metrics"])[0]


def test_fa_with_a_value_is_refused_as_managed():
    # '-fa on' is valid llama.cpp, but the role owns -fa: the answer is the variable, not the value.
    assert problems_of(extra_args=["-fa", "on"]) == [
        "llama_server_extra_args has -fa, which the role sets from llama_server_flash_attn; "
        "remove it and set that instead"
    ]


def test_bare_fa_on_old_dialect_is_refused_as_managed():
    assert problems_of(OLD, extra_args=["-fa"]) == [
        "llama_server_extra_args has -fa, which the role sets from llama_server_flash_attn; "
        "remove it and set that instead"
    ]


@pytest.mark.parametrize("flag, replacement", [("--no-mmap", "none"), ("--mmap", "mmap")])
def test_legacy_mmap_flags_on_load_mode_dialect(flag, replacement):
    assert problems_of(extra_args=[flag]) == [
        f"llama_server_extra_args has {flag}, which this llama.cpp replaced with --load-mode. "
        f"Remove it and set llama_server_load_mode: {replacement}"
    ]


def test_mlock_on_load_mode_dialect_is_refused():
    problems = problems_of(extra_args=["--mlock"])
    assert len(problems) == 1
    assert problems[0].startswith(
        "llama_server_extra_args has --mlock, which this llama.cpp replaced with --load-mode. "
        "Remove it and set llama_server_load_mode: "
    )


def test_mlock_suggests_mmap_plus_mlock():
    assert problems_of(extra_args=["--mlock"]) == [
        "llama_server_extra_args has --mlock, which this llama.cpp replaced with --load-mode. "
        "Remove it and set llama_server_load_mode: mmap+mlock"
    ]


def test_legacy_mmap_flags_pass_on_old_dialect():
    assert argv_of(OLD, extra_args=["--no-mmap", "--mlock"])[6:] == ["--no-mmap", "--mlock"]


@pytest.mark.parametrize(
    "arg, variable",
    [
        ("--rpc", "the llama_rpc_workers group"),
        ("--api-key", "llama_server_api_key"),
        ("--api-key-file", "llama_server_api_key"),
        ("--api-key=secret", "llama_server_api_key"),
        ("-m", "llama_server_model_path"),
        ("--port", "llama_server_port"),
        ("-ngl", "llama_server_n_gpu_layers"),
        ("-ot", "llama_server_override_tensor"),
        ("-lm", "llama_server_load_mode"),
    ],
)
def test_managed_flags_are_refused_naming_the_variable(arg, variable):
    flag = arg.split("=")[0]
    assert MANAGED_FLAGS[flag] == variable
    assert problems_of(extra_args=[arg, "x"]) == [
        f"llama_server_extra_args has {flag}, which the role sets from {variable}; remove it and set that instead"
    ]


def test_refused_api_key_value_is_not_echoed():
    problems = problems_of(extra_args=["--api-key=s3cr3t"])
    assert len(problems) == 1
    assert "s3cr3t" not in problems[0]


@pytest.mark.parametrize("extra", ["--metrics", {"--metrics": True}, 5])
def test_extra_args_must_be_a_list(extra):
    argv, problems = server_argv(dict(BASE, extra_args=extra), NEW)
    assert problems == [f"llama_server_extra_args must be a list of arguments, got {extra!r}"]
    assert argv == ["--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", "8080"]


def test_extra_args_are_stringified():
    assert argv_of(extra_args=["--threads", 8])[6:] == ["--threads", "8"]


def test_all_problems_are_reported_together():
    problems = problems_of(
        OLD, model_path="", port=0, parallel=0, flash_attn="auto", load_mode="dio", extra_args=["--rpc"]
    )
    assert [p.split("=")[0].split(" ")[0] for p in problems] == [
        "llama_server_model_path",
        "llama_server_port",
        "llama_server_parallel",
        "llama_server_flash_attn",
        "llama_server_load_mode",
        "llama_server_extra_args",
    ]


def test_format_problems():
    assert format_problems(["a is bad", "b is bad"]) == "- a is bad\n- b is bad"
    assert format_problems([]) == ""


# RPC planning


def test_rpc_instances_per_device_from_gpu_count():
    assert rpc_instances([], True, 8, 50052) == [{"port": 50052 + i, "device": f"CUDA{i}"} for i in range(8)]


def test_rpc_instances_explicit_devices():
    assert rpc_instances(["CUDA1", "CUDA3"], True, 8, "50100") == [
        {"port": 50100, "device": "CUDA1"},
        {"port": 50101, "device": "CUDA3"},
    ]


def test_rpc_instances_single_server():
    assert rpc_instances([], False, 8, 50052) == [{"port": 50052, "device": ""}]
    assert rpc_instances(["CUDA0", "CUDA1"], False, 2, 50052) == [{"port": 50052, "device": "CUDA0,CUDA1"}]
    assert rpc_instances(None, False, 0, 50052) == [{"port": 50052, "device": ""}]


def test_rpc_instances_per_device_without_gpus_is_one_server():
    assert rpc_instances([], True, 0, 50052) == [{"port": 50052, "device": ""}]
    assert rpc_instances(None, True, None, 50052) == [{"port": 50052, "device": ""}]


@pytest.mark.parametrize(
    "address, port, endpoint",
    [
        ("10.10.0.11", 50052, "10.10.0.11:50052"),
        ("::1", 50052, "[::1]:50052"),
        ("fd00:0:0:0::0a", "50053", "[fd00::a]:50053"),
    ],
)
def test_rpc_endpoint(address, port, endpoint):
    assert rpc_endpoint(address, port) == endpoint


def test_rpc_endpoint_needs_an_ip():
    with pytest.raises(ValueError):
        rpc_endpoint("worker1", 50052)


@pytest.mark.parametrize("address", ["worker1.example", "", "10.10.0", None])
def test_fabric_address_not_an_ip(address):
    assert check_fabric_address("llama_rpc_bind_address", address, "10.10.0.0/24") == (
        f"llama_rpc_bind_address={address!r} is not an IP address; set it to the node's fabric address"
    )


@pytest.mark.parametrize("address, shown", [("0.0.0.0", "0.0.0.0"), ("::", "::"), ("0:0::0", "::")])
def test_fabric_address_unspecified(address, shown):
    expected = (
        f"llama_rpc_bind_address={shown} would expose the unauthenticated RPC server on every interface; "
        "set it to the node's fabric address"
    )
    assert check_fabric_address("llama_rpc_bind_address", address, "") == expected
    assert check_fabric_address("llama_rpc_bind_address", address, "10.10.0.0/24") == expected


@pytest.mark.parametrize(
    "address, subnet, network",
    [
        ("192.168.1.5", "10.10.0.0/24", "10.10.0.0/24"),
        ("10.10.1.5", "10.10.0.7/24", "10.10.0.0/24"),
        ("fd00::5", "10.10.0.0/24", "10.10.0.0/24"),
        ("10.10.0.5", "fd00::/64", "fd00::/64"),
    ],
)
def test_fabric_address_outside_subnet(address, subnet, network):
    assert check_fabric_address("llama_rpc_bind_address", address, subnet) == (
        f"llama_rpc_bind_address={address} is outside the fabric subnet {network} (gpufleet_fabric_subnet); "
        "the RPC traffic must stay on the fabric. Use the node's fabric address"
    )


@pytest.mark.parametrize(
    "address, subnet",
    [("10.10.0.11", "10.10.0.0/24"), ("10.10.0.11", ""), ("10.10.0.11", None), ("fd00::11", "fd00::/64")],
)
def test_fabric_address_inside_subnet(address, subnet):
    assert check_fabric_address("llama_rpc_bind_address", address, subnet) == ""


@pytest.mark.parametrize("subnet", ["10.10.0.0/33", "fabric", "10.10.0.0/24/8"])
def test_fabric_bad_subnet(subnet):
    assert check_fabric_address("llama_rpc_bind_address", "10.10.0.11", subnet) == (
        f"gpufleet_fabric_subnet={subnet!r} is not a network; set it like 10.10.0.0/24"
    )


# The plans with every problem at once (the llama_rpc_worker and llama_server preflights' checks)


def test_rpc_problems_of_a_good_worker_are_none():
    assert rpc_problems("10.10.0.11", 50052, True, ["CUDA0", "CUDA1"], 2, "10.10.0.0/24", ["10.10.0.1"], []) == []
    assert rpc_problems("10.10.0.11", "50052", sources=None, extra_args=None) == []


def test_rpc_problems_lists_every_problem_in_order():
    problems = rpc_problems(
        "0.0.0.0", 70000, devices=["CUDA 0"], sources=["10.10.0.0/24"], extra_args=["--device", "CUDA1"]
    )
    assert [problem.split("=")[0].split("[")[0].split(" ")[0] for problem in problems] == [
        "llama_rpc_bind_address",
        "llama_rpc_devices",
        "llama_rpc_allowed_sources",
        "llama_rpc_port",
        "llama_rpc_extra_args",
    ]


@pytest.mark.parametrize(
    ("address", "subnet", "problem"),
    [
        ("10.10.0.11", "10.10.0.0/24", ""),
        (
            "fd00::11",
            "fd00::/64",
            "llama_rpc_bind_address=fd00::11 is IPv6; ggml-rpc reads --rpc endpoints as HOST:PORT",
        ),
        ("::", "", "llama_rpc_bind_address=:: would expose the unauthenticated RPC server"),
        ("", "", "llama_rpc_bind_address='' is not an IP address"),
    ],
)
def test_rpc_address_problem(address, subnet, problem):
    assert rpc_address_problem(address, subnet).startswith(problem)
    assert bool(rpc_address_problem(address, subnet)) == bool(problem)


@pytest.mark.parametrize(
    ("port", "count", "problem"),
    [
        (50052, 1, ""),
        ("65528", 8, ""),
        (65530, 8, "llama_rpc_port=65530 leaves no room for 8 servers"),
        (0, 1, "llama_rpc_port=0 is not a TCP port; set it to 1..65535"),
        ("0", 1, "llama_rpc_port=0 is not a TCP port; set it to 1..65535"),
        (None, 1, "llama_rpc_port=None is not a TCP port; set it to 1..65535"),
        ("fifty", 1, "llama_rpc_port='fifty' is not a TCP port; set it to 1..65535"),
    ],
)
def test_rpc_port_problem(port, count, problem):
    assert rpc_port_problem(port, count) == problem


def test_rpc_extra_args_problems_checks_flags_only_when_the_role_has_no_complaint():
    flags = {"--threads": True, "-h": False}
    assert rpc_extra_args_problems(["-h"], flags) == []
    assert rpc_extra_args_problems(["--thread", "2"], flags)[0].startswith("llama_rpc_extra_args[0]='--thread': ")
    assert rpc_extra_args_problems(["--host=x", "--thread"], flags) == [
        "llama_rpc_extra_args has --host, which the role sets from llama_rpc_bind_address; remove it and set that "
        "instead"
    ]
    assert rpc_extra_args_problems("-h") == ["llama_rpc_extra_args must be a list of arguments, got '-h'"]


def test_server_plan_returns_the_argv_and_every_problem():
    settings = {"model_path": "/models/m.gguf", "host": "127.0.0.1", "port": 8080, "n_gpu_layers": 99}
    argv, problems = server_plan(settings, {}, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]], "10.10.0.0/24")
    assert problems == []
    assert argv[:4] == ["--model", "/models/m.gguf", "--rpc", "10.10.0.11:50052"]
    _argv, problems = server_plan(dict(settings, port=0), {}, ["w1"], [["10.99.0.11:50052"]], [["10.99.0.11"]],
                                  "10.10.0.0/24")  # fmt: skip
    assert [problem.split(" ")[0] for problem in problems] == ["llama_rpc_bind_address", "llama_server_port=0"]
    _argv, problems = server_plan(settings, {}, [], [], [])
    assert problems[0].startswith("the coordinator has no RPC workers")


def test_server_plan_refuses_lists_of_different_lengths():
    with pytest.raises(ValueError, match="one entry per worker, got 2, 1 and 1"):
        server_plan({}, {}, ["w1", "w2"], [["10.10.0.11:50052"]], [["10.10.0.11"]])
