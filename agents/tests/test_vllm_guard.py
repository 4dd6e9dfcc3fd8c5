# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for gpufleet_agents.vllm_guard (gpufleet-vllm-guard): its decision table, a simulated
replica, and the daemon."""

import copy
import functools
import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import free_port, program, wait_for
from gpufleet_agents import vllm_guard as guard

decide = guard.decide

DEADLINE = 600.0
GRACE = 30.0


def me(rank, invocation, active="active", started=0.0, ready=None):
    return {
        "rank": rank,
        "invocation": invocation,
        "active": active,
        "started": started,
        "ready": ready if rank == 0 else None,
        "start_deadline": DEADLINE,
        "peer_down_grace": GRACE,
    }


def peer(rank, invocation, active="active", joined=None, ready=None):
    return {
        "replica": "r0",
        "rank": rank,
        "unit": "gpufleet-vllm-r0.service",
        "invocation": invocation if active not in ("inactive", "failed") else "",
        "active": active,
        "since": 0,
        "ready": ready,
        "joined": joined,
    }


def run(steps, memory=None):
    """Feed (me, peers, now) steps through decide(); return the actions and reasons, and the last memory."""
    out = []
    for own, peers, now in steps:
        action, memory, reason = decide(own, peers, memory, now)
        out.append((action, reason))
    return out, memory


# Follower -------------------------------------------------------------------------------


def test_follower_joins_the_first_active_leader_run():
    action, memory, reason = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    assert (action, reason) == ("none", "joined leader l1")
    assert memory["leader"] == "l1"
    action, memory, reason = decide(me(1, "f1"), {0: peer(0, "l1")}, memory, 12)
    assert (action, reason) == ("none", "following leader l1")


def test_follower_restarts_when_the_leader_run_changes():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, memory, reason = decide(me(1, "f1"), {0: peer(0, "l2")}, memory, 12)
    assert (action, reason) == ("restart", "leader restarted: l1 -> l2")
    assert memory["restarted"] is True


@pytest.mark.parametrize(
    ("leader", "reason"),
    [
        (None, "leader unknown"),
        (peer(0, "", active="inactive"), "leader inactive"),
        (peer(0, "", active="failed"), "leader failed"),
        (peer(0, "l1", active="deactivating"), "leader deactivating"),
        (peer(0, "l2", active="activating"), "leader activating"),
    ],
)
def test_follower_waits_while_the_leader_is_down_or_unknown(leader, reason):
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, after, got = decide(me(1, "f1"), {0: leader}, memory, 12)
    assert (action, got) == ("none", reason)
    assert after["leader"] == "l1", "a down leader does not change which run the follower belongs to"


def test_follower_waits_for_a_leader_that_returns_with_the_same_run():
    steps = [
        (me(1, "f1"), {0: peer(0, "l1")}, 10),
        (me(1, "f1"), {0: None}, 12),
        (me(1, "f1"), {0: peer(0, "l1")}, 14),
    ]
    out, _unused = run(steps)
    assert [action for action, _unused in out] == ["none", "none", "none"]


def test_follower_with_no_leader_seen_yet_joins_the_run_it_first_sees():
    steps = [
        (me(1, "f1"), {0: peer(0, "", active="inactive")}, 10),
        (me(1, "f1"), {0: peer(0, "l2")}, 12),
    ]
    out, memory = run(steps)
    assert out == [("none", "leader inactive"), ("none", "joined leader l2")]
    assert memory["leader"] == "l2"


def test_follower_does_nothing_while_its_own_unit_is_not_active():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, memory, reason = decide(me(1, "f1", active="deactivating"), {0: peer(0, "l2")}, memory, 12)
    assert (action, reason) == ("none", "unit deactivating")


# Memory and cooldown -------------------------------------------------------------------


def test_memory_resets_when_the_own_run_changes():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, memory, reason = decide(me(1, "f2"), {0: peer(0, "l2")}, memory, 12)
    assert (action, reason) == ("none", "joined leader l2")
    assert memory["invocation"] == "f2"


def test_memory_resets_when_the_unit_stops():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    _unused, memory, reason = decide(me(1, "", active="inactive"), {0: peer(0, "l1")}, memory, 12)
    assert reason == "unit inactive"
    assert memory["leader"] is None


def test_after_a_restart_nothing_more_until_the_own_run_changes():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, memory, _unused = decide(me(1, "f1"), {0: peer(0, "l2")}, memory, 12)
    assert action == "restart"
    # A slow stop: the unit is still active in the same run, and the leader changed again.
    for now, leader in ((14, "l2"), (16, "l3"), (18, "l4")):
        action, memory, reason = decide(me(1, "f1"), {0: peer(0, leader)}, memory, now)
        assert (action, reason) == ("none", "restart issued, waiting for a new run")
    action, memory, reason = decide(me(1, "f2"), {0: peer(0, "l4")}, memory, 20)
    assert (action, reason) == ("none", "joined leader l4")


def test_leader_cooldown_holds_past_the_deadline():
    _unused, memory, _unused2 = decide(me(0, "l1", started=0, ready=False), {1: None}, None, DEADLINE + 1)
    assert memory["restarted"]
    for now in (DEADLINE + 3, DEADLINE * 3):
        action, memory, _unused = decide(me(0, "l1", started=0, ready=False), {1: None}, memory, now)
        assert action == "none"


def test_unknown_own_state_changes_nothing():
    _unused, memory, _unused2 = decide(me(1, "f1"), {0: peer(0, "l1")}, None, 10)
    action, after, reason = decide(None, {0: peer(0, "l2")}, memory, 12)
    assert (action, reason, after) == ("none", "own unit state unknown", memory)


def test_decide_does_not_modify_its_inputs_and_memory_is_json():
    own, peers = me(0, "l1", ready=True), {1: peer(1, "f1", joined="l1")}
    _unused, memory, _unused2 = decide(own, peers, None, 10)
    frozen = copy.deepcopy((own, peers, memory))
    _unused, after, _unused2 = decide(own, {1: peer(1, "f2", joined="l1")}, memory, 12)
    assert (own, peers, memory) == frozen
    # The daemon keeps memory as it comes back; --once prints it; JSON keys are strings.
    action, _unused, reason = decide(own, {1: peer(1, "f2", joined="l1")}, json.loads(json.dumps(memory)), 12)
    assert (action, reason) == ("restart", "rank 1 restarted: f1 -> f2")
    assert json.loads(json.dumps(after))["followers"] == {"1": "f1"}


# Leader --------------------------------------------------------------------------------


def test_leader_records_followers_that_joined_it_and_watches_them_once_ready():
    steps = [
        (me(0, "l1", ready=False), {1: peer(1, "f1", joined="l1")}, 10),
        (me(0, "l1", ready=True), {1: peer(1, "f1", joined="l1")}, 12),
        (me(0, "l1", ready=True), {1: peer(1, "f1", joined="l1")}, 14),
        (me(0, "l1", ready=True), {1: peer(1, "f2", joined="l1")}, 16),
    ]
    out, _unused = run(steps)
    assert out == [
        ("none", "waiting for ready"),
        ("none", "ready"),
        ("none", "ready"),
        ("restart", "rank 1 restarted: f1 -> f2"),
    ]


def test_leader_ignores_follower_restarts_before_ready():
    steps = [
        (me(0, "l2", ready=False), {1: peer(1, "f1", joined="l1")}, 10),
        (me(0, "l2", ready=False), {1: peer(1, "f1", active="deactivating", joined="l1")}, 12),
        (me(0, "l2", ready=False), {1: None}, 14),
        (me(0, "l2", ready=False), {1: peer(1, "f2", joined="l2")}, 16),
        (me(0, "l2", ready=False), {1: peer(1, "f3", joined="l2")}, 18),
        (me(0, "l2", ready=True), {1: peer(1, "f3", joined="l2")}, 20),
    ]
    out, memory = run(steps)
    assert [action for action, _unused in out] == ["none"] * 6
    assert memory["followers"] == {1: "f3"}


def test_leader_never_records_a_follower_run_that_joined_another_leader_run():
    """A follower still attached to the previous leader run is about to restart itself: not one of ours."""
    steps = [
        (me(0, "l2", ready=True), {1: peer(1, "f1", joined="l1")}, 10),
        (me(0, "l2", ready=True), {1: peer(1, "f1", joined="l1")}, 200),
        (me(0, "l2", ready=True), {1: peer(1, "f2", joined="l2")}, 202),
        (me(0, "l2", ready=True), {1: peer(1, "f2", joined="l2")}, 204),
    ]
    out, memory = run(steps)
    assert out == [
        ("none", "ready, waiting for rank 1 to join"),
        ("none", "ready, waiting for rank 1 to join"),
        ("none", "ready"),
        ("none", "ready"),
    ]
    assert memory["followers"] == {1: "f2"}


def test_leader_compares_the_first_ready_poll_with_what_it_saw_before():
    """A follower that died just as the replica became ready is caught, not recorded as its new run."""
    steps = [
        (me(0, "l1", ready=False), {1: peer(1, "f1", joined="l1")}, 10),
        (me(0, "l1", ready=True), {1: peer(1, "f2", joined="l1")}, 12),
    ]
    out, _unused = run(steps)
    assert out[-1] == ("restart", "rank 1 restarted: f1 -> f2")


def test_leader_restarts_when_a_follower_is_down_past_the_grace():
    peers_up = {1: peer(1, "f1", joined="l1"), 2: peer(2, "g1", joined="l1")}
    steps = [
        (me(0, "l1", ready=True), peers_up, 10),
        (me(0, "l1", ready=True), {**peers_up, 2: None}, 12),
        (me(0, "l1", ready=True), {**peers_up, 2: peer(2, "", active="inactive")}, 12 + GRACE),
        (me(0, "l1", ready=True), {**peers_up, 2: None}, 12 + GRACE + 2),
    ]
    out, _unused = run(steps)
    assert out == [
        ("none", "ready"),
        ("none", "ready, rank 2 down"),
        ("none", "ready, rank 2 down"),
        ("restart", "rank 2 down for 32 s"),
    ]


def test_leader_forgives_a_follower_back_with_the_same_run_within_the_grace():
    """The follower's guard restarted (or a network blip): its vLLM run is the same one."""
    up = {1: peer(1, "f1", joined="l1")}
    steps = [(me(0, "l1", ready=True), up, 10)]
    steps += [(me(0, "l1", ready=True), {1: None}, 12 + n) for n in range(0, int(GRACE), 2)]
    steps += [(me(0, "l1", ready=True), up, 12 + GRACE)]
    steps += [(me(0, "l1", ready=True), {1: None}, 14 + GRACE + n) for n in range(0, int(GRACE), 2)]
    steps += [(me(0, "l1", ready=True), up, 14 + 2 * GRACE)]
    out, memory = run(steps)
    assert {action for action, _unused in out} == {"none"}
    assert out[-1] == ("none", "ready")
    assert memory["down_since"] == {}


