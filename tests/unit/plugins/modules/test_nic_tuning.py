# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the nic_tuning module: a fake ethtool that prints real captures and remembers -G/-L."""

import json
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import nic_tuning

FIXTURES = Path(__file__).parent.parent / "module_utils" / "fixtures" / "ethtool"

# The fake prints a capture for -g/-l with the "Current hardware settings" values it was told to
# change by an earlier -G/-L, so the module's re-read sees the write (unless ignore_writes is set).
FAKE = r"""#!{python}
import json, re, sys
STATE = {state!r}
LABELS = {{
    "-G": {{"rx": "RX", "rx-mini": "RX Mini", "rx-jumbo": "RX Jumbo", "tx": "TX"}},
    "-L": {{"rx": "RX", "tx": "TX", "other": "Other", "combined": "Combined"}},
}}
with open(STATE) as f:
    state = json.load(f)
state["calls"].append(sys.argv[1:])
flag = sys.argv[1]
if flag in ("-g", "-l"):
    spec = state[flag]
    if spec.get("rc"):
        sys.stderr.write(open(spec["stderr"]).read())
        code = spec["rc"]
    else:
        section = None
        for line in open(spec["stdout"]).read().splitlines(True):
            if line.strip() == "Current hardware settings:":
                section = "current"
            label = line.split(":", 1)[0]
            if section and label in spec["current"]:
                line = re.sub(r"(:\s*)\S+", lambda m: m.group(1) + spec["current"][label], line, count=1)
            sys.stdout.write(line)
        code = 0
else:
    code = state.get("write_rc", 0)
    if code:
        sys.stderr.write(open(state["write_stderr"]).read())
    elif not state.get("ignore_writes"):
        read = {{"-G": "-g", "-L": "-l"}}[flag]
        args = sys.argv[3:]
        for key, value in zip(args[::2], args[1::2]):
            state[read]["current"][LABELS[flag][key]] = value
with open(STATE, "w") as f:
    json.dump(state, f)
sys.exit(code)
"""


class FakeEthtool:
    def __init__(self, tmp_path, rings, channels, **extra):
        self.state_file = tmp_path / "state.json"
        state = {"calls": [], "-g": self._spec(rings), "-l": self._spec(channels)}
        state.update(extra)
        self.state_file.write_text(json.dumps(state))
        self.path = tmp_path / "ethtool"
        self.path.write_text(FAKE.format(python=sys.executable, state=str(self.state_file)))
        self.path.chmod(0o755)

    @staticmethod
    def _spec(name):
        if name.endswith(".stderr"):
            return {"rc": 1, "stderr": str(FIXTURES / name)}
        return {"stdout": str(FIXTURES / name), "current": {}}

    @property
    def calls(self):
        return json.loads(self.state_file.read_text())["calls"]

    @property
    def writes(self):
        return [argv for argv in self.calls if argv[0] in ("-G", "-L")]


def ice(tmp_path, **extra):
    return FakeEthtool(tmp_path, "ice_e810_g.txt", "ice_e810_l.txt", **extra)


def args_for(fake, **options):
    return dict(interface="ice0", ethtool_path=str(fake.path), **options)


def test_matching_values_write_nothing(run_module, tmp_path):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, rings={"rx": 4096, "tx": 4096}, channels={"combined": 4}))
    assert result["changed"] is False
    assert result["link_reset"] is False
    assert result["commands"] == []
    assert fake.writes == []
    assert result["rings"]["requested"] == {"rx": 4096, "tx": 4096}
    assert result["rings"]["supported"] is True
    assert result["channels"]["max"] == {"rx": 16, "tx": 16, "other": 1, "combined": 16}


def test_rx_max_writes_one_set_ring_and_verifies_it(run_module, tmp_path):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, rings={"rx": "max", "tx": 4096}))
    assert result["changed"] is True
    assert result["link_reset"] is True
    assert fake.writes == [["-G", "ice0", "rx", "8160"]]
    assert result["commands"] == [[str(fake.path), "-G", "ice0", "rx", "8160"]]
    assert result["rings"]["current"]["rx"] == 8160
    assert result["rings"]["requested"] == {"rx": 8160, "tx": 4096}
    # read both, write, read rings again
    assert [argv[0] for argv in fake.calls] == ["-g", "-l", "-G", "-g"]


def test_combined_channels_write_one_set_channels(run_module, tmp_path):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, channels={"combined": 16, "other": 1}))
    assert result["changed"] is True
    assert fake.writes == [["-L", "ice0", "combined", "16"]]
    assert result["channels"]["current"]["combined"] == 16


