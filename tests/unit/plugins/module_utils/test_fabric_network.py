# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_fabric_network.py: the fabric link model and its netplan and networkd files."""

import configparser

import pytest
import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils import _render
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric_network import (
    FabricModelError,
    build_model,
    expected_mtus,
    links,
    render,
    render_netplan,
    render_networkd,
    settings_problems,
    virtual_links,
)

MEMBERS = ["ens1f0np0", "ens1f1np1"]
NETPLAN_PATH = "/etc/netplan/60-gpufleet-fabric.yaml"
NETWORKD = "/etc/systemd/network/60-gpufleet-"
DEFAULTS = {"mode": "802.3ad", "lacp-rate": "fast", "transmit-hash-policy": "layer3+4", "mii-monitor-interval": 100}


def bonded(**overrides):
    arguments = {
        "interfaces": list(MEMBERS),
        "bond": "bond0",
        "mtu": 9000,
        "addresses": ["10.10.0.11/24"],
        "vlans": [{"id": 100, "addresses": ["10.20.0.11/24"]}],
    }
    arguments.update(overrides)
    return build_model(**arguments)


def single(**overrides):
    arguments = {"interfaces": ["ens1f0np0"], "bond": "", "mtu": 9000, "addresses": ["10.10.0.11/24"]}
    arguments.update(overrides)
    return build_model(**arguments)


def model_error(**overrides):
    arguments = {"interfaces": list(MEMBERS), "bond": "bond0", "mtu": 9000, "addresses": ["10.10.0.11/24"]}
    arguments.update(overrides)
    with pytest.raises(FabricModelError) as exc:
        build_model(**arguments)
    return str(exc.value)


def netplan(model, renderer="networkd"):
    files = render_netplan(model, renderer)
    assert list(files) == [NETPLAN_PATH]
    return files[NETPLAN_PATH], yaml.safe_load(files[NETPLAN_PATH])["network"]


def ini(text):
    """[(section, [(key, value), ...]), ...] of a networkd file; keys such as Address= and VLAN= repeat."""
    sections = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append((line[1:-1], []))
            continue
        assert "=" in line, f"not a key=value line: {line!r}"
        assert sections, f"key before any section: {line!r}"
        key, value = line.split("=", 1)
        sections[-1][1].append((key, value))
    return sections


def values(text, section, key):
    return [value for name, pairs in ini(text) if name == section for k, value in pairs if k == key]


def section_names(text):
    return [name for name, _value in ini(text)]


# --- model: validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("interfaces", [[], None, "ens1f0np0"])
def test_interfaces_must_be_a_non_empty_list(interfaces):
    message = model_error(interfaces=interfaces)
    assert message.startswith(f"fabric_network_interfaces={interfaces} ")
    assert "must list the fabric NICs, for example [ens1f0np0, ens1f1np1]" in message


def test_duplicate_nic():
    message = model_error(interfaces=["ens1f0np0", "ens1f0np0"])
    assert message == "fabric_network_interfaces=['ens1f0np0', 'ens1f0np0'] names a NIC twice"


@pytest.mark.parametrize("name", ["a" * 16, "ens1/f0", "ens1 f0", "", "ens1:0", 7, None])
def test_invalid_interface_names(name):
    message = model_error(interfaces=["ens1f0np0", name])
    assert message.startswith(f"fabric_network_interfaces={name} is not a Linux interface name")
    assert "1 to 15 letters" in message


def test_fifteen_byte_name_is_accepted():
    assert single(interfaces=["a" * 15])["members"] == ["a" * 15]


@pytest.mark.parametrize("name", ["eth0\n", "ens1f0np0\n"])
def test_interface_name_with_trailing_newline_is_rejected(name):
    try:
        build_model([name], "", 9000, [])
    except FabricModelError as exc:
        assert str(exc).startswith("fabric_network_interfaces=")
    else:
        pytest.fail(f"regression: {name!r} (a trailing newline) passed validation and would be written into the files")


