# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the nccl_env filter: merge, validate, and fail with every problem at once."""

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter.nccl_env import FilterModule, nccl_env

HCA = "=mlx5_0:1,mlx5_1:1"


def error_of(*args, **kwargs):
    with pytest.raises(AnsibleFilterError) as excinfo:
        nccl_env(*args, **kwargs)
    return str(excinfo.value)


def test_filter_is_registered():
    assert FilterModule().filters() == {"nccl_env": nccl_env}


def test_socket_returns_seed_set_as_strings():
    env = nccl_env({}, "socket", socket_ifname="=bond0", interfaces=["bond0", "lo"])
    assert env == {
        "NCCL_SOCKET_IFNAME": "=bond0",
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET_GDR_LEVEL": "0",
        "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_SOCKET_NTHREADS": "2",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_BUFFSIZE": "8388608",
    }
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


def test_none_overrides_is_empty():
    assert nccl_env(None, "socket") == nccl_env({}, "socket")


def test_overrides_are_merged_and_stringified():
    env = nccl_env({"NCCL_SOCKET_NTHREADS": 16, "NCCL_MIN_NCHANNELS": None, "NCCL_DEBUG": "WARN"}, "socket")
    assert env["NCCL_SOCKET_NTHREADS"] == "16"
    assert env["NCCL_DEBUG"] == "WARN"
    assert "NCCL_MIN_NCHANNELS" not in env
    assert all(isinstance(v, str) for v in env.values())


