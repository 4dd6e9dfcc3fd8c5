# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health_agent role's one check (module_utils/_health_agent_rules.py): every setting, every
problem at once, each message naming the variable, the value and the fix."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _health_agent_rules

XIDS = [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140]
PATTERNS = ["NCCL WARN", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError", "unhandled system error"]


def agent_settings(**changes):
    """The role's defaults on rank 0 of vLLM replica r0, as vars/main.yml hands them over, with changes."""
    values = {
        "inventory_hostname": "gpu01",
        "health_agent_listen_address": "192.168.0.11",
        "health_agent_port": 9105,
        "health_agent_replica": "r0",
        "health_agent_rank": 0,
        "health_agent_user": "gpufleet-health",
        "health_agent_gpu_expected_count": 8,
        "health_agent_gpu_fatal_xids": XIDS,
        "health_agent_gpu_interval": 30,
        "health_agent_gpu_fall": 1,
        "health_agent_gpu_rise": 2,
        "health_agent_nvidia_smi_path": "/usr/bin/nvidia-smi",
        "health_agent_sysfs_root": "/sys",
        "health_agent_engine_enabled": True,
        "health_agent_engine_url": "http://10.20.0.11:8000",
        "health_agent_engine_model": "Qwen/Qwen3-8B",
        "health_agent_engine_api_key": "sk-" + "x" * 20,
        "health_agent_engine_interval": 2,
        "health_agent_engine_timeout": 10,
        "health_agent_engine_fall": 3,
        "health_agent_engine_rise": 2,
        "health_agent_engine_deep_every": 1,
        "health_agent_journal_unit": "gpufleet-vllm-r0.service",
        "health_agent_journal_enabled": True,
        "health_agent_journal_patterns": PATTERNS,
        "health_agent_journal_interval": 5,
        "health_agent_journal_fall": 1,
        "health_agent_journal_rise": 12,
        "health_agent_fabric_address": "10.10.0.1",
        "health_agent_ping_peers": [
            {"name": "gpu02", "address": "10.10.0.2", "same_replica": True},
            {"name": "gpu03", "address": "10.10.0.3", "same_replica": False},
        ],
        "health_agent_ping_interval_ms": 100,
        "health_agent_ping_timeout_ms": 100,
        "health_agent_ping_loss_threshold": 5,
        "health_agent_ping_rise": 10,
    }
    values.update(changes)
    return values


def problems_of(**changes):
    return _health_agent_rules.settings_problems(agent_settings(**changes))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"health_agent_fabric_address": "", "health_agent_ping_peers": []},
        {"health_agent_gpu_expected_count": None},
        {"health_agent_engine_enabled": False, "health_agent_engine_url": "not a url"},
        {"health_agent_engine_enabled": "no", "health_agent_engine_url": ""},
        {"health_agent_engine_url": "https://[fd00::11]:8000/", "health_agent_engine_api_key": ""},
        {"health_agent_journal_unit": "gpufleet-llama-rpc-*.service"},
        {"health_agent_journal_unit": "", "health_agent_journal_enabled": False},
        {"health_agent_replica": "", "health_agent_rank": "3", "health_agent_port": "9200"},
        {"health_agent_ping_interval_ms": 50, "health_agent_ping_timeout_ms": 50},
        {"health_agent_engine_timeout": 2.5, "health_agent_gpu_interval": 3600, "health_agent_journal_rise": 1000},
        {"health_agent_journal_patterns": ["NCCL WARN", r"NVRM: Xid \(PCI:[0-9a-f:]+\)"]},
    ],
)
def test_good_settings_pass(changes):
    assert problems_of(**changes) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"health_agent_port": 0}, "health_agent_port=0 must be a port 1..65535 (default 9105)"),
        ({"health_agent_port": "9105x"}, "health_agent_port=9105x must be a port 1..65535 (default 9105)"),
        ({"health_agent_port": True}, "health_agent_port=True must be a port 1..65535 (default 9105)"),
        (
            {"health_agent_listen_address": "10.0.0.1 "},
            "health_agent_listen_address=10.0.0.1  must be an address or host name of gpu01 (default: ansible_host, "
            "the management address)",
        ),
        (
            {"health_agent_user": "Root User"},
            "health_agent_user=Root User must be a system user name ([a-z_][a-z0-9_-]*)",
        ),
        ({"health_agent_replica": "r 0"}, "health_agent_replica=r 0 may hold letters, digits and ._- only"),
        (
            {"health_agent_rank": -1},
            "health_agent_rank=-1 must be an integer >= 0 (0: the node that serves the API)",
        ),
    ],
)
def test_a_bad_listener_user_replica_or_rank_is_refused(changes, message):
    assert problems_of(**changes) == [message]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"health_agent_engine_deep_every": 0},
            "health_agent_engine_deep_every=0 must be a whole number from 1 to 1000 (consecutive results or probes)",
        ),
        (
            {"health_agent_journal_rise": 100000},
            "health_agent_journal_rise=100000 must be a whole number from 1 to 1000",
        ),
        (
            {"health_agent_gpu_interval": 86400},
            "health_agent_gpu_interval=86400 must be a number of seconds above 0 and at most 3600",
        ),
        (
            {"health_agent_engine_timeout": 100000.5},
            "health_agent_engine_timeout=100000.5 must be a number of seconds above 0 and at most 3600",
        ),
        (
            {"health_agent_journal_interval": "nan"},
            "health_agent_journal_interval='nan' must be a number of seconds above 0",
        ),
        (
            {"health_agent_ping_interval_ms": "100ms"},
            "health_agent_ping_interval_ms='100ms' must be a whole number from 10 to 60000 (milliseconds)",
        ),
        (
            {"health_agent_ping_interval_ms": 50, "health_agent_ping_timeout_ms": 80},
            "health_agent_ping_timeout_ms=80 must be a whole number from 1 to 50 "
            "(at most health_agent_ping_interval_ms, so that one probe per peer is in flight)",
        ),
    ],
)
def test_a_bad_count_interval_or_timeout_is_refused(changes, message):
    (problem,) = problems_of(**changes)
    assert problem.startswith(message)


