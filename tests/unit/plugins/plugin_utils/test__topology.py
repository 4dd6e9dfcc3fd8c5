# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The topology plan: allocation by rack and slot, the variables and groups, and every refusal."""

import copy
import json

import pytest

pytest.importorskip("netaddr")

from ansible_collections.gpufleet.inference.plugins.plugin_utils import _topology

NICS = [f"ens{card}f{port}np{port}" for card in range(1, 5) for port in range(2)]


def manifest(**top):
    """The flagship: one rack of ten 8-GPU servers on 10.20.0.0/24, one vLLM replica over all."""
    base = {
        "plugin": "gpufleet.inference.topology",
        "name": "cluster-80x5090",
        "fabric": {"subnet": "10.20.0.0/24", "interface": "bond0", "bond_members": list(NICS)},
        "management": {"subnet": "192.168.10.0/24"},
        "racks": [
            {
                "name": "r1",
                "id": 1,
                "leaf": "leaf01",
                "servers": [{"name": f"gpu{slot:02d}", "slot": slot, "gpus": 8} for slot in range(1, 11)],
            }
        ],
        "serving": {"vllm": [{"replica": "kimi", "nodes": [f"gpu{n:02d}" for n in range(1, 11)]}]},
    }
    base.update(top)
    return base


def refused(data, path):
    with pytest.raises(_topology.TopologyError) as excinfo:
        _topology.plan(data)
    assert excinfo.value.path == path, str(excinfo.value)
    message = str(excinfo.value)
    assert message.startswith(path + " = ")
    assert "Fix: " in message
    return message


def server(data, rack, index):
    return data["racks"][rack]["servers"][index]


# --- allocation ---------------------------------------------------------------------------


def test_flagship_gets_todays_addresses_ranks_and_groups():
    plan = _topology.plan(manifest())
    hosts = plan["hosts"]
    assert list(hosts) == [f"gpu{n:02d}" for n in range(1, 11)]
    assert [h["gpufleet_fabric_address"] for h in hosts.values()] == [f"10.20.0.{n}" for n in range(11, 21)]
    assert [h["ansible_host"] for h in hosts.values()] == [f"192.168.10.{n}" for n in range(11, 21)]
    assert [h["vllm_node_rank"] for h in hosts.values()] == list(range(10))
    gpu05 = hosts["gpu05"]
    assert gpu05 == {
        "ansible_host": "192.168.10.15",
        "gpufleet_rack": "r1",
        "gpufleet_slot": 5,
        "gpufleet_leaf": "leaf01",
        "gpufleet_fabric_interface": "bond0",
        "gpufleet_fabric_address": "10.20.0.15",
        "gpufleet_fabric_subnet": "10.20.0.0/24",
        "gpufleet_fabric_mtu": 9000,
        "fabric_network_interfaces": NICS,
        "fabric_network_bond": "bond0",
        "gpufleet_gpu_count": 8,
        "vllm_replica": "kimi",
        "vllm_node_rank": 4,
    }
    groups = plan["groups"]
    everyone = list(hosts)
    assert groups["fabric_nodes"] == everyone
    assert groups["gpu_nodes"] == everyone
    assert groups["vllm_nodes"] == everyone
    assert groups["vllm_replica_kimi"] == everyone
    assert groups["rack_r1"] == everyone
    assert groups["roce_nodes"] == [] and groups["llama_coordinator"] == [] and groups["llama_rpc_workers"] == []
    assert groups["inference_frontends"] == [] and groups["prometheus_servers"] == []
    topology = plan["vars"]["gpufleet_topology"]
    assert plan["vars"]["gpufleet_topology_name"] == "cluster-80x5090"
    assert topology["counts"] == {"servers": 10, "gpus": 80, "racks": 1, "vllm_replicas": 1, "llama_cpp_clusters": 0}
    assert topology["fabric"] == {"subnet": "10.20.0.0/24", "interface": "bond0", "mtu": 9000, "roce": False}
    assert topology["management"] == {"subnet": "192.168.10.0/24"}


