# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the fabric_network_plan filter."""

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import _fabric_network_plan as plan_filter

fabric_network_plan = plan_filter.fabric_network_plan
MEMBERS = ["ens1f0np0", "ens1f1np1"]
NETPLAN_PATH = "/etc/netplan/60-gpufleet-fabric.yaml"
NETWORKD = "/etc/systemd/network/60-gpufleet-"


def test_registered_under_its_name():
    assert plan_filter.FilterModule().filters() == {"_fabric_network_plan": fabric_network_plan}


def test_netplan_plan():
    plan = fabric_network_plan(
        MEMBERS,
        bond="bond0",
        mtu=9000,
        addresses=["10.10.0.11/24"],
        vlans=[{"id": 100, "mtu": 1500, "addresses": ["10.20.0.11/24"]}],
        backend="netplan",
    )
    assert set(plan) == {"model", "files", "links", "virtual_links", "mtus", "network_files"}
    assert plan["network_files"] == {}
    assert plan["model"]["members"] == MEMBERS
    assert plan["model"]["bond"] == "bond0"
    assert plan["model"]["bond_parameters"]["mode"] == "802.3ad"
    assert list(plan["files"]) == [NETPLAN_PATH]
    network = yaml.safe_load(plan["files"][NETPLAN_PATH])["network"]
    assert "renderer" not in network
    assert network["bonds"]["bond0"]["renderer"] == "networkd"
    assert network["bonds"]["bond0"]["interfaces"] == MEMBERS
    assert network["vlans"]["bond0.100"]["mtu"] == 1500
    assert plan["links"] == [*MEMBERS, "bond0", "bond0.100"]
    assert plan["virtual_links"] == ["bond0", "bond0.100"]
    assert plan["mtus"] == {"ens1f0np0": 9000, "ens1f1np1": 9000, "bond0": 9000, "bond0.100": 1500}


def test_networkd_plan_single_nic():
    plan = fabric_network_plan(["ens1f0np0"], mtu="9000", addresses=("10.10.0.11/24",), backend="networkd")
    assert list(plan["files"]) == [NETWORKD + "ens1f0np0.network"]
    assert "Address=10.10.0.11/24" in plan["files"][NETWORKD + "ens1f0np0.network"].splitlines()
    assert plan["model"]["mtu"] == 9000
    assert plan["model"]["bond_parameters"] == {}
    assert plan["links"] == ["ens1f0np0"]
    assert plan["virtual_links"] == []
    assert plan["mtus"] == {"ens1f0np0": 9000}


def test_networkd_plan_bond_parameters_and_tuple_input():
    plan = fabric_network_plan(
        tuple(MEMBERS), mtu=9000, backend="networkd", bond="bond0", bond_parameters={"lacp-rate": "slow"}
    )
    netdev = plan["files"][NETWORKD + "bond0.netdev"].splitlines()
    assert "LACPTransmitRate=slow" in netdev
    assert "Mode=802.3ad" in netdev
    assert "MIIMonitorSec=100ms" in netdev
    assert sorted(plan["files"]) == sorted(
        [NETWORKD + "bond0.netdev", NETWORKD + "bond0.network"] + [NETWORKD + m + ".network" for m in MEMBERS]
    )


def test_renderer_passes_through():
    plan = fabric_network_plan(MEMBERS, 9000, "netplan", bond="bond0", renderer="NetworkManager")
    assert yaml.safe_load(plan["files"][NETPLAN_PATH])["network"]["bonds"]["bond0"]["renderer"] == "NetworkManager"


