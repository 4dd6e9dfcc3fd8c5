# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for gpufleet_agents.health_agent (gpufleet-health-agent): policy tables, parsers, ICMP, the daemon."""

import copy
import io
import json
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import program, wait_for
from gpufleet_agents import _gpu
from gpufleet_agents import _health_agent_config as agent_config
from gpufleet_agents import health_agent as agent

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "health_agent"
# nvidia-smi captures of the collection's own tests: _gpu is the collection's module_utils/_gpu.py.
SMI = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia-smi"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def raw_icmp_allowed():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    except PermissionError:
        return False
    return True


# Hysteresis --------------------------------------------------------------------------------


def feed(results, fall, rise):
    """(state, reason) after each result of a fresh check, at times 1, 2, ..."""
    state = agent.new_check_state(0.0)
    out = []
    for now, good in enumerate(results, start=1):
        state = agent.hysteresis_step(state, good, "good" if good else "bad", fall, rise, float(now))
        out.append((state["state"], state["since"]))
    return out


@pytest.mark.parametrize(
    ("results", "fall", "rise", "expected"),
    [
        # A fresh check is ok and stays ok on good results.
        ([True, True], 2, 2, [("ok", 0.0), ("ok", 0.0)]),
        # fall 2: one bad result is not enough, two in a row are.
        ([False, True, False, False], 2, 2, [("ok", 0.0), ("ok", 0.0), ("ok", 0.0), ("failing", 4.0)]),
        # fall 1 fails at once; rise 2 needs two good results in a row.
        ([False, True, False, True, True], 1, 2, [("failing", 1.0)] * 4 + [("ok", 5.0)]),
        # rise 1 recovers at once.
        ([False, True], 1, 1, [("failing", 1.0), ("ok", 2.0)]),
        # Bad results while failing keep the first failure's time.
        ([False, False, False], 1, 3, [("failing", 1.0)] * 3),
    ],
)
def test_hysteresis_table(results, fall, rise, expected):
    assert feed(results, fall, rise) == expected


def test_fresh_check_starts_ok_with_a_reason():
    state = agent.new_check_state(5.0)
    assert (state["state"], state["reason"], state["since"]) == ("ok", "starting: no result yet", 5.0)


def test_pending_results_say_so_in_the_reason():
    state = agent.new_check_state(0.0)
    state = agent.hysteresis_step(state, False, "HTTP 500", 2, 2, 1.0)
    assert (state["state"], state["reason"]) == ("ok", "1 of 2 bad results: HTTP 500")
    state = agent.hysteresis_step(state, False, "HTTP 500", 2, 2, 2.0)
    assert (state["state"], state["reason"]) == ("failing", "HTTP 500")
    state = agent.hysteresis_step(state, True, "answered", 2, 2, 3.0)
    assert (state["state"], state["reason"]) == ("failing", "1 of 2 good results, last bad: HTTP 500")
    state = agent.hysteresis_step(state, True, "answered", 2, 2, 4.0)
    assert (state["state"], state["reason"], state["since"]) == ("ok", "answered", 4.0)


def test_hysteresis_does_not_modify_its_input_and_ignores_disabled_checks():
    state = agent.new_check_state(0.0)
    before = copy.deepcopy(state)
    agent.hysteresis_step(state, False, "bad", 1, 1, 1.0)
    assert state == before
    disabled = agent.new_check_state(0.0, enabled=False, reason_disabled="no GPU")
    assert agent.hysteresis_step(disabled, False, "bad", 1, 1, 1.0) == disabled
    assert disabled["state"] == "disabled" and disabled["reason"] == "no GPU"


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({"gpu": "ok", "engine": "ok"}, (True, [])),
        ({"gpu": "disabled", "engine": "ok"}, (True, [])),
        ({"gpu": "disabled", "engine": "disabled"}, (True, [])),
        ({"gpu": "failing", "engine": "ok", "ping": "failing"}, (False, ["gpu", "ping"])),
    ],
)
def test_verdict_table(states, expected):
    assert agent.verdict({name: {"state": state} for name, state in states.items()}) == expected


# Ping policy --------------------------------------------------------------------------------


def peer_run(outcomes, loss_threshold=3, rise=2):
    peer = agent.new_peer_state(0.0)
    out = []
    for now, replied in enumerate(outcomes, start=1):
        peer = agent.peer_step(peer, replied, loss_threshold, rise, float(now))
        out.append((peer["up"], peer["since"]))
    return out


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([True, True], [(True, 0.0), (True, 0.0)]),
        # Two losses are below the threshold of 3; a reply resets the count.
        ([False, False, True, False, False], [(True, 0.0)] * 5),
        # The third consecutive loss makes the peer lost, at that outcome's time.
        ([False, False, False, False], [(True, 0.0), (True, 0.0), (False, 3.0), (False, 3.0)]),
        # Back after rise (2) consecutive replies; a loss in between restarts the count.
        ([False, False, False, True, False, True, True], [(True, 0.0)] * 2 + [(False, 3.0)] * 4 + [(True, 7.0)]),
    ],
)
def test_peer_step_table(outcomes, expected):
    assert peer_run(outcomes) == expected


PEERS = [
    {"name": "a", "address": "10.0.0.1", "same_replica": True},
    {"name": "b", "address": "10.0.0.2", "same_replica": False},
    {"name": "c", "address": "10.0.0.3", "same_replica": False},
]


def states(*lost):
    return {peer["name"]: {"up": peer["name"] not in lost, "since": 7.0} for peer in PEERS}