def test_adding_servers_and_racks_never_renumbers_existing_ones():
    before = _topology.plan(manifest())["hosts"]
    grown = manifest()
    # A server inserted at the head of the list in a free slot, and a rack inserted before r1.
    grown["racks"][0]["servers"].insert(0, {"name": "gpu11", "slot": 11, "gpus": 8})
    grown["racks"].insert(0, {"name": "r2", "id": 2, "servers": [{"name": "gpu17", "slot": 1}]})
    after = _topology.plan(grown)["hosts"]
    for host, variables in before.items():
        assert after[host]["gpufleet_fabric_address"] == variables["gpufleet_fabric_address"]
        assert after[host]["ansible_host"] == variables["ansible_host"]
    assert after["gpu11"]["gpufleet_fabric_address"] == "10.20.0.21"
    # Rack 2 starts after rack 1's 16 reserved addresses: 10 + 16 + 1.
    assert after["gpu17"]["gpufleet_fabric_address"] == "10.20.0.27"
    assert after["gpu17"]["ansible_host"] == "192.168.10.27"


def test_offsets_and_rack_size_place_the_blocks():
    data = manifest()
    data["fabric"].update(host_offset=100, rack_size=4, max_racks=2)
    data["management"].update(host_offset=0, rack_size=32)
    data["racks"] = [
        {"name": "a", "id": 2, "servers": [{"name": "x", "slot": 4}]},
        {"name": "b", "id": 1, "servers": [{"name": "y", "slot": 1}]},
    ]
    data["serving"] = {}
    hosts = _topology.plan(data)["hosts"]
    assert hosts["x"]["gpufleet_fabric_address"] == "10.20.0.108"
    assert hosts["y"]["gpufleet_fabric_address"] == "10.20.0.101"
    assert hosts["x"]["ansible_host"] == "192.168.10.36"
    assert "gpufleet_gpu_count" not in hosts["x"]


def test_pinned_addresses_are_kept():
    data = manifest()
    server(data, 0, 0)["fabric_address"] = "10.20.0.200"
    server(data, 0, 1)["management_address"] = "192.168.10.250"
    hosts = _topology.plan(data)["hosts"]
    assert hosts["gpu01"]["gpufleet_fabric_address"] == "10.20.0.200"
    assert hosts["gpu02"]["ansible_host"] == "192.168.10.250"
    assert hosts["gpu02"]["gpufleet_fabric_address"] == "10.20.0.12"


def test_management_addresses_without_a_management_subnet_are_any_ip():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"203.0.113.{index + 1}" if index else "2001:db8::1"
    hosts = _topology.plan(data)["hosts"]
    assert hosts["gpu01"]["ansible_host"] == "2001:db8::1"
    assert hosts["gpu10"]["ansible_host"] == "203.0.113.10"


def test_ipv6_fabric_allocates_the_same_way():
    data = manifest()
    data["fabric"]["subnet"] = "fd00:20::/64"
    assert _topology.plan(data)["hosts"]["gpu03"]["gpufleet_fabric_address"] == "fd00:20::d"


# --- the fabric link ----------------------------------------------------------------------


def test_link_shapes():
    data = manifest()
    server(data, 0, 0)["fabric_nics"] = ["enp1s0f0", "enp1s0f1"]  # own bond members
    server(data, 0, 1)["fabric_nics"] = ["enp1s0f0"]  # a bond of one: bond0 is a bond by name
    hosts = _topology.plan(data)["hosts"]
    assert hosts["gpu01"]["fabric_network_interfaces"] == ["enp1s0f0", "enp1s0f1"]
    assert hosts["gpu01"]["fabric_network_bond"] == "bond0"
    assert hosts["gpu02"]["fabric_network_interfaces"] == ["enp1s0f0"]
    assert hosts["gpu02"]["fabric_network_bond"] == "bond0"
    assert hosts["gpu03"]["fabric_network_interfaces"] == NICS

    single = manifest()
    single["fabric"] = {"subnet": "10.20.0.0/24", "interface": "enp65s0f0np0", "mtu": 1500}
    host = _topology.plan(single)["hosts"]["gpu01"]
    assert host["fabric_network_interfaces"] == ["enp65s0f0np0"]
    assert host["fabric_network_bond"] == ""
    assert host["gpufleet_fabric_mtu"] == 1500
    server(single, 0, 0)["fabric_nics"] = ["enp65s0f0np0"]
    assert _topology.plan(single)["hosts"]["gpu01"]["fabric_network_bond"] == ""

    named = manifest()
    named["fabric"]["interface"] = "fabric0"
    assert _topology.plan(named)["hosts"]["gpu01"]["fabric_network_bond"] == "fabric0"


def test_a_bond_without_members_is_refused():
    data = manifest()
    del data["fabric"]["bond_members"]
    message = refused(data, "racks[0].servers[0].fabric_nics")
    assert "bond0 is a bond but this server has no members" in message


