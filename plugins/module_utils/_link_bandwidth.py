# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TCP bandwidth between two hosts: iperf3 JSON parsing, a built-in Python engine, link speed.

Facts (iperf3 3.12 on Debian 12, checked here):
- iperf3 3.11 to 3.13 exit 0 on failure with -J; the JSON's top-level "error" key is the only sign.
- `iperf3 -s -1 --idle-timeout N` exits 0 with empty output when no client came within N seconds;
  a running test is not cut by it.
- In a client's JSON both sides' figures are present; a server's JSON has zero bytes (and no
  retransmits) on the side it did not measure. The receiver's count is the authoritative one.
- One TCP stream is bounded by one core's copy cost (15-35 Gbit/s), so the Python engine runs one
  process per stream. Explicit SO_SNDBUF/SO_RCVBUF turn Linux autotuning off and are capped by
  net.core.[rw]mem_max (often 208 KiB), so they are set only where the cap allows the 4 MiB asked for.
- Zero copy (sendfile) and MSG_TRUNC are what iperf3's -Z and --skip-rx-copy do. Over loopback
  sendfile was slower than send() here, as -Z was for iperf3; the zerocopy switch turns it off.

The Python engine speaks its own protocol on one TCP port (it does not talk to iperf3):
  client -> server  control line {"gpufleet_link_bandwidth": 1, cookie, streams, duration, direction,
                    buffer_size, zerocopy}
  server -> client  {"ok": true} or {"error": ...}
  client -> server  N data connections (2N for bidir) on the same port, each opened by DATA_MAGIC + cookie + index
  server -> client  {"ready": true} once its workers exist; client -> server {"start": true}
  senders send for `duration` seconds and shut down; receivers count bytes until EOF
  server -> client, then client -> server: {"streams": [per-stream results]}
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import multiprocessing
import os
import socket
import struct
import subprocess
import tempfile
import time

DIRECTIONS = ("forward", "reverse", "bidir")
MAGIC_KEY = "gpufleet_link_bandwidth"
PROTOCOL_VERSION = 1
DATA_MAGIC = b"GFLBDATA"
COOKIE_LEN = 16
DATA_HEADER = struct.Struct(">8s16sI")
# Seconds allowed for the handshake steps and, after `duration`, for the senders to drain.
HANDSHAKE_TIMEOUT = 10.0
DRAIN_GRACE = 30.0
# Socket buffer size asked for when net.core.[rw]mem_max allows it: 4 MiB (the kernel doubles it)
# covers the bandwidth-delay product of 100 Gbit/s at 300 us RTT.
SOCKET_BUFFER = 4 * 1024 * 1024
# Bytes per send/recv call: at 100 Gbit/s 1 MiB is ~12 000 calls a second, so the interpreter's
# per-call cost vanishes; measured on loopback it was at least as fast as 128 KiB.
BUFFER_SIZE = 1024 * 1024
MAX_STREAMS = 128
SIOCGIFADDR = 0x8915
TCPI_TOTAL_RETRANS_OFFSET = 100
# Errors of a client that may go away once the server is up or has finished its previous test.
RETRYABLE_IPERF3_ERRORS = ("unable to connect", "server is busy")


class LinkBandwidthError(Exception):
    """A test that did not produce a result; the message names the cause, details carry rc/stdout/stderr."""

    def __init__(self, msg, **details):
        super(LinkBandwidthError, self).__init__(msg)
        self.details = details


# ---------------------------------------------------------------- iperf3


def iperf3_client_argv(iperf3, peer, port, duration, streams, direction, bind=None, connect_timeout_ms=None):
    argv = [iperf3, "-c", peer, "-p", str(port), "-t", str(duration), "-P", str(streams), "-J"]
    if direction == "reverse":
        argv.append("-R")
    elif direction == "bidir":
        argv.append("--bidir")
    if bind:
        argv += ["-B", bind]
    if connect_timeout_ms:
        argv += ["--connect-timeout", str(int(connect_timeout_ms))]
    return argv