def test_leader_restarts_when_not_ready_by_the_deadline():
    steps = [
        (me(0, "l1", started=100, ready=False), {1: None}, 100 + DEADLINE),
        (me(0, "l1", started=100, ready=False), {1: None}, 100 + DEADLINE + 2),
        (me(0, "l1", started=100, ready=False), {1: None}, 100 + DEADLINE + 4),
    ]
    out, _unused = run(steps)
    assert out == [
        ("none", "waiting for ready"),
        ("restart", "replica not ready 602 s after start"),
        ("none", "restart issued, waiting for a new run"),
    ]


def test_leader_deadline_stops_counting_once_ready():
    steps = [
        (me(0, "l1", started=0, ready=True), {1: peer(1, "f1", joined="l1")}, 10),
        (me(0, "l1", started=0, ready=False), {1: peer(1, "f1", joined="l1")}, DEADLINE * 2),
    ]
    out, _unused = run(steps)
    assert [action for action, _unused in out] == ["none", "none"]


def test_leader_unreachable_or_down_followers_before_ready_change_nothing():
    steps = [
        (me(0, "l1", started=0, ready=False), {1: None, 2: peer(2, "", "inactive")}, now) for now in range(0, 600, 2)
    ]
    out, memory = run(steps)
    assert {action for action, _unused in out} == {"none"}
    assert memory["followers"] == {}
    assert memory["down_since"] == {}


