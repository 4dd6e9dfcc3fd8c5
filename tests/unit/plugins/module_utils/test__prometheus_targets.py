# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus file_sd target lists from the inventory."""

from ansible_collections.gpufleet.inference.plugins.module_utils import _prometheus_targets as pt


def cluster():
    """Two vLLM replicas of two nodes, a llama.cpp coordinator with two workers, one front door."""
    hosts = {
        "gpu01": {
            "ansible_host": "192.0.2.11",
            "gpufleet_rack": "r1",
            "vllm_replica": "kimi-a",
            "vllm_node_rank": 0,
            "vllm_api_host": "10.20.0.11",
            "vllm_api_port": 8000,
        },
        "gpu02": {
            "ansible_host": "192.0.2.12",
            "gpufleet_rack": "r1",
            "vllm_replica": "kimi-a",
            "vllm_node_rank": 1,
            "vllm_api_host": "10.20.0.12",
        },
        "gpu03": {
            "ansible_host": "192.0.2.13",
            "gpufleet_rack": "r2",
            "vllm_replica": "kimi-b",
            "vllm_node_rank": "0",
            "vllm_api_host": "0.0.0.0",
            "vllm_api_port": "8001",
            "health_agent_port": "9200",
        },
        "gpu04": {"ansible_host": "192.0.2.14", "gpufleet_rack": "r2", "vllm_replica": "kimi-b", "vllm_node_rank": 1},
        "llama-head": {"ansible_host": "192.0.2.21"},
        "llama-w1": {"ansible_host": "192.0.2.22"},
        "llama-w2": {"ansible_host": "192.0.2.23", "health_agent_listen_address": "10.30.0.23"},
        "fd01": {"ansible_host": "192.0.2.5", "gpufleet_rack": "r1", "frontdoor_stats_port": 8405},
    }
    groups = {
        "vllm_nodes": ["gpu01", "gpu02", "gpu03", "gpu04"],
        "llama_coordinator": ["llama-head"],
        "llama_rpc_workers": ["llama-w1", "llama-w2"],
        "inference_frontends": ["fd01"],
        "prometheus_servers": ["mon01"],
    }
    return hosts, groups


def by_node(entries):
    return {entry["labels"]["node"]: entry for entry in entries}


def test_every_serving_node_has_an_agent_target_with_its_replica_rank_and_rack():
    result, problems = pt.targets(*cluster())
    assert problems == []
    agents = by_node(result["gpufleet-health-agent"])
    assert sorted(agents) == ["gpu01", "gpu02", "gpu03", "gpu04", "llama-head", "llama-w1", "llama-w2"]
    assert agents["gpu02"] == {
        "targets": ["192.0.2.12:9105"],
        "labels": {"node": "gpu02", "replica": "kimi-a", "rank": "1", "rack": "r1"},
    }
    assert agents["gpu03"]["targets"] == ["192.0.2.13:9200"]
    # One llama.cpp replica, "llama", as the health agent names it; the workers in group order.
    assert agents["llama-head"]["labels"] == {"node": "llama-head", "replica": "llama", "rank": "0"}
    assert agents["llama-w1"]["labels"]["rank"] == "1"
    assert agents["llama-w2"]["labels"]["rank"] == "2"
    assert agents["llama-w2"]["targets"] == ["10.30.0.23:9105"]


def test_every_label_value_is_a_string():
    result, _problems = pt.targets(*cluster())
    for entries in result.values():
        for entry in entries:
            assert all(isinstance(v, str) for v in entry["labels"].values())


def test_vllm_is_scraped_on_rank_zero_only_and_a_wildcard_becomes_ansible_host():
    result, _problems = pt.targets(*cluster())
    vllm = by_node(result["vllm"])
    assert sorted(vllm) == ["gpu01", "gpu03"]
    assert vllm["gpu01"] == {
        "targets": ["10.20.0.11:8000"],
        "labels": {"node": "gpu01", "replica": "kimi-a", "rank": "0", "rack": "r1"},
    }
    assert vllm["gpu03"]["targets"] == ["192.0.2.13:8001"]