def test_a_single_nic_must_be_the_fabric_interface():
    data = manifest()
    data["fabric"] = {"subnet": "10.20.0.0/24", "interface": "eth1"}
    server(data, 0, 2)["fabric_nics"] = ["ens1f0np0"]
    assert "set fabric.interface to ens1f0np0" in refused(data, "racks[0].servers[2].fabric_nics")


def test_bad_nic_names_are_refused():
    data = manifest()
    data["fabric"]["bond_members"] = ["ens1f0np0", "ens1f0np0"]
    assert "listed twice" in refused(data, "fabric.bond_members[1]")
    data["fabric"]["bond_members"] = ["a/b"]
    refused(data, "fabric.bond_members[0]")
    data = manifest()
    data["fabric"]["interface"] = "bond0-with-a-long-name"
    refused(data, "fabric.interface")
    data = manifest()
    server(data, 0, 0)["fabric_nics"] = ["bond0", "ens1f0np0"]
    assert "own name bond0" in refused(data, "racks[0].servers[0].fabric_nics")


# --- serving ------------------------------------------------------------------------------


def test_replicas_llama_cluster_roce_and_vars():
    data = manifest(vars={"fabric_network_revert_seconds": 300})
    data["fabric"]["roce"] = True
    data["serving"] = {
        "vllm": [
            {"replica": "a", "nodes": ["gpu02", "gpu01"], "vars": {"vllm_api_port": 8001, "x": "replica"}},
            {"replica": "b-2", "nodes": ["gpu03"]},
        ],
        "llama_cpp": [{"coordinator": "gpu04", "workers": ["gpu06", "gpu05"]}],
    }
    server(data, 0, 0)["vars"] = {"x": "server"}
    server(data, 0, 9)["gpus"] = 0
    plan = _topology.plan(data)
    hosts, groups = plan["hosts"], plan["groups"]
    assert (hosts["gpu02"]["vllm_replica"], hosts["gpu02"]["vllm_node_rank"]) == ("a", 0)
    assert (hosts["gpu01"]["vllm_replica"], hosts["gpu01"]["vllm_node_rank"]) == ("a", 1)
    assert hosts["gpu01"]["vllm_api_port"] == 8001
    assert hosts["gpu01"]["x"] == "server"
    assert hosts["gpu02"]["x"] == "replica"
    assert "vllm_replica" not in hosts["gpu04"]
    assert groups["vllm_nodes"] == ["gpu02", "gpu01", "gpu03"]
    assert groups["vllm_replica_a"] == ["gpu02", "gpu01"]
    assert groups["vllm_replica_b_2"] == ["gpu03"]
    assert groups["llama_coordinator"] == ["gpu04"]
    assert groups["llama_rpc_workers"] == ["gpu06", "gpu05"]
    assert groups["roce_nodes"] == groups["fabric_nodes"]
    assert "gpu10" not in groups["gpu_nodes"] and "gpufleet_gpu_count" not in hosts["gpu10"]
    assert plan["vars"]["fabric_network_revert_seconds"] == 300
    assert plan["vars"]["gpufleet_topology"]["counts"]["llama_cpp_clusters"] == 1


def test_spines_and_leaf_pairs_are_reported():
    data = manifest(spines=[{"name": "spine1", "id": 1}, {"name": "spine2", "id": 2}])
    data["racks"][0]["leaf"] = ["leaf01a", "leaf01b"]
    plan = _topology.plan(data)
    assert plan["vars"]["gpufleet_topology"]["spines"] == [{"name": "spine1", "id": 1}, {"name": "spine2", "id": 2}]
    assert plan["hosts"]["gpu01"]["gpufleet_leaf"] == ["leaf01a", "leaf01b"]
    assert "spine1" not in plan["hosts"] and "spines" not in plan["groups"]


def test_minimal_manifest_and_constructed_keys():
    data = {
        "plugin": "gpufleet.inference.topology",
        "fabric": {"subnet": "10.30.0.0/24", "interface": "eth1"},
        "racks": [{"name": "lab", "id": 1, "servers": [{"name": "lab-head", "slot": 1, "management_address": "::1"}]}],
        "keyed_groups": [{"key": "gpufleet_rack"}],
    }
    plan = _topology.plan(data, allowed_extra=("keyed_groups",))
    assert plan["hosts"]["lab-head"]["gpufleet_fabric_address"] == "10.30.0.11"
    assert "gpufleet_topology_name" not in plan["vars"]
    assert plan["vars"]["gpufleet_topology"]["name"] == ""
    assert "keyed_groups" in refused(copy.deepcopy(data), "keyed_groups")


