# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the link_bandwidth module: a fake iperf3 that prints real captures, and the Python engine."""

import shlex
import socket
import threading
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _link_bandwidth as lb
from ansible_collections.gpufleet.inference.plugins.modules import link_bandwidth

FIXTURES = Path(__file__).parent.parent / "module_utils" / "fixtures" / "iperf3"


def fake_iperf3(tmp_path, *outputs, rc=0):
    """An iperf3 that logs its argv and prints the captures in turn, the last one again once they run out.

    None stands for printing nothing.
    """

    def cat(name):
        return "cat " + shlex.quote(str(FIXTURES / f"{name}.json")) if name else ":"

    cases = "".join(f"  {number}) {cat(name)} ;;\n" for number, name in enumerate(outputs, 1))
    script = tmp_path / "iperf3"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path}/argv.log"\n'
        f'n=$(( $(cat "{tmp_path}/count" 2>/dev/null || echo 0) + 1 )); echo $n > "{tmp_path}/count"\n'
        f"case $n in\n{cases}  *) {cat(outputs[-1])} ;;\nesac\n"
        f"exit {rc}\n"
    )
    script.chmod(0o755)
    return str(script)


def calls(tmp_path):
    return (tmp_path / "argv.log").read_text().splitlines()


def fake_sysfs(tmp_path, speeds):
    for iface, speed in speeds.items():
        (tmp_path / "sys" / "class" / "net" / iface).mkdir(parents=True)
        (tmp_path / "sys" / "class" / "net" / iface / "speed").write_text(f"{speed}\n")
    return str(tmp_path / "sys")


def client_args(tmp_path, *outputs, **extra):
    args = {
        "mode": "client",
        "backend": "iperf3",
        "iperf3_path": fake_iperf3(tmp_path, *outputs),
        "peer": "127.0.0.1",
        "duration": 1,
        "sysfs_root": fake_sysfs(tmp_path, {}),
    }
    args.update(extra)
    return args


def test_client_reports_iperf3_figures_and_fraction_of_link(run_module, tmp_path):
    args = client_args(tmp_path, "client_forward_p4", streams=4, link_speed_mbps=25000)
    result = run_module(link_bandwidth, args)
    assert result["changed"] is False
    assert result["backend"] == "iperf3"
    assert result["iperf3_version"] == "3.12"
    assert (result["mode"], result["direction"], result["streams"]) == ("client", "forward", 4)
    assert result["bits_per_second"] == pytest.approx(11163887297.717392)
    assert result["retransmits"] == 57
    assert len(result["per_stream"]) == 4
    assert result["link_speed_mbps"] == 25000
    assert result["fraction_of_link"] == pytest.approx(11163887297.717392 / 25e9)
    (argv,) = calls(tmp_path)
    assert argv.startswith("-c 127.0.0.1 -p 5201 -t 1 -P 4 -J --connect-timeout ")


def test_client_fails_on_the_error_key_although_iperf3_exited_0(run_module, tmp_path):
    result = run_module(link_bandwidth, client_args(tmp_path, "client_server_killed", timeout=5), failed=True)
    assert result["failed"] is True
    assert "client to 127.0.0.1:5201 (iperf3) failed" in result["msg"]
    assert "unable to write to stream socket: Broken pipe" in result["msg"]
    assert result["rc"] == 0
    assert '"error"' in result["stdout"]
    # not a reason to retry: one attempt only
    assert len(calls(tmp_path)) == 1


def test_client_retries_while_the_server_starts(run_module, tmp_path):
    args = client_args(tmp_path, "client_refused", "client_busy", "client_reverse_p2", direction="reverse")
    result = run_module(link_bandwidth, args)
    assert result["direction"] == "reverse"
    assert len(calls(tmp_path)) == 3
    assert all(" -R" in argv for argv in calls(tmp_path))


def test_client_gives_up_after_its_timeout(run_module, tmp_path):
    result = run_module(link_bandwidth, client_args(tmp_path, "client_refused", timeout=0, port=5999), failed=True)
    assert result["msg"].startswith("link_bandwidth client to 127.0.0.1:5999 (iperf3) failed: ")
    assert "Connection refused" in result["msg"]


