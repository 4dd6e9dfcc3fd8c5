# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_roce.py: mlnx_qos and dcb outputs (fixtures/ READMEs say which are real), the plan."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _roce as roce

FIXTURES = Path(__file__).parent / "fixtures"
DEFAULT_MAP = {dscp: dscp >> 3 for dscp in range(64)}
IF = "ens1f0np0"


def text(name):
    return (FIXTURES / name).read_text()


def desired(ets=None, pfc_priority=3):
    return roce.desired_state(pfc_priority, 26, 48, 6, ets)


def params(**overrides):
    base = dict(interface=IF, pfc_priority=3, dscp=26, cnp_dscp=48, cnp_priority=6, ets=None)
    base.update(overrides)
    return base


def runner(outputs):
    """run(argv) answering from {object or 'mlnx_qos': (rc, out, err)} and recording the argvs."""
    calls = []

    def run(argv):
        calls.append(argv)
        key = "mlnx_qos" if "-i" in argv else argv[2]
        return outputs[key]

    run.calls = calls
    return run


# ---------------------------------------------------------------- mlnx_qos


def test_mlnx_qos_os_controlled_dscp_pfc3():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth4-os-dscp-pfc3.txt"))
    assert state["dcbx"] == "os"
    assert state["trust"] == "dscp"
    assert state["pfc_enabled"] == [3]
    assert state["dscp2prio"] == DEFAULT_MAP
    assert state["cable_len"] == 7
    assert state["ets"] == {"tsa": ["vendor"] * 8, "bw": [0] * 8, "prio_tc": [1, 0, 2, 3, 4, 5, 6, 7]}
    assert state["lldpad_running"] is False


def test_mlnx_qos_page_rendering_with_ets_and_strict():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth2-ofed42-ets-pfc0267.txt"))
    assert state["pfc_enabled"] == [0, 2, 6, 7]
    assert state["cable_len"] == 10
    assert state["ets"]["tsa"] == ["ets"] * 6 + ["strict", "ets"]
    assert state["ets"]["bw"] == [10, 10, 10, 10, 10, 10, 0, 40]
    assert state["dscp2prio"][26] == 3 and state["dscp2prio"][48] == 6


def test_mlnx_qos_pcp_trust_prints_no_map():
    state = roce.parse_mlnx_qos(text("mlnx_qos/derived-eth4-pcp.txt"))
    assert state["trust"] == "pcp"
    assert state["dscp2prio"] == {}


def test_mlnx_qos_map_line_that_wraps():
    state = roce.parse_mlnx_qos(text("mlnx_qos/derived-eth4-dscp26-prio0.txt"))
    assert state["dscp2prio"][26] == 0
    assert state["dscp2prio"][0] == 0
    assert state["dscp2prio"][27] == 3


@pytest.mark.parametrize("name", ["derived-eth4-default-prio3.txt", "derived-eth4-default-prio-empty.txt"])
def test_mlnx_qos_default_priority_block_is_not_a_dscp_map(name):
    # '\tprio:3' under 'default priority:' has no dscp: part; it used to raise "unreadable dscp2prio line".
    assert roce.parse_mlnx_qos(text("mlnx_qos/" + name)) == roce.parse_mlnx_qos(text("mlnx_qos/eth4-os-dscp-pfc3.txt"))


def test_mlnx_qos_warning_and_missing_tcs():
    report = (
        "****** WARNING: lldpad service is running and may overwrite your settings ******\n\n"
        + text("mlnx_qos/eth4-os-dscp-pfc3.txt").split("tc: 1 ")[0]
    )
    state = roce.parse_mlnx_qos(report)
    assert state["lldpad_running"] is True
    assert state["ets"]["tsa"] == ["vendor"] + [None] * 7
    assert state["ets"]["prio_tc"][1] == 0


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t.replace("PFC configuration:", "PFC:"), "no 'PFC configuration'"),
        (lambda t: t.replace("prio:4 dscp:39", "prio:4 dscp:x39"), "unreadable dscp2prio line"),
        (lambda t: t.replace("tc: 3 ratelimit: unlimited, tsa: vendor", "tc: 3 nonsense"), "unreadable traffic class"),
        (lambda t: t.replace("0   0   0   1   0   0   0   0", "0   0   1"), "unreadable PFC line"),
    ],
)
def test_mlnx_qos_unreadable(mangle, message):
    with pytest.raises(roce.RoceError, match=message):
        roce.parse_mlnx_qos(mangle(text("mlnx_qos/eth4-os-dscp-pfc3.txt")))


