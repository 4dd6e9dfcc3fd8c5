# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Health agent of a serving node: GPUs, the engine, NCCL errors and a fabric ping mesh.

Serves GET /metrics (Prometheus text, gpufleet_health_*) and GET /health (JSON; HTTP 200 when
healthy, 503 when not) on listen_address:port. The front door reads /health of every node of a
replica and drains the replica when one node is unhealthy.

Checks (each can be disabled in the config, with the reason shown in /health):
- gpu: `nvidia-smi -q -x` (parsed by _gpu, the collection's module_utils/_gpu.py):
  the GPU count against expected_count (else against the NVIDIA GPUs on the PCI bus, from
  sysfs), volatile uncorrectable ECC errors (any is bad: NVIDIA's Xid catalogue,
  https://docs.nvidia.com/deploy/xid-errors/, asks for a GPU reset after one), and new kernel
  journal lines `NVRM: Xid (PCI:0000:61:00): 79, ...`, counted per Xid; a new Xid of a fatal
  class (fatal_xids) is bad for the interval it appeared in (the lasting damage, a lost GPU or
  ECC errors, stays visible in nvidia-smi).
- engine (rank 0): a 1-token completion, POST {url}/v1/completions with the API key; bad on a
  connection error, a timeout, a non-200 answer or an answer without choices. With deep_every
  N > 1 only every Nth probe is the completion and the others are GET {url}/health (the API
  process and its engine's error state, not a forward pass); after a failed completion every
  probe is a completion until one passes, so the cheap probes never hide a wedged engine.
- journal: new lines of the serving unit's journal that match NCCL failure patterns.
- ping: ICMP echo from the fabric address to every fabric peer every interval_ms over one raw
  socket; a probe unanswered after timeout_ms is lost. A peer is lost after loss_threshold
  consecutive losses and back after rise consecutive replies. Bad when a peer of the same
  replica is lost, or when every peer is lost while there are at least two (with one peer, its
  own failure and this node's link look the same).

Hysteresis: a check turns failing after `fall` consecutive bad results and ok again after `rise`
consecutive good ones. A fresh agent starts every enabled check as ok ("starting"), so a restart
of the agents does not drain the cluster; a broken node still fails within `fall` results.
A check that cannot run (nvidia-smi or journalctl fails) gives a bad result: it proves nothing.

Journals are read incrementally with cursors (`journalctl -o json --after-cursor`), which
neither skip nor repeat lines across clock changes, from the end of the journal at start.
`--once` runs every enabled check once (result taken as the state, no hysteresis; the journal
checks read the last `interval` seconds) and prints /health's JSON: exit 0 healthy, 1 not.

Policy (hysteresis_step, peer_step, ping_verdict, verdict, gpu_verdict, ...) is pure; the rest
is I/O.
"""

import argparse
import http.client
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# _health_agent_config: agent.json's keys, defaults, limits and check, the collection's module_utils
# file whose limits the health_agent role's rules use too.
from gpufleet_agents import __version__, _gpu
from gpufleet_agents._health_agent_config import CHECKS, normalize_config

try:
    import prometheus_client
except ImportError:  # reported by main(); the pure functions work without it
    prometheus_client = None

NAME = "gpufleet-health-agent"
# The NVIDIA driver's kernel message: "NVRM: Xid (PCI:0000:61:00): 79, pid=1234, name=python3,
# GPU has fallen off the bus." (https://docs.nvidia.com/deploy/xid-errors/). Old drivers omit "PCI:".
# On a GPU in MIG mode the driver names the instance inside the parentheses: "(PCI:0000:01:00
# GPU-I:05)" or "(PCI:0000:01:00 GPU-I:05 GPU-CI:02)" (krcReportXid, open-gpu-kernel-modules).
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?: GPU-I:\d+)?(?: GPU-CI:\d+)?\): (\d+),"
)
NVIDIA_VENDOR = 0x10DE
PCI_DISPLAY_CLASS = 0x03  # VGA (0x0300) and 3D (0x0302) controllers
SMI_TIMEOUT = 20.0  # nvidia-smi hangs on a wedged GPU; that is a bad result, not a stuck agent
JOURNAL_TIMEOUT = 30.0
REASON_LIMIT = 300


# Policy: hysteresis and verdicts -----------------------------------------------------------


def new_check_state(now, enabled=True, reason_disabled=""):
    """The state of a check before its first result: ok ("starting") or disabled."""
    if not enabled:
        return {"state": "disabled", "reason": reason_disabled or "disabled", "since": now, "bad": 0, "good": 0}
    return {"state": "ok", "reason": "starting: no result yet", "since": now, "bad": 0, "good": 0, "last_bad": ""}


def hysteresis_step(state, good, reason, fall, rise, now):
    """The state after one result (good: bool, reason: what the probe found). Input unchanged.

    ok -> failing after `fall` consecutive bad results, failing -> ok after `rise` consecutive
    good ones; `since` is the time of the last transition. A disabled check never changes.
    """
    new = dict(state)
    if state["state"] == "disabled":
        return new
    if good:
        new["good"], new["bad"] = state["good"] + 1, 0
        if state["state"] == "failing" and new["good"] < rise:
            new["reason"] = f"{new['good']} of {rise} good results, last bad: {state.get('last_bad', '')}"
            return new
        if state["state"] == "failing":
            new["state"], new["since"] = "ok", now
        new["reason"] = reason
        return new
    new["bad"], new["good"], new["last_bad"] = state["bad"] + 1, 0, reason
    if state["state"] == "ok" and new["bad"] < fall:
        new["reason"] = f"{new['bad']} of {fall} bad results: {reason}"
        return new
    if state["state"] == "ok":
        new["state"], new["since"] = "failing", now
    new["reason"] = reason
    return new


def verdict(checks):
    """(healthy, failing check names): healthy when no enabled check is failing."""
    failing = sorted(name for name, state in checks.items() if state["state"] == "failing")
    return not failing, failing


def new_peer_state(now):
    """A peer starts up, like a check starts ok: it is lost only after loss_threshold losses."""
    return {"up": True, "losses": 0, "replies": 0, "since": now}


def peer_step(peer, replied, loss_threshold, rise, now):
    """The peer state after one probe outcome (replied in time or lost). Input unchanged."""
    new = dict(peer)
    if replied:
        new["replies"], new["losses"] = peer["replies"] + 1, 0
        if not peer["up"] and new["replies"] >= rise:
            new["up"], new["since"] = True, now
    else:
        new["losses"], new["replies"] = peer["losses"] + 1, 0
        if peer["up"] and new["losses"] >= loss_threshold:
            new["up"], new["since"] = False, now
    return new


def ping_verdict(peers, states):
    """(good, reason, lost_peers {name: since}) over the peer list and their peer_step states."""
    if not peers:
        return True, "no fabric peers to probe", {}
    lost = {peer["name"]: states[peer["name"]]["since"] for peer in peers if not states[peer["name"]]["up"]}
    same = [peer["name"] for peer in peers if peer["same_replica"] and peer["name"] in lost]
    if len(peers) >= 2 and len(lost) == len(peers):
        return False, f"every fabric peer is lost ({len(peers)}): this node's own fabric link or address", lost
    if same:
        return False, f"fabric peer(s) of this replica lost: {', '.join(sorted(same))}", lost
    reason = f"{len(peers) - len(lost)} of {len(peers)} fabric peers answer"
    if lost:
        reason += f"; lost, of other replicas: {', '.join(sorted(lost))}"
    return True, reason, lost


def parse_xid(line):
    """(pci address, xid) of an `NVRM: Xid (PCI:0000:61:00): 79, ...` kernel message, else None.

    A MIG instance's Xid counts against its GPU: the agent drains the node, not an instance."""
    match = XID_LINE.search(line or "")
    return (match.group(1).lower(), int(match.group(2))) if match else None


def gpu_verdict(info, expected_count, pci_count, xid_events, fatal_xids):
    """(good, reason, ecc_total) from parse_smi_xml's result and the new Xid events [(pci, xid)].

    expected_count None compares against pci_count, the NVIDIA GPUs on the PCI bus (None: unknown).
    """
    problems = []
    count = len(info["gpus"])
    wanted = expected_count if expected_count is not None else pci_count
    if wanted is not None and count != wanted:
        origin = "expected" if expected_count is not None else "on the PCI bus"
        problems.append(f"nvidia-smi sees {count} GPU(s), {wanted} {origin}")
    ecc = [gpu for gpu in info["gpus"] if (gpu.get("ecc_uncorrectable_volatile_total") or 0) > 0]
    ecc_total = sum(gpu.get("ecc_uncorrectable_volatile_total") or 0 for gpu in info["gpus"])
    if ecc:
        problems.append(
            "volatile uncorrectable ECC errors: "
            + ", ".join(f"{gpu['pci_bus_id']} {gpu['ecc_uncorrectable_volatile_total']}" for gpu in ecc)
            + " (reset the GPU)"
        )
    fatal = sorted({(pci, xid) for pci, xid in xid_events if xid in fatal_xids})
    if fatal:
        problems.append("fatal Xid " + ", ".join(f"{xid} on {pci}" for pci, xid in fatal))
    if problems:
        return False, "; ".join(problems), ecc_total
    seen = f" ({len(xid_events)} new non-fatal Xid)" if xid_events else ""
    return True, f"{count} GPU(s), no uncorrectable ECC errors{seen}", ecc_total


def journal_verdict(messages, patterns, unit):
    """(good, reason, matching lines) over the new messages of the unit's journal."""
    matching = [message for message in messages if any(pattern.search(message) for pattern in patterns)]
    if matching:
        return (
            False,
            f"{len(matching)} new line(s) of {unit} match NCCL failure patterns, last: {matching[-1].strip()}",
            matching,
        )
    return True, f"no new NCCL failure lines in {unit} ({len(messages)} new lines)", matching


def completion_verdict(status, body):
    """(good, reason) of the engine's answer to the 1-token completion."""
    if status != 200:
        return False, f"HTTP {status}: {_short(body)}"
    try:
        answer = json.loads(body)
    except ValueError:
        return False, f"HTTP 200 but not JSON: {_short(body)}"
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices:
        return False, f"HTTP 200 but no choices in the answer: {_short(body)}"
    return True, "1-token completion answered"


def _short(text, limit=REASON_LIMIT):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ICMP echo ---------------------------------------------------------------------------------

ICMP_ECHO_REPLY = 0
ICMP_ECHO_REQUEST = 8
PAYLOAD = b"gpufleet-health"


def icmp_checksum(data):
    """The Internet checksum (RFC 1071): one's complement of the one's-complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pack_echo_request(ident, seq, payload=PAYLOAD):
    """An ICMP echo request (RFC 792): type 8, code 0, checksum, identifier, sequence, data."""
    header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident & 0xFFFF, seq & 0xFFFF)
    checksum = icmp_checksum(header + payload)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, checksum, ident & 0xFFFF, seq & 0xFFFF) + payload


def parse_echo_reply(packet):
    """(ident, seq, payload) of an IPv4 packet holding a valid ICMP echo reply, else None.

    A raw IPPROTO_ICMP socket receives the IPv4 header too (raw(7)), and every ICMP message the
    host gets, including other programs' replies and, on loopback, the requests themselves.
    """
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    header_length = (packet[0] & 0x0F) * 4
    if header_length < 20 or packet[9] != socket.IPPROTO_ICMP or len(packet) < header_length + 8:
        return None
    message = packet[header_length:]
    kind, code, _checksum, ident, seq = struct.unpack("!BBHHH", message[:8])
    if kind != ICMP_ECHO_REPLY or code != 0 or icmp_checksum(message) != 0:
        return None
    return ident, seq, message[8:]


class Pinger:
    """One raw socket, one probe per peer every interval; each probe ends as a reply or a loss."""

    def __init__(self, config, on_outcome, on_error, clock=time.monotonic):
        self.config = config
        self.peers = config["peers"]
        self.on_outcome = on_outcome  # (peer name, replied, rtt seconds or None)
        self.on_error = on_error  # (message) when the socket cannot be used
        self.clock = clock
        self.ident = os.getpid() & 0xFFFF
        self.seq = 0
        self.outstanding = {}  # seq -> (peer, sent at, deadline)
        self.sock = None

    def open(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        try:
            if self.config["source_address"]:
                sock.bind((self.config["source_address"], 0))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send_round(self, now):
        timeout = self.config["timeout_ms"] / 1000.0
        for peer in self.peers:
            self.seq = (self.seq + 1) & 0xFFFF
            self.outstanding[self.seq] = (peer, now, now + timeout)
            try:
                self.sock.sendto(pack_echo_request(self.ident, self.seq), (peer["address"], 0))
            except OSError:
                pass  # unreachable, no route, no buffer: the probe is lost at its deadline
            self.on_sent(peer["name"])

    def on_sent(self, name):
        """Hook for the sent counter."""

    def expire(self, now):
        for seq in sorted(seq for seq, (_peer, _sent, deadline) in self.outstanding.items() if deadline <= now):
            peer = self.outstanding.pop(seq)[0]
            self.on_outcome(peer["name"], False, None)

    def receive(self, now):
        while True:
            try:
                packet, source = self.sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            reply = parse_echo_reply(packet)
            if reply is None or reply[0] != self.ident or reply[2] != PAYLOAD:
                continue
            probe = self.outstanding.get(reply[1])
            if probe is None or probe[0]["address"] != source[0]:
                continue  # a late reply, already counted lost, or an answer from another address
            del self.outstanding[reply[1]]
            self.on_outcome(probe[0]["name"], True, now - probe[1])

    def run(self, stop, duration=None):
        """Probe until stop is set, or for `duration` seconds (then wait out the last probes)."""
        interval = self.config["interval_ms"] / 1000.0
        start = self.clock()
        next_send = start
        while not stop.is_set():
            now = self.clock()
            # Replies waiting in the socket first: one that came before its deadline is not lost
            # because this thread ran late (a busy host) and reached the deadline before the socket.
            self.receive(now)
            sending = duration is None or now - start < duration
            if not sending and not self.outstanding:
                return
            if sending and now >= next_send:
                self.send_round(now)
                next_send = next_send + interval if now - next_send < interval else now + interval
            self.expire(now)
            events = [next_send] if sending else []
            events += [deadline for _peer, _sent, deadline in self.outstanding.values()]
            wait = max(0.0, min(events) - self.clock()) if events else interval
            readable, _w, _x = select.select([self.sock], [], [], min(wait, 1.0))
            if readable:
                self.receive(self.clock())


# I/O: nvidia-smi, sysfs, journal, engine -----------------------------------------------------


def count_pci_gpus(sysfs_root):
    """NVIDIA VGA/3D controllers under <sysfs_root>/bus/pci/devices; None when sysfs is unreadable."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        names = os.listdir(base)
    except OSError:
        return None
    count = 0
    for name in names:
        try:
            with open(os.path.join(base, name, "vendor")) as handle:
                vendor = int(handle.read().strip(), 16)
            with open(os.path.join(base, name, "class")) as handle:
                pci_class = int(handle.read().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor == NVIDIA_VENDOR and pci_class >> 16 == PCI_DISPLAY_CLASS:
            count += 1
    return count


def run_command(argv, timeout):
    """(rc, stdout, stderr); rc None with the error in stderr when it could not run or timed out."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, "", f"did not finish within {timeout:g} s"
    except OSError as exc:
        return None, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


class Journal:
    """New messages of one journal selection (`-k`, `-u UNIT`), read with cursors.

    The first read positions at the end (the cursor of the last matching entry; none when there
    is none, so that everything that comes is new), or with lookback reads the last seconds.
    """

    def __init__(self, journalctl, match, lookback=None, run=run_command, clock=time.time):
        self.journalctl = journalctl
        self.match = list(match)
        self.lookback = lookback
        self.run = run
        self.clock = clock
        self.cursor = None
        self.positioned = False

    def read(self):
        """(messages, error): the new MESSAGE fields, or error when journalctl failed."""
        argv = [self.journalctl, *self.match, "--output=json", "--no-pager", "--quiet"]
        first = not self.positioned
        if first and self.lookback is None:
            argv.append("--lines=1")
        elif first:
            argv.append(f"--since=@{int(self.clock() - self.lookback)}")
        elif self.cursor:
            argv.append("--after-cursor=" + self.cursor)
        rc, out, err = self.run(argv, JOURNAL_TIMEOUT)
        if rc != 0:
            return [], f"{' '.join(argv[: 1 + len(self.match)])} failed (rc {rc}): {_short(err)}"
        messages, cursor = parse_journal_json(out)
        self.cursor = cursor or self.cursor
        self.positioned = True
        if first and self.lookback is None:
            return [], None
        return messages, None


def parse_journal_json(text):
    """(messages, last cursor) of `journalctl -o json` output; other lines are skipped."""
    messages, cursor = [], None
    for line in (text or "").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        cursor = entry.get("__CURSOR") or cursor
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journalctl writes a non-UTF-8 message as an array of bytes
            try:
                message = bytes(message).decode("utf-8", "replace")
            except (TypeError, ValueError):
                message = None
        if isinstance(message, str):
            messages.append(message)
    return messages, cursor


# Engines answer on the node's own addresses: never through an environment's HTTP proxy.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http(opener, request, timeout, clock, limit):
    """(status, body, error, seconds) of one request; error is a reason string when no answer came."""
    started = clock()
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read(limit), None, clock() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(4096) if exc.fp else b"", None, clock() - started
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return None, b"", str(reason) if str(reason) else type(exc).__name__, clock() - started


def probe_api(url, timeout, opener=OPENER, clock=time.monotonic):
    """(good, reason, seconds) of one GET {url}/health: the API process answers and its engine is not dead."""
    status, answer, error, seconds = _http(opener, url.rstrip("/") + "/health", timeout, clock, 4096)
    if error is not None:
        return False, f"{url}: {error}", seconds
    if status != 200:
        return False, f"/health: HTTP {status}: {_short(answer)}", seconds
    return True, f"/health answered ({seconds:.3f} s)", seconds


def probe_engine(url, model, api_key_file, timeout, opener=OPENER, clock=time.monotonic):
    """(good, reason, seconds) of one 1-token completion."""
    body = {"prompt": "ok", "max_tokens": 1}
    if model:
        body["model"] = model
    headers = {"Content-Type": "application/json"}
    if api_key_file:
        try:
            with open(api_key_file) as handle:
                headers["Authorization"] = "Bearer " + handle.read().strip()
        except OSError as exc:
            return False, f"cannot read the API key: {exc}", 0.0
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    status, answer, error, seconds = _http(opener, request, timeout, clock, 1048576)
    if error is not None:
        return False, f"{url}: {error}", seconds
    good, reason = completion_verdict(status, answer)
    return good, (f"{reason} ({seconds:.3f} s)") if good else reason, seconds


# The agent ---------------------------------------------------------------------------------


class Metrics:
    def __init__(self):
        registry = self.registry = prometheus_client.CollectorRegistry()
        gauge, counter = prometheus_client.Gauge, prometheus_client.Counter
        info = gauge("gpufleet_health_agent_info", "The running agent: 1, labelled", ["version"], registry=registry)
        info.labels(version=__version__).set(1)
        self.healthy = gauge("gpufleet_health_healthy", "1 when no enabled check is failing", registry=registry)
        self.check_ok = gauge(
            "gpufleet_health_check_ok", "1 ok, 0 failing (enabled checks only)", ["check"], registry=registry
        )
        self.check_enabled = gauge(
            "gpufleet_health_check_enabled", "1 when the check runs", ["check"], registry=registry
        )
        self.transitions = counter(
            "gpufleet_health_check_transitions", "State changes of a check", ["check", "to"], registry=registry
        )
        self.gpu_count = gauge("gpufleet_health_gpu_count", "GPUs nvidia-smi sees", registry=registry)
        self.ecc = gauge(
            "gpufleet_health_gpu_ecc_uncorrectable_volatile_total",
            "Volatile uncorrectable ECC errors, summed over the GPUs",
            registry=registry,
        )
        self.xid = counter("gpufleet_health_xid_events", "NVRM Xid kernel messages seen", ["xid"], registry=registry)
        self.nccl = counter(
            "gpufleet_health_nccl_errors", "Journal lines matching NCCL failure patterns", registry=registry
        )
        self.probe_seconds = gauge(
            "gpufleet_health_engine_probe_seconds", "Duration of the last engine probe", registry=registry
        )
        self.probe_failures = counter(
            "gpufleet_health_engine_probe_failures", "Failed engine probes", registry=registry
        )
        self.peer_up = gauge(
            "gpufleet_health_ping_peer_up", "1 when the fabric peer answers", ["peer"], registry=registry
        )
        self.rtt = gauge(
            "gpufleet_health_ping_rtt_seconds", "Last round-trip time to the peer", ["peer"], registry=registry
        )
        self.lost = counter("gpufleet_health_ping_lost", "Echo requests lost", ["peer"], registry=registry)
        self.sent = counter("gpufleet_health_ping_sent", "Echo requests sent", ["peer"], registry=registry)


class Agent:
    def __init__(self, config, stream=None, clock=time.time, once=False, gpu_parser=_gpu):
        self.config = config
        self.stream = stream or sys.stdout
        self.clock = clock
        self.once = once
        self.gpu_parser = gpu_parser
        self.metrics = Metrics()
        self.lock = threading.Lock()
        self._log_lock = threading.Lock()
        self.stopping = False  # set by log_stop(): the check threads' lines end there
        now = clock()
        self.checks = {}
        for name in CHECKS:
            check = config["checks"][name]
            self.checks[name] = new_check_state(now, check["enabled"], check["reason_disabled"])
            self.metrics.check_enabled.labels(check=name).set(1 if check["enabled"] else 0)
            if check["enabled"]:
                self.metrics.check_ok.labels(check=name).set(1)
        self.metrics.healthy.set(1)
        # Engine probes since the last completion (None: the next probe is one), and whether the
        # last completion failed (then every probe is a completion until one passes).
        self.engine_since_deep = None
        self.engine_deep_failed = False
        ping = config["checks"]["ping"]
        self.peers = ping["peers"] if ping["enabled"] else []
        self.peer_states = {peer["name"]: new_peer_state(now) for peer in self.peers}
        self.lost_peers = {}
        for peer in self.peers:
            self.metrics.peer_up.labels(peer=peer["name"]).set(1)
            self.metrics.sent.labels(peer=peer["name"])
            self.metrics.lost.labels(peer=peer["name"])
        journal = config["checks"]["journal"]
        lookback = journal["interval"] if once else None
        self.journal = Journal(config["journalctl"], ["--unit=" + journal["unit"]], lookback, clock=clock)
        self.patterns = [re.compile(pattern) for pattern in journal["patterns"]]
        self.kernel = Journal(
            config["journalctl"], ["--dmesg"], config["checks"]["gpu"]["interval"] if once else None, clock=clock
        )
        for name in ("gpu", "engine", "journal", "ping"):
            check = config["checks"][name]
            if not check["enabled"]:
                self.log(f"check {name} is disabled: {check['reason_disabled'] or 'disabled'}")

    def log(self, message):
        with self._log_lock:
            if not self.stopping:
                print(f"{NAME}: {message}", file=self.stream, flush=True)

    def log_stop(self, message):
        """A line of the daemon's stop; no check thread writes a line after the first one."""
        with self._log_lock:
            self.stopping = True
            print(f"{NAME}: {message}", file=self.stream, flush=True)

    def record(self, name, good, reason):
        """Feed one result of a check through its hysteresis; log and count a transition."""
        check = self.config["checks"][name]
        # The ping check is recorded only when a peer changes state, and each peer has its own
        # hysteresis (loss_threshold, rise): a second one here would wait for results that never
        # come once every peer is back. Its "rise" is the peers'.
        periodic = name != "ping" and not self.once
        fall, rise = (check.get("fall", 1), check.get("rise", 1)) if periodic else (1, 1)
        reason = _short(reason)
        with self.lock:
            old = self.checks[name]
            new = hysteresis_step(old, good, reason, fall, rise, self.clock())
            self.checks[name] = new
            healthy, _failing = verdict(self.checks)
        if new["state"] != old["state"]:
            self.metrics.transitions.labels(check=name, to=new["state"]).inc()
            self.log(f"check {name} is now {new['state']}: {new['reason']}")
        self.metrics.check_ok.labels(check=name).set(1 if new["state"] == "ok" else 0)
        self.metrics.healthy.set(1 if healthy else 0)

    def health(self):
        with self.lock:
            checks = {name: dict(state) for name, state in self.checks.items()}
            lost = dict(self.lost_peers)
        healthy, _failing = verdict(checks)
        out = {}
        for name, state in checks.items():
            out[name] = {
                "ok": state["state"] == "ok",
                "state": state["state"],
                "reason": state["reason"],
                "since": state["since"],
            }
        out["ping"]["lost_peers"] = lost
        return {
            "node": self.config["node"],
            "replica": self.config["replica"],
            "rank": self.config["rank"],
            "healthy": healthy,
            "checks": out,
            "time": self.clock(),
        }

    # The checks; each returns (good, reason) and updates its metrics.

    def check_gpu(self):
        gpu = self.config["checks"]["gpu"]
        events = []
        messages, kernel_error = self.kernel.read()
        for message in messages:
            event = parse_xid(message)
            if event:
                events.append(event)
                self.metrics.xid.labels(xid=str(event[1])).inc()
        rc, out, err = run_command([gpu["nvidia_smi"], "-q", "-x"], SMI_TIMEOUT)
        if rc != 0:
            return False, f"{gpu['nvidia_smi']} -q -x failed (rc {rc}): {_short(err or out)}"
        try:
            info = self.gpu_parser.parse_smi_xml(out)
        except self.gpu_parser.GpuError as exc:
            return False, str(exc)
        self.metrics.gpu_count.set(len(info["gpus"]))
        pci = count_pci_gpus(gpu["sysfs_root"]) if gpu["expected_count"] is None else None
        good, reason, ecc_total = gpu_verdict(info, gpu["expected_count"], pci, events, gpu["fatal_xids"])
        self.metrics.ecc.set(ecc_total)
        if kernel_error:
            return False, "cannot read the kernel journal for Xid messages: " + kernel_error
        return good, reason

    def check_engine(self):
        engine = self.config["checks"]["engine"]
        every = 1 if self.once else engine.get("deep_every", 1)
        due = self.engine_since_deep is None or self.engine_since_deep + 1 >= every
        if self.engine_deep_failed or due:
            good, reason, seconds = probe_engine(
                engine["url"], engine["model"], engine["api_key_file"], engine["timeout"]
            )
            self.engine_since_deep, self.engine_deep_failed = 0, not good
        else:
            good, reason, seconds = probe_api(engine["url"], engine["timeout"])
            self.engine_since_deep += 1
        self.metrics.probe_seconds.set(seconds)
        if not good:
            self.metrics.probe_failures.inc()
        return good, reason

    def check_journal(self):
        unit = self.config["checks"]["journal"]["unit"]
        messages, error = self.journal.read()
        if error:
            return False, error
        good, reason, matching = journal_verdict(messages, self.patterns, unit)
        if matching:
            self.metrics.nccl.inc(len(matching))
        return good, reason

    def ping_outcome(self, name, replied, rtt):
        ping = self.config["checks"]["ping"]
        if replied:
            self.metrics.rtt.labels(peer=name).set(rtt)
        else:
            self.metrics.lost.labels(peer=name).inc()
        with self.lock:
            old = self.peer_states[name]
            new = peer_step(old, replied, ping["loss_threshold"], ping["rise"], self.clock())
            self.peer_states[name] = new
            changed = new["up"] != old["up"]
            if changed:
                good, reason, self.lost_peers = ping_verdict(self.peers, self.peer_states)
        if changed:
            self.metrics.peer_up.labels(peer=name).set(1 if new["up"] else 0)
            self.log(f"fabric peer {name} is {'back' if new['up'] else 'lost'}")
            self.record("ping", good, reason)

    def ping_error(self, message):
        self.record("ping", False, message)

    def ping_start(self):
        """Record the first ping verdict, so the reason says how many peers answer."""
        with self.lock:
            good, reason, self.lost_peers = ping_verdict(self.peers, self.peer_states)
        self.record("ping", good, reason)

    def probes(self):
        return {"gpu": self.check_gpu, "engine": self.check_engine, "journal": self.check_journal}

    def run_check(self, name):
        try:
            good, reason = self.probes()[name]()
        except Exception as exc:
            good, reason = False, f"internal error: {type(exc).__name__}: {exc}"
        self.record(name, good, reason)


def make_pinger(agent):
    pinger = Pinger(agent.config["checks"]["ping"], agent.ping_outcome, agent.ping_error)
    pinger.on_sent = lambda name: agent.metrics.sent.labels(peer=name).inc()
    return pinger


def ping_loop(agent, stop, duration=None):
    """Open the socket (retrying every second until it works), then probe."""
    pinger = make_pinger(agent)
    reported = None
    while not stop.is_set():
        try:
            pinger.open()
        except OSError as exc:
            message = f"cannot open a raw ICMP socket from {agent.config['checks']['ping']['source_address']!r}: {exc}"
            if message != reported:
                agent.ping_error(message)
                reported = message
            if duration is not None:
                return
            stop.wait(1.0)
            continue
        agent.ping_start()
        try:
            pinger.run(stop, duration)
        finally:
            pinger.close()
        return


def check_loop(agent, name, stop):
    interval = agent.config["checks"][name]["interval"]
    while not stop.is_set():
        started = time.monotonic()
        agent.run_check(name)
        stop.wait(max(0.0, interval - (time.monotonic() - started)))


# HTTP --------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    agent = None

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/metrics":
            self._send(
                200,
                prometheus_client.generate_latest(self.agent.metrics.registry),
                prometheus_client.CONTENT_TYPE_LATEST,
            )
        elif path == "/health":
            health = self.agent.health()
            body = json.dumps(health, sort_keys=True).encode()
            self._send(200 if health["healthy"] else 503, body, "application/json")
        else:
            self._send(404, b'{"error": "not found"}', "application/json")

    def do_HEAD(self):
        self._send(405, b"", "text/plain")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD

    def _send(self, code, body, content_type):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format, *args):
        """Scrapes and health polls come every few seconds: keep them out of the journal."""


def serve(agent, address, port):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family, "daemon_threads": True})
    server = server_class((address, port), type("AgentHandler", (Handler,), {"agent": agent}))
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server


# Configuration -----------------------------------------------------------------------------


def load_config(path):
    try:
        with open(path) as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{NAME}: cannot read config {path}: {exc}") from None
    config, problems = normalize_config(raw)
    if problems:
        raise SystemExit(f"{NAME}: {path}: {problems[0]}")
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--config", required=True, help="agent.json of this node")
    parser.add_argument(
        "--once", action="store_true", help="run every check once, print /health's JSON, exit 1 if unhealthy"
    )
    parser.add_argument("--check-config", action="store_true", help="validate the config and exit (ansible's validate)")
    args = parser.parse_args(argv)
    if args.check_config:
        load_config(args.config)
        return 0
    if prometheus_client is None:
        raise SystemExit(f"{NAME}: the Python module prometheus_client is missing: install python3-prometheus-client")
    config = load_config(args.config)
    agent = Agent(config, sys.stderr if args.once else sys.stdout, once=args.once)
    stop = threading.Event()
    ping = config["checks"]["ping"]
    if args.once:
        threads = [
            threading.Thread(target=agent.run_check, args=(name,))
            for name in ("gpu", "engine", "journal")
            if config["checks"][name]["enabled"]
        ]
        if ping["enabled"]:
            # Long enough for a dead peer to be declared lost.
            duration = ping["loss_threshold"] * ping["interval_ms"] / 1000.0
            threads.append(threading.Thread(target=ping_loop, args=(agent, stop, duration)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        health = agent.health()
        print(json.dumps(health, indent=2, sort_keys=True))
        return 0 if health["healthy"] else 1

    signals = []

    def on_signal(signum, _frame):
        # Only noted here: a print here may land inside the main thread's own print.
        signals.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = serve(agent, config["listen_address"], config["port"])
    except OSError as exc:
        raise SystemExit(f"{NAME}: cannot listen on {config['listen_address']}:{config['port']}: {exc}") from None
    threads = [
        threading.Thread(target=check_loop, args=(agent, name, stop), name=name, daemon=True)
        for name in ("gpu", "engine", "journal")
        if config["checks"][name]["enabled"]
    ]
    if ping["enabled"]:
        threads.append(threading.Thread(target=ping_loop, args=(agent, stop), name="ping", daemon=True))
    for thread in threads:
        thread.start()
    where = f"{config['listen_address']}:{server.server_address[1]}"
    agent.log(f"serving /health and /metrics on {where} for node {config['node']} (replica {config['replica']!r})")
    while not stop.is_set():
        stop.wait(1.0)
    # A check that ends while the agent stops changes nothing anyone reads: its line would only
    # land after the stop line (or after "stopped", from a thread still in nvidia-smi).
    agent.log_stop(f"stopping on signal {signals[0]}")
    server.shutdown()
    server.server_close()
    # The check threads are daemons: one stuck in nvidia-smi must not delay the stop.
    deadline = time.monotonic() + 2.0
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    agent.log_stop("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
