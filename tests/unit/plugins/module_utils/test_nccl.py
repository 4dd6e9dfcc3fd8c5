# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_nccl.py: the NCCL environment rules shared by filter and module."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl import (
    SOCKET_DEFAULTS,
    build_env,
    format_problems,
    ifname_selects,
    merge_overrides,
    parse_env_lines,
    settings_problems,
    suggest_variable,
    transport_env,
    validate_env,
)

HCA = "=mlx5_0:1,mlx5_1:1"
HOST_IFACES = ["bond0", "docker0", "eth0", "eth01", "lo"]


def problems_for(env, transport="socket", **kwargs):
    problems = validate_env(env, transport, **kwargs)
    return problems, format_problems(problems)


@pytest.mark.parametrize(
    "typo, known",
    [
        ("NCCL_SOCKET_NTHREAD", "NCCL_SOCKET_NTHREADS"),
        ("NCCL_IB_GID_IDX", "NCCL_IB_GID_INDEX"),
        ("NCCL_NSOCK_PERTHREAD", "NCCL_NSOCKS_PERTHREAD"),
        ("nccl_debug", "NCCL_DEBUG"),
    ],
)
def test_unknown_name_suggests_closest(typo, known):
    assert suggest_variable(typo) == known
    problems, msg = problems_for({typo: "2"})
    assert len(problems) == 1
    assert problems[0]["key"] == typo
    assert f"nccl_env_overrides.{typo}" in msg
    assert f"{typo} is not an NCCL variable" in msg
    assert f"did you mean {known}? Rename the key" in msg


def test_unknown_name_without_close_match_says_remove_it():
    assert suggest_variable("CUDA_VISIBLE_DEVICES") is None
    problems, msg = problems_for({"CUDA_VISIBLE_DEVICES": "0"})
    assert len(problems) == 1
    assert "CUDA_VISIBLE_DEVICES is not an NCCL variable" in msg
    assert "remove it" in msg
    assert "did you mean" not in msg


@pytest.mark.parametrize("value", ["0", "17", 17, "-1", "two", "2.0"])
def test_socket_nthreads_outside_range_fails(value):
    problems, msg = problems_for({"NCCL_SOCKET_NTHREADS": value})
    assert len(problems) == 1
    assert problems[0]["value"] == value
    assert f"NCCL_SOCKET_NTHREADS={value} is outside 1..16" in msg
    assert "set nccl_env_overrides.NCCL_SOCKET_NTHREADS to an integer in that range" in msg


@pytest.mark.parametrize("value", ["1", "16", 1, 16, "8"])
def test_socket_nthreads_inside_range_passes(value):
    assert validate_env({"NCCL_SOCKET_NTHREADS": value}, "socket") == []


def test_socket_nthreads_rejects_what_nccl_reads_differently():
    # NCCL reads integers with strtoll(), which stops at '_': "1_6" is 1 to NCCL, not 16.
    problems, msg = problems_for({"NCCL_SOCKET_NTHREADS": "1_6"})
    assert len(problems) == 1
    assert "NCCL_SOCKET_NTHREADS=1_6" in msg


@pytest.mark.parametrize("nsocks, nthreads", [("8", "16"), ("5", "13"), ("64", "2")])
def test_sockets_product_over_64_fails(nsocks, nthreads):
    product = int(nsocks) * int(nthreads)
    problems, msg = problems_for({"NCCL_NSOCKS_PERTHREAD": nsocks, "NCCL_SOCKET_NTHREADS": nthreads})
    assert len(problems) == 1
    assert problems[0]["key"] == "NCCL_NSOCKS_PERTHREAD"
    assert problems[0]["value"] == nsocks
    assert msg.startswith("nccl_env_overrides.NCCL_NSOCKS_PERTHREAD: ")
    assert f"{nsocks} x {nthreads} = {product} exceeds NCCL's limit of 64" in msg
    assert "lower one of them so the product is at most 64" in msg


@pytest.mark.parametrize("nsocks, nthreads", [("4", "16"), ("64", "1"), ("4", "2"), ("8", "8")])
def test_sockets_product_up_to_64_passes(nsocks, nthreads):
    assert validate_env({"NCCL_NSOCKS_PERTHREAD": nsocks, "NCCL_SOCKET_NTHREADS": nthreads}, "socket") == []


@pytest.mark.parametrize("transport", ["roce", "ib"])
def test_ib_disable_under_rdma_fails(transport):
    problems, msg = problems_for({"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": HCA}, transport)
    assert len(problems) == 1
    assert problems[0]["variable"] == "nccl_env_overrides.NCCL_IB_DISABLE"
    assert "NCCL_IB_DISABLE=1 disables NCCL's net_ib transport" in msg
    assert f"nccl_transport={transport} would silently fall back to TCP sockets" in msg
    assert "remove NCCL_IB_DISABLE or use nccl_transport=socket" in msg