# ---------------------------------------------------------------- dcb


def test_dcb_app_real_capture_with_stray_element():
    assert roce.parse_dcb_app(text("dcb/app-swp1-cs1-cs2.json")) == {8: 0, 16: 1}
    assert roce.parse_dcb_app(text("dcb/derived-app-empty.json")) == {}


def test_dcb_app_several_priorities_for_one_dscp():
    assert roce.parse_dcb_app('{"dscp_prio":[[24,3],[24,2],[48,6]]}') == {24: [2, 3], 48: 6}


def test_dcb_pfc_and_ets_and_apptrust():
    assert roce.parse_dcb_pfc(text("dcb/derived-pfc-prio67.json")) == ([6, 7], 4096)
    assert roce.parse_dcb_ets(text("dcb/derived-ets-33-33-34.json")) == {
        "tsa": ["ets"] * 3 + ["strict"] * 5,
        "bw": [33, 33, 34, 0, 0, 0, 0, 0],
        "prio_tc": list(range(8)),
    }
    assert roce.parse_dcb_apptrust(text("dcb/derived-apptrust-port-pcp-ethtype.json")) == ["port", "pcp", "ethtype"]


@pytest.mark.parametrize(
    ("parse", "output", "message"),
    [
        (roce.parse_dcb_pfc, "pfc-cap 8 macsec-bypass off delay 0", "printed no JSON"),
        (roce.parse_dcb_pfc, '{"prio_pfc":[true,false]}', "expected 8 values"),
        (roce.parse_dcb_pfc, '{"prio_pfc":["on","off","off","off","off","off","off","off"]}', "true/false"),
        (roce.parse_dcb_app, '{"dscp_prio":[[26]]}', "unreadable dscp_prio entry"),
        (roce.parse_dcb_app, "[]", "not an object"),
        (roce.parse_dcb_apptrust, '{"order":"dscp"}', "unreadable order"),
    ],
)
def test_dcb_unreadable(parse, output, message):
    with pytest.raises(roce.RoceError, match=message):
        parse(output)


def test_dcb_trust_rules():
    assert roce.dcb_trust(None, {26: 3}) == "dscp"
    assert roce.dcb_trust(None, {}) == "pcp"
    assert roce.dcb_trust(["dscp", "pcp"], {}) == "dscp"
    assert roce.dcb_trust(["port", "pcp"], {26: 3}) == "port"
    assert roce.dcb_trust([], {26: 3}) == "none"


def test_read_state_dcb_without_apptrust():
    run = runner(
        {
            "pfc": (0, text("dcb/derived-pfc-prio3.json"), ""),
            "app": (0, text("dcb/derived-app-roce.json"), ""),
            "ets": (0, text("dcb/derived-ets-33-33-34.json"), ""),
            "apptrust": (1, "\n", text("dcb/apptrust-iproute2-6.1.stderr")),
        }
    )
    state = roce.read_state("dcb", "dcb", IF, run)
    assert state["apptrust"] is None and state["trust"] == "dscp"
    assert state["pfc_enabled"] == [3] and state["cable_len"] == 4096
    assert state["dscp2prio"] == {26: 3, 48: 6}
    assert run.calls[0] == ["dcb", "-j", "pfc", "show", "dev", IF]
    assert run.calls[1] == ["dcb", "-j", "app", "show", "dev", IF, "dscp-prio"]
    assert roce.differences(state, desired()) == {}


