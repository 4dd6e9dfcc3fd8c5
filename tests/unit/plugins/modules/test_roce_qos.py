# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the roce_qos module, driving fake mlnx_qos and dcb binaries that print captured outputs."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import roce_qos

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures"
IF = "ens1f0np0"


def fake_mlnx_qos(tmp_path, before, after=None):
    """mlnx_qos printing `before` until a write call ran, then `after`; write calls go to tmp_path/writes."""
    after = after or before
    script = tmp_path / "mlnx_qos"
    script.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --"*) echo "$*" >> "{tmp_path}/writes"; exit 0 ;; esac\n'
        f'if [ -e "{tmp_path}/writes" ]; then cat "{FIXTURES}/mlnx_qos/{after}"; '
        f'else cat "{FIXTURES}/mlnx_qos/{before}"; fi\n'
    )
    script.chmod(0o755)
    return str(script)


def fake_dcb(tmp_path, before, after=None):
    """dcb answering `-j OBJECT show` from {object: fixture}, `after` once a write ran; an object with no
    fixture fails as iproute2 6.1 does (real stderr captures); writes go to tmp_path/writes."""
    for phase, files in (("before", before), ("after", {**before, **(after or {})})):
        for obj, name in files.items():
            (tmp_path / f"{phase}-{obj}").write_text((FIXTURES / "dcb" / name).read_text())
    script = tmp_path / "dcb"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" != -j ]; then echo "$*" >> "{tmp_path}/writes"; exit 0; fi\n'
        f'phase=before; [ -e "{tmp_path}/writes" ] && phase=after\n'
        f'file="{tmp_path}/$phase-$2"\n'
        'if [ -e "$file" ]; then cat "$file"; exit 0; fi\n'
        f'echo; if [ "$2" = apptrust ]; then cat "{FIXTURES}/dcb/apptrust-iproute2-6.1.stderr" >&2; '
        f'else cat "{FIXTURES}/dcb/pfc-show-lo-iproute2-6.1.stderr" >&2; fi; exit 1\n'
    )
    script.chmod(0o755)
    return str(script)


def writes(tmp_path):
    path = tmp_path / "writes"
    return path.read_text().splitlines() if path.exists() else []


def mlnx_args(tmp_path, before, after=None, **extra):
    return {"interface": IF, "tool": "mlnx_qos", "mlnx_qos_path": fake_mlnx_qos(tmp_path, before, after), **extra}


ROCE_DCB = {"pfc": "derived-pfc-prio3.json", "app": "derived-app-roce.json", "ets": "derived-ets-33-33-34.json"}


def test_matching_state_writes_nothing(run_module, tmp_path):
    result = run_module(roce_qos, mlnx_args(tmp_path, "eth4-os-dscp-pfc3.txt"))
    assert result["changed"] is False
    assert result["commands"] == [] and result["link_flap"] is False
    assert writes(tmp_path) == []
    assert result["tool"] == "mlnx_qos"
    assert result["after"] == result["before"]
    assert result["before"]["trust"] == "dscp" and result["before"]["dscp2prio"]["26"] == 3
    assert [argv[3] for argv in result["boot_commands"]] == ["--trust", "--dscp2prio", "--pfc"]


def test_wrong_trust_is_one_trust_call(run_module, tmp_path):
    result = run_module(roce_qos, mlnx_args(tmp_path, "derived-eth4-pcp.txt", "eth4-os-dscp-pfc3.txt"))
    assert result["changed"] is True and result["link_flap"] is False
    assert writes(tmp_path) == [f"-i {IF} --trust dscp"]
    assert result["commands"] == [[str(tmp_path / "mlnx_qos"), "-i", IF, "--trust", "dscp"]]
    assert result["before"]["trust"] == "pcp" and result["after"]["trust"] == "dscp"


