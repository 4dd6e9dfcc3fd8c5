# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped scenario inventories parse, have the layout they describe, and ask for a driver,
modules and CUDA that can drive their GPUs."""

import functools
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_compat import check_compat, identify

REPO = Path(__file__).resolve().parents[2]
RTX_5090 = 0x2B85
# Every topology manifest the collection ships (inventories/lab/ is generated and not shipped).
MANIFESTS = sorted(
    path.relative_to(REPO).as_posix()
    for path in (REPO / "inventories").glob("**/*topology.yml")
    if path.relative_to(REPO).parts[1] != "lab"
)
FLAGSHIP = "inventories/cluster-80x5090/topology.yml"


def ansible_inventory(*args):
    """ansible-inventory from the checkout (its ansible.cfg), with an unparsable source fatal."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "ansible.cli.inventory"]
    collections = REPO.parents[2] if REPO.parent.parent.name == "ansible_collections" else REPO / "collections"
    env = dict(os.environ, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true", ANSIBLE_COLLECTIONS_PATH=str(collections))
    return subprocess.run([*argv, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def plain(value):
    """ansible-inventory's JSON without the {"__ansible_unsafe": ...} wrappers of plugin data."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


@functools.lru_cache(maxsize=None)
def listing(manifest):
    result = ansible_inventory("-i", manifest, "--list")
    assert result.returncode == 0, result.stderr
    return plain(json.loads(result.stdout))


def members(manifest, group):
    return listing(manifest).get(group, {}).get("hosts", [])


def test_there_are_shipped_manifests():
    assert FLAGSHIP in MANIFESTS
    assert "inventories/llama-rpc/topology.yml" in MANIFESTS


@pytest.mark.parametrize("manifest", MANIFESTS)
def test_every_shipped_manifest_parses(manifest):
    pytest.importorskip("netaddr")
    graph = ansible_inventory("-i", manifest, "--graph")
    assert graph.returncode == 0, graph.stderr
    assert "@fabric_nodes:" in graph.stdout
    assert "WARNING" not in graph.stderr, graph.stderr
    assert listing(manifest)["fabric_nodes"]["hosts"]


def test_flagship_manifest_is_ten_gpu_nodes_in_one_replica():
    pytest.importorskip("netaddr")
    hostvars = listing(FLAGSHIP)["_meta"]["hostvars"]
    nodes = members(FLAGSHIP, "gpu_nodes")
    assert nodes == [f"gpu{n:02d}" for n in range(1, 11)]
    assert members(FLAGSHIP, "fabric_nodes") == nodes and members(FLAGSHIP, "vllm_nodes") == nodes
    assert members(FLAGSHIP, "roce_nodes") == []
    subnets = {hostvars[node]["gpufleet_fabric_subnet"] for node in nodes}
    assert subnets == {"10.20.0.0/24"}
    subnet = ipaddress.ip_network(subnets.pop())
    addresses = [hostvars[node]["gpufleet_fabric_address"] for node in nodes]
    assert len(set(addresses)) == 10
    assert all(ipaddress.ip_address(address) in subnet for address in addresses)
    # Today's addresses, kept by the allocation rule (rack 1, slots 1..10, host offset 10).
    assert addresses == [f"10.20.0.{n}" for n in range(11, 21)]
    assert {hostvars[node]["vllm_replica"] for node in nodes} == {"kimi"}
    assert [hostvars[node]["vllm_node_rank"] for node in nodes] == list(range(10))
    for node in nodes:
        assert hostvars[node]["gpufleet_gpu_count"] == 8
        assert hostvars[node]["gpufleet_fabric_mtu"] == 9000
        assert hostvars[node]["fabric_network_bond"] == "bond0"
        assert len(hostvars[node]["fabric_network_interfaces"]) == 8
    # group_vars/ next to the manifest still applies: it holds the role settings.
    assert hostvars["gpu01"]["vllm_pipeline_parallel_size"] == 10
    assert hostvars["gpu01"]["gpufleet_gpu_model"] == "RTX 5090"
    # The manifest owns the per-host layout.
    assert "vllm_replica" not in _vllm_group("cluster-80x5090")
    assert not (REPO / "inventories/cluster-80x5090/hosts.yml").exists()
    assert not (REPO / "inventories/cluster-80x5090/host_vars").exists()


def test_llama_rpc_manifest_is_one_coordinator_and_three_workers():
    pytest.importorskip("netaddr")
    manifest = "inventories/llama-rpc/topology.yml"
    assert members(manifest, "llama_coordinator") == ["llama-head"]
    assert members(manifest, "llama_rpc_workers") == ["llama-w1", "llama-w2", "llama-w3"]
    hostvars = listing(manifest)["_meta"]["hostvars"]
    addresses = {hostvars[host]["gpufleet_fabric_address"] for host in hostvars}
    assert len(addresses) == 4


def gpus(device_id, count):
    return [
        {"bus_id": f"0000:{16 * n:02x}:00.0", "pci_id": f"10de:{device_id:04x}", "device_id": device_id}
        | identify(device_id)
        for n in range(1, count + 1)
    ]


def test_rtx_5090_inventory_drives_its_gpus():
    values = yaml.safe_load((REPO / "inventories/cluster-80x5090/group_vars/gpu_nodes.yml").read_text())
    assert values["nvidia_driver_cuda_versions"] == "{{ cuda_toolkit_versions }}"
    found = check_compat(
        gpus(RTX_5090, values["gpufleet_gpu_count"]),
        values["nvidia_driver_branch"],
        values["nvidia_driver_kernel_modules"],
        values["cuda_toolkit_versions"],
    )
    assert found["errors"] == []
    assert values["gpufleet_gpu_count"] == 8
    assert identify(RTX_5090)["name"].endswith("RTX 5090")


def test_role_defaults_are_refused_on_rtx_5090_only_for_cuda():
    """CUDA 12.5 stays the role default; on Blackwell it is refused, the branch is not."""
    driver = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    toolkit = yaml.safe_load((REPO / "roles/cuda_toolkit/defaults/main.yml").read_text())
    found = check_compat(
        gpus(RTX_5090, 8),
        driver["nvidia_driver_branch"],
        driver["nvidia_driver_kernel_modules"],
        toolkit["cuda_toolkit_versions"],
    )
    assert [(error["variable"], error["value"]) for error in found["errors"]] == [("cuda_toolkit_versions", "12.5")]


def test_seed_articles_pair_is_refused_on_rtx_5090():
    found = check_compat(gpus(RTX_5090, 8), "555", "proprietary", ["12.5"])
    variables = sorted({error["variable"] for error in found["errors"]})
    assert variables == ["cuda_toolkit_versions", "nvidia_driver_branch", "nvidia_driver_kernel_modules"]


def _vllm_group(inventory):
    return yaml.safe_load((REPO / "inventories" / inventory / "group_vars" / "vllm_nodes.yml").read_text())


def test_flagship_vllm_layout_is_one_replica_of_ten_stages():
    pytest.importorskip("netaddr")
    from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_catalogue, _vllm_replica

    group = _vllm_group("cluster-80x5090")
    config, problems = _vllm_catalogue.validate(group["vllm_args"], group["vllm_version"])
    assert problems == []
    assert config["quantization"] == "gptq" and config["dtype"] == "auto"
    hostvars = listing(FLAGSHIP)["_meta"]["hostvars"]
    nodes = [
        {
            "host": host,
            "rank": hostvars[host]["vllm_node_rank"],
            "address": hostvars[host]["gpufleet_fabric_address"],
            "tensor_parallel_size": group["vllm_tensor_parallel_size"],
            "pipeline_parallel_size": group["vllm_pipeline_parallel_size"],
        }
        for host in members(FLAGSHIP, "vllm_nodes")
    ]
    replicas = {hostvars[node["host"]]["vllm_replica"] for node in nodes}
    assert len(replicas) == 1
    plan, problems = _vllm_replica.plan(replicas.pop(), nodes)
    assert problems == []
    assert plan["nnodes"] == 10 and plan["local_world_size"] == 8
    assert [n["rank"] for n in plan["nodes"]] == list(range(10))
    assert plan["master_addr"] == nodes[0]["address"] == "10.20.0.11"


def test_single_node_vllm_settings_are_real_flags():
    from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_catalogue

    group = _vllm_group("single-node")
    config, problems = _vllm_catalogue.validate(group["vllm_args"], group["vllm_version"])
    assert problems == []
    assert config["enable-expert-parallel"] is True and config["enable-prefix-caching"] is True