def iperf3_server_argv(iperf3, port, timeout, bind=None):
    argv = [iperf3, "-s", "-1", "-J", "-p", str(port), "--idle-timeout", str(timeout)]
    if bind:
        argv += ["-B", bind]
    return argv


def iperf3_retryable(error):
    return any(marker in error for marker in RETRYABLE_IPERF3_ERRORS)


def load_iperf3_json(text):
    """Decode iperf3 -J output; raise LinkBandwidthError on no JSON or on its "error" key, whatever the rc."""
    if not text or not text.strip():
        raise LinkBandwidthError("iperf3 printed nothing")
    # The first document is the report: iperf3 3.16 and 3.17 can print the whole -J document twice
    # (esnet/iperf#1688, #1716), and 3.16+ can print a line such as 'iperf3: error - no error'
    # after it as it exits (esnet/iperf#1631). A run that failed says so in the document's "error".
    try:
        doc, _end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except ValueError as exc:
        raise LinkBandwidthError("iperf3 printed no JSON (%s): %r" % (exc, text[:200])) from None
    if not isinstance(doc, dict):
        raise LinkBandwidthError("iperf3 printed %r, not a JSON object" % (text[:200],))
    if doc.get("error"):
        raise LinkBandwidthError("iperf3: %s" % doc["error"])
    return doc


def iperf3_version(doc):
    """'iperf 3.12' -> '3.12'; None when the JSON does not say."""
    version = (doc.get("start") or {}).get("version") or ""
    return version.split()[-1] if version else None


def _direction_figures(sent, received):
    """(bits_per_second, retransmits) of one direction from its sum_sent and sum_received."""
    source = received if received.get("bytes") else sent
    return float(source.get("bits_per_second") or 0.0), sent.get("retransmits")


def parse_iperf3(doc, mode):
    """Summarise a decoded iperf3 -J document as seen by `mode` ('client' or 'server')."""
    start = doc.get("start") or {}
    end = doc.get("end") or {}
    test_start = start.get("test_start") or {}
    if "sum_sent" not in end and "sum_received" not in end:
        raise LinkBandwidthError("iperf3 JSON has no end.sum_sent/sum_received: the test did not finish")
    bidir = "sum_sent_bidir_reverse" in end
    main_direction = "reverse" if test_start.get("reverse") else "forward"
    directions = {
        main_direction: _direction_figures(end.get("sum_sent") or {}, end.get("sum_received") or {}),
    }
    if bidir:
        directions["reverse"] = _direction_figures(
            end.get("sum_sent_bidir_reverse") or {}, end.get("sum_received_bidir_reverse") or {}
        )
    per_stream = []
    for stream in end.get("streams") or []:
        sender = stream.get("sender") or {}
        receiver = stream.get("receiver") or {}
        bps, retransmits = _direction_figures(sender, receiver)
        local_sends = bool(sender.get("sender", receiver.get("sender")))
        client_sends = local_sends if mode == "client" else not local_sends
        per_stream.append(
            {
                "bits_per_second": bps,
                "retransmits": retransmits,
                "direction": "forward" if client_sends else "reverse",
            }
        )
    result = summarize(
        mode,
        "bidir" if bidir else main_direction,
        test_start.get("duration"),
        test_start.get("num_streams", len(per_stream)),
        directions,
        per_stream,
    )
    result["iperf3_version"] = iperf3_version(doc)
    # The addresses of the first test connection, which show whether the test ran over the fabric.
    first = (start.get("connected") or [{}])[0]
    result["local_address"] = first.get("local_host")
    result["remote_address"] = first.get("remote_host")
    return result


def summarize(mode, direction, duration, streams, directions, per_stream):
    """The result both backends return. directions maps 'forward'/'reverse' to (bps, retransmits or None)."""
    retransmits = [figures[1] for figures in directions.values()]
    result = {
        "mode": mode,
        "direction": direction,
        "duration": duration,
        "streams": streams,
        "bits_per_second": sum(figures[0] for figures in directions.values()),
        "per_stream": per_stream,
        "retransmits": None if None in retransmits else sum(retransmits),
    }
    if direction == "bidir":
        # Sent and received are the reporting host's view: a client sends forward, a server reverse.
        sent, received = ("forward", "reverse") if mode == "client" else ("reverse", "forward")
        result["sent_bits_per_second"] = directions[sent][0]
        result["received_bits_per_second"] = directions[received][0]
    return result


