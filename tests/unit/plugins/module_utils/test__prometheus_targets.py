# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus file_sd target lists from the inventory, and the checks of the monitoring role's settings."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils import _prometheus_targets as pt


def cluster():
    """Two vLLM replicas of two nodes, a llama.cpp coordinator with two workers, one front door."""
    hosts = {
        "gpu01": {
            "ansible_host": "192.0.2.11",
            "gpufleet_rack": "r1",
            "vllm_replica": "kimi-a",
            "vllm_node_rank": 0,
            "vllm_api_host": "10.20.0.11",
            "vllm_api_port": 8000,
        },
        "gpu02": {
            "ansible_host": "192.0.2.12",
            "gpufleet_rack": "r1",
            "vllm_replica": "kimi-a",
            "vllm_node_rank": 1,
            "vllm_api_host": "10.20.0.12",
        },
        "gpu03": {
            "ansible_host": "192.0.2.13",
            "gpufleet_rack": "r2",
            "vllm_replica": "kimi-b",
            "vllm_node_rank": "0",
            "vllm_api_host": "0.0.0.0",
            "vllm_api_port": "8001",
            "health_agent_port": "9200",
        },
        "gpu04": {"ansible_host": "192.0.2.14", "gpufleet_rack": "r2", "vllm_replica": "kimi-b", "vllm_node_rank": 1},
        "llama-head": {"ansible_host": "192.0.2.21"},
        "llama-w1": {"ansible_host": "192.0.2.22"},
        "llama-w2": {"ansible_host": "192.0.2.23", "health_agent_listen_address": "10.30.0.23"},
        "fd01": {"ansible_host": "192.0.2.5", "gpufleet_rack": "r1", "frontdoor_stats_port": 8405},
    }
    groups = {
        "vllm_nodes": ["gpu01", "gpu02", "gpu03", "gpu04"],
        "llama_coordinator": ["llama-head"],
        "llama_rpc_workers": ["llama-w1", "llama-w2"],
        "inference_frontends": ["fd01"],
        "prometheus_servers": ["mon01"],
    }
    return hosts, groups


def by_node(entries):
    return {entry["labels"]["node"]: entry for entry in entries}


def test_every_serving_node_has_an_agent_target_with_its_replica_rank_and_rack():
    result, problems = pt.targets(*cluster())
    assert problems == []
    agents = by_node(result["gpufleet-health-agent"])
    assert sorted(agents) == ["gpu01", "gpu02", "gpu03", "gpu04", "llama-head", "llama-w1", "llama-w2"]
    assert agents["gpu02"] == {
        "targets": ["192.0.2.12:9105"],
        "labels": {"node": "gpu02", "replica": "kimi-a", "rank": "1", "rack": "r1"},
    }
    assert agents["gpu03"]["targets"] == ["192.0.2.13:9200"]
    # One llama.cpp replica, "llama", as the health agent names it; the workers in group order.
    assert agents["llama-head"]["labels"] == {"node": "llama-head", "replica": "llama", "rank": "0"}
    assert agents["llama-w1"]["labels"]["rank"] == "1"
    assert agents["llama-w2"]["labels"]["rank"] == "2"
    assert agents["llama-w2"]["targets"] == ["10.30.0.23:9105"]


def test_every_label_value_is_a_string():
    result, _problems = pt.targets(*cluster())
    for entries in result.values():
        for entry in entries:
            assert all(isinstance(v, str) for v in entry["labels"].values())


def test_vllm_is_scraped_on_rank_zero_only_and_a_wildcard_becomes_ansible_host():
    result, _problems = pt.targets(*cluster())
    vllm = by_node(result["vllm"])
    assert sorted(vllm) == ["gpu01", "gpu03"]
    assert vllm["gpu01"] == {
        "targets": ["10.20.0.11:8000"],
        "labels": {"node": "gpu01", "replica": "kimi-a", "rank": "0", "rack": "r1"},
    }
    assert vllm["gpu03"]["targets"] == ["192.0.2.13:8001"]