@pytest.mark.parametrize(
    ("peers", "lost", "good", "reason"),
    [
        (PEERS, (), True, "3 of 3 fabric peers answer"),
        (PEERS, ("b",), True, "2 of 3 fabric peers answer; lost, of other replicas: b"),
        (PEERS, ("a",), False, "fabric peer(s) of this replica lost: a"),
        (PEERS, ("a", "b", "c"), False, "every fabric peer is lost (3): this node's own fabric link or address"),
        (PEERS[1:], ("b", "c"), False, "every fabric peer is lost (2): this node's own fabric link or address"),
        # With one peer, its failure and this node's link look the same: only a same-replica peer counts.
        (PEERS[1:2], ("b",), True, "0 of 1 fabric peers answer; lost, of other replicas: b"),
        (PEERS[:1], ("a",), False, "fabric peer(s) of this replica lost: a"),
        ([], (), True, "no fabric peers to probe"),
    ],
)
def test_ping_verdict_table(peers, lost, good, reason):
    verdict_good, verdict_reason, lost_peers = agent.ping_verdict(peers, states(*lost))
    assert (verdict_good, verdict_reason) == (good, reason)
    assert lost_peers == dict.fromkeys(lost, 7.0)


# ICMP ---------------------------------------------------------------------------------------


def test_icmp_checksum_rfc1071_example():
    # RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2, whose complement is 220d.
    assert agent.icmp_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    # An odd length is padded with a zero byte.
    assert agent.icmp_checksum(b"\x01") == agent.icmp_checksum(b"\x01\x00")


def test_echo_request_layout_and_checksum():
    packet = agent.pack_echo_request(0x1234, 0xBEEF, b"abc")
    assert packet[:2] == b"\x08\x00"
    assert struct.unpack("!HH", packet[4:8]) == (0x1234, 0xBEEF)
    assert packet[8:] == b"abc"
    assert agent.icmp_checksum(packet) == 0  # a valid message sums to all ones


def ipv4(icmp, protocol=1, header_words=5):
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | header_words, 0, 20 + len(icmp), 0, 0, 64, protocol, 0,
                         socket.inet_aton("10.0.0.2"), socket.inet_aton("10.0.0.1"))  # fmt: skip
    return header + b"\x00" * (header_words * 4 - 20) + icmp


def echo_reply(ident, seq, payload):
    request = agent.pack_echo_request(ident, seq, payload)
    body = b"\x00" + request[1:2] + b"\x00\x00" + request[4:]
    checksum = agent.icmp_checksum(body)
    return body[:2] + struct.pack("!H", checksum) + body[4:]


def test_parse_echo_reply():
    reply = echo_reply(7, 9, agent.PAYLOAD)
    assert agent.parse_echo_reply(ipv4(reply)) == (7, 9, agent.PAYLOAD)
    assert agent.parse_echo_reply(ipv4(reply, header_words=6)) == (7, 9, agent.PAYLOAD)  # IP options


@pytest.mark.parametrize(
    "packet",
    [
        ipv4(agent.pack_echo_request(7, 9)),  # a request (loopback delivers our own requests too)
        ipv4(echo_reply(7, 9, b"x")[:2] + b"\x00\x00" + echo_reply(7, 9, b"x")[4:]),  # bad checksum
        ipv4(echo_reply(7, 9, b"x"), protocol=17),  # not ICMP
        b"\x60" + b"\x00" * 40,  # IPv6
        b"\x45\x00",  # truncated
    ],
)
def test_parse_echo_reply_refuses(packet):
    assert agent.parse_echo_reply(packet) is None


@pytest.mark.skipif(not raw_icmp_allowed(), reason="raw ICMP sockets need CAP_NET_RAW (the unit grants it)")
def test_pinger_pings_loopback_and_loses_a_silent_address():
    outcomes = []
    stop = threading.Event()
    config = {
        "source_address": "127.0.0.1",
        "interval_ms": 200,
        "timeout_ms": 200,
        "peers": [
            {"name": "self", "address": "127.0.0.1", "same_replica": True},
            # Never answers: routed through loopback it has no host, and TEST-NET-1 is not ours.
            {"name": "silent", "address": "192.0.2.1", "same_replica": False},
        ],
    }

    def outcome(name, replied, rtt):
        outcomes.append((name, replied, rtt))
        if [entry[0] for entry in outcomes].count("silent") == 3:
            stop.set()  # three rounds over: each probe to self was sent before its round's loss

    pinger = agent.Pinger(config, outcome, print)
    pinger.open()
    hang = threading.Timer(60, stop.set)
    hang.start()
    try:
        pinger.run(stop)
    finally:
        hang.cancel()
        pinger.close()
    assert [replied for name, replied, _rtt in outcomes if name == "silent"] == [False] * 3
    # Loopback queues the reply as the request is sent: however late the thread, none is lost.
    mine = [(replied, rtt) for name, replied, rtt in outcomes if name == "self"]
    assert len(mine) >= 3 and all(replied and rtt >= 0 for replied, rtt in mine), mine


class LateSocket:
    """The pinger's raw socket, as a datagram pair: the test decides when a peer's reply arrives."""

    def __init__(self, address):
        self.address = address
        self.inside, self.outside = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.inside.setblocking(False)
        self.sent = []

    def fileno(self):
        return self.inside.fileno()

    def sendto(self, packet, address):
        self.sent.append(packet)

    def recvfrom(self, size):
        return self.inside.recv(size), (self.address, 0)

    def reply(self):
        """The peer's answer to the last request: in the socket from now on."""
        ident, seq = struct.unpack("!HH", self.sent[-1][4:8])
        self.outside.send(ipv4(echo_reply(ident, seq, self.sent[-1][8:])))

    def close(self):
        self.inside.close()
        self.outside.close()


