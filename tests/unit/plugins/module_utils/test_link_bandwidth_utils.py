# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_link_bandwidth.py: iperf3 JSON from real captures, link speed, the Python engine."""

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _link_bandwidth as lb

FIXTURES = Path(__file__).parent / "fixtures" / "iperf3"


def fixture_text(name):
    return (FIXTURES / f"{name}.json").read_text()


def parsed(name, mode):
    return lb.parse_iperf3(lb.load_iperf3_json(fixture_text(name)), mode)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------- iperf3 JSON


def test_forward_client_takes_the_receivers_count_and_the_senders_retransmits():
    result = parsed("client_forward_p4", "client")
    assert result["direction"] == "forward"
    assert result["streams"] == 4
    assert result["duration"] == 1
    assert result["iperf3_version"] == "3.12"
    # end.sum_received, not the larger sum_sent (11352846684.877079)
    assert result["bits_per_second"] == pytest.approx(11163887297.717392)
    assert result["retransmits"] == 57
    assert [s["retransmits"] for s in result["per_stream"]] == [17, 15, 14, 11]
    assert {s["direction"] for s in result["per_stream"]} == {"forward"}
    assert sum(s["bits_per_second"] for s in result["per_stream"]) == pytest.approx(result["bits_per_second"], rel=1e-3)
    assert "sent_bits_per_second" not in result


def test_forward_server_saw_the_same_rate_but_not_the_retransmits():
    client = parsed("client_forward_p4", "client")
    server = parsed("server_forward_p4", "server")
    assert server["bits_per_second"] == pytest.approx(client["bits_per_second"])
    assert server["retransmits"] is None
    assert [s["retransmits"] for s in server["per_stream"]] == [None] * 4
    assert [s["direction"] for s in server["per_stream"]] == ["forward"] * 4
    assert [s["bits_per_second"] for s in server["per_stream"]] == [s["bits_per_second"] for s in client["per_stream"]]


def test_reverse_client_counts_what_it_received():
    result = parsed("client_reverse_p2", "client")
    assert result["direction"] == "reverse"
    assert result["streams"] == 2
    assert result["bits_per_second"] == pytest.approx(10738529924.643707)
    # the server's retransmits travel back to the client
    assert result["retransmits"] == 2
    assert [s["direction"] for s in result["per_stream"]] == ["reverse", "reverse"]


def test_reverse_server_only_knows_its_sending_side():
    result = parsed("server_reverse_p2", "server")
    assert result["direction"] == "reverse"
    # sum_received is all zeros on a server that sent: the sender's figure is what it saw
    assert result["bits_per_second"] == pytest.approx(10804433140.014252)
    assert result["retransmits"] == 2
    assert [s["direction"] for s in result["per_stream"]] == ["reverse", "reverse"]


def test_bidir_client_sums_both_directions():
    result = parsed("client_bidir_p2", "client")
    assert result["direction"] == "bidir"
    assert result["streams"] == 2
    assert result["sent_bits_per_second"] == pytest.approx(6413213817.089558)
    assert result["received_bits_per_second"] == pytest.approx(5166833167.33855)
    assert result["bits_per_second"] == pytest.approx(6413213817.089558 + 5166833167.33855)
    assert result["retransmits"] == 8 + 18
    assert [s["direction"] for s in result["per_stream"]] == ["forward", "forward", "reverse", "reverse"]
    assert [s["retransmits"] for s in result["per_stream"]] == [4, 4, 8, 10]


def test_bidir_server_sees_sent_and_received_the_other_way_round():
    result = parsed("server_bidir_p2", "server")
    assert result["direction"] == "bidir"
    assert result["received_bits_per_second"] == pytest.approx(6413213817.089558)
    assert result["sent_bits_per_second"] == pytest.approx(5418595842.22591)
    # known for the direction it sent in only, so not known as a whole
    assert result["retransmits"] is None
    assert [s["direction"] for s in result["per_stream"]] == ["forward", "forward", "reverse", "reverse"]
    assert [s["retransmits"] for s in result["per_stream"]] == [None, None, 8, 10]


@pytest.mark.parametrize(
    "name, message",
    [
        ("client_refused", "unable to connect to server: Connection refused"),
        ("client_busy", "the server is busy running a test"),
        ("client_server_killed", "unable to write to stream socket"),
        ("server_client_killed", "the client has unexpectedly closed the connection"),
    ],
)
def test_error_key_fails_although_iperf3_exited_0(name, message):
    # all four were captured with rc 0 (see fixtures/iperf3/README.md)
    with pytest.raises(lb.LinkBandwidthError, match=message):
        lb.load_iperf3_json(fixture_text(name))


def test_error_key_wins_over_partial_results():
    doc = json.loads(fixture_text("client_forward_p4"))
    doc["error"] = "interrupt - the client has terminated"
    with pytest.raises(lb.LinkBandwidthError, match="the client has terminated"):
        lb.load_iperf3_json(json.dumps(doc))