@pytest.mark.parametrize("bond", ["a" * 16, "bond/0", "bond 0"])
def test_invalid_bond_name(bond):
    message = model_error(bond=bond)
    assert message.startswith(f"fabric_network_bond={bond} is not a Linux interface name")


def test_bond_named_like_a_member():
    message = model_error(bond="ens1f1np1")
    assert message == (
        "fabric_network_bond=ens1f1np1 is also one of fabric_network_interfaces; give the bond its own name"
    )


@pytest.mark.parametrize("bond", ["", None])
def test_several_nics_need_a_bond(bond):
    message = model_error(bond=bond, interfaces=["a", "b", "c"])
    assert message == (
        "fabric_network_interfaces=['a', 'b', 'c'] lists 3 NICs but fabric_network_bond is empty; "
        "set fabric_network_bond: bond0 to bond them"
    )


@pytest.mark.parametrize("mtu", ["jumbo", None, "9000b", [9000]])
def test_mtu_must_be_a_number(mtu):
    message = model_error(mtu=mtu)
    assert message == f"fabric_network_mtu={mtu} must be a number of bytes, such as 9000"


@pytest.mark.parametrize("mtu", [1279, 9217, 0, -1, "1279"])
def test_mtu_out_of_range(mtu):
    message = model_error(mtu=mtu)
    assert message == f"fabric_network_mtu={int(mtu)} is outside 1280..9216; jumbo fabrics use 9000"


@pytest.mark.parametrize("mtu, expected", [(1280, 1280), (9216, 9216), ("9000", 9000), (1500, 1500)])
def test_mtu_bounds_are_accepted_and_normalised(mtu, expected):
    model = bonded(mtu=mtu, vlans=[])
    assert model["mtu"] == expected
    assert isinstance(model["mtu"], int)


def test_unknown_bond_parameter():
    message = model_error(bond_parameters={"miimon": 100})
    assert message == (
        "fabric_network_bond_parameters=miimon is not a bond parameter; "
        "use mode, lacp-rate, transmit-hash-policy, mii-monitor-interval"
    )


@pytest.mark.parametrize(
    "key, value, choices",
    [
        ("mode", "lacp", "802.3ad, balance-rr, active-backup, balance-xor, broadcast, balance-tlb, balance-alb"),
        ("mode", 4, "802.3ad, balance-rr"),
        ("lacp-rate", "medium", "slow, fast"),
        ("transmit-hash-policy", "layer3", "layer2, layer3+4, layer2+3, encap2+3, encap3+4"),
    ],
)
def test_bad_bond_choices(key, value, choices):
    message = model_error(bond_parameters={key: value})
    assert message.startswith(f"fabric_network_bond_parameters={key}: {value} must be one of {choices}")


@pytest.mark.parametrize("value", ["fast", None, "100ms"])
def test_mii_monitor_interval_must_be_numeric(value):
    message = model_error(bond_parameters={"mii-monitor-interval": value})
    assert message == f"fabric_network_bond_parameters={value} mii-monitor-interval is milliseconds"


def test_bond_parameter_overrides():
    model = bonded(bond_parameters={"mode": "active-backup", "lacp-rate": "slow", "mii-monitor-interval": "250"})
    assert model["bond_parameters"] == {
        "mode": "active-backup",
        "lacp-rate": "slow",
        "transmit-hash-policy": "layer3+4",
        "mii-monitor-interval": 250,
    }


@pytest.mark.parametrize(
    "vlan",
    [{"id": 0}, {"id": 4095}, {"id": -1}, {"id": "100"}, {"addresses": ["10.20.0.11/24"]}, 100, "bond0.100"],
)
def test_vlan_needs_an_id_in_range(vlan):
    message = model_error(vlans=[vlan])
    assert message == (
        f"fabric_network_vlans={vlan} entries need an id in 1..4094, such as {{id: 100, addresses: [10.20.0.11/24]}}"
    )