def test_pfc_on_wrong_priorities_is_one_pfc_call_that_flaps(run_module, tmp_path):
    result = run_module(roce_qos, mlnx_args(tmp_path, "eth2-ofed42-ets-pfc0267.txt", "eth4-os-dscp-pfc3.txt"))
    assert writes(tmp_path) == [f"-i {IF} --pfc 0,0,0,1,0,0,0,0 --cable_len 10"]
    assert result["link_flap"] is True and result["changed"] is True
    assert result["after"]["pfc_enabled"] == [3]


def test_missing_dscp_mapping_is_one_dscp2prio_call(run_module, tmp_path):
    result = run_module(roce_qos, mlnx_args(tmp_path, "derived-eth4-dscp26-prio0.txt", "eth4-os-dscp-pfc3.txt"))
    assert writes(tmp_path) == [f"-i {IF} --dscp2prio set,26,3"]
    assert result["link_flap"] is False


def test_check_mode_runs_no_write(run_module, tmp_path):
    args = mlnx_args(tmp_path, "derived-eth4-pcp.txt", ets=[50, 0, 0, 40, 0, 0, 10, 0])
    result = run_module(roce_qos, args, check_mode=True)
    assert writes(tmp_path) == []
    assert result["changed"] is True and result["link_flap"] is False and result["after"] is None
    assert [argv[3] for argv in result["commands"]] == ["--trust", "--dscp2prio", "--tsa"]


def test_write_without_effect_fails_naming_the_field(run_module, tmp_path):
    result = run_module(roce_qos, mlnx_args(tmp_path, "eth2-ofed42-ets-pfc0267.txt"), failed=True)
    assert result["failed"] is True
    assert result["msg"].startswith(f"roce_qos on {IF}: the pfc command ran but the state still differs: pfc: want [3]")
    assert result["mismatches"] == ["pfc"]
    assert len(writes(tmp_path)) == 1 and result["link_flap"] is True


def test_failing_write_returns_rc_and_output(run_module, tmp_path):
    script = tmp_path / "mlnx_qos"
    pcp = FIXTURES / "mlnx_qos" / "derived-eth4-pcp.txt"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --"*) echo "Priority trust state is not supported on your system"; exit 1;; esac\n'
        f'cat "{pcp}"\n'
    )
    script.chmod(0o755)
    result = run_module(roce_qos, {"interface": IF, "tool": "mlnx_qos", "mlnx_qos_path": str(script)}, failed=True)
    assert result["msg"] == (
        f"roce_qos on {IF}: the trust command failed (rc 1): Priority trust state is not supported on your system"
    )
    assert result["rc"] == 1 and result["cmd"][-2:] == ["--trust", "dscp"]


def test_auto_picks_dcb_when_mlnx_qos_is_absent(run_module, tmp_path):
    args = {
        "interface": IF,
        "mlnx_qos_path": str(tmp_path / "no" / "mlnx_qos"),
        "dcb_path": fake_dcb(tmp_path, {**ROCE_DCB, "app": "derived-app-empty.json"}, {"app": "derived-app-roce.json"}),
    }
    result = run_module(roce_qos, args)
    assert result["tool"] == "dcb"
    assert writes(tmp_path) == [f"app replace dev {IF} dscp-prio 26:3 48:6"]
    assert result["before"]["trust"] == "pcp" and result["before"]["apptrust"] is None
    assert result["after"]["trust"] == "dscp"


def test_dcb_pfc_on_wrong_priorities(run_module, tmp_path):
    dcb = fake_dcb(tmp_path, {**ROCE_DCB, "pfc": "derived-pfc-prio67.json"}, {"pfc": "derived-pfc-prio3.json"})
    result = run_module(roce_qos, {"interface": IF, "tool": "dcb", "dcb_path": dcb})
    assert writes(tmp_path) == [f"pfc set dev {IF} prio-pfc all:off 3:on"]
    assert result["link_flap"] is True and result["after"]["pfc_enabled"] == [3]


