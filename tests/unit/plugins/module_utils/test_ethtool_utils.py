# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_ethtool.py: ethtool -g/-l outputs from real captures, request planning."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _ethtool as et

FIXTURES = Path(__file__).parent / "fixtures" / "ethtool"


def fixture(name):
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- parsing


def test_ice_rings_and_channels():
    rings = et.parse("rings", fixture("ice_e810_g.txt"))
    assert rings == {
        "max": {"rx": 8160, "rx-mini": None, "rx-jumbo": None, "tx": 8160},
        "current": {"rx": 4096, "rx-mini": None, "rx-jumbo": None, "tx": 4096},
    }
    channels = et.parse("channels", fixture("ice_e810_l.txt"))
    assert channels == {
        "max": {"rx": 16, "tx": 16, "other": 1, "combined": 16},
        "current": {"rx": 0, "tx": 0, "other": 1, "combined": 4},
    }


def test_newer_ethtool_lines_are_ignored():
    # virtio_net under ethtool 6.1 adds RX Buf Len, CQE Size, TX Push and TCP data split.
    rings = et.parse("rings", fixture("virtio_net_g.txt"))
    assert rings["max"] == {"rx": 256, "rx-mini": None, "rx-jumbo": None, "tx": 256}
    assert rings["current"] == {"rx": 256, "rx-mini": None, "rx-jumbo": None, "tx": 256}
    channels = et.parse("channels", fixture("virtio_net_l.txt"))
    assert channels["max"] == {"rx": None, "tx": None, "other": None, "combined": 1}


def test_ioctl_era_zeros_and_a_jumbo_ring():
    rings = et.parse("rings", fixture("netxen_g.txt"))
    assert rings["max"] == {"rx": 8192, "rx-mini": 0, "rx-jumbo": 1024, "tx": 1024}
    assert rings["current"] == {"rx": 4096, "rx-mini": 0, "rx-jumbo": 1024, "tx": 1024}
    channels = et.parse("channels", fixture("mlx5_l.txt"))
    assert channels["max"] == {"rx": 0, "tx": 0, "other": 0, "combined": 63}


def test_veth_channels():
    assert et.parse("channels", fixture("veth_l.txt"))["current"] == {"rx": 1, "tx": 1, "other": None, "combined": None}
    after = et.parse("channels", fixture("veth_l_after_set_rx2_tx2.txt"))
    assert after["current"] == {"rx": 2, "tx": 2, "other": None, "combined": None}


@pytest.mark.parametrize(
    "text",
    ["", "Ring parameters for eth0:\n", fixture("ice_e810_g.txt").replace("Current hardware settings:\n", "")],
)
def test_output_without_both_blocks_is_an_error(text):
    with pytest.raises(et.EthtoolParseError, match="Pre-set maximums"):
        et.parse("rings", text)


def test_garbage_value_is_an_error():
    with pytest.raises(et.EthtoolParseError, match="RX: 'lots'"):
        et.parse("rings", fixture("ice_e810_g.txt").replace("8160", "lots", 1))


# ---------------------------------------------------------------- unsupported queries


def test_netlink_operation_not_supported():
    assert et.unsupported_reason(1, "", fixture("veth_g.stderr")) == "netlink error: Operation not supported"


def test_ioctl_operation_not_supported_over_two_lines():
    # Old ethtool prints the header on stdout, then perror("...parameters\n") on stderr.
    published = fixture("netxen_l_unsupported.txt")
    header, stderr = published.split("\n", 1)
    reason = et.unsupported_reason(1, header + "\n", stderr)
    assert reason == "Cannot get device channel parameters: Operation not supported"


def test_other_failures_are_not_unsupported():
    assert et.unsupported_reason(1, "", fixture("nosuch0_g.stderr")) is None
    assert et.unsupported_reason(0, fixture("veth_l.txt"), "") is None


# ---------------------------------------------------------------- requests


def test_normalize_accepts_ints_max_and_templated_numbers():
    assert et.normalize_request("rings", {"rx": "max", "tx": "4096", "rx-jumbo": 512}) == (
        {"rx": "max", "tx": 4096, "rx-jumbo": 512},
        [],
    )
    assert et.normalize_request("channels", {"rx": 0, "combined": 8}) == ({"rx": 0, "combined": 8}, [])
    assert et.normalize_request("rings", None) == ({}, [])