@pytest.mark.parametrize("vlan_id", [1, 4094])
def test_vlan_id_bounds_are_accepted(vlan_id):
    model = bonded(vlans=[{"id": vlan_id, "addresses": []}])
    assert model["vlans"] == [{"name": f"bond0.{vlan_id}", "id": vlan_id, "mtu": 9000, "addresses": []}]


def test_vlan_mtu_above_the_link():
    vlan = {"id": 100, "mtu": 9001, "addresses": ["10.20.0.11/24"]}
    message = model_error(mtu=9000, vlans=[vlan])
    assert message == f"fabric_network_vlans={vlan} has an MTU above the link's 9000"


def test_vlan_mtu_equal_to_the_link_is_accepted():
    assert bonded(vlans=[{"id": 100, "mtu": 9000}])["vlans"][0]["mtu"] == 9000


@pytest.mark.parametrize("mtu", ["jumbo", None])
def test_non_numeric_vlan_mtu_is_a_model_error(mtu):
    vlan = {"id": 100, "mtu": mtu, "addresses": ["10.20.0.11/24"]}
    try:
        bonded(vlans=[vlan])
    except FabricModelError as exc:
        assert str(exc).startswith("fabric_network_vlans=")
    except Exception as exc:  # the bug is the exception's type
        pytest.fail(
            f"regression: build_model does int(vlan['mtu']) unguarded, so a VLAN mtu of {mtu!r} raises a bare "
            f"{type(exc).__name__} ({exc}) instead of a FabricModelError naming fabric_network_vlans; the filter "
            "then lets it escape as a non-Ansible error"
        )
    else:
        pytest.fail(f"regression: VLAN mtu {mtu!r} was accepted")


@pytest.mark.parametrize("mtu", [0, -1])
def test_vlan_mtu_below_the_minimum_is_rejected(mtu):
    try:
        bonded(vlans=[{"id": 100, "mtu": mtu, "addresses": []}])
    except FabricModelError as exc:
        assert str(exc).startswith("fabric_network_vlans=")
    else:
        pytest.fail(
            f"regression: a VLAN mtu of {mtu} is accepted (only the upper bound, the link's MTU, is checked) and is "
            f"rendered as MTUBytes={mtu} / mtu: {mtu}; give VLAN MTUs a lower bound (1280, like fabric_network_mtu)"
        )


@pytest.mark.parametrize("bond", ["fabricbond01", "fabricbnd01"])  # 12 or 11 chars + ".1000" = 17 or 16 bytes
def test_vlan_name_longer_than_fifteen_bytes(bond):
    vlan = {"id": 1000, "addresses": []}
    message = model_error(bond=bond, vlans=[vlan])
    assert message == f"fabric_network_vlans={vlan} makes the interface name {bond}.1000, longer than 15 bytes"


def test_vlan_name_of_exactly_fifteen_bytes_is_accepted():
    model = bonded(bond="fabricbnd0", vlans=[{"id": 1000}])  # 10 chars + ".1000" = 15
    assert model["vlans"][0]["name"] == "fabricbnd0.1000"
    assert model["vlans"][0]["addresses"] == []


def test_repeated_vlan_id():
    message = model_error(vlans=[{"id": 100}, {"id": 200}, {"id": 100}])
    assert message == "fabric_network_vlans=[100, 200, 100] repeats a VLAN id"


@pytest.mark.parametrize("address", ["10.10.0.11", "10.10.0.300/24", "10.10.0.11/33", "bond0", "fd00::11/129"])
def test_bad_addresses(address):
    message = model_error(addresses=["10.10.0.12/24", address])
    assert message == (
        f"fabric_network_addresses={address} is not an address with its prefix length, such as 10.10.0.11/24"
    )


def test_bad_vlan_address_names_the_vlans_variable():
    message = model_error(vlans=[{"id": 100, "addresses": ["10.20.0.11"]}])
    assert message.startswith("fabric_network_vlans=10.20.0.11 is not an address with its prefix length")