def test_a_reply_in_the_socket_is_not_lost_when_the_ping_thread_runs_late():
    """The reply comes in time, but the thread gets the CPU back only after the probe's deadline
    (a busy host): the reply waiting in the socket counts, the probe is not lost."""
    peer = {"name": "peer", "address": "10.0.0.7", "same_replica": True}
    config = {"source_address": "", "interval_ms": 200, "timeout_ms": 200, "peers": [peer]}
    sock, stop, outcomes, calls = LateSocket("10.0.0.7"), threading.Event(), [], []

    def clock():
        calls.append(None)
        if len(calls) <= 3:  # the start, the first round's send, the wait for its reply (200 ms)
            return 0.0
        if len(calls) == 4:
            sock.reply()  # in the socket when the thread runs again, a second after the round
        return 1.0

    def outcome(name, replied, rtt):
        outcomes.append((name, replied, rtt))
        stop.set()

    pinger = agent.Pinger(config, outcome, print, clock=clock)
    pinger.sock = sock
    try:
        pinger.run(stop)
    finally:
        pinger.close()
    assert outcomes[0][:2] == ("peer", True), outcomes


# Parsers ------------------------------------------------------------------------------------


def test_parse_xid_on_the_documented_format():
    lines = (FIXTURES / "kernel-xid.txt").read_text().splitlines()
    assert [agent.parse_xid(line) for line in lines] == [
        ("0000:61:00", 79),
        ("0000:18:00", 13),
        ("0000:2a:00", 48),
        ("0000:3a:00", 31),
        # MIG: the instance inside the parentheses; 94 and 95 are in the default fatal list.
        ("0000:01:00", 94),
        ("0000:3b:00", 95),
    ]
    assert agent.parse_xid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.54.03") is None
    assert agent.parse_xid(None) is None


def journal_line(cursor, message):
    return json.dumps({"__CURSOR": cursor, "MESSAGE": message, "_TRANSPORT": "kernel", "PRIORITY": "4"})


def test_parse_journal_json():
    text = "\n".join(
        [
            journal_line("s=1;i=1", "first"),
            "-- No entries --",
            json.dumps({"__CURSOR": "s=1;i=2", "MESSAGE": list(b"bin\xffary")}),
            json.dumps({"__CURSOR": "s=1;i=3", "MESSAGE": None}),
            "[]",
        ]
    )
    assert agent.parse_journal_json(text) == (["first", "bin\ufffdary"], "s=1;i=3")
    assert agent.parse_journal_json("") == ([], None)


class FakeJournalctl:
    def __init__(self, entries):
        self.entries = entries  # list of (cursor, message)
        self.calls = []
        self.rc = 0

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        if self.rc:
            return self.rc, "", "Failed to open journal"
        entries = self.entries
        after = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--after-cursor=")]
        if after:
            index = [cursor for cursor, _message in entries].index(after[0])
            entries = entries[index + 1 :]
        if "--lines=1" in argv:
            entries = entries[-1:]
        return 0, "\n".join(journal_line(cursor, message) for cursor, message in entries), ""


def test_journal_starts_at_the_end_and_reads_incrementally():
    fake = FakeJournalctl([("c1", "old NCCL WARN")])
    journal = agent.Journal("/usr/bin/journalctl", ["--unit=x.service"], run=fake)
    assert journal.read() == ([], None)  # positions at c1, history is not new
    assert fake.calls[0] == [
        "/usr/bin/journalctl",
        "--unit=x.service",
        "--output=json",
        "--no-pager",
        "--quiet",
        "--lines=1",
    ]
    fake.entries += [("c2", "a"), ("c3", "b")]
    assert journal.read() == (["a", "b"], None)
    assert fake.calls[1][-1] == "--after-cursor=c1"
    assert journal.read() == ([], None)
    assert fake.calls[2][-1] == "--after-cursor=c3"
    fake.rc = 1
    messages, error = journal.read()
    assert messages == [] and error == "/usr/bin/journalctl --unit=x.service failed (rc 1): Failed to open journal"


def test_journal_without_entries_reads_everything_that_comes():
    fake = FakeJournalctl([])
    journal = agent.Journal("/usr/bin/journalctl", ["--dmesg"], run=fake)
    assert journal.read() == ([], None)
    fake.entries.append(("c1", "new"))
    assert journal.read() == (["new"], None)
    assert not any(arg.startswith("--after-cursor") for arg in fake.calls[1])


def test_journal_lookback_reads_the_last_seconds():
    fake = FakeJournalctl([("c1", "recent")])
    journal = agent.Journal("/usr/bin/journalctl", ["--dmesg"], lookback=30, run=fake, clock=lambda: 1000.5)
    assert journal.read() == (["recent"], None)
    assert fake.calls[0][-1] == "--since=@970"


def test_journal_verdict():
    patterns = [re.compile(pattern) for pattern in agent_config.NCCL_PATTERNS]
    good, reason, matching = agent.journal_verdict(["INFO loaded", "INFO ready"], patterns, "u.service")
    assert (good, reason, matching) == (True, "no new NCCL failure lines in u.service (2 new lines)", [])
    lines = [
        "node1:123:456 [0] NCCL INFO Channel 00/02",
        "node1:123:456 [0] misc/socket.cc:50 NCCL WARN socket connect failed",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error",
    ]
    good, reason, matching = agent.journal_verdict(lines, patterns, "u.service")
    assert not good and matching == lines[1:]
    assert reason.startswith("2 new line(s) of u.service match NCCL failure patterns, last: RuntimeError: NCCL error")


