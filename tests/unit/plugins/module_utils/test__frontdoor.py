# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replicas behind a front door, and HAProxy quoting (module_utils/_frontdoor.py)."""

import json

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor

KEY = "k" * 24
DEFAULTS = {
    "vllm_api_host": "127.0.0.1",
    "vllm_api_port": 8000,
    "vllm_api_key": "",
    "vllm_served_model_name": "",
    "vllm_model_path": "/var/lib/gpufleet/models/model",
    "llama_server_host": "127.0.0.1",
    "llama_server_port": 8080,
    "llama_server_api_key": "",
    "llama_server_model_path": "/var/lib/gpufleet/models/model.gguf",
    "llama_rpc_port": 50052,
}


def vllm_host(replica, rank, address, **extra):
    host = {
        "vllm_replica": replica,
        "vllm_node_rank": rank,
        "ansible_host": address,
        "gpufleet_fabric_address": address.replace("192.168", "10.20"),
        "vllm_api_host": address.replace("192.168", "10.20"),
        "vllm_api_key": KEY,
        "vllm_served_model_name": "tiny",
    }
    host.update(extra)
    return host


def lab():
    hostvars = {
        "lab-head": vllm_host("lab", 0, "192.168.0.11"),
        "lab-tail": vllm_host("lab", 1, "192.168.0.12"),
        "solo": vllm_host("solo", 0, "192.168.0.13", health_agent_listen_address="10.99.0.13", health_agent_port=9200),
        "fd": {"ansible_host": "192.168.0.20"},
    }
    groups = {"vllm_nodes": ["lab-head", "lab-tail", "solo"], "inference_frontends": ["fd"]}
    return hostvars, groups


def test_vllm_replicas_match_the_frontdoor_json_schema():
    hostvars, groups = lab()
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert plan["replicas"][0] == {
        "name": "lab",
        "server": "lab",
        "kind": "vllm",
        "metrics_url": "http://10.20.0.11:8000/metrics",
        "nodes": [
            {
                "name": "lab-head",
                "rank": 0,
                "agent_url": "http://192.168.0.11:9105",
                "ssh_host": "192.168.0.11",
                "unit": "gpufleet-vllm-lab.service",
            },
            {
                "name": "lab-tail",
                "rank": 1,
                "agent_url": "http://192.168.0.12:9105",
                "ssh_host": "192.168.0.12",
                "unit": "gpufleet-vllm-lab.service",
            },
        ],
    }
    assert plan["replicas"][1]["nodes"][0]["agent_url"] == "http://10.99.0.13:9200"
    assert plan["servers"] == [
        {"name": "lab", "address": "10.20.0.11", "port": 8000},
        {"name": "solo", "address": "10.20.0.13", "port": 8000},
    ]
    assert plan["model"] == "tiny"
    assert plan["api_key"] == KEY
    assert [h["name"] for h in plan["hosts"]] == ["lab-head", "lab-tail", "solo"]
    assert plan["hosts"][0]["units"] == ["gpufleet-vllm-lab.service"]


def test_ranks_are_ordered_whatever_the_group_order():
    hostvars, groups = lab()
    groups["vllm_nodes"] = ["lab-tail", "solo", "lab-head"]
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert [n["rank"] for n in plan["replicas"][0]["nodes"]] == [0, 1]


def test_the_check_is_a_one_token_completion_with_the_key():
    hostvars, groups = lab()
    send = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")["check_send"]
    assert send == (
        'meth POST uri /v1/completions ver HTTP/1.1 hdr Host "localhost" hdr Content-Type application/json '
        f'hdr Authorization "Bearer {KEY}" body "{{\\"max_tokens\\":1,\\"model\\":\\"tiny\\",\\"prompt\\":\\"ok\\"}}"'
    )


def test_no_authorization_header_without_a_key():
    send = _frontdoor.check_send("m", "", "localhost", "/v1/completions")
    assert "Authorization" not in send


def test_different_models_are_refused_naming_both():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_served_model_name"] = "other"
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    message = str(excinfo.value)
    assert "'tiny'" in message and "'other'" in message
    assert "vllm_served_model_name on solo" in message