def test_ipv6_addresses_with_prefix_are_accepted_and_normalised():
    model = bonded(addresses=["10.10.0.11/24", "FD00:0:0::0011/64"], vlans=[{"id": 7, "addresses": ["fd01::1/64"]}])
    assert model["addresses"] == ["10.10.0.11/24", "fd00::11/64"]
    assert model["vlans"][0]["addresses"] == ["fd01::1/64"]


def test_ipv6_address_without_prefix_is_rejected():
    assert model_error(addresses=["fd00::11"]).startswith("fabric_network_addresses=fd00::11 is not an address")


# --- model: defaults --------------------------------------------------------------------------------


def test_bonded_model():
    model = bonded()
    assert model == {
        "members": MEMBERS,
        "bond": "bond0",
        "link": "bond0",
        "mtu": 9000,
        "addresses": ["10.10.0.11/24"],
        "bond_parameters": DEFAULTS,
        "vlans": [{"name": "bond0.100", "id": 100, "mtu": 9000, "addresses": ["10.20.0.11/24"]}],
    }


def test_bond_defaults_are_not_shared_between_models():
    first = bonded(bond_parameters={"lacp-rate": "slow"})
    second = bonded()
    assert first["bond_parameters"]["lacp-rate"] == "slow"
    assert second["bond_parameters"] == DEFAULTS


@pytest.mark.parametrize("bond", ["", None])
def test_single_nic_model_has_no_bond_parameters(bond):
    model = single(bond=bond)
    assert model == {
        "members": ["ens1f0np0"],
        "bond": "",
        "link": "ens1f0np0",
        "mtu": 9000,
        "addresses": ["10.10.0.11/24"],
        "bond_parameters": {},
        "vlans": [],
    }


def test_single_nic_vlan_sits_on_the_nic():
    model = single(vlans=[{"id": 42, "mtu": 1500, "addresses": ["10.42.0.1/24"]}])
    assert model["vlans"] == [{"name": "ens1f0np0.42", "id": 42, "mtu": 1500, "addresses": ["10.42.0.1/24"]}]


def test_no_addresses():
    assert bonded(addresses=None, vlans=None)["addresses"] == []
    assert bonded(addresses=[], vlans=[])["vlans"] == []


# --- netplan ------------------------------------------------------------------------------------------


def test_netplan_bond_structure():
    text, network = netplan(bonded())
    assert network["version"] == 2
    # Per device, never top level: a top-level renderer would also apply to the host's other files.
    assert "renderer" not in network
    assert set(network) == {"version", "ethernets", "bonds", "vlans"}
    devices = [*network["ethernets"].values(), *network["bonds"].values(), *network["vlans"].values()]
    assert {device["renderer"] for device in devices} == {"networkd"}
    assert list(network["ethernets"]) == MEMBERS
    for member in MEMBERS:
        assert network["ethernets"][member] == {
            "renderer": "networkd",
            "mtu": 9000,
            "dhcp4": False,
            "dhcp6": False,
            "link-local": [],
        }
        assert "addresses" not in network["ethernets"][member]
    assert list(network["bonds"]) == ["bond0"]
    bond = network["bonds"]["bond0"]
    assert bond["interfaces"] == MEMBERS
    assert bond["mtu"] == 9000
    assert bond["dhcp4"] is False
    assert bond["dhcp6"] is False
    assert bond["addresses"] == ["10.10.0.11/24"]
    assert bond["parameters"] == DEFAULTS
    assert isinstance(bond["parameters"]["mode"], str)
    assert isinstance(bond["parameters"]["mii-monitor-interval"], int)
    assert network["vlans"] == {
        "bond0.100": {
            "renderer": "networkd",
            "id": 100,
            "link": "bond0",
            "mtu": 9000,
            "dhcp4": False,
            "dhcp6": False,
            "link-local": [],
            "addresses": ["10.20.0.11/24"],
        }
    }
    assert '"802.3ad"' in text  # quoted, or YAML could read it as something other than a string
    assert text.startswith("# Managed by gpufleet.inference.fabric_network")
    assert text.endswith("\n")
    assert not text.endswith("\n\n")