# GPU ----------------------------------------------------------------------------------------


def smi_document(count=1, ecc=None, source="a100-sxm4-v12.xml"):
    """A real capture's <gpu> repeated count times; ecc {index: volatile dram_uncorrectable}."""
    text = re.sub(r"<!DOCTYPE[^>]*>", "", (SMI / source).read_text())
    template = ElementTree.fromstring(text.strip().encode()).find("gpu")
    root = ElementTree.Element("nvidia_smi_log")
    ElementTree.SubElement(root, "driver_version").text = "535.54.03"
    ElementTree.SubElement(root, "attached_gpus").text = str(count)
    for index in range(count):
        gpu = copy.deepcopy(template)
        gpu.find("pci/pci_bus_id").text = f"00000000:{0x18 + index:02X}:00.0"
        gpu.find("ecc_errors/volatile/dram_uncorrectable").text = str((ecc or {}).get(index, 0))
        root.append(gpu)
    return '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n' + ElementTree.tostring(
        root, encoding="unicode"
    )


def test_every_shared_nvidia_smi_capture_parses_for_the_agent():
    for path in sorted(SMI.glob("*.xml")):
        info = _gpu.parse_smi_xml(path.read_text())
        good, _reason, ecc = agent.gpu_verdict(info, 1, None, [], agent_config.FATAL_XIDS)
        assert good and ecc == 0, path.name


@pytest.mark.parametrize(
    ("count", "ecc", "expected_count", "pci", "events", "good", "reason"),
    [
        (2, None, 2, None, [], True, "2 GPU(s), no uncorrectable ECC errors"),
        (2, None, None, None, [], True, "2 GPU(s), no uncorrectable ECC errors"),
        (1, None, 2, None, [], False, "nvidia-smi sees 1 GPU(s), 2 expected"),
        (1, None, None, 2, [], False, "nvidia-smi sees 1 GPU(s), 2 on the PCI bus"),
        (
            2,
            {1: 3},
            2,
            None,
            [],
            False,
            "volatile uncorrectable ECC errors: 0000:19:00.0 3 (reset the GPU)",
        ),
        (2, None, 2, None, [("0000:18:00", 13)], True, "2 GPU(s), no uncorrectable ECC errors (1 new non-fatal Xid)"),
        (2, None, 2, None, [("0000:18:00", 79), ("0000:18:00", 79)], False, "fatal Xid 79 on 0000:18:00"),
        (
            1,
            {0: 1},
            2,
            None,
            [("0000:18:00", 48)],
            False,
            "nvidia-smi sees 1 GPU(s), 2 expected; volatile uncorrectable ECC errors: 0000:18:00.0 1 (reset the GPU);"
            " fatal Xid 48 on 0000:18:00",
        ),
    ],
)
def test_gpu_verdict_table(count, ecc, expected_count, pci, events, good, reason):
    info = _gpu.parse_smi_xml(smi_document(count, ecc))
    assert agent.gpu_verdict(info, expected_count, pci, events, agent_config.FATAL_XIDS)[:2] == (good, reason)


def test_count_pci_gpus(tmp_path):
    devices = tmp_path / "bus" / "pci" / "devices"
    for name, vendor, pci_class in [
        ("0000:18:00.0", "0x10de", "0x030200"),  # 3D controller
        ("0000:19:00.0", "0x10de", "0x030000"),  # VGA
        ("0000:1a:00.0", "0x10de", "0x040300"),  # the GPU's audio function
        ("0000:00:1f.0", "0x8086", "0x060100"),
    ]:
        (devices / name).mkdir(parents=True)
        (devices / name / "vendor").write_text(vendor + "\n")
        (devices / name / "class").write_text(pci_class + "\n")
    assert agent.count_pci_gpus(str(tmp_path)) == 2
    assert agent.count_pci_gpus(str(tmp_path / "missing")) is None


# Engine -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "good", "reason"),
    [
        (200, b'{"choices": [{"text": "!"}]}', True, "1-token completion answered"),
        (200, b'{"choices": []}', False, 'HTTP 200 but no choices in the answer: {"choices": []}'),
        (200, b"<html>", False, "HTTP 200 but not JSON: <html>"),
        (200, b"[1]", False, "HTTP 200 but no choices in the answer: [1]"),
        (401, b'{"error": "Unauthorized"}', False, 'HTTP 401: {"error": "Unauthorized"}'),
        (503, b"", False, "HTTP 503: "),
    ],
)
def test_completion_verdict_table(status, body, good, reason):
    assert agent.completion_verdict(status, body) == (good, reason)


