# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the rdma_info module, run against a fake sysfs and a fake ibv_devinfo."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import rdma_info
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary, warned

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "ibv_devinfo"
LINK_LOCAL = "fe80:0000:0000:0000:5e25:73ff:fe94:212a"
MAPPED = "0000:0000:0000:0000:0000:ffff:0a00:000c"  # ::ffff:10.0.0.12
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def fake_sysfs(tmp_path, state="4: ACTIVE", phys_state="5: LinkUp", gids=None):
    """A ConnectX-7 RoCE LAG as sysfs shows it: mlx5_bond_0, port 1, GIDs on bond0, an empty slot at 4
    whose types and ndevs cannot be read (directories stand in for files that fail with EINVAL)."""
    root = tmp_path / "sys"
    device = root / "class" / "infiniband" / "mlx5_bond_0"
    files = {
        "node_guid": "5c25:7303:0094:212a",
        "node_type": "1: CA",
        "fw_ver": "28.39.1002",
        "hca_type": "MT4129",
        "board_id": "MT_0000000834",
        "ports/1/state": state,
        "ports/1/phys_state": phys_state,
        "ports/1/rate": "200 Gb/sec (4X HDR)",
        "ports/1/link_layer": "Ethernet",
    }
    table = gids or {
        0: (LINK_LOCAL, "IB/RoCE v1"),
        1: (LINK_LOCAL, "RoCE v2"),
        2: (MAPPED, "IB/RoCE v1"),
        3: (MAPPED, "RoCE v2"),
    }
    for index, (gid, gid_type) in table.items():
        files[f"ports/1/gids/{index}"] = gid
        files[f"ports/1/gid_attrs/types/{index}"] = gid_type
        files[f"ports/1/gid_attrs/ndevs/{index}"] = "bond0"
    files["ports/1/gids/4"] = ZERO
    for name, value in files.items():
        (device / name).parent.mkdir(parents=True, exist_ok=True)
        (device / name).write_text(value + "\n")
    (device / "ports/1/gid_attrs/types/4").mkdir()
    (device / "ports/1/gid_attrs/ndevs/4").mkdir()
    return str(root)


def test_devices_without_selection(run_module, tmp_path):
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "_ansible_check_mode": True})
    assert result["selected"] is None
    assert result["selection_problem"] == ""
    (device,) = result["devices"]
    assert device["name"] == "mlx5_bond_0"
    assert (device["fw_ver"], device["hca_type"], device["board_id"], device["node_type"]) == (
        "28.39.1002",
        "MT4129",
        "MT_0000000834",
        "CA",
    )
    (port,) = device["ports"]
    assert (port["state"], port["phys_state"], port["rate_gbps"], port["netdev"]) == (
        "ACTIVE",
        "LinkUp",
        200.0,
        "bond0",
    )
    assert [(gid["index"], gid["type"], gid["ipv4"]) for gid in port["gids"]] == [
        (0, "IB/RoCE v1", None),
        (1, "RoCE v2", None),
        (2, "IB/RoCE v1", "10.0.0.12"),
        (3, "RoCE v2", "10.0.0.12"),
    ]


def test_select_by_netdev_and_address(run_module, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path), "netdev": "bond0", "address": "10.0.0.12"}
    result = run_module(rdma_info, args)
    assert result["selected"] == {
        "device": "mlx5_bond_0",
        "port": 1,
        "gid_index": 3,
        "gid": MAPPED,
        "type": "RoCE v2",
        "netdev": "bond0",
        "ipv4": "10.0.0.12",
        "ipv6": None,
        "port_state": "ACTIVE",
    }
    assert result["selection_problem"] == ""
    assert warned(result) == []


def test_no_match_fails_with_the_listing(run_module, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path), "netdev": "bond0", "address": "10.0.0.11"}
    result = run_module(rdma_info, args, failed=True)
    assert result["msg"] == (
        "no RoCE v2 GID for bond0 with 10.0.0.11: "
        "mlx5_bond_0 port 1 (bond0, ACTIVE) has RoCE v2 GIDs for fe80::5e25:73ff:fe94:212a, 10.0.0.12"
    )
    assert result["devices"][0]["name"] == "mlx5_bond_0"


def test_no_match_without_requiring_one(run_module, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path), "address": "10.0.0.11", "require_selection": False}
    result = run_module(rdma_info, args)
    assert result["selected"] is None
    assert result["selection_problem"].startswith("no RoCE v2 GID with 10.0.0.11: mlx5_bond_0 port 1 ")


def test_down_port_is_selected_with_a_warning(run_module, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path, state="1: DOWN", phys_state="3: Disabled"), "netdev": "bond0"}
    result = run_module(rdma_info, args)
    assert (result["selected"]["gid_index"], result["selected"]["port_state"]) == (3, "DOWN")
    problem = (
        "no ACTIVE port has a matching RoCE v2 GID; selected mlx5_bond_0 port 1, which is DOWN (Disabled): "
        "RDMA traffic fails until its link is up"
    )
    assert result["selection_problem"] == problem
    assert warned(result) == [problem]