def test_roce_returns_rdma_variables():
    env = nccl_env({}, "roce", socket_ifname="bond", ib_hca=HCA, ib_gid_index=3, ib_tc=106, interfaces=("bond0", "lo"))
    assert env == {"NCCL_SOCKET_IFNAME": "bond", "NCCL_IB_HCA": HCA, "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}


def test_ib_has_no_gid_index():
    env = nccl_env({}, "ib", ib_hca=HCA, ib_gid_index=3, ib_tc=106)
    assert env == {"NCCL_IB_HCA": HCA, "NCCL_IB_TC": "106"}


@pytest.mark.parametrize("overrides", [["NCCL_DEBUG=WARN"], "NCCL_DEBUG=WARN", 3])
def test_rejects_non_mapping_overrides(overrides):
    msg = error_of(overrides, "socket")
    assert "nccl_env_overrides must be a mapping of NCCL_* names to values" in msg
    assert f"got {type(overrides).__name__} {overrides!r}" in msg


@pytest.mark.parametrize("transport", ["tcp", "RoCE", None, ""])
def test_rejects_unknown_transport(transport):
    msg = error_of({}, transport)
    assert f"nccl_transport={transport!r} is not one of socket, roce, ib" in msg


def test_typo_fails_with_suggestion():
    msg = error_of({"NCCL_SOCKET_NTHREAD": 8}, "socket")
    assert msg.startswith("gpufleet.inference.nccl_env: 1 problem(s): ")
    assert "nccl_env_overrides.NCCL_SOCKET_NTHREAD: NCCL_SOCKET_NTHREAD is not an NCCL variable" in msg
    assert "did you mean NCCL_SOCKET_NTHREADS?" in msg


@pytest.mark.parametrize("nthreads", [0, 17, "many"])
def test_nthreads_out_of_range_fails(nthreads):
    msg = error_of({"NCCL_SOCKET_NTHREADS": nthreads}, "socket")
    assert "1 problem(s)" in msg
    assert f"NCCL_SOCKET_NTHREADS={nthreads} is outside 1..16" in msg


@pytest.mark.parametrize("nthreads", [1, 16])
def test_nthreads_boundaries_pass(nthreads):
    assert nccl_env({"NCCL_SOCKET_NTHREADS": nthreads}, "socket")["NCCL_SOCKET_NTHREADS"] == str(nthreads)


def test_socket_product_over_64_fails_with_default_nsocks():
    # The transport default NCCL_NSOCKS_PERTHREAD=4 takes part in the product.
    assert nccl_env({"NCCL_SOCKET_NTHREADS": 16}, "socket")["NCCL_NSOCKS_PERTHREAD"] == "4"
    msg = error_of({"NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": 8}, "socket")
    assert "8 x 16 = 128 exceeds NCCL's limit of 64 sockets" in msg
    assert "nccl_env_overrides.NCCL_NSOCKS_PERTHREAD:" in msg


@pytest.mark.parametrize("transport", ["roce", "ib"])
def test_ib_disable_under_rdma_fails(transport):
    msg = error_of({"NCCL_IB_DISABLE": 1}, transport, ib_hca=HCA)
    assert "1 problem(s)" in msg
    assert f"nccl_transport={transport} would silently fall back to TCP sockets" in msg


@pytest.mark.parametrize("transport", ["roce", "ib"])
def test_rdma_without_hca_names_the_role_variable(transport):
    msg = error_of({}, transport, origins={"NCCL_IB_HCA": "nccl_ib_hca"})
    assert f"nccl_ib_hca: nccl_transport={transport} needs the RDMA devices NCCL may use; set nccl_ib_hca" in msg


@pytest.mark.parametrize("transport", ["roce", "ib"])
def test_rdma_without_hca_is_one_problem(transport):
    # An unset nccl_ib_hca is one mistake; it should be counted, and fixed, once.
    msg = error_of({}, transport, origins={"NCCL_IB_HCA": "nccl_ib_hca"})
    assert "1 problem(s)" in msg, msg


def test_removing_hca_under_roce_fails():
    msg = error_of({"NCCL_IB_HCA": None}, "roce", ib_hca=HCA)
    assert "1 problem(s)" in msg
    assert "set nccl_env_overrides.NCCL_IB_HCA" in msg


@pytest.mark.parametrize(
    "spec, interfaces",
    [("eth", ["eth0", "lo"]), ("=bond0", ["bond0"]), ("^docker", ["docker0", "ens3"]), ("^=lo", ["lo", "ib0"])],
)
def test_ifname_selecting_an_interface_passes(spec, interfaces):
    assert nccl_env({}, "socket", socket_ifname=spec, interfaces=interfaces)["NCCL_SOCKET_IFNAME"] == spec


@pytest.mark.parametrize(
    "spec, interfaces", [("=eth0", ["eth01", "lo"]), ("^docker", ["docker0"]), ("bond", ["eth0", "lo"])]
)
def test_ifname_selecting_nothing_fails(spec, interfaces):
    msg = error_of(
        {}, "socket", socket_ifname=spec, interfaces=interfaces, origins={"NCCL_SOCKET_IFNAME": "nccl_socket_ifname"}
    )
    assert f"nccl_socket_ifname: NCCL_SOCKET_IFNAME={spec!r} selects no interface on this host" in msg
    assert f"(interfaces: {', '.join(sorted(interfaces))})" in msg
    assert "set nccl_socket_ifname to one of the host's interfaces" in msg


def test_ifname_not_checked_without_interfaces():
    assert nccl_env({}, "socket", socket_ifname="=nothere0")["NCCL_SOCKET_IFNAME"] == "=nothere0"


def test_ifname_override_without_origin_names_overrides():
    msg = error_of({"NCCL_SOCKET_IFNAME": "=eth9"}, "socket", interfaces=["eth0"])
    assert "nccl_env_overrides.NCCL_SOCKET_IFNAME: NCCL_SOCKET_IFNAME='=eth9'" in msg


def test_override_is_blamed_on_overrides_not_on_the_role_variable_it_replaced():
    # The override wins over socket_ifname, so telling the operator to change nccl_socket_ifname fixes nothing.
    msg = error_of(
        {"NCCL_SOCKET_IFNAME": "=eth9"},
        "socket",
        socket_ifname="=eth0",
        interfaces=["eth0"],
        origins={"NCCL_SOCKET_IFNAME": "nccl_socket_ifname"},
    )
    assert "NCCL_SOCKET_IFNAME='=eth9'" in msg
    assert "set nccl_env_overrides.NCCL_SOCKET_IFNAME to one of the host's interfaces" in msg, msg


@pytest.mark.parametrize(
    "value",
    [True, {"level": "WARN"}, "", "WARN INFO", 'W"', "$LEVEL"],
    ids=["bool", "dict", "empty", "space", "quote", "dollar"],
)
def test_bad_values_fail(value):
    msg = error_of({"NCCL_DEBUG": value}, "socket")
    assert f"1 problem(s): nccl_env_overrides.NCCL_DEBUG: NCCL_DEBUG={value!r}" in msg


def test_all_problems_reported_and_counted():
    overrides = {
        "NCCL_SOCKET_NTHREAD": 8,  # unknown name
        "NCCL_SOCKET_NTHREADS": 32,  # out of range
        "NCCL_DEBUG": "WARN INFO",  # unsafe value
        "NCCL_P2P_DISABLE": True,  # bool
    }
    msg = error_of(
        overrides,
        "socket",
        socket_ifname="=eth9",
        interfaces=["eth0", "lo"],
        origins={"NCCL_SOCKET_IFNAME": "nccl_socket_ifname"},
    )
    assert msg.startswith("gpufleet.inference.nccl_env: 5 problem(s): ")
    assert len(re.findall(r"(?:problem\(s\): |; )(nccl_env_overrides\.NCCL_\w+|nccl_socket_ifname): ", msg)) == 5
    for needle in (
        "did you mean NCCL_SOCKET_NTHREADS?",
        "NCCL_SOCKET_NTHREADS=32 is outside 1..16",
        "NCCL_DEBUG='WARN INFO' contains whitespace",
        "NCCL_P2P_DISABLE=True is not a plain value",
        "nccl_socket_ifname: NCCL_SOCKET_IFNAME='=eth9' selects no interface",
    ):
        assert needle in msg