def test_server_returns_what_it_saw(run_module, tmp_path):
    args = {
        "mode": "server",
        "backend": "iperf3",
        "iperf3_path": fake_iperf3(tmp_path, "server_bidir_p2"),
        "bind": "127.0.0.1",
        "timeout": 30,
        "interface": "eth0",
        "sysfs_root": fake_sysfs(tmp_path, {"eth0": 10000}),
    }
    result = run_module(link_bandwidth, args)
    assert (result["mode"], result["direction"], result["streams"]) == ("server", "bidir", 2)
    assert result["retransmits"] is None
    assert result["received_bits_per_second"] == pytest.approx(6413213817.089558)
    assert result["sent_bits_per_second"] == pytest.approx(5418595842.22591)
    assert result["interface"] == "eth0"
    assert result["fraction_of_link"] == pytest.approx(result["bits_per_second"] / 2e10)
    assert calls(tmp_path) == ["-s -1 -J -p 5201 --idle-timeout 30 -B 127.0.0.1"]


def test_server_without_a_client_fails_clearly(run_module, tmp_path):
    # what iperf3 3.12 does when --idle-timeout passes: nothing on stdout, exit 0
    args = {"mode": "server", "backend": "iperf3", "iperf3_path": fake_iperf3(tmp_path, None), "timeout": 7}
    result = run_module(link_bandwidth, args, failed=True)
    assert result["msg"] == "link_bandwidth server on *:5201 (iperf3) failed: no client started a test within 7 s"


def test_server_fails_on_the_error_key(run_module, tmp_path):
    args = {"mode": "server", "backend": "iperf3", "iperf3_path": fake_iperf3(tmp_path, "server_client_killed")}
    result = run_module(link_bandwidth, args, failed=True)
    assert "the client has unexpectedly closed the connection" in result["msg"]


def test_unknown_speed_gives_no_fraction(run_module, tmp_path):
    args = client_args(tmp_path, "client_forward_p4", interface="veth0")
    args["sysfs_root"] = fake_sysfs(tmp_path, {"veth0": -1})
    result = run_module(link_bandwidth, args)
    assert result["interface"] == "veth0"
    assert result["link_speed_mbps"] is None
    assert result["fraction_of_link"] is None


def test_speed_override_beats_sysfs(run_module, tmp_path):
    args = client_args(tmp_path, "client_forward_p4", interface="eth0", link_speed_mbps=100000)
    args["sysfs_root"] = fake_sysfs(tmp_path, {"eth0": 25000})
    result = run_module(link_bandwidth, args)
    assert result["link_speed_mbps"] == 100000


def test_interface_found_from_bind_address(run_module, tmp_path):
    args = client_args(tmp_path, "client_forward_p4", bind="127.0.0.1")
    args["sysfs_root"] = fake_sysfs(tmp_path, {"lo": 40000})
    result = run_module(link_bandwidth, args)
    assert result["interface"] == "lo"
    assert result["link_speed_mbps"] == 40000
    assert " -B 127.0.0.1 " in calls(tmp_path)[0]


def test_auto_falls_back_to_the_python_engine(run_module, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = {"mode": "client", "peer": "127.0.0.1", "port": port, "timeout": 0, "iperf3_path": str(tmp_path / "none")}
    result = run_module(link_bandwidth, args, failed=True)
    assert result["msg"].startswith(f"link_bandwidth client to 127.0.0.1:{port} (python) failed: cannot connect")


def test_missing_iperf3_fails_when_asked_for(run_module, tmp_path):
    args = {"mode": "server", "backend": "iperf3", "iperf3_path": str(tmp_path / "none")}
    result = run_module(link_bandwidth, args, failed=True)
    assert "iperf3 not found" in result["msg"]
    assert "backend=python" in result["msg"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"mode": "client"}, "mode is client but all of the following are missing: peer"),
        ({"mode": "client", "peer": "h", "streams": 0}, "streams=0 is out of range"),
        ({"mode": "server", "timeout": 0}, "timeout=0 is too small for a server"),
        ({"mode": "server", "port": 70000, "duration": 0}, "port=70000 is not a TCP port; use 1..65535; duration=0"),
    ],
)
def test_bad_options_fail_before_anything_runs(run_module, args, message):
    result = run_module(link_bandwidth, args, failed=True)
    assert message in result["msg"]


def test_python_engine_end_to_end_over_loopback(run_module):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = {}
    server = threading.Thread(target=lambda: served.update(result=lb.serve_once(port, 10, bind="127.0.0.1")))
    server.start()
    args = {
        "mode": "client",
        "backend": "python",
        "peer": "127.0.0.1",
        "port": port,
        "duration": 1,
        "streams": 2,
        "timeout": 10,
        "buffer_size": 131072,
    }
    try:
        result = run_module(link_bandwidth, args)
    finally:
        server.join(20)
    assert result["backend"] == "python"
    assert result["bits_per_second"] > 0
    assert len(result["per_stream"]) == 2
    assert result["zerocopy"] is True
    assert "iperf3_version" not in result
    assert served["result"]["bits_per_second"] == pytest.approx(result["bits_per_second"])
