# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM replica layout and firewall rules."""

import shutil
import subprocess

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_replica


def node(host, rank, address, **extra):
    base = {"host": host, "rank": rank, "address": address, "tensor_parallel_size": 8, "pipeline_parallel_size": 10}
    base.update(extra)
    return base


def flagship():
    return [node(f"gpu{i + 1:02d}", i, f"10.20.0.{11 + i}") for i in range(10)]


def test_flagship_is_ten_nodes_of_eight_ranks_with_rank_zero_as_master():
    plan, problems = _vllm_replica.plan("kimi", list(reversed(flagship())))
    assert problems == []
    assert plan["nnodes"] == 10
    assert plan["local_world_size"] == 8
    assert plan["master_addr"] == "10.20.0.11"
    assert [n["host"] for n in plan["nodes"]] == [f"gpu{i:02d}" for i in range(1, 11)]


def test_duplicate_and_missing_ranks_name_the_hosts():
    members = flagship()
    members[3]["rank"] = 2
    _unused, problems = _vllm_replica.plan("kimi", members)
    assert problems == ["vllm_node_rank=2 is set on both gpu03 and gpu04 of replica kimi; give each node its own rank"]
    _unused, problems = _vllm_replica.plan("kimi", flagship()[1:])
    assert "rank(s) 9 are missing" in problems[0] or "rank(s) 0" in problems[0]


def test_settings_that_differ_between_nodes_are_named():
    members = flagship()
    members[5]["master_port"] = 29502
    _unused, problems = _vllm_replica.plan("kimi", members)
    assert len(problems) == 1
    assert problems[0].startswith("vllm_master_port differs between the nodes of replica kimi (")
    assert "29502 on gpu06" in problems[0]


def test_addresses_must_be_unique_reachable_ips():
    members = flagship()
    members[1]["address"] = "10.20.0.11"
    members[2]["address"] = "not-an-ip"
    members[3]["address"] = "127.0.0.1"
    _unused, problems = _vllm_replica.plan("kimi", members)
    assert any("10.20.0.11 is the address of both gpu01 and gpu02" in p for p in problems)
    assert any("vllm_host_ip='not-an-ip' on gpu03 is not an IP address" in p for p in problems)
    assert any("127.0.0.1 on gpu04 is a loopback address" in p for p in problems)


def test_sizes_must_split_over_the_nodes():
    members = [
        node("a", 0, "10.0.0.1", tensor_parallel_size=3, pipeline_parallel_size=1),
        node("b", 1, "10.0.0.2", tensor_parallel_size=3, pipeline_parallel_size=1),
    ]
    _unused, problems = _vllm_replica.plan("r", members)
    assert problems and "TP 3 x PP 1 = 3 ranks cannot be split evenly over its 2 node(s)" in problems[0]
    members = [
        node(h, i, f"10.0.0.{i + 1}", tensor_parallel_size=2, pipeline_parallel_size=3) for i, h in enumerate("ab")
    ]
    _unused, problems = _vllm_replica.plan("r", members)
    assert "PP 3 stages over 2 nodes" in problems[0]


def test_tp_across_nodes_is_allowed():
    members = [
        node("a", 0, "10.0.0.1", tensor_parallel_size=2, pipeline_parallel_size=1),
        node("b", 1, "10.0.0.2", tensor_parallel_size=2, pipeline_parallel_size=1),
    ]
    plan, problems = _vllm_replica.plan("tp", members)
    assert problems == [] and plan["local_world_size"] == 1


@pytest.mark.parametrize(
    ("partition", "fragment"),
    [
        ("7,6,6", "has 3 stage(s) but vllm_pipeline_parallel_size is 10"),
        ("7,x", "comma list of positive"),
        ("0,61", "comma list of positive"),
    ],
)
def test_layer_partition_must_match_the_stages(partition, fragment):
    members = [dict(m, pp_layer_partition=partition) for m in flagship()]
    _unused, problems = _vllm_replica.plan("kimi", members)
    assert any(fragment in p for p in problems)


@pytest.mark.parametrize("name", ["", "Kimi", "a_b", "-a", "a" * 33])
def test_replica_names_are_unit_safe(name):
    _unused, problems = _vllm_replica.plan(name, flagship())
    assert problems and problems[0].startswith("vllm_replica=")


def test_rank_zero_api_host_must_be_an_address():
    members = [node("a", 0, "10.0.0.1", api_host="api.example", tensor_parallel_size=1, pipeline_parallel_size=1)]
    _unused, problems = _vllm_replica.plan("r", members)
    assert problems == [
        "vllm_api_host='api.example' on a must be an IP address of the host "
        "(127.0.0.1, the default, keeps the API on the host)"
    ]


def test_nft_rules_fence_internode_ports_to_the_replica():
    text, problems = _vllm_replica.nft_rules(
        "gpufleet_vllm_pp",
        ["172.30.92.10", "172.30.92.11"],
        8000,
        ["172.30.92.14", "10.1.0.0/16", "fd00::/64"],
        {"vllm_master_port": 29501, "vllm_guard_port": 29601},
        [32768, 60999],
    )
    assert problems == []
    assert "elements = { 172.30.92.10/32, 172.30.92.11/32 }" in text
    assert "tcp dport 8000 ip saddr @api_clients_v4 accept" in text
    assert "tcp dport 8000 ip6 saddr @api_clients_v6 accept" in text
    assert "tcp dport { 29501, 29601, 32768-60999 } ip saddr @replica_v4 accept" in text
    assert text.rstrip().endswith("tcp dport { 8000, 29501, 29601, 32768-60999 } counter drop\n    }\n}")
    if shutil.which("nft"):
        proc = subprocess.run(["nft", "-c", "-f", "-"], input=text, text=True, capture_output=True, check=False)
        assert proc.returncode == 0, proc.stderr


def test_nft_rules_refuse_what_would_be_dropped_silently():
    _unused, problems = _vllm_replica.nft_rules("t", ["10.0.0.1"], 70000, ["beef"], {"vllm_master_port": 8000}, [1, 0])
    assert "vllm_api_port=70000 must be a TCP port, 1..65535" in problems
    assert any("vllm_api_allowed_clients: 'beef' is not an IP address or network" in p for p in problems)
    assert any("the ephemeral port range" in p for p in problems)


def test_nft_rules_refuse_a_client_network_with_host_bits():
    # 10.0.0.1/8 reads as one client and opens the API to all of 10.0.0.0/8.
    _unused, problems = _vllm_replica.nft_rules("t", ["10.0.0.1"], 8000, ["10.0.0.1/8"], {}, [32768, 60999])
    assert problems == [
        "vllm_api_allowed_clients='10.0.0.1/8' has host bits set: write the network as 10.0.0.0/8 "
        "(or one address as 10.0.0.1/32)"
    ]