def test_netplan_is_two_space_indented():
    text, _network = netplan(bonded())
    for line in text.splitlines()[1:]:
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, line
        assert "\t" not in line


def test_netplan_single_nic_puts_addresses_on_the_nic():
    _text, network = netplan(single(addresses=["10.10.0.11/24", "fd00::11/64"]))
    assert set(network) == {"version", "ethernets"}
    assert network["ethernets"] == {
        "ens1f0np0": {
            "renderer": "networkd",
            "mtu": 9000,
            "dhcp4": False,
            "dhcp6": False,
            "link-local": [],
            "addresses": ["10.10.0.11/24", "fd00::11/64"],
        }
    }


def test_netplan_single_nic_vlan_links_to_the_nic():
    _text, network = netplan(single(vlans=[{"id": 42, "mtu": 1500, "addresses": ["10.42.0.1/24"]}]))
    assert "bonds" not in network
    assert network["vlans"]["ens1f0np0.42"]["link"] == "ens1f0np0"
    assert network["vlans"]["ens1f0np0.42"]["mtu"] == 1500
    assert network["vlans"]["ens1f0np0.42"]["id"] == 42


def test_netplan_bond_without_addresses_has_no_addresses_key():
    _text, network = netplan(bonded(addresses=[], vlans=[]))
    assert "addresses" not in network["bonds"]["bond0"]
    assert "vlans" not in network


def test_netplan_renderer_network_manager_passes_through():
    _text, network = netplan(bonded(), renderer="NetworkManager")
    assert network["bonds"]["bond0"]["renderer"] == "NetworkManager"
    assert {entry["renderer"] for entry in network["ethernets"].values()} == {"NetworkManager"}
    assert render(bonded(), "netplan", "NetworkManager") == render_netplan(bonded(), "NetworkManager")


def test_netplan_overridden_parameters():
    model = bonded(
        bond_parameters={"mode": "balance-xor", "transmit-hash-policy": "layer2+3", "mii-monitor-interval": 50}
    )
    _text, network = netplan(model)
    assert network["bonds"]["bond0"]["parameters"] == {
        "mode": "balance-xor",
        "lacp-rate": "fast",
        "transmit-hash-policy": "layer2+3",
        "mii-monitor-interval": 50,
    }


def test_netplan_numeric_looking_names_stay_strings():
    model = build_model(["0"], "", 1500, ["fd00::1/64"], [{"id": 5, "addresses": []}])
    _text, network = netplan(model)
    assert list(network["ethernets"]) == ["0"]
    assert list(network["vlans"]) == ["0.5"]
    assert network["vlans"]["0.5"]["link"] == "0"
    assert network["ethernets"]["0"]["addresses"] == ["fd00::1/64"]


def test_netplan_is_deterministic():
    first = render_netplan(bonded())
    second = render_netplan(bonded())
    assert first == second
    assert render(bonded(), "netplan") == first


# --- networkd -----------------------------------------------------------------------------------------


def test_networkd_file_names():
    files = render_networkd(bonded())
    assert sorted(files) == sorted(
        [
            NETWORKD + "bond0.netdev",
            NETWORKD + "ens1f0np0.network",
            NETWORKD + "ens1f1np1.network",
            NETWORKD + "bond0.network",
            NETWORKD + "bond0.100.netdev",
            NETWORKD + "bond0.100.network",
        ]
    )
    assert render(bonded(), "networkd") == files
    assert render(bonded(), "networkd", "NetworkManager") == files


