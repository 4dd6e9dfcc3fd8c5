# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric link checks over bonding sysfs trees built in tmp_path.

No real capture of a bond's sysfs files was found to attribute; the trees hold what the kernel
prints (drivers/net/bonding/bond_sysfs.c, bond_sysfs_slave.c): bonding/mode "802.3ad 4",
bonding/slaves "ens1f0np0 ens1f1np1", bonding/ad_aggregator "1", bonding_slave/ad_aggregator_id "1"
or "N/A", each with its newline."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _fabric_link

MEMBERS = ["ens1f0np0", "ens1f1np1"]


def bond_tree(root, mode="802.3ad 4", aggregator="1", ids=("1", "1"), states=("up", "up"), mtu=9000, slaves=None):
    files = {
        "bond0/mtu": str(mtu),
        "bond0/operstate": "up",
        "bond0/bonding/mode": mode,
        "bond0/bonding/slaves": " ".join(MEMBERS) if slaves is None else slaves,
        "bond0/bonding/ad_aggregator": aggregator,
    }
    for member, agg, state in zip(MEMBERS, ids, states):
        files[member + "/mtu"] = str(mtu)
        files[member + "/operstate"] = state
        files[member + "/bonding_slave/ad_aggregator_id"] = agg
    for name, content in files.items():
        path = root / "class" / "net" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content + "\n")
    return str(root)


def check(root, mode="802.3ad", mtu=9000):
    mtus = dict.fromkeys([*MEMBERS, "bond0"], mtu)
    return _fabric_link.link_mismatches(root, mtus, "bond0", MEMBERS, mode)


def test_a_healthy_lacp_bond_has_no_mismatches(tmp_path):
    assert check(bond_tree(tmp_path)) == []


def test_a_link_at_the_wrong_mtu_is_named(tmp_path):
    root = bond_tree(tmp_path, mtu=1500)
    found = check(root)
    assert [item["link"] for item in found] == ["bond0", *MEMBERS]
    assert {item["check"] for item in found} == {_fabric_link.MTU}
    assert found[0]["msg"] == "bond0 has MTU 1500, not 9000"


def test_an_absent_link_is_a_mismatch(tmp_path):
    [found] = _fabric_link.link_mismatches(str(tmp_path), {"ens9": 9000})
    assert found["found"] is None
    assert found["msg"] == "ens9 has MTU None, not 9000"


def test_members_in_two_aggregators_are_not_one_port_channel(tmp_path):
    [found] = check(bond_tree(tmp_path, ids=("1", "2")))
    assert found["check"] == _fabric_link.AGGREGATOR
    assert found["found"] == {"ens1f0np0": "1", "ens1f1np1": "2"}
    assert "ens1f0np0=1, ens1f1np1=2" in found["msg"]


def test_a_member_without_an_aggregator_yet_is_a_mismatch(tmp_path):
    [found] = check(bond_tree(tmp_path, ids=("1", "N/A")))
    assert found["check"] == _fabric_link.AGGREGATOR


def test_the_wrong_mode_is_named_and_skips_the_aggregator(tmp_path):
    [found] = check(bond_tree(tmp_path, mode="balance-rr 0", aggregator=""))
    assert found["check"] == _fabric_link.MODE
    assert found["found"] == "balance-rr"


def test_an_active_backup_bond_has_no_aggregator_check(tmp_path):
    root = bond_tree(tmp_path, mode="active-backup 1", aggregator="", ids=("N/A", "N/A"))
    assert check(root, mode="active-backup") == []


def test_a_missing_member_and_a_down_member(tmp_path):
    root = bond_tree(tmp_path, slaves="ens1f0np0", states=("up", "down"))
    found = check(root)
    assert [item["check"] for item in found] == [_fabric_link.MEMBERS, _fabric_link.UP]
    assert found[0]["found"] == ["ens1f0np0"]
    assert found[1]["msg"] == "ens1f1np1 is down, not up"


@pytest.mark.parametrize(("peer", "payload"), [("10.10.0.12", 8972), ("fd00::12", 8952)])
def test_the_ping_fills_the_mtu_without_fragmenting(peer, payload):
    argv = _fabric_link.ping_argv("/usr/bin/ping", "10.10.0.11", peer, 9000)
    assert argv == ["/usr/bin/ping", "-M", "do", "-s", str(payload), "-c", "3", "-W", "2", "-I", "10.10.0.11", peer]


def test_a_peer_that_never_answers_is_a_mismatch_after_every_try():
    calls = []

    def run(argv):
        calls.append(argv[-1])
        if argv[-1] == "10.10.0.14":
            return 1, "", "ping: local error: message too long, mtu=1500\n"
        return 0, "3 packets transmitted, 3 received, 0% packet loss\n", ""

    slept = []
    pings, found = _fabric_link.ping_peers(
        run, "ping", "10.10.0.11", ["10.10.0.12", "10.10.0.14"], 9000, attempts=3, sleep=slept.append
    )
    assert calls == ["10.10.0.12", "10.10.0.14", "10.10.0.14", "10.10.0.14"]
    assert slept == [2, 2]
    assert [ping["ok"] for ping in pings] == [True, False]
    [mismatch] = found
    assert mismatch["check"] == _fabric_link.PING
    assert mismatch["link"] == "10.10.0.14"
    assert "message too long" in mismatch["found"]
    assert (
        mismatch["msg"]
        == "10.10.0.14: no reply to a 8972-byte don't-fragment ping from 10.10.0.11 (MTU 9000) after 3 tries"
    )
