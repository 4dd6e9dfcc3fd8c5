# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart every node of a multi-host vLLM replica when any one of its nodes restarts.

Why: a replica split over N hosts (mp backend: rank 0 runs `vllm serve` with the API, ranks > 0
run `vllm serve --headless`) is one failure domain, but systemd sees N independent units. When
the leader dies, a headless node does not exit (it spins on TCPStore errors); a leader restarted
alone hangs waiting for its peers; when a headless node dies, the leader may not notice until a
request hangs. Restart=always on each unit brings back the process that died, never its peers.
One guard per node (its own unit, outside the vLLM unit's cgroup) closes that gap.

Protocol: each guard polls its own unit (`systemctl show`: InvocationID, ActiveState,
ActiveEnterTimestamp), the other guards of the replica (GET /state) and, on the leader, vLLM's
/health. Each run of a unit has a new InvocationID (systemd.exec(5), $INVOCATION_ID), so
"a peer restarted" is "a peer's InvocationID changed". Two orderings keep the views consistent:
a follower's /state changes only after its guard has decided on a poll, so the leader never sees
a new follower run before that run's guard knows which leader run it belongs to; the leader's
/state reads its unit at each request, so a follower never joins a leader run already gone.

- A follower joins the first active leader run it sees (its /state says `joined`). When the
  leader later shows another InvocationID, the follower's vLLM belongs to a dead run: restart.
- The leader records each follower run that has joined it. From its first ready /health on, a
  recorded follower that shows another InvocationID, or is down or unreachable for longer than
  peer_down_grace, means the replica is broken: restart. Follower restarts before that are the
  followers rejoining and change nothing. Not ready start_deadline seconds after the leader's
  unit started: restart.
- Restart is `systemctl kill --signal=SIGKILL UNIT`; Restart=always starts a new run. After one
  restart a guard issues none until its unit's InvocationID changes, so a slow stop is no storm.
- Everything a guard remembers belongs to one run of its own unit and is forgotten with it.

So a dead leader costs one restart of each follower; a dead follower costs one leader restart
and one restart of each follower; a planned restart of all units costs none.

All policy is in decide(), a pure function; the rest is I/O. `--once` polls once and prints the
decision as JSON without acting on it (and without serving /state).
"""

import argparse
import http.client
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpufleet_agents import __version__

NAME = "gpufleet-vllm-guard"
PROPERTIES = "InvocationID,ActiveState,SubState,ActiveEnterTimestampMonotonic,ActiveEnterTimestamp"
# An InvocationID is only meaningful while systemd holds a run of the unit.
STOPPED_STATES = ("inactive", "failed", "")
DEFAULTS = {"health_url": None, "interval": 2.0, "start_deadline": 1800.0, "peer_down_grace": 30.0}
PEER_TIMEOUT = 1.0
HEALTH_TIMEOUT = 2.0  # vLLM answers /health from its API event loop, which a busy server delays


# Policy ------------------------------------------------------------------------------------


def new_memory(invocation):
    return {
        "invocation": invocation,
        "restarted": False,
        "leader": None,
        "ready_at": None,
        "followers": {},
        "down_since": {},
    }


def usable(peer):
    """A peer whose unit is running with a known InvocationID; None (unknown) is not."""
    return bool(peer) and peer.get("active") == "active" and bool(peer.get("invocation"))


def decide(me, peers, memory, now):
    """Return (action, memory, reason); action is "none" or "restart". Inputs are not modified.

    me: this node: {"rank", "invocation", "active", "started" (monotonic s or None), "ready",
        "start_deadline", "peer_down_grace"}, or None when its unit could not be read (nothing changes).
    peers: {rank: the peer's /state dict, or None when unknown}, every other node of the replica.
    memory: what the previous call returned (None or {} to start), JSON-serialisable.
    now: monotonic seconds, the same clock as me["started"].
    """
    if me is None:
        return "none", memory, "own unit state unknown"
    if not memory or memory.get("invocation") != me["invocation"]:
        memory = new_memory(me["invocation"])
    else:
        memory = json.loads(json.dumps(memory))
        memory["followers"] = {int(k): v for k, v in memory["followers"].items()}
        memory["down_since"] = {int(k): v for k, v in memory["down_since"].items()}
    if not usable(me):
        return "none", memory, f"unit {me['active'] or 'unknown'}"
    if memory["restarted"]:
        return "none", memory, "restart issued, waiting for a new run"
    if me["rank"] == 0:
        action, reason = _decide_leader(me, peers, memory, now)
    else:
        action, reason = _decide_follower(peers, memory)
    if action == "restart":
        memory["restarted"] = True
    return action, memory, reason


def _decide_follower(peers, memory):
    leader = peers.get(0)
    if leader is None:
        return "none", "leader unknown"
    if not usable(leader):
        return "none", f"leader {leader['active'] or 'unknown'}"
    old, new = memory["leader"], leader["invocation"]
    if old is None:
        memory["leader"] = new
        return "none", f"joined leader {new}"
    if new != old:
        return "restart", f"leader restarted: {old} -> {new}"
    return "none", f"following leader {old}"


def _joined(peer, me):
    return usable(peer) and peer.get("joined") == me["invocation"]


def _decide_leader(me, peers, memory, now):
    recorded = memory["followers"]
    if memory["ready_at"] is None:
        if not me["ready"]:
            # Followers restart to rejoin us: keep the latest run of each that has joined.
            for rank, peer in peers.items():
                if _joined(peer, me):
                    recorded[rank] = peer["invocation"]
            started = me.get("started")
            if started is not None and now - started > me["start_deadline"]:
                return "restart", f"replica not ready {now - started:.0f} s after start"
            return "none", "waiting for ready"
        # This poll's peers may already show a follower's next run: compare them, do not record them.
        memory["ready_at"] = now
    problems = [_check_follower(rank, peers[rank], me, memory, now) for rank in sorted(peers)]
    problems = [problem for problem in problems if problem]
    if problems:
        return "restart", problems[0]
    missing = sorted(set(peers) - set(recorded))
    if missing:
        return "none", f"ready, waiting for rank {_ranks(missing)} to join"
    if memory["down_since"]:
        return "none", f"ready, rank {_ranks(memory['down_since'])} down"
    return "none", "ready"


def _check_follower(rank, peer, me, memory, now):
    """Why a follower breaks the ready replica, or None."""
    recorded = memory["followers"]
    if rank not in recorded:
        # Not seen before ready (this guard restarted, or its guard was away): watch it from its join.
        if _joined(peer, me):
            recorded[rank] = peer["invocation"]
        return None
    if usable(peer):
        memory["down_since"].pop(rank, None)
        if peer["invocation"] != recorded[rank]:
            return f"rank {rank} restarted: {recorded[rank]} -> {peer['invocation']}"
        return None
    down_since = memory["down_since"].setdefault(rank, now)
    if now - down_since > me["peer_down_grace"]:
        return f"rank {rank} down for {now - down_since:.0f} s"
    return None


def _ranks(ranks):
    return ", ".join(str(rank) for rank in sorted(ranks))


# systemd -----------------------------------------------------------------------------------


def parse_show(text):
    """Parse `systemctl show` KEY=VALUE lines into a dict; values may contain '='."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def unit_state(values, realtime_now, monotonic_now):
    """The unit part of /state, and its start on the monotonic clock, from parse_show() values."""
    active = values.get("ActiveState", "")
    invocation = "" if active in STOPPED_STATES else values.get("InvocationID", "")
    try:
        monotonic_us = int(values.get("ActiveEnterTimestampMonotonic") or 0)
    except ValueError:
        monotonic_us = 0
    since = 0
    stamp = values.get("ActiveEnterTimestamp", "")
    if stamp.startswith("@"):  # --timestamp=unix
        try:
            since = int(float(stamp[1:]) * 1000000)
        except ValueError:
            since = 0
    if not since and monotonic_us:
        # systemd's monotonic timestamps are CLOCK_MONOTONIC, as is time.monotonic() on Linux.
        since = int(realtime_now * 1000000 - monotonic_now * 1000000 + monotonic_us)
    state = {
        "invocation": invocation,
        "active": active,
        "sub": values.get("SubState", ""),
        "since": since if active not in STOPPED_STATES else 0,
    }
    started = monotonic_us / 1000000.0 if monotonic_us and invocation else None
    return state, started


class Systemctl:
    def __init__(self, path, unit):
        self.path = path
        self.unit = unit
        self.unix_timestamps = True

    def show(self):
        """parse_show() of the unit, or None with a message when systemctl fails."""
        argv = [self.path, "show", self.unit, "--property=" + PROPERTIES]
        proc = self._run([*argv, "--timestamp=unix"] if self.unix_timestamps else argv)
        if proc.returncode != 0 and self.unix_timestamps and "timestamp" in proc.stderr:
            # systemd < 248 has no --timestamp; the monotonic timestamp gives `since` instead.
            self.unix_timestamps = False
            proc = self._run(argv)
        if proc.returncode != 0:
            return None, f"systemctl show {self.unit} failed (rc {proc.returncode}): {proc.stderr.strip()}"
        return parse_show(proc.stdout), None

    def kill(self):
        proc = self._run([self.path, "kill", "--signal=SIGKILL", self.unit])
        if proc.returncode != 0:
            return f"systemctl kill {self.unit} failed (rc {proc.returncode}): {proc.stderr.strip()}"
        return None

    def _run(self, argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return subprocess.CompletedProcess(argv, -1, "", str(exc))


# Peers and health --------------------------------------------------------------------------


# Peers and vLLM are on the replica's own network: never through an environment's HTTP proxy.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_peer(peer, replica, timeout=PEER_TIMEOUT):
    """A peer's /state, or (None, why) when it does not answer with a valid one."""
    url = f"http://{_host(peer['address'])}:{peer['port']}/state"
    try:
        with OPENER.open(url, timeout=timeout) as response:
            body = response.read(65536)
        state = json.loads(body.decode("utf-8"))
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # URLError and timeouts are OSError; a peer answering garbage raises HTTPException or ValueError.
        return None, f"{url}: {exc}"
    if not isinstance(state, dict):
        return None, f"{url}: not a JSON object"
    for key, kind in (("invocation", str), ("active", str)):
        if not isinstance(state.get(key), kind):
            return None, f"{url}: {key!r} is not a {kind.__name__}"
    if state.get("replica") != replica or state.get("rank") != peer["rank"]:
        found = f"replica {state.get('replica')!r} rank {state.get('rank')!r}"
        return None, f"{url}: answers for {found}, expected replica {replica!r} rank {peer['rank']!r}"
    if state.get("joined") is not None and not isinstance(state["joined"], str):
        state["joined"] = None
    return state, None


def check_health(url, timeout=HEALTH_TIMEOUT):
    try:
        with OPENER.open(url, timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError, http.client.HTTPException):
        # urlopen raises HTTPError (an OSError) for anything but 2xx: not ready.
        return False


def _host(address):
    return f"[{address}]" if ":" in address else address


# Daemon ------------------------------------------------------------------------------------


class Guard:
    def __init__(self, config, systemctl, stream=None):
        self.config = config
        self.stream = stream or sys.stdout
        # Set by the daemon's signal handler: a poll under way then acts on nothing (poll()).
        self.stopping = threading.Event()
        self.systemctl = Systemctl(systemctl, config["unit"])
        self.memory = None
        self.peer_errors = {}
        self.last_reason = None
        self.last_unit = None
        self._lock = threading.Lock()
        self._state = self._publish({"invocation": "", "active": "", "since": 0}, None, None)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(config["peers"]) + 1))

    def log(self, message):
        prefix = f"{NAME}[replica {self.config['replica']} rank {self.config['rank']}]"
        print(f"{prefix}: {message}", file=self.stream, flush=True)

    def state(self):
        state = self.published()
        if self.config["rank"] == 0:
            # Live: a follower that just started must not join the leader run of a stale snapshot.
            values, _error = self.systemctl.show()
            if values is not None:
                unit, _started = unit_state(values, time.time(), time.monotonic())
                state.update(invocation=unit["invocation"], active=unit["active"], since=unit["since"])
        return state

    def _publish(self, unit, ready, joined):
        return {
            "replica": self.config["replica"],
            "rank": self.config["rank"],
            "unit": self.config["unit"],
            "invocation": unit["invocation"],
            "active": unit["active"],
            "since": unit["since"],
            "ready": ready if self.config["rank"] == 0 else None,
            "joined": joined if self.config["rank"] != 0 else None,
        }

    def observe(self):
        """One poll of the unit, the peers and vLLM's health: (me, peers, unit)."""
        values, error = self.systemctl.show()
        if values is None:
            self.log(error)
            return None, {}, None
        unit, started = unit_state(values, time.time(), time.monotonic())
        futures = {
            peer["rank"]: self._pool.submit(fetch_peer, peer, self.config["replica"]) for peer in self.config["peers"]
        }
        health = None
        if self.config["rank"] == 0 and unit["invocation"]:
            health = self._pool.submit(check_health, self.config["health_url"])
        peers = {}
        for peer in self.config["peers"]:
            state, why = futures[peer["rank"]].result()
            peers[peer["rank"]] = state
            if why != self.peer_errors.get(peer["rank"]):
                self.log(f"rank {peer['rank']} unknown: {why}" if why else f"rank {peer['rank']} answers")
                self.peer_errors[peer["rank"]] = why
        ready = None
        if self.config["rank"] == 0:
            ready = health.result() if health else False
        me = {
            "rank": self.config["rank"],
            "invocation": unit["invocation"],
            "active": unit["active"],
            "started": started,
            "ready": ready,
            "start_deadline": self.config["start_deadline"],
            "peer_down_grace": self.config["peer_down_grace"],
        }
        return me, peers, unit

    def poll(self, act=True):
        me, peers, unit = self.observe()
        action, memory, reason = decide(me, peers, self.memory, time.monotonic())
        if self.stopping.is_set():
            # Told to stop while observing (a poll takes up to the peers' timeout): this poll's
            # decision is neither acted on, logged nor published, so the stop line stays the last.
            state = self.published()
            return {"action": "none", "reason": "stopping", "state": state, "peers": peers, "memory": self.memory}
        if unit is not None:
            shown = (unit["active"], unit["invocation"])
            if shown != self.last_unit:
                run = f", run {unit['invocation']}" if unit["invocation"] else ""
                self.log(f"{self.config['unit']} is {unit['active']} ({unit['sub']}){run}")
                self.last_unit = shown
        if action == "restart" and act:
            self.log(f"restarting {self.config['unit']}: {reason}")
            error = self.systemctl.kill()
            if error:
                # Keep the old memory: no cooldown for a kill that did not happen, try again next poll.
                self.log(error)
                memory = self.memory
        elif reason != self.last_reason:
            self.log(reason)
        self.last_reason = reason
        self.memory = memory
        if unit is not None:
            with self._lock:
                self._state = self._publish(unit, me["ready"], (memory or {}).get("leader"))
        return {"action": action, "reason": reason, "state": self.published(), "peers": peers, "memory": memory}

    def published(self):
        """What /state says, as the last poll left it (the leader's reads its unit again: state())."""
        with self._lock:
            return dict(self._state)

    def close(self):
        self._pool.shutdown(wait=False)


class Handler(BaseHTTPRequestHandler):
    guard = None

    def do_GET(self):
        if urllib.parse.urlsplit(self.path).path != "/state":
            self._send(404, {"error": "not found"})
            return
        # The guard's own version rides along; peers read only the keys they know.
        self._send(200, dict(self.guard.state(), version=__version__))

    def do_HEAD(self):
        self._send(404, None)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD

    def _send(self, code, body):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format, *args):
        """Peers poll every few seconds: keep requests out of the journal."""