@pytest.mark.parametrize("value", [2, "2", "01"], ids=["int-2", "str-2", "octal-01"])
def test_any_nonzero_ib_disable_under_roce_fails(value):
    # NCCL disables net_ib on any non-zero strtoll(value, NULL, 0), not only on "1".
    problems, msg = problems_for({"NCCL_IB_DISABLE": value, "NCCL_IB_HCA": HCA}, "roce")
    assert len(problems) == 1
    assert "disables NCCL's net_ib transport" in msg


def test_ib_disable_is_fine_under_socket_and_zero_under_rdma():
    assert validate_env({"NCCL_IB_DISABLE": "1"}, "socket") == []
    assert validate_env({"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": HCA}, "roce") == []
    assert validate_env({"NCCL_IB_HCA": HCA}, "ib") == []


@pytest.mark.parametrize("transport", ["roce", "ib"])
@pytest.mark.parametrize("env", [{}, {"NCCL_IB_HCA": ""}], ids=["missing", "empty"])
def test_rdma_without_ib_hca_fails(transport, env):
    _problems, msg = problems_for(env, transport, origins={"NCCL_IB_HCA": "nccl_ib_hca"})
    assert f"nccl_ib_hca: nccl_transport={transport} needs the RDMA devices NCCL may use" in msg
    assert "set nccl_ib_hca, e.g. '=mlx5_0:1,mlx5_1:1'" in msg


@pytest.mark.parametrize("transport", ["roce", "ib"])
def test_empty_ib_hca_is_one_problem(transport):
    # The 'not a plain value' check also fires and advises null, which only leads to the same failure.
    problems, msg = problems_for({"NCCL_IB_HCA": ""}, transport)
    assert len(problems) == 1, msg


@pytest.mark.parametrize("key, value", [("NCCL_IB_TC", "256"), ("NCCL_IB_TC", "-1"), ("NCCL_IB_GID_INDEX", "-2")])
def test_rdma_integer_ranges(key, value):
    problems, msg = problems_for({"NCCL_IB_HCA": HCA, key: value}, "roce")
    assert len(problems) == 1
    assert f"{key}={value} is outside" in msg
    assert validate_env({"NCCL_IB_HCA": HCA, "NCCL_IB_TC": "106", "NCCL_IB_GID_INDEX": "-1"}, "roce") == []


def test_unknown_transport_fails():
    problems, msg = problems_for({}, "tcp")
    assert problems[0]["variable"] == "nccl_transport"
    assert "nccl_transport='tcp' is not one of socket, roce, ib; choose one of them" in msg


@pytest.mark.parametrize(
    "spec, selected",
    [
        ("eth", ["eth0", "eth01"]),
        ("eth0", ["eth0", "eth01"]),
        ("=eth0", ["eth0"]),
        ("^docker", ["bond0", "eth0", "eth01", "lo"]),
        ("^=lo", ["bond0", "docker0", "eth0", "eth01"]),
        ("^=eth0", ["bond0", "docker0", "eth01", "lo"]),
        ("^docker,lo", ["bond0", "eth0", "eth01"]),
        ("=eth0,bond0", ["bond0", "eth0"]),
        ("bond,eth0", ["bond0", "eth0", "eth01"]),
        ("=eth", []),
        ("ib", []),
    ],
)
def test_ifname_selects(spec, selected):
    assert ifname_selects(spec, HOST_IFACES) == selected


@pytest.mark.parametrize("spec", ["eth", "=eth0", "^docker", "^=lo", "=bond0,eth0"])
def test_ifname_matching_an_interface_passes(spec):
    assert validate_env({"NCCL_SOCKET_IFNAME": spec}, "socket", interfaces=HOST_IFACES) == []


@pytest.mark.parametrize(
    "spec, interfaces",
    [
        ("=eth", ["eth0", "lo"]),
        ("=eth0", ["eth01", "lo"]),
        ("ib", ["eth0", "lo"]),
        ("^=lo", ["lo"]),
        ("^eth,lo", ["eth0", "lo"]),
    ],
)
def test_ifname_matching_nothing_fails_naming_interfaces(spec, interfaces):
    problems, msg = problems_for(
        {"NCCL_SOCKET_IFNAME": spec}, interfaces=interfaces, origins={"NCCL_SOCKET_IFNAME": "nccl_socket_ifname"}
    )
    assert len(problems) == 1
    assert problems[0]["variable"] == "nccl_socket_ifname"
    assert msg.startswith("nccl_socket_ifname: ")
    assert f"NCCL_SOCKET_IFNAME={spec!r} selects no interface on this host" in msg
    assert f"(interfaces: {', '.join(sorted(interfaces))})" in msg
    assert "set nccl_socket_ifname to one of the host's interfaces" in msg