def test_networkd_bond_netdev():
    text = render_networkd(bonded())[NETWORKD + "bond0.netdev"]
    assert section_names(text) == ["NetDev", "Bond"]
    assert dict(ini(text)[0][1]) == {"Name": "bond0", "Kind": "bond", "MTUBytes": "9000"}
    assert ini(text)[1][1] == [
        ("Mode", "802.3ad"),
        ("LACPTransmitRate", "fast"),
        ("TransmitHashPolicy", "layer3+4"),
        ("MIIMonitorSec", "100ms"),
    ]


def test_networkd_bond_netdev_overrides():
    model = bonded(bond_parameters={"mode": "active-backup", "lacp-rate": "slow", "mii-monitor-interval": "250"})
    text = render_networkd(model)[NETWORKD + "bond0.netdev"]
    assert values(text, "Bond", "Mode") == ["active-backup"]
    assert values(text, "Bond", "LACPTransmitRate") == ["slow"]
    assert values(text, "Bond", "MIIMonitorSec") == ["250ms"]


@pytest.mark.parametrize("member", MEMBERS)
def test_networkd_members_join_the_bond(member):
    text = render_networkd(bonded())[NETWORKD + member + ".network"]
    assert ini(text) == [
        ("Match", [("Name", member)]),
        ("Link", [("MTUBytes", "9000")]),
        ("Network", [("Bond", "bond0")]),
    ]


def test_networkd_bond_network():
    model = bonded(
        addresses=["10.10.0.11/24", "fd00::11/64"],
        vlans=[{"id": 100, "addresses": ["10.20.0.11/24"]}, {"id": 200, "mtu": 1500}],
    )
    text = render_networkd(model)[NETWORKD + "bond0.network"]
    assert section_names(text) == ["Match", "Link", "Network"]
    assert values(text, "Match", "Name") == ["bond0"]
    assert values(text, "Link", "MTUBytes") == ["9000"]
    assert values(text, "Network", "Address") == ["10.10.0.11/24", "fd00::11/64"]
    assert values(text, "Network", "VLAN") == ["bond0.100", "bond0.200"]
    assert values(text, "Network", "LinkLocalAddressing") == ["no"]
    assert values(text, "Network", "IPv6AcceptRA") == ["no"]
    assert values(text, "Network", "Bond") == []


def test_networkd_vlan_files():
    model = bonded(vlans=[{"id": 100, "mtu": 1500, "addresses": ["10.20.0.11/24"]}])
    files = render_networkd(model)
    netdev = files[NETWORKD + "bond0.100.netdev"]
    assert ini(netdev) == [
        ("NetDev", [("Name", "bond0.100"), ("Kind", "vlan"), ("MTUBytes", "1500")]),
        ("VLAN", [("Id", "100")]),
    ]
    network = files[NETWORKD + "bond0.100.network"]
    assert values(network, "Match", "Name") == ["bond0.100"]
    assert values(network, "Link", "MTUBytes") == ["1500"]
    assert values(network, "Network", "Address") == ["10.20.0.11/24"]
    assert values(network, "Network", "LinkLocalAddressing") == ["no"]
    assert values(network, "Network", "VLAN") == []


def test_networkd_single_nic_is_one_network_file():
    files = render_networkd(single())
    assert list(files) == [NETWORKD + "ens1f0np0.network"]
    text = files[NETWORKD + "ens1f0np0.network"]
    assert values(text, "Match", "Name") == ["ens1f0np0"]
    assert values(text, "Link", "MTUBytes") == ["9000"]
    assert values(text, "Network", "Address") == ["10.10.0.11/24"]
    assert values(text, "Network", "Bond") == []
    assert values(text, "Network", "VLAN") == []
    assert not any(path.endswith(".netdev") for path in files)


def test_networkd_single_nic_with_vlan():
    files = render_networkd(single(vlans=[{"id": 42, "addresses": []}]))
    assert sorted(files) == sorted(
        [NETWORKD + "ens1f0np0.network", NETWORKD + "ens1f0np0.42.netdev", NETWORKD + "ens1f0np0.42.network"]
    )
    assert values(files[NETWORKD + "ens1f0np0.network"], "Network", "VLAN") == ["ens1f0np0.42"]
    assert values(files[NETWORKD + "ens1f0np0.42.network"], "Network", "Address") == []