def test_different_keys_are_refused_without_showing_them():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_key"] = "x" * 24
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert "different API keys" in str(excinfo.value)
    assert KEY not in str(excinfo.value)
    assert "x" * 24 not in str(excinfo.value)


def test_a_replica_without_rank_0_is_refused():
    hostvars, groups = lab()
    hostvars["lab-head"]["vllm_node_rank"] = 2
    with pytest.raises(_frontdoor.FrontdoorError, match="replica lab has no rank 0"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


@pytest.mark.parametrize("name", ["lab 1", "lab/1", "lab\n", "läb"])
def test_names_haproxy_refuses_are_refused(name):
    hostvars, groups = lab()
    hostvars["solo"]["vllm_replica"] = name
    with pytest.raises(_frontdoor.FrontdoorError, match="is not a valid HAProxy name"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


def test_a_loopback_api_is_refused_unless_on_the_front_door():
    hostvars, groups = lab()
    del hostvars["solo"]["vllm_api_host"]
    with pytest.raises(_frontdoor.FrontdoorError, match=r"vllm_api_host='127\.0\.0\.1' on solo is a loopback address"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "solo")
    assert plan["servers"][1] == {"name": "solo", "address": "127.0.0.1", "port": 8000}


def test_an_unspecified_api_address_is_reached_on_the_fabric():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_host"] = "0.0.0.0"
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    assert plan["servers"][1]["address"] == "10.20.0.13"


def test_no_replica_is_refused():
    with pytest.raises(_frontdoor.FrontdoorError, match="no replica found for the front door fd"):
        _frontdoor.plan({"fd": {}}, {"vllm_nodes": [], "llama_coordinator": []}, DEFAULTS, "fd")


def test_a_bad_port_names_the_variable():
    hostvars, groups = lab()
    hostvars["solo"]["vllm_api_port"] = "http"
    with pytest.raises(_frontdoor.FrontdoorError, match="vllm_api_port on solo='http' must be a TCP port"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


def test_llama_replica_with_rpc_workers():
    hostvars = {
        "coord": {"ansible_host": "192.168.0.11", "llama_server_host": "10.20.0.11", "llama_server_api_key": KEY},
        "w1": {"ansible_host": "192.168.0.12"},
        "w2": {"ansible_host": "192.168.0.13", "llama_rpc_per_device": True, "gpufleet_gpu_count": 2},
    }
    groups = {"llama_coordinator": ["coord"], "llama_rpc_workers": ["w1", "w2"]}
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")
    (replica,) = plan["replicas"]
    assert replica["kind"] == "llama" and replica["metrics_url"] is None and replica["name"] == "coord"
    assert [(n["name"], n["rank"], n["unit"]) for n in replica["nodes"]] == [
        ("coord", 0, "gpufleet-llama-server.service"),
        ("w1", 1, "gpufleet-llama-rpc-50052.service"),
        ("w2", 2, "gpufleet-llama-rpc-50052.service"),
        ("w2", 2, "gpufleet-llama-rpc-50053.service"),
    ]
    assert plan["servers"] == [{"name": "coord", "address": "10.20.0.11", "port": 8080}]
    assert plan["model"] == "/var/lib/gpufleet/models/model.gguf"
    assert plan["hosts"][2]["units"] == ["gpufleet-llama-rpc-50052.service", "gpufleet-llama-rpc-50053.service"]


def test_llama_alias_is_the_model_name():
    hostvars = {"coord": {"llama_server_host": "10.0.0.1", "llama_server_extra_args": ["--alias", "kimi"]}}
    plan = _frontdoor.plan(hostvars, {"llama_coordinator": ["coord"]}, DEFAULTS, "fd")
    assert plan["model"] == "kimi"


def test_a_host_in_two_replicas_is_refused():
    hostvars, groups = lab()
    hostvars["lab-head"]["llama_server_host"] = "10.20.0.11"
    hostvars["lab-head"]["llama_server_extra_args"] = ["--alias", "tiny"]
    hostvars["lab-head"]["llama_server_api_key"] = KEY
    groups["llama_coordinator"] = ["lab-head"]
    with pytest.raises(_frontdoor.FrontdoorError, match="lab-head serves in both replica lab and replica lab-head"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd")


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("$HOME", '"\\$HOME"'),
        ("# not a comment", '"# not a comment"'),
        ("it's", '"it\'s"'),
    ],
)
def test_haproxy_quote_follows_the_weak_quoting_rules(value, quoted):
    assert _frontdoor.haproxy_quote(value, "v") == quoted


def test_log_format_arguments_double_the_percent_sign():
    assert _frontdoor.haproxy_quote("100%", "v", log_format=True) == '"100%%"'
    assert _frontdoor.haproxy_quote("100%", "v") == '"100%"'


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\t", "nul\x00"])
def test_haproxy_quote_refuses_control_characters(value):
    with pytest.raises(ValueError, match=r"frontdoor_check_host=.*control character"):
        _frontdoor.haproxy_quote(value, "frontdoor_check_host")


def test_a_model_name_with_quotes_stays_one_json_word():
    send = _frontdoor.check_send('we"ird$', "", "localhost", "/v1/completions")
    body = send.split(" body ", 1)[1]
    unquoted = body[1:-1].replace("\\$", "$").replace('\\"', '"').replace("\\\\", "\\")
    assert json.loads(unquoted)["model"] == 'we"ird$'


def test_a_bad_check_uri_is_refused():
    with pytest.raises(_frontdoor.FrontdoorError, match="frontdoor_check_uri"):
        _frontdoor.check_send("m", "", "localhost", "v1 completions")


# The front door's own settings (settings_problems, plan(settings=)) ---------------------------


def settings(**changes):
    """The role's defaults, as the preflight hands them over, with changes."""
    values = {
        "frontdoor_bind_address": "127.0.0.1",
        "frontdoor_port": 8080,
        "frontdoor_tls_certificate": "",
        "frontdoor_tls_key": "",
        "frontdoor_allow_plaintext": False,
        "frontdoor_timeout_client": "600s",
        "frontdoor_timeout_server": "600s",
        "frontdoor_timeout_connect": "5s",
        "frontdoor_backend": "inference",
        "frontdoor_check_inter": "2s",
        "frontdoor_check_fastinter": "1s",
        "frontdoor_check_downinter": "2s",
        "frontdoor_timeout_check": "10s",
        "frontdoor_check_fall": 3,
        "frontdoor_check_rise": 2,
        "frontdoor_retries": 3,
        "frontdoor_tune_bufsize": None,
        "frontdoor_check_uri": "/v1/completions",
        "frontdoor_check_host": "localhost",
        "frontdoor_stats_address": "192.168.0.20",
        "frontdoor_stats_port": 8404,
        "frontdoor_controller_metrics_address": "192.168.0.20",
        "frontdoor_controller_metrics_port": 9106,
        "frontdoor_controller_interval": 1.0,
        "frontdoor_agent_timeout": 1.0,
        "frontdoor_unreachable_fall": 3,
        "frontdoor_undrain_rise_s": 15,
        "frontdoor_max_auto_drained": 1,
        "frontdoor_remediate_after_s": 60,
        "frontdoor_remediate_backoff_s": 900,
        "frontdoor_restart_drain_timeout": 300,
        "frontdoor_restart_stop_timeout": 120,
        "frontdoor_restart_ready_timeout": 900,
        "frontdoor_restart_ssh_connect_timeout": 10,
        "frontdoor_restart_ssh_source": "192.168.0.20",
        "frontdoor_restart_timer": True,
        "frontdoor_restart_interval": "48h",
        "frontdoor_restart_randomized_delay": "2h",
    }
    values.update(changes)
    return values


def refused(changes, text, frontend="fd"):
    """The problems of settings(**changes); asserts that one of them holds text and names every changed variable."""
    problems = _frontdoor.settings_problems(settings(**changes), frontend)
    message = "\n".join(problems)
    assert text in message, message
    for name in changes:
        assert name in message, message
    return message


def test_the_defaults_pass():
    assert _frontdoor.settings_problems(settings(), "fd") == []


@pytest.mark.parametrize(
    "address",
    ["127.evil.example", "127.0.0.1.nip.io", "localhost.evil.example", "127.1", "0.0.0.0", "::", "::ffff:127.0.0.1"],
)
def test_only_a_loopback_ip_or_localhost_skips_tls(address):
    message = refused({"frontdoor_bind_address": address}, "exposes the API beyond fd without TLS")
    assert f"frontdoor_bind_address={address}" in message
    assert "Set frontdoor_tls_certificate and frontdoor_tls_key" in message


def test_a_loopback_looking_name_is_told_why():
    message = refused({"frontdoor_bind_address": "127.evil.example"}, "Only 127.0.0.0/8, ::1 and the name localhost")
    assert "any other name is bound where it resolves" in message


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.53", "127.255.255.254", "::1", "localhost"])
def test_a_loopback_bind_needs_no_tls(address):
    assert _frontdoor.settings_problems(settings(frontdoor_bind_address=address), "fd") == []


@pytest.mark.parametrize(
    "changes",
    [
        {"frontdoor_tls_certificate": "/etc/fd.pem", "frontdoor_tls_key": "/etc/fd.key"},
        {"frontdoor_allow_plaintext": True},
        {"frontdoor_allow_plaintext": "yes"},
    ],
)
def test_an_exposed_bind_passes_with_tls_or_plaintext_allowed(changes):
    assert _frontdoor.settings_problems(settings(frontdoor_bind_address="10.0.0.5", **changes), "fd") == []


def test_loopback_is_an_ip_test_also_for_the_api_address():
    assert _frontdoor.is_loopback("127.0.0.2") and _frontdoor.is_loopback("::1")
    assert not _frontdoor.is_loopback("127.evil.example") and not _frontdoor.is_loopback("::ffff:127.0.0.1")


@pytest.mark.parametrize("name", _frontdoor.HAPROXY_TIMEOUTS + _frontdoor.HAPROXY_INTERVALS)
@pytest.mark.parametrize("value", ["0s", "0", 0, "0ms", "0us", "0d"])
def test_a_zero_haproxy_time_is_refused(name, value):
    refused({name: value}, f"{name}={value} must be above 0")


@pytest.mark.parametrize("value", ["25d", "2147484s", "2147483648"])
def test_a_haproxy_time_past_its_32_bit_milliseconds_is_refused(value):
    refused({"frontdoor_timeout_server": value}, "at most 2147483647 ms")


@pytest.mark.parametrize("value", ["-1s", "ten minutes", "1.5s", "5 s"])
def test_a_haproxy_time_of_another_form_is_refused(value):
    refused({"frontdoor_timeout_client": value}, "must be a HAProxy time such as 600s")


def test_haproxy_times_read_as_haproxy_reads_them():
    assert [_frontdoor.haproxy_ms(v) for v in ("1us", "500ms", "600", "2s", "1m", "24d")] == [
        1,
        500,
        600,
        2000,
        60000,
        2073600000,
    ]
    assert (
        _frontdoor.settings_problems(settings(frontdoor_timeout_connect="1us", frontdoor_check_inter="24d"), "fd") == []
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("frontdoor_controller_interval", 0),
        ("frontdoor_controller_interval", "0.0"),
        ("frontdoor_controller_interval", -1.0),
        ("frontdoor_controller_interval", float("nan")),
        ("frontdoor_controller_interval", "nan"),
        ("frontdoor_controller_interval", float("inf")),
        ("frontdoor_agent_timeout", 0),
        ("frontdoor_agent_timeout", "-0.5"),
        ("frontdoor_agent_timeout", float("nan")),
        ("frontdoor_restart_drain_timeout", 0),
        ("frontdoor_restart_stop_timeout", 0),
        ("frontdoor_restart_ready_timeout", -5),
        ("frontdoor_restart_ssh_connect_timeout", 0),
        ("frontdoor_remediate_backoff_s", 0),
        ("frontdoor_undrain_rise_s", 0),
        ("frontdoor_undrain_rise_s", "0"),
        ("frontdoor_restart_ready_timeout", 10**12),
        ("frontdoor_undrain_rise_s", 1.5),
    ],
)
def test_a_zero_negative_nan_or_huge_controller_or_restart_time_is_refused(name, value):
    refused({name: value}, "of seconds > 0 and at most 604800 (a week)")


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("frontdoor_undrain_rise_s", 0, "0 would undrain a flapping replica on its first healthy poll"),
        ("frontdoor_remediate_backoff_s", 0, "0 would restart a wedged replica again on every poll"),
        ("frontdoor_restart_drain_timeout", 0, "0 would stop a replica with its requests still running"),
    ],
)
def test_a_zero_drain_threshold_says_what_it_would_do(name, value, why):
    refused({name: value}, why)