def test_front_door_targets_carry_no_replica_label():
    result, _problems = pt.targets(*cluster())
    assert result["gpufleet-frontdoor-haproxy"] == [
        {"targets": ["192.0.2.5:8405"], "labels": {"node": "fd01", "rack": "r1"}}
    ]
    assert result["gpufleet-frontdoor-controller"] == [
        {"targets": ["192.0.2.5:9106"], "labels": {"node": "fd01", "rack": "r1"}}
    ]


def test_empty_inventory_gives_every_job_an_empty_list():
    result, problems = pt.targets({}, {})
    assert problems == []
    assert result == {job: [] for job in pt.JOBS}


def test_a_host_in_two_serving_groups_is_scraped_once():
    hosts, groups = cluster()
    groups["llama_rpc_workers"].append("gpu04")
    result, problems = pt.targets(hosts, groups)
    assert problems == []
    assert [e["labels"]["node"] for e in result["gpufleet-health-agent"]].count("gpu04") == 1


def test_without_ansible_host_the_inventory_name_is_the_address():
    result, problems = pt.targets({"fd01": {}}, {"inference_frontends": ["fd01"]})
    assert problems == []
    assert result["gpufleet-frontdoor-haproxy"][0]["targets"] == ["fd01:8404"]


def test_ipv6_addresses_are_bracketed():
    result, problems = pt.targets({"fd01": {"ansible_host": "2001:db8::5"}}, {"inference_frontends": ["fd01"]})
    assert problems == []
    assert result["gpufleet-frontdoor-controller"][0]["targets"] == ["[2001:db8::5]:9106"]


def test_rank_zero_without_an_api_host_is_refused_with_the_fix():
    hosts, groups = cluster()
    del hosts["gpu01"]["vllm_api_host"]
    _result, problems = pt.targets(hosts, groups)
    assert problems == [
        "vllm_api_host is not set on gpu01 (job vllm); the vllm role then serves on 127.0.0.1, which Prometheus "
        "cannot reach. Set vllm_api_host to the address the API listens on, reachable from the Prometheus servers"
    ]


def test_loopback_addresses_are_refused():
    hosts, groups = cluster()
    hosts["gpu01"]["vllm_api_host"] = "127.0.0.1"
    hosts["fd01"]["ansible_host"] = "::1"
    _result, problems = pt.targets(hosts, groups)
    assert len(problems) == 3
    assert problems[0].startswith("frontdoor_stats_address=::1 on fd01 is a loopback address")
    assert problems[2].startswith("vllm_api_host=127.0.0.1 on gpu01 is a loopback address")


def test_bad_ports_and_missing_replicas_are_named():
    hosts, groups = cluster()
    hosts["gpu02"]["health_agent_port"] = "http"
    hosts["fd01"]["frontdoor_controller_metrics_port"] = 70000
    hosts["gpu04"]["vllm_replica"] = ""
    hosts["gpu03"]["vllm_node_rank"] = -1
    _result, problems = pt.targets(hosts, groups)
    assert "vllm_replica is not set on gpu04 (vllm_nodes); give every vLLM node the name of its replica" in problems
    assert "vllm_node_rank=-1 on gpu03 must be an integer >= 0" in problems
    assert "health_agent_port='http' on gpu02 must be a TCP port, 1..65535" in problems
    assert "frontdoor_controller_metrics_port=70000 on fd01 must be a TCP port, 1..65535" in problems


def test_two_hosts_on_one_target_are_refused():
    hosts, groups = cluster()
    hosts["gpu02"]["ansible_host"] = "192.0.2.11"
    _result, problems = pt.targets(hosts, groups)
    assert problems == [
        "job gpufleet-health-agent scrapes 192.0.2.11:9105 for gpu01, gpu02; every host needs an address of its "
        "own (check ansible_host and the address variables)"
    ]


def test_the_agents_own_replica_and_rank_win():
    hosts, groups = cluster()
    hosts["llama-w1"].update(health_agent_replica="llama-east", health_agent_rank="5")
    result, problems = pt.targets(hosts, groups)
    assert problems == []
    labels = by_node(result["gpufleet-health-agent"])["llama-w1"]["labels"]
    assert labels == {"node": "llama-w1", "replica": "llama-east", "rank": "5"}


# The monitoring role's settings -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[4]


