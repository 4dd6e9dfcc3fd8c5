# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The topology inventory plugin, driven through the real ansible-inventory and ansible.cfg."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("netaddr")

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible_collections.gpufleet.inference.plugins.inventory.topology import InventoryModule
from ansible_collections.gpufleet.inference.plugins.plugin_utils import _topology

REPO = Path(__file__).resolve().parents[4]

MANIFEST = """\
plugin: gpufleet.inference.topology
name: two-racks
fabric:
  subnet: 10.40.0.0/24
  interface: bond0
  bond_members: [ens1f0np0, ens1f1np1]
  roce: true
management:
  subnet: 192.0.2.0/24
  host_offset: 0
  rack_size: 30
vars:
  from_all: "{{ 20 + 22 }}"
racks:
  - name: r1
    id: 1
    servers:
      - {name: a1, slot: 1, gpus: 8}
      - {name: a2, slot: 2, gpus: 8, fabric_address: 10.40.0.200, vars: {note: "{{ gpufleet_slot }}"}}
  - name: r-2
    id: 2
    servers:
      - {name: b1, slot: 3, fabric_nics: [enp1s0]}
serving:
  vllm:
    - replica: small
      nodes: [a2, a1]
  llama_cpp:
    - coordinator: b1
      workers: [a1]
keyed_groups:
  - key: gpufleet_rack
    prefix: site
compose:
  next_slot: gpufleet_slot + 1
"""