def test_leader_guard_restarted_on_a_ready_replica_records_followers_as_they_are():
    steps = [
        (me(0, "l1", started=0, ready=True), {1: None}, 5000),
        (me(0, "l1", started=0, ready=True), {1: peer(1, "f1", joined="l1")}, 5002),
        (me(0, "l1", started=0, ready=True), {1: peer(1, "f1", joined="l1")}, 5004),
    ]
    out, memory = run(steps)
    assert out == [("none", "ready, waiting for rank 1 to join"), ("none", "ready"), ("none", "ready")]
    assert memory["followers"] == {1: "f1"}


# A simulated replica -------------------------------------------------------------------


class Replica:
    """N vLLM units as systemd and vLLM behave, each with a guard polling every `interval` seconds.

    vLLM, as measured: a headless run attaches to the leader run that is up when it starts, or to the
    next one; it never exits when that leader run dies. A leader run is ready once every follower's
    run is attached to it and `load` seconds have passed; it does not notice a follower dying later.
    systemd: a killed or crashed run is `deactivating` for `stop` seconds, then Restart=always starts a
    new run after `restart_sec`.
    """

    def __init__(self, nodes=2, load=60, stop=1, restart_sec=3, interval=2, phases=None, never_ready=False, order=1):
        self.t = 0
        self.load, self.stop, self.restart_sec, self.interval = load, stop, restart_sec, interval
        self.never_ready = never_ready
        self.order = list(range(nodes))[::order]  # which guard polls first when several poll in one second
        self.phases = phases or [rank % interval for rank in range(nodes)]
        self.runs = {rank: 0 for rank in range(nodes)}
        self.units = {rank: {"inv": "", "state": "inactive", "start": None, "until": None} for rank in range(nodes)}
        self.attached = {rank: None for rank in range(1, nodes)}
        self.ready_since = None
        self.memory = {rank: None for rank in range(nodes)}
        self.published = {rank: None for rank in range(nodes)}
        self.guard_down = set()
        self.restarts = []
        self.kills = []

    # systemd and vLLM
    def start(self, rank):
        self.runs[rank] += 1
        inv = f"{'lf'[rank > 0]}{rank}{self.runs[rank]}"
        self.units[rank] = {"inv": inv, "state": "active", "start": self.t, "until": None}
        if rank == 0:
            self.ready_since = None
            for follower, leader in self.attached.items():
                if leader is None:
                    self.attached[follower] = inv
        else:
            self.attached[rank] = self.units[0]["inv"] if self.units[0]["state"] == "active" else None

    def kill(self, rank):
        unit = self.units[rank]
        if unit["state"] == "active":
            unit["state"], unit["until"] = "deactivating", self.t + self.stop
            if rank == 0:
                self.ready_since = None

    def stop_all(self):
        for rank, unit in self.units.items():
            unit.update(state="inactive", inv="", until=None)
            if rank == 0:
                self.ready_since = None

    def tick_systemd(self):
        for rank, unit in self.units.items():
            if unit["state"] == "deactivating" and self.t >= unit["until"]:
                unit["state"], unit["until"] = "activating", self.t + self.restart_sec
            elif unit["state"] == "activating" and self.t >= unit["until"]:
                self.start(rank)
        leader = self.units[0]
        if leader["state"] == "active" and self.ready_since is None and not self.never_ready:
            if all(self.attached[r] == leader["inv"] and self.units[r]["state"] == "active" for r in self.attached):
                latest = max(self.units[r]["start"] for r in self.units)
                if self.t - latest >= self.load:
                    self.ready_since = self.t

    # guards
    def observe(self, rank):
        unit = self.units[rank]
        active = unit["state"]
        return {
            "rank": rank,
            "invocation": unit["inv"] if active != "inactive" else "",
            "active": active,
            "started": unit["start"] if active != "inactive" else None,
            "ready": (self.ready_since is not None and active == "active") if rank == 0 else None,
            "start_deadline": DEADLINE,
            "peer_down_grace": GRACE,
        }

    def poll(self, rank):
        own = self.observe(rank)
        peers = {r: None if r in self.guard_down else self.fetch(r) for r in self.units if r != rank}
        action, self.memory[rank], reason = decide(own, peers, self.memory[rank], self.t)
        if action == "restart":
            self.restarts.append((self.t, rank, reason))
            self.kill(rank)
        # Published only after deciding, as the daemon does.
        self.published[rank] = {
            "replica": "r0",
            "rank": rank,
            "invocation": own["invocation"],
            "active": own["active"],
            "ready": own["ready"],
            "joined": self.memory[rank]["leader"] if rank else None,
        }

    def fetch(self, rank):
        """A follower's /state is its guard's last decision; the leader's reads its unit at each request."""
        if rank != 0:
            return self.published[rank]
        own = self.observe(0)
        last = self.published[0] or {}
        return {
            "replica": "r0",
            "rank": 0,
            "invocation": own["invocation"],
            "active": own["active"],
            "ready": last.get("ready"),
            "joined": None,
        }

    def step(self):
        self.tick_systemd()
        for rank in self.order:
            if rank not in self.guard_down and (self.t + self.phases[rank]) % self.interval == 0:
                self.poll(rank)
        self.t += 1

    def run_until(self, end):
        while self.t < end:
            self.step()

    def converged(self):
        leader = self.units[0]
        return (
            self.ready_since is not None
            and all(self.attached[r] == leader["inv"] for r in self.attached)
            and all(unit["state"] == "active" for unit in self.units.values())
        )

    def guard_restarts(self, since=0):
        return [(rank, reason) for t, rank, reason in self.restarts if t >= since]

    def bring_up(self):
        for rank in self.units:
            self.start(rank)
        self.run_until(self.t + self.load + 20)
        assert self.converged() and self.restarts == []
        return self.t