@pytest.mark.parametrize(("name", "value"), [("frontdoor_unreachable_fall", 0), ("frontdoor_unreachable_fall", 10**6)])
def test_unreachable_fall_is_bounded(name, value):
    refused({name: value}, "must be an integer >= 1 and at most 100")


def test_good_controller_settings_pass():
    good = settings(
        frontdoor_controller_interval="0.5",
        frontdoor_agent_timeout=2,
        frontdoor_undrain_rise_s="30",
        frontdoor_remediate_after_s=0,
        frontdoor_max_auto_drained=0,
        frontdoor_restart_ready_timeout=3600.0,
    )
    assert _frontdoor.settings_problems(good, "fd") == []


@pytest.mark.parametrize("value", ["0h", "0", "0 min", "30min", "59m 59s"])
def test_a_restart_interval_under_an_hour_is_refused(value):
    refused({"frontdoor_restart_interval": value}, "is shorter than an hour")


@pytest.mark.parametrize("value", ["366d", "10000w"])
def test_a_restart_interval_over_a_year_is_refused(value):
    refused({"frontdoor_restart_interval": value}, "is longer than a year")


def test_systemd_spans_read_as_systemd_reads_them():
    assert [_frontdoor.systemd_seconds(v) for v in ("48h", "2h 30min", "2h30min", "172800", "1w", "90sec")] == [
        172800,
        9000,
        9000,
        172800,
        604800,
        90,
    ]
    assert _frontdoor.settings_problems(settings(frontdoor_restart_randomized_delay="0"), "fd") == []