def test_dcb_ets_that_does_not_take_stops_before_pfc(run_module, tmp_path):
    dcb = fake_dcb(tmp_path, {**ROCE_DCB, "pfc": "derived-pfc-prio67.json"})
    args = {"interface": IF, "tool": "dcb", "dcb_path": dcb, "ets": [33, 33, 34, 0, 0, 0, 0, 0]}
    result = run_module(roce_qos, args, failed=True)
    # The fake keeps TCs 3-7 strict after the write: ETS is named, and the link-flapping PFC write never ran.
    assert writes(tmp_path) == [f"ets set dev {IF} tc-tsa all:ets tc-bw 0:33 1:33 2:34 3:0 4:0 5:0 6:0 7:0"]
    assert result["msg"].startswith(f"roce_qos on {IF}: the ets command ran but the state still differs: ets: want")
    assert result["mismatches"] == ["ets", "pfc"] and result["link_flap"] is False


def test_dcb_unsupported_device_fails_with_the_read_command(run_module, tmp_path):
    dcb = fake_dcb(tmp_path, {})
    result = run_module(roce_qos, {"interface": "lo", "tool": "dcb", "dcb_path": dcb}, failed=True)
    assert result["msg"] == (
        f"roce_qos on lo could not read the state before writing: {dcb} -j pfc show dev lo failed (rc 1): "
        "Attribute read: Operation not supported"
    )
    assert result["stderr"] == "Attribute read: Operation not supported\n"


def test_no_tool_found(run_module, tmp_path):
    args = {"interface": IF, "mlnx_qos_path": str(tmp_path / "mlnx_qos"), "dcb_path": str(tmp_path / "dcb")}
    result = run_module(roce_qos, args, failed=True)
    assert result["msg"].startswith("neither mlnx_qos (")
    assert "install iproute2 5.12 or later, or mlnx-tools, or set mlnx_qos_path / dcb_path" in result["msg"]


def test_explicit_tool_missing(run_module, tmp_path):
    result = run_module(
        roce_qos, {"interface": IF, "tool": "mlnx_qos", "mlnx_qos_path": str(tmp_path / "mlnx_qos")}, failed=True
    )
    assert "install mlnx-tools (MLNX_OFED or DOCA-OFED), set mlnx_qos_path, or use tool=dcb" in result["msg"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"pfc_priority": 9}, "pfc_priority=9 is out of range; use a priority 0..7"),
        ({"dscp": 70}, "dscp=70 is out of range; use a DSCP value 0..63 (26 is AF31)"),
        ({"ets": [60, 60, 0, 0, 0, 0, 0, 0]}, "sums to 120; the shares must sum to 100, or omit ets"),
        ({"interface": "eth0/1"}, "is not a network device name; give the netdev of the RoCE port"),
    ],
)
def test_bad_option_values(run_module, tmp_path, extra, message):
    args = {**mlnx_args(tmp_path, "eth4-os-dscp-pfc3.txt"), **extra}
    result = run_module(roce_qos, args, failed=True)
    assert message in result["msg"]
    assert writes(tmp_path) == []


def test_firmware_dcbx_and_lldpad_warnings(run_module, tmp_path, monkeypatch):
    # Whether AnsibleModule returns warnings in the result depends on what other tests imported
    # before; recording the calls is independent of that.
    seen = []
    monkeypatch.setattr(roce_qos.AnsibleModule, "warn", lambda self, text: seen.append(text))
    report = tmp_path / "report.txt"
    report.write_text(
        "****** WARNING: lldpad service is running and may overwrite your settings ******\n\n"
        + (FIXTURES / "mlnx_qos" / "derived-eth4-pcp.txt").read_text().replace("OS controlled", "Firmware controlled")
    )
    script = tmp_path / "mlnx_qos"
    script.write_text(f'#!/bin/sh\ncat "{report}"\n')
    script.chmod(0o755)
    result = run_module(roce_qos, {"interface": IF, "mlnx_qos_path": str(script)}, check_mode=True)
    assert result["changed"] is True
    warnings = " ".join(seen)
    assert "lldpad is running on this host" in warnings
    assert "DCBX on ens1f0np0 is firmware controlled" in warnings