def ansible_inventory(*args, **environ):
    """Run ansible-inventory from the checkout (its ansible.cfg) with unparsable sources fatal."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "ansible.cli.inventory"]
    collections = REPO.parents[2] if REPO.parent.parent.name == "ansible_collections" else REPO / "collections"
    env = dict(os.environ, ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true", ANSIBLE_COLLECTIONS_PATH=str(collections))
    env.update(environ)
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


def members(listing, group):
    return listing.get(group, {}).get("hosts", [])


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    path = tmp_path_factory.mktemp("topology") / "lab-topology.yml"
    path.write_text(MANIFEST)
    result = ansible_inventory("-i", str(path), "--list")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_hosts_get_their_position_addresses_and_link(listing):
    hostvars = plain(listing["_meta"]["hostvars"])
    assert hostvars["a1"]["gpufleet_fabric_address"] == "10.40.0.11"
    assert hostvars["a2"]["gpufleet_fabric_address"] == "10.40.0.200"
    assert hostvars["b1"]["gpufleet_fabric_address"] == "10.40.0.29"
    assert [hostvars[h]["ansible_host"] for h in ("a1", "a2", "b1")] == ["192.0.2.1", "192.0.2.2", "192.0.2.33"]
    assert hostvars["a1"]["fabric_network_interfaces"] == ["ens1f0np0", "ens1f1np1"]
    assert hostvars["b1"]["fabric_network_interfaces"] == ["enp1s0"]
    assert hostvars["b1"]["fabric_network_bond"] == "bond0"
    assert (hostvars["a2"]["vllm_replica"], hostvars["a2"]["vllm_node_rank"]) == ("small", 0)
    assert hostvars["a1"]["vllm_node_rank"] == 1
    assert hostvars["a1"]["gpufleet_gpu_count"] == 8 and "gpufleet_gpu_count" not in hostvars["b1"]
    assert hostvars["a1"]["next_slot"] == 2


def test_groups_are_the_ones_the_playbooks_use(listing):
    assert members(listing, "fabric_nodes") == ["a1", "a2", "b1"]
    assert members(listing, "roce_nodes") == ["a1", "a2", "b1"]
    assert members(listing, "gpu_nodes") == ["a1", "a2"]
    assert members(listing, "vllm_nodes") == ["a2", "a1"]
    assert members(listing, "vllm_replica_small") == ["a2", "a1"]
    assert members(listing, "llama_coordinator") == ["b1"]
    assert members(listing, "llama_rpc_workers") == ["a1"]
    assert members(listing, "rack_r1") == ["a1", "a2"]
    assert members(listing, "rack_r_2") == ["b1"]
    assert members(listing, "site_r_2") == ["b1"]


def test_group_all_gets_the_summary_and_templates_stay_templates(listing):
    # --list folds group all's variables into every host's.
    all_vars = listing["_meta"]["hostvars"]["b1"]
    # Manifest strings keep the loader's trust: they are templated when used, like any inventory's.
    assert all_vars["from_all"] == "{{ 20 + 22 }}"
    assert listing["_meta"]["hostvars"]["a2"]["note"] == "{{ gpufleet_slot }}"
    topology = plain(all_vars["gpufleet_topology"])
    assert plain(all_vars["gpufleet_topology_name"]) == "two-racks"
    assert topology["counts"] == {"servers": 3, "gpus": 16, "racks": 2, "vllm_replicas": 1, "llama_cpp_clusters": 1}


def test_a_refused_manifest_fails_the_run_with_the_key_path(tmp_path):
    path = tmp_path / "topology.yml"
    path.write_text(MANIFEST.replace("fabric_address: 10.40.0.200", "fabric_address: 10.40.0.11"))
    result = ansible_inventory("-i", str(path), "--graph")
    assert result.returncode != 0
    assert "racks[0].servers[1].fabric_address = '10.40.0.11': is already the address of a1" in result.stderr


def test_manifest_checks_come_before_option_types(tmp_path):
    path = tmp_path / "topology.yml"
    path.write_text("plugin: gpufleet.inference.topology\nfabric: 10.40.0.0/24\nracks: []\n")
    result = ansible_inventory("-i", str(path), "--list")
    assert result.returncode != 0
    assert "fabric = '10.40.0.0/24': must be a mapping" in result.stderr


def test_verify_file_takes_only_topology_manifests(tmp_path):
    plugin = InventoryModule()
    for name, expected in [("topology.yml", True), ("lab-topology.yaml", True), ("hosts.yml", False)]:
        path = tmp_path / name
        path.write_text("plugin: gpufleet.inference.topology\n")
        assert plugin.verify_file(str(path)) is expected
    assert plugin.verify_file(str(tmp_path / "missing-topology.yml")) is False


def test_missing_netaddr_names_the_install(tmp_path, monkeypatch):
    path = tmp_path / "topology.yml"
    path.write_text(MANIFEST)
    monkeypatch.setattr(_topology, "HAS_NETADDR", False)
    with pytest.raises(AnsibleError, match="pip install netaddr"):
        InventoryModule().parse(InventoryData(), DataLoader(), str(path))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "(manifest) = null: the file is empty"),
        ("# only a comment\n", "(manifest) = null: the file is empty"),
        (MANIFEST.replace("plugin: gpufleet.inference.topology\n", ""), "plugin = null: is required"),
    ],
)
def test_a_file_of_ours_without_the_plugin_line_says_what_to_add(tmp_path, text, problem):
    path = tmp_path / "topology.yml"
    path.write_text(text)
    plugin = InventoryModule()
    assert plugin.verify_file(str(path))
    with pytest.raises(AnsibleParserError) as excinfo:
        plugin.parse(InventoryData(), DataLoader(), str(path))
    message = str(excinfo.value)
    assert message.startswith(f"{path}: {problem}"), message
    assert "add the line `plugin: gpufleet.inference.topology`" in message


def test_a_file_of_ours_for_another_plugin_names_it(tmp_path):
    path = tmp_path / "cloud-topology.yml"
    path.write_text("plugin: amazon.aws.aws_ec2\nregions: [eu-west-1]\n")
    with pytest.raises(AnsibleParserError) as excinfo:
        InventoryModule().parse(InventoryData(), DataLoader(), str(path))
    assert "plugin = 'amazon.aws.aws_ec2': is not gpufleet.inference.topology" in str(excinfo.value)


@pytest.mark.parametrize("text", ["", MANIFEST.replace("plugin: gpufleet.inference.topology\n", "")])
def test_with_the_plugin_enabled_an_empty_or_plugin_less_manifest_fails_the_run(tmp_path, text):
    """Through auto these files never reach the plugin (docs/topology.md, "Which files it reads");
    enabled by name, it is the only plugin that reads them and the run stops."""
    path = tmp_path / "topology.yml"
    path.write_text(text)
    result = ansible_inventory("-i", str(path), "--graph", ANSIBLE_INVENTORY_ENABLED="gpufleet.inference.topology")
    assert result.returncode != 0
    assert "add the line `plugin: gpufleet.inference.topology`" in result.stderr


def test_a_management_block_too_small_is_a_parser_error_not_a_traceback(tmp_path):
    path = tmp_path / "topology.yml"
    path.write_text(
        MANIFEST.replace(
            "subnet: 192.0.2.0/24\n  host_offset: 0\n  rack_size: 30", "subnet: 192.0.2.0/26\n  rack_size: 6"
        )
        .replace("id: 2", "id: 8")
        .replace("slot: 3", "slot: 16")
    )
    with pytest.raises(AnsibleParserError, match=r"management.rack_size = 6: is smaller than fabric.rack_size 16"):
        InventoryModule().parse(InventoryData(), DataLoader(), str(path))