def test_ifname_without_origin_names_overrides_and_no_interfaces():
    _problems, msg = problems_for({"NCCL_SOCKET_IFNAME": "eth"}, interfaces=[])
    assert "(interfaces: none)" in msg
    assert "set nccl_env_overrides.NCCL_SOCKET_IFNAME to" in msg


def test_ifname_check_skipped_without_interfaces():
    assert validate_env({"NCCL_SOCKET_IFNAME": "=nonexistent9"}, "socket", interfaces=None) == []


@pytest.mark.parametrize("value", [True, False, {"a": 1}, ["x"], ""], ids=["true", "false", "dict", "list", "empty"])
def test_non_plain_values_fail(value):
    problems, msg = problems_for({"NCCL_DEBUG": value}, origins={"NCCL_DEBUG": "nccl_debug"})
    assert len(problems) == 1
    assert problems[0]["variable"] == "nccl_debug"
    assert f"NCCL_DEBUG={value!r} is not a plain value" in msg
    assert "set nccl_debug to a string or an integer (use 0/1, not true/false)" in msg


@pytest.mark.parametrize("value", ["WARN INFO", "WARN\t", '"WARN"', "'WARN'", "$LEVEL", "a\\b", "`id`", "WARN#x"])
def test_unsafe_characters_fail(value):
    problems, msg = problems_for({"NCCL_DEBUG": value})
    assert len(problems) == 1
    assert msg.startswith("nccl_env_overrides.NCCL_DEBUG: ")
    assert f"NCCL_DEBUG={value!r} contains whitespace" in msg
    assert "remove them" in msg


@pytest.mark.parametrize(
    "key, value",
    [
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_P2P_DISABLE", 0),
        ("NCCL_P2P_DISABLE", 1),
        ("NCCL_IB_HCA", HCA),
        ("NCCL_SOCKET_IFNAME", "^=lo,docker0"),
        ("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p"),
    ],
)
def test_plain_values_pass(key, value):
    assert validate_env({key: value}, "socket") == []


def test_socket_defaults_are_the_seed_set():
    assert transport_env("socket") == {
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET_GDR_LEVEL": "0",
        "NCCL_NSOCKS_PERTHREAD": "4",
        "NCCL_SOCKET_NTHREADS": "2",
        "NCCL_MIN_NCHANNELS": "4",
        "NCCL_BUFFSIZE": "8388608",
    }
    assert transport_env("socket") == SOCKET_DEFAULTS
    assert validate_env(transport_env("socket", "=bond0"), "socket", interfaces=["bond0"]) == []


def test_roce_sets_hca_tc_gid_index_and_ifname():
    assert transport_env("roce", "=bond0", HCA, 3, 106) == {
        "NCCL_SOCKET_IFNAME": "=bond0",
        "NCCL_IB_HCA": HCA,
        "NCCL_IB_TC": "106",
        "NCCL_IB_GID_INDEX": "3",
    }


def test_ib_does_not_set_gid_index_and_zero_is_kept_for_roce():
    assert transport_env("ib", "", HCA, 3, 106) == {"NCCL_IB_HCA": HCA, "NCCL_IB_TC": "106"}
    assert transport_env("roce", ib_hca=HCA, ib_gid_index=0, ib_tc=0)["NCCL_IB_GID_INDEX"] == "0"


def test_merge_overrides_replaces_adds_and_none_removes():
    base = transport_env("socket")
    merged = merge_overrides(
        base, {"NCCL_IB_DISABLE": None, "NCCL_BUFFSIZE": "4194304", "NCCL_DEBUG": "WARN", "NCCL_ALGO": None}
    )
    assert "NCCL_IB_DISABLE" not in merged and "NCCL_ALGO" not in merged
    assert merged["NCCL_BUFFSIZE"] == "4194304" and merged["NCCL_DEBUG"] == "WARN"
    assert base == SOCKET_DEFAULTS
    assert merge_overrides(base, None) == base


def test_parse_env_lines_skips_comments_blanks_and_junk():
    text = "# managed by Ansible\n\n  NCCL_DEBUG = WARN \nnot a pair\nNCCL_IB_HCA==mlx5_0\n"
    assert parse_env_lines(text) == {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "=mlx5_0"}