class FakeEngine:
    """A local OpenAI-style completions endpoint whose answer a test sets."""

    def __init__(self):
        self.status, self.body = 200, b'{"choices": [{"text": "ok"}]}'
        self.stalled = False  # completions do not answer until close(): a probe must time out
        self.closing = threading.Event()
        self.health_status = 200
        self.requests = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                engine.requests.append((self.path, dict(self.headers), None))
                self.send_response(engine.health_status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                engine.requests.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
                if engine.stalled:
                    engine.closing.wait(60)
                try:
                    self.send_response(engine.status)
                    self.send_header("Content-Length", str(len(engine.body)))
                    self.end_headers()
                    self.wfile.write(engine.body)
                except BrokenPipeError:
                    pass  # the probe timed out and closed the connection

            def log_message(self, format, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine():
    fake = FakeEngine()
    yield fake
    fake.close()


def test_probe_engine_sends_a_one_token_completion_with_the_key(engine, tmp_path):
    key = tmp_path / "api-key"
    key.write_text("s3cret-key-0123456789\n")
    good, reason, seconds = agent.probe_engine(engine.url, "tiny", str(key), 5)
    assert good and reason.startswith("1-token completion answered (") and seconds >= 0
    path, headers, body = engine.requests[0]
    assert path == "/v1/completions"
    assert headers["Authorization"] == "Bearer s3cret-key-0123456789"
    assert body == {"model": "tiny", "prompt": "ok", "max_tokens": 1}


def test_probe_engine_without_key_or_model(engine):
    assert agent.probe_engine(engine.url + "/", "", "", 5)[0]
    _path, headers, body = engine.requests[0]
    assert "Authorization" not in headers and body == {"prompt": "ok", "max_tokens": 1}


def test_probe_engine_failures(engine, tmp_path):
    engine.status, engine.body = 401, b'{"error": "Unauthorized"}'
    assert agent.probe_engine(engine.url, "m", "", 5)[:2] == (False, 'HTTP 401: {"error": "Unauthorized"}')
    engine.status, engine.body, engine.stalled = 200, b"{}", True
    good, reason, _seconds = agent.probe_engine(engine.url, "m", "", 0.1)
    engine.stalled = False
    assert not good and reason.startswith(engine.url + ": ") and "timed out" in reason
    missing = tmp_path / "nothing"
    assert agent.probe_engine(engine.url, "m", str(missing), 5)[:2] == (
        False,
        f"cannot read the API key: [Errno 2] No such file or directory: '{missing}'",
    )
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    good, reason, _seconds = agent.probe_engine(f"http://127.0.0.1:{port}", "m", "", 2)
    assert not good and "refused" in reason.lower()


def test_probe_api_reads_health(engine):
    good, reason, _seconds = agent.probe_api(engine.url, 5)
    assert good and reason.startswith("/health answered (")
    assert engine.requests[0][0] == "/health"
    engine.health_status = 503
    assert agent.probe_api(engine.url, 5)[:2] == (False, "/health: HTTP 503: ")


def engine_kinds(engine):
    """The probes the fake engine received, in order: 'deep' (a completion) or 'api' (/health)."""
    return ["deep" if path == "/v1/completions" else "api" for path, _headers, _body in engine.requests]


def test_deep_every_spaces_the_completions_between_health_probes(engine):
    instance, _stream = make_agent({"engine": {"url": engine.url, "deep_every": 3}})
    for _probe in range(7):
        assert instance.check_engine()[0]
    assert engine_kinds(engine) == ["deep", "api", "api", "deep", "api", "api", "deep"]


def test_after_a_failed_completion_every_probe_is_a_completion_until_one_passes(engine):
    # A wedged engine: /health answers 200, the completion does not. The cheap probes must not
    # interleave good results that would reset the check's fall count.
    instance, _stream = make_agent({"engine": {"url": engine.url, "deep_every": 4, "fall": 2}})
    engine.status, engine.body = 500, b"wedged"
    results = [instance.check_engine()[0] for _probe in range(3)]
    assert results == [False, False, False]
    assert engine_kinds(engine) == ["deep", "deep", "deep"]
    engine.status, engine.body = 200, b'{"choices": [{"text": "ok"}]}'
    assert [instance.check_engine()[0] for _probe in range(3)] == [True, True, True]
    assert engine_kinds(engine) == ["deep"] * 4 + ["api", "api"]


def test_deep_every_one_makes_every_probe_a_completion(engine):
    instance, _stream = make_agent({"engine": {"url": engine.url}})
    for _probe in range(3):
        instance.check_engine()
    assert engine_kinds(engine) == ["deep"] * 3


# Configuration ------------------------------------------------------------------------------


def base_config(**checks):
    raw = {"node": "n1", "replica": "r0", "rank": 0, "listen_address": "127.0.0.1", "port": 0, "checks": checks}
    return raw


def test_config_defaults():
    config, problems = agent.normalize_config(base_config(ping={"peers": [{"name": "p", "address": "10.0.0.2"}]}))
    assert problems == []
    assert (
        config["checks"]["gpu"]["enabled"] is False and config["checks"]["gpu"]["reason_disabled"] == "not configured"
    )
    ping = config["checks"]["ping"]
    assert (ping["interval_ms"], ping["timeout_ms"], ping["loss_threshold"], ping["rise"]) == (100, 100, 5, 10)
    assert ping["peers"] == [{"name": "p", "address": "10.0.0.2", "same_replica": False}]
    assert config["journalctl"] == "/usr/bin/journalctl"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"node": ""}, "'node' must be a non-empty string, found ''"),
        ({"port": 70000}, "'port' must be an integer 0..65535 (0: any free port), found 70000"),
        ({"rank": -1}, "'rank' must be an integer >= 0, found -1"),
        ({"checks": {"gpu": {"fall": 0}}}, "checks.gpu.fall must be an integer 1..1000, found 0"),
        (
            {"checks": {"gpu": {"interval": "30"}}},
            "checks.gpu.interval must be a number of seconds > 0 and <= 3600, found '30'",
        ),
        (
            {"checks": {"gpu": {"expected_count": "8"}}},
            "checks.gpu.expected_count must be null or an integer 1..64, found '8'",
        ),
        ({"checks": {"engine": {"url": "127.0.0.1:8000"}}}, "checks.engine.url must be the engine's base URL"),
        (
            {"checks": {"engine": {"url": "http://h:1", "deep_every": 0}}},
            "checks.engine.deep_every must be an integer 1..1000",
        ),
        ({"checks": {"journal": {"unit": ""}}}, "checks.journal.unit must name the serving unit, found ''"),
        ({"checks": {"journal": {"unit": "u", "patterns": ["("]}}}, "checks.journal.patterns: '(' is not a regular"),
        ({"checks": {"ping": {"timeout_ms": 150}}}, "checks.ping.timeout_ms must be an integer 1..interval_ms (100)"),
        ({"checks": {"ping": {"interval_ms": 5}}}, "checks.ping.interval_ms must be an integer 10..60000, found 5"),
        ({"checks": {"ping": {"source_address": "fabric0"}}}, "checks.ping.source_address must be an IPv4 address"),
        ({"checks": {"ping": {"peers": [{"name": "p", "address": "h1"}]}}}, "checks.ping.peers must be a list of"),
        (
            {
                "checks": {
                    "ping": {"peers": [{"name": "p", "address": "10.0.0.1"}, {"name": "p", "address": "10.0.0.2"}]}
                }
            },
            "checks.ping.peers names each peer once, found p, p",
        ),
        ({"checks": {"ping": {"loss_threshold": 0}}}, "checks.ping.loss_threshold must be an integer 1..1000, found 0"),
        # The role's rule for health_agent_ping_peers[].name: a newline would start a line of its own
        # in the agent's journal ("fabric peer ... is lost").
        (
            {"checks": {"ping": {"peers": [{"name": "node-2\nfabric peer node-3 is back", "address": "10.0.0.2"}]}}},
            "checks.ping.peers names may hold letters, digits and ._- only, found 'node-2\\nfabric peer node-3",
        ),
        (
            {"checks": {"ping": {"peers": [{"name": "node 2", "address": "10.0.0.2"}]}}},
            "checks.ping.peers names may hold letters, digits and ._- only, found 'node 2'",
        ),
        ({"checks": []}, "'checks' must be an object, found []"),
        # The role's limits (module_utils/_health_agent_config.py), so the agent takes no value the
        # role would refuse.
        ({"checks": {"gpu": {"rise": 1001}}}, "checks.gpu.rise must be an integer 1..1000, found 1001"),
        ({"checks": {"engine": {"url": "http://h:1", "timeout": 3601}}}, "checks.engine.timeout must be a number"),
        ({"checks": {"gpu": {"expected_count": 0}}}, "checks.gpu.expected_count must be null or an integer 1..64"),
        ({"checks": {"gpu": {"expected_count": 65}}}, "checks.gpu.expected_count must be null or an integer 1..64"),
        ({"checks": {"ping": {"interval_ms": 60001}}}, "checks.ping.interval_ms must be an integer 10..60000"),
    ],
)
def test_config_problems(change, problem):
    raw = base_config()
    raw.update(change)
    _config, problems = agent.normalize_config(raw)
    assert problems and problems[0].startswith(problem), problems