def test_the_manifest_is_not_changed():
    data = manifest()
    kept = copy.deepcopy(data)
    _topology.plan(data)
    assert data == kept


# --- refusals -----------------------------------------------------------------------------


def test_unknown_top_level_key_names_the_closest():
    message = refused(manifest(rack=[]), "rack")
    assert "unknown key" in message and "did you mean racks?" in message


def test_unknown_item_keys_name_the_closest():
    data = manifest()
    server(data, 0, 2)["fabric_adress"] = "10.20.0.99"
    assert "did you mean fabric_address?" in refused(data, "racks[0].servers[2].fabric_adress")
    data = manifest()
    data["fabric"]["bond_member"] = []
    assert "did you mean bond_members?" in refused(data, "fabric.bond_member")
    data = manifest()
    data["serving"]["vllm"][0]["node"] = []
    assert "did you mean nodes?" in refused(data, "serving.vllm[0].node")
    data = manifest()
    data["racks"][0]["zzz"] = 1
    assert "use one of the known keys: name, id, leaf, servers" in refused(data, "racks[0].zzz")


@pytest.mark.parametrize("subnet", ["10.20.0.0", "bogus", "10.20.0/24", "10.20.0.0/33", 1020, None])
def test_subnet_must_be_a_cidr(subnet):
    data = manifest()
    data["fabric"]["subnet"] = subnet
    message = refused(data, "fabric.subnet")
    assert "is required" in message if subnet is None else "CIDR" in message


def test_subnet_with_host_bits_names_the_network():
    data = manifest()
    data["fabric"]["subnet"] = "10.20.0.5/24"
    assert "write the network address, 10.20.0.0/24" in refused(data, "fabric.subnet")


def test_subnet_too_small_for_the_reservation():
    data = manifest()
    data["fabric"]["max_racks"] = 16
    message = refused(data, "fabric.subnet")
    assert "subnet too small: needs 266 addresses" in message
    assert "/24 has 254" in message
    assert "use a larger subnet or smaller rack_size/max_racks" in message
    data = manifest()
    data["management"]["rack_size"] = 64
    assert "needs 522 addresses" in refused(data, "management.subnet")


@pytest.mark.parametrize("rack_id", [0, 9, "1", True])
def test_rack_id_outside_range(rack_id):
    data = manifest()
    data["racks"][0]["id"] = rack_id
    refused(data, "racks[0].id")


def test_rack_id_duplicated():
    data = manifest()
    data["racks"].append({"name": "r2", "id": 1, "servers": []})
    assert "is already the id of racks[0]" in refused(data, "racks[1].id")


def test_rack_names_that_collide_as_groups():
    data = manifest()
    data["racks"][0]["name"] = "row-1"
    data["racks"].append({"name": "row.1", "id": 2})
    assert "makes group rack_row_1" in refused(data, "racks[1].name")


@pytest.mark.parametrize("slot", [0, 17, None])
def test_slot_outside_range(slot):
    data = manifest()
    server(data, 0, 3)["slot"] = slot
    refused(data, "racks[0].servers[3].slot")


def test_slot_duplicated_in_a_rack_but_not_across_racks():
    data = manifest()
    server(data, 0, 3)["slot"] = 1
    assert "is already the slot of gpu01" in refused(data, "racks[0].servers[3].slot")
    data = manifest()
    data["racks"].append({"name": "r2", "id": 2, "servers": [{"name": "gpu17", "slot": 1}]})
    _topology.plan(data)


def test_duplicate_server_names():
    data = manifest()
    data["racks"].append({"name": "r2", "id": 2, "servers": [{"name": "gpu03", "slot": 1}]})
    assert "is already racks[0].servers[2]" in refused(data, "racks[1].servers[0].name")


@pytest.mark.parametrize("name", ["-gpu", "gpu 01", "gpü", "", 5])
def test_bad_hostnames(name):
    data = manifest()
    server(data, 0, 0)["name"] = name
    data["serving"] = {}
    refused(data, "racks[0].servers[0].name")


def test_bad_rack_leaf_spine_and_topology_names():
    data = manifest(name="a b")
    refused(data, "name")
    data = manifest()
    data["racks"][0]["name"] = "r/1"
    refused(data, "racks[0].name")
    data = manifest()
    data["racks"][0]["leaf"] = ["leaf 1"]
    refused(data, "racks[0].leaf[0]")
    data = manifest(spines=[{"name": "s1", "id": 1}, {"name": "s1", "id": 2}])
    refused(data, "spines[1].name")
    data = manifest(spines=[{"name": "s1", "id": 1}, {"name": "s2", "id": 1}])
    refused(data, "spines[1].id")