@pytest.mark.parametrize(
    "name, fix",
    [
        ("NCCL_IB_GDR_LEVEL", "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4"),
        ("NCCL_IB_CUDA_SUPPORT", "use NCCL_NET_GDR_LEVEL instead"),
        ("NCCL_LL_THRESHOLD", "use NCCL_PROTO"),
        ("NCCL_TREE_THRESHOLD", "use NCCL_ALGO"),
        ("NCCL_SINGLE_RING_THRESHOLD", "removed in NCCL 2.3"),
        ("NCCL_CHECKS_DISABLE", "no longer read"),
    ],
)
def test_a_name_nccl_no_longer_reads_is_refused_with_its_replacement(name, fix):
    problems, msg = problems_for({name: "1"})
    assert [p["key"] for p in problems] == [name]
    assert f"nccl_env_overrides.{name}: {name} is no longer read by NCCL" in msg
    assert fix in msg


def test_no_name_nccl_no_longer_reads_is_suggested_for_a_typo():
    assert suggest_variable("NCCL_IB_GDR_LEVE") != "NCCL_IB_GDR_LEVEL"


@pytest.mark.parametrize("key", ["NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL"])
@pytest.mark.parametrize("value", ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "0", "4", 2])
def test_path_levels_nccl_reads_pass(key, value):
    assert problems_for({key: value})[0] == []


@pytest.mark.parametrize("key", ["NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL"])
@pytest.mark.parametrize("value", ["pxb", "NET", "DIS", "-1", "PCI", "1.5"])
def test_path_levels_nccl_ignores_are_refused(key, value):
    problems, msg = problems_for({key: value})
    assert [p["key"] for p in problems] == [key]
    assert f"{key}={value} is not a level NCCL reads" in msg
    assert "LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS" in msg


# The nccl role's settings (role_problems('nccl')) --------------------------------------------

ORIGINS = {
    "NCCL_SOCKET_IFNAME": "nccl_socket_ifname",
    "NCCL_IB_HCA": "nccl_ib_hca",
    "NCCL_IB_GID_INDEX": "nccl_ib_gid_index",
    "NCCL_IB_TC": "nccl_ib_dscp",
    "NCCL_IB_DISABLE": "nccl_transport",
}
# rdma_info's selected GID, as _rdma._selected() returns it.
SELECTED = {
    "device": "mlx5_1",
    "port": 1,
    "gid_index": 3,
    "gid": "0000:0000:0000:0000:0000:ffff:0a0a:0001",
    "type": "RoCE v2",
    "netdev": "bond0",
    "ipv4": "10.10.0.1",
    "ipv6": None,
    "port_state": "ACTIVE",
}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False", "false_condition": "x"}


def nccl_settings(**changes):
    settings = {
        "inventory_hostname": "gpu01",
        "nccl_transport": "socket",
        "nccl_socket_ifname": "=bond0",
        "nccl_ib_hca": "",
        "nccl_ib_gid_index": "auto",
        "nccl_ib_dscp": 26,
        "nccl_env_overrides": {},
        "gpufleet_fabric_address": "10.10.0.1",
        "fabric_network_interfaces": [],
        "fabric_network_bond": "",
        "interfaces": HOST_IFACES,
        "rdma": SKIPPED,
        "origins": ORIGINS,
    }
    settings.update(changes)
    return settings


def roce(**changes):
    rdma = {"changed": False, "devices": [], "selected": dict(SELECTED), "selection_problem": ""}
    return nccl_settings(**dict({"nccl_transport": "roce", "nccl_ib_hca": HCA, "rdma": rdma}, **changes))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"nccl_ib_dscp": "63"},
        {"nccl_ib_dscp": 0},
        {"nccl_socket_ifname": "", "gpufleet_fabric_address": None},
        {"nccl_transport": "ib", "nccl_ib_hca": HCA, "nccl_ib_gid_index": 3},
    ],
)
def test_good_nccl_settings_pass(changes):
    assert settings_problems(nccl_settings(**changes)) == []


def test_a_roce_gid_on_a_listed_hca_passes():
    assert settings_problems(roce()) == []
    assert settings_problems(roce(nccl_ib_hca="^mlx5_9")) == []


@pytest.mark.parametrize("dscp", [64, -1, "af41", "", None, True, 26.0, [26]])
def test_a_dscp_outside_0_to_63_is_refused(dscp):
    problems = settings_problems(nccl_settings(nccl_ib_dscp=dscp))
    assert problems == [
        f"nccl_ib_dscp={dscp} is not a DSCP value; set it to an integer in 0..63 "
        "(the roce role's lossless class uses 26)."
    ]


