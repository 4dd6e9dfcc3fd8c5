# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for gpufleet_agents.frontdoor (gpufleet-frontdoor): its decision table, HAProxy parsers, state files,
and the CLI, controller and planned restart against a fake HAProxy, fake agents, vLLM and ssh."""

import copy
import io
import json
import os
import shutil
import signal
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import SRC, free_port, program, wait_for
from gpufleet_agents import frontdoor as fd

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frontdoor"


decide = fd.decide
POLICY = {
    "interval": 1.0,
    "agent_timeout": 1.0,
    "unreachable_fall": 3,
    "undrain_rise_s": 15,
    "max_auto_drained": 1,
    "remediate_after_s": 0,
}


def ha(admin="ready", up=True, check="L7OK"):
    return {"admin": admin, "up": up, "serving": up and admin == "ready", "check_status": check if up else "L7TOUT"}


def nodes(*states):
    """nodes(True, False, None): healthy, failing (the engine check), unreachable."""
    return {
        f"n{i}": {"healthy": state, "failing": ["engine"] if state is False else [], "error": None}
        for i, state in enumerate(states)
    }


def replica(admin="ready", up=True, health=(True,), known=True):
    return {"haproxy": ha(admin, up) if known else None, "nodes": nodes(*health)}


def auto(reason="node n0 failing: engine"):
    return {"owner": "auto", "reason": reason, "at": 1.0}


def run(steps, records=None, policy=None, memory=None):
    """Feed (view, now) steps through decide(); return each poll's actions and the last memory."""
    out = []
    for view, now in steps:
        actions, memory = decide(view, memory, records or {}, policy or POLICY, now)
        out.append([(action["replica"], action["action"]) for action in actions])
    return out, memory


# Drain and the blast radius ----------------------------------------------------------------


def test_a_failing_replica_is_drained_while_another_serves():
    view = {"a": replica(health=(True, False)), "b": replica()}
    actions, memory = decide(view, None, {}, POLICY, 10)
    assert actions == [{"replica": "a", "action": "drain", "reason": "node n1 failing: engine"}]
    assert memory["blocked"] == {}


def test_the_last_serving_replica_is_never_drained():
    view = {"a": replica(health=(False,)), "b": replica(up=False)}
    actions, memory = decide(view, None, {}, POLICY, 10)
    assert actions == []
    assert memory["blocked"]["a"]["reason"] == "last_serving"
    assert "node n0 failing: engine" in memory["blocked"]["a"]["detail"]


@pytest.mark.parametrize(
    "other",
    [replica(admin="drain"), replica(admin="maint", up=False), replica(known=False), replica(up=False)],
    ids=["drained", "maint", "unknown", "down"],
)
def test_a_replica_that_does_not_serve_does_not_count_as_another(other):
    actions, memory = decide({"a": replica(health=(False,)), "b": other}, None, {}, POLICY, 10)
    assert actions == []
    assert memory["blocked"]["a"]["reason"] == "last_serving"


def test_a_single_replica_is_never_drained():
    actions, memory = decide({"a": replica(health=(False, None))}, None, {}, POLICY, 10)
    assert actions == []
    assert memory["blocked"]["a"]["reason"] == "last_serving"


def test_at_most_max_auto_drained_replicas_carry_auto_drains():
    view = {"a": replica(admin="drain", health=(False,)), "b": replica(health=(False,)), "c": replica()}
    actions, memory = decide(view, None, {"a": auto()}, POLICY, 10)
    assert actions == []
    assert memory["blocked"] == {
        "b": {
            "reason": "max_auto_drained",
            "detail": "node n0 failing: engine; 1 of max_auto_drained 1 already auto-drained (a)",
        }
    }
    actions, memory = decide(view, None, {"a": auto()}, {**POLICY, "max_auto_drained": 2}, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("b", "drain")]