def test_read_state_dcb_failures():
    unsupported = (1, "\n", text("dcb/pfc-show-lo-iproute2-6.1.stderr"))
    with pytest.raises(
        roce.RoceError, match=r"dcb -j pfc show dev lo failed \(rc 1\): Attribute read: Operation"
    ) as exc:
        roce.read_state("dcb", "dcb", "lo", runner({"pfc": unsupported}))
    assert exc.value.details["rc"] == 1 and exc.value.details["cmd"][2] == "pfc"
    ok = {"pfc": (0, text("dcb/derived-pfc-prio3.json"), ""), "app": (0, "{}", ""), "ets": unsupported}
    ok["apptrust"] = unsupported
    assert roce.read_state("dcb", "dcb", "lo", runner(ok))["ets"] is None
    with pytest.raises(roce.RoceError, match="ets show"):
        roce.read_state("dcb", "dcb", "lo", runner(ok), need_ets=True)


def test_read_state_mlnx_qos_names_the_command_on_bad_output():
    run = runner({"mlnx_qos": (0, "Interface name is required\n", "")})
    with pytest.raises(roce.RoceError, match=r"mlnx_qos -i ens1f0np0 -a: mlnx_qos printed no 'PFC configuration'"):
        roce.read_state("mlnx_qos", "mlnx_qos", IF, run)


# ---------------------------------------------------------------- options


def test_validate_accepts_defaults():
    assert roce.validate(params()) == []
    assert roce.validate(params(cnp_dscp=None, ets=[50, 0, 0, 50, 0, 0, 0, 0])) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"interface": "mlx5 0"}, "interface='mlx5 0' is not a network device name"),
        ({"interface": "averyveryverylongname"}, "not a network device name"),
        ({"pfc_priority": 8}, "pfc_priority=8 is out of range; use a priority 0..7"),
        ({"cnp_priority": -1}, "cnp_priority=-1 is out of range"),
        ({"dscp": 64}, "dscp=64 is out of range; use a DSCP value 0..63"),
        ({"cnp_dscp": 26}, "cnp_dscp=26 equals dscp but cnp_priority=6 differs from pfc_priority=3"),
        ({"ets": [50, 50]}, "must be 8 percentages 0..100"),
        ({"ets": [50, 0, 0, 40, 0, 0, 0, 0]}, "sums to 90; the shares must sum to 100"),
    ],
)
def test_validate_names_option_and_fix(overrides, message):
    problems = roce.validate(params(**overrides))
    assert len(problems) == 1 and message in problems[0]


# ---------------------------------------------------------------- plan


def test_plan_nothing_when_state_matches():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth4-os-dscp-pfc3.txt"))
    assert roce.plan("mlnx_qos", "mlnx_qos", IF, state, desired()) == []


def test_plan_mlnx_qos_pcp_trust_sets_trust_then_map_in_separate_calls():
    state = roce.parse_mlnx_qos(text("mlnx_qos/derived-eth4-pcp.txt"))
    steps = roce.plan("mlnx_qos", "/usr/bin/mlnx_qos", IF, state, desired())
    assert [step["argv"] for step in steps] == [
        ["/usr/bin/mlnx_qos", "-i", IF, "--trust", "dscp"],
        ["/usr/bin/mlnx_qos", "-i", IF, "--dscp2prio", "set,26,3", "--dscp2prio", "set,48,6"],
    ]


def test_plan_mlnx_qos_pfc_keeps_cable_len_and_comes_last():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth2-ofed42-ets-pfc0267.txt"))
    steps = roce.plan("mlnx_qos", "mlnx_qos", IF, state, desired(ets=[50, 0, 0, 50, 0, 0, 0, 0]))
    assert [step["field"] for step in steps] == ["ets", "pfc"]
    assert steps[0]["argv"][3:] == ["--tsa", "ets,ets,ets,ets,ets,ets,ets,ets", "--tcbw", "50,0,0,50,0,0,0,0"]
    assert steps[1]["argv"][3:] == ["--pfc", "0,0,0,1,0,0,0,0", "--cable_len", "10"]


def test_plan_mlnx_qos_only_the_missing_mapping():
    state = roce.parse_mlnx_qos(text("mlnx_qos/derived-eth4-dscp26-prio0.txt"))
    steps = roce.plan("mlnx_qos", "mlnx_qos", IF, state, desired())
    assert [step["argv"][3:] for step in steps] == [["--dscp2prio", "set,26,3"]]