def test_a_ping_timeout_is_bounded_by_a_minute_when_the_interval_is_not_a_number():
    problems = problems_of(health_agent_ping_interval_ms="fast", health_agent_ping_timeout_ms=70000)
    assert problems[1].startswith("health_agent_ping_timeout_ms=70000 must be a whole number from 1 to 60000")


@pytest.mark.parametrize(
    ("changes", "found"),
    [
        ({"health_agent_fabric_address": "10.10.0.1\n"}, "gpu02, gpu03"),
        ({"health_agent_fabric_address": "10.10.0.256"}, "gpu02, gpu03"),
        ({"health_agent_fabric_address": None, "health_agent_ping_peers": []}, ""),
        ({"health_agent_ping_peers": "gpu02"}, "gpu02"),
        ({"health_agent_ping_peers": {"name": "gpu02"}}, "{'name': 'gpu02'}"),
    ],
)
def test_a_bad_fabric_address_or_peer_list_is_refused(changes, found):
    (problem,) = problems_of(**changes)
    address = agent_settings(**changes)["health_agent_fabric_address"]
    assert problem == (
        f"health_agent_fabric_address={address} must be an IPv4 address of gpu01 on the fabric (default "
        "gpufleet_fabric_address) or empty, which disables the ping check; health_agent_ping_peers must be a list of "
        f"{{name, address, same_replica}} naming each peer once, found {found}."
    )


def test_peer_names_are_unique_in_any_case():
    peers = [
        {"name": "gpu02", "address": "10.10.0.2"},
        {"name": "GPU02", "address": "10.10.0.3"},
        {"address": "10.10.0.4"},
    ]
    problems = problems_of(health_agent_ping_peers=peers)
    assert problems[0].endswith("naming each peer once, found gpu02, GPU02, ?.")


