# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_rdma.py: sysfs trees modelled on ConnectX-6 Dx and ConnectX-7 hosts
(two single-port functions, a RoCE LAG, a port that is down, empty and unreadable GID slots), the
GID choice, and ibv_devinfo output from fixtures/ibv_devinfo (see its README.md)."""

import ipaddress
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._rdma import (
    gid_entry,
    merge_ibv_devinfo,
    netdev_problem,
    parse_address,
    parse_ibv_devinfo,
    parse_rate,
    read_devices,
    select_gid,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ibv_devinfo"
V1, V2 = "IB/RoCE v1", "RoCE v2"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
# A directory where a file is expected: reading it fails, as types/<i> of an empty slot does (EINVAL).
UNREADABLE = object()
ACTIVE_PORT = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (4X EDR)"}
DOWN_PORT = {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "100 Gb/sec (4X EDR)"}
CX6DX = {"node_type": "1: CA", "fw_ver": "22.36.1010", "hca_type": "MT4125", "board_id": "MT_0000000359"}
CX7 = {"node_type": "1: CA", "fw_ver": "28.39.1002", "hca_type": "MT4129", "board_id": "MT_0000000834"}


def sysfs_gid(address):
    """An address as sysfs prints a GID (%pI6): IPv4 as ::ffff:a.b.c.d, eight full groups."""
    parsed = ipaddress.ip_address(address)
    if parsed.version == 4:
        parsed = ipaddress.IPv6Address("::ffff:" + address)
    return ":".join(parsed.exploded.split(":"))


def table(ndev, link_local, ipv4=None, ipv6=None, empty=(6, 7)):
    """A ConnectX GID table: link-local v1/v2 at 0/1, IPv4 v1/v2 at 2/3, global IPv6 v1/v2 at 4/5,
    then empty slots whose types and ndevs cannot be read."""
    gids = {0: (sysfs_gid(link_local), V1, ndev), 1: (sysfs_gid(link_local), V2, ndev)}
    if ipv4:
        gids.update({2: (sysfs_gid(ipv4), V1, ndev), 3: (sysfs_gid(ipv4), V2, ndev)})
    if ipv6:
        gids.update({4: (sysfs_gid(ipv6), V1, ndev), 5: (sysfs_gid(ipv6), V2, ndev)})
    gids.update({index: (ZERO, UNREADABLE, UNREADABLE) for index in empty})
    return gids


def write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    if value is UNREADABLE:
        path.mkdir()
    elif value is not None:
        path.write_text(value + "\n")


def fake_sysfs(tmp_path, devices):
    """devices: name -> {"attrs": {...}, "net": [netdev, ...], "ports": {n: {"gids": {i: (gid, type, ndev)}, ...}}}."""
    root = tmp_path / "sys"
    (root / "class" / "infiniband").mkdir(parents=True)
    for name, spec in devices.items():
        device = root / "class" / "infiniband" / name
        device.mkdir()
        for attribute, value in spec.get("attrs", {}).items():
            write(device / attribute, value)
        for netdev in spec.get("net", []):
            (device / "device" / "net" / netdev).mkdir(parents=True)
        for number, port_spec in spec.get("ports", {}).items():
            port = device / "ports" / str(number)
            port.mkdir(parents=True)
            write(port / "link_layer", port_spec.get("link_layer", "Ethernet"))
            for attribute in ("state", "phys_state", "rate"):
                write(port / attribute, port_spec.get(attribute))
            for index, (gid, gid_type, ndev) in port_spec.get("gids", {}).items():
                write(port / "gids" / str(index), gid)
                write(port / "gid_attrs" / "types" / str(index), gid_type)
                write(port / "gid_attrs" / "ndevs" / str(index), ndev)
    return str(root)


def two_ports(mlx5_1_port=None):
    """A ConnectX-6 Dx with both ports cabled separately: mlx5_0 -> ens1f0np0, mlx5_1 -> ens1f1np1."""
    return {
        "mlx5_0": {
            "attrs": dict(CX6DX, node_guid="b83f:d203:00db:a8dc"),
            "net": ["ens1f0np0"],
            "ports": {
                1: dict(
                    ACTIVE_PORT, gids=table("ens1f0np0", "fe80::ba3f:d2ff:fedb:a8dc", "10.0.0.11", "2001:db8:1::11")
                )
            },
        },
        "mlx5_1": {
            "attrs": dict(CX6DX, node_guid="b83f:d203:00db:a8dd"),
            "net": ["ens1f1np1"],
            "ports": {
                1: mlx5_1_port
                or dict(
                    ACTIVE_PORT, gids=table("ens1f1np1", "fe80::ba3f:d2ff:fedb:a8dd", "10.0.1.11", "2001:db8:2::11")
                )
            },
        },
    }


def lag(ipv4="10.0.0.12"):
    """A ConnectX-7 whose two ports are bonded (RoCE LAG): one device, mlx5_bond_0, GIDs on bond0.
    device/net still names the first PF, as mlx5 registers the LAG device on it."""
    return {
        "mlx5_bond_0": {
            "attrs": dict(CX7, node_guid="5c25:7303:0094:212a"),
            "net": ["ens1f0np0"],
            "ports": {
                1: dict(ACTIVE_PORT, rate="200 Gb/sec (4X HDR)", gids=table("bond0", "fe80::5e25:73ff:fe94:212a", ipv4))
            },
        }
    }


def devices_of(tmp_path, spec):
    return read_devices(fake_sysfs(tmp_path, spec))


# ---------------------------------------------------------------- reading sysfs


def test_read_two_ports(tmp_path):
    devices = devices_of(tmp_path, two_ports())
    assert [device["name"] for device in devices] == ["mlx5_0", "mlx5_1"]
    mlx5_0 = devices[0]
    assert {key: value for key, value in mlx5_0.items() if key != "ports"} == {
        "name": "mlx5_0",
        "node_guid": "b83f:d203:00db:a8dc",
        "node_type": "CA",
        "fw_ver": "22.36.1010",
        "hca_type": "MT4125",
        "board_id": "MT_0000000359",
    }
    port = mlx5_0["ports"][0]
    assert {key: value for key, value in port.items() if key != "gids"} == {
        "number": 1,
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "link_layer": "Ethernet",
        "rate": "100 Gb/sec (4X EDR)",
        "rate_gbps": 100.0,
        "netdev": "ens1f0np0",
    }
    assert [gid["index"] for gid in port["gids"]] == [0, 1, 2, 3, 4, 5]
    assert port["gids"][0] == {
        "index": 0,
        "gid": "fe80:0000:0000:0000:ba3f:d2ff:fedb:a8dc",
        "type": V1,
        "ndev": "ens1f0np0",
        "ipv4": None,
        "ipv6": None,
        "link_local": True,
    }
    assert port["gids"][3] == {
        "index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:0a00:000b",
        "type": V2,
        "ndev": "ens1f0np0",
        "ipv4": "10.0.0.11",
        "ipv6": None,
        "link_local": False,
    }
    assert port["gids"][5]["ipv6"] == "2001:db8:1::11"
    assert port["gids"][5]["link_local"] is False


def test_lag_port_names_the_bond(tmp_path):
    (device,) = devices_of(tmp_path, lag())
    assert device["name"] == "mlx5_bond_0"
    assert device["ports"][0]["netdev"] == "bond0"
    assert device["ports"][0]["rate_gbps"] == 200.0
    assert {gid["ndev"] for gid in device["ports"][0]["gids"]} == {"bond0"}


def test_unreadable_gid_attributes_read_as_empty(tmp_path):
    gids = {
        0: ("fe80:0000:0000:0000:ba3f:d2ff:fedb:a8dc", UNREADABLE, UNREADABLE),
        1: (sysfs_gid("10.0.0.11"), V2, None),  # ndevs/1 missing altogether
        2: (UNREADABLE, V2, "ens1f0np0"),  # the GID itself unreadable: skipped
    }
    spec = {"mlx5_0": {"net": ["ens1f0np0"], "ports": {1: dict(ACTIVE_PORT, gids=gids)}}}
    (device,) = devices_of(tmp_path, spec)
    port = device["ports"][0]
    assert [(gid["index"], gid["type"], gid["ndev"]) for gid in port["gids"]] == [(0, None, None), (1, V2, None)]
    # No GID names a net device: the one under the PCI function stands in.
    assert port["netdev"] == "ens1f0np0"
    assert device["fw_ver"] is None
    assert device["board_id"] is None


def test_empty_slots_and_null_interface_ids_are_skipped(tmp_path):
    gids = {
        0: (ZERO, UNREADABLE, UNREADABLE),
        1: ("fe80:0000:0000:0000:0000:0000:0000:0000", UNREADABLE, UNREADABLE),
        2: ("not a gid", V2, "ens1f0np0"),
        3: (sysfs_gid("10.0.0.11"), V2, "ens1f0np0"),
    }
    (device,) = devices_of(tmp_path, {"mlx5_0": {"ports": {1: dict(ACTIVE_PORT, gids=gids)}}})
    assert [gid["index"] for gid in device["ports"][0]["gids"]] == [3]


def test_infiniband_port_without_ndevs_uses_the_pci_net_device(tmp_path):
    gids = {0: ("fe80:0000:0000:0000:a088:c203:005f:c296", V1, UNREADABLE)}
    port = dict(ACTIVE_PORT, link_layer="InfiniBand", rate="400 Gb/sec (4X NDR)", gids=gids)
    (device,) = devices_of(tmp_path, {"mlx5_0": {"attrs": CX7, "net": ["ibp65s0"], "ports": {1: port}}})
    assert device["ports"][0]["netdev"] == "ibp65s0"
    assert device["ports"][0]["rate_gbps"] == 400.0
    assert device["ports"][0]["gids"][0]["link_local"] is True


def test_two_ports_on_one_function_use_dev_port(tmp_path):
    spec = {"mlx4_0": {"net": ["eth2", "eth3"], "ports": {1: dict(ACTIVE_PORT), 2: dict(ACTIVE_PORT)}}}
    root = fake_sysfs(tmp_path, spec)
    for name, dev_port in (("eth2", "0"), ("eth3", "1")):
        (Path(root) / "class/infiniband/mlx4_0/device/net" / name / "dev_port").write_text(dev_port + "\n")
    (device,) = read_devices(root)
    assert [port["netdev"] for port in device["ports"]] == ["eth2", "eth3"]


def test_down_port_is_listed(tmp_path):
    down = dict(DOWN_PORT, gids=table("ens1f1np1", "fe80::ba3f:d2ff:fedb:a8dd"))
    devices = devices_of(tmp_path, two_ports(mlx5_1_port=down))
    port = devices[1]["ports"][0]
    assert (port["state"], port["phys_state"]) == ("DOWN", "Disabled")
    assert [gid["index"] for gid in port["gids"]] == [0, 1]


def test_natural_device_order(tmp_path):
    spec = {name: {} for name in ("mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1")}
    assert [device["name"] for device in devices_of(tmp_path, spec)] == ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]


def test_no_infiniband_class_at_all(tmp_path):
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    assert read_devices(str(tmp_path / "sys")) == []
    assert read_devices(str(tmp_path / "nowhere")) == []


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("100 Gb/sec (4X EDR)", 100.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("400 Gb/sec (4X NDR)", 400.0),
        ("10 Gb/sec (4X SDR)", 10.0),
        ("", None),
        (None, None),
        ("invalid", None),
    ],
)
def test_parse_rate(text, gbps):
    assert parse_rate(text) == gbps


def test_gid_entry_of_mapped_link_local_ipv4():
    entry = gid_entry(3, sysfs_gid("169.254.0.5"), V2, "eth0")
    assert (entry["ipv4"], entry["ipv6"], entry["link_local"]) == ("169.254.0.5", None, True)


# ---------------------------------------------------------------- selection


def test_select_by_netdev_prefers_ipv4(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, two_ports()), netdev="ens1f1np1")
    assert problem is None
    assert entry == {
        "device": "mlx5_1",
        "port": 1,
        "gid_index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:0a00:010b",
        "type": V2,
        "netdev": "ens1f1np1",
        "ipv4": "10.0.1.11",
        "ipv6": None,
        "port_state": "ACTIVE",
    }


def test_select_by_netdev_falls_back_to_global_ipv6(tmp_path):
    spec = two_ports()
    spec["mlx5_0"]["ports"][1]["gids"] = table("ens1f0np0", "fe80::ba3f:d2ff:fedb:a8dc", ipv6="2001:db8:1::11")
    entry, problem = select_gid(read_devices(fake_sysfs(tmp_path, spec)), netdev="ens1f0np0")
    assert problem is None
    assert (entry["gid_index"], entry["ipv6"]) == (5, "2001:db8:1::11")


def test_select_by_ipv4(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, two_ports()), address="10.0.0.11")
    assert problem is None
    assert (entry["device"], entry["gid_index"], entry["netdev"]) == ("mlx5_0", 3, "ens1f0np0")


def test_select_by_ipv4_mapped_ipv6_text(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, two_ports()), address="::ffff:10.0.0.11")
    assert problem is None
    assert (entry["device"], entry["gid_index"]) == ("mlx5_0", 3)


def test_select_by_ipv6(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, two_ports()), netdev="ens1f1np1", address="2001:db8:2:0::11")
    assert problem is None
    assert (entry["device"], entry["gid_index"], entry["ipv4"], entry["ipv6"]) == ("mlx5_1", 5, None, "2001:db8:2::11")


def test_select_link_local_only_by_its_address(tmp_path):
    devices = devices_of(tmp_path, two_ports())
    entry, problem = select_gid(devices, address="fe80::ba3f:d2ff:fedb:a8dc")
    assert problem is None
    assert (entry["device"], entry["gid_index"]) == ("mlx5_0", 1)


def test_select_on_lag(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, lag()), netdev="bond0", address="10.0.0.12")
    assert problem is None
    assert entry["device"] == "mlx5_bond_0"
    assert (entry["port"], entry["gid_index"], entry["netdev"]) == (1, 3, "bond0")


def test_slave_netdev_of_a_lag_matches_nothing(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, lag()), netdev="ens1f0np0")
    assert entry is None
    assert problem == (
        "no RoCE v2 GID for ens1f0np0 with an IPv4 or global IPv6 address: "
        "mlx5_bond_0 port 1 (bond0, ACTIVE) has RoCE v2 GIDs for fe80::5e25:73ff:fe94:212a, 10.0.0.12"
    )


def test_no_match_lists_what_was_found(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, lag()), netdev="bond0", address="10.0.0.11")
    assert entry is None
    assert problem == (
        "no RoCE v2 GID for bond0 with 10.0.0.11: "
        "mlx5_bond_0 port 1 (bond0, ACTIVE) has RoCE v2 GIDs for fe80::5e25:73ff:fe94:212a, 10.0.0.12"
    )


def test_no_match_on_an_unknown_netdev_lists_every_port(tmp_path):
    entry, problem = select_gid(devices_of(tmp_path, two_ports()), netdev="ens9")
    assert entry is None
    assert problem.startswith("no RoCE v2 GID for ens9 with an IPv4 or global IPv6 address: mlx5_0 port 1 (ens1f0np0, ")
    assert "; mlx5_1 port 1 (ens1f1np1, ACTIVE) has RoCE v2 GIDs for fe80::ba3f:d2ff:fedb:a8dd, 10.0.1.11, " in problem


def test_link_local_only_is_not_selected_by_netdev(tmp_path):
    down = dict(DOWN_PORT, gids=table("ens1f1np1", "fe80::ba3f:d2ff:fedb:a8dd"))
    entry, problem = select_gid(devices_of(tmp_path, two_ports(mlx5_1_port=down)), netdev="ens1f1np1")
    assert entry is None
    assert problem == (
        "no RoCE v2 GID for ens1f1np1 with an IPv4 or global IPv6 address: "
        "mlx5_1 port 1 (ens1f1np1, DOWN) has RoCE v2 GIDs for fe80::ba3f:d2ff:fedb:a8dd"
    )


def test_down_port_is_skipped_when_an_active_one_matches(tmp_path):
    # The address was moved to the second port; the first, now down, still holds its GIDs.
    spec = two_ports()
    spec["mlx5_0"]["ports"][1].update(DOWN_PORT)
    spec["mlx5_1"]["ports"][1]["gids"] = table("ens1f1np1", "fe80::ba3f:d2ff:fedb:a8dd", "10.0.0.11")
    entry, problem = select_gid(read_devices(fake_sysfs(tmp_path, spec)), address="10.0.0.11")
    assert problem is None
    assert (entry["device"], entry["port_state"]) == ("mlx5_1", "ACTIVE")


def test_down_port_is_used_when_nothing_else_matches_and_says_so(tmp_path):
    down = dict(DOWN_PORT, gids=table("ens1f1np1", "fe80::ba3f:d2ff:fedb:a8dd", "10.0.1.11"))
    entry, problem = select_gid(devices_of(tmp_path, two_ports(mlx5_1_port=down)), netdev="ens1f1np1")
    assert (entry["device"], entry["gid_index"], entry["port_state"]) == ("mlx5_1", 3, "DOWN")
    assert problem == (
        "no ACTIVE port has a matching RoCE v2 GID; selected mlx5_1 port 1, which is DOWN (Disabled): "
        "RDMA traffic fails until its link is up"
    )


def test_infiniband_ports_offer_no_roce_gid(tmp_path):
    gids = {0: ("fe80:0000:0000:0000:a088:c203:005f:c296", V1, UNREADABLE)}
    port = dict(ACTIVE_PORT, link_layer="InfiniBand", gids=gids)
    devices = devices_of(tmp_path, {"mlx5_0": {"net": ["ibp65s0"], "ports": {1: port}}})
    entry, problem = select_gid(devices, netdev="ibp65s0")
    assert entry is None
    assert problem.endswith(": mlx5_0 port 1 (ibp65s0, ACTIVE) is InfiniBand, without RoCE GIDs")


def test_no_device(tmp_path):
    entry, problem = select_gid([], netdev="bond0", source="/host/sys/class/infiniband")
    assert entry is None
    assert problem == (
        "no RDMA device under /host/sys/class/infiniband: load the RDMA driver (modprobe mlx5_ib for "
        "ConnectX) and install rdma-core, whose udev rules load it at boot"
    )


def test_nothing_asked_nothing_selected(tmp_path):
    assert select_gid(devices_of(tmp_path, two_ports())) == (None, None)
    assert select_gid([]) == (None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.11", ipaddress.IPv4Address("10.0.0.11")),
        ("::ffff:10.0.0.11", ipaddress.IPv4Address("10.0.0.11")),
        ("2001:db8::11", ipaddress.IPv6Address("2001:db8::11")),
    ],
)
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10.0.0.11/24", "must be a single IPv4 or IPv6 address without prefix length or zone, got '10.0.0.11/24'"),
        ("fe80::1%bond0", "must be a single IPv4 or IPv6 address without prefix length or zone, got 'fe80::1%bond0'"),
        ("10.0.0.300", "must be an IPv4 or IPv6 address, got '10.0.0.300'"),
        ("bond0", "must be an IPv4 or IPv6 address, got 'bond0'"),
    ],
)
def test_parse_address_rejects(text, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        parse_address(text)


@pytest.mark.parametrize("name", ["bond0", "ens1f0np0", "ens1f0np0.100", "a" * 15])
def test_netdev_names_accepted(name):
    assert netdev_problem(name) is None


@pytest.mark.parametrize("name", ["", "a" * 16, ".", "..", "bond 0", "eth0:1", "a/b", "tab\tname"])
def test_netdev_names_rejected(name):
    assert netdev_problem(name) == (
        f"must be a network interface name (1 to 15 characters, none of '/', ':' or whitespace), got {name!r}"
    )


# ---------------------------------------------------------------- ibv_devinfo


def test_parse_connectx7_lag_devinfo():
    (device,) = parse_ibv_devinfo((FIXTURES / "connectx7-mlx5_bond_0.txt").read_text())
    assert device == {
        "name": "mlx5_bond_0",
        "fw_ver": "28.39.1002",
        "node_guid": "5c25:7303:0094:212a",
        "vendor_part_id": "4129",
        "board_id": "MT_0000000834",
        "ports": [
            {
                "number": 1,
                "state": "PORT_ACTIVE",
                "phys_state": None,
                "link_layer": "Ethernet",
                "active_width": None,
                "active_speed": None,
                "gids": [],
            }
        ],
    }


def test_parse_devinfo_gid_lines():
    # The fixture is the port part of `ibv_devinfo -v`; the header stands for the lines before it.
    text = "hca_id:\tmlx5_bond_0\n\t\tport:\t1\n" + (FIXTURES / "mlx5_bond_0-v-gids.txt").read_text()
    (device,) = parse_ibv_devinfo(text)
    (port,) = device["ports"]
    assert port["phys_state"] == "LINK_UP"
    assert port["gids"] == [
        {"index": 0, "gid": "fe80:0000:0000:0000:0ac0:ebff:feda:1cfb", "type": "RoCE v1"},
        {"index": 1, "gid": "fe80::ac0:ebff:feda:1cfb", "type": "RoCE v2"},
        {"index": 2, "gid": "0000:0000:0000:0000:0000:ffff:c800:d106", "type": "RoCE v1"},
        {"index": 3, "gid": "::ffff:200.0.209.6", "type": "RoCE v2"},
    ]


def test_parse_devinfo_without_gid_types_and_with_several_ports():
    # Before rdma-core v28 (linux-rdma/rdma-core#682) GID lines had no type.
    text = (
        "hca_id:\tmlx4_0\n\tfw_ver:\t\t\t\t2.42.5000\n\tphys_port_cnt:\t\t\t2\n\tDevice ports:\n"
        "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:7cfe:9003:00a5:95c1\n"
        "\t\tport:\t2\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tlink_layer:\t\tInfiniBand\n"
    )
    (device,) = parse_ibv_devinfo(text)
    assert device["fw_ver"] == "2.42.5000"
    assert [(port["number"], port["state"], port["link_layer"]) for port in device["ports"]] == [
        (1, "PORT_ACTIVE", None),
        (2, "PORT_DOWN", "InfiniBand"),
    ]
    assert device["ports"][0]["gids"] == [{"index": 0, "gid": "fe80:0000:0000:0000:7cfe:9003:00a5:95c1", "type": None}]


def test_parse_devinfo_without_devices():
    assert parse_ibv_devinfo("No IB devices found\n") == []
    assert parse_ibv_devinfo("") == []


def test_merge_agreeing_devinfo_fills_what_sysfs_lacks(tmp_path):
    spec = lag()
    del spec["mlx5_bond_0"]["attrs"]["board_id"]
    devices = read_devices(fake_sysfs(tmp_path, spec))
    reported = parse_ibv_devinfo((FIXTURES / "connectx7-mlx5_bond_0.txt").read_text())
    assert merge_ibv_devinfo(devices, reported) == []
    assert (devices[0]["fw_ver"], devices[0]["board_id"]) == ("28.39.1002", "MT_0000000834")


def test_merge_reports_disagreements(tmp_path):
    spec = lag()
    spec["mlx5_bond_0"]["attrs"]["fw_ver"] = "28.41.1000"
    devices = read_devices(fake_sysfs(tmp_path, spec))
    reported = parse_ibv_devinfo((FIXTURES / "connectx7-mlx5_bond_0.txt").read_text())
    reported[0]["ports"][0]["gids"] = [
        {"index": 1, "gid": "fe80::5e25:73ff:fe94:212a", "type": V2},
        {"index": 3, "gid": "::ffff:10.0.0.99", "type": V2},
        {"index": 9, "gid": "::ffff:10.0.0.98", "type": V2},
    ]
    reported.append({"name": "mlx5_7", "fw_ver": None, "board_id": None, "ports": []})
    assert merge_ibv_devinfo(devices, reported) == [
        "mlx5_bond_0: sysfs fw_ver is 28.41.1000 but ibv_devinfo reports 28.39.1002",
        "mlx5_bond_0 port 1 GID 3: sysfs has 0000:0000:0000:0000:0000:ffff:0a00:000c but ibv_devinfo reports "
        "::ffff:10.0.0.99 (the table changed between reads?)",
        "ibv_devinfo lists mlx5_7, which sysfs does not show under class/infiniband",
    ]
    assert devices[0]["fw_ver"] == "28.41.1000"