PHASES = [None, [0, 0, 0], [1, 0, 1], [0, 1, 1]]


@pytest.mark.parametrize("order", [1, -1])
@pytest.mark.parametrize("phases", PHASES)
@pytest.mark.parametrize("nodes", [2, 3])
def test_sim_cold_start_needs_no_guard_restart(nodes, phases, order):
    replica = Replica(nodes=nodes, phases=phases and phases[:nodes], order=order)
    replica.bring_up()
    replica.run_until(replica.t + 1000)
    assert replica.converged()
    assert replica.restarts == []


@pytest.mark.parametrize("order", [1, -1])
@pytest.mark.parametrize("phases", PHASES)
@pytest.mark.parametrize("nodes", [2, 3])
@pytest.mark.parametrize("load", [0, 60])
def test_sim_a_leader_killed_restarts_each_follower_once_and_no_ping_pong(nodes, phases, load, order):
    replica = Replica(nodes=nodes, load=load, phases=phases and phases[:nodes], order=order)
    t0 = replica.bring_up()
    replica.kill(0)  # the leader crashes; Restart=always brings back a new run
    replica.run_until(t0 + 2000)
    assert replica.converged()
    assert sorted(replica.guard_restarts()) == [(rank, "leader restarted: l01 -> l02") for rank in range(1, nodes)]
    assert replica.runs == {0: 2, **{rank: 2 for rank in range(1, nodes)}}


