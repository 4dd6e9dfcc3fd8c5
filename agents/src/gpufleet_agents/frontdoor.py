# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drain, undrain and restart the inference replicas behind the front door's HAProxy.

One program, so that the controller, the planned restart and the operator's CLI share one HAProxy
client and one ownership record:

- `status`: every replica's HAProxy state, its health agents' verdicts, its owner, restarts and
  the revision its nodes recorded (revisions.json, written by playbooks/upgrade_serving.yml).
- `drain REPLICA --owner operator|auto --reason TEXT` / `undrain REPLICA --owner operator|auto`.
- `controller [--once]`: polls the agents and HAProxy, drains a failing replica and undrains a
  recovered one, within a blast-radius cap; exports Prometheus metrics.
- `restart [REPLICA ...] [--all] [--allow-outage]`: the planned restart, one replica at a time.

Ownership (LBNL NHC's rule: automation resumes only what it drained itself): drains.json records
who drained a replica. The controller undoes only its own ("auto") drains; a replica drained by an
operator, by a running restart, or in HAProxy with no record at all (socat by hand) is never
touched by automation. An operator's drain or undrain overrides any record.

All policy is in decide(), a pure function; HAProxy's outputs are read by pure parsers; the rest
is I/O. Every command prints JSON on stdout: exit 0 done, 1 refused or failed, 2 usage.
"""

import argparse
import contextlib
import copy
import csv
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# _frontdoor holds the controller's and the planned restart's settings rules, which the role's
# preflight checks with the same code; _vllm_metrics reads vLLM's /metrics.
from gpufleet_agents import __version__, _frontdoor, _vllm_metrics

NAME = "gpufleet-frontdoor"
DEFAULT_CONFIG = "/etc/gpufleet/frontdoor/frontdoor.json"
OWNERS = ("operator", "auto", "restart")
ACTIONS = ("drain", "undrain", "drop_record", "remediate")
# Checks whose failure a restart of the replica's units can cure: the engine wedged (its /health
# may still answer 200) or NCCL failed inside it. A missing GPU, a dead link or an unreachable node
# is not cured by a restart, so a replica failing on those stays drained for a human.
RESTARTABLE_CHECKS = ("engine", "journal")
# HAProxy's own deep check says the API process is up but its engine does not complete: it
# answered too late, or not 200 (check_status, doc/management.txt 9.1). A replica that is starting
# (or stopped) refuses the connection instead (L4CON, L4TOUT), and restarting it would only
# restart its start: vLLM opens its HTTP port only once the engine is up.
WEDGED_CHECK_STATUSES = ("L7TOUT", "L7STS", "L7RSP")
DEFAULT_CONTROLLER = {
    "interval": 1.0,
    "agent_timeout": 1.0,
    "unreachable_fall": 3,
    "undrain_rise_s": 15,
    "max_auto_drained": 1,
    "remediate_after_s": 60,
    "remediate_backoff_s": 900,
}
DEFAULT_RESTART = {
    "drain_timeout": 300,
    "stop_timeout": 120,
    "ready_timeout": 900,
    "ssh_key": "/var/lib/gpufleet/frontdoor/restart_ed25519",
    "ssh_known_hosts": "/etc/gpufleet/frontdoor/known_hosts",
    "ssh_user": "root",
    "ssh_connect_timeout": 10,
    "ssh_binary": "/usr/bin/ssh",
    "poll_interval": 1.0,
}
HAPROXY_TIMEOUT = 5.0
METRICS_TIMEOUT = 5.0


def log(message, stream=None, **fields):
    """One JSON line: the journal keeps it whole and the lab greps it."""
    print(json.dumps({"ts": round(time.time(), 3), "msg": message, **fields}), file=stream or sys.stdout, flush=True)


# Policy ------------------------------------------------------------------------------------


def new_memory():
    return {"unreachable": {}, "healthy_since": {}, "blocked": {}, "failing_since": {}, "remediated_at": {}}


def _nodes_verdict(nodes, counts, fall):
    """(why the replica is failing or None, whether every node is healthy); updates counts."""
    reasons = []
    for node, state in nodes.items():
        if state.get("healthy") is None:
            counts[node] = counts.get(node, 0) + 1
            if counts[node] >= fall:
                reasons.append(f"node {node} unreachable for {counts[node]} polls")
            continue
        counts.pop(node, None)
        if state["healthy"] is False:
            reasons.append(f"node {node} failing: {', '.join(state.get('failing') or ['unhealthy'])}")
    for gone in set(counts) - set(nodes):
        del counts[gone]
    healthy = bool(nodes) and all(state.get("healthy") is True for state in nodes.values())
    return ("; ".join(reasons) or None), healthy


def decide(replicas_view, memory, records, policy, now):
    """Return (actions, memory). Inputs are not modified; memory is JSON-serialisable.

    replicas_view: {replica: {"haproxy": {"admin": "ready"|"drain"|"maint", "serving": bool,
        "check_status": HAProxy's last check result} or
        None (unknown: nothing is done to it, and it does not count as serving), "nodes": {node:
        {"healthy": True|False|None (unreachable), "failing": [check names]}}}}, in config order.
    memory: what the previous call returned, or None to start (or from an older version).
    records: drains.json, {replica: {"owner", "reason", "at"}}.
    policy: the controller settings (unreachable_fall, undrain_rise_s, max_auto_drained,
        remediate_after_s, remediate_backoff_s).
    now: monotonic seconds.
    actions: [{"replica", "action": "drain"|"undrain"|"drop_record"|"remediate", "reason"}], to
        apply in order. "remediate" restarts a replica the controller drained whose nodes have failed
        only restartable checks (RESTARTABLE_CHECKS) for remediate_after_s, at most once per
        remediate_backoff_s; 0 turns it off.
    memory["blocked"]: {replica: {"reason": "max_auto_drained"|"last_serving", "detail"}}, the
        failing replicas this poll leaves serving because of the blast-radius cap.
    """
    memory = {**new_memory(), **copy.deepcopy(memory)} if memory else new_memory()
    failing, healthy = _health(replicas_view, memory, policy, now)
    auto = [name for name in replicas_view if (records.get(name) or {}).get("owner") == "auto"]
    actions = _own_drains(replicas_view, memory, records, policy, now, healthy, auto)
    actions += _remediations(replicas_view, memory, records, policy, now, failing)
    blocked = {}
    serving = [name for name, view in replicas_view.items() if view["haproxy"] and view["haproxy"]["serving"]]
    cap = policy["max_auto_drained"]
    for name, view in replicas_view.items():
        haproxy = view["haproxy"]
        if name not in failing or haproxy is None or records.get(name) or haproxy["admin"] != "ready":
            continue  # an unknown, owned or hand-drained replica is not automation's to drain
        if len(auto) >= cap:
            detail = f"{len(auto)} of max_auto_drained {cap} already auto-drained ({', '.join(auto) or 'none'})"
            blocked[name] = {"reason": "max_auto_drained", "detail": f"{failing[name]}; {detail}"}
        elif not [other for other in serving if other != name]:
            blocked[name] = {"reason": "last_serving", "detail": f"{failing[name]}; no other replica is serving"}
        else:
            actions.append(_action(name, "drain", failing[name]))
            auto.append(name)
            if name in serving:
                serving.remove(name)
    memory["blocked"] = blocked
    return actions, memory


def _remediations(replicas_view, memory, records, policy, now, failing):
    """Restart the controller's own drained replicas that a restart can cure; updates memory."""
    for gone in set(memory["failing_since"]) - set(failing):
        del memory["failing_since"][gone]
    for name in failing:
        memory["failing_since"].setdefault(name, now)
    after = policy.get("remediate_after_s", DEFAULT_CONTROLLER["remediate_after_s"])
    backoff = policy.get("remediate_backoff_s", DEFAULT_CONTROLLER["remediate_backoff_s"])
    actions = []
    if not after:
        return actions
    for name, view in replicas_view.items():
        haproxy = view["haproxy"]
        if name not in failing or haproxy is None or haproxy["admin"] != "drain":
            continue
        if (records.get(name) or {}).get("owner") != "auto":
            continue  # only what automation drained; an operator's replica is theirs to restart
        checks = set()
        for state in view["nodes"].values():
            if state.get("healthy") is None:
                checks.add("unreachable")
            elif state.get("healthy") is False:
                checks.update(state.get("failing") or ["unhealthy"])
        if not checks or not checks <= set(RESTARTABLE_CHECKS):
            continue
        if haproxy.get("check_status") not in WEDGED_CHECK_STATUSES:
            memory["failing_since"][name] = now  # starting or stopped: not wedged (yet)
            continue
        lasted = now - memory["failing_since"][name]
        last = memory["remediated_at"].get(name)
        if lasted >= after and (last is None or now - last >= backoff):
            memory["remediated_at"][name] = now
            reason = f"failing ({failing[name]}) for {lasted:.0f} s while drained: restart the replica"
            actions.append(_action(name, "remediate", reason))
    return actions


def _health(replicas_view, memory, policy, now):
    """({failing replica: why}, {replicas whose every node is healthy}); updates memory."""
    for key in ("unreachable", "healthy_since"):
        for gone in set(memory[key]) - set(replicas_view):
            del memory[key][gone]
    failing, healthy = {}, set()
    for name, view in replicas_view.items():
        counts = memory["unreachable"].setdefault(name, {})
        why, all_healthy = _nodes_verdict(view["nodes"], counts, policy["unreachable_fall"])
        if why:
            failing[name] = why
        if all_healthy:
            healthy.add(name)
            memory["healthy_since"].setdefault(name, now)
        else:
            memory["healthy_since"].pop(name, None)
    return failing, healthy


def _own_drains(replicas_view, memory, records, policy, now, healthy, auto):
    """Undrain or forget the controller's own drains; `auto` loses the records forgotten."""
    actions = []
    for name, view in replicas_view.items():
        haproxy, owner = view["haproxy"], (records.get(name) or {}).get("owner")
        if haproxy is None or owner != "auto":
            continue
        if haproxy["admin"] == "ready":
            actions.append(_action(name, "drop_record", "auto record but HAProxy shows it ready: undrained by hand"))
            auto.remove(name)
        elif haproxy["admin"] == "drain" and name in healthy:
            rise = now - memory["healthy_since"][name]
            if rise >= policy["undrain_rise_s"]:
                actions.append(_action(name, "undrain", f"every node healthy for {rise:.0f} s"))
        # An auto-drained replica that someone put in maint is theirs now: left alone.
    return actions


def _action(replica, action, reason):
    return {"replica": replica, "action": action, "reason": reason}


# HAProxy runtime API -----------------------------------------------------------------------
#
# Formats as HAProxy 2.6 (Debian 12) writes them: doc/management.txt sections 9.1 ("CSV format",
# `show stat`) and 9.3 (`show servers state`, `set server`), checked against the v2.6.0 sources
# (src/stats.c stats_fill_sv_stats, src/proxy.c dump_servers_state, include/haproxy/server-t.h):
# https://github.com/haproxy/haproxy/blob/v2.6.0/doc/management.txt
# and against what Debian 12's 2.6.12 answers (agents/tests/fixtures/frontdoor). 2.6.12 has
# more static CSV fields than 2.6.0, and stats modules add columns after the "-" one: columns are
# read by their header names, never by position.
#
# srv_admin_state bits: 0x01 FMAINT (set server state maint), 0x02 IMAINT (inherited from a
# tracked server), 0x04 CMAINT (`disabled` in the configuration), 0x08 FDRAIN (set server state
# drain), 0x10 IDRAIN (inherited), 0x20 RMAINT (address resolution failed), 0x40 HMAINT (FQDN set
# from the CLI: not a maintenance). srv_op_state: 0 stopped, 1 starting (slowstart), 2 running,
# 3 stopping (a check answered 404 with disable-on-404).
MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20
DRAIN_BITS = 0x08 | 0x10
UP_OP_STATES = (1, 2)


class HAProxyError(Exception):
    """HAProxy cannot be reached, refused a command, or answered something unexpected."""


def parse_show_stat(text):
    """`show stat` CSV -> [{column: value}]; the header line starts with "# "."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise HAProxyError(f"show stat: expected a '# pxname,svname,...' header, found {text[:80]!r}")
    header = next(csv.reader([lines[0][2:]]))
    if header[:2] != ["pxname", "svname"]:
        raise HAProxyError(f"show stat: header starts with {header[:2]}, expected ['pxname', 'svname']")
    return [{key: value for key, value in zip(header, row) if key and key != "-"} for row in csv.reader(lines[1:])]


def parse_servers_state(text):
    """`show servers state` (format version 1) -> [{field: value}] with the numeric fields as int."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() != "1":
        raise HAProxyError(f"show servers state: expected format version 1, found {text[:80]!r}")
    if len(lines) < 2 or not lines[1].startswith("#"):
        raise HAProxyError("show servers state: no '# be_id be_name ...' header line")
    header = lines[1].lstrip("#").split()
    rows = []
    for line in lines[2:]:
        if line.startswith("#"):
            continue
        values = line.split()
        if len(values) < 7:
            raise HAProxyError(f"show servers state: short line {line!r}")
        row = dict(zip(header, values))
        for key in ("srv_op_state", "srv_admin_state"):
            try:
                row[key] = int(row[key])
            except (KeyError, ValueError):
                raise HAProxyError(f"show servers state: {key} is not a number in {line!r}") from None
        rows.append(row)
    return rows


def admin_state(bits):
    if bits & MAINT_BITS:
        return "maint"
    if bits & DRAIN_BITS:
        return "drain"
    return "ready"


def server_views(stat_text, state_text, backend):
    """{server: {"admin", "status", "check_status", "scur", "op_state", "up", "serving"}} of one backend.

    up: HAProxy sends it traffic when its admin state lets it (its checks pass). The CSV status
    cannot say it for a drained server ("DRAIN" whether the check passes or not), so up comes from
    srv_op_state. serving: up and admin ready.
    """
    stats = {
        row["svname"]: row
        for row in parse_show_stat(stat_text)
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND")
    }
    views = {}
    for row in parse_servers_state(state_text):
        if row.get("be_name") != backend:
            continue
        name = row["srv_name"]
        stat = stats.get(name, {})
        try:
            scur = int(stat.get("scur") or 0)
        except ValueError:
            raise HAProxyError(f"show stat: scur of {backend}/{name} is {stat.get('scur')!r}") from None
        admin = admin_state(row["srv_admin_state"])
        up = row["srv_op_state"] in UP_OP_STATES
        views[name] = {
            "admin": admin,
            "status": stat.get("status"),
            # "* L7OK" while a check runs (management.txt 9.1, field 36): the last result is what counts.
            "check_status": (stat.get("check_status") or "").lstrip("* ") or None,
            "scur": scur,
            "op_state": row["srv_op_state"],
            "up": up,
            "serving": up and admin == "ready",
        }
    return views


class HAProxy:
    """The runtime API on a unix socket: one command per connection, answered until HAProxy closes."""

    def __init__(self, path, backend, timeout=HAPROXY_TIMEOUT):
        self.path = path
        self.backend = backend
        self.timeout = timeout

    def command(self, line):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.path)
                sock.sendall(line.encode() + b"\n")
                chunks = []
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
        except OSError as exc:
            raise HAProxyError(f"HAProxy runtime API {self.path}: {line!r}: {exc}") from None
        return b"".join(chunks).decode("utf-8", "replace")

    def servers(self):
        # Two commands, so two moments: the state first (up comes from it), then the statistics,
        # whose check_status is then never older than the up it goes with. The other way round,
        # a server that came up between the two was reported up with the failed check before it.
        state = self.command(f"show servers state {self.backend}")
        stat = self.command("show stat")
        return server_views(stat, state, self.backend)

    def set_state(self, server, state):
        """set server BACKEND/SERVER state ready|drain|maint; HAProxy answers nothing but an empty line."""
        answer = self.command(f"set server {self.backend}/{server} state {state}").strip()
        if answer:
            raise HAProxyError(f"set server {self.backend}/{server} state {state}: {answer}")


# Health agents and vLLM --------------------------------------------------------------------

# Agents and engines are on the cluster's own network: never through an environment's HTTP proxy.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def parse_health(status, body):
    """An agent's /health answer -> {"healthy", "failing", "error"}; ValueError when it is not one."""
    if status not in (200, 503):
        raise ValueError(f"HTTP {status}, expected 200 or 503")
    data = json.loads(body.decode("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("healthy"), bool):
        raise ValueError("no boolean 'healthy' in the answer")
    checks = data.get("checks") if isinstance(data.get("checks"), dict) else {}
    failing = sorted(
        name for name, check in checks.items() if isinstance(check, dict) and check.get("state") == "failing"
    )
    return {"healthy": data["healthy"], "failing": failing, "error": None}


def fetch_health(url, timeout):
    try:
        try:
            with OPENER.open(url, timeout=timeout) as response:
                status, body = response.status, response.read(1 << 20)
        except urllib.error.HTTPError as exc:  # 503 is an answer: the agent says unhealthy
            status, body = exc.code, exc.read(1 << 20)
        return parse_health(status, body)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return {"healthy": None, "failing": [], "error": f"{url}: {exc}"}


def requests_running(url, timeout=METRICS_TIMEOUT):
    """vLLM's vllm:num_requests_running from its /metrics, or (None, why)."""
    try:
        with OPENER.open(url, timeout=timeout) as response:
            text = response.read(16 << 20).decode("utf-8", "replace")
        return _vllm_metrics.engine_state(text)["requests_running"] or 0, None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # MetricsError is a ValueError
        return None, f"{url}: {exc}"


# State: drains.json, restarts.json ---------------------------------------------------------


class StoreError(Exception):
    pass


class Store:
    """The ownership record and the restart history, read-modify-written under one flock."""

    def __init__(self, state_dir):
        self.dir = state_dir

    def _path(self, name):
        return os.path.join(self.dir, name)

    @contextlib.contextmanager
    def locked(self, name="lock", blocking=True):
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        fd = os.open(self._path(name), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                raise StoreError(f"{self._path(name)} is held by another {NAME}") from None
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def read(self, name):
        try:
            with open(self._path(name)) as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {self._path(name)}: {exc}") from None
        if not isinstance(data, dict):
            raise StoreError(f"{self._path(name)}: expected a JSON object, found {type(data).__name__}")
        return data

    def write(self, name, data):
        """Atomically: a reader sees the old file or the new one, never half of one."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "w") as handle:
                os.fchmod(handle.fileno(), 0o600)
                json.dump(data, handle, indent=1, sort_keys=True)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._path(name))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def drains(self):
        return self.read("drains.json")

    def restarts(self):
        return self.read("restarts.json")

    def record_restart(self, replica, **fields):
        with self.locked():
            history = self.restarts()
            entry = {"last_success": None, "last_failure": None, "last_duration_s": None, "last_error": None}
            entry.update(history.get(replica) or {})
            entry.update(fields)
            history[replica] = entry
            self.write("restarts.json", history)


def new_record(owner, reason):
    return {"owner": owner, "reason": reason, "at": round(time.time(), 3)}


# Observation, shared by status, controller and restart -------------------------------------


class Fleet:
    def __init__(self, config):
        self.config = config
        self.replicas = {replica["name"]: replica for replica in config["replicas"]}
        self.haproxy = HAProxy(config["haproxy_socket"], config["backend"])
        self.store = Store(config["state_dir"])
        nodes = sum(len(replica["nodes"]) for replica in config["replicas"])
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(32, nodes)))

    def agents(self, names=None):
        """{replica: {node: fetch_health()}}, every node polled in parallel."""
        timeout = self.config["controller"]["agent_timeout"]
        futures = {
            name: {
                node["name"]: self.pool.submit(fetch_health, node["agent_url"].rstrip("/") + "/health", timeout)
                for node in replica["nodes"]
            }
            for name, replica in self.replicas.items()
            if names is None or name in names
        }
        return {name: {node: future.result() for node, future in nodes.items()} for name, nodes in futures.items()}

    def servers(self):
        """({replica: server view or None}, error or None)."""
        try:
            servers = self.haproxy.servers()
        except HAProxyError as exc:
            return {name: None for name in self.replicas}, str(exc)
        return {name: servers.get(replica["server"]) for name, replica in self.replicas.items()}, None

    def view(self):
        agents = self.agents()
        servers, error = self.servers()
        view = {name: {"haproxy": servers[name], "nodes": agents[name]} for name in self.replicas}
        return view, error

    def close(self):
        self.pool.shutdown(wait=False)


# status, drain, undrain --------------------------------------------------------------------


def cmd_status(fleet, _args):
    view, error = fleet.view()
    records, restarts = fleet.store.drains(), fleet.store.restarts()
    # What each replica's nodes run, as playbooks/upgrade_serving.yml last read their records
    # (docs/upgrades.md); written by the playbook, only read here.
    revisions = fleet.store.read("revisions.json")
    replicas = []
    for name, replica in fleet.replicas.items():
        haproxy = view[name]["haproxy"]
        replicas.append(
            {
                "name": name,
                "server": replica["server"],
                "kind": replica["kind"],
                "haproxy": haproxy,
                "agents": view[name]["nodes"],
                "record": records.get(name),
                "restart": restarts.get(name),
                "revision": revisions.get(name),
            }
        )
    return 0, {"haproxy_up": error is None, "haproxy_error": error, "replicas": replicas}


def cmd_drain(fleet, args):
    name, server = args.replica, fleet.replicas[args.replica]["server"]
    with fleet.store.locked():
        records = fleet.store.drains()
        previous = records.get(name)
        if args.owner == "auto":
            if previous and previous.get("owner") != "auto":
                return 1, _refused(name, "drain", f"drained by {previous.get('owner')}: {previous.get('reason')}")
            haproxy, error = fleet.servers()
            if error:
                return 1, _refused(name, "drain", error)
            if not previous and haproxy[name] and haproxy[name]["admin"] != "ready":
                return 1, _refused(
                    name, "drain", f"{haproxy[name]['admin']} in HAProxy without a record: the operator's"
                )
        # The record first: a drain that HAProxy applied must never be left without an owner.
        records[name] = new_record(args.owner, args.reason)
        fleet.store.write("drains.json", records)
        try:
            fleet.haproxy.set_state(server, "drain")
        except HAProxyError as exc:
            if previous:
                records[name] = previous
            else:
                records.pop(name)
            fleet.store.write("drains.json", records)
            return 1, {"replica": name, "action": "drain", "ok": False, "error": str(exc)}
    return 0, {"replica": name, "action": "drain", "ok": True, "record": records[name], "previous": previous}


def cmd_undrain(fleet, args):
    name, server = args.replica, fleet.replicas[args.replica]["server"]
    with fleet.store.locked():
        records = fleet.store.drains()
        previous = records.get(name)
        if args.owner == "auto" and (previous or {}).get("owner") != "auto":
            why = f"drained by {previous.get('owner')}" if previous else "no auto record"
            return 1, _refused(name, "undrain", why)
        try:
            fleet.haproxy.set_state(server, "ready")
        except HAProxyError as exc:
            return 1, {"replica": name, "action": "undrain", "ok": False, "error": str(exc)}
        records.pop(name, None)
        fleet.store.write("drains.json", records)
    return 0, {"replica": name, "action": "undrain", "ok": True, "previous": previous}


def _refused(replica, action, why):
    return {"replica": replica, "action": action, "ok": False, "refused": why}


# Controller --------------------------------------------------------------------------------


class Metrics:
    """The controller's own registry; prometheus_client is imported only by the daemon."""

    EXTRA_OWNERS = ("unrecorded",)  # drained or in maint in HAProxy with no record: the operator's

    def __init__(self):
        import prometheus_client  # noqa: PLC0415 - only the daemon serves metrics

        self.client = prometheus_client
        self.registry = registry = prometheus_client.CollectorRegistry()

        def gauge(name, doc, labels=()):
            return prometheus_client.Gauge(f"gpufleet_frontdoor_{name}", doc, list(labels), registry=registry)

        gauge("info", "The running controller: 1, labelled", ["version"]).labels(version=__version__).set(1)
        self.haproxy_up = gauge("haproxy_up", "1 when the HAProxy runtime API answered the last poll")
        self.serving = gauge("replica_serving", "HAProxy admin state ready and the server up", ["replica"])
        self.healthy = gauge("replica_healthy", "Every node's health agent says healthy", ["replica"])
        self.drained = gauge("replica_drained", "1 for the owner of the replica's drain", ["replica", "owner"])
        self.blocked = gauge("drain_blocked", "A failing replica left serving by the cap", ["replica", "reason"])
        self.node_healthy = gauge("node_healthy", "The node's health agent says healthy", ["replica", "node"])
        self.last_success = gauge(
            "restart_last_success_timestamp_seconds", "End of the last successful planned restart", ["replica"]
        )
        self.last_failure = gauge(
            "restart_last_failure_timestamp_seconds", "Time of the last failed planned restart", ["replica"]
        )
        self.actions = prometheus_client.Counter(
            "gpufleet_frontdoor_actions", "Actions the controller applied", ["replica", "action"], registry=registry
        )
        self._blocked = set()

    def update(self, view, records, restarts, blocked, haproxy_up):
        self.haproxy_up.set(1 if haproxy_up else 0)
        for name, replica in view.items():
            haproxy = replica["haproxy"]
            self.serving.labels(name).set(1 if haproxy and haproxy["serving"] else 0)
            nodes = replica["nodes"]
            self.healthy.labels(name).set(1 if nodes and all(n["healthy"] is True for n in nodes.values()) else 0)
            for node, state in nodes.items():
                self.node_healthy.labels(name, node).set(1 if state["healthy"] is True else 0)
            owner = (records.get(name) or {}).get("owner")
            if owner is None and haproxy and haproxy["admin"] != "ready":
                owner = "unrecorded"
            for label in OWNERS + self.EXTRA_OWNERS:
                self.drained.labels(name, label).set(1 if label == owner else 0)
            for action in ACTIONS:
                self.actions.labels(name, action)  # every series exists from the start, at 0
            history = restarts.get(name) or {}
            for gauge, key in ((self.last_success, "last_success"), (self.last_failure, "last_failure")):
                if isinstance(history.get(key), (int, float)):
                    gauge.labels(name).set(history[key])
        current = {(name, entry["reason"]) for name, entry in blocked.items()}
        for labels in self._blocked - current:
            self.blocked.remove(*labels)
        for labels in current:
            self.blocked.labels(*labels).set(1)
        self._blocked = current

    def serve(self, address, port):
        registry, client = self.registry, self.client

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = client.generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", client.CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):
                """Prometheus scrapes every few seconds: keep the requests out of the journal."""

        server = ThreadingHTTPServer((address, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        return server


class Controller:
    def __init__(self, fleet, stream=None, metrics=None):
        self.fleet = fleet
        self.stream = stream or sys.stdout
        self.metrics = metrics
        self.memory = None
        self.remediations = {}
        self.haproxy_error = None
        self.store_error = None
        self.blocked = {}
        # Set by the daemon's signal handler: a poll under way then acts on nothing (poll()).
        self.stopping = threading.Event()

    def log(self, message, **fields):
        log(message, self.stream, **fields)

    def poll(self, act=True):
        view, error = self.fleet.view()
        if self.stopping.is_set():
            # Told to stop while observing (the agents' timeout): no drain or undrain after the stop line.
            return {"stopping": True, "actions": [], "applied": []}
        if error != self.haproxy_error:
            self.log("HAProxy unreachable, taking no action" if error else "HAProxy answers", error=error)
            self.haproxy_error = error
        try:
            records, restarts = self.fleet.store.drains(), self.fleet.store.restarts()
            store_error = None
        except StoreError as exc:
            records, restarts, store_error = {}, {}, str(exc)
        if store_error != self.store_error:
            self.log("state unreadable, taking no action" if store_error else "state readable", error=store_error)
            self.store_error = store_error
        actions, memory = decide(view, self.memory, records, self.fleet.config["controller"], time.monotonic())
        if error or store_error:
            actions, memory["blocked"] = [], {}
        self.memory = memory
        for name, entry in memory["blocked"].items():
            if (self.blocked.get(name) or {}).get("reason") != entry["reason"]:
                self.log(
                    "drain blocked", replica=name, action="blocked", reason=entry["reason"], detail=entry["detail"]
                )
        for name in set(self.blocked) - set(memory["blocked"]):
            self.log("drain no longer blocked", replica=name, action="unblocked", reason=self.blocked[name]["reason"])
        self.blocked = memory["blocked"]
        applied = [self.apply(action) for action in actions] if act else []
        if self.metrics:
            self.metrics.update(view, records, restarts, memory["blocked"], error is None)
        return {
            "haproxy_up": error is None,
            "haproxy_error": error,
            "actions": actions,
            "applied": applied,
            "blocked": memory["blocked"],
            "replicas": view,
            "records": records,
            "memory": memory,
        }

    def apply(self, action):
        """Apply one action under the lock, if the record still says what decide() saw."""
        name, verb = action["replica"], action["action"]
        if verb == "remediate":
            return self.remediate(action)
        server = self.fleet.replicas[name]["server"]
        store, haproxy = self.fleet.store, self.fleet.haproxy
        outcome = "done"
        try:
            with store.locked():
                records = store.drains()
                owner = (records.get(name) or {}).get("owner")
                # Someone may have drained it by hand since the poll: that drain is theirs.
                if verb == "drain" and owner is None and (self.fleet.servers()[0][name] or {}).get("admin") == "ready":
                    records[name] = new_record("auto", action["reason"])
                    store.write("drains.json", records)
                    try:
                        haproxy.set_state(server, "drain")
                    except HAProxyError:
                        records.pop(name)
                        store.write("drains.json", records)
                        raise
                elif verb == "undrain" and owner == "auto":
                    haproxy.set_state(server, "ready")
                    records.pop(name)
                    store.write("drains.json", records)
                elif verb == "drop_record" and owner == "auto":
                    records.pop(name)
                    store.write("drains.json", records)
                else:
                    outcome = f"skipped: the record changed (owner now {owner})"
        except (HAProxyError, StoreError, OSError) as exc:
            outcome = f"failed: {exc}"
        self.log(f"{verb} {outcome}", replica=name, action=verb, reason=action["reason"])
        if outcome == "done" and self.metrics:
            self.metrics.actions.labels(name, verb).inc()
        return {**action, "outcome": outcome}

    def remediate(self, action):
        """The planned restart's sequence for one replica, in a thread: polls go on meanwhile.

        The restart takes the record over (owner restart, which decide() leaves alone), so the
        replica is undrained when it serves again, or handed back to automation if it does not.
        It is already out of service, so no other replica needs to be serving (allow_outage).
        """
        name = action["replica"]
        running = self.remediations.get(name)
        if running is not None and running.is_alive():
            outcome = "skipped: a restart of this replica is still running"
        else:
            thread = threading.Thread(target=self._remediate, args=(name,), name=f"remediate-{name}", daemon=True)
            self.remediations[name] = thread
            thread.start()
            outcome = "started"
        self.log(f"remediate {outcome}", replica=name, action="remediate", reason=action["reason"])
        if outcome == "started" and self.metrics:
            self.metrics.actions.labels(name, "remediate").inc()
        return {**action, "outcome": outcome}

    def _remediate(self, name):
        try:
            # One restart at a time, planned or not: a planned one running now has the replica.
            with self.fleet.store.locked("restart.lock", blocking=False):
                code, summary = Restart(self.fleet, stream=self.stream).run([name], allow_outage=True)
        except StoreError as exc:
            code, summary = 1, {"error": f"not restarted: {exc}"}
        self.log("remediate finished" if code == 0 else "remediate failed", replica=name, summary=summary)


def cmd_controller(fleet, args):
    if args.once:
        decision = Controller(fleet, stream=sys.stderr).poll(act=False)
        return 0, decision
    config = fleet.config
    metrics = Metrics()
    controller = Controller(fleet, metrics=metrics)
    signals = []

    def on_signal(signum, _frame):
        # Only noted here: the main thread may be inside a poll that would otherwise go on to drain
        # or undrain and log after the stop line (and a print here may land inside its own print).
        signals.append(signum)
        controller.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = metrics.serve(config["metrics_listen"], config["metrics_port"])
    except OSError as exc:
        return 1, {"error": f"cannot listen on {config['metrics_listen']}:{config['metrics_port']}: {exc}"}
    address, port = server.server_address[:2]
    controller.log(f"watching {len(fleet.replicas)} replicas, metrics on {address}:{port}", port=port)
    interval = config["controller"]["interval"]
    while not controller.stopping.is_set():
        started = time.monotonic()
        controller.poll()
        controller.stopping.wait(max(0.0, interval - (time.monotonic() - started)))
    controller.log(f"stopping on signal {signals[0]}")
    server.shutdown()
    server.server_close()
    return 0, {"stopped": True}


# Planned restart ---------------------------------------------------------------------------


class Skip(Exception):
    """The replica is not this restart's to take (an operator's drain): the next one goes on."""


class Refused(Exception):
    """Restarting the replica would cut the service: nothing was changed, nothing more is done."""


class Failed(Exception):
    def __init__(self, step, message):
        super().__init__(message)
        self.step = step


# The failure when ready_timeout runs out, during the start commands or the wait after them.
NOT_READY = ("ready", "not ready within ready_timeout: ")


def ssh_argv(restart, node, verb):
    """The command line for gpufleet-unit-ctl, the forced command of the node's restart key."""
    return [
        restart["ssh_binary"],
        "-i",
        restart["ssh_key"],
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={restart['ssh_known_hosts']}",
        "-o",
        f"ConnectTimeout={restart['ssh_connect_timeout']}",
        f"{restart['ssh_user']}@{node['ssh_host']}",
        verb,
        node["unit"],
    ]


def restart_order(replicas, restarts, names, every):
    """Names in the order given, or with --all the config order, the oldest last_success first."""
    if not every:
        return list(names)
    order = [replica["name"] for replica in replicas]
    return sorted(order, key=lambda name: (restarts.get(name) or {}).get("last_success") or 0)


class Restart:
    def __init__(self, fleet, stream=None):
        self.fleet = fleet
        self.settings = fleet.config["restart"]
        self.stream = stream or sys.stdout

    def emit(self, replica, step, started, **fields):
        line = {"ts": round(time.time(), 3), "replica": replica, "step": step}
        line["elapsed_s"] = round(time.monotonic() - started, 3)
        line.update(fields)
        print(json.dumps(line), file=self.stream, flush=True)

    def run(self, names, allow_outage):
        summary = {"summary": True, "ok": True, "order": names, "restarted": [], "skipped": {}, "failed": None}
        summary["durations_s"] = {}
        for index, name in enumerate(names):
            started = time.monotonic()
            try:
                try:
                    self.one(name, allow_outage, started)
                except StoreError as exc:
                    raise Failed("state", str(exc)) from None
            except Skip as why:
                summary["skipped"][name] = str(why)
                self.emit(name, "skipped", started, reason=str(why))
                continue
            except (Refused, Failed) as exc:
                step = exc.step if isinstance(exc, Failed) else "check"
                summary.update(ok=False, failed={"replica": name, "step": step, "error": str(exc)})
                summary["not_attempted"] = names[index + 1 :]
                self.emit(name, "failed", started, failed_step=step, error=str(exc))
                self._record_failure(name, step, str(exc), owned=isinstance(exc, Failed))
                break
            summary["restarted"].append(name)
            summary["durations_s"][name] = round(time.monotonic() - started, 3)
        return (0 if summary["ok"] else 1), summary

    def _record_failure(self, name, step, error, owned):
        store = self.fleet.store
        with contextlib.suppress(StoreError, OSError):
            if owned:
                with store.locked():
                    records = store.drains()
                    if (records.get(name) or {}).get("owner") == "restart":
                        # The controller undrains it once every node is healthy again.
                        records[name] = new_record("auto", f"planned restart failed at {step}: {error}")
                        store.write("drains.json", records)
            store.record_restart(name, last_failure=round(time.time(), 3), last_error=f"{step}: {error}")

    def _servers(self, step):
        servers, error = self.fleet.servers()
        if error:
            raise Failed(step, error)
        return servers

    def one(self, name, allow_outage, started):
        replica = self.fleet.replicas[name]
        store, haproxy = self.fleet.store, self.fleet.haproxy
        # (1) Whose is it, and would its drain leave anyone serving?
        servers = self._servers("check")
        mine = servers[name]
        if mine is None:
            raise Failed(
                "check", f"server {replica['server']} is not in HAProxy backend {self.fleet.config['backend']}"
            )
        record = store.drains().get(name)
        if (record or {}).get("owner") == "operator":
            raise Skip(f"drained by the operator: {record.get('reason')}")
        if record is None and mine["admin"] != "ready":
            raise Skip(f"{mine['admin']} in HAProxy without a record: the operator's")
        others = [other for other, view in servers.items() if other != name and view and view["serving"]]
        self.emit(name, "check", started, others_serving=others, allow_outage=allow_outage, haproxy=mine)
        if not others and not allow_outage:
            raise Refused("no other replica is serving (use --allow-outage to restart anyway)")
        # (2) Take it and drain it.
        with store.locked():
            records = store.drains()
            if (records.get(name) or {}).get("owner") == "operator":
                raise Skip(f"drained by the operator: {records[name].get('reason')}")
            records[name] = new_record("restart", "planned restart")
            store.write("drains.json", records)
        try:
            haproxy.set_state(replica["server"], "drain")
        except HAProxyError as exc:
            raise Failed("drain", str(exc)) from None
        self.emit(name, "drain", started, previous_owner=(record or {}).get("owner"))
        # (3) Let the requests in flight finish.
        self.emit(name, "drained", started, **self._wait_drained(replica))
        # (4) Stop: rank 0 (the API) first, then the others together; (5) start them all together.
        nodes = sorted(replica["nodes"], key=lambda node: node["rank"])
        self._stop(name, nodes)
        self.emit(name, "stopped", started, nodes=[node["name"] for node in nodes])
        # ready_timeout counts from the start commands: a start job may wait for the replica's
        # peers (llama-server's ExecStartPre waits for its RPC workers), which is getting ready.
        deadline = time.monotonic() + self.settings["ready_timeout"]
        self._ssh_all("start", nodes, deadline, out_of_time=NOT_READY)
        self.emit(name, "started", started, nodes=[node["name"] for node in nodes])
        # (6) Ready: HAProxy's deep check passes and every agent says healthy.
        self.emit(name, "ready", started, **self._wait_ready(name, deadline))
        # (7) Back in service, unless an operator took the drain over meanwhile.
        with store.locked():
            records = store.drains()
            owner = (records.get(name) or {}).get("owner")
            if owner == "restart":
                try:
                    haproxy.set_state(replica["server"], "ready")
                except HAProxyError as exc:
                    raise Failed("undrain", str(exc)) from None
                records.pop(name)
                store.write("drains.json", records)
        duration = round(time.monotonic() - started, 3)
        store.record_restart(name, last_success=round(time.time(), 3), last_duration_s=duration)
        kept = None if owner == "restart" else f"kept drained: the record is now {owner}'s"
        self.emit(name, "done", started, duration_s=duration, kept_drained=kept)

    def _wait_drained(self, replica):
        timeout, poll = self.settings["drain_timeout"], self.settings["poll_interval"]
        begin = time.monotonic()
        sessions = running = None
        errors = []
        while True:
            servers, error = self.fleet.servers()
            view = servers.get(replica["name"]) if not error else None
            sessions = view["scur"] if view else None
            if error:
                errors.append(error)
            running, why = (0, None)
            if replica["kind"] == "vllm" and replica.get("metrics_url"):
                running, why = requests_running(replica["metrics_url"])
                if why:
                    errors.append(why)
            waited = round(time.monotonic() - begin, 3)
            if sessions == 0 and running == 0:
                return {"waited_s": waited, "timed_out": False, "sessions": 0, "requests_running": 0}
            if waited >= timeout:
                # Go on all the same: a planned restart must not wait forever on a stuck stream.
                last = errors[-1] if errors else None
                return {
                    "waited_s": waited,
                    "timed_out": True,
                    "sessions": sessions,
                    "requests_running": running,
                    "last_error": last,
                }
            time.sleep(poll)

    def _ssh_all(self, verb, nodes, deadline, out_of_time=None):
        """Run verb on the nodes together; Failed(verb) when a command failed.

        out_of_time: (step, prefix) of the failure when every command that did not succeed was cut
        off by the deadline instead: then the step whose timeout that deadline is has failed.
        """
        futures = [(node, self.fleet.pool.submit(self._ssh, verb, node, deadline)) for node in nodes]
        results = [future.result() for _node, future in futures]
        problems = [why for why, _late in results if why]
        if not problems:
            return
        if out_of_time and all(late for why, late in results if why):
            step, prefix = out_of_time
            raise Failed(step, prefix + "; ".join(problems))
        raise Failed(verb, "; ".join(problems))

    def _ssh(self, verb, node, deadline):
        """(why the command failed or None, whether the deadline cut it off)."""
        argv = ssh_argv(self.settings, node, verb)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return f"{verb} {node['unit']} on {node['name']}: no time left", True
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=remaining, check=False)
        except subprocess.TimeoutExpired:
            return f"{verb} {node['unit']} on {node['name']}: no answer within the timeout", True
        except OSError as exc:
            return f"{verb} {node['unit']} on {node['name']}: {exc}", False
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout).strip()[-500:]
            why = f"{verb} {node['unit']} on {node['name']} ({node['ssh_host']}) failed (rc {proc.returncode}): {err}"
            return why, False
        return None, False

    def _stop(self, name, nodes):
        """Rank 0 (the API) first, then the others together; done when HAProxy sees it down."""
        deadline = time.monotonic() + self.settings["stop_timeout"]
        self._ssh_all("stop", nodes[:1], deadline)
        self._ssh_all("stop", nodes[1:], deadline)
        # HAProxy must see it down before "ready" can mean anything: right after a quick stop its
        # last checks (and the agents') still say UP, and an undrain then sends clients to a
        # replica that is only starting (503s, found in the lab).
        self._wait_down(name, deadline)

    def _wait_down(self, name, deadline):
        while True:
            servers, error = self.fleet.servers()
            view = servers.get(name) if not error else None
            if view and not view["up"]:
                return
            if time.monotonic() >= deadline:
                raise Failed("stop", "HAProxy still reports the replica up after its units stopped")
            time.sleep(min(self.settings["poll_interval"], max(0.0, deadline - time.monotonic())))

    def _wait_ready(self, name, deadline):
        begin = time.monotonic()
        while True:
            servers, error = self.fleet.servers()
            view = servers.get(name) if not error else None
            agents = self.fleet.agents([name])[name]
            unhealthy = sorted(node for node, state in agents.items() if state["healthy"] is not True)
            if view and view["up"] and not unhealthy:
                return {"waited_s": round(time.monotonic() - begin, 3), "check_status": view["check_status"]}
            if time.monotonic() >= deadline:
                status = error or (view["status"] if view else "server missing")
                step, prefix = NOT_READY
                raise Failed(step, f"{prefix}HAProxy {status}, not healthy: {unhealthy}")
            time.sleep(min(self.settings["poll_interval"], max(0.0, deadline - time.monotonic())))


def cmd_restart(fleet, args):
    def on_signal(signum, _frame):
        # Stopped mid-way (systemd's TimeoutStartSec=, an operator's systemctl stop): the replica's
        # drain goes to the controller like any failure's, never left as a stale restart record.
        raise Failed("signal", f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        with fleet.store.locked("restart.lock", blocking=False):
            names = restart_order(fleet.config["replicas"], fleet.store.restarts(), args.replicas, args.all)
            return Restart(fleet).run(names, args.allow_outage)
    except StoreError as exc:
        return 1, {"summary": True, "ok": False, "error": str(exc)}


# Configuration -----------------------------------------------------------------------------


class ConfigError(Exception):
    pass


def load_config(path):
    try:
        with open(path) as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(raw).__name__}")
    config = dict(raw)
    for key, defaults in (("controller", DEFAULT_CONTROLLER), ("restart", DEFAULT_RESTART)):
        section = raw.get(key, {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: {key!r} must be an object, found {section!r}")
        config[key] = {**defaults, **section}
    config.setdefault("metrics_listen", "127.0.0.1")
    config.setdefault("metrics_port", 9106)
    problem = next(_config_problems(config), None)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    return config


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _config_problems(config):
    for key in ("haproxy_socket", "backend", "state_dir", "metrics_listen"):
        if not isinstance(config.get(key), str) or not config[key]:
            yield f"{key!r} must be a non-empty string, found {config.get(key)!r}"
    if not _is_int(config["metrics_port"]) or not 0 <= config["metrics_port"] < 65536:
        yield f"'metrics_port' must be a port number, found {config['metrics_port']!r}"
    replicas = config.get("replicas")
    count = len(replicas) if isinstance(replicas, list) and replicas else None
    yield from _frontdoor.config_problems(config["controller"], config["restart"], count)
    restart = config["restart"]
    for key in ("ssh_key", "ssh_known_hosts", "ssh_user", "ssh_binary"):
        if not isinstance(restart[key], str) or not restart[key]:
            yield f"restart {key!r} must be a non-empty string, found {restart[key]!r}"
    yield from _replicas_problems(replicas)


def _replicas_problems(replicas):
    if not isinstance(replicas, list) or not replicas:
        yield f"'replicas' must be a non-empty list, found {replicas!r}"
        return
    for replica in replicas:
        yield from _replica_problems(replica)
    for key in ("name", "server"):
        values = [replica[key] for replica in replicas]
        if len(set(values)) != len(values):
            yield f"replica {key}s must be unique, found {values}"


def _replica_problems(replica):
    if not isinstance(replica, dict) or not all(isinstance(replica.get(key), str) for key in ("name", "server")):
        yield f'each replica must be an object with string "name" and "server", found {replica!r}'
        return
    name = replica["name"]
    if replica.get("kind") not in ("vllm", "llama"):
        yield f"replica {name}: 'kind' must be 'vllm' or 'llama', found {replica.get('kind')!r}"
    url = replica.get("metrics_url")
    if replica.get("kind") == "vllm" and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        yield f"replica {name}: a vllm replica needs 'metrics_url' (vLLM's /metrics), found {url!r}"
    nodes = replica.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        yield f"replica {name}: 'nodes' must be a non-empty list, found {nodes!r}"
        return
    for node in nodes:
        keys = ("name", "agent_url", "ssh_host", "unit")
        if not isinstance(node, dict) or not all(isinstance(node.get(key), str) and node[key] for key in keys):
            yield f"replica {name}: each node needs non-empty strings {', '.join(keys)}, found {node!r}"
            return
        if not _is_int(node.get("rank")) or node["rank"] < 0:
            yield f"replica {name}: node {node['name']} 'rank' must be an integer >= 0, found {node.get('rank')!r}"
    for key in ("name", "rank"):
        values = [node[key] for node in nodes]
        if len(set(values)) != len(values):
            yield f"replica {name}: node {key}s must be unique, found {values}"


# Command line ------------------------------------------------------------------------------


def build_parser():
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"frontdoor.json (default {DEFAULT_CONFIG})")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="every replica's HAProxy state, agents, owner and restarts")
    drain = commands.add_parser("drain", help="drain a replica and record who owns the drain")
    drain.add_argument("replica")
    drain.add_argument("--owner", choices=("operator", "auto"), required=True)
    drain.add_argument("--reason", required=True)
    undrain = commands.add_parser("undrain", help="put a replica back in service")
    undrain.add_argument("replica")
    undrain.add_argument("--owner", choices=("operator", "auto"), required=True)
    controller = commands.add_parser("controller", help="drain failing replicas, undrain recovered ones")
    controller.add_argument("--once", action="store_true", help="poll once, print the decision, act on nothing")
    restart = commands.add_parser("restart", help="the planned restart, one replica at a time")
    restart.add_argument("replicas", nargs="*", metavar="REPLICA")
    restart.add_argument("--all", action="store_true", help="every replica, the least recently restarted first")
    restart.add_argument("--allow-outage", action="store_true", help="restart even the last serving replica")
    return parser


COMMANDS = {
    "status": cmd_status,
    "drain": cmd_drain,
    "undrain": cmd_undrain,
    "controller": cmd_controller,
    "restart": cmd_restart,
}


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "restart" and bool(args.replicas) == bool(args.all):
        parser.error("restart needs either REPLICA names or --all")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    known = [replica["name"] for replica in config["replicas"]]
    for name in [getattr(args, "replica", None), *getattr(args, "replicas", [])]:
        if name is not None and name not in known:
            parser.error(f"unknown replica {name!r}; the config has {', '.join(known)}")
    fleet = Fleet(config)
    try:
        rc, result = COMMANDS[args.command](fleet, args)
    except StoreError as exc:
        rc, result = 1, {"ok": False, "error": str(exc)}
    finally:
        fleet.close()
    print(json.dumps(result, sort_keys=True))
    return rc


if __name__ == "__main__":
    sys.exit(main())