def test_two_failing_in_one_poll_drain_only_up_to_the_cap_in_config_order():
    view = {"a": replica(health=(False,)), "b": replica(health=(False,)), "c": replica()}
    actions, memory = decide(view, None, {}, POLICY, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drain")]
    assert memory["blocked"]["b"]["reason"] == "max_auto_drained"


def test_a_drain_this_poll_takes_the_drained_replica_out_of_the_serving_count():
    view = {"a": replica(health=(False,)), "b": replica(health=(False,))}
    actions, memory = decide(view, None, {}, {**POLICY, "max_auto_drained": 2}, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drain")]
    assert memory["blocked"]["b"]["reason"] == "last_serving"


def test_max_auto_drained_zero_drains_nothing():
    view = {"a": replica(health=(False,)), "b": replica()}
    actions, memory = decide(view, None, {}, {**POLICY, "max_auto_drained": 0}, 10)
    assert actions == []
    assert memory["blocked"]["a"]["reason"] == "max_auto_drained"


def test_a_failing_replica_already_down_in_haproxy_is_still_drained():
    actions, _memory = decide({"a": replica(up=False, health=(False,)), "b": replica()}, None, {}, POLICY, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drain")]


# Ownership ---------------------------------------------------------------------------------


@pytest.mark.parametrize("owner", ["operator", "restart"])
@pytest.mark.parametrize("admin", ["ready", "drain", "maint"])
@pytest.mark.parametrize("health", [(True,), (False,), (None,)])
def test_operator_and_restart_records_are_never_touched(owner, admin, health):
    view = {"a": replica(admin=admin, health=health), "b": replica()}
    records = {"a": {"owner": owner, "reason": "x", "at": 1.0}}
    out, memory = run([(view, now) for now in (0, 10, 20, 100)], records=records)
    assert out == [[], [], [], []]
    assert memory["blocked"] == {}


@pytest.mark.parametrize("admin", ["drain", "maint"])
@pytest.mark.parametrize("health", [(True,), (False,)])
def test_a_drain_in_haproxy_without_a_record_is_the_operators(admin, health):
    view = {"a": replica(admin=admin, health=health), "b": replica()}
    out, memory = run([(view, now) for now in (0, 10, 20, 100)])
    assert out == [[], [], [], []]
    assert memory["blocked"] == {}


def test_an_auto_drain_is_undrained_after_undrain_rise_s_healthy():
    view = {"a": replica(admin="drain"), "b": replica()}
    out, _memory = run([(view, 100), (view, 110), (view, 114.9), (view, 115)], records={"a": auto()})
    assert out == [[], [], [], [("a", "undrain")]]


def test_the_rise_restarts_when_a_node_is_not_healthy_in_between():
    healthy = {"a": replica(admin="drain", health=(True, True)), "b": replica()}
    failing = {"a": replica(admin="drain", health=(True, False)), "b": replica()}
    unreachable = {"a": replica(admin="drain", health=(True, None)), "b": replica()}
    steps = [(healthy, 0), (failing, 10), (healthy, 12), (unreachable, 20), (healthy, 22), (healthy, 36), (healthy, 37)]
    out, _memory = run(steps, records={"a": auto()})
    assert out == [[], [], [], [], [], [], [("a", "undrain")]]


def test_an_auto_record_on_a_replica_someone_undrained_is_dropped():
    view = {"a": replica(admin="ready", health=(False,)), "b": replica()}
    actions, memory = decide(view, None, {"a": auto()}, POLICY, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drop_record")]
    assert memory["blocked"] == {}, "a replica undrained by hand is not drained again in the same poll"


def test_a_dropped_record_frees_its_slot_under_the_cap():
    view = {"a": replica(admin="ready"), "b": replica(health=(False,)), "c": replica()}
    actions, _memory = decide(view, None, {"a": auto()}, POLICY, 10)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drop_record"), ("b", "drain")]


def test_an_auto_drained_replica_someone_put_in_maint_is_left_alone():
    view = {"a": replica(admin="maint", up=False), "b": replica()}
    out, _memory = run([(view, 0), (view, 100)], records={"a": auto()})
    assert out == [[], []]


def test_an_auto_drained_replica_still_failing_stays_drained():
    view = {"a": replica(admin="drain", health=(False,)), "b": replica()}
    out, memory = run([(view, 0), (view, 100)], records={"a": auto()}, policy={**POLICY, "remediate_after_s": 0})
    assert out == [[], []]
    assert memory["blocked"] == {}


# Remediation: a restart for the controller's own drained replicas that a restart can cure -----

REMEDIATE = {**POLICY, "remediate_after_s": 60, "remediate_backoff_s": 900}


def test_a_wedged_engine_is_restarted_once_it_has_failed_for_remediate_after_s():
    # up=False: HAProxy's deep check times out (L7TOUT) while the API process is up.
    view = {"a": replica(admin="drain", up=False, health=(False, True)), "b": replica()}
    out, memory = run([(view, 0), (view, 59), (view, 60), (view, 61)], records={"a": auto()}, policy=REMEDIATE)
    assert out == [[], [], [("a", "remediate")], []], "once at 60 s, then not again within the backoff"
    out, _memory = run([(view, 959), (view, 960)], records={"a": auto()}, policy=REMEDIATE, memory=memory)
    assert out == [[], [("a", "remediate")]], "again after remediate_backoff_s"


def test_failing_time_restarts_when_the_replica_recovers_in_between():
    bad = {"a": replica(admin="drain", up=False, health=(False,)), "b": replica()}
    good = {"a": replica(admin="drain"), "b": replica()}
    out, _memory = run([(bad, 0), (good, 30), (bad, 31), (bad, 90), (bad, 91)], records={"a": auto()}, policy=REMEDIATE)
    assert out == [[], [], [], [], [("a", "remediate")]]


@pytest.mark.parametrize(
    "failing, healthy, why",
    [
        (["ping"], False, "a dead link is not cured by a restart"),
        (["gpu"], False, "a lost GPU needs a human"),
        (["engine", "ping"], False, "not while the link is down"),
        ([], None, "an unreachable node"),
    ],
)
def test_no_restart_for_what_a_restart_does_not_cure(failing, healthy, why):
    view = {"a": replica(admin="drain", up=False), "b": replica()}
    view["a"]["nodes"]["n0"] = {"healthy": healthy, "failing": failing, "error": None}
    out, _memory = run([(view, 0), (view, 100)], records={"a": auto()}, policy=REMEDIATE)
    assert ("a", "remediate") not in out[-1], why


@pytest.mark.parametrize(
    "record", [None, {"owner": "operator", "reason": "x", "at": 1.0}, {"owner": "restart", "reason": "x", "at": 1.0}]
)
def test_no_restart_of_a_replica_the_controller_did_not_drain(record):
    view = {"a": replica(admin="drain", up=False, health=(False,)), "b": replica()}
    out, _memory = run([(view, 0), (view, 100)], records={"a": record} if record else {}, policy=REMEDIATE)
    assert out == [[], []]


@pytest.mark.parametrize("check", ["L4CON", "L4TOUT", None])
def test_no_restart_of_a_replica_that_is_starting(check):
    # vLLM opens its port only once the engine is up: a refused connection is a start in progress.
    view = {"a": replica(admin="drain", health=(False,)), "b": replica()}
    view["a"]["haproxy"]["check_status"] = check
    out, memory = run([(view, 0), (view, 100)], records={"a": auto()}, policy=REMEDIATE)
    assert out == [[], []]
    wedged = {"a": replica(admin="drain", up=False, health=(False,)), "b": replica()}
    out, _memory = run(
        [(wedged, 101), (wedged, 160), (wedged, 161)], records={"a": auto()}, policy=REMEDIATE, memory=memory
    )
    assert out == [[], [("a", "remediate")], []], "the 60 s count from the last poll that was starting"


def test_remediation_off_at_zero():
    view = {"a": replica(admin="drain", up=False, health=(False,)), "b": replica()}
    out, _memory = run([(view, 0), (view, 10**6)], records={"a": auto()}, policy={**REMEDIATE, "remediate_after_s": 0})
    assert out == [[], []]


# Unreachable agents ------------------------------------------------------------------------


def test_an_unreachable_node_fails_after_unreachable_fall_polls_in_a_row():
    view = {"a": replica(health=(True, None)), "b": replica()}
    out, _memory = run([(view, 0), (view, 1), (view, 2)])
    assert out == [[], [], [("a", "drain")]]


def test_an_answer_resets_the_unreachable_count():
    down = {"a": replica(health=(None,)), "b": replica()}
    back = {"a": replica(health=(True,)), "b": replica()}
    out, memory = run([(down, 0), (down, 1), (back, 2), (down, 3), (down, 4)])
    assert out == [[], [], [], [], []]
    assert memory["unreachable"]["a"] == {"n0": 2}
    actions, _memory = decide(down, memory, {}, POLICY, 5)
    assert actions[0]["reason"] == "node n0 unreachable for 3 polls"


def test_an_unhealthy_answer_fails_at_once():
    # The agent's own checks carry the hysteresis (fall/rise per check): no second count here.
    actions, _memory = decide({"a": replica(health=(False,)), "b": replica()}, None, {}, POLICY, 0)
    assert [(a["replica"], a["action"]) for a in actions] == [("a", "drain")]


# Unknown HAProxy state, memory -------------------------------------------------------------


def test_nothing_is_done_to_a_replica_haproxy_did_not_report():
    view = {"a": replica(known=False, health=(False,)), "b": replica()}
    actions, memory = decide(view, None, {"a": auto()}, POLICY, 10)
    assert actions == []
    assert memory["blocked"] == {}
    view = {"a": replica(known=False), "b": replica()}
    out, _memory = run([(view, 0), (view, 100)], records={"a": auto()})
    assert out == [[], []]


def test_decide_does_not_modify_its_inputs_and_memory_is_json():
    view = {"a": replica(admin="drain", health=(True, None)), "b": replica(health=(False,))}
    records = {"a": auto()}
    frozen = copy.deepcopy((view, records, POLICY))
    _actions, memory = decide(view, None, records, POLICY, 10)
    before = copy.deepcopy(memory)
    decide(view, memory, records, POLICY, 11)
    assert (view, records, POLICY) == frozen
    assert memory == before
    assert json.loads(json.dumps(memory)) == memory


def test_memory_forgets_replicas_and_nodes_gone_from_the_config():
    _actions, memory = decide({"a": replica(health=(None, None)), "b": replica()}, None, {}, POLICY, 0)
    _actions, memory = decide({"a": replica(health=(None,))}, memory, {}, POLICY, 1)
    assert memory["unreachable"] == {"a": {"n0": 2}}
    assert set(memory["healthy_since"]) == set()


# HAProxy outputs ---------------------------------------------------------------------------


def fixture(name):
    return (FIXTURES / name).read_text()


def test_parse_show_stat_reads_a_26_capture():
    rows = fd.parse_show_stat(fixture("show_stat.csv"))
    assert [(row["pxname"], row["svname"]) for row in rows] == [
        ("inference_in", "FRONTEND"),
        ("inference", "lab"),
        ("inference", "lab2"),
        ("inference", "lab3"),
        ("inference", "lab4"),
        ("inference", "lab5"),
        ("inference", "BACKEND"),
        ("other", "web1"),
        ("other", "BACKEND"),
    ]
    lab3 = rows[3]
    assert (lab3["status"], lab3["check_status"], lab3["check_code"], lab3["scur"]) == ("DOWN 1/2", "L7OK", "200", "0")
    assert rows[1]["h1_open_streams"] == "", "the stats modules' columns after '-' are read by name too"
    assert "-" not in rows[0], "the end-of-static-fields marker is not a column"


def test_parse_servers_state_reads_format_version_1():
    rows = fd.parse_servers_state(fixture("show_servers_state.txt"))
    assert [(r["be_name"], r["srv_name"], r["srv_op_state"], r["srv_admin_state"]) for r in rows] == [
        ("inference", "lab", 2, 0),
        ("inference", "lab2", 2, 8),
        ("inference", "lab3", 0, 0),
        ("inference", "lab4", 0, 1),
        ("inference", "lab5", 0, 0),
        ("other", "web1", 2, 0),
    ]
    assert (rows[3]["srv_check_state"], rows[0]["srv_port"], rows[0]["srv_fqdn"]) == ("14", "18001", "-")


def test_server_views_combine_both_outputs_for_one_backend():
    views = fd.server_views(fixture("show_stat.csv"), fixture("show_servers_state.txt"), "inference")
    summary = {
        name: (v["admin"], v["up"], v["serving"], v["status"], v["check_status"], v["scur"])
        for name, v in views.items()
    }
    assert summary == {
        "lab": ("ready", True, True, "UP 2/3", "L7STS", 2),
        "lab2": ("drain", True, False, "DRAIN", "L7OK", 0),
        "lab3": ("ready", False, False, "DOWN 1/2", "L7OK", 0),
        "lab4": ("maint", False, False, "MAINT", None, 0),
        "lab5": ("ready", False, False, "DOWN", "L4CON", 0),
    }
    assert set(fd.server_views(fixture("show_stat.csv"), fixture("show_servers_state.txt"), "other")) == {"web1"}


def test_a_check_in_progress_reports_its_last_result():
    # management.txt 9.1 field 36: "If a check is currently running, the last known status will be
    # reported, prefixed with "* "". Not in the capture: derived from it.
    text = fixture("show_stat.csv").replace(",L7STS,503,", ",* L7STS,503,", 1)
    assert fd.server_views(text, fixture("show_servers_state.txt"), "inference")["lab"]["check_status"] == "L7STS"


@pytest.mark.parametrize(
    ("bits", "state"),
    [
        (0x00, "ready"),
        (0x01, "maint"),  # FMAINT: set server state maint
        (0x02, "maint"),  # IMAINT: inherited from a tracked server
        (0x04, "maint"),  # CMAINT: `disabled` in the configuration
        (0x08, "drain"),  # FDRAIN: set server state drain
        (0x10, "drain"),  # IDRAIN: inherited
        (0x20, "maint"),  # RMAINT: address resolution failed
        (0x40, "ready"),  # HMAINT: FQDN set from the CLI, not a maintenance
        (0x09, "maint"),
        (0x48, "drain"),
    ],
)
def test_admin_state_bits(bits, state):
    assert fd.admin_state(bits) == state


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a '# pxname,svname,...' header"),
        ("Permission denied\n\n", "expected a '# pxname,svname,...' header"),
        ("# svname,pxname\nx,y\n", "header starts with ['svname', 'pxname']"),
    ],
)
def test_parse_show_stat_refuses_what_is_not_csv_stats(text, message):
    with pytest.raises(fd.HAProxyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fd.parse_show_stat(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Can't find backend.\n\n", "expected format version 1"),
        ("2\n# be_id be_name\n", "expected format version 1"),
        ("1\n", "no '# be_id be_name ...' header"),
        ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state\n3 inference 1 lab\n", "short line"),
        ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state\n3 b 1 s a x 0\n", "not a number"),
    ],
)
def test_parse_servers_state_refuses_what_is_not_a_state_dump(text, message):
    with pytest.raises(fd.HAProxyError, match=message):
        fd.parse_servers_state(text)


ANSWERS = json.loads(fixture("cli_answers.json"))


@pytest.fixture
def replay(tmp_path):
    """A unix socket that answers every connection with the text set on it, as HAProxy 2.6.12 did."""
    short = tempfile.mkdtemp(prefix="fd", dir="/tmp")
    path = os.path.join(short, "admin.sock")
    state = {"answer": "", "asked": []}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            state["asked"].append(self.rfile.readline().decode().strip())
            self.wfile.write(state["answer"].encode())

    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield fd.HAProxy(path, "inference"), state
    server.shutdown()
    server.server_close()
    shutil.rmtree(short, ignore_errors=True)


def test_set_state_succeeds_on_haproxys_empty_answer(replay):
    haproxy, state = replay
    state["answer"] = ANSWERS["set server inference/lab2 state drain"]
    haproxy.set_state("lab2", "drain")
    assert state["asked"] == ["set server inference/lab2 state drain"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("set server inference/nope state drain", "No such server."),
        ("set server nope/lab state drain", "No such backend."),
        ("set server inference/lab state bogus", "expects 'ready', 'drain' and 'maint'"),
    ],
)
def test_set_state_fails_on_haproxys_error_answers(replay, command, message):
    haproxy, state = replay
    state["answer"] = ANSWERS[command]
    with pytest.raises(fd.HAProxyError, match=message):
        haproxy.set_state("lab", "drain")


@pytest.mark.parametrize("answer", [ANSWERS["show servers state nope"], ANSWERS["show stats"]])
def test_servers_fails_on_haproxys_error_answers(replay, answer):
    haproxy, state = replay
    state["answer"] = answer
    with pytest.raises(fd.HAProxyError):
        haproxy.servers()


def test_an_absent_socket_is_an_haproxy_error(tmp_path):
    with pytest.raises(fd.HAProxyError, match="No such file"):
        fd.HAProxy(str(tmp_path / "none.sock"), "inference").servers()


# Agents, ssh, order ------------------------------------------------------------------------


def test_parse_health_of_a_healthy_and_an_unhealthy_agent():
    body = {"node": "n0", "healthy": True, "checks": {"gpu": {"ok": True, "state": "disabled"}}}
    assert fd.parse_health(200, json.dumps(body).encode()) == {"healthy": True, "failing": [], "error": None}
    body = {
        "healthy": False,
        "checks": {
            "journal": {"ok": False, "state": "failing"},
            "engine": {"ok": False, "state": "failing"},
            "ping": {"ok": True, "state": "ok"},
        },
    }
    assert fd.parse_health(503, json.dumps(body).encode())["failing"] == ["engine", "journal"]


@pytest.mark.parametrize(
    ("status", "body"), [(500, b'{"healthy": true}'), (200, b"not json"), (200, b"[]"), (200, b'{"healthy": "yes"}')]
)
def test_parse_health_refuses_other_answers(status, body):
    with pytest.raises(ValueError):
        fd.parse_health(status, body)


def test_an_unreachable_agent_is_unknown():
    result = fd.fetch_health(f"http://127.0.0.1:{free_port()}/health", 0.5)
    assert result["healthy"] is None
    assert result["error"]


def test_ssh_argv_is_the_forced_command_of_the_restart_key():
    restart = dict(fd.DEFAULT_RESTART)
    node = {"name": "lab-head", "rank": 0, "ssh_host": "172.30.89.11", "unit": "gpufleet-vllm-lab.service"}
    assert fd.ssh_argv(restart, node, "stop") == [
        "/usr/bin/ssh",
        "-i",
        "/var/lib/gpufleet/frontdoor/restart_ed25519",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=/etc/gpufleet/frontdoor/known_hosts",
        "-o",
        "ConnectTimeout=10",
        "root@172.30.89.11",
        "stop",
        "gpufleet-vllm-lab.service",
    ]


def test_restart_order_all_is_config_order_oldest_success_first():
    replicas = [{"name": name} for name in ("a", "b", "c", "d")]
    restarts = {"a": {"last_success": 300}, "b": {"last_success": None}, "c": {"last_success": 100}}
    assert fd.restart_order(replicas, restarts, [], True) == ["b", "d", "c", "a"]
    assert fd.restart_order(replicas, restarts, ["c", "a"], False) == ["c", "a"]


# State files -------------------------------------------------------------------------------


def test_drains_json_is_written_atomically_with_mode_0600(tmp_path):
    store = fd.Store(str(tmp_path / "state"))
    store.write("drains.json", {"a": auto()})
    path = tmp_path / "state" / "drains.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.drains() == {"a": auto()}
    inode = path.stat().st_ino
    store.write("drains.json", {})
    assert path.stat().st_ino != inode, "replaced by a rename, not rewritten in place"
    with pytest.raises(TypeError):
        store.write("drains.json", {"a": object()})
    assert store.drains() == {}, "a failed write leaves the old file"
    assert sorted(os.listdir(tmp_path / "state")) == ["drains.json"], "no temporary file left behind"


def test_a_corrupt_record_is_an_error_not_an_empty_one(tmp_path):
    (tmp_path / "drains.json").write_text('{"a": ')
    with pytest.raises(fd.StoreError, match="cannot read"):
        fd.Store(str(tmp_path)).drains()
    (tmp_path / "drains.json").write_text("[]")
    with pytest.raises(fd.StoreError, match="expected a JSON object"):
        fd.Store(str(tmp_path)).drains()


def test_the_lock_serialises_read_modify_write(tmp_path):
    store = fd.Store(str(tmp_path))
    trying, acquired = threading.Event(), threading.Event()

    def other():
        trying.set()
        with store.locked():
            acquired.set()

    with store.locked():
        thread = threading.Thread(target=other)
        thread.start()
        assert trying.wait(60)
        # Nothing to wait for when the lock works: a broken one lets the thread through at once.
        assert not acquired.wait(0.3), "a second holder got the lock while the first held it"
        with pytest.raises(fd.StoreError, match="held by another"):
            with store.locked(blocking=False):
                pass
    assert acquired.wait(60)
    thread.join()
    assert stat.S_IMODE((tmp_path / "lock").stat().st_mode) == 0o600


def test_record_restart_keeps_the_other_fields(tmp_path):
    store = fd.Store(str(tmp_path))
    store.record_restart("a", last_failure=5.0, last_error="start: boom")
    store.record_restart("a", last_success=9.0, last_duration_s=3.5)
    assert store.restarts() == {
        "a": {"last_success": 9.0, "last_failure": 5.0, "last_duration_s": 3.5, "last_error": "start: boom"}
    }


# Configuration -----------------------------------------------------------------------------


def base_config(tmp_path, sock="/nonexistent/admin.sock", agent="http://127.0.0.1:9/n"):
    return {
        "haproxy_socket": sock,
        "backend": "inference",
        "state_dir": str(tmp_path / "state"),
        "metrics_listen": "127.0.0.1",
        "metrics_port": 0,
        "replicas": [
            {
                "name": "a",
                "server": "a",
                "kind": "vllm",
                "metrics_url": f"{agent}/vllm/a/metrics",
                "nodes": [
                    {
                        "name": "a-head",
                        "rank": 0,
                        "agent_url": f"{agent}/a-head",
                        "ssh_host": "a-head.test",
                        "unit": "gpufleet-vllm-a.service",
                    },
                    {
                        "name": "a-w1",
                        "rank": 1,
                        "agent_url": f"{agent}/a-w1",
                        "ssh_host": "a-w1.test",
                        "unit": "gpufleet-vllm-a.service",
                    },
                ],
            },
            {
                "name": "b",
                "server": "b",
                "kind": "llama",
                "metrics_url": None,
                "nodes": [
                    {
                        "name": "b-head",
                        "rank": 0,
                        "agent_url": f"{agent}/b-head",
                        "ssh_host": "b-head.test",
                        "unit": "gpufleet-llama-server.service",
                    }
                ],
            },
        ],
    }


def write_config(tmp_path, config):
    path = tmp_path / "frontdoor.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_defaults_fill_in_the_controller_and_restart_settings(tmp_path):
    config = fd.load_config(write_config(tmp_path, base_config(tmp_path)))
    assert config["controller"] == fd.DEFAULT_CONTROLLER
    assert config["restart"]["ssh_binary"] == "/usr/bin/ssh"
    assert config["restart"]["drain_timeout"] == 300


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(replicas=[]), "'replicas' must be a non-empty list"),
        (lambda c: c["replicas"][1].update(name="a"), "replica names must be unique"),
        (lambda c: c["replicas"][0].update(kind="sglang"), "'kind' must be 'vllm' or 'llama'"),
        (lambda c: c["replicas"][0].update(metrics_url=None), "a vllm replica needs 'metrics_url'"),
        (lambda c: c["replicas"][0]["nodes"][1].update(rank=0), "node ranks must be unique"),
        (lambda c: c["replicas"][0]["nodes"][0].pop("ssh_host"), "each node needs non-empty strings"),
        (lambda c: c.update(controller={"max_auto_drained": -1}), "'max_auto_drained' must be an integer >= 0"),
        (lambda c: c.update(controller={"interval": 0}), "'interval' must be a number of seconds > 0"),
        # The same rules as the role's preflight (module_utils/_frontdoor.py config_problems).
        (
            lambda c: c.update(controller={"max_auto_drained": 3}),
            "'max_auto_drained' must be an integer >= 0 and at most 2",
        ),
        (lambda c: c.update(controller={"undrain_rise_s": 0}), "'undrain_rise_s' must be a number of seconds > 0"),
        (
            lambda c: c.update(controller={"remediate_backoff_s": 0}),
            "'remediate_backoff_s' must be a number of seconds > 0",
        ),
        (
            lambda c: c.update(controller={"agent_timeout": float("inf")}),
            "'agent_timeout' must be a number of seconds > 0",
        ),
        (
            lambda c: c.update(restart={"drain_timeout": float("nan")}),
            "'drain_timeout' must be a number of seconds > 0",
        ),
        (lambda c: c.update(restart={"ssh_binary": ""}), "'ssh_binary' must be a non-empty string"),
        (lambda c: c.update(metrics_port=70000), "'metrics_port' must be a port number"),
    ],
)
def test_an_invalid_config_is_refused_with_what_is_wrong(tmp_path, change, message):
    config = base_config(tmp_path)
    change(config)
    with pytest.raises(fd.ConfigError, match=message):
        fd.load_config(write_config(tmp_path, config))