def test_pinned_address_outside_the_subnet():
    data = manifest()
    server(data, 0, 2)["fabric_address"] = "10.30.0.5"
    message = refused(data, "racks[0].servers[2].fabric_address")
    assert "is outside fabric.subnet 10.20.0.0/24" in message
    data = manifest()
    server(data, 0, 2)["management_address"] = "10.0.0.1"
    assert "management.subnet" in refused(data, "racks[0].servers[2].management_address")


@pytest.mark.parametrize(("address", "which"), [("10.20.0.0", "network"), ("10.20.0.255", "broadcast")])
def test_pinned_network_or_broadcast_address(address, which):
    data = manifest()
    server(data, 0, 2)["fabric_address"] = address
    assert f"is the {which} address of 10.20.0.0/24" in refused(data, "racks[0].servers[2].fabric_address")


def test_pinned_address_colliding_with_an_allocated_one():
    data = manifest()
    # Declared before gpu05, still reported on the pinned server.
    server(data, 0, 0)["fabric_address"] = "10.20.0.15"
    message = refused(data, "racks[0].servers[0].fabric_address")
    owner = "gpu05 (racks[0].servers[4].fabric_address, allocated from rack 1 slot 5)"
    assert "is already the address of " + owner in message


def test_two_pinned_addresses_colliding():
    data = manifest()
    server(data, 0, 0)["fabric_address"] = "10.20.0.200"
    server(data, 0, 1)["fabric_address"] = "10.20.0.200"
    assert "gpu01 (racks[0].servers[0].fabric_address, pinned)" in refused(data, "racks[0].servers[1].fabric_address")


def test_duplicate_management_addresses():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 7)["management_address"] = "192.0.2.2"
    assert "is already the address of gpu02" in refused(data, "racks[0].servers[7].management_address")
    data = manifest()
    server(data, 0, 0)["management_address"] = "192.168.10.12"
    refused(data, "racks[0].servers[0].management_address")


@pytest.mark.parametrize("address", ["gpu01.example.com", "192.0.2.1/24", "192.0.2", 17])
def test_management_address_not_an_ip(address):
    data = manifest()
    server(data, 0, 0)["management_address"] = address
    assert "is not an IP address" in refused(data, "racks[0].servers[0].management_address")


def test_management_address_required_without_a_management_subnet():
    data = manifest()
    del data["management"]
    assert "management.subnet" in refused(data, "racks[0].servers[0].management_address")
    data["management"] = {"host_offset": 10}
    refused(data, "racks[0].servers[0].management_address")


@pytest.mark.parametrize("mtu", [1279, 9217, "9000", 0])
def test_mtu_outside_range(mtu):
    data = manifest()
    data["fabric"]["mtu"] = mtu
    refused(data, "fabric.mtu")


def test_vllm_node_not_a_server():
    data = manifest()
    data["serving"]["vllm"][0]["nodes"][3] = "gpu99"
    assert "is not a server of this manifest" in refused(data, "serving.vllm[0].nodes[3]")


def test_server_in_two_replicas():
    data = manifest()
    data["serving"]["vllm"].append({"replica": "other", "nodes": ["gpu11", "gpu03"]})
    data["racks"][0]["servers"].append({"name": "gpu11", "slot": 11})
    assert "is already a node of serving.vllm[0]" in refused(data, "serving.vllm[1].nodes[1]")


def test_server_listed_twice_in_a_replica():
    data = manifest()
    data["serving"]["vllm"][0]["nodes"][9] = "gpu01"
    assert "is listed twice" in refused(data, "serving.vllm[0].nodes[9]")


@pytest.mark.parametrize("nodes", [[], None])
def test_empty_replica(nodes):
    data = manifest()
    data["serving"]["vllm"][0]["nodes"] = nodes
    refused(data, "serving.vllm[0].nodes")


@pytest.mark.parametrize("name", ["Kimi", "kimi_k3", "-kimi", "k" * 33, ""])
def test_bad_replica_names(name):
    data = manifest()
    data["serving"]["vllm"][0]["replica"] = name
    refused(data, "serving.vllm[0].replica")