def test_write_that_does_not_take_fails_naming_the_field(run_module, tmp_path):
    fake = ice(tmp_path, ignore_writes=True)
    result = run_module(nic_tuning, args_for(fake, rings={"rx": 8000}), failed=True)
    assert result["failed"] is True
    assert "-G ice0 rx 8000 did not take: rings.rx is 4096, expected 8000" in result["msg"]
    assert "round" in result["msg"]
    assert result["link_reset"] is True


def test_failed_write_carries_rc_and_stderr(run_module, tmp_path):
    fake = FakeEthtool(
        tmp_path,
        "veth_g.stderr",
        "veth_l.txt",
        write_rc=1,
        write_stderr=str(FIXTURES / "veth_L_rx3.stderr"),
    )
    result = run_module(nic_tuning, dict(interface="vt0", ethtool_path=str(fake.path), channels={"rx": 2}), failed=True)
    assert result["rc"] == 1
    assert "requested channel count exceeds maximum" in result["stderr"]
    assert result["msg"].startswith(f"{fake.path} -L vt0 rx 2 failed (rc=1): netlink error:")


def test_veth_rings_unsupported_channels_still_handled(run_module, tmp_path):
    fake = FakeEthtool(tmp_path, "veth_g.stderr", "veth_l.txt")
    args = dict(interface="vt0", ethtool_path=str(fake.path), rings={"rx": "max"}, channels={"rx": "max", "tx": 2})
    result = run_module(nic_tuning, args)
    assert result["rings"]["supported"] is False
    assert result["rings"]["reason"] == "netlink error: Operation not supported"
    assert result["rings"]["max"] is None
    assert result["unsupported"] == ["rings: not supported by the NIC (netlink error: Operation not supported)"]
    assert fake.writes == [["-L", "vt0", "rx", "2", "tx", "2"]]
    assert result["channels"]["current"] == {"rx": 2, "tx": 2, "other": None, "combined": None}
    assert result["changed"] is True


def test_unsupported_part_not_requested_is_only_reported(run_module, tmp_path):
    fake = FakeEthtool(tmp_path, "veth_g.stderr", "veth_l.txt")
    result = run_module(nic_tuning, dict(interface="vt0", ethtool_path=str(fake.path)))
    assert result["changed"] is False
    assert result["rings"]["supported"] is False
    assert result["unsupported"] == []


def test_parameters_the_nic_lacks_are_skipped(run_module, tmp_path):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, rings={"rx-jumbo": 4096, "rx": 4096}))
    assert result["changed"] is False
    assert result["unsupported"] == ["rings.rx-jumbo: not supported by the NIC (maximum is n/a)"]
    assert fake.writes == []


def test_value_above_the_maximum_fails_before_any_write(run_module, tmp_path):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, rings={"rx": 9000}, channels={"combined": 8}), failed=True)
    assert result["msg"] == "ice0: rings.rx=9000 is above the NIC's maximum 8160; use at most 8160 or 'max'"
    assert fake.writes == []


def test_check_mode_plans_without_writing(run_module, tmp_path):
    fake = ice(tmp_path)
    args = args_for(fake, rings={"rx": "max", "tx": "max"}, channels={"combined": 8}, _ansible_check_mode=True)
    result = run_module(nic_tuning, args)
    assert result["changed"] is True
    assert result["link_reset"] is True
    assert result["commands"] == [
        [str(fake.path), "-G", "ice0", "rx", "8160", "tx", "8160"],
        [str(fake.path), "-L", "ice0", "combined", "8"],
    ]
    assert fake.writes == []
    assert result["rings"]["current"]["rx"] == 4096


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rings": {"rx": "big"}}, "rings.rx='big' must be an integer of at least 1 or 'max'"),
        ({"rings": {"rx": 0}}, "rings.rx=0 must be an integer of at least 1 or 'max'"),
        ({"channels": {"queues": 4}}, "channels.queues is not a channels parameter; use rx, tx, other, combined"),
    ],
)
def test_bad_option_values_fail_naming_the_option(run_module, tmp_path, options, message):
    fake = ice(tmp_path)
    result = run_module(nic_tuning, args_for(fake, **options), failed=True)
    assert result["msg"] == message
    assert fake.calls == []


def test_missing_interface_fails_with_ethtool_output(run_module, tmp_path):
    fake = FakeEthtool(tmp_path, "nosuch0_g.stderr", "veth_l.txt")
    result = run_module(nic_tuning, dict(interface="nosuch0", ethtool_path=str(fake.path)), failed=True)
    assert result["rc"] == 1
    assert "no device matches name" in result["stderr"]
    assert "check that interface 'nosuch0' exists" in result["msg"]


def test_missing_ethtool_fails(run_module, tmp_path):
    result = run_module(nic_tuning, dict(interface="ice0", ethtool_path=str(tmp_path / "nope")), failed=True)
    assert "ethtool not found" in result["msg"]