def test_networkd_files_are_well_formed_and_deterministic():
    model = bonded(addresses=["10.10.0.11/24", "fd00::11/64"], vlans=[{"id": 100}, {"id": 200}])
    files = render_networkd(model)
    assert files == render_networkd(
        bonded(addresses=["10.10.0.11/24", "fd00::11/64"], vlans=[{"id": 100}, {"id": 200}])
    )
    for path, text in files.items():
        assert path.startswith(NETWORKD), path
        assert text.startswith("# Managed by gpufleet.inference.fabric_network"), path
        assert text.endswith("\n"), path
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        parser.read_string(text)  # raises on a line that is neither a section nor key=value
        assert parser.sections() == section_names(text)


# --- links, virtual links and MTUs --------------------------------------------------------------------


def test_links_of_a_bond_with_vlans():
    model = bonded(vlans=[{"id": 100}, {"id": 200, "mtu": 1500}])
    assert virtual_links(model) == ["bond0", "bond0.100", "bond0.200"]
    assert links(model) == [*MEMBERS, "bond0", "bond0.100", "bond0.200"]
    assert expected_mtus(model) == {
        "ens1f0np0": 9000,
        "ens1f1np1": 9000,
        "bond0": 9000,
        "bond0.100": 9000,
        "bond0.200": 1500,
    }


def test_links_of_a_single_nic():
    model = single()
    assert virtual_links(model) == []
    assert links(model) == ["ens1f0np0"]
    assert expected_mtus(model) == {"ens1f0np0": 9000}


def test_links_of_a_single_nic_with_vlan():
    model = single(mtu=1500, vlans=[{"id": 42, "mtu": 1400}])
    assert virtual_links(model) == ["ens1f0np0.42"]
    assert links(model) == ["ens1f0np0", "ens1f0np0.42"]
    assert expected_mtus(model) == {"ens1f0np0": 1500, "ens1f0np0.42": 1400}


def test_links_do_not_alias_the_model():
    model = bonded()
    links(model).append("x")
    assert model["members"] == MEMBERS


# --- render -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["ifupdown", "", None, "Netplan"])
def test_unknown_backend(backend):
    with pytest.raises(FabricModelError) as exc:
        render(bonded(), backend)
    assert str(exc.value) == f"fabric_network_backend={backend} is not netplan or networkd"


# --- the role's settings (the fabric_network preflight) ------------------------------------------------


def fn_settings(**overrides):
    """The fabric_network role's settings for a bonded host with two peers."""
    base = {
        "fabric_network_verify_peers": None,
        "peers": ["10.10.0.12", "10.10.0.13"],
        "fabric_network_revert_seconds": 180,
        "fabric_network_interfaces": list(MEMBERS),
        "fabric_network_bond": "bond0",
        "fabric_network_mtu": "9000",
        "addresses": ["10.10.0.11/24"],
        "fabric_network_vlans": [{"id": 100, "addresses": ["10.20.0.11/24"]}],
        "fabric_network_bond_parameters": {"lacp-rate": "slow"},
        "inventory_hostname": "gpu01",
    }
    base.update(overrides)
    return base


NO_ADDRESS = (
    "gpu01 has no fabric address: set fabric_network_addresses (such as [10.10.0.11/24]) or gpufleet_fabric_address "
    "with gpufleet_fabric_subnet."
)