def test_duplicate_replica_names():
    data = manifest()
    data["serving"]["vllm"][0]["nodes"] = ["gpu01"]
    data["serving"]["vllm"].append({"replica": "kimi", "nodes": ["gpu02"]})
    refused(data, "serving.vllm[1].replica")


def test_llama_coordinator_also_a_worker():
    data = manifest()
    data["serving"] = {"llama_cpp": [{"coordinator": "gpu01", "workers": ["gpu02", "gpu01"]}]}
    assert "is the coordinator of this cluster" in refused(data, "serving.llama_cpp[0].workers[1]")


def test_llama_cluster_members_must_be_servers_and_single():
    data = manifest()
    data["serving"] = {"llama_cpp": [{"coordinator": "head", "workers": []}]}
    refused(data, "serving.llama_cpp[0].coordinator")
    data["serving"] = {"llama_cpp": [{"coordinator": "gpu01", "workers": ["gpu02", "gpu02"]}]}
    refused(data, "serving.llama_cpp[0].workers[1]")
    data["serving"] = {"llama_cpp": [{"coordinator": "gpu01"}, {"coordinator": "gpu02"}]}
    assert "one cluster per inventory" in refused(data, "serving.llama_cpp[1]")


@pytest.mark.parametrize(
    ("where", "key", "fix"),
    [
        ("vars", "gpufleet_fabric_mtu", "fabric.mtu"),
        ("server", "ansible_host", "management_address"),
        ("server", "vllm_node_rank", "serving.vllm[].nodes"),
        ("replica", "vllm_replica", "serving.vllm[].replica"),
    ],
)
def test_vars_may_not_set_what_the_plan_sets(where, key, fix):
    data = manifest()
    if where == "vars":
        data["vars"] = {key: 1}
        path = "vars." + key
    elif where == "server":
        server(data, 0, 0)["vars"] = {key: 1}
        path = "racks[0].servers[0].vars." + key
    else:
        data["serving"]["vllm"][0]["vars"] = {key: 1}
        path = "serving.vllm[0].vars." + key
    assert fix in refused(data, path)


def test_structural_errors_name_the_key():
    refused(manifest(racks=[]), "racks")
    refused(manifest(racks={"r1": {}}), "racks")
    refused(manifest(fabric="10.20.0.0/24"), "fabric")
    data = manifest()
    del data["fabric"]["interface"]
    refused(data, "fabric.interface")
    data = manifest()
    data["fabric"]["roce"] = "yes"
    refused(data, "fabric.roce")
    data = manifest()
    server(data, 0, 0)["gpus"] = "8"
    refused(data, "racks[0].servers[0].gpus")
    data = manifest()
    data["racks"][0]["servers"][0] = "gpu01"
    refused(data, "racks[0].servers[0]")
    with pytest.raises(_topology.TopologyError):
        _topology.plan(["not", "a", "mapping"])


def test_missing_netaddr_is_named(monkeypatch):
    monkeypatch.setattr(_topology, "HAS_NETADDR", False)
    with pytest.raises(RuntimeError, match="pip install netaddr"):
        _topology.plan(manifest())


def test_operations_hosts_become_the_front_door_and_prometheus_groups():
    data = manifest()
    data["operations"] = {"frontends": ["gpu10"], "prometheus": ["gpu10", "gpu09"]}
    plan = _topology.plan(data)
    assert plan["groups"]["inference_frontends"] == ["gpu10"]
    assert plan["groups"]["prometheus_servers"] == ["gpu10", "gpu09"]
    assert plan["vars"]["gpufleet_topology"]["operations"] == {"frontends": ["gpu10"], "prometheus": ["gpu10", "gpu09"]}


@pytest.mark.parametrize(
    "operations, path, problem",
    [
        ({"frontends": ["fd01"]}, "operations.frontends[0]", "is not a server of this manifest"),
        ({"frontends": ["gpu01", "gpu01"]}, "operations.frontends[1]", "is listed twice"),
        ({"frontend": ["gpu01"]}, "operations.frontend", "frontends"),
        ("gpu01", "operations", ""),
    ],
)
def test_operations_hosts_are_checked(operations, path, problem):
    data = manifest()
    data["operations"] = operations
    with pytest.raises(_topology.TopologyError) as error:
        _topology.plan(data)
    assert path in str(error.value) and problem in str(error.value)