def test_load_config_names_the_file_and_the_problem(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(base_config(ping={"interval_ms": 5})))
    with pytest.raises(SystemExit, match=r"agent.json: checks.ping.interval_ms must be an integer 10\.\.60000"):
        agent.load_config(str(path))
    path.write_text("{")
    with pytest.raises(SystemExit, match=r"cannot read config .*agent.json"):
        agent.load_config(str(path))


# The agent object: transitions, /health and metrics -----------------------------------------


def make_agent(checks, **kwargs):
    config, problems = agent.normalize_config(base_config(**checks))
    assert problems == []
    stream = io.StringIO()
    return agent.Agent(config, stream=stream, gpu_parser=_gpu, **kwargs), stream


def metric_lines(instance):
    text = agent.prometheus_client.generate_latest(instance.metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("gpufleet_health_")]


def test_transitions_are_logged_counted_and_exported():
    instance, stream = make_agent(
        {
            "engine": {"url": "http://127.0.0.1:1", "fall": 2, "rise": 1},
            "gpu": {"enabled": False, "reason_disabled": "no GPU"},
        }
    )
    instance.record("engine", False, "HTTP 500")
    assert instance.health()["healthy"] is True
    instance.record("engine", False, "HTTP 500")
    health = instance.health()
    assert health["healthy"] is False
    assert health["checks"]["engine"] == {
        "ok": False,
        "state": "failing",
        "reason": "HTTP 500",
        "since": health["checks"]["engine"]["since"],
    }
    assert health["checks"]["gpu"] == {
        "ok": False,
        "state": "disabled",
        "reason": "no GPU",
        "since": health["checks"]["gpu"]["since"],
    }
    assert health["checks"]["ping"]["lost_peers"] == {}
    assert (health["node"], health["replica"], health["rank"]) == ("n1", "r0", 0)
    assert "gpufleet-health-agent: check engine is now failing: HTTP 500" in stream.getvalue().splitlines()
    lines = metric_lines(instance)
    assert "gpufleet_health_healthy 0.0" in lines
    assert 'gpufleet_health_check_ok{check="engine"} 0.0' in lines
    assert 'gpufleet_health_check_transitions_total{check="engine",to="failing"} 1.0' in lines
    assert 'gpufleet_health_check_enabled{check="gpu"} 0.0' in lines
    # A disabled check is not exported as ok.
    assert not any(line.startswith('gpufleet_health_check_ok{check="gpu"}') for line in lines)
    instance.record("engine", True, "answered")
    assert instance.health()["healthy"] is True
    assert 'gpufleet_health_check_transitions_total{check="engine",to="ok"} 1.0' in metric_lines(instance)