def test_plan_dcb_commands():
    state = {
        "trust": "port",
        "apptrust": ["port", "pcp", "ethtype"],
        "pfc_enabled": [6, 7],
        "dscp2prio": {26: [2, 3]},
        "ets": roce.parse_dcb_ets(text("dcb/derived-ets-33-33-34.json")),
        "cable_len": 4096,
    }
    steps = roce.plan("dcb", "dcb", IF, state, desired(ets=[50, 0, 0, 40, 0, 0, 10, 0]))
    assert [step["argv"] for step in steps] == [
        ["dcb", "apptrust", "set", "dev", IF, "order", "dscp", "port", "pcp", "ethtype"],
        ["dcb", "app", "replace", "dev", IF, "dscp-prio", "26:3", "48:6"],
        [
            "dcb",
            "ets",
            "set",
            "dev",
            IF,
            "tc-tsa",
            "all:ets",
            "tc-bw",
            "0:50",
            "1:0",
            "2:0",
            "3:40",
            "4:0",
            "5:0",
            "6:10",
            "7:0",
        ],
        ["dcb", "pfc", "set", "dev", IF, "prio-pfc", "all:off", "3:on"],
    ]


def test_plan_dcb_without_apptrust_lets_the_map_set_trust():
    state = {"trust": "pcp", "apptrust": None, "pfc_enabled": [3], "dscp2prio": {}, "ets": None, "cable_len": 0}
    steps = roce.plan("dcb", "dcb", IF, state, desired())
    assert [step["field"] for step in steps] == ["dscp2prio"]


def test_plan_without_cnp_mapping():
    state = roce.parse_mlnx_qos(text("mlnx_qos/derived-eth4-pcp.txt"))
    steps = roce.plan("mlnx_qos", "mlnx_qos", IF, state, roce.desired_state(5, 40, None, 6, None))
    assert [step["argv"][3:] for step in steps] == [
        ["--trust", "dscp"],
        ["--dscp2prio", "set,40,5"],
        ["--pfc", "0,0,0,0,0,1,0,0", "--cable_len", "7"],
    ]


def test_describe_and_public_state():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth2-ofed42-ets-pfc0267.txt"))
    found = roce.differences(state, desired())
    assert roce.describe_differences(found) == "pfc: want [3], have [0, 2, 6, 7]"
    shown = roce.public_state(state)
    assert shown["dscp2prio"]["26"] == 3 and "lldpad_running" not in shown
    assert roce.public_state(None) is None


def test_boot_plan_sets_everything_and_keeps_delay_and_apptrust_support():
    state = roce.parse_mlnx_qos(text("mlnx_qos/eth4-os-dscp-pfc3.txt"))
    assert [step["argv"][3:] for step in roce.boot_plan("mlnx_qos", "mlnx_qos", IF, state, desired())] == [
        ["--trust", "dscp"],
        ["--dscp2prio", "set,26,3", "--dscp2prio", "set,48,6"],
        ["--pfc", "0,0,0,1,0,0,0,0", "--cable_len", "7"],
    ]
    dcb_state = {"apptrust": None, "cable_len": 0, "trust": "dscp", "pfc_enabled": [3], "dscp2prio": {26: 3}}
    assert [step["field"] for step in roce.boot_plan("dcb", "dcb", IF, dcb_state, desired())] == ["dscp2prio", "pfc"]


# ---------------------------------------------------------------- the role's settings