NO_PEER = (
    "fabric_network_verify_peers={} leaves no peer to check jumbo frames against (null means the other hosts of "
    "the batch and of committed batches, here none): run two hosts or name a configured peer"
)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"fabric_network_verify_peers": ["fd00:10::12"], "peers": ["fd00:10::12"], "fabric_network_revert_seconds": 50},
        # The revert window given as text, and as the least it may be: 30 + 20 per peer.
        {"fabric_network_revert_seconds": "70"},
        {"fabric_network_interfaces": ("eth0",), "fabric_network_bond": "", "fabric_network_vlans": None},
        {"fabric_network_vlans": "", "fabric_network_bond_parameters": None, "addresses": ("10.10.0.11/24",)},
    ],
)
def test_good_fabric_network_settings_have_no_problems(overrides):
    assert settings_problems(fn_settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"fabric_network_verify_peers": "10.10.0.12", "peers": "10.10.0.12"},
            "fabric_network_verify_peers=10.10.0.12 must be a list of fabric IP addresses (null means the other "
            "hosts of the batch and of committed batches)",
        ),
        (
            {"fabric_network_verify_peers": ["peer one", None], "peers": ["peer one", None]},
            "fabric_network_verify_peers=['peer one', None] has entries that are not IP addresses: peer one, None",
        ),
        ({"fabric_network_verify_peers": [], "peers": []}, NO_PEER.format("[]")),
        ({"peers": []}, NO_PEER.format("None")),
        (
            {"fabric_network_revert_seconds": 69},
            "fabric_network_revert_seconds=69 leaves the checks too little time before the revert fires: set at "
            "least 30 + 20 per peer = 70",
        ),
        (
            {"fabric_network_revert_seconds": "soon"},
            "fabric_network_revert_seconds=soon leaves the checks too little time before the revert fires: set at "
            "least 30 + 20 per peer = 70",
        ),
        ({"addresses": []}, NO_ADDRESS),
        ({"addresses": None}, NO_ADDRESS),
        (
            {"addresses": "10.10.0.11/24"},
            "fabric_network_addresses=10.10.0.11/24 must be a list of addresses with prefix, such as [10.10.0.11/24]",
        ),
        ({"fabric_network_mtu": 500}, "fabric_network_mtu=500 is outside 1280..9216; jumbo fabrics use 9000"),
        # As the plan always took it: through Jinja's int, so text is 0.
        ({"fabric_network_mtu": "jumbo"}, "fabric_network_mtu=0 is outside 1280..9216; jumbo fabrics use 9000"),
        (
            {"addresses": ["10.10.0.300/24"]},
            "fabric_network_addresses=10.10.0.300/24 is not an address with its prefix length, such as 10.10.0.11/24",
        ),
        (
            {"fabric_network_interfaces": []},
            "fabric_network_interfaces=[] must list the fabric NICs, for example [ens1f0np0, ens1f1np1]",
        ),
        (
            {"fabric_network_bond_parameters": ["lacp-rate"]},
            "fabric_network_bond_parameters=['lacp-rate'] must be a mapping, such as {lacp-rate: slow}",
        ),
        (
            {"fabric_network_vlans": 100},
            "fabric_network_vlans=100 must be a list, such as [{id: 100, addresses: [10.20.0.11/24]}]",
        ),
    ],
)
def test_a_bad_fabric_network_setting_is_named_with_its_value_and_the_fix(overrides, message):
    assert settings_problems(fn_settings(**overrides)) == [message]


def test_the_peers_and_the_link_come_back_at_once():
    problems = settings_problems(
        fn_settings(
            fabric_network_verify_peers=["x"],
            peers=["x"],
            fabric_network_revert_seconds=10,
            fabric_network_mtu=1,
            addresses=[],
        )
    )
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "fabric_network_verify_peers",
        "fabric_network_revert_seconds",
        "fabric_network_mtu",
        "gpu01",
    ]


@pytest.mark.parametrize(
    ("value", "number"),
    [(9000, 9000), ("9000", 9000), (" 42 ", 42), ("9000.7", 9000), (9000.7, 9000), (True, 1), ("jumbo", 0),
     (None, 0), ([9000], 0), (float("inf"), 0), ("inf", 0)],
)  # fmt: skip
def test_template_int_is_jinjas_int(value, number):
    assert _render.jinja_int(value) == number