def defaults():
    """The role's defaults, as its preflight hands them to the check."""
    variables = yaml.safe_load((ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    return {name: value for name, value in variables.items() if name != "monitoring_install"}


def problems_of(**changes):
    settings = defaults()
    settings.update(changes)
    return pt.settings_problems(settings)


def test_the_defaults_and_good_values_pass():
    assert pt.settings_problems(defaults()) == []
    assert (
        problems_of(
            monitoring_scrape_interval="1m30s",
            monitoring_evaluation_interval="5m",
            monitoring_external_labels={"cluster": "gpu-west", "_tier": 1},
            monitoring_alertmanagers=["alertmanager.example:9093", "10.0.0.5:9093", "[2001:db8::1]:9093"],
            monitoring_extra_scrape_configs=[
                {
                    "job_name": "node",
                    "scrape_interval": "30s",
                    "scrape_timeout": "10s",
                    "scheme": "https",
                    "metrics_path": "/probe",
                    "static_configs": [
                        {"targets": ["node1.example:9100", "10.0.0.7:9100"], "labels": {"rack": "r1"}},
                        # Labels starting with __ steer the scrape of their targets.
                        {"targets": ["node2.example:9100"], "labels": {"__metrics_path__": "/m", "__param_x": "1"}},
                    ],
                },
                {"job_name": "blackbox", "file_sd_configs": [{"files": ["/etc/prometheus/file_sd/bb.json"]}]},
            ],
            monitoring_url="https://prometheus.example:9090",
            monitoring_verify_timeout="600",
        )
        == []
    )


def test_the_own_jobs_are_the_shipped_scrape_jobs():
    shipped = yaml.safe_load((ROOT / "monitoring" / "prometheus" / "gpufleet-scrape.yml").read_text())
    assert [job["job_name"] for job in shipped["scrape_configs"]] == list(pt.JOBS)


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [
        ("15s", 15000),
        ("1m", 60000),
        ("1h30m", 5400000),
        ("1d", 86400000),
        ("1y", 365 * 86400000),
        ("500ms", 500),
        ("0", 0),
        ("0s", 0),
        ("0m0s", 0),
        ("1w2d", 9 * 86400000),
    ],
)
def test_durations_are_read_as_prometheus_reads_them(text, milliseconds):
    assert pt.duration_ms(text) == milliseconds


@pytest.mark.parametrize("text", ["", "15", "15 seconds", "1.5s", "1s1m", "15s\n", " 15s", "-15s", "15S", 15, None])
def test_what_is_not_a_duration(text):
    assert pt.duration_ms(text) is None


@pytest.mark.parametrize("value", ["0s", "0", "0m0s", "0ms"])
@pytest.mark.parametrize("name", ["monitoring_scrape_interval", "monitoring_evaluation_interval"])
def test_zero_intervals_are_refused(name, value):
    assert problems_of(**{name: value}) == [
        f"{name}={value!r} is zero, which Prometheus replaces with a default without a word (1m for the global "
        "intervals); give the interval, e.g. 15s"
    ]


def test_intervals_longer_than_the_lookback_delta_and_malformed_ones_are_refused():
    problems = problems_of(monitoring_scrape_interval="5m1s", monitoring_evaluation_interval="300y")
    assert [problem.split(" is ")[0] for problem in problems] == [
        "monitoring_scrape_interval='5m1s'",
        "monitoring_evaluation_interval='300y'",
    ]
    assert all("is longer than 5m, the query lookback delta" in problem for problem in problems)
    assert problems_of(monitoring_scrape_interval="15 seconds") == [
        "monitoring_scrape_interval='15 seconds' is not a Prometheus duration; use e.g. 15s or 1m"
    ]


@pytest.mark.parametrize("port", ["0", "99999", "65536", "x", ""])
def test_alertmanager_ports_outside_1_to_65535_are_refused(port):
    problems = problems_of(monitoring_alertmanagers=["am.example:9093", f"am.example:{port}"])
    assert problems == [
        f"monitoring_alertmanagers[1]='am.example:{port}' has port '{port}', which is not a TCP port: use 1..65535"
    ]


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("http://am.example:9093", "is not host:port: the host 'http://am.example' must be a DNS name or an IP"),
        ("am.example", "is not host:port (no scheme, no path), e.g. alertmanager.example:9093"),
        (":9093", "is not host:port (no scheme, no path)"),
        ("am.example/x:9093", "is not host:port: the host 'am.example/x'"),
        ("2001:db8::1:9093", "is not host:port: the host '2001:db8::1' must be a DNS name or an IP address (an IPv6"),
        ("[10.0.0.1]:9093", "has [10.0.0.1] in brackets, which is not an IPv6 address"),
        ("10.0.0.300:9093", "is not host:port: the host '10.0.0.300'"),
        ("am.example\n:9093", "is not host:port: the host 'am.example\\n'"),
    ],
)
def test_alertmanagers_must_be_host_port(address, problem):
    (found,) = problems_of(monitoring_alertmanagers=[address])
    assert found.startswith(f"monitoring_alertmanagers[0]={address!r} {problem}"), found


