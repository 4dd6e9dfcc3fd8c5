# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the fabric_network_reconfigure filter and the plan's network_files."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import _fabric_network_reconfigure as reconfigure_filter
from ansible_collections.gpufleet.inference.plugins.filter._fabric_network_plan import fabric_network_plan

reconfigure = reconfigure_filter.fabric_network_reconfigure
MEMBERS = ["ens1f0np0", "ens1f1np1"]
NETWORKD = "/etc/systemd/network/60-gpufleet-"


def bond_plan():
    vlans = [{"id": 100, "addresses": ["10.20.0.11/24"]}]
    return fabric_network_plan(
        MEMBERS, bond="bond0", mtu=9000, addresses=["10.10.0.11/24"], vlans=vlans, backend="networkd"
    )


def test_registered_under_its_name():
    assert reconfigure_filter.FilterModule().filters() == {"_fabric_network_reconfigure": reconfigure}


def test_the_plan_names_each_links_network_file():
    plan = bond_plan()
    assert plan["network_files"] == {link: f"{NETWORKD}{link}.network" for link in [*MEMBERS, "bond0", "bond0.100"]}
    assert set(plan["network_files"].values()) <= set(plan["files"])


def test_the_links_whose_network_file_changed_and_that_exist():
    plan = fabric_network_plan(["eth0"], mtu=9000, addresses=["172.30.94.11/24"], backend="networkd")
    assert reconfigure(plan, [f"{NETWORKD}eth0.network"], ["lo", "eth0", "mgmt0"]) == ["eth0"]
    assert reconfigure(plan, [], ["lo", "eth0"]) == []


def test_links_not_there_yet_or_deleted_for_their_netdev_are_left_out():
    plan = bond_plan()
    changed = sorted(plan["files"])
    # Before the apply the host has its NICs and an old bond0 whose .netdev changed (the role
    # deletes it); bond0.100 does not exist yet.
    assert reconfigure(plan, changed, [*MEMBERS, "bond0", "lo"]) == MEMBERS
    only_vlan = [f"{NETWORKD}bond0.100.network"]
    assert reconfigure(plan, only_vlan, [*MEMBERS, "bond0", "bond0.100"]) == ["bond0.100"]


def test_a_netplan_plan_reconfigures_nothing():
    plan = fabric_network_plan(["eth0"], mtu=9000, addresses=["172.30.94.11/24"], backend="netplan")
    assert plan["network_files"] == {}
    assert reconfigure(plan, sorted(plan["files"]), ["eth0"]) == []


def test_the_input_must_be_a_plan():
    with pytest.raises(AnsibleFilterError, match="fabric_network_plan result"):
        reconfigure(["eth0"], [], [])