def test_front_door_targets_carry_no_replica_label():
    result, _problems = pt.targets(*cluster())
    assert result["gpufleet-frontdoor-haproxy"] == [
        {"targets": ["192.0.2.5:8405"], "labels": {"node": "fd01", "rack": "r1"}}
    ]
    assert result["gpufleet-frontdoor-controller"] == [
        {"targets": ["192.0.2.5:9106"], "labels": {"node": "fd01", "rack": "r1"}}
    ]


def test_empty_inventory_gives_every_job_an_empty_list():
    result, problems = pt.targets({}, {})
    assert problems == []
    assert result == {job: [] for job in pt.JOBS}


def test_a_host_in_two_serving_groups_is_scraped_once():
    hosts, groups = cluster()
    groups["llama_rpc_workers"].append("gpu04")
    result, problems = pt.targets(hosts, groups)
    assert problems == []
    assert [e["labels"]["node"] for e in result["gpufleet-health-agent"]].count("gpu04") == 1


def test_without_ansible_host_the_inventory_name_is_the_address():
    result, problems = pt.targets({"fd01": {}}, {"inference_frontends": ["fd01"]})
    assert problems == []
    assert result["gpufleet-frontdoor-haproxy"][0]["targets"] == ["fd01:8404"]


def test_ipv6_addresses_are_bracketed():
    result, problems = pt.targets({"fd01": {"ansible_host": "2001:db8::5"}}, {"inference_frontends": ["fd01"]})
    assert problems == []
    assert result["gpufleet-frontdoor-controller"][0]["targets"] == ["[2001:db8::5]:9106"]


def test_rank_zero_without_an_api_host_is_refused_with_the_fix():
    hosts, groups = cluster()
    del hosts["gpu01"]["vllm_api_host"]
    _result, problems = pt.targets(hosts, groups)
    assert problems == [
        "vllm_api_host is not set on gpu01 (job vllm); the vllm role then serves on 127.0.0.1, which Prometheus "
        "cannot reach. Set vllm_api_host to the address the API listens on, reachable from the Prometheus servers"
    ]


def test_loopback_addresses_are_refused():
    hosts, groups = cluster()
    hosts["gpu01"]["vllm_api_host"] = "127.0.0.1"
    hosts["fd01"]["ansible_host"] = "::1"
    _result, problems = pt.targets(hosts, groups)
    assert len(problems) == 3
    assert problems[0].startswith("frontdoor_stats_address=::1 on fd01 is a loopback address")
    assert problems[2].startswith("vllm_api_host=127.0.0.1 on gpu01 is a loopback address")


def test_bad_ports_and_missing_replicas_are_named():
    hosts, groups = cluster()
    hosts["gpu02"]["health_agent_port"] = "http"
    hosts["fd01"]["frontdoor_controller_metrics_port"] = 70000
    hosts["gpu04"]["vllm_replica"] = ""
    hosts["gpu03"]["vllm_node_rank"] = -1
    _result, problems = pt.targets(hosts, groups)
    assert "vllm_replica is not set on gpu04 (vllm_nodes); give every vLLM node the name of its replica" in problems
    assert "vllm_node_rank=-1 on gpu03 must be an integer >= 0" in problems
    assert "health_agent_port='http' on gpu02 must be a TCP port, 1..65535" in problems
    assert "frontdoor_controller_metrics_port=70000 on fd01 must be a TCP port, 1..65535" in problems


def test_two_hosts_on_one_target_are_refused():
    hosts, groups = cluster()
    hosts["gpu02"]["ansible_host"] = "192.0.2.11"
    _result, problems = pt.targets(hosts, groups)
    assert problems == [
        "job gpufleet-health-agent scrapes 192.0.2.11:9105 for gpu01, gpu02; every host needs an address of its "
        "own (check ansible_host and the address variables)"
    ]


def test_the_agents_own_replica_and_rank_win():
    hosts, groups = cluster()
    hosts["llama-w1"].update(health_agent_replica="llama-east", health_agent_rank="5")
    result, problems = pt.targets(hosts, groups)
    assert problems == []
    labels = by_node(result["gpufleet-health-agent"])["llama-w1"]["labels"]
    assert labels == {"node": "llama-w1", "replica": "llama-east", "rank": "5"}