def test_plan_is_deterministic():
    arguments = {"bond": "bond0", "addresses": ["10.10.0.11/24"], "vlans": [{"id": 100}]}
    for backend in ("netplan", "networkd"):
        assert fabric_network_plan(MEMBERS, 9000, backend, **arguments) == fabric_network_plan(
            list(MEMBERS), 9000, backend, **arguments
        )


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            {"interfaces": [], "mtu": 9000},
            "fabric_network_interfaces=[] must list the fabric NICs, for example [ens1f0np0, ens1f1np1]",
        ),
        (
            {"interfaces": None, "mtu": 9000},
            "fabric_network_interfaces=[] must list the fabric NICs, for example [ens1f0np0, ens1f1np1]",
        ),
        (
            {"interfaces": MEMBERS, "mtu": 9000},
            "fabric_network_interfaces=['ens1f0np0', 'ens1f1np1'] lists 2 NICs but fabric_network_bond is empty; "
            "set fabric_network_bond: bond0 to bond them",
        ),
        (
            {"interfaces": MEMBERS, "bond": "bond0", "mtu": 9217},
            "fabric_network_mtu=9217 is outside 1280..9216; jumbo fabrics use 9000",
        ),
        (
            {"interfaces": MEMBERS, "bond": "bond0", "mtu": "jumbo"},
            "fabric_network_mtu=jumbo must be a number of bytes, such as 9000",
        ),
        (
            {"interfaces": MEMBERS, "bond": "bond0", "mtu": 9000, "addresses": ["10.10.0.11"]},
            "fabric_network_addresses=10.10.0.11 is not an address with its prefix length, such as 10.10.0.11/24",
        ),
        (
            {"interfaces": MEMBERS, "bond": "bond0", "mtu": 9000, "bond_parameters": {"mode": "lacp"}},
            "fabric_network_bond_parameters=mode: lacp must be one of 802.3ad, balance-rr, active-backup, "
            "balance-xor, broadcast, balance-tlb, balance-alb",
        ),
        (
            {"interfaces": MEMBERS, "bond": "bond0", "mtu": 9000, "vlans": [{"id": 4095}]},
            "fabric_network_vlans={'id': 4095} entries need an id in 1..4094, "
            "such as {id: 100, addresses: [10.20.0.11/24]}",
        ),
    ],
)
@pytest.mark.parametrize("backend", ["netplan", "networkd"])
def test_model_errors_become_filter_errors(arguments, message, backend):
    with pytest.raises(AnsibleFilterError) as exc:
        fabric_network_plan(backend=backend, **arguments)
    assert exc.value.message == message
    assert exc.value.__cause__ is None  # raised "from None": the message is the whole story


@pytest.mark.parametrize("backend", ["ifupdown", "", None])
def test_unknown_backend_fails(backend):
    with pytest.raises(AnsibleFilterError) as exc:
        fabric_network_plan(MEMBERS, 9000, backend, bond="bond0")
    assert exc.value.message == f"fabric_network_backend={backend} is not netplan or networkd"


@pytest.mark.parametrize("vlan_mtu", ["jumbo", None])
def test_bad_vlan_mtu_is_a_filter_error(vlan_mtu):
    try:
        fabric_network_plan(MEMBERS, 9000, "netplan", bond="bond0", vlans=[{"id": 100, "mtu": vlan_mtu}])
    except AnsibleFilterError as exc:
        assert exc.message.startswith("fabric_network_vlans=")
    except Exception as exc:  # the bug is the exception's type
        pytest.fail(
            f"regression: a VLAN mtu of {vlan_mtu!r} escapes the filter as a bare {type(exc).__name__} ({exc}) "
            "instead of an AnsibleFilterError naming fabric_network_vlans"
        )
    else:
        pytest.fail(f"regression: VLAN mtu {vlan_mtu!r} was accepted")


@pytest.mark.parametrize("interfaces", ["eth0", "ens1f0np0"])
def test_a_string_of_interfaces_is_rejected(interfaces):
    try:
        plan = fabric_network_plan(interfaces, 9000, "netplan", bond="bond0")
    except AnsibleFilterError as exc:
        assert exc.message.startswith("fabric_network_interfaces=")
        assert "for example [ens1f0np0, ens1f1np1]" in exc.message, (
            f"regression: the string {interfaces!r} must fail build_model's list check; got {exc.message!r}"
        )
    else:
        pytest.fail(
            f"regression: the filter does list(interfaces), so the string {interfaces!r} becomes the bond members "
            f"{plan['model']['members']!r} instead of failing build_model's 'must list the fabric NICs' check"
        )