def iperf3_client(iperf3, peer, port, duration, streams, direction, timeout, bind=None):
    """Run an iperf3 client, retrying for `timeout` seconds while the server is not up or still busy."""
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        connect = max(1.0, min(deadline - time.monotonic(), HANDSHAKE_TIMEOUT))
        argv = iperf3_client_argv(iperf3, peer, port, duration, streams, direction, bind, connect * 1000)
        rc, stdout, stderr, timed_out = run_bounded(argv, connect + duration + DRAIN_GRACE)
        details = {"rc": rc, "stdout": stdout, "stderr": stderr, "cmd": argv}
        if timed_out:
            raise LinkBandwidthError("iperf3 was killed after %d s" % (connect + duration + DRAIN_GRACE), **details)
        try:
            doc = load_iperf3_json(stdout)
        except LinkBandwidthError as exc:
            if iperf3_retryable(str(exc)) and time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                continue
            tried = " (%d attempts in %d s)" % (attempts, timeout) if attempts > 1 else ""
            raise LinkBandwidthError("%s%s%s" % (exc, tried, _stderr_hint(stdout, stderr)), **details) from None
        if rc != 0:
            raise LinkBandwidthError("iperf3 exited %d%s" % (rc, _stderr_hint("", stderr)), **details)
        return parse_iperf3(doc, "client")


def iperf3_server(iperf3, port, timeout, duration, bind=None):
    """Serve one iperf3 test; iperf3 gives up after `timeout` idle seconds, and is killed if it hangs."""
    argv = iperf3_server_argv(iperf3, port, timeout, bind)
    limit = timeout + duration + DRAIN_GRACE
    rc, stdout, stderr, timed_out = run_bounded(argv, limit)
    details = {"rc": rc, "stdout": stdout, "stderr": stderr, "cmd": argv}
    if timed_out:
        raise LinkBandwidthError(
            "iperf3 was still running after %d s (timeout + duration + %d): killed" % (limit, DRAIN_GRACE), **details
        )
    if rc == 0 and not stdout.strip():
        raise LinkBandwidthError("no client started a test within %d s" % timeout, **details)
    try:
        doc = load_iperf3_json(stdout)
    except LinkBandwidthError as exc:
        raise LinkBandwidthError("%s%s" % (exc, _stderr_hint(stdout, stderr)), **details) from None
    return parse_iperf3(doc, "server")


def _stderr_hint(stdout, stderr):
    lines = [] if stdout.strip() else stderr.strip().splitlines()
    return "; stderr: %s" % lines[0] if lines else ""