# Fakes: HAProxy's runtime API, the agents and vLLM, ssh ------------------------------------


STAT_HEADER = fixture("show_stat.csv").splitlines()[0][2:].split(",")
STATE_HEADER = fixture("show_servers_state.txt").splitlines()[1]


class Lab:
    """A fake HAProxy (unix socket), fake agents and vLLM (one HTTP server) and the nodes' units.

    The fake ssh script sends `test stop|start HOST UNIT` to the fake HAProxy socket, which stops or
    starts that node: a stopped node fails its agent and takes its replica's server down; when every
    node of a replica has started again, the server comes up and the agents turn healthy after
    start_delay seconds (None: never, a replica that does not get ready).
    """

    def __init__(self, config, socket_path):
        self.config = config
        self.lock = threading.Lock()
        self.commands = []
        self.servers = {r["server"]: {"admin": 0, "op": 2, "scur": 0} for r in config["replicas"]}
        self.running = {r["name"]: 0 for r in config["replicas"]}
        self.agents = {n["name"]: True for r in config["replicas"] for n in r["nodes"]}
        self.stopped = set()
        self.drain_empties = True
        self.start_delay = 0.2
        self.check_lag = 0.2
        self.nodes = {n["ssh_host"]: (r, n) for r in config["replicas"] for n in r["nodes"]}
        lab = self

        class Unix(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline().decode().strip()
                self.wfile.write(lab.answer(line).encode())

        self.unix = socketserver.ThreadingUnixStreamServer(socket_path, Unix)
        self.unix.daemon_threads = True

        class Http(BaseHTTPRequestHandler):
            def do_GET(self):
                code, body = lab.http(self.path)
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):
                pass

        self.http_server = ThreadingHTTPServer(("127.0.0.1", 0), Http)
        self.http_server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.http_server.server_address[1]}/n"
        for server in (self.unix, self.http_server):
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        for server in (self.unix, self.http_server):
            server.shutdown()
            server.server_close()

    def set_commands(self):
        return [c for c in self.commands if c.startswith("set server")]

    def answer(self, line):
        with self.lock:
            self.commands.append(line)
            if line == "show stat":
                return self._show_stat()
            if line == "show servers state inference":
                rows = [
                    f"3 inference {i} {name} 10.0.0.{i} {s['op']} {s['admin']} 1 1 5 15 3 4 6 0 0 0 - 8000 - 0 0 - - 0"
                    for i, (name, s) in enumerate(self.servers.items(), 1)
                ]
                return "\n".join(["1", STATE_HEADER, *rows]) + "\n\n"
            words = line.split()
            if words[:2] == ["set", "server"] and len(words) == 5 and words[3] == "state":
                return self._set_state(words[2].split("/", 1)[1], words[4])
            if words[:1] == ["test"]:
                self._unit(words[1], words[2])
                return "ok\n"
            return "Unknown command.\n\n"

    def _show_stat(self):
        lines = ["# " + ",".join(STAT_HEADER)]
        for name, s in self.servers.items():
            status = "MAINT" if s["admin"] & 1 else ("DRAIN" if s["admin"] & 8 else "UP") if s["op"] == 2 else "DOWN"
            values = {"pxname": "inference", "svname": name, "scur": s["scur"], "status": status}
            values["check_status"] = "L7OK" if s["op"] == 2 else "L7STS"
            lines.append(",".join(str(values.get(key, "")) for key in STAT_HEADER))
        return "\n".join(lines) + "\n\n"

    def _set_state(self, name, state):
        if name not in self.servers:
            return "No such server.\n\n"
        server = self.servers[name]
        server["admin"] = {"ready": 0, "drain": 8, "maint": 1}[state] | (server["admin"] & ~9)
        if state == "drain" and self.drain_empties:
            replica = next(r["name"] for r in self.config["replicas"] if r["server"] == name)
            self._later(0.2, self._empty, name, replica)
        return "\n"

    @staticmethod
    def _later(delay, function, *args):
        timer = threading.Timer(delay, function, args)
        timer.daemon = True
        timer.start()

    def _empty(self, server, replica):
        with self.lock:
            self.servers[server]["scur"] = 0
            self.running[replica] = 0

    def _unit(self, verb, host):
        replica, node = self.nodes[host]
        if verb == "stop":
            self.stopped.add(node["name"])
            self.agents[node["name"]] = False
            self.servers[replica["server"]]["op"] = 0
        elif verb == "start":
            self.stopped.discard(node["name"])
            if self.start_delay is not None and not any(n["name"] in self.stopped for n in replica["nodes"]):
                self._later(self.start_delay, self._up, replica)

    def _up(self, replica):
        # The agents see the engine before HAProxy's check (rise 2 x inter) does.
        with self.lock:
            for node in replica["nodes"]:
                self.agents[node["name"]] = True
        self._later(self.check_lag, self._check_up, replica["server"])

    def _check_up(self, server):
        with self.lock:
            self.servers[server]["op"] = 2

    def http(self, path):
        parts = path.strip("/").split("/")
        with self.lock:
            if parts[:2] == ["n", "vllm"]:
                text = (
                    "# TYPE vllm:cache_config_info gauge\n"
                    'vllm:cache_config_info{block_size="16",num_gpu_blocks="8"} 1.0\n'
                    f'vllm:num_requests_running{{model_name="m"}} {self.running[parts[2]]}.0\n'
                    'vllm:num_requests_waiting{model_name="m"} 0.0\n'
                )
                return 200, text.encode()
            if len(parts) == 3 and parts[2] == "health" and parts[1] in self.agents:
                healthy = self.agents[parts[1]]
                if healthy is None:
                    return 500, b"agent broken"
                checks = {"engine": {"ok": healthy, "state": "ok" if healthy else "failing"}}
                return (200 if healthy else 503), json.dumps({"healthy": healthy, "checks": checks}).encode()
        return 404, b"not found"