def test_ping_outcomes_drive_peer_state_lost_since_and_the_check():
    clock = iter(float(second) for second in range(100, 200))
    instance, stream = make_agent(
        {
            "ping": {
                "loss_threshold": 2,
                "rise": 1,
                "peers": [
                    {"name": "a", "address": "10.0.0.1", "same_replica": True},
                    {"name": "b", "address": "10.0.0.2", "same_replica": False},
                ],
            }
        },
        clock=lambda: next(clock),
    )
    instance.ping_outcome("a", True, 0.0002)
    instance.ping_outcome("a", False, None)
    assert instance.health()["healthy"] is True
    instance.ping_outcome("a", False, None)
    health = instance.health()
    assert health["healthy"] is False
    lost_at = health["checks"]["ping"]["lost_peers"]["a"]
    assert health["checks"]["ping"]["reason"] == "fabric peer(s) of this replica lost: a"
    assert health["checks"]["ping"]["since"] >= lost_at
    assert "gpufleet-health-agent: fabric peer a is lost" in stream.getvalue()
    lines = metric_lines(instance)
    assert 'gpufleet_health_ping_peer_up{peer="a"} 0.0' in lines
    assert 'gpufleet_health_ping_lost_total{peer="a"} 2.0' in lines
    assert 'gpufleet_health_ping_rtt_seconds{peer="a"} 0.0002' in lines
    assert 'gpufleet_health_ping_sent_total{peer="b"} 0.0' in lines
    instance.ping_outcome("a", True, 0.0003)
    assert instance.health()["healthy"] is True and instance.health()["checks"]["ping"]["lost_peers"] == {}


def test_ping_check_is_ok_again_once_every_peer_is_back_whatever_the_rise():
    # Regression: the ping check is recorded only when a peer changes state; with a check-level
    # rise as well (the peers' rise, 5 here) it waited for 5 results; three peers give three.
    clock = iter(float(second) for second in range(100, 400))
    peers = [{"name": f"p{i}", "address": f"10.0.0.{i + 1}", "same_replica": False} for i in range(3)]
    instance, _stream = make_agent(
        {"ping": {"loss_threshold": 2, "rise": 5, "peers": peers}}, clock=lambda: next(clock)
    )
    for _round in range(2):
        for peer in peers:
            instance.ping_outcome(peer["name"], False, None)
    health = instance.health()
    assert (
        health["checks"]["ping"]["state"] == "failing"
        and "every fabric peer is lost" in health["checks"]["ping"]["reason"]
    )
    for _round in range(5):
        for peer in peers:
            instance.ping_outcome(peer["name"], True, 0.0001)
    health = instance.health()
    assert health["checks"]["ping"]["state"] == "ok", health["checks"]["ping"]
    assert health["healthy"] is True


def fake_program(path, body):
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(0o755)
    return str(path)


def test_gpu_check_runs_nvidia_smi_and_counts_xids(tmp_path):
    document = tmp_path / "smi.xml"
    document.write_text(smi_document(2))
    smi = fake_program(tmp_path / "nvidia-smi", f"import sys\nsys.stdout.write(open({str(document)!r}).read())\n")
    instance, _stream = make_agent({"gpu": {"nvidia_smi": smi, "expected_count": 2}})
    xids = (FIXTURES / "kernel-xid.txt").read_text().splitlines()
    fake = FakeJournalctl([("c0", "boot")])
    instance.kernel = agent.Journal("/usr/bin/journalctl", ["--dmesg"], run=fake)
    instance.run_check("gpu")
    assert instance.checks["gpu"]["reason"] == "2 GPU(s), no uncorrectable ECC errors"
    fake.entries += [(f"c{number}", line) for number, line in enumerate(xids, start=1)]
    instance.run_check("gpu")
    assert instance.checks["gpu"]["state"] == "failing"
    assert instance.checks["gpu"]["reason"] == (
        "fatal Xid 94 on 0000:01:00, 48 on 0000:2a:00, 95 on 0000:3b:00, 79 on 0000:61:00"
    )
    lines = metric_lines(instance)
    assert 'gpufleet_health_xid_events_total{xid="79"} 1.0' in lines
    assert 'gpufleet_health_xid_events_total{xid="94"} 1.0' in lines
    assert 'gpufleet_health_xid_events_total{xid="13"} 1.0' in lines
    assert "gpufleet_health_gpu_count 2.0" in lines
    assert "gpufleet_health_gpu_ecc_uncorrectable_volatile_total 0.0" in lines
    assert f'gpufleet_health_agent_info{{version="{agent.__version__}"}} 1.0' in lines
    broken = fake_program(
        tmp_path / "broken-smi", "import sys\nprint('Unable to determine the device handle')\nsys.exit(15)\n"
    )
    instance.config["checks"]["gpu"]["nvidia_smi"] = broken
    instance.run_check("gpu")
    assert instance.checks["gpu"]["last_bad"] == f"{broken} -q -x failed (rc 15): Unable to determine the device handle"


# The program --------------------------------------------------------------------------------


def fake_journalctl(tmp_path):
    """A journalctl that serves <dir>/unit.jsonl (or kernel.jsonl for --dmesg) with its cursors."""
    body = f"""
import json, sys
name = "kernel" if "--dmesg" in sys.argv else "unit"
try:
    entries = [json.loads(line) for line in open({str(tmp_path)!r} + "/" + name + ".jsonl")]
except OSError:
    entries = []
after = [arg.split("=", 1)[1] for arg in sys.argv if arg.startswith("--after-cursor=")]
if after:
    cursors = [entry["__CURSOR"] for entry in entries]
    entries = entries[cursors.index(after[0]) + 1:]
if "--lines=1" in sys.argv:
    entries = entries[-1:]
for entry in entries:
    print(json.dumps(entry))
"""
    return fake_program(tmp_path / "journalctl", body)