def run_bounded(argv, limit):
    """Run argv for at most `limit` seconds; return (rc, stdout, stderr, timed_out). Kills it at the limit."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        timed_out = True
    return proc.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"), timed_out


# ---------------------------------------------------------------- link speed


def read_link_speed(sysfs_root, interface):
    """Speed of `interface` in Mbit/s from sysfs; None when unknown (no file, -1, or a link that is down)."""
    try:
        with open(os.path.join(sysfs_root, "class", "net", interface, "speed"), "r") as handle:
            speed = int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None
    return speed if speed > 0 else None


def fraction_of_link(result, link_speed_mbps):
    """Achieved share of the link. A full-duplex link carries its speed each way, so bidir counts it twice."""
    if not link_speed_mbps:
        return None
    capacity = link_speed_mbps * 1e6 * (2 if result["direction"] == "bidir" else 1)
    return result["bits_per_second"] / capacity


def source_address_for(peer, port):
    """The local address the kernel would use to reach peer (a UDP connect sends nothing)."""
    try:
        candidates = socket.getaddrinfo(peer, port, 0, socket.SOCK_DGRAM)
    except (IOError, OSError):
        return None
    for family, socktype, proto, _name, sockaddr in candidates:
        probe = socket.socket(family, socktype, proto)
        try:
            probe.connect(sockaddr)
            return probe.getsockname()[0]
        except (IOError, OSError):
            continue
        finally:
            probe.close()
    return None


def interface_for_address(address, proc_root="/proc"):
    """Name of the interface that holds the IP `address`, from the stdlib alone; None when not found.

    IPv4 asks each interface for its primary address (SIOCGIFADDR), so secondary addresses are
    not seen; IPv6 reads <proc_root>/net/if_inet6.
    """
    if not address:
        return None
    try:
        if ":" in address:
            return _ipv6_interface(socket.inet_pton(socket.AF_INET6, address.split("%")[0]), proc_root)
        return _ipv4_interface(socket.inet_pton(socket.AF_INET, address))
    except (IOError, OSError, ValueError):
        return None


def _ipv6_interface(packed, proc_root):
    with open(os.path.join(proc_root, "net", "if_inet6"), "r") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) >= 6 and bytes.fromhex(fields[0]) == packed:
                return fields[5]
    return None


def _ipv4_interface(packed):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                ifreq = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except (IOError, OSError):
                continue  # no IPv4 address on this one
            if ifreq[20:24] == packed:
                return name
    finally:
        probe.close()
    return None


# ---------------------------------------------------------------- Python engine: data workers


def _kernel_limit(name):
    try:
        with open("/proc/sys/net/core/%s" % name, "r") as handle:
            return int(handle.read().split()[0])
    except (IOError, OSError, ValueError, IndexError):
        return 0


def _tune(sock, option, limit_name):
    # Setting SO_*BUF pins the buffer and turns autotuning off: only worth it when the cap allows a big one.
    if _kernel_limit(limit_name) >= SOCKET_BUFFER:
        sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)


def _total_retrans(sock):
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 256)
    except (IOError, OSError):
        return None
    if len(info) < TCPI_TOTAL_RETRANS_OFFSET + 4:
        return None
    return struct.unpack_from("I", info, TCPI_TOTAL_RETRANS_OFFSET)[0]


def _payload_file(size):
    """A file of `size` bytes to sendfile() from: a memfd where the kernel has them, else a temporary file."""
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create("gpufleet-link-bandwidth")
            handle = os.fdopen(fd, "w+b")
        except (IOError, OSError):
            handle = tempfile.TemporaryFile()
    else:
        handle = tempfile.TemporaryFile()
    handle.write(os.urandom(size))
    handle.flush()
    return handle


def send_stream(sock, duration, buffer_size, zerocopy=True):
    """Send for `duration` seconds, with sendfile() from a memfd when zerocopy and the kernel allow it."""
    _tune(sock, socket.SO_SNDBUF, "wmem_max")
    sock.settimeout(None)  # os.sendfile needs a blocking descriptor
    zerocopy = zerocopy and hasattr(os, "sendfile")
    payload = _payload_file(buffer_size) if zerocopy else None
    data = memoryview(os.urandom(buffer_size))
    sent = 0
    began = time.monotonic()
    deadline = began + duration
    try:
        while time.monotonic() < deadline:
            if zerocopy:
                try:
                    sent += os.sendfile(sock.fileno(), payload.fileno(), 0, buffer_size)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) or sent:
                        raise
                    zerocopy = False
            sent += sock.send(data)
        elapsed = time.monotonic() - began
        sock.shutdown(socket.SHUT_WR)
        # Wait for the receiver's close, so the retransmit count covers the whole transfer.
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            while sock.recv(4096):
                pass
        except (IOError, OSError):
            pass
    finally:
        if payload:
            payload.close()
    return {"bytes": sent, "seconds": elapsed, "retransmits": _total_retrans(sock), "zerocopy": zerocopy}


def receive_stream(sock, buffer_size, idle_timeout):
    """Count bytes until EOF into one preallocated buffer, discarding them in the kernel where it can."""
    _tune(sock, socket.SO_RCVBUF, "rmem_max")
    sock.settimeout(idle_timeout)
    buf = bytearray(buffer_size)
    flags = getattr(socket, "MSG_TRUNC", 0)
    received = 0
    first = last = None
    while True:
        try:
            count = sock.recv_into(buf, buffer_size, flags)
        except OSError as exc:
            if flags and exc.errno == errno.EINVAL:
                flags = 0
                continue
            raise
        if not count:
            break
        last = time.monotonic()
        if first is None:
            first = last
        received += count
    try:
        # shutdown, not close: forked copies of this socket must not hold the sender's drain open
        sock.shutdown(socket.SHUT_RDWR)
    except (IOError, OSError):
        pass
    seconds = (last - first) if first is not None else 0.0
    return {"bytes": received, "seconds": seconds}


def _worker(conn, sock, sends, test):
    try:
        if sends:
            conn.recv()  # the start signal
            result = send_stream(sock, test["duration"], test["buffer_size"], test["zerocopy"])
        else:
            result = receive_stream(sock, test["buffer_size"], test["duration"] + DRAIN_GRACE)
    except Exception as exc:  # pylint: disable=broad-except
        result = {"error": "%s: %s" % (type(exc).__name__, exc)}
    conn.send(result)
    conn.close()


class _Workers(object):
    """One process per data connection, so streams do not share a core."""

    def __init__(self, data, sends_for, test):
        # fork: the module runs from a zipped payload that spawn/forkserver could not re-import.
        context = multiprocessing.get_context("fork")
        self.procs = []
        for index, sock in sorted(data.items()):
            parent, child = context.Pipe()
            proc = context.Process(target=_worker, args=(child, sock, sends_for(index), test))
            proc.daemon = True
            proc.start()
            child.close()
            sock.close()  # the worker holds its own copy
            self.procs.append((index, proc, parent, sends_for(index)))

    def start(self):
        for _index, _proc, parent, sends in self.procs:
            if sends:
                parent.send("go")

    def collect(self, limit):
        deadline = time.monotonic() + limit
        results = []
        for index, _proc, parent, sends in self.procs:
            try:
                if not parent.poll(max(0.0, deadline - time.monotonic())):
                    raise EOFError("no result within %d s" % limit)
                result = parent.recv()
            except (EOFError, IOError, OSError) as exc:
                result = {"error": str(exc) or "the worker died"}
            result.update(index=index, role="sender" if sends else "receiver")
            results.append(result)
        self.stop()
        return results

    def stop(self):
        for _index, proc, parent, _sends in self.procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
            parent.close()


# ---------------------------------------------------------------- Python engine: control


def stream_direction(index, streams, direction):
    if direction == "bidir":
        return "forward" if index < streams else "reverse"
    return direction


def _send_json(sock, obj):
    sock.sendall(json.dumps(obj).encode("utf-8") + b"\n")


def _read_json(rfile, what):
    line = rfile.readline(65536)
    if not line:
        raise LinkBandwidthError("the peer closed the control connection while waiting for %s" % what)
    try:
        obj = json.loads(line.decode("utf-8"))
    except ValueError:
        raise LinkBandwidthError("the peer sent %r instead of %s" % (line[:60], what)) from None
    if not isinstance(obj, dict):
        raise LinkBandwidthError("the peer sent %r instead of %s" % (line[:60], what))
    if obj.get("error"):
        raise LinkBandwidthError("the peer reported: %s" % obj["error"])
    return obj


def _recv_exact(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def validate_test(params):
    """Problems with a client's test parameters, as one string; empty when they are fine."""
    if params.get(MAGIC_KEY) != PROTOCOL_VERSION:
        return "not a link_bandwidth python engine client of protocol %d" % PROTOCOL_VERSION
    if params.get("direction") not in DIRECTIONS:
        return "direction %r is not one of %s" % (params.get("direction"), ", ".join(DIRECTIONS))
    # duration may be a fraction of a second, which keeps the engine's own tests short
    for name, types, low, high in (
        ("streams", int, 1, MAX_STREAMS),
        ("duration", (int, float), 0.1, 86400),
        ("buffer_size", int, 1024, 1 << 30),
    ):
        value = params.get(name)
        if isinstance(value, bool) or not isinstance(value, types) or not low <= value <= high:
            return "%s=%r is not in %s..%s" % (name, value, low, high)
    if not isinstance(params.get("zerocopy"), bool):
        return "zerocopy=%r is not a boolean" % (params.get("zerocopy"),)
    if not isinstance(params.get("cookie"), str) or len(params["cookie"]) != COOKIE_LEN:
        return "bad cookie"
    return ""