FAKE_SSH = """
import json, os, socket, sys, time
start = time.time()
verb, unit, host = sys.argv[-2], sys.argv[-1], sys.argv[-3].split("@", 1)[1]
if verb == "stop":
    time.sleep(0.2)  # a unit takes its time to stop: the others must wait for rank 0's
if verb in os.environ.get("FAKE_SSH_HANG", "").split(","):
    time.sleep(600)  # a start job that never ends: the program's deadline must cut it off
rc = 0
if verb in os.environ.get("FAKE_SSH_FAIL", "").split(","):
    sys.stderr.write("ssh: connect to host %s port 22: Connection refused\\n" % host)
    rc = 255
else:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(os.environ["FAKE_HAPROXY_SOCKET"])
    sock.sendall(("test %s %s %s\\n" % (verb, host, unit)).encode())
    sock.recv(100)
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "start": start, "end": time.time()}) + "\\n")
sys.exit(rc)
"""


@pytest.fixture
def lab(tmp_path):
    short = tempfile.mkdtemp(prefix="fd", dir="/tmp")  # a unix socket path has at most 107 bytes
    sock = os.path.join(short, "admin.sock")
    config = base_config(tmp_path, sock=sock)
    the_lab = Lab(config, sock)
    config = base_config(tmp_path, sock=sock, agent=the_lab.base)
    the_lab.config = config
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(f"#!{sys.executable}\n{FAKE_SSH}")
    ssh.chmod(0o755)
    # Timeouts only end a hang, so a slow machine never reaches them; a test that needs one to
    # run out sets it short and makes what it waits for never come.
    config["controller"] = {"interval": 0.1, "agent_timeout": 30, "unreachable_fall": 2, "undrain_rise_s": 0.5}
    config["restart"] = {
        "drain_timeout": 60,
        "stop_timeout": 60,
        "ready_timeout": 60,
        "poll_interval": 0.05,
        "ssh_binary": str(ssh),
        "ssh_key": "/k/restart_ed25519",
        "ssh_known_hosts": "/k/known_hosts",
        "ssh_user": "root",
        "ssh_connect_timeout": 3,
    }
    the_lab.tmp = tmp_path
    the_lab.ssh_log = tmp_path / "ssh.log"
    the_lab.state = tmp_path / "state"
    yield the_lab
    the_lab.close()
    shutil.rmtree(short, ignore_errors=True)