@pytest.mark.parametrize("netdev", [None, "bond0"])
def test_no_infiniband_class(run_module, tmp_path, netdev):
    (tmp_path / "sys" / "class" / "net" / "bond0").mkdir(parents=True)
    args = {"sysfs_root": str(tmp_path / "sys"), "netdev": netdev}
    result = run_module(rdma_info, args, failed=netdev is not None)
    assert result["devices"] == []
    if netdev:
        assert result["msg"] == (
            f"no RDMA device under {tmp_path}/sys/class/infiniband: load the RDMA driver (modprobe mlx5_ib for "
            "ConnectX) and install rdma-core, whose udev rules load it at boot"
        )
    else:
        assert result["selected"] is None


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "netdev",
            "bond 0",
            "netdev must be a network interface name (1 to 15 characters, none of '/', ':' or whitespace), "
            "got 'bond 0'",
        ),
        (
            "netdev",
            "averyveryverylongname",
            "netdev must be a network interface name (1 to 15 characters, none of '/', ':' or whitespace), "
            "got 'averyveryverylongname'",
        ),
        (
            "address",
            "10.0.0.12/24",
            "address must be a single IPv4 or IPv6 address without prefix length or zone, got '10.0.0.12/24'",
        ),
        ("address", "10.0.0", "address must be an IPv4 or IPv6 address, got '10.0.0'"),
        ("ibv_devinfo_path", "", "ibv_devinfo_path must be a command name or a path, got an empty string"),
    ],
)
def test_malformed_options_fail_naming_the_option(run_module, tmp_path, option, value, message):
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), option: value}, failed=True)
    assert result["msg"] == message


def test_malformed_bool_fails_naming_the_option(run_module, tmp_path):
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "require_selection": "maybe"}, failed=True)
    assert "require_selection" in result["msg"]


def test_ibv_devinfo_agreeing(run_module, tmp_path):
    binary = fake_binary(tmp_path, "ibv_devinfo", (FIXTURES / "connectx7-mlx5_bond_0.txt").read_text())
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "ibv_devinfo_path": str(binary)})
    assert (tmp_path / "ibv_devinfo.args").read_text() == "-v\n"
    assert warned(result) == []
    assert result["devices"][0]["fw_ver"] == "28.39.1002"


def test_ibv_devinfo_disagreeing_warns(run_module, tmp_path):
    text = (FIXTURES / "connectx7-mlx5_bond_0.txt").read_text().replace("28.39.1002", "28.43.2026")
    binary = fake_binary(tmp_path, "ibv_devinfo", text)
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "ibv_devinfo_path": str(binary)})
    assert warned(result) == ["mlx5_bond_0: sysfs fw_ver is 28.39.1002 but ibv_devinfo reports 28.43.2026"]


def test_ibv_devinfo_failure(run_module, tmp_path):
    binary = fake_binary(
        tmp_path, "ibv_devinfo", rc=255, stderr="Failed to get IB devices list: Function not implemented\n"
    )
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "ibv_devinfo_path": str(binary)}, failed=True)
    assert result["msg"] == f"{binary} -v failed (rc 255): Failed to get IB devices list: Function not implemented"
    assert result["rc"] == 255


def test_ibv_devinfo_missing_path_fails(run_module, tmp_path):
    missing = str(tmp_path / "bin" / "ibv_devinfo")
    result = run_module(rdma_info, {"sysfs_root": fake_sysfs(tmp_path), "ibv_devinfo_path": missing}, failed=True)
    assert result["msg"] == (
        f"ibv_devinfo_path {missing} is not an executable file; install it (ibverbs-utils on Debian and Ubuntu, "
        "libibverbs-utils on RHEL) or leave ibv_devinfo_path unset"
    )


def test_ibv_devinfo_name_not_in_path_warns(run_module, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path), "ibv_devinfo_path": "gpufleet-no-such-ibv_devinfo"}
    result = run_module(rdma_info, args)
    assert warned(result) == [
        "gpufleet-no-such-ibv_devinfo not found in PATH, devices not cross-checked; install it "
        "(ibverbs-utils on Debian and Ubuntu, libibverbs-utils on RHEL)"
    ]
    assert result["devices"][0]["fw_ver"] == "28.39.1002"


def test_ibv_devinfo_not_run_without_devices(run_module, tmp_path):
    binary = fake_binary(tmp_path, "ibv_devinfo", rc=1)
    result = run_module(rdma_info, {"sysfs_root": str(tmp_path / "nosys"), "ibv_devinfo_path": str(binary)})
    assert result["devices"] == []
    assert not (tmp_path / "ibv_devinfo.args").exists()