def _engine_result(mode, test, results):
    """Merge both sides' per-stream records into the summary; the receivers' counts are authoritative."""
    failures = ["stream %d %s: %s" % (r["index"], r["role"], r["error"]) for r in results if r.get("error")]
    if failures:
        raise LinkBandwidthError("; ".join(failures))
    by_index = {}
    for record in results:
        by_index.setdefault(record["index"], {})[record["role"]] = record
    per_stream = []
    directions = {}
    total = test["streams"] * (2 if test["direction"] == "bidir" else 1)
    missing = [index for index in range(total) if "receiver" not in by_index.get(index, {})]
    if missing:
        raise LinkBandwidthError("no receiver count for stream(s) %s" % ", ".join(map(str, missing)))
    for index in range(total):
        receiver = by_index[index]["receiver"]
        sender = by_index[index].get("sender") or {}
        seconds = receiver.get("seconds") or 0.0
        bps = receiver.get("bytes", 0) * 8.0 / seconds if seconds > 0 else 0.0
        direction = stream_direction(index, test["streams"], test["direction"])
        per_stream.append({"bits_per_second": bps, "retransmits": sender.get("retransmits"), "direction": direction})
        total, retrans = directions.get(direction, (0.0, 0))
        retrans = None if retrans is None or sender.get("retransmits") is None else retrans + sender["retransmits"]
        directions[direction] = (total + bps, retrans)
    result = summarize(mode, test["direction"], test["duration"], test["streams"], directions, per_stream)
    result["zerocopy"] = all(r.get("zerocopy") for r in results if r["role"] == "sender")
    return result