@pytest.mark.parametrize(
    ("kind", "wanted", "message"),
    [
        ("rings", {"rx": 0}, "rings.rx=0 must be an integer of at least 1 or 'max'"),
        ("rings", {"rx": -5}, "rings.rx=-5 must be"),
        ("rings", {"tx": "lots"}, "rings.tx='lots' must be"),
        ("rings", {"tx": True}, "rings.tx=True must be"),
        ("channels", {"combined": 1.5}, "channels.combined=1.5 must be an integer of at least 0"),
        ("rings", {"combined": 4}, "rings.combined is not a rings parameter; use rx, rx-mini, rx-jumbo, tx"),
        ("channels", {"rx-jumbo": 4}, "channels.rx-jumbo is not a channels parameter"),
    ],
)
def test_normalize_names_the_option(kind, wanted, message):
    normalized, problems = et.normalize_request(kind, wanted)
    assert normalized == {}
    assert len(problems) == 1
    assert problems[0].startswith(message)


def test_plan_resolves_max_and_keeps_what_matches():
    model = et.parse("rings", fixture("ice_e810_g.txt"))
    planned = et.plan("rings", model, {"rx": "max", "tx": 4096})
    assert planned == {
        "requested": {"rx": 8160, "tx": 4096},
        "changes": {"rx": 8160},
        "unsupported": [],
        "problems": [],
    }


def test_plan_skips_parameters_the_nic_lacks():
    model = et.parse("rings", fixture("netxen_g.txt"))
    planned = et.plan("rings", model, {"rx-mini": 64, "rx-jumbo": "max"})
    assert planned["unsupported"] == ["rings.rx-mini: not supported by the NIC (maximum is 0)"]
    assert planned["requested"] == {"rx-jumbo": 1024}
    assert planned["changes"] == {}
    model = et.parse("rings", fixture("ice_e810_g.txt"))
    assert et.plan("rings", model, {"rx-jumbo": 9000})["unsupported"] == [
        "rings.rx-jumbo: not supported by the NIC (maximum is n/a)"
    ]


def test_plan_refuses_values_above_the_maximum():
    model = et.parse("channels", fixture("mlx5_l.txt"))
    planned = et.plan("channels", model, {"combined": 95})
    assert planned["problems"] == ["channels.combined=95 is above the NIC's maximum 63; use at most 63 or 'max'"]
    assert planned["changes"] == {}


def test_plan_treats_a_current_zero_as_a_value():
    # ice: RX/TX channels are offered (maximum 16) and currently 0.
    model = et.parse("channels", fixture("ice_e810_l.txt"))
    assert et.plan("channels", model, {"rx": 0, "tx": 0, "combined": 8})["changes"] == {"combined": 8}


def test_argv_follows_ethtool_parameter_order():
    assert et.read_argv("/sbin/ethtool", "channels", "ice0") == ["/sbin/ethtool", "-l", "ice0"]
    argv = et.write_argv("ethtool", "rings", "ice0", {"tx": 8160, "rx-jumbo": 1024, "rx": 8160})
    assert argv == ["ethtool", "-G", "ice0", "rx", "8160", "rx-jumbo", "1024", "tx", "8160"]
    assert et.write_argv("ethtool", "channels", "ice0", {"combined": 8}) == ["ethtool", "-L", "ice0", "combined", "8"]
    assert et.write_argv("ethtool", "channels", "ice0", {}) is None


def test_mismatches_name_the_field():
    before = et.parse("channels", fixture("veth_l.txt"))
    after = et.parse("channels", fixture("veth_l_after_set_rx2_tx2.txt"))
    assert et.mismatches("channels", after, {"rx": 2, "tx": 2}) == []
    assert et.mismatches("channels", before, {"rx": 2, "tx": 1}) == ["channels.rx is 1, expected 2"]


# ---------------------------------------------------------------- a role's request


def test_a_role_request_names_the_role_variable():
    assert et.request_problems({"rx": "max", "tx": "4096"}, "rings", "host_tuning_rings") == []
    assert et.request_problems(None, "channels", "host_tuning_channels") == []
    assert et.request_problems({"rx": 0, "rxx": 1}, "rings", "host_tuning_rings") == [
        "host_tuning_rings.rx=0 must be an integer of at least 1 or 'max'",
        "host_tuning_rings.rxx is not a rings parameter; use rx, rx-mini, rx-jumbo, tx",
    ]


def test_a_role_request_that_is_not_a_dict_is_a_problem():
    assert et.request_problems("max", "channels", "host_tuning_channels") == [
        "host_tuning_channels must be a dict of rx, tx, other, combined, got 'max'"
    ]


def test_keys_of_mixed_types_are_each_named():
    # YAML makes 1 an int key: sorted() of int and str keys would raise.
    assert et.request_problems({1: 2, "tx": 4096}, "rings", "host_tuning_rings") == [
        "host_tuning_rings.1 is not a rings parameter; use rx, rx-mini, rx-jumbo, tx"
    ]