@pytest.mark.parametrize("order", [1, -1])
@pytest.mark.parametrize("phases", PHASES)
@pytest.mark.parametrize("nodes", [2, 3])
def test_sim_b_a_follower_killed_restarts_the_leader_once_then_each_follower_once(nodes, phases, order):
    replica = Replica(nodes=nodes, phases=phases and phases[:nodes], order=order)
    t0 = replica.bring_up()
    replica.kill(1)  # a headless node crashes; the leader would not notice by itself
    replica.run_until(t0 + 2000)
    assert replica.converged()
    restarts = replica.guard_restarts()
    assert restarts[0] == (0, "rank 1 restarted: f11 -> f12")
    assert sorted(restarts[1:]) == [(rank, "leader restarted: l01 -> l02") for rank in range(1, nodes)]
    # rank 1: the crash and its guard's restart to join the new leader run.
    assert replica.runs == {0: 2, 1: 3, **{rank: 2 for rank in range(2, nodes)}}


@pytest.mark.parametrize("order", [1, -1])
@pytest.mark.parametrize("phases", PHASES)
@pytest.mark.parametrize("gap", [1, 5, 40])
def test_sim_c_a_planned_restart_of_all_units_needs_no_guard_restart(phases, gap, order):
    replica = Replica(nodes=3, phases=phases, order=order)
    t0 = replica.bring_up()
    replica.stop_all()
    replica.run_until(t0 + gap)
    for rank in (2, 1, 0):  # followers first: they wait for the leader
        replica.start(rank)
    replica.run_until(t0 + 2000)
    assert replica.converged()
    assert replica.restarts == []


def test_sim_d_a_leader_never_ready_restarts_once_per_run_after_the_deadline():
    replica = Replica(nodes=2, stop=45, never_ready=True)  # a wedged leader takes 45 s to die
    for rank in replica.units:
        replica.start(rank)
    replica.run_until(int(DEADLINE * 3.5))
    leader = [(t, reason) for t, rank, reason in replica.restarts if rank == 0]
    assert [reason for _unused, reason in leader] == ["replica not ready 602 s after start"] * 3
    starts = [0] + [t + 45 + 3 for t, _unused in leader]
    assert [t for t, _unused in leader] == [start + int(DEADLINE) + 2 for start in starts[:3]]
    # Each leader run that went away took the follower run with it, once.
    assert [rank for _unused, rank, _unused2 in replica.restarts].count(1) == 3


def test_sim_e_unreachable_follower_guard_before_ready_changes_nothing():
    replica = Replica(nodes=3, load=300)
    replica.guard_down.add(2)
    for rank in replica.units:
        replica.start(rank)
    replica.run_until(250)
    replica.guard_down.discard(2)
    replica.run_until(1000)
    assert replica.converged()
    assert replica.restarts == []


def test_sim_follower_guard_away_past_the_grace_after_ready_restarts_the_replica_once():
    replica = Replica(nodes=2)
    t0 = replica.bring_up()
    replica.guard_down.add(1)
    replica.run_until(t0 + int(GRACE) + 10)
    replica.guard_down.discard(1)
    replica.run_until(t0 + 2000)
    assert replica.converged()
    assert [reason for _unused, reason in replica.guard_restarts()] == [
        "rank 1 down for 32 s",
        "leader restarted: l01 -> l02",
    ]


def test_sim_a_brief_guard_outage_changes_nothing():
    replica = Replica(nodes=3)
    t0 = replica.bring_up()
    replica.guard_down.update({0, 2})
    replica.run_until(t0 + 10)
    replica.guard_down.clear()
    replica.run_until(t0 + 1000)
    assert replica.converged()
    assert replica.restarts == []


# systemctl show ---------------------------------------------------------------------------

# The properties as systemd 252 prints them (`systemctl show UNIT --property=... [--timestamp=unix]`).
SHOW_ACTIVE_UNIX = """\
InvocationID=5d2b1e7a0c9f4d7e8a1b2c3d4e5f6a7b
ActiveState=active
SubState=running
ActiveEnterTimestamp=@1717171717
ActiveEnterTimestampMonotonic=123456789
"""
SHOW_ACTIVE_DEFAULT = SHOW_ACTIVE_UNIX.replace("@1717171717", "Fri 2024-05-31 16:08:37 UTC")
SHOW_INACTIVE = """\
InvocationID=5d2b1e7a0c9f4d7e8a1b2c3d4e5f6a7b
ActiveState=inactive
SubState=dead
ActiveEnterTimestamp=@1717171717
ActiveEnterTimestampMonotonic=123456789
"""
SHOW_NEVER_STARTED = (
    "InvocationID=\nActiveState=inactive\nSubState=dead\nActiveEnterTimestamp=\nActiveEnterTimestampMonotonic=0\n"
)


