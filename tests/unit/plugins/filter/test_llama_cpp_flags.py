# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the pass-through flag checks of module_utils/_llama_cpp.py:
help_flags() over real --help captures of the pinned build, check_flags() and rpc_server_argv(),
and the filters that carry them."""

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import _llama_cpp_help_flags as flags_filter
from ansible_collections.gpufleet.inference.plugins.filter._llama_rpc_instances import llama_rpc_instances
from ansible_collections.gpufleet.inference.plugins.filter._llama_server_argv import llama_server_argv
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import (
    MANAGED_FLAGS,
    RPC_MANAGED_FLAGS,
    check_flags,
    help_flags,
    rpc_server_argv,
)

# Real --help captures of the pinned build (llama.cpp 0c1e570 from the llama-cpp-python 0.3.36
# sdist, CPU, as the llama_rpc molecule scenario builds it); fixtures/llama.cpp/README.md.
FIXTURES = Path(__file__).resolve().parents[1] / "module_utils" / "fixtures" / "llama.cpp"
SERVER_HELP = (FIXTURES / "llama-server-help-0c1e570.txt").read_text()
RPC_HELP = (FIXTURES / "ggml-rpc-server-help-0c1e570.txt").read_text()
SERVER = help_flags(SERVER_HELP)
RPC = help_flags(RPC_HELP)
NEW = {"rpc_server_binary": "ggml-rpc-server", "flash_attn_value": True, "load_mode": True, "legacy_mmap_flags": False}
SETTINGS = {"model_path": "/models/m.gguf", "host": "127.0.0.1", "port": 8080, "n_gpu_layers": 99}


# help_flags over the real captures


def test_server_help_lists_every_spelling_with_whether_it_takes_a_value():
    assert len(SERVER) == 412
    assert SERVER["-ngl"] is SERVER["--gpu-layers"] is SERVER["--n-gpu-layers"] is True
    assert SERVER["-fa"] is SERVER["--flash-attn"] is True
    assert SERVER["--metrics"] is SERVER["--jinja"] is SERVER["--no-jinja"] is False
    assert SERVER["-h"] is SERVER["--help"] is SERVER["--usage"] is False
    # Four spellings on one line, negations included, and placeholders holding commas.
    assert [SERVER[flag] for flag in ("-kvo", "--kv-offload", "-nkvo", "--no-kv-offload")] == [False] * 4
    assert SERVER["-fitt"] is SERVER["--fit-target"] is SERVER["-dev"] is True
    # Long spellings first, short ones after them.
    assert SERVER["--spec-draft-type-k"] is SERVER["-ctkd"] is SERVER["--cache-type-k-draft"] is True
    # This build replaced --no-mmap, --mlock and --mmap with --load-mode.
    assert SERVER["--load-mode"] is True
    assert not {"--no-mmap", "--mlock", "--mmap"} & set(SERVER)


def test_server_help_holds_every_flag_the_role_manages():
    assert set(MANAGED_FLAGS) <= set(SERVER)


def test_server_help_yields_only_flags():
    assert all(flag.startswith("-") and " " not in flag and "," not in flag for flag in SERVER)
    # Section headers, placeholders and description words never become flags.
    assert not {"-----", "N", "FNAME", "-1", "--"} & set(SERVER)


def test_rpc_help_lists_the_rpc_server_flags():
    assert set(RPC) == set(RPC_MANAGED_FLAGS) | {"-h", "--help"}
    assert RPC["--threads"] is RPC["-d"] is RPC["--host"] is RPC["--port"] is True
    assert RPC["--cache"] is RPC["-c"] is RPC["--help"] is False


@pytest.mark.parametrize("text", ["", None, "error: unknown argument\n"])
def test_help_of_nothing_is_no_flags(text):
    assert help_flags(text) == {}


def test_help_flags_placeholder_with_commas():
    assert help_flags("  -d, --device <dev1,dev2,...>     comma-separated list of devices\n") == {
        "-d": True,
        "--device": True,
    }


def test_help_flags_ignores_deep_continuation_lines():
    text = "--metrics" + " " * 31 + "enable prometheus\n" + " " * 40 + "-1 = infinite\n"
    assert help_flags(text) == {"--metrics": False}


# check_flags


def test_a_misspelled_flag_names_the_closest_real_one():
    problems = check_flags(["--metric"], SERVER, "llama_server_extra_args")
    assert problems == [
        "llama_server_extra_args[0]='--metric': --metric is not a flag of the llama-server being deployed "
        "(its --help does not list it); the closest real flag is --metrics"
    ]


def test_a_misspelled_managed_flag_says_which_variable_sets_it():
    problems = check_flags(["--n-gpu-layer", "5"], SERVER, "llama_server_extra_args", MANAGED_FLAGS)
    assert problems == [
        "llama_server_extra_args[0]='--n-gpu-layer': --n-gpu-layer is not a flag of the llama-server being deployed "
        "(its --help does not list it); the closest real flag is --n-gpu-layers, which the role sets from "
        "llama_server_n_gpu_layers"
    ]


def test_a_flag_with_nothing_close():
    (problem,) = check_flags(["--zzzzzzzz"], SERVER, "llama_server_extra_args")
    assert problem.endswith("see `llama-server --help` for the flags it takes")


def test_flag_equals_value_counts_as_the_flag():
    assert check_flags(["--alias=my model", "--metrics"], SERVER, "v") == []
    (problem,) = check_flags(["--aliass=x", "--metrics"], SERVER, "v")
    assert problem.startswith("v[0]='--aliass=x': --aliass is not a flag")


def test_the_value_after_a_flag_is_not_a_flag():
    # A value that looks like a flag, and a negative number, after flags that take a value.
    assert check_flags(["--alias", "--not-a-flag", "--seed", "-1", "--metrics"], SERVER, "v") == []


def test_a_word_after_a_flag_without_value_is_refused():
    assert check_flags(["--metrics", "true"], SERVER, "v") == [
        "v[1]='true' is not a flag, and --metrics takes no value; put each flag first, then its value as the next item"
    ]
    assert check_flags(["5"], SERVER, "v") == [
        "v[0]='5' is not a flag, and it comes first; put each flag first, then its value as the next item"
    ]


def test_the_value_of_an_unknown_flag_is_not_judged_but_a_second_flag_is():
    problems = check_flags(["--alais", "x", "--metrcs"], SERVER, "v")
    assert [problem.split(":", 1)[0] for problem in problems] == ["v[0]='--alais'", "v[2]='--metrcs'"]


def test_every_flag_of_the_capture_passes():
    args = []
    for flag, takes_value in sorted(SERVER.items()):
        args += [flag, "1"] if takes_value else [flag]
    assert check_flags(args, SERVER, "v") == []


# rpc_server_argv


def test_rpc_argv_of_one_instance():
    argv, problems = rpc_server_argv({"port": 50053, "device": "CUDA1"}, "10.10.0.11", 8, True, ["--help"], RPC)
    assert problems == []
    assert argv == [
        *("--host", "10.10.0.11", "--port", "50053", "--threads", "8"),
        *("--device", "CUDA1", "--cache", "--help"),
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-t", "4"], "llama_rpc_extra_args has -t, which the role sets from llama_rpc_threads"),
        (["--device=CUDA0"], "llama_rpc_extra_args has --device, which the role sets from llama_rpc_devices"),
        (["--cahce"], "llama_rpc_extra_args[0]='--cahce': --cahce is not a flag of the RPC server being deployed"),
        (["x\ny"], "llama_rpc_extra_args[0]='x\\ny' contains the control character"),
        ("--cache", "llama_rpc_extra_args must be a list of arguments"),
    ],
)
def test_rpc_argv_refuses(extra, message):
    _argv, problems = rpc_server_argv({"port": 50052, "device": ""}, "10.10.0.11", 2, False, extra, RPC)
    assert any(problem.startswith(message) for problem in problems), problems


def test_rpc_argv_without_known_flags_checks_only_the_role_flags():
    argv, problems = rpc_server_argv({"port": 50052, "device": ""}, "10.10.0.11", 2, False, ["--anything"], {})
    assert problems == []
    assert argv[-1] == "--anything"


# the filters


def test_help_flags_filter():
    assert flags_filter.FilterModule().filters() == {"_llama_cpp_help_flags": flags_filter.llama_cpp_help_flags}
    assert flags_filter.llama_cpp_help_flags(RPC_HELP) == RPC
    assert flags_filter.llama_cpp_help_flags(None) == {}


def test_server_argv_filter_checks_extra_args_against_the_flags():
    settings = dict(SETTINGS, extra_args=["--n-gpu-layer", "5"])
    with pytest.raises(AnsibleFilterError, match=r"the closest real flag is --n-gpu-layers"):
        llama_server_argv(settings, NEW, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]], flags=SERVER)
    # Without the flags of an installed build, only the role's own checks run.
    argv = llama_server_argv(settings, NEW, ["w1"], [["10.10.0.11:50052"]], [["10.10.0.11"]])
    assert argv[-2:] == ["--n-gpu-layer", "5"]


def test_rpc_instances_filter_builds_argv_and_checks_extra_args():
    (instance,) = llama_rpc_instances("10.10.0.11", 50052, threads=4, extra_args=["--help"], flags=RPC)
    assert instance["argv"] == ["--host", "10.10.0.11", "--port", "50052", "--threads", "4", "--help"]
    with pytest.raises(AnsibleFilterError, match=r"\[0\]='--thread'.*closest real flag is --threads"):
        llama_rpc_instances("10.10.0.11", 50052, threads=4, extra_args=["--thread", "2"], flags=RPC)
    # Without threads, the plan carries no argv (the old call).
    assert "argv" not in llama_rpc_instances("10.10.0.11", 50052)[0]


# Every command the collection tells an operator to run names flags the binary has

COLLECTION = Path(__file__).resolve().parents[4]
COMMAND = re.compile(r"`((?:ggml-)?rpc-server|llama-server)((?: [^`]*)?)`")


def told_commands():
    """(file, binary, flag) of every flag in a backquoted llama-server or RPC server command in the
    product's code, role files and docs."""
    found = []
    for top in ("plugins", "roles", "docs", "playbooks"):
        for path in sorted((COLLECTION / top).rglob("*")):
            if path.suffix not in (".py", ".yml", ".j2", ".md") or not path.is_file():
                continue
            for binary, rest in COMMAND.findall(path.read_text(encoding="utf-8", errors="replace")):
                for word in rest.split():
                    if word.startswith("-"):
                        found.append((str(path.relative_to(COLLECTION)), binary, word.split("=")[0]))
    return found


def test_the_scan_finds_the_commands_the_docs_give():
    assert ("docs/llama-rpc.md", "llama-server", "--help") in told_commands()


def test_every_flag_a_message_or_doc_tells_the_operator_to_run_is_in_the_binary_s_help():
    unknown = [
        (where, binary, flag)
        for where, binary, flag in told_commands()
        if flag not in (SERVER if binary == "llama-server" else RPC)
    ]
    assert unknown == []