@pytest.mark.parametrize(
    ("peer", "problems"),
    [
        (
            {"name": "gpu02", "address": "beef"},
            ['health_agent_ping_peers[0].address="beef" is not an IPv4 fabric address'],
        ),
        (
            {"name": "gpu02\nx", "address": "10.10.0.2"},
            [
                'health_agent_ping_peers[0].name="gpu02\\nx" may hold letters, digits and ._- only (it names the peer '
                "in /health and the metrics)"
            ],
        ),
        (
            {"name": "gpu02", "address": "10.10.0.2", "same_replica": "yes"},
            ['health_agent_ping_peers[0].same_replica="yes" must be true or false'],
        ),
        (
            "gpu02",
            [
                "health_agent_ping_peers[0] is not a mapping",
                'health_agent_ping_peers[0].name="" may hold letters, digits and ._- only (it names the peer in '
                "/health and the metrics)",
                'health_agent_ping_peers[0].address="" is not an IPv4 fabric address',
            ],
        ),
    ],
)
def test_a_bad_peer_is_refused_naming_its_fields(peer, problems):
    found = problems_of(health_agent_ping_peers=[peer])
    assert found[-1] == (
        f"health_agent_ping_peers holds {peer}: {'; '.join(problems)}. The peers default to the other hosts of "
        "fabric_nodes with gpufleet_fabric_address: fix that host's gpufleet_fabric_address."
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"health_agent_nvidia_smi_path": "/usr/../tmp/nvidia-smi"},
            "health_agent_nvidia_smi_path='/usr/../tmp/nvidia-smi' must be an absolute path",
        ),
        ({"health_agent_sysfs_root": "sys"}, "health_agent_sysfs_root='sys' must be an absolute path"),
        (
            {"health_agent_gpu_expected_count": ""},
            "health_agent_gpu_expected_count='' must be a whole number from 1 to 64 (the GPUs nvidia-smi must see on "
            "this node, default gpufleet_gpu_count; null compares against the NVIDIA GPUs on the PCI bus)",
        ),
        (
            {"health_agent_gpu_expected_count": 0},
            "health_agent_gpu_expected_count=0 must be a whole number from 1 to 64",
        ),
        (
            {"health_agent_gpu_fatal_xids": [79, "fatal"]},
            "health_agent_gpu_fatal_xids='fatal' must be a whole number from 1 to 2147483647 (an Xid number, "
            "https://docs.nvidia.com/deploy/xid-errors/)",
        ),
        (
            {"health_agent_gpu_fatal_xids": "79,94"},
            'health_agent_gpu_fatal_xids="79,94" must be a list of Xid numbers, e.g. [79, 94]',
        ),
    ],
)
def test_a_bad_gpu_check_setting_is_refused(changes, message):
    (problem,) = problems_of(**changes)
    assert problem.startswith(message)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"health_agent_engine_url": "ftp://127.0.0.1:8000"},
            "health_agent_engine_url=ftp://127.0.0.1:8000 must be the engine's base URL, http://HOST:PORT (by default "
            "from vllm_api_host and vllm_api_port, or llama_server_host and llama_server_port)",
        ),
        (
            {"health_agent_engine_url": "http://ops:hunter2@10.10.0.1:8000/v1", "health_agent_engine_enabled": "yes"},
            "health_agent_engine_url=http://ops:********@10.10.0.1:8000/v1 must be the engine's base URL",
        ),
        ({"health_agent_engine_url": 8000}, "health_agent_engine_url=8000 must be the engine's base URL"),
        (
            {"health_agent_engine_model": "tiny model"},
            "health_agent_engine_model=tiny model may hold letters, digits and ._:/+- only",
        ),
        (
            {"health_agent_engine_api_key": "sk secret\n"},
            "health_agent_engine_api_key (10 characters) holds spaces or control characters; it is sent as "
            '"Authorization: Bearer <key>" (default vllm_api_key or llama_server_api_key)',
        ),
    ],
)
def test_a_bad_engine_check_setting_is_refused_without_showing_a_secret(changes, message):
    (problem,) = problems_of(**changes)
    assert problem.startswith(message)
    assert "hunter2" not in problem and "secret" not in problem


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"health_agent_journal_unit": "gpufleet vllm"},
            "health_agent_journal_unit=gpufleet vllm must be a unit name or a journalctl --unit pattern, e.g. "
            "gpufleet-vllm-r0.service",
        ),
        (
            {"health_agent_journal_unit": ""},
            "health_agent_journal_enabled is true but health_agent_journal_unit is empty: name the serving unit",
        ),
        (
            {"health_agent_journal_patterns": ["NCCL WARN\n"]},
            "health_agent_journal_patterns must be a non-empty list of one-line regular expressions, found "
            "['NCCL WARN\\n']",
        ),
        (
            {"health_agent_journal_patterns": []},
            "health_agent_journal_patterns must be a non-empty list of one-line regular expressions, found []",
        ),
        (
            {"health_agent_journal_patterns": "NCCL WARN"},
            "health_agent_journal_patterns must be a non-empty list of one-line regular expressions, found NCCL WARN",
        ),
        (
            {"health_agent_journal_patterns": ["NCCL WARN", "NCCL (WARN"]},
            "health_agent_journal_patterns='NCCL (WARN' is not a regular expression",
        ),
    ],
)
def test_a_bad_journal_check_setting_is_refused(changes, message):
    (problem,) = problems_of(**changes)
    assert problem.startswith(message)


def test_every_problem_comes_back_at_once():
    problems = problems_of(
        health_agent_port=70000,
        health_agent_gpu_fall=0,
        health_agent_ping_peers=[{"name": "gpu02", "address": "beef"}],
        health_agent_gpu_fatal_xids="79",
        health_agent_engine_model="a b",
        health_agent_journal_unit="a b",
    )
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "health_agent_port",
        "health_agent_gpu_fall",
        "health_agent_ping_peers",
        "health_agent_gpu_fatal_xids",
        "health_agent_engine_model",
        "health_agent_journal_unit",
    ]


@pytest.mark.parametrize("value", [None, True, 1.5, [], {}, "", "\x00"])
def test_no_value_of_any_type_raises(value):
    for name in agent_settings():
        assert isinstance(_health_agent_rules.settings_problems(agent_settings(**{name: value})), list)
