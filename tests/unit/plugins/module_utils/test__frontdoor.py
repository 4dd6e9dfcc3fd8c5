# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replicas behind a front door, and HAProxy quoting (module_utils/_frontdoor.py)."""

import json

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor

KEY = "k" * 24
DEFAULTS = {
    "vllm_api_host": "127.0.0.1",
    "vllm_api_port": 8000,
    "vllm_api_key": "",
    "vllm_served_model_name": "",
    "vllm_model_path": "/var/lib/gpufleet/models/model",
    "llama_server_host": "127.0.0.1",
    "llama_server_port": 8080,
    "llama_server_api_key": "",
    "llama_server_model_path": "/var/lib/gpufleet/models/model.gguf",
    "llama_rpc_port": 50052,
}


def vllm_host(replica, rank, address, **extra):
    host = {
        "vllm_replica": replica,
        "vllm_node_rank": rank,
        "ansible_host": address,
        "gpufleet_fabric_address": address.replace("192.168", "10.20"),
        "vllm_api_host": address.replace("192.168", "10.20"),
        "vllm_api_key": KEY,
        "vllm_served_model_name": "tiny",
    }
    host.update(extra)
    return host


def lab():
    hostvars = {
        "lab-head": vllm_host("lab", 0, "192.168.0.11"),
        "lab-tail": vllm_host("lab", 1, "192.168.0.12"),
        "solo": vllm_host("solo", 0, "192.168.0.13", health_agent_listen_address="10.99.0.13", health_agent_port=9200),
        "fd": {"ansible_host": "192.168.0.20"},
    }
    groups = {"vllm_nodes": ["lab-head", "lab-tail", "solo"], "inference_frontends": ["fd"]}
    return hostvars, groups


def test_vllm_replicas_match_the_frontdoor_json_schema():
    hostvars, groups = lab()
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert plan["replicas"][0] == {
        "name": "lab",
        "server": "lab",
        "kind": "vllm",
        "metrics_url": "http://10.20.0.11:8000/metrics",
        "nodes": [
            {
                "name": "lab-head",
                "rank": 0,
                "agent_url": "http://192.168.0.11:9105",
                "ssh_host": "192.168.0.11",
                "unit": "gpufleet-vllm-lab.service",
            },
            {
                "name": "lab-tail",
                "rank": 1,
                "agent_url": "http://192.168.0.12:9105",
                "ssh_host": "192.168.0.12",
                "unit": "gpufleet-vllm-lab.service",
            },
        ],
    }
    assert plan["replicas"][1]["nodes"][0]["agent_url"] == "http://10.99.0.13:9200"
    assert plan["servers"] == [
        {"name": "lab", "address": "10.20.0.11", "port": 8000},
        {"name": "solo", "address": "10.20.0.13", "port": 8000},
    ]
    assert plan["model"] == "tiny"
    assert plan["api_key"] == KEY
    assert [h["name"] for h in plan["hosts"]] == ["lab-head", "lab-tail", "solo"]
    assert plan["hosts"][0]["units"] == ["gpufleet-vllm-lab.service"]


def test_ranks_are_ordered_whatever_the_group_order():
    hostvars, groups = lab()
    groups["vllm_nodes"] = ["lab-tail", "solo", "lab-head"]
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert [n["rank"] for n in plan["replicas"][0]["nodes"]] == [0, 1]


def test_the_check_is_a_one_token_completion_with_the_key():
    hostvars, groups = lab()
    send = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")["check_send"]
    assert send == (
        'meth POST uri /v1/completions ver HTTP/1.1 hdr Host "localhost" hdr Content-Type application/json '
        f'hdr Authorization "Bearer {KEY}" body "{{\\"max_tokens\\":1,\\"model\\":\\"tiny\\",\\"prompt\\":\\"ok\\"}}"'
    )


def test_no_authorization_header_without_a_key():
    send = _frontdoor.check_send("m", "", "localhost", "/v1/completions")
    assert "Authorization" not in send


def test_different_models_are_refused_naming_both():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_served_model_name"] = "other"
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    message = str(excinfo.value)
    assert "'tiny'" in message and "'other'" in message
    assert "vllm_served_model_name on solo" in message


def test_different_keys_are_refused_without_showing_them():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_key"] = "x" * 24
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert "different API keys" in str(excinfo.value)
    assert KEY not in str(excinfo.value)
    assert "x" * 24 not in str(excinfo.value)


