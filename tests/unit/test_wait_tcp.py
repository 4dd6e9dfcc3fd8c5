# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for roles/llama_server/files/gpufleet-wait-tcp, run as llama-server's ExecStartPre runs it."""

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "llama_server" / "files" / "gpufleet-wait-tcp"


def wait_tcp(*args, timeout=60):
    """The program's run; `timeout` only ends a hang (past --timeout, or the default 300 s)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def closed_port():
    """A port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_listening_endpoint_answers_at_once(listener):
    # At once: the first attempt is made before the deadline is looked at, so even --timeout 0 passes.
    proc = wait_tcp("--timeout", "0", listener)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"gpufleet-wait-tcp: {listener} answer\n"


def test_closed_port_fails_naming_the_endpoint():
    endpoint = f"127.0.0.1:{closed_port()}"
    proc = wait_tcp("--timeout", "1", endpoint)  # one that ignored --timeout would run into wait_tcp's
    assert proc.returncode == 1
    assert proc.stderr == f"gpufleet-wait-tcp: no answer after 1s from {endpoint}\n"
    assert proc.stdout == ""


def test_only_the_silent_endpoints_are_named(listener):
    silent = f"127.0.0.1:{closed_port()}"
    proc = wait_tcp("--timeout", "1", listener, silent)
    assert proc.returncode == 1
    assert proc.stderr == f"gpufleet-wait-tcp: no answer after 1s from {silent}\n"


def test_waits_for_an_endpoint_that_comes_up_later():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    endpoint = f"127.0.0.1:{sock.getsockname()[1]}"
    timer = threading.Timer(1.0, sock.listen, args=(8,))
    timer.start()
    try:
        proc = wait_tcp("--timeout", "20", endpoint)
    finally:
        timer.join()
        sock.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"gpufleet-wait-tcp: {endpoint} answer\n"


def test_ipv6_endpoint_in_brackets():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        sock = socket.socket(socket.AF_INET6)
        sock.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with sock:
        sock.listen(8)
        endpoint = f"[::1]:{sock.getsockname()[1]}"
        proc = wait_tcp("--timeout", "10", endpoint)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"gpufleet-wait-tcp: {endpoint} answer\n"


def test_no_endpoint_is_a_usage_error():
    proc = wait_tcp()
    assert proc.returncode == 2
    assert "the following arguments are required: endpoints" in proc.stderr