def settings(**overrides):
    """The roce role's defaults on a host with lo, eth0 and the RoCE port."""
    base = {
        "roce_interfaces": [IF],
        "roce_pfc_priority": 3,
        "roce_cnp_priority": 6,
        "roce_dscp": 26,
        "roce_cnp_dscp": 48,
        "roce_ets": None,
        "roce_rdma_cm_mode": "RoCE v2",
        "inventory_hostname": "gpu01",
        "interfaces": ["lo", "eth0", IF],
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        # Numbers that went through a template or an inventory as text.
        {"roce_pfc_priority": "0", "roce_cnp_priority": "7", "roce_dscp": "63", "roce_cnp_dscp": "0"},
        {"roce_ets": [50, 50, 0, 0, 0, 0, 0, 0]},
        {"roce_ets": ["10", "10", "10", "10", "10", "10", "20", "20"]},
        {"roce_rdma_cm_mode": "IB/RoCE v1"},
        {"roce_interfaces": [IF, "eth0"]},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert roce.settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"roce_interfaces": []}, "roce_interfaces is empty: name the RoCE NICs of gpu01"),
        (
            {"roce_interfaces": ["ens9f9np9", "eth0", "ens9f9np9"]},
            "roce_interfaces=['ens9f9np9', 'eth0', 'ens9f9np9'] names ens9f9np9, which gpu01 does not have "
            "(it has ens1f0np0, eth0, lo)",
        ),
        ({"roce_interfaces": "eth0"}, "roce_interfaces=eth0 must be a list of the RoCE NICs of gpu01"),
        ({"roce_pfc_priority": 8}, "roce_pfc_priority=8 must be a priority, 0..7"),
        ({"roce_pfc_priority": 3.0}, "roce_pfc_priority=3.0 must be a priority, 0..7"),
        ({"roce_cnp_priority": None}, "roce_cnp_priority=None must be a priority, 0..7"),
        ({"roce_cnp_priority": True}, "roce_cnp_priority=True must be a priority, 0..7"),
        ({"roce_dscp": 64}, "roce_dscp=64 must be a DSCP value, 0..63"),
        ({"roce_dscp": "af31"}, "roce_dscp=af31 must be a DSCP value, 0..63"),
        ({"roce_cnp_dscp": -1}, "roce_cnp_dscp=-1 must be a DSCP value, 0..63"),
        (
            {"roce_dscp": 48, "roce_cnp_dscp": "48"},
            "roce_dscp=48 and roce_cnp_dscp=48 must differ: congestion notifications need their own DSCP",
        ),
        (
            {"roce_ets": [110, -10, 0, 0, 0, 0, 0, 0]},
            "roce_ets=[110, -10, 0, 0, 0, 0, 0, 0] must be null or 8 whole percentages, each 0..100, summing to "
            "100 (one share per traffic class)",
        ),
        (
            {"roce_ets": [50, 10, 0, 0, 0, 0, 0, 0]},
            "roce_ets=[50, 10, 0, 0, 0, 0, 0, 0] must be null or 8 whole percentages, each 0..100, summing to "
            "100 (one share per traffic class)",
        ),
        (
            {"roce_ets": [100]},
            "roce_ets=[100] must be null or 8 whole percentages, each 0..100, summing to 100 (one share per "
            "traffic class)",
        ),
        (
            {"roce_ets": "100"},
            "roce_ets=100 must be null or 8 whole percentages, each 0..100, summing to 100 (one share per "
            "traffic class)",
        ),
        ({"roce_rdma_cm_mode": "RoCEv2"}, 'roce_rdma_cm_mode=RoCEv2 must be "RoCE v2" or "IB/RoCE v1"'),
        ({"roce_rdma_cm_mode": ["RoCE v2"]}, 'roce_rdma_cm_mode=[\'RoCE v2\'] must be "RoCE v2" or "IB/RoCE v1"'),
    ],
)
def test_a_bad_setting_is_named_with_its_value_and_the_fix(overrides, message):
    assert roce.settings_problems(settings(**overrides)) == [message]


def test_every_problem_comes_back_at_once():
    problems = roce.settings_problems(settings(roce_interfaces=[], roce_pfc_priority=9, roce_dscp=70, roce_ets=[1]))
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "roce_interfaces",
        "roce_pfc_priority",
        "roce_dscp",
        "roce_ets",
    ]


def test_the_interfaces_of_the_host_are_listed_as_jinja_sorts_them():
    [problem] = roce.settings_problems(settings(roce_interfaces=["x"], interfaces=["eth1", "Bond0", "lo", "BR0"]))
    assert problem.endswith("(it has Bond0, BR0, eth1, lo)")