def test_reserved_and_malformed_external_label_names_are_refused():
    problems = problems_of(monitoring_external_labels={"__name__": "x", "cluster-name": "prod", "ok": "fine"})
    assert problems == [
        "monitoring_external_labels has the key '__name__': label names starting with __ are reserved for "
        "Prometheus' internal use; rename it, e.g. name",
        "monitoring_external_labels has the key 'cluster-name', which is not a Prometheus label name; use "
        "[a-zA-Z_][a-zA-Z0-9_]*, e.g. cluster_name",
    ]


def test_external_label_values_are_one_line_strings():
    problems = problems_of(monitoring_external_labels={"a": "x\ny", "b": None, "c": {"d": 1}})
    assert problems[0].startswith("monitoring_external_labels.a='x\\ny' contains a control character")
    assert problems[1:] == [
        "monitoring_external_labels.b=None must be a string (a label value)",
        "monitoring_external_labels.c={'d': 1} must be a string (a label value)",
    ]


@pytest.mark.parametrize("timeout", [-5, 0, "-1", 3601, "2m", 1.5, True])
def test_the_verify_timeout_is_1_to_3600_seconds(timeout):
    assert problems_of(monitoring_verify_timeout=timeout) == [
        f"monitoring_verify_timeout={timeout!r} must be a whole number from 1 to 3600 (seconds the verify step "
        "waits for Prometheus to be ready and to list the jobs)"
    ]


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:9090", "http://", "http://pro metheus:9090"])
def test_the_url_is_http_or_https(url):
    (problem,) = problems_of(monitoring_url=url)
    assert problem.startswith(f"monitoring_url={url!r} ")


def extra(*configs):
    return problems_of(monitoring_extra_scrape_configs=list(configs))


def test_static_configs_must_be_a_list_of_targets_and_labels():
    assert extra({"job_name": "node", "static_configs": "node1:9100"}) == [
        "monitoring_extra_scrape_configs[0].static_configs='node1:9100' must be a list of {targets: [host:port, ...], "
        "labels: {name: value}}"
    ]
    assert extra({"job_name": "node", "static_configs": ["node1:9100"]}) == [
        "monitoring_extra_scrape_configs[0].static_configs[0]='node1:9100' must be a mapping {targets: [host:port, "
        "...], labels: {...}}"
    ]
    problems = extra(
        {
            "job_name": "node",
            "static_configs": [
                {"targets": "node1:9100"},
                {"targets": ["node1:9100", "node2", "node3:0"], "labels": {"rack-id": "r1"}, "target": ["x:1"]},
                {"labels": ["rack"]},
            ],
        }
    )
    where = "monitoring_extra_scrape_configs[0].static_configs"
    assert problems == [
        f"{where}[0].targets='node1:9100' must be a list of host:port strings",
        f"{where}[1] has the keys target; a static config holds targets and labels only",
        f"{where}[1].targets[1]='node2' is not host:port (no scheme, no path), e.g. alertmanager.example:9093",
        f"{where}[1].targets[2]='node3:0' has port '0', which is not a TCP port: use 1..65535",
        f"{where}[1].labels has the key 'rack-id', which is not a Prometheus label name; use [a-zA-Z_][a-zA-Z0-9_]*, "
        "e.g. cluster_name",
        f"{where}[2].targets=None must be a list of host:port strings",
        f"{where}[2].labels=['rack'] must be a mapping of label names to values",
    ]