def test_unit_state_with_unix_timestamps():
    state, started = guard.unit_state(guard.parse_show(SHOW_ACTIVE_UNIX), realtime_now=2e9, monotonic_now=500.0)
    assert state == {
        "invocation": "5d2b1e7a0c9f4d7e8a1b2c3d4e5f6a7b",
        "active": "active",
        "sub": "running",
        "since": 1717171717000000,
    }
    assert started == pytest.approx(123.456789)


def test_unit_state_without_unix_timestamps_derives_since_from_the_monotonic_clock():
    state, _unused = guard.unit_state(guard.parse_show(SHOW_ACTIVE_DEFAULT), realtime_now=1000.0, monotonic_now=200.0)
    assert state["since"] == (1000 - 200) * 1000000 + 123456789


@pytest.mark.parametrize("text", [SHOW_INACTIVE, SHOW_NEVER_STARTED, ""])
def test_unit_state_of_a_stopped_unit_has_no_invocation(text):
    state, started = guard.unit_state(guard.parse_show(text), realtime_now=1000.0, monotonic_now=200.0)
    assert (state["invocation"], state["since"], started) == ("", 0, None)


def test_parse_show_keeps_equals_signs_in_values():
    assert guard.parse_show("A=b=c\nnoise\nB=\n") == {"A": "b=c", "B": ""}


# The daemon --------------------------------------------------------------------------------

FAKE_SYSTEMCTL = """\
#!{python}
import json, pathlib, sys
here = pathlib.Path(__file__).parent
args = sys.argv[1:]
with open(here / "calls.log", "a") as log:
    log.write(" ".join(args) + "\\n")
unit = json.loads((here / "unit.json").read_text())
if args[0] == "show":
    if "--timestamp=unix" in args and unit.get("old_systemd"):
        sys.exit("systemctl: unrecognized option '--timestamp=unix'")
    for key, value in unit["properties"].items():
        print("%s=%s" % (key, value))
elif args[0] == "kill":
    sys.exit(unit.get("kill_rc", 0))
"""


class FakeSystemctl:
    def __init__(self, directory):
        self.dir = directory
        self.path = directory / "systemctl"
        self.path.write_text(FAKE_SYSTEMCTL.format(python=sys.executable))
        self.path.chmod(0o755)
        self.set("abc", "active")

    def set(self, invocation, active, old_systemd=False, kill_rc=0):
        properties = {
            "InvocationID": invocation,
            "ActiveState": active,
            "SubState": "running" if active == "active" else "dead",
            "ActiveEnterTimestamp": "@1717171717",
            "ActiveEnterTimestampMonotonic": int(time.monotonic() * 1000000) - 5000000,
        }
        unit = {"properties": properties, "old_systemd": old_systemd, "kill_rc": kill_rc}
        # By a rename: a guard's systemctl reading a half-written file would fail for the test's sake.
        partial = self.dir / "unit.json.partial"
        partial.write_text(json.dumps(unit))
        partial.replace(self.dir / "unit.json")

    def calls(self):
        log = self.dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


class FakePeer:
    """Another node's guard: answers /state with `state`, or `raw` bytes when set."""

    def __init__(self, state=None):
        self.state = state
        self.raw = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if fake.raw is not None:
                    self.wfile.write(fake.raw)
                    return
                body = json.dumps(fake.state).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def systemctl(tmp_path):
    return FakeSystemctl(tmp_path)


@pytest.fixture
def leader_peer(monkeypatch):
    """The leader's guard; one in this process is given the time a busy machine needs to answer."""
    fake = FakePeer(peer(0, "lead1"))
    # The guard asks its peers with a 1 s timeout (PEER_TIMEOUT): here the peer is a thread of the
    # test's own process, which shares the CPU with the guard's poll.
    monkeypatch.setattr(guard, "fetch_peer", functools.partial(guard.fetch_peer, timeout=30))
    yield fake
    fake.close()


def write_config(tmp_path, rank=1, peers=(), port=0, **extra):
    config = {
        "replica": "r0",
        "unit": "gpufleet-vllm-r0.service",
        "rank": rank,
        "listen": {"address": "127.0.0.1", "port": port},
        "peers": [{"rank": r, "address": "127.0.0.1", "port": p} for r, p in peers],
        "health_url": None,
        "interval": 0.2,
        "start_deadline": 600,
        "peer_down_grace": 30,
        **extra,
    }
    path = tmp_path / "guard.json"
    path.write_text(json.dumps(config))
    return path


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_state_is_served_over_http(tmp_path, systemctl, leader_peer):
    config = guard.load_config(write_config(tmp_path, peers=[(0, leader_peer.port)]))
    node = guard.Guard(config, str(systemctl.path), stream=sys.stderr)
    node.poll()
    server = guard.serve(node, "127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert get(base + "/state") == (
            200,
            {
                "replica": "r0",
                "rank": 1,
                "unit": "gpufleet-vllm-r0.service",
                "invocation": "abc",
                "active": "active",
                "since": 1717171717000000,
                "ready": None,
                "joined": "lead1",
                "version": guard.__version__,
            },
        )
        assert get(base + "/")[0] == 404
        assert get(base + "/state/x")[0] == 404
        request = urllib.request.Request(base + "/state", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=5)
        assert error.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
        node.close()
    assert systemctl.calls() == [
        f"show gpufleet-vllm-r0.service --property={guard.PROPERTIES} --timestamp=unix",
    ]


