# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric address is where a test runs: the server listens on `bind` only and the client sends from it.

A server on every address, or a client sending from whatever address the kernel picks, still
measures something on a host with one address, so these tests give the host a second one
(127.0.0.2 of the loopback /8) and hold a listener there on the test's port, as another service
on a management address would: a server on every address cannot start beside it.
"""

import json
import socket
import threading
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _link_bandwidth as lb

FIXTURES = Path(__file__).parent / "fixtures" / "iperf3"
FABRIC = "127.0.0.1"
OTHER = "127.0.0.2"


def free_port():
    with socket.socket() as probe:
        probe.bind((FABRIC, 0))
        return probe.getsockname()[1]


@pytest.fixture
def squatted_port():
    """A port with a listener on the other address, as a service on the management network holds it."""
    port = free_port()
    squatter = socket.create_server((OTHER, port))
    yield port
    squatter.close()


def test_the_iperf3_server_listens_on_the_bind_address_only():
    assert lb.iperf3_server_argv("iperf3", 5201, 60, bind="10.0.0.2")[-2:] == ["-B", "10.0.0.2"]
    assert "-B" not in lb.iperf3_server_argv("iperf3", 5201, 60)


def test_the_iperf3_client_sends_from_the_bind_address():
    argv = lb.iperf3_client_argv("iperf3", "10.0.0.2", 5201, 10, 4, "forward", bind="10.0.0.1")
    assert argv[argv.index("-B") + 1] == "10.0.0.1"
    assert "-B" not in lb.iperf3_client_argv("iperf3", "10.0.0.2", 5201, 10, 4, "forward")


def test_iperf3_reports_the_addresses_of_the_test():
    doc = json.loads((FIXTURES / "client_forward_p4.json").read_text())
    result = lb.parse_iperf3(doc, "client")
    assert (result["local_address"], result["remote_address"]) == ("127.0.0.1", "127.0.0.1")


def test_a_server_on_every_address_cannot_start_beside_the_other_service(squatted_port):
    # The check below relies on this: without bind, serve_once would fail like this.
    with pytest.raises(OSError):
        lb._listen(None, squatted_port).close()


def test_the_python_engine_runs_between_the_bind_addresses(squatted_port):
    served = {}

    def serve():
        try:
            served["result"] = lb.serve_once(squatted_port, 10, bind=FABRIC)
        except Exception as exc:  # pylint: disable=broad-except
            served["error"] = exc

    server = threading.Thread(target=serve)
    server.start()
    try:
        result = lb.run_client(FABRIC, squatted_port, 0.3, 1, "forward", 10, bind=OTHER, buffer_size=65536)
    finally:
        server.join(20)
    assert "error" not in served, served.get("error")
    assert (result["local_address"], result["remote_address"]) == (OTHER, FABRIC)
    assert (served["result"]["local_address"], served["result"]["remote_address"]) == (FABRIC, OTHER)