@pytest.mark.parametrize("job", ["node\nexporter", "node\x1b[0m", "", "  ", None, 7])
def test_job_names_are_one_line_strings(job):
    config = {"static_configs": [{"targets": ["node1:9100"]}]}
    if job is not None:
        config["job_name"] = job
    assert extra(config) == [
        f"monitoring_extra_scrape_configs[0].job_name={job!r} must be a non-empty string without newlines or other "
        "control characters (the job label of every series it scrapes)"
    ]


def test_job_names_are_the_jobs_own():
    problems = extra({"job_name": "node"}, {"job_name": "vllm"}, {"job_name": "node"}, {"job_name": "prometheus"})
    assert problems == [
        "monitoring_extra_scrape_configs[1].job_name='vllm' is one of the role's own jobs (prometheus, "
        "gpufleet-health-agent, gpufleet-frontdoor-haproxy, gpufleet-frontdoor-controller, vllm); give the job "
        "another name",
        "monitoring_extra_scrape_configs[2].job_name='node' is also the name of entry 0; every job needs a name of "
        "its own",
        "monitoring_extra_scrape_configs[3].job_name='prometheus' is one of the role's own jobs (prometheus, "
        "gpufleet-health-agent, gpufleet-frontdoor-haproxy, gpufleet-frontdoor-controller, vllm); give the job "
        "another name",
    ]


def test_a_jobs_durations_scheme_and_path_are_checked():
    problems = extra(
        {"job_name": "a", "scrape_interval": "0s", "scrape_timeout": "1 minute"},
        {"job_name": "b", "scrape_timeout": "20s"},
        {"job_name": "c", "scrape_interval": "5s", "scrape_timeout": "6s", "scheme": "ftp", "metrics_path": "/m\n"},
    )
    assert [problem.split(" ", 1)[0] for problem in problems] == [
        "monitoring_extra_scrape_configs[0].scrape_interval='0s'",
        "monitoring_extra_scrape_configs[0].scrape_timeout='1",
        # The job's interval is the global one, 15s.
        "monitoring_extra_scrape_configs[1].scrape_timeout='20s'",
        "monitoring_extra_scrape_configs[2].scrape_timeout='6s'",
        "monitoring_extra_scrape_configs[2].scheme='ftp'",
        "monitoring_extra_scrape_configs[2].metrics_path='/m\\n'",
    ]
    assert "is longer than the job's scrape interval, which Prometheus refuses" in problems[2]


def test_every_problem_is_reported_at_once():
    problems = problems_of(
        monitoring_scrape_interval="0s",
        monitoring_external_labels={"__name__": "x"},
        monitoring_alertmanagers=["am:0"],
        monitoring_extra_scrape_configs=[{"job_name": "a\nb", "static_configs": "x:1"}],
        monitoring_url="ftp://x",
        monitoring_verify_timeout=-1,
    )
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "monitoring_scrape_interval",
        "monitoring_external_labels",
        "monitoring_alertmanagers[0]",
        "monitoring_extra_scrape_configs[0].job_name",
        "monitoring_extra_scrape_configs[0].static_configs",
        "monitoring_url",
        "monitoring_verify_timeout",
    ]


class _Unrendered(dict):
    """A host's variables as hostvars gives them, one of which does not template."""

    def get(self, name, default=None):
        if name == "health_agent_port":
            raise RuntimeError("'agent_port_of_rack' is undefined")
        return super().get(name, default)


def test_inventory_targets_read_hostvars_and_report_a_variable_that_does_not_template():
    hosts, groups = cluster()
    result, problems = pt.inventory_targets(hosts, groups)
    assert (result, problems) == pt.targets(hosts, groups)
    hosts["gpu02"] = _Unrendered(hosts["gpu02"])
    _result, problems = pt.inventory_targets(hosts, groups)
    assert problems == [
        "health_agent_port on gpu02 cannot be templated: 'agent_port_of_rack' is undefined; fix it in the inventory"
    ]