@pytest.mark.parametrize(
    "tail",
    [
        # 3.16 and 3.17 print the document twice (esnet/iperf#1688, #1716)
        lambda text: text + text,
        # 3.16+ can print an error line after a finished test as it exits (esnet/iperf#1631)
        lambda text: text + "iperf3: error - no error\n",
    ],
)
def test_the_first_document_is_the_report(tail):
    text = fixture_text("client_forward_p4")
    assert lb.load_iperf3_json(tail(text)) == json.loads(text)


def test_an_error_in_the_first_document_still_fails_before_a_second():
    text = fixture_text("client_refused")
    with pytest.raises(lb.LinkBandwidthError, match="iperf3: "):
        lb.load_iperf3_json(text + text)


def test_a_cut_document_is_still_no_json():
    text = fixture_text("client_forward_p4")
    with pytest.raises(lb.LinkBandwidthError, match="iperf3 printed no JSON"):
        lb.load_iperf3_json(text[: len(text) // 2])


@pytest.mark.parametrize("text", ["", "   \n", "iperf3: error - unable to connect", "[1, 2]"])
def test_no_json_object_is_an_error(text):
    with pytest.raises(lb.LinkBandwidthError, match="iperf3 printed"):
        lb.load_iperf3_json(text)


def test_a_document_without_end_sums_did_not_finish():
    doc = json.loads(fixture_text("client_forward_p4"))
    doc["end"] = {}
    with pytest.raises(lb.LinkBandwidthError, match="did not finish"):
        lb.parse_iperf3(doc, "client")


@pytest.mark.parametrize(
    "name, retryable",
    [("client_refused", True), ("client_busy", True), ("client_server_killed", False)],
)
def test_retry_only_while_the_server_is_not_there_yet(name, retryable):
    assert lb.iperf3_retryable(json.loads(fixture_text(name))["error"]) is retryable


def test_argv():
    assert lb.iperf3_client_argv("iperf3", "10.0.0.2", 5201, 10, 4, "bidir", "10.0.0.1", 5000) == [
        "iperf3", "-c", "10.0.0.2", "-p", "5201", "-t", "10", "-P", "4", "-J",
        "--bidir", "-B", "10.0.0.1", "--connect-timeout", "5000",
    ]  # fmt: skip
    assert "-R" in lb.iperf3_client_argv("iperf3", "h", 5201, 1, 1, "reverse")
    assert lb.iperf3_server_argv("/usr/bin/iperf3", 5201, 60) == [
        "/usr/bin/iperf3", "-s", "-1", "-J", "-p", "5201", "--idle-timeout", "60",
    ]  # fmt: skip


def test_a_hung_command_is_killed_at_its_limit():
    # The limit must leave sh the time to print on a busy machine: the output so far is kept.
    rc, stdout, _stderr, timed_out = lb.run_bounded(["sh", "-c", "echo started; exec sleep 60"], 3)
    assert timed_out is True
    assert rc != 0
    assert stdout == "started\n"


# ---------------------------------------------------------------- link speed


def fake_sysfs(tmp_path, speeds):
    for iface, speed in speeds.items():
        (tmp_path / "class" / "net" / iface).mkdir(parents=True)
        if speed is not None:
            (tmp_path / "class" / "net" / iface / "speed").write_text(f"{speed}\n")
    return str(tmp_path)


def test_link_speed_from_sysfs(tmp_path):
    root = fake_sysfs(tmp_path, {"eth0": 100000, "veth0": -1, "bond0": None, "bad0": "garbage"})
    assert lb.read_link_speed(root, "eth0") == 100000
    assert lb.read_link_speed(root, "veth0") is None  # -1: the driver does not know
    assert lb.read_link_speed(root, "bond0") is None  # no speed file
    assert lb.read_link_speed(root, "bad0") is None
    assert lb.read_link_speed(root, "absent0") is None


def test_fraction_of_link():
    forward = {"direction": "forward", "bits_per_second": 94e9}
    assert lb.fraction_of_link(forward, 100000) == pytest.approx(0.94)
    assert lb.fraction_of_link(forward, None) is None
    # full duplex: 2 x 47 Gbit/s over a 50G link is all of it
    assert lb.fraction_of_link({"direction": "bidir", "bits_per_second": 94e9}, 50000) == pytest.approx(0.94)


def test_interface_for_loopback_addresses(tmp_path):
    assert lb.interface_for_address("127.0.0.1") == "lo"
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "if_inet6").write_text(
        "fe800000000000000000000000000001 03 40 20 80   bond0\n00000000000000000000000000000001 01 80 10 80       lo\n"
    )
    assert lb.interface_for_address("::1", proc_root=str(tmp_path)) == "lo"
    assert lb.interface_for_address("fe80::1%bond0", proc_root=str(tmp_path)) == "bond0"
    assert lb.interface_for_address("192.0.2.77") is None
    assert lb.interface_for_address("not-an-address") is None
    assert lb.interface_for_address(None) is None


def test_source_address_toward_a_peer():
    assert lb.source_address_for("127.0.0.1", 5201) == "127.0.0.1"
    assert lb.source_address_for("no-such-host.invalid", 5201) is None


# ---------------------------------------------------------------- Python engine


def run_pair(direction, streams=2, duration=0.3, **client_kwargs):
    port = free_port()
    served = {}

    def serve():
        try:
            served["result"] = lb.serve_once(port, 60, bind="127.0.0.1")
        except lb.LinkBandwidthError as exc:
            served["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        # no sleep: the client retries until the server listens (60 s only ends a hang)
        client = lb.run_client("127.0.0.1", port, duration, streams, direction, 60, **client_kwargs)
    finally:
        thread.join(90)
    assert "error" not in served, served.get("error")
    return client, served["result"]


def test_engine_forward_over_loopback():
    client, server = run_pair("forward", duration=1, buffer_size=131072)
    assert client["bits_per_second"] > 0
    assert len(client["per_stream"]) == 2
    assert all(s["bits_per_second"] > 0 for s in client["per_stream"])
    assert client["retransmits"] is not None  # Linux TCP_INFO
    assert server["bits_per_second"] == pytest.approx(client["bits_per_second"])
    assert (server["mode"], server["direction"], server["streams"], server["duration"]) == ("server", "forward", 2, 1)


def test_engine_bidir_without_zerocopy_over_loopback():
    client, server = run_pair("bidir", streams=1, zerocopy=False)
    assert [s["direction"] for s in client["per_stream"]] == ["forward", "reverse"]
    assert client["sent_bits_per_second"] > 0
    assert client["received_bits_per_second"] > 0
    assert client["zerocopy"] is False
    assert server["sent_bits_per_second"] == pytest.approx(client["received_bits_per_second"])


def test_engine_client_gives_up_when_nobody_listens():
    port = free_port()
    with pytest.raises(lb.LinkBandwidthError, match=f"cannot connect to 127.0.0.1:{port} within 0 s: .*refused"):
        lb.run_client("127.0.0.1", port, 0.3, 1, "forward", 0)


def test_engine_server_gives_up_after_its_timeout():
    with pytest.raises(lb.LinkBandwidthError, match=r"no client started a test on 127.0.0.1:\d+ within"):
        lb.serve_once(free_port(), 0.2, bind="127.0.0.1")


def test_engine_server_ignores_strangers_and_answers_them():
    port = free_port()
    served = {}
    thread = threading.Thread(target=lambda: served.update(result=lb.serve_once(port, 60, bind="127.0.0.1")))
    thread.start()
    deadline = time.monotonic() + 60
    while True:  # until the server thread listens
        try:
            stranger = socket.create_connection(("127.0.0.1", port), timeout=30)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the server thread never listened"
            time.sleep(0.02)
    stranger.sendall(b'{"hello": "world"}\n')
    answer = json.loads(stranger.makefile("rb").readline())
    stranger.close()
    assert "not a link_bandwidth python engine client" in answer["error"]
    client = lb.run_client("127.0.0.1", port, 0.3, 1, "reverse", 60, buffer_size=65536)
    thread.join(90)
    assert client["direction"] == "reverse"
    assert served["result"]["bits_per_second"] > 0


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"streams": 0}, "streams=0"),
        ({"duration": "10"}, "duration='10'"),
        ({"duration": 0}, "duration=0"),
        ({"direction": "sideways"}, "direction 'sideways'"),
        ({"zerocopy": "yes"}, "zerocopy='yes'"),
        ({"cookie": "short"}, "bad cookie"),
        ({lb.MAGIC_KEY: 2}, "protocol 1"),
    ],
)
def test_server_validates_the_test_parameters(change, problem):
    test = {
        lb.MAGIC_KEY: 1,
        "cookie": "0123456789abcdef",
        "streams": 2,
        "duration": 10,
        "direction": "forward",
        "buffer_size": 1 << 20,
        "zerocopy": True,
    }
    assert lb.validate_test(test) == ""
    test.update(change)
    assert problem in lb.validate_test(test)


def test_results_without_the_receivers_count_are_an_error():
    test = {"streams": 2, "direction": "forward", "duration": 1}
    sender = {"bytes": 10, "seconds": 1.0, "retransmits": 0, "zerocopy": True, "role": "sender"}
    receiver = {"bytes": 10, "seconds": 1.0, "role": "receiver"}
    results = [dict(sender, index=0), dict(sender, index=1), dict(receiver, index=0)]
    with pytest.raises(lb.LinkBandwidthError, match=r"no receiver count for stream\(s\) 1"):
        lb._engine_result("client", test, results)
    result = lb._engine_result("client", test, [*results, dict(receiver, index=1)])
    assert result["bits_per_second"] == 160.0
    assert result["retransmits"] == 0