@pytest.mark.parametrize("value", [10**12, 2**28, 16383, -1, "16k"])
def test_tune_bufsize_is_bounded_by_what_haproxy_accepts(value):
    refused({"frontdoor_tune_bufsize": value}, "must be a whole number from 16384 to 268435440")


@pytest.mark.parametrize("value", [10**6, -1, None])
def test_retries_are_bounded(value):
    refused({"frontdoor_retries": value}, "must be a whole number from 0 to 10")


@pytest.mark.parametrize("name", ["frontdoor_check_fall", "frontdoor_check_rise"])
@pytest.mark.parametrize("value", [0, 10**6])
def test_check_fall_and_rise_are_bounded(name, value):
    refused({name: value}, "must be a whole number from 1 to 100")


def test_good_haproxy_counts_pass():
    good = settings(frontdoor_tune_bufsize=2**28 - 16, frontdoor_retries=0, frontdoor_check_fall=100)
    assert _frontdoor.settings_problems(good, "fd") == []


def test_the_messages_the_bad_input_suite_expects_are_kept():
    message = "\n".join(
        _frontdoor.settings_problems(
            settings(
                frontdoor_port=8404,
                frontdoor_backend="vllm pool",
                frontdoor_timeout_client="ten minutes",
                frontdoor_check_uri="v1/completions",
                frontdoor_tls_certificate="/etc/ssl/fd.pem",
                frontdoor_restart_interval="two days",
            ),
            "fd",
        )
    )
    for text in (
        "must be three different ports",
        "frontdoor_backend=vllm pool is not a valid HAProxy name",
        "frontdoor_timeout_client=ten minutes must be a HAProxy time",
        "frontdoor_check_uri=v1/completions must be a path such as /v1/completions",
        "set both frontdoor_tls_certificate (/etc/ssl/fd.pem) and frontdoor_tls_key (), or neither",
        "frontdoor_restart_interval=two days: use systemd time spans",
    ):
        assert text in message, message