def test_old_systemd_without_timestamp_option(tmp_path, systemctl, leader_peer):
    systemctl.set("abc", "active", old_systemd=True)
    config = guard.load_config(write_config(tmp_path, peers=[(0, leader_peer.port)]))
    node = guard.Guard(config, str(systemctl.path), stream=sys.stderr)
    node.poll()
    node.poll()
    node.close()
    state = node.state()
    assert state["invocation"] == "abc"
    assert 0 < state["since"] <= time.time() * 1000000
    shows = [call for call in systemctl.calls() if call.startswith("show")]
    assert [call.endswith("--timestamp=unix") for call in shows] == [True, False, False]


def test_once_prints_the_decision_and_acts_on_nothing(tmp_path, systemctl, leader_peer):
    config = write_config(tmp_path, peers=[(0, leader_peer.port)])
    proc = subprocess.run(
        [*program("vllm_guard"), "--config", str(config), "--systemctl", str(systemctl.path), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    decision = json.loads(proc.stdout)
    assert decision["action"] == "none"
    assert decision["reason"] == "joined leader lead1"
    assert decision["state"]["joined"] == "lead1"
    assert decision["peers"]["0"]["invocation"] == "lead1"
    assert decision["memory"]["leader"] == "lead1"
    assert "gpufleet-vllm-guard[replica r0 rank 1]: " in proc.stderr
    assert not [call for call in systemctl.calls() if call.startswith("kill")]


def test_once_for_a_leader_past_its_deadline_says_restart(tmp_path, systemctl):
    config = write_config(
        tmp_path,
        rank=0,
        peers=[(1, free_port())],
        health_url=f"http://127.0.0.1:{free_port()}/health",
        start_deadline=1,
    )
    proc = subprocess.run(
        [*program("vllm_guard"), "--config", str(config), "--systemctl", str(systemctl.path), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    decision = json.loads(proc.stdout)
    # The stand-in unit started 5 s before the call; a loaded machine adds a second or more.
    assert decision["action"] == "restart"
    waited = re.fullmatch(r"replica not ready (\d+) s after start", decision["reason"])
    assert waited and int(waited.group(1)) >= 5, decision["reason"]
    assert decision["state"]["ready"] is False
    assert decision["peers"] == {"1": None}
    assert not [call for call in systemctl.calls() if call.startswith("kill")]


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]",
        b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{"active": false}',
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\xff\xfe\xfd\xfc",
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
        b"",
    ],
)
def test_a_peer_answering_garbage_is_unknown(raw):
    fake = FakePeer()
    fake.raw = raw
    try:
        state, why = guard.fetch_peer({"rank": 0, "address": "127.0.0.1", "port": fake.port}, "r0")
    finally:
        fake.close()
    assert state is None
    assert why.startswith(f"http://127.0.0.1:{fake.port}/state: ")


def test_a_peer_of_another_replica_or_rank_is_unknown(leader_peer):
    state, why = guard.fetch_peer({"rank": 0, "address": "127.0.0.1", "port": leader_peer.port}, "r1")
    assert state is None
    assert "expected replica 'r1' rank 0" in why
    state, why = guard.fetch_peer({"rank": 2, "address": "127.0.0.1", "port": leader_peer.port}, "r0")
    assert state is None


def test_an_unreachable_peer_is_unknown():
    state, why = guard.fetch_peer({"rank": 0, "address": "127.0.0.1", "port": free_port()}, "r0")
    assert state is None
    assert "refused" in why.lower()


def test_daemon_restarts_once_when_the_leader_restarts_and_stops_cleanly_on_sigterm(tmp_path, systemctl, leader_peer):
    port = free_port()
    config = write_config(tmp_path, peers=[(0, leader_peer.port)], port=port)
    proc = subprocess.Popen(
        [*program("vllm_guard"), "--config", str(config), "--systemctl", str(systemctl.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: get_or_none(f"http://127.0.0.1:{port}/state").get("joined") == "lead1")
        leader_peer.state = peer(0, "lead2")
        assert wait_for(lambda: any(call.startswith("kill") for call in systemctl.calls()))
        # A slow stop: the unit stays in its old run for three more polls, which must not kill again.
        assert wait_for(lambda: polls_since_kill(systemctl) >= 3)
        systemctl.set("def", "active")
        assert wait_for(lambda: get_or_none(f"http://127.0.0.1:{port}/state").get("joined") == "lead2")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert stderr == ""
    kills = [call for call in systemctl.calls() if call.startswith("kill")]
    assert kills == ["kill --signal=SIGKILL gpufleet-vllm-r0.service"]
    prefix = "gpufleet-vllm-guard[replica r0 rank 1]: "
    lines = stdout.splitlines()
    assert all(line.startswith(prefix) for line in lines)
    assert prefix + "restarting gpufleet-vllm-r0.service: leader restarted: lead1 -> lead2" in lines
    assert lines.count(prefix + "joined leader lead1") == 1, "transitions are logged, not every poll"
    assert lines[-1] == prefix + f"stopping on signal {signal.SIGTERM.value}"


def polls_since_kill(systemctl):
    calls = systemctl.calls()
    kill = next(index for index, call in enumerate(calls) if call.startswith("kill"))
    return len([call for call in calls[kill:] if call.startswith("show")])


def get_or_none(url):
    try:
        return get(url)[1]
    except (OSError, ValueError):
        return {}


def test_a_poll_under_way_when_the_stop_comes_acts_on_nothing(tmp_path, systemctl, leader_peer):
    """SIGTERM lands while a poll reads its peers: that poll must not kill, log or publish."""
    config = guard.load_config(write_config(tmp_path, peers=[(0, leader_peer.port)]))
    stream = io.StringIO()
    node = guard.Guard(config, str(systemctl.path), stream=stream)
    node.poll()
    before = (stream.getvalue(), node.published(), node.memory)
    leader_peer.state = peer(0, "lead2")
    observe = node.observe

    def observe_then_stop():
        seen = observe()
        node.stopping.set()  # what the signal handler does
        return seen

    node.observe = observe_then_stop
    decision = node.poll()
    assert (decision["action"], decision["reason"]) == ("none", "stopping")
    assert decision["peers"][0]["invocation"] == "lead2", "the poll did see the leader's new run"
    assert (stream.getvalue(), node.published(), node.memory) == before
    assert not [call for call in systemctl.calls() if call.startswith("kill")]
    # The same poll without the stop restarts the unit.
    node.stopping.clear()
    node.observe = observe
    assert node.poll()["action"] == "restart"
    node.close()
    assert [call for call in systemctl.calls() if call.startswith("kill")] == [
        "kill --signal=SIGKILL gpufleet-vllm-r0.service"
    ]


def test_a_failed_kill_is_retried_not_forgotten(tmp_path, systemctl, leader_peer):
    config = guard.load_config(write_config(tmp_path, peers=[(0, leader_peer.port)]))
    node = guard.Guard(config, str(systemctl.path), stream=sys.stderr)
    node.poll()
    leader_peer.state = peer(0, "lead2")
    systemctl.set("abc", "active", kill_rc=1)
    assert node.poll()["action"] == "restart"
    assert node.poll()["action"] == "restart"
    systemctl.set("abc", "active")
    assert node.poll()["action"] == "restart"
    assert node.poll()["reason"] == "restart issued, waiting for a new run"
    node.close()
    assert len([call for call in systemctl.calls() if call.startswith("kill")]) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rank": "1"}, "'rank' must be an integer >= 0, found '1'"),
        (
            {"rank": 0, "peers": [{"rank": 1, "address": "10.0.0.2", "port": 1}]},
            "rank 0 needs 'health_url' (vLLM's /health URL), found None",
        ),
        ({"peers": []}, "rank 1 needs the leader (rank 0) in 'peers', found ranks []"),
        ({"peers": [{"rank": 0, "address": "10.0.0.1"}]}, "'peers' must be a list of"),
        ({"peers": [{"rank": 1, "address": "10.0.0.1", "port": 1}]}, "'peers' must list every other rank once"),
        ({"interval": 0}, "'interval' must be a number of seconds > 0, found 0"),
        ({"listen": {"address": "127.0.0.1"}}, "'listen' must be"),
        ({"unit": ""}, "'unit' must be a non-empty string"),
    ],
)
def test_invalid_config_fails_with_one_line(tmp_path, change, message):
    path = write_config(tmp_path, peers=[(0, 9000)])
    config = json.loads(path.read_text())
    config.update(change)
    path.write_text(json.dumps(config))
    proc = subprocess.run(
        [*program("vllm_guard"), "--config", str(path), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"gpufleet-vllm-guard: {path}: {message}")
    assert proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_defaults_fill_in_the_optional_settings(tmp_path):
    path = tmp_path / "guard.json"
    path.write_text(
        json.dumps(
            {
                "replica": "r0",
                "unit": "gpufleet-vllm-r0.service",
                "rank": 1,
                "listen": {"address": "10.0.0.2", "port": 8471},
                "peers": [{"rank": 0, "address": "10.0.0.1", "port": 8471}],
            }
        )
    )
    config = guard.load_config(path)
    assert (config["interval"], config["health_url"]) == (2.0, None)
