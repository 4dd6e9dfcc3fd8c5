# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fabric_link_check waiting for systemd-networkd's own state: a stand-in networkctl prints real
captures (module_utils/fixtures/networkctl/README.md) one after the other. The timeouts are either
0 (one read) or far longer than any run: each read moves the sequence on, so a slow machine only
makes the test slower, never makes it fail."""

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.inference.plugins.modules import fabric_link_check

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "networkctl"
ETH1 = "/etc/systemd/network/60-gpufleet-eth1.network"

# Prints outputs/1, outputs/2, ... on each run, then the last one again; logs its arguments.
FAKE_NETWORKCTL = """#!/bin/sh
echo "$*" >> {dir}/calls
n=$(($(wc -l < {dir}/calls)))
[ -f {dir}/outputs/$n ] || n=$(($(ls {dir}/outputs | wc -l)))
cat {dir}/outputs/$n
"""
FAKE_PING = """#!/bin/sh
echo "$*" >> {log}
"""


def run_module(capsys, args, expect_rc=0):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        fabric_link_check.main()
    assert (exc.value.code or 0) == expect_rc
    return json.loads(capsys.readouterr().out)


def networkctl(tmp_path, *outputs):
    (tmp_path / "outputs").mkdir()
    for number, text in enumerate(outputs, start=1):
        (tmp_path / "outputs" / str(number)).write_text(text)
    path = tmp_path / "networkctl"
    path.write_text(FAKE_NETWORKCTL.format(dir=tmp_path))
    path.chmod(0o755)
    return path


def calls(tmp_path):
    return (tmp_path / "calls").read_text().splitlines()


@pytest.fixture
def args(tmp_path):
    for name, content in {"eth1/mtu": "9000", "eth1/operstate": "up"}.items():
        path = tmp_path / "sys" / "class" / "net" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    ping = tmp_path / "ping"
    ping.write_text(FAKE_PING.format(log=tmp_path / "ping.log"))
    ping.chmod(0o755)
    return dict(
        network_files={"eth1": ETH1},
        mtus={"eth1": 9000},
        sysfs_root=str(tmp_path / "sys"),
        poll_interval=0.1,
        peers=["172.30.90.31"],
        source="172.30.90.30",
        mtu=9000,
        ping_path=str(ping),
    )


def test_it_waits_through_configuring_and_passes_at_configured(capsys, tmp_path, args):
    path = networkctl(tmp_path, (FIXTURES / "configuring.json").read_text(), (FIXTURES / "configured.json").read_text())
    result = run_module(capsys, dict(args, networkctl_path=str(path), timeout=600))
    assert result["mismatches"] == []
    assert result["networkd"] == {"eth1": {"state": "configured", "network_file": ETH1}}
    assert calls(tmp_path) == ["list --json=short"] * 2
    assert result["pings"][0]["ok"] is True


def test_failed_fails_at_once_with_networkds_word(capsys, tmp_path, args):
    configured = json.loads((FIXTURES / "configured.json").read_text())
    # Derived from the capture: eth1's state set to failed, nothing else changed.
    [eth1] = [item for item in configured["Interfaces"] if item["Name"] == "eth1"]
    eth1["AdministrativeState"] = "failed"
    path = networkctl(tmp_path, json.dumps(configured))
    result = run_module(capsys, dict(args, networkctl_path=str(path), timeout=600), expect_rc=1)
    assert result["msg"] == (
        "systemd-networkd configured every fabric link from its file: eth1: failed (networkd could not "
        f"configure it from {ETH1}; journalctl -u systemd-networkd says why)"
    )
    assert calls(tmp_path) == ["list --json=short"]
    assert result["pings"] == []


def test_the_timeout_names_networkds_last_state(capsys, tmp_path, args):
    path = networkctl(tmp_path, (FIXTURES / "configuring.json").read_text())
    result = run_module(capsys, dict(args, networkctl_path=str(path), timeout=0), expect_rc=1)
    assert result["msg"] == (
        "systemd-networkd configured every fabric link from its file: "
        f"eth1: configuring (networkd has not finished applying {ETH1})"
    )
    assert result["mismatches"][0]["found"] == {"state": "configuring", "network_file": ETH1}
    assert not (tmp_path / "ping.log").exists()


def test_a_deadline_already_past_reads_once(capsys, tmp_path, args):
    path = networkctl(tmp_path, (FIXTURES / "configuring.json").read_text(), (FIXTURES / "configured.json").read_text())
    result = run_module(capsys, dict(args, networkctl_path=str(path), timeout=600, deadline=0.0), expect_rc=1)
    assert calls(tmp_path) == ["list --json=short"]
    assert result["mismatches"][0]["msg"].startswith("eth1: configuring")


def test_a_failing_networkctl_is_reported_with_its_output(capsys, tmp_path, args):
    path = tmp_path / "networkctl"
    path.write_text("#!/bin/sh\necho 'Failed to connect to bus: Connection refused' >&2\nexit 1\n")
    path.chmod(0o755)
    result = run_module(capsys, dict(args, networkctl_path=str(path), timeout=0), expect_rc=1)
    assert result["rc"] == 1
    assert "Connection refused" in result["stderr"]
    assert "networkctl list --json=short exited with 1" in result["msg"]


def test_networkctl_must_be_found(capsys, args):
    result = run_module(capsys, dict(args, networkctl_path="no-such-networkctl"), expect_rc=1)
    assert (
        result["msg"]
        == "networkctl not found as 'no-such-networkctl'; install systemd's networkctl or set networkctl_path"
    )