def test_max_auto_drained_above_the_replicas_is_refused():
    hostvars, groups = lab()
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(frontdoor_max_auto_drained=3))
    message = str(excinfo.value)
    assert "frontdoor_max_auto_drained=3 must be an integer >= 0 and at most 2" in message
    assert "the replicas behind the front door: lab, solo" in message
    for good in (0, 1, 2):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(frontdoor_max_auto_drained=good))


def test_the_settings_are_reported_with_the_inventory_problems():
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan({"fd": {}}, {}, DEFAULTS, "fd", settings=settings(frontdoor_timeout_client="0s"))
    first, second = excinfo.value.problems
    assert first.startswith("frontdoor_timeout_client=0s must be above 0")
    assert second.startswith("no replica found for the front door fd")


def serving_front_door():
    """fd is also rank 0 of replica solo, with its API on the fabric."""
    hostvars, groups = lab()
    hostvars["fd"] = vllm_host("solo", 0, "192.168.0.20")
    del hostvars["solo"]
    groups["vllm_nodes"] = ["lab-head", "lab-tail", "fd"]
    return hostvars, groups


@pytest.mark.parametrize(
    ("changes", "taken"),
    [
        ({"frontdoor_port": 8000}, "vllm_api_port on fd (the API of replica solo)"),
        ({"frontdoor_stats_port": 8000}, "vllm_api_port on fd"),
        ({"frontdoor_controller_metrics_port": 9105}, "health_agent_port on fd (its health agent)"),
    ],
)
def test_a_front_door_port_that_a_serving_process_takes_on_its_host_is_refused(changes, taken):
    hostvars, groups = serving_front_door()
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(**changes))
    (name, port), message = next(iter(changes.items())), str(excinfo.value)
    assert f"{name}={port} is also {taken}" in message
    assert f"give {name} another port" in message


