# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the fabric_link_check module: sysfs trees in tmp_path and a fake ping."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.inference.plugins.modules import fabric_link_check

FAKE_PING = """#!/bin/sh
# Answers every peer but 10.10.0.14, as a peer still at MTU 1500 would not.
for last; do :; done
echo "$*" >> {log}
[ "$last" != 10.10.0.14 ]
"""


def run_module(capsys, args, expect_rc=0):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        fabric_link_check.main()
    assert (exc.value.code or 0) == expect_rc
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def sysfs(tmp_path):
    for name, content in {"eth0/mtu": "9000", "eth0/operstate": "up"}.items():
        path = tmp_path / "sys" / "class" / "net" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    return tmp_path / "sys"


@pytest.fixture
def ping(tmp_path):
    path = tmp_path / "ping"
    path.write_text(FAKE_PING.format(log=tmp_path / "ping.log"))
    path.chmod(0o755)
    return path


def test_a_link_that_holds_its_plan_passes(capsys, sysfs, ping):
    args = dict(mtus={"eth0": 9000}, peers=["10.10.0.12"], source="10.10.0.11", mtu=9000, ping_path=str(ping))
    result = run_module(capsys, dict(args, sysfs_root=str(sysfs)))
    assert result["changed"] is False
    assert result["mismatches"] == []
    assert result["links"] == {"eth0": {"mtu": "9000", "operstate": "up"}}
    assert result["pings"][0]["payload"] == 8972
    log = (ping.parent / "ping.log").read_text()
    assert log == "-M do -s 8972 -c 3 -W 2 -I 10.10.0.11 10.10.0.12\n"


def test_the_first_failed_check_is_the_message(capsys, sysfs, ping):
    args = dict(
        sysfs_root=str(sysfs), peers=["10.10.0.12", "10.10.0.14"], source="10.10.0.11", mtu=9000, ping_path=str(ping)
    )
    result = run_module(capsys, dict(args, ping_attempts=1), expect_rc=1)
    assert result["msg"].startswith("a don't-fragment ping at full MTU reaches every fabric peer: 10.10.0.14: no reply")
    assert [item["link"] for item in result["mismatches"]] == ["10.10.0.14"]


def test_a_wrong_mtu_fails_after_the_timeout_without_pinging(capsys, sysfs, ping):
    args = dict(sysfs_root=str(sysfs), mtus={"eth0": 1500}, timeout=0, peers=["10.10.0.12"], mtu=9000)
    result = run_module(capsys, dict(args, ping_path=str(ping)), expect_rc=1)
    assert result["msg"] == "every fabric link has its MTU: eth0 has MTU 9000, not 1500"
    assert result["pings"] == []
    assert not (ping.parent / "ping.log").exists()


def test_peers_need_the_mtu(capsys, sysfs):
    result = run_module(capsys, dict(sysfs_root=str(sysfs), peers=["10.10.0.12"]), expect_rc=1)
    assert "mtu is required with peers" in result["msg"]