def test_a_replica_without_rank_0_is_refused():
    hostvars, groups = lab()
    hostvars["lab-head"]["vllm_node_rank"] = 2
    with pytest.raises(_frontdoor.FrontdoorError, match="replica lab has no rank 0"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


@pytest.mark.parametrize("name", ["lab 1", "lab/1", "lab\n", "läb"])
def test_names_haproxy_refuses_are_refused(name):
    hostvars, groups = lab()
    hostvars["solo"]["vllm_replica"] = name
    with pytest.raises(_frontdoor.FrontdoorError, match="is not a valid HAProxy name"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


def test_a_loopback_api_is_refused_unless_on_the_front_door():
    hostvars, groups = lab()
    del hostvars["solo"]["vllm_api_host"]
    with pytest.raises(_frontdoor.FrontdoorError, match=r"vllm_api_host='127\.0\.0\.1' on solo is a loopback address"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "solo")
    assert plan["servers"][1] == {"name": "solo", "address": "127.0.0.1", "port": 8000}


def test_an_unspecified_api_address_is_reached_on_the_fabric():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_host"] = "0.0.0.0"
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert plan["servers"][1]["address"] == "10.20.0.13"


def test_no_replica_is_refused():
    with pytest.raises(_frontdoor.FrontdoorError, match="no replica found for the front door fd"):
        _frontdoor.plan({"fd": {}}, {"vllm_nodes": [], "llama_coordinator": []}, DEFAULTS, "fd")


def test_a_bad_port_names_the_variable():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_port"] = "http"
    with pytest.raises(_frontdoor.FrontdoorError, match="vllm_api_port on solo='http' must be a TCP port"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


def test_llama_replica_with_rpc_workers():
    hostvars = {
        "coord": {"ansible_host": "192.168.0.11", "llama_server_host": "10.20.0.11", "llama_server_api_key": KEY},
        "w1": {"ansible_host": "192.168.0.12"},
        "w2": {"ansible_host": "192.168.0.13", "llama_rpc_per_device": True, "gpufleet_gpu_count": 2},
    }
    groups = {"llama_coordinator": ["coord"], "llama_rpc_workers": ["w1", "w2"]}
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    (replica,) = plan["replicas"]
    assert replica["kind"] == "llama" and replica["metrics_url"] is None and replica["name"] == "coord"
    assert [(n["name"], n["rank"], n["unit"]) for n in replica["nodes"]] == [
        ("coord", 0, "gpufleet-llama-server.service"),
        ("w1", 1, "gpufleet-llama-rpc-50052.service"),
        ("w2", 2, "gpufleet-llama-rpc-50052.service"),
        ("w2", 2, "gpufleet-llama-rpc-50053.service"),
    ]
    assert plan["servers"] == [{"name": "coord", "address": "10.20.0.11", "port": 8080}]
    assert plan["model"] == "/var/lib/gpufleet/models/model.gguf"
    assert plan["hosts"][2]["units"] == ["gpufleet-llama-rpc-50052.service", "gpufleet-llama-rpc-50053.service"]


def test_llama_alias_is_the_model_name():
    hostvars = {"coord": {"llama_server_host": "10.0.0.1", "llama_server_extra_args": ["--alias", "kimi"]}}
    plan = _frontdoor.plan(hostvars, {"llama_coordinator": ["coord"]}, DEFAULTS, "fd")
    assert plan["model"] == "kimi"


def test_a_host_in_two_replicas_is_refused():
    hostvars, groups = lab()
    hostvars["lab-head"]["llama_server_host"] = "10.20.0.11"
    hostvars["lab-head"]["llama_server_extra_args"] = ["--alias", "tiny"]
    hostvars["lab-head"]["llama_server_api_key"] = KEY
    groups["llama_coordinator"] = ["lab-head"]
    with pytest.raises(_frontdoor.FrontdoorError, match="lab-head serves in both replica lab and replica lab-head"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("$HOME", '"\\$HOME"'),
        ("# not a comment", '"# not a comment"'),
        ("it's", '"it\'s"'),
    ],
)
def test_haproxy_quote_follows_the_weak_quoting_rules(value, quoted):
    assert _frontdoor.haproxy_quote(value, "v") == quoted


def test_log_format_arguments_double_the_percent_sign():
    assert _frontdoor.haproxy_quote("100%", "v", log_format=True) == '"100%%"'
    assert _frontdoor.haproxy_quote("100%", "v") == '"100%"'


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\t", "nul\x00"])
def test_haproxy_quote_refuses_control_characters(value):
    with pytest.raises(ValueError, match=r"frontdoor_check_host=.*control character"):
        _frontdoor.haproxy_quote(value, "frontdoor_check_host")


def test_a_model_name_with_quotes_stays_one_json_word():
    send = _frontdoor.check_send('we"ird$', "", "localhost", "/v1/completions")
    body = send.split(" body ", 1)[1]
    unquoted = body[1:-1].replace("\\$", "$").replace('\\"', '"').replace("\\\\", "\\")
    assert json.loads(unquoted)["model"] == 'we"ird$'


def test_a_bad_check_uri_is_refused():
    with pytest.raises(_frontdoor.FrontdoorError, match="frontdoor_check_uri"):
        _frontdoor.check_send("m", "", "localhost", "v1 completions")