def _listen(bind, port):
    if bind:
        family = socket.getaddrinfo(bind, port, 0, socket.SOCK_STREAM)[0][0]
        return socket.create_server((bind, port), family=family, backlog=MAX_STREAMS * 2)
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, backlog=MAX_STREAMS * 2, dualstack_ipv6=True)
    return socket.create_server(("", port), backlog=MAX_STREAMS * 2)


def _accept_test(listener, deadline, where):
    """Accept control connections until one carries valid test parameters; others are answered and dropped."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LinkBandwidthError("no client started a test on %s within the timeout" % where)
        listener.settimeout(remaining)
        try:
            control, _address = listener.accept()
        except socket.timeout:
            continue
        control.settimeout(HANDSHAKE_TIMEOUT)
        rfile = control.makefile("rb")
        try:
            test = _read_json(rfile, "test parameters")
            problem = validate_test(test)
        except (LinkBandwidthError, OSError) as exc:
            test, problem = None, str(exc)
        if not problem:
            _send_json(control, {"ok": True})
            return control, rfile, test
        try:
            _send_json(control, {"error": problem})
        except OSError:
            pass
        rfile.close()
        control.close()


def serve_once(port, timeout, bind=None):
    """Accept one Python-engine test on bind:port within `timeout` seconds, run it, return the summary."""
    where = "%s:%d" % (bind or "*", port)
    listener = _listen(bind, port)
    try:
        control, rfile, test = _accept_test(listener, time.monotonic() + timeout, where)
        client = "%s:%s" % control.getpeername()[:2]
        try:
            result = _serve_test(listener, control, rfile, test, where)
            result.update(_addresses(control))
            return result
        except (LinkBandwidthError, IOError, OSError) as exc:
            try:
                _send_json(control, {"error": "server %s: %s" % (where, exc)})
            except (IOError, OSError):
                pass
            raise LinkBandwidthError("test from %s broke off: %s" % (client, exc)) from None
        finally:
            rfile.close()
            control.close()
    finally:
        listener.close()


def _accept_data(listener, test, where):
    total = test["streams"] * (2 if test["direction"] == "bidir" else 1)
    data = {}
    listener.settimeout(HANDSHAKE_TIMEOUT)
    while len(data) < total:
        try:
            sock, _address = listener.accept()
        except socket.timeout:
            raise LinkBandwidthError("%d of %d data connections arrived on %s" % (len(data), total, where)) from None
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            header = _recv_exact(sock, DATA_HEADER.size)
        except (IOError, OSError):
            header = b""
        magic, cookie, index = DATA_HEADER.unpack(header.ljust(DATA_HEADER.size, b"\0"))
        if magic != DATA_MAGIC or cookie.decode("ascii", "replace") != test["cookie"] or index >= total:
            sock.close()  # a stranger, not one of this test's streams
            continue
        data[index] = sock
    return data


def _serve_test(listener, control, rfile, test, where):
    data = _accept_data(listener, test, where)
    workers = _Workers(data, lambda i: stream_direction(i, test["streams"], test["direction"]) == "reverse", test)
    try:
        _send_json(control, {"ready": True})
        _read_json(rfile, "the start signal")
        workers.start()
        local = workers.collect(test["duration"] + DRAIN_GRACE)
        _send_json(control, {"streams": local})
        remote = _read_json(rfile, "the client's results").get("streams") or []
    finally:
        workers.stop()
    return _engine_result("server", test, local + remote)


def _addresses(control):
    """The local and remote address of the control connection; the data connections use the same two."""
    return {"local_address": control.getsockname()[0], "remote_address": control.getpeername()[0]}


def _connect(peer, port, bind, timeout):
    """Connect to peer:port, retrying refused or unreachable connections for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            return socket.create_connection(
                (peer, port),
                timeout=max(1.0, min(remaining, HANDSHAKE_TIMEOUT)),
                source_address=(bind, 0) if bind else None,
            )
        except (IOError, OSError) as exc:
            if deadline - time.monotonic() <= 0:
                raise LinkBandwidthError(
                    "cannot connect to %s:%d within %s s: %s" % (peer, port, timeout, exc)
                ) from None
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def run_client(peer, port, duration, streams, direction, timeout, bind=None, buffer_size=BUFFER_SIZE, zerocopy=True):
    """Run one Python-engine test against serve_once() on peer:port; return the summary."""
    test = {
        MAGIC_KEY: PROTOCOL_VERSION,
        "cookie": os.urandom(COOKIE_LEN // 2).hex(),
        "streams": streams,
        "duration": duration,
        "direction": direction,
        "buffer_size": buffer_size,
        "zerocopy": zerocopy,
    }
    problem = validate_test(test)
    if problem:
        raise LinkBandwidthError(problem)
    control = _connect(peer, port, bind, timeout)
    workers = None
    try:
        control.settimeout(HANDSHAKE_TIMEOUT)
        rfile = control.makefile("rb")
        _send_json(control, test)
        try:
            _read_json(rfile, "the server's answer")
        except (socket.timeout, LinkBandwidthError) as exc:
            if str(exc).startswith("the peer reported"):
                raise
            raise LinkBandwidthError(
                "%s (is an iperf3 server listening there? Use the same backend on both ends)" % (exc or "no answer")
            ) from None
        total = streams * (2 if direction == "bidir" else 1)
        data = {}
        for index in range(total):
            sock = _connect(peer, port, bind, HANDSHAKE_TIMEOUT)
            sock.sendall(DATA_HEADER.pack(DATA_MAGIC, test["cookie"].encode("ascii"), index))
            data[index] = sock
        workers = _Workers(data, lambda i: stream_direction(i, streams, direction) == "forward", test)
        _read_json(rfile, "the server's ready signal")
        _send_json(control, {"start": True})
        workers.start()
        local = workers.collect(duration + DRAIN_GRACE)
        control.settimeout(DRAIN_GRACE)
        remote = _read_json(rfile, "the server's results").get("streams") or []
        _send_json(control, {"streams": local})
        rfile.close()
        result = _engine_result("client", test, local + remote)
        result.update(_addresses(control))
        return result
    except (socket.timeout, OSError) as exc:
        raise LinkBandwidthError("test with %s:%d broke off: %s" % (peer, port, exc)) from None
    finally:
        if workers:
            workers.stop()
        control.close()