def serve(guard, address, port):
    handler = type("GuardHandler", (Handler,), {"guard": guard})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return server


# Configuration -----------------------------------------------------------------------------


def load_config(path):
    """The guard's JSON config with defaults filled in; SystemExit with one line when invalid."""
    try:
        with open(path) as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{NAME}: cannot read config {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise SystemExit(f"{NAME}: {path}: expected a JSON object, found {type(raw).__name__}")
    config = dict(DEFAULTS)
    config.update(raw)
    problem = next(_config_problems(config), None)
    if problem:
        raise SystemExit(f"{NAME}: {path}: {problem}")
    return config


def _config_problems(config):
    """Yield what is wrong, in order; load_config reports the first (later checks rely on earlier)."""
    for key in ("replica", "unit"):
        if not isinstance(config.get(key), str) or not config[key]:
            yield f"{key!r} must be a non-empty string, found {config.get(key)!r}"
    if not _is_int(config.get("rank")) or config["rank"] < 0:
        yield f"'rank' must be an integer >= 0, found {config.get('rank')!r}"
    for key in ("interval", "start_deadline", "peer_down_grace"):
        if not isinstance(config[key], (int, float)) or isinstance(config[key], bool) or config[key] <= 0:
            yield f"{key!r} must be a number of seconds > 0, found {config[key]!r}"
    if not _is_endpoint(config.get("listen")):
        yield f'\'listen\' must be {{"address": IP, "port": PORT}}, found {config.get("listen")!r}'
    peers = config.get("peers")
    if not isinstance(peers, list) or not all(_is_endpoint(peer) and _is_int(peer.get("rank")) for peer in peers):
        yield f'\'peers\' must be a list of {{"rank", "address", "port"}}, found {peers!r}'
    ranks = [peer["rank"] for peer in peers]
    if len(set(ranks)) != len(ranks) or config["rank"] in ranks:
        yield f"'peers' must list every other rank once, found ranks {ranks} for rank {config['rank']}"
    url = config["health_url"]
    if config["rank"] == 0 and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        yield f"rank 0 needs 'health_url' (vLLM's /health URL), found {url!r}"
    if config["rank"] != 0 and 0 not in ranks:
        yield f"rank {config['rank']} needs the leader (rank 0) in 'peers', found ranks {ranks}"


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_endpoint(value):
    return (
        isinstance(value, dict)
        and isinstance(value.get("address"), str)
        and _is_int(value.get("port"))
        and 0 <= value["port"] < 65536
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", required=True, help="guard.json of this node")
    parser.add_argument("--systemctl", default="/usr/bin/systemctl")
    parser.add_argument("--once", action="store_true", help="poll once, print the decision as JSON, act on nothing")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    # --once keeps stdout for the JSON decision.
    guard = Guard(config, args.systemctl, sys.stderr if args.once else sys.stdout)
    if args.once:
        decision = guard.poll(act=False)
        guard.close()
        print(json.dumps(decision, sort_keys=True))
        return 0
    signals = []

    def on_signal(signum, _frame):
        # Only noted here: the handler runs between two statements of the main thread, which may
        # be inside a poll that would otherwise go on to act and log after the stop line (and a
        # print here may land inside the main thread's own print).
        signals.append(signum)
        guard.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    address, port = config["listen"]["address"], config["listen"]["port"]
    try:
        server = serve(guard, address, port)
    except OSError as exc:
        raise SystemExit(f"{NAME}: cannot listen on {address}:{port}: {exc}") from None
    guard.log(f"watching {config['unit']}, serving /state on {address}:{server.server_address[1]}")
    while not guard.stopping.is_set():
        started = time.monotonic()
        guard.poll()
        guard.stopping.wait(max(0.0, config["interval"] - (time.monotonic() - started)))
    guard.log(f"stopping on signal {signals[0]}")
    server.shutdown()
    server.server_close()
    guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