def test_a_bad_dscp_is_not_reported_again_as_the_traffic_class():
    problems = settings_problems(roce(nccl_ib_dscp=64))
    assert len(problems) == 1 and "NCCL_IB_TC" not in problems[0]


def test_an_empty_interface_where_the_fabric_layer_defines_a_link_is_refused():
    (problem,) = settings_problems(nccl_settings(nccl_socket_ifname=""))
    assert problem == (
        "nccl_socket_ifname is empty on gpu01, but the fabric layer defines a fabric link for it "
        "(gpufleet_fabric_address=10.10.0.1). Set gpufleet_fabric_interface to that link (e.g. bond0), or "
        "nccl_socket_ifname to '=<interface>'."
    )
    (problem,) = settings_problems(
        nccl_settings(nccl_socket_ifname="", gpufleet_fabric_address=None, fabric_network_interfaces=["ens1", "ens2"])
    )
    assert "(fabric_network_interfaces=ens1,ens2)" in problem
    (problem,) = settings_problems(
        nccl_settings(nccl_socket_ifname="", gpufleet_fabric_address=None, fabric_network_bond="bond0")
    )
    assert "(fabric_network_interfaces=)" in problem


@pytest.mark.parametrize(
    "rdma, hca, why",
    [
        ({"selected": None, "selection_problem": ""}, HCA, "no RoCE v2 GID found; set gpufleet_fabric_interface"),
        (
            {"selected": SELECTED, "selection_problem": "no ACTIVE port has a matching RoCE v2 GID"},
            HCA,
            "no ACTIVE port has a matching RoCE v2 GID",
        ),
        (
            {"selected": SELECTED, "selection_problem": ""},
            "=mlx5_0:1",
            "the RoCE v2 GID of the fabric address is on mlx5_1, which nccl_ib_hca==mlx5_0:1 does not list",
        ),
        # mlx5_1 is a prefix of mlx5_10, not the same device.
        (
            {"selected": SELECTED, "selection_problem": ""},
            "mlx5_10",
            "the RoCE v2 GID of the fabric address is on mlx5_1, which nccl_ib_hca=mlx5_10 does not list",
        ),
    ],
)
def test_an_unusable_roce_gid_is_refused(rdma, hca, why):
    problems = settings_problems(nccl_settings(nccl_transport="roce", nccl_ib_hca=hca, rdma=rdma))
    assert problems[0].startswith("nccl_ib_gid_index=auto: " + why)
    assert problems[0].endswith(
        ". Set nccl_ib_gid_index to the index (show_gids or /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/), "
        "or fix the fabric address or nccl_ib_hca."
    )


def test_the_environment_problems_name_the_role_variable():
    problems = settings_problems(
        nccl_settings(nccl_socket_ifname="=ib9", nccl_env_overrides={"NCCL_SOCKET_NTHREAD": 4})
    )
    assert problems[0].startswith("nccl_env_overrides.NCCL_SOCKET_NTHREAD: NCCL_SOCKET_NTHREAD is not an NCCL variable")
    assert problems[1].startswith("nccl_socket_ifname: NCCL_SOCKET_IFNAME='=ib9' selects no interface on this host")


@pytest.mark.parametrize("overrides", [["NCCL_DEBUG=INFO"], "NCCL_DEBUG=INFO"])
def test_overrides_that_are_not_a_mapping_are_refused(overrides):
    assert settings_problems(nccl_settings(nccl_env_overrides=overrides)) == [
        "nccl_env_overrides: nccl_env_overrides must be a mapping of NCCL_* names to values, "
        f"got {type(overrides).__name__} {overrides!r}"
    ]


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        nccl_settings(nccl_ib_dscp=99, nccl_socket_ifname="", nccl_transport="tcp", nccl_env_overrides={"X": 1})
    )
    assert [problem.split("=")[0].split(":")[0].split(" ")[0] for problem in problems] == [
        "nccl_ib_dscp",
        "nccl_socket_ifname",
        "nccl_transport",
        "nccl_env_overrides.X",
    ]


def test_the_filter_and_the_check_build_the_same_environment():
    env, problems = build_env({"NCCL_DEBUG": "WARN"}, "roce", "=bond0", HCA, 3, 104, HOST_IFACES, ORIGINS)
    assert problems == []
    assert env == {
        "NCCL_SOCKET_IFNAME": "=bond0",
        "NCCL_IB_HCA": HCA,
        "NCCL_IB_TC": "104",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_DEBUG": "WARN",
    }
