# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait for systemd-networkd's own state of each fabric link, over real `networkctl list
--json=short` captures (fixtures/networkctl/README.md says where they come from and which cases
are derived). The poll loop runs on a fake clock that only moves when the loop sleeps, so nothing
here depends on the machine's speed."""

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _fabric_link

FIXTURES = Path(__file__).parent / "fixtures" / "networkctl"
ETH0 = "/etc/systemd/network/60-gpufleet-eth0.network"
ETH1 = "/etc/systemd/network/60-gpufleet-eth1.network"
NETWORKCTL = "/usr/bin/networkctl"


def capture(name):
    return (FIXTURES / name).read_text()


def listings():
    """The ten listings of reconfigure.jsonl, in the order they were taken."""
    return [line + "\n" for line in capture("reconfigure.jsonl").splitlines() if line.strip()]


def derive(name, link, **changes):
    """A capture with keys of one interface set to other values, everything else as captured."""
    data = json.loads(capture(name))
    for item in data["Interfaces"]:
        if item["Name"] == link:
            item.update(changes)
    return json.dumps(data, separators=(",", ":")) + "\n"


def rename(name, link, old, new):
    """A capture with one key of one interface renamed, everything else as captured."""
    data = json.loads(capture(name))
    for item in data["Interfaces"]:
        if item["Name"] == link:
            item[new] = item.pop(old)
    return json.dumps(data, separators=(",", ":")) + "\n"


def sysfs(root, mtu=9000, link="eth1"):
    for attribute, content in {"mtu": str(mtu), "operstate": "up"}.items():
        path = root / "class" / "net" / link / attribute
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    return str(root)


class Networkctl:
    """networkctl as run() sees it: each `list --json=short` prints the next output, then the last
    one again; `on_list` lets a test change sysfs as networkd would while it configures."""

    def __init__(self, outputs, on_list=None):
        self.outputs = list(outputs)
        self.on_list = on_list
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        output = self.outputs[min(len(self.calls), len(self.outputs)) - 1]
        if self.on_list:
            self.on_list(output)
        return output if isinstance(output, tuple) else (0, output, "")


class Clock:
    """time.monotonic and time.sleep for the loop: time passes only in sleep()."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def wait(run, root, network_files, mtus, until=600, clock=None):
    clock = clock or Clock()
    result = _fabric_link.wait_for_links(
        lambda: _fabric_link.read_links(run, NETWORKCTL, root, network_files, mtus),
        until,
        clock,
        clock.sleep,
        1.0,
    )
    return result, clock


def test_the_captures_parse_to_each_links_state_and_file():
    assert _fabric_link.parse_networkctl_list(capture("configured.json")) == {
        "lo": {"state": "unmanaged", "network_file": None},
        "eth0": {"state": "unmanaged", "network_file": None},
        "eth1": {"state": "configured", "network_file": ETH1},
    }
    assert _fabric_link.parse_networkctl_list(capture("configuring.json"))["eth1"] == {
        "state": "configuring",
        "network_file": ETH1,
    }
    states = [_fabric_link.parse_networkctl_list(text)["eth1"]["state"] for text in listings()]
    assert states == ["configuring"] + ["configured"] * 9


def test_systemd_249s_setupstate_key_is_read_too():
    text = rename("configured.json", "eth1", "AdministrativeState", "SetupState")
    assert _fabric_link.parse_networkctl_list(text)["eth1"]["state"] == "configured"


@pytest.mark.parametrize("text", ["", "Failed to connect to bus\n", '{"Links": []}\n', "[]\n"])
def test_anything_but_networkds_list_is_refused(text):
    with pytest.raises(ValueError):
        _fabric_link.parse_networkctl_list(text)


def test_a_link_configured_from_its_file_is_applied():
    view = _fabric_link.parse_networkctl_list(capture("configured.json"))
    assert _fabric_link.networkd_mismatches(view, {"eth1": ETH1}) == ([], False)


def test_configuring_is_not_applied_yet_and_says_so():
    view = _fabric_link.parse_networkctl_list(capture("configuring.json"))
    [found], final = _fabric_link.networkd_mismatches(view, {"eth1": ETH1})
    assert final is False
    assert found["check"] == _fabric_link.NETWORKD
    assert found["found"] == {"state": "configuring", "network_file": ETH1}
    assert found["msg"] == f"eth1: configuring (networkd has not finished applying {ETH1})"


def test_an_unmanaged_link_does_not_count_as_applied():
    view = _fabric_link.parse_networkctl_list(capture("configured.json"))
    [found], final = _fabric_link.networkd_mismatches(view, {"eth0": ETH0})
    assert final is False
    assert found["msg"] == f"eth0: unmanaged (networkd has not matched {ETH0} to it)"


def test_a_link_configured_from_another_file_does_not_count_as_applied():
    view = _fabric_link.parse_networkctl_list(capture("configured.json"))
    expected = "/etc/systemd/network/70-gpufleet-eth1.network"
    [found], final = _fabric_link.networkd_mismatches(view, {"eth1": expected})
    assert final is False
    assert found["msg"] == (f"eth1: configured (from {ETH1}, not {expected}: another file matches the link first)")


def test_a_link_networkd_does_not_list_is_absent():
    view = _fabric_link.parse_networkctl_list(capture("configured.json"))
    [found], _final = _fabric_link.networkd_mismatches(
        view, {"bond0": "/etc/systemd/network/60-gpufleet-bond0.network"}
    )
    assert found["found"] is None
    assert found["msg"] == "bond0: absent (networkd does not list the link)"


def test_failed_is_final():
    view = _fabric_link.parse_networkctl_list(derive("configured.json", "eth1", AdministrativeState="failed"))
    [found], final = _fabric_link.networkd_mismatches(view, {"eth1": ETH1})
    assert final is True
    assert found["msg"] == (
        f"eth1: failed (networkd could not configure it from {ETH1}; journalctl -u systemd-networkd says why)"
    )


def test_the_wait_goes_through_configuring_and_passes_at_configured(tmp_path):
    # As on the host: the MTU is the old one while networkd configures, the new one once it is done.
    def networkd_sets_the_mtu(text):
        configured = _fabric_link.parse_networkctl_list(text)["eth1"]["state"] == "configured"
        sysfs(tmp_path, 9000 if configured else 1500)

    run = Networkctl(listings(), on_list=networkd_sets_the_mtu)
    result, clock = wait(run, str(tmp_path), {"eth1": ETH1}, {"eth1": 9000})
    assert result["done"] is True
    assert result["mismatches"] == []
    assert result["networkd"] == {"eth1": {"state": "configured", "network_file": ETH1}}
    assert run.calls == [[NETWORKCTL, "list", "--json=short"]] * 2
    assert clock.now == 1.0


def test_sysfs_is_not_judged_before_networkd_is_done(tmp_path):
    # MTU 1500 in sysfs while configuring: the mismatch is networkd's state, not the MTU.
    sysfs(tmp_path, 1500)
    result = _fabric_link.read_links(
        Networkctl([capture("configuring.json")]), NETWORKCTL, str(tmp_path), {"eth1": ETH1}, {"eth1": 9000}
    )
    assert result["done"] is False
    assert [item["check"] for item in result["mismatches"]] == [_fabric_link.NETWORKD]


def test_an_unmanaged_link_with_the_right_mtu_still_waits(tmp_path):
    sysfs(tmp_path, 1500, link="eth0")
    run = Networkctl([capture("configured.json")])
    result, clock = wait(run, str(tmp_path), {"eth0": ETH0}, {"eth0": 1500}, until=5)
    assert result["done"] is False
    assert result["mismatches"][0]["msg"].startswith("eth0: unmanaged")
    assert clock.now == 5.0


def test_failed_ends_the_wait_at_once(tmp_path):
    sysfs(tmp_path)
    run = Networkctl([derive("configured.json", "eth1", AdministrativeState="failed")])
    result, clock = wait(run, str(tmp_path), {"eth1": ETH1}, {"eth1": 9000})
    assert result["done"] is True
    assert result["mismatches"][0]["found"]["state"] == "failed"
    assert len(run.calls) == 1
    assert clock.now == 0.0


def test_the_timeout_names_networkds_last_state(tmp_path):
    sysfs(tmp_path, 1500)
    run = Networkctl([capture("configuring.json")])
    result, clock = wait(run, str(tmp_path), {"eth1": ETH1}, {"eth1": 9000}, until=5)
    assert result["done"] is False
    assert [item["msg"] for item in result["mismatches"]] == [
        f"eth1: configuring (networkd has not finished applying {ETH1})"
    ]
    assert len(run.calls) == 6
    assert clock.now == 5.0


def test_configured_with_the_wrong_mtu_says_both(tmp_path):
    sysfs(tmp_path, 1500)
    result, _clock = wait(Networkctl([capture("configured.json")]), str(tmp_path), {"eth1": ETH1}, {"eth1": 9000}, 3)
    [found] = result["mismatches"]
    assert found["check"] == _fabric_link.MTU
    assert found["msg"] == "eth1: configured but MTU 1500, not 9000"


def test_a_failing_networkctl_is_waited_out_and_reported(tmp_path):
    sysfs(tmp_path)
    failure = (1, "", "Failed to connect to bus: Connection refused\n")
    run = Networkctl([failure, capture("configured.json")])
    result, clock = wait(run, str(tmp_path), {"eth1": ETH1}, {"eth1": 9000})
    assert result["mismatches"] == []
    assert clock.now == 1.0

    result, _clock = wait(Networkctl([failure]), str(tmp_path), {"eth1": ETH1}, {"eth1": 9000}, until=2)
    [found] = result["mismatches"]
    assert found["msg"] == ("networkctl list --json=short exited with 1: Failed to connect to bus: Connection refused")
    assert result["command"]["rc"] == 1


def test_without_network_files_networkctl_is_not_run(tmp_path):
    sysfs(tmp_path)
    result = _fabric_link.read_links(None, None, str(tmp_path), {}, {"eth1": 9000})
    assert result == {"done": True, "mismatches": [], "networkd": {}, "command": None}


def test_the_wait_ends_before_the_deadline_leaves_the_pings_their_time():
    # Every peer's first try at its longest: 3 requests a second apart, then 2 s for the reply.
    assert _fabric_link.ping_reserve(["10.10.0.12", "10.10.0.13"], count=3, wait=2) == 8
    assert _fabric_link.wait_seconds(180, deadline=1000.0, now=900.0, reserve=8) == 92.0
    assert _fabric_link.wait_seconds(60, deadline=1000.0, now=900.0, reserve=8) == 60
    assert _fabric_link.wait_seconds(180, deadline=None, now=900.0, reserve=8) == 180
    assert _fabric_link.wait_seconds(180, deadline=1000.0, now=995.0, reserve=8) == 0