def test_group_all_s_summary_does_not_grow_with_the_servers():
    """Every host carries group all's variables (ansible-inventory --list folds them in), so a
    summary that lists servers makes the inventory grow with the square of the cluster."""

    def summary(rack_count):
        data = manifest()
        data["fabric"]["subnet"] = "10.20.0.0/16"
        data["fabric"]["max_racks"] = rack_count
        data["management"]["subnet"] = "192.168.0.0/16"
        data["racks"] = [
            {
                "name": f"r{rack}",
                "id": rack,
                "servers": [{"name": f"g{rack}-{slot}", "slot": slot, "gpus": 8} for slot in range(1, 17)],
            }
            for rack in range(1, rack_count + 1)
        ]
        data["serving"] = {
            "vllm": [
                {"replica": f"x{rack}", "nodes": [f"g{rack}-{slot}" for slot in range(1, 9)]}
                for rack in range(1, rack_count + 1)
            ]
        }
        plan = _topology.plan(data)
        assert len(plan["hosts"]) == 16 * rack_count
        return plan["vars"]["gpufleet_topology"]

    small, large = summary(1), summary(12)
    assert large["counts"] == {"servers": 192, "gpus": 1536, "racks": 12, "vllm_replicas": 12, "llama_cpp_clusters": 0}
    assert len(json.dumps(large)) - len(json.dumps(small)) < 16


# --- hostile manifests: what netaddr or Ansible would accept and the cluster cannot run --------


def test_a_management_block_that_cannot_hold_the_last_rack_is_refused_not_a_traceback():
    # Rack 8 slot 16 is management host 10 + 7 * 6 + 16 = 68 of a /26 (62 hosts): it was an
    # IndexError from netaddr with no key path.
    data = manifest(serving={})
    data["management"] = {"subnet": "192.168.10.0/26", "rack_size": 6}
    data["racks"] = [{"name": "r8", "id": 8, "servers": [{"name": "gpu01", "slot": 16}]}]
    message = refused(data, "management.rack_size")
    assert "is smaller than fabric.rack_size 16" in message
    assert "set management.rack_size to at least 16" in message


def test_a_management_rack_size_smaller_than_the_fabric_s_is_refused():
    # With 8 management addresses per rack, rack 1 slot 9 takes rack 2 slot 1's address
    # (192.168.10.19), whether or not that slot is filled yet.
    data = manifest(serving={})
    data["management"]["rack_size"] = 8
    data["racks"][0]["servers"] = [{"name": "gpu09", "slot": 9}]
    message = refused(data, "management.rack_size")
    assert "slots 9..16 of a rack would take the next rack's management addresses" in message
    data["management"]["rack_size"] = 16
    assert _topology.plan(data)["hosts"]["gpu09"]["ansible_host"] == "192.168.10.19"


@pytest.mark.parametrize("subnet", ["10.20.0.0/24", "10.20.0.0/25", "10.20.0.128/25", "10.0.0.0/8", "10.20.0.0/16"])
def test_overlapping_fabric_and_management_subnets_are_refused(subnet):
    data = manifest()
    data["management"]["subnet"] = subnet
    data["management"]["host_offset"] = 0
    message = refused(data, "management.subnet")
    assert "overlaps fabric.subnet 10.20.0.0/24" in message


def test_a_management_subnet_of_the_other_ip_version_does_not_overlap():
    data = manifest()
    data["management"]["subnet"] = "fd00:10::/64"
    assert _topology.plan(data)["hosts"]["gpu01"]["ansible_host"] == "fd00:10::b"


def test_a_pinned_management_address_that_is_another_server_s_fabric_address_is_refused():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 3)["management_address"] = "10.20.0.12"
    message = refused(data, "racks[0].servers[3].management_address")
    assert "is already the address of gpu02 (racks[0].servers[1].fabric_address, allocated from rack 1 slot 2)" in (
        message
    )
    # A fabric pin is an interface too.
    server(data, 0, 3)["management_address"] = "192.0.2.4"
    server(data, 0, 0)["fabric_address"] = "10.20.0.200"
    server(data, 0, 5)["management_address"] = "10.20.0.200"
    assert "gpu01 (racks[0].servers[0].fabric_address, pinned)" in refused(
        data, "racks[0].servers[5].management_address"
    )


def test_a_server_s_management_address_may_not_be_its_own_fabric_address():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 0)["management_address"] = "10.20.0.11"
    assert "is already the address of gpu01 (racks[0].servers[0].fabric_address" in refused(
        data, "racks[0].servers[0].management_address"
    )


def test_a_pinned_management_address_inside_the_fabric_subnet_is_refused():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 6)["management_address"] = "10.20.0.250"
    assert "is inside fabric.subnet 10.20.0.0/24" in refused(data, "racks[0].servers[6].management_address")