def program_config(tmp_path, engine_url, **ping):
    config = base_config(
        engine={"url": engine_url, "interval": 0.2, "timeout": 30, "fall": 1, "rise": 1},
        journal={"unit": "gpufleet-vllm-r0.service", "interval": 0.2, "fall": 1, "rise": 1},
        gpu={"enabled": False, "reason_disabled": "no NVIDIA GPU on this host (lspci/sysfs: no vendor 0x10de)"},
        ping=dict({"enabled": False, "reason_disabled": "no fabric peers"}, **ping),
    )
    config["journalctl"] = fake_journalctl(tmp_path)
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(config))
    return path


def get(url):
    try:
        with NO_PROXY.open(url, timeout=30) as response:
            return response.status, response.headers.get("Content-Type"), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


STARTING = agent.new_check_state(0)["reason"]


def test_daemon_serves_health_and_metrics_and_stops_on_sigterm(engine, tmp_path):
    ping = {"enabled": True, "source_address": "127.0.0.1", "interval_ms": 200, "timeout_ms": 200, "loss_threshold": 2}
    ping["peers"] = [{"name": "self", "address": "127.0.0.1", "same_replica": True}]
    if not raw_icmp_allowed():
        ping = {}
    config = program_config(tmp_path, engine.url, **ping)
    proc = subprocess.Popen(
        [*program("health_agent"), "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Ends the read of its lines when the agent hangs.
    hang = threading.Timer(120, proc.kill)
    hang.start()
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "serving /health and /metrics on" in line:
                break
        base = "http://" + re.search(r"on (\S+) for node", lines[-1]).group(1)
        assert wait_for(lambda: len(engine.requests) >= 2)
        # The journal check takes the journal's end as its start on its first read: a line written
        # before that read is history, not news.
        assert wait_for(lambda: json.loads(get(base + "/health")[2])["checks"]["journal"]["reason"] != STARTING)
        status, content_type, body = get(base + "/health")
        health = json.loads(body)
        assert (status, content_type, health["healthy"]) == (200, "application/json", True)
        assert health["checks"]["gpu"]["state"] == "disabled"
        assert health["checks"]["engine"]["reason"].startswith("1-token completion answered")
        # NCCL trouble in the unit's journal fails the journal check within an interval.
        (tmp_path / "unit.jsonl").write_text(journal_line("u1", "NCCL WARN NET/IB : Got async event") + "\n")
        assert wait_for(lambda: get(base + "/health")[0] == 503)
        health = json.loads(get(base + "/health")[2])
        assert health["checks"]["journal"]["state"] == "failing"
        assert "NCCL WARN NET/IB" in health["checks"]["journal"]["reason"]
        engine.status = 500
        assert wait_for(lambda: json.loads(get(base + "/health")[2])["checks"]["engine"]["state"] == "failing")
        status, content_type, metrics = get(base + "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert "gpufleet_health_healthy 0.0" in metrics
        assert "gpufleet_health_nccl_errors_total 1.0" in metrics
        assert re.search(r"^gpufleet_health_engine_probe_failures_total [1-9]", metrics, re.MULTILINE)
        assert re.search(r"^gpufleet_health_engine_probe_seconds ", metrics, re.MULTILINE)
        if ping:
            assert re.search(r'^gpufleet_health_ping_sent_total\{peer="self"\} [1-9]', metrics, re.MULTILINE)
            assert 'gpufleet_health_ping_peer_up{peer="self"} 1.0' in metrics
        assert get(base + "/nothing")[0] == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        rest = proc.stdout.read()
    finally:
        hang.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = "\n".join(lines) + "\n" + rest
    assert "check journal is now failing: 1 new line(s) of gpufleet-vllm-r0.service match" in log
    assert "check engine is now failing: HTTP 500" in log
    # Nothing after the stop: a check that ended meanwhile is not logged after these two.
    assert log.splitlines()[-2:] == ["gpufleet-health-agent: stopping on signal 15", "gpufleet-health-agent: stopped"]


def test_once_prints_health_and_exits_by_the_verdict(engine, tmp_path):
    config = program_config(tmp_path, engine.url)
    proc = subprocess.run(
        [*program("health_agent"), "--config", str(config), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    health = json.loads(proc.stdout)
    assert health["healthy"] is True and health["checks"]["engine"]["state"] == "ok"
    assert health["checks"]["ping"] == {
        "ok": False,
        "state": "disabled",
        "reason": "no fabric peers",
        "since": health["checks"]["ping"]["since"],
        "lost_peers": {},
    }
    # --once reads the last interval of the journal, and one bad result is enough.
    (tmp_path / "unit.jsonl").write_text(journal_line("u1", "ncclInternalError: internal error") + "\n")
    engine.status = 503
    proc = subprocess.run(
        [*program("health_agent"), "--config", str(config), "--once"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    health = json.loads(proc.stdout)
    assert health["healthy"] is False
    assert (health["checks"]["engine"]["state"], health["checks"]["journal"]["state"]) == ("failing", "failing")


def test_program_refuses_a_bad_config_in_one_line(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(base_config(ping={"timeout_ms": 500})))
    proc = subprocess.run(
        [*program("health_agent"), "--config", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"gpufleet-health-agent: {path}: checks.ping.timeout_ms must be an integer 1..interval_ms (100), found 500"
    ]


def test_check_config_validates_without_running(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(base_config()))
    command = [*program("health_agent"), "--check-config", "--config", str(path)]
    assert subprocess.run(command, capture_output=True, text=True, timeout=30, check=False).returncode == 0
    path.write_text(json.dumps(base_config(engine={"url": "nowhere"})))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 1 and "checks.engine.url must be the engine's base URL" in proc.stderr