def test_a_llama_server_port_on_the_front_door_is_refused():
    hostvars = {"fd": {"ansible_host": "192.168.0.20", "llama_server_host": "10.20.0.20"}}
    with pytest.raises(_frontdoor.FrontdoorError, match="frontdoor_port=8080 is also llama_server_port on fd"):
        _frontdoor.plan(hostvars, {"llama_coordinator": ["fd"]}, DEFAULTS, "fd", settings=settings())


def test_an_rpc_port_on_the_front_door_is_refused():
    hostvars = {"coord": {"llama_server_host": "10.20.0.11"}, "fd": {"ansible_host": "192.168.0.20"}}
    groups = {"llama_coordinator": ["coord"], "llama_rpc_workers": ["fd"]}
    with pytest.raises(_frontdoor.FrontdoorError, match="frontdoor_port=50052 is also llama_rpc_port on fd"):
        _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(frontdoor_port=50052))


def test_the_same_port_on_another_host_is_no_clash():
    hostvars, groups = lab()
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(frontdoor_port=8000))
    assert [s["port"] for s in plan["servers"]] == [8000, 8000]


def test_the_check_comes_from_the_settings():
    hostvars, groups = lab()
    plan = _frontdoor.plan(hostvars, groups, DEFAULTS, "fd", settings=settings(frontdoor_check_uri="/v1/chat"))
    assert "uri /v1/chat " in plan["check_send"]


def test_the_daemon_config_rules_are_the_role_variable_rules():
    """gpufleet-frontdoor checks frontdoor.json with config_problems: the same table, other names."""
    controller = {"interval": 0, "agent_timeout": float("nan"), "unreachable_fall": 3, "undrain_rise_s": 0.5}
    controller.update(max_auto_drained=3, remediate_after_s=0, remediate_backoff_s=900)
    restart = {
        "drain_timeout": 0.3,
        "stop_timeout": 0,
        "ready_timeout": 1,
        "ssh_connect_timeout": 3,
        "poll_interval": 0.05,
    }
    problems = _frontdoor.config_problems(controller, restart, replicas=2)
    assert problems == [
        "controller 'interval' must be a number of seconds > 0 and at most 604800 (a week), found 0",
        "controller 'agent_timeout' must be a number of seconds > 0 and at most 604800 (a week), found nan",
        "controller 'max_auto_drained' must be an integer >= 0 and at most 2 (the replicas behind the front door; "
        "0 never drains; the controller never drains the last replica serving either), found 3",
        "restart 'stop_timeout' must be a number of seconds > 0 and at most 604800 (a week), found 0",
    ]