@pytest.mark.parametrize(
    ("subnet", "block"),
    [
        ("0.0.0.0/0", "0.0.0.0/8"),
        ("0.0.0.0/8", "0.0.0.0/8"),
        ("127.0.0.0/8", "127.0.0.0/8"),
        ("127.20.0.0/24", "127.0.0.0/8"),
        ("169.254.0.0/16", "169.254.0.0/16"),
        ("224.0.0.0/4", "224.0.0.0/4"),
        ("239.20.0.0/24", "224.0.0.0/4"),
        ("240.0.0.0/4", "240.0.0.0/4"),
        ("255.255.255.0/24", "240.0.0.0/4"),
        ("128.0.0.0/1", "169.254.0.0/16"),
        ("::/0", "::/8"),
        ("::ffff:10.20.0.0/120", "::/8"),
        ("fe80::/64", "fe80::/10"),
        ("fec0::/64", "fec0::/10"),
        ("ff02::/64", "ff00::/8"),
    ],
)
@pytest.mark.parametrize("key", ["fabric", "management"])
def test_subnets_no_host_interface_can_use_are_refused(key, subnet, block):
    data = manifest()
    data[key]["subnet"] = subnet
    message = refused(data, key + ".subnet")
    assert f"overlaps {block}" in message
    assert "(RFC " in message
    assert "10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16" in message


@pytest.mark.parametrize("subnet", ["10.0.0.0/8", "172.16.0.0/12", "100.64.0.0/10", "fd00:20::/64", "2001:db8::/64"])
def test_ordinary_subnets_are_kept(subnet):
    data = manifest()
    data["fabric"]["subnet"] = subnet
    _topology.plan(data)


@pytest.mark.parametrize(
    "address", ["0.0.0.0", "0.1.2.3", "224.0.0.1", "239.1.1.1", "240.0.0.1", "255.255.255.255", "::", "ff02::1"]
)
def test_pinned_management_addresses_no_host_can_have_are_refused(address):
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 1)["management_address"] = address
    assert "is in " in refused(data, "racks[0].servers[1].management_address")


def test_ipv4_mapped_management_addresses_are_refused_with_the_ipv4_form():
    data = manifest()
    del data["management"]
    for index, entry in enumerate(data["racks"][0]["servers"]):
        entry["management_address"] = f"192.0.2.{index + 1}"
    server(data, 0, 1)["management_address"] = "::ffff:192.0.2.99"
    assert "write 192.0.2.99" in refused(data, "racks[0].servers[1].management_address")


def test_hostnames_that_differ_only_in_case_are_refused():
    data = manifest()
    data["racks"].append({"name": "r2", "id": 2, "servers": [{"name": "GPU03", "slot": 1}]})
    message = refused(data, "racks[1].servers[0].name")
    assert "differs from gpu03 (racks[0].servers[2]) only in case" in message
    assert "RFC 4343" in message


@pytest.mark.parametrize(
    "name",
    [
        "gpu_01",
        "gpu-",
        "gpu01.",
        ".gpu01",
        "gpu..01",
        "gpu01.-lab",
        "a" * 64,
        "1234",
        "10.20.0.1",
        "gpu01.123",
        ".".join(["a" * 63] * 4),
    ],
)
def test_hostnames_that_are_not_dns_names_are_refused(name):
    data = manifest(serving={})
    server(data, 0, 0)["name"] = name
    message = refused(data, "racks[0].servers[0].name")
    assert "is not a valid hostname" in message


@pytest.mark.parametrize("name", ["all", "ungrouped", "localhost", "LocalHost"])
def test_hostnames_ansible_or_dns_reserve_are_refused(name):
    data = manifest(serving={})
    server(data, 0, 0)["name"] = name
    assert "is reserved" in refused(data, "racks[0].servers[0].name")


@pytest.mark.parametrize("name", ["gpu01.example.com", "0gpu", "x", "a" * 63, "GPU-01", "node-1.r2.dc1"])
def test_dns_hostnames_are_kept(name):
    data = manifest(serving={})
    server(data, 0, 0)["name"] = name
    assert name in _topology.plan(data)["hosts"]


def test_a_manifest_without_servers_is_refused():
    data = manifest(serving={})
    data["racks"] = [{"name": "r1", "id": 1}, {"name": "r2", "id": 2, "servers": []}]
    assert "declares no servers" in refused(data, "racks")