def cli(lab, *args, fail_ssh="", hang_ssh="", timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *prometheus_path()])
    env.update(FAKE_SSH_LOG=str(lab.ssh_log), FAKE_HAPROXY_SOCKET=lab.config["haproxy_socket"], FAKE_SSH_FAIL=fail_ssh)
    env["FAKE_SSH_HANG"] = hang_ssh
    config = write_config(lab.tmp, lab.config)
    proc = subprocess.run(
        [*program("frontdoor"), "--config", config, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, lines


def prometheus_path():
    try:
        import prometheus_client
    except ImportError:
        return []
    return [str(Path(prometheus_client.__file__).parents[1])]


def ssh_calls(lab, timed=False):
    if not lab.ssh_log.exists():
        return []
    calls = [json.loads(line) for line in lab.ssh_log.read_text().splitlines()]
    return calls if timed else [call["argv"] for call in calls]


def read_state(lab, name):
    path = lab.state / name
    return json.loads(path.read_text()) if path.exists() else {}


def watchdog(proc, seconds=120):
    """Kill proc after `seconds` (cancel() the timer when done): a test reading its output lines
    then ends on a hang instead of waiting for ever."""
    timer = threading.Timer(seconds, proc.kill)
    timer.daemon = True
    timer.start()
    return timer


def test_a_server_read_as_up_goes_with_the_check_that_raised_it(lab):
    """The two reads of HAProxy are two moments: a server whose check passes between them is read
    as not up yet, never as up with the failed check of before (a restart's "ready" said L7STS)."""
    lab.servers["a"]["op"] = 0
    answer = lab.answer

    def answer_then_come_up(line):
        text = answer(line)
        lab.servers["a"]["op"] = 2  # HAProxy's check passes just after this answer
        return text

    lab.answer = answer_then_come_up
    haproxy = fd.HAProxy(lab.config["haproxy_socket"], "inference")
    view = haproxy.servers()["a"]
    assert not view["up"] or view["check_status"] == "L7OK", view
    view = haproxy.servers()["a"]
    assert (view["up"], view["check_status"]) == (True, "L7OK")


# CLI: status, drain, undrain ---------------------------------------------------------------


def test_status_reports_haproxy_agents_owner_and_restarts(lab):
    lab.servers["b"]["admin"] = 8
    lab.agents["a-w1"] = False
    (lab.state).mkdir()
    (lab.state / "drains.json").write_text(json.dumps({"b": {"owner": "operator", "reason": "disk", "at": 1}}))
    proc, (out,) = cli(lab, "status")
    assert proc.returncode == 0, proc.stderr
    a, b = out["replicas"]
    assert out["haproxy_up"] is True
    assert a["haproxy"]["admin"] == "ready" and a["haproxy"]["serving"] is True and a["haproxy"]["status"] == "UP"
    assert a["agents"]["a-head"]["healthy"] is True
    assert a["agents"]["a-w1"] == {"healthy": False, "failing": ["engine"], "error": None}
    assert (b["haproxy"]["admin"], b["haproxy"]["status"], b["record"]["owner"]) == ("drain", "DRAIN", "operator")
    assert a["revision"] is None and b["revision"] is None


def test_status_reports_the_revisions_an_upgrade_recorded(lab):
    (lab.state).mkdir()
    record = {"current": {"id": "0123456789ab", "model": "sha256:" + "2" * 64}, "state": "serving"}
    (lab.state / "revisions.json").write_text(json.dumps({"a": {"nodes": {"a-head": record}}}))
    proc, (out,) = cli(lab, "status")
    assert proc.returncode == 0, proc.stderr
    a, b = out["replicas"]
    assert a["revision"] == {"nodes": {"a-head": record}} and b["revision"] is None


def test_operator_drain_and_undrain_record_and_clear_the_owner(lab):
    proc, (out,) = cli(lab, "drain", "a", "--owner", "operator", "--reason", "bad DIMM")
    assert proc.returncode == 0, proc.stderr
    assert lab.servers["a"]["admin"] == 8
    assert read_state(lab, "drains.json")["a"]["owner"] == "operator"
    assert stat.S_IMODE((lab.state / "drains.json").stat().st_mode) == 0o600
    proc, (out,) = cli(lab, "undrain", "a", "--owner", "auto")
    assert proc.returncode == 1
    assert out["refused"] == "drained by operator"
    proc, (out,) = cli(lab, "drain", "a", "--owner", "auto", "--reason", "x")
    assert proc.returncode == 1
    assert lab.servers["a"]["admin"] == 8 and read_state(lab, "drains.json")["a"]["reason"] == "bad DIMM"
    proc, (out,) = cli(lab, "undrain", "a", "--owner", "operator")
    assert proc.returncode == 0
    assert lab.servers["a"]["admin"] == 0
    assert read_state(lab, "drains.json") == {}


def test_an_operator_drain_takes_over_an_auto_record(lab):
    lab.state.mkdir()
    (lab.state / "drains.json").write_text(json.dumps({"a": auto()}))
    lab.servers["a"]["admin"] = 8
    proc, (out,) = cli(lab, "drain", "a", "--owner", "operator", "--reason", "keep it out")
    assert proc.returncode == 0
    assert out["previous"]["owner"] == "auto"
    assert read_state(lab, "drains.json")["a"]["owner"] == "operator"


def test_an_auto_drain_never_claims_a_drain_made_by_hand(lab):
    lab.servers["a"]["admin"] = 8
    proc, (out,) = cli(lab, "drain", "a", "--owner", "auto", "--reason", "x")
    assert proc.returncode == 1
    assert "without a record" in out["refused"]
    assert read_state(lab, "drains.json") == {}


def test_a_drain_haproxy_refuses_leaves_no_record(lab):
    lab.config["replicas"][0]["server"] = "missing"
    proc, (out,) = cli(lab, "drain", "a", "--owner", "operator", "--reason", "x")
    assert proc.returncode == 1
    assert "No such server." in out["error"]
    assert read_state(lab, "drains.json") == {}


@pytest.mark.parametrize(
    "args",
    [
        ["drain", "nope", "--owner", "operator", "--reason", "x"],
        ["restart"],
        ["restart", "a", "--all"],
        ["drain", "a", "--owner", "restart", "--reason", "x"],
        ["drain", "a", "--owner", "operator"],
    ],
)
def test_usage_errors_exit_2(lab, args):
    proc, _lines = cli(lab, *args)
    assert proc.returncode == 2, proc.stdout
    assert lab.set_commands() == []


# Controller --------------------------------------------------------------------------------


def test_controller_once_prints_the_decision_and_acts_on_nothing(lab):
    lab.agents["a-w1"] = False
    proc, (out,) = cli(lab, "controller", "--once")
    assert proc.returncode == 0, proc.stderr
    assert out["actions"] == [{"replica": "a", "action": "drain", "reason": "node a-w1 failing: engine"}]
    assert out["applied"] == []
    assert out["replicas"]["a"]["nodes"]["a-w1"]["healthy"] is False
    assert lab.set_commands() == []
    assert read_state(lab, "drains.json") == {}


def test_controller_once_with_haproxy_unreachable_takes_no_action(lab):
    lab.agents["a-w1"] = False
    lab.config["haproxy_socket"] = str(lab.tmp / "no.sock")
    proc, (out,) = cli(lab, "controller", "--once")
    assert proc.returncode == 0, proc.stderr
    assert (out["haproxy_up"], out["actions"], out["blocked"]) == (False, [], {})
    assert "no.sock" in out["haproxy_error"]
    assert "HAProxy unreachable" in proc.stderr


def test_controller_acts_on_nothing_while_the_record_is_unreadable(lab):
    lab.agents["a-w1"] = False
    lab.state.mkdir()
    (lab.state / "drains.json").write_text('{"a": {"owner": "oper')
    proc, (out,) = cli(lab, "controller", "--once")
    assert proc.returncode == 0, proc.stderr
    assert (out["actions"], out["blocked"]) == ([], {})
    assert "state unreadable" in proc.stderr


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return response.read().decode()


def test_controller_drains_caps_undrains_exports_metrics_and_stops_on_sigterm(lab):
    pytest.importorskip("prometheus_client", reason="python3-prometheus-client (Debian) / prometheus-client")
    lab.config["controller"]["max_auto_drained"] = 2  # so that b's drain is blocked as the last serving
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), *prometheus_path()]))
    config = write_config(lab.tmp, lab.config)
    proc = subprocess.Popen(
        [*program("frontdoor"), "--config", config, "controller"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    timer = watchdog(proc)
    try:
        first = json.loads(proc.stdout.readline())
        port = first["port"]
        assert wait_for(lambda: "gpufleet_frontdoor_haproxy_up 1.0" in scrape(port))
        assert f'gpufleet_frontdoor_info{{version="{fd.__version__}"}} 1.0' in scrape(port)
        lab.agents["a-head"] = False
        # The record is written before the drain is set: wait for both.
        assert wait_for(lambda: lab.servers["a"]["admin"] == 8)
        assert read_state(lab, "drains.json")["a"]["owner"] == "auto"
        # b is now the last serving replica: it fails too, and stays in.
        lab.agents["b-head"] = False
        assert wait_for(
            lambda: 'gpufleet_frontdoor_drain_blocked{reason="last_serving",replica="b"} 1.0' in scrape(port)
        )
        text = scrape(port)
        for line in (
            'gpufleet_frontdoor_replica_drained{owner="auto",replica="a"} 1.0',
            'gpufleet_frontdoor_replica_drained{owner="operator",replica="a"} 0.0',
            'gpufleet_frontdoor_actions_total{action="drain",replica="a"} 1.0',
            'gpufleet_frontdoor_replica_serving{replica="a"} 0.0',
            'gpufleet_frontdoor_replica_serving{replica="b"} 1.0',
            'gpufleet_frontdoor_replica_healthy{replica="a"} 0.0',
            'gpufleet_frontdoor_node_healthy{node="a-head",replica="a"} 0.0',
            'gpufleet_frontdoor_node_healthy{node="a-w1",replica="a"} 1.0',
        ):
            assert line in text
        assert lab.servers["b"]["admin"] == 0
        lab.agents["a-head"] = True
        lab.agents["b-head"] = True
        # The record is dropped after HAProxy takes the replica back: wait for both.
        assert wait_for(lambda: lab.servers["a"]["admin"] == 0)
        assert wait_for(lambda: read_state(lab, "drains.json") == {})
        # The counter moves after the record, and the blocked gauge clears on the next poll.
        assert wait_for(lambda: 'gpufleet_frontdoor_actions_total{action="undrain",replica="a"} 1.0' in scrape(port))
        assert wait_for(lambda: "gpufleet_frontdoor_drain_blocked{" not in scrape(port))
        # An operator's drain made by hand (socat) is never undone. The metrics are updated at the
        # end of a poll: once they show the drain, a poll that saw it has applied its actions.
        lab.answer("set server inference/b state drain")
        assert wait_for(
            lambda: 'gpufleet_frontdoor_replica_drained{owner="unrecorded",replica="b"} 1.0' in scrape(port)
        )
        assert lab.servers["b"]["admin"] == 8
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    logged = [json.loads(line) for line in out.splitlines() if line.strip()]
    actions = [(entry.get("replica"), entry.get("action")) for entry in logged if entry.get("action")]
    assert actions == [("a", "drain"), ("b", "blocked"), ("b", "unblocked"), ("a", "undrain")]
    # The stop line, then the command's result: nothing is done or logged after the stop.
    assert logged[-1] == {"stopped": True}
    assert logged[-2]["msg"] == "stopping on signal 15"


def test_a_controller_poll_under_way_when_the_stop_comes_acts_on_nothing(lab):
    """SIGTERM lands while a poll reads the agents and HAProxy: that poll drains and logs nothing."""
    lab.agents["a-head"] = False
    fleet = fd.Fleet(fd.load_config(write_config(lab.tmp, lab.config)))
    stream = io.StringIO()
    controller = fd.Controller(fleet, stream=stream)
    view = fleet.view

    def view_then_stop():
        seen = view()
        controller.stopping.set()  # what the signal handler does
        return seen

    fleet.view = view_then_stop
    try:
        assert controller.poll()["actions"] == []
        assert (stream.getvalue(), lab.set_commands(), read_state(lab, "drains.json")) == ("", [], {})
        # The same poll without the stop drains the failing replica.
        controller.stopping.clear()
        fleet.view = view
        assert [action["action"] for action in controller.poll()["applied"]] == ["drain"]
    finally:
        fleet.close()
    assert lab.set_commands() == ["set server inference/a state drain"]


# Planned restart ---------------------------------------------------------------------------


def steps_of(lines, replica):
    return [line["step"] for line in lines if line.get("replica") == replica and "step" in line]


FULL = ["check", "drain", "drained", "stopped", "started", "ready", "done"]


def test_restart_all_rolls_one_replica_at_a_time(lab):
    lab.state.mkdir()
    (lab.state / "restarts.json").write_text(json.dumps({"b": {"last_success": 100.0}}))
    lab.servers["a"]["scur"] = 2
    lab.running["a"] = 1
    proc, lines = cli(lab, "restart", "--all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = lines[-1]
    assert (summary["ok"], summary["order"], summary["restarted"]) == (True, ["a", "b"], ["a", "b"])
    assert steps_of(lines, "a") == FULL and steps_of(lines, "b") == FULL
    ready = next(line for line in lines if line.get("step") == "ready" and line["replica"] == "a")
    assert ready["check_status"] == "L7OK", "ready waits for HAProxy's check, not only for the agents"
    drained = next(line for line in lines if line.get("step") == "drained" and line["replica"] == "a")
    assert drained["timed_out"] is False and drained["sessions"] == 0 and drained["requests_running"] == 0
    assert all(isinstance(line["ts"], float) for line in lines[:-1])
    assert lab.set_commands() == [
        "set server inference/a state drain",
        "set server inference/a state ready",
        "set server inference/b state drain",
        "set server inference/b state ready",
    ]
    head_stop, w1_stop = ssh_calls(lab, timed=True)[:2]
    assert head_stop["end"] <= w1_stop["start"], "rank 0 stops before the others"
    calls = ssh_calls(lab)
    assert [(c[-3], c[-2]) for c in calls[:2]] == [("root@a-head.test", "stop"), ("root@a-w1.test", "stop")]
    assert sorted((c[-3], c[-2]) for c in calls[2:4]) == [("root@a-head.test", "start"), ("root@a-w1.test", "start")]
    assert [(c[-3], c[-2], c[-1]) for c in calls[4:]] == [
        ("root@b-head.test", "stop", "gpufleet-llama-server.service"),
        ("root@b-head.test", "start", "gpufleet-llama-server.service"),
    ]
    assert calls[0][:10] == [
        "-i",
        "/k/restart_ed25519",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=/k/known_hosts",
        "-o",
        "ConnectTimeout=3",
    ]
    assert read_state(lab, "drains.json") == {}
    history = read_state(lab, "restarts.json")
    assert history["a"]["last_success"] > 1e9 and history["b"]["last_success"] > 100
    assert history["a"]["last_duration_s"] > 0 and history["a"]["last_error"] is None


def test_a_failed_start_hands_the_drain_to_the_controller_and_stops_the_roll(lab):
    proc, lines = cli(lab, "restart", "a", "b", fail_ssh="start")
    assert proc.returncode == 1
    summary = lines[-1]
    assert summary["failed"]["replica"] == "a" and summary["failed"]["step"] == "start"
    assert "Connection refused" in summary["failed"]["error"]
    assert summary["not_attempted"] == ["b"]
    assert steps_of(lines, "a") == ["check", "drain", "drained", "stopped", "failed"]
    assert steps_of(lines, "b") == []
    record = read_state(lab, "drains.json")["a"]
    assert record["owner"] == "auto" and "planned restart failed at start" in record["reason"]
    history = read_state(lab, "restarts.json")["a"]
    assert history["last_failure"] > 1e9 and history["last_success"] is None
    assert history["last_error"].startswith("start: ")
    assert lab.servers["a"]["admin"] == 8, "left drained: the controller undrains it once healthy"
    assert [c for c in ssh_calls(lab) if "b-head.test" in c[-3]] == []
    assert "set server inference/b state drain" not in lab.commands


def test_a_replica_not_ready_in_time_fails_at_ready(lab):
    lab.config["restart"]["ready_timeout"] = 1
    lab.start_delay = None  # never ready: the timeout runs out however fast the machine is
    proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 1
    assert lines[-1]["failed"]["step"] == "ready"
    assert lines[-1]["failed"]["error"].startswith("not ready within ready_timeout: ")
    assert steps_of(lines, "a")[:4] == ["check", "drain", "drained", "stopped"]
    assert read_state(lab, "drains.json")["a"]["owner"] == "auto"
    assert read_state(lab, "restarts.json")["a"]["last_error"].startswith("ready: not ready within ready_timeout")


def test_a_start_job_still_running_at_ready_timeout_fails_at_ready_not_start(lab):
    """ready_timeout counts from the start commands (a start job may wait for the replica's peers):
    a start that has not answered when it runs out is a replica not ready in time, not a failed start."""
    lab.config["restart"]["ready_timeout"] = 1
    proc, lines = cli(lab, "restart", "a", hang_ssh="start")
    assert proc.returncode == 1
    failed = lines[-1]["failed"]
    assert failed["step"] == "ready", failed
    assert failed["error"].startswith("not ready within ready_timeout: start gpufleet-vllm"), failed
    assert steps_of(lines, "a") == ["check", "drain", "drained", "stopped", "failed"]
    assert read_state(lab, "drains.json")["a"]["owner"] == "auto"


def test_a_restart_stopped_by_sigterm_hands_the_drain_to_the_controller(lab):
    lab.start_delay = None  # still waiting for ready when the signal comes
    env = dict(os.environ, PYTHONPATH=str(SRC), FAKE_SSH_LOG=str(lab.ssh_log))
    env["FAKE_HAPROXY_SOCKET"] = lab.config["haproxy_socket"]
    config = write_config(lab.tmp, lab.config)
    proc = subprocess.Popen(
        [*program("frontdoor"), "--config", config, "restart", "a"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    timer = watchdog(proc)
    try:
        for line in proc.stdout:
            if json.loads(line)["step"] == "started":
                break
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    summary = json.loads(out.splitlines()[-1])
    assert summary["failed"] == {"replica": "a", "step": "signal", "error": "stopped by signal 15"}
    assert read_state(lab, "drains.json")["a"]["owner"] == "auto"
    assert read_state(lab, "restarts.json")["a"]["last_error"] == "signal: stopped by signal 15"


def test_only_one_restart_runs_at_a_time(lab):
    store = fd.Store(str(lab.state))
    with store.locked("restart.lock"):
        proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 1
    assert "is held by another gpufleet-frontdoor" in lines[-1]["error"]
    assert lab.set_commands() == []


def test_restart_refuses_the_last_serving_replica_unless_allowed(lab):
    lab.servers["b"]["op"] = 0
    proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 1
    assert "no other replica is serving" in lines[-1]["failed"]["error"]
    assert lab.set_commands() == [] and ssh_calls(lab) == []
    assert read_state(lab, "drains.json") == {}
    proc, lines = cli(lab, "restart", "a", "--allow-outage")
    assert proc.returncode == 0, proc.stdout
    assert lines[-1]["restarted"] == ["a"]


def test_restart_skips_a_replica_the_operator_drained(lab):
    lab.state.mkdir()
    (lab.state / "drains.json").write_text(json.dumps({"a": {"owner": "operator", "reason": "RMA", "at": 1}}))
    lab.servers["a"]["admin"] = 8
    proc, lines = cli(lab, "restart", "a", "b", "--allow-outage")  # b is the only one serving
    assert proc.returncode == 0, proc.stdout
    assert lines[-1]["skipped"] == {"a": "drained by the operator: RMA"}
    assert lines[-1]["restarted"] == ["b"]
    assert "set server inference/a state ready" not in lab.commands
    assert read_state(lab, "drains.json")["a"]["owner"] == "operator"


def test_an_operator_drain_is_skipped_before_the_outage_check(lab):
    lab.state.mkdir()
    (lab.state / "drains.json").write_text(json.dumps({"a": {"owner": "operator", "reason": "RMA", "at": 1}}))
    lab.servers["a"]["admin"] = 8
    lab.servers["b"]["op"] = 0
    proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 0, proc.stdout
    assert lines[-1]["skipped"] == {"a": "drained by the operator: RMA"}
    assert lab.set_commands() == [] and ssh_calls(lab) == []


def test_restart_skips_a_drain_made_by_hand(lab):
    lab.servers["a"]["admin"] = 1
    proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 0, proc.stdout
    assert lines[-1]["skipped"] == {"a": "maint in HAProxy without a record: the operator's"}
    assert lab.set_commands() == [] and ssh_calls(lab) == []


def test_restart_goes_on_after_drain_timeout_and_reports_what_still_ran(lab):
    lab.config["restart"]["drain_timeout"] = 0.3
    lab.drain_empties = False
    lab.servers["a"]["scur"] = 3
    lab.running["a"] = 2
    proc, lines = cli(lab, "restart", "a")
    assert proc.returncode == 0, proc.stdout
    drained = next(line for line in lines if line.get("step") == "drained")
    assert (drained["timed_out"], drained["sessions"], drained["requests_running"]) == (True, 3, 2)
    assert steps_of(lines, "a") == FULL
