# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus file_sd target lists for the collection's scrape jobs (filter prometheus_targets).

Pure functions, no Ansible imports. ``targets(hosts, groups)`` takes, per inventory host, the few
variables that say where its exporters listen, and returns one file_sd list per job
(https://prometheus.io/docs/prometheus/latest/configuration/configuration/#file_sd_config): a
JSON list of ``{"targets": ["host:port"], "labels": {...}}``, one entry per target so that every
target carries its own ``node``, ``replica``, ``rank`` and ``rack`` labels. The jobs and their
file names are the ones monitoring/prometheus/gpufleet-scrape.yml reads.

The front door jobs get ``node`` and ``rack`` only: the controller's own samples carry a
``replica`` label, and a target label of the same name would rename it to ``exported_replica``
(honor_labels: false).

``settings_problems(settings)`` checks the monitoring role's own variables, the parts of
prometheus.yml the role writes from them, against Prometheus' configuration reference
(https://prometheus.io/docs/prometheus/latest/configuration/configuration/): durations, label
names, Alertmanager and static target addresses, and the shape of the extra scrape jobs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render

AGENT_JOB = "gpufleet-health-agent"
HAPROXY_JOB = "gpufleet-frontdoor-haproxy"
CONTROLLER_JOB = "gpufleet-frontdoor-controller"
VLLM_JOB = "vllm"
JOBS = (AGENT_JOB, HAPROXY_JOB, CONTROLLER_JOB, VLLM_JOB)
# Prometheus scraping itself, the first job of the prometheus.yml the role writes.
PROMETHEUS_JOB = "prometheus"

SERVING_GROUPS = ("vllm_nodes", "llama_coordinator", "llama_rpc_workers")
FRONTEND_GROUP = "inference_frontends"

# Every variable read here, so that the filter reads only these from hostvars.
VARIABLES = (
    "ansible_host",
    "gpufleet_rack",
    "health_agent_listen_address",
    "health_agent_port",
    "frontdoor_stats_address",
    "frontdoor_stats_port",
    "frontdoor_controller_metrics_address",
    "frontdoor_controller_metrics_port",
    "vllm_replica",
    "vllm_node_rank",
    "vllm_api_host",
    "vllm_api_port",
    "health_agent_replica",
    "health_agent_rank",
)

# (address variable, port variable, default port) per job; vLLM's address has no default.
ENDPOINTS = {
    AGENT_JOB: ("health_agent_listen_address", "health_agent_port", 9105),
    HAPROXY_JOB: ("frontdoor_stats_address", "frontdoor_stats_port", 8404),
    CONTROLLER_JOB: ("frontdoor_controller_metrics_address", "frontdoor_controller_metrics_port", 9106),
    VLLM_JOB: ("vllm_api_host", "vllm_api_port", 8000),
}


def _int(value):
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _blank(value):
    return value is None or (isinstance(value, str) and not value.strip())


def _ip(value):
    try:
        return ipaddress.ip_address(str(value).strip("[]"))
    except ValueError:
        return None


def _address(host, variables, variable, job, problems, fallback=True):
    """The address Prometheus scrapes: the variable, or ansible_host where it is a wildcard (or unset,
    when fallback: the health agent and the front door default to the management address)."""
    value = variables.get(variable)
    ip = None if _blank(value) else _ip(value)
    if _blank(value) and not fallback:
        problems.append(
            "%s is not set on %s (job %s); the vllm role then serves on 127.0.0.1, which Prometheus "
            "cannot reach. Set %s to the address the API listens on, reachable from the Prometheus "
            "servers" % (variable, host, job, variable)
        )
        return None
    if _blank(value) or (ip is not None and ip.is_unspecified):
        value = variables.get("ansible_host")
        if _blank(value):
            value = host
        ip = _ip(value)
    value = str(value).strip()
    if ip is not None and ip.is_loopback:
        problems.append(
            "%s=%s on %s is a loopback address, so Prometheus cannot scrape job %s there. Set %s (or "
            "ansible_host) to an address the Prometheus servers reach" % (variable, value, host, job, variable)
        )
        return None
    return value


def _target(host, variables, job, problems, fallback=True):
    address_var, port_var, default_port = ENDPOINTS[job]
    address = _address(host, variables, address_var, job, problems, fallback)
    raw = variables.get(port_var)
    port = default_port if _blank(raw) else _int(raw)
    if port is None or not 1 <= port <= 65535:
        problems.append("%s=%r on %s must be a TCP port, 1..65535" % (port_var, raw, host))
        return None
    if address is None:
        return None
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    return "%s:%d" % (address, port)


def _labels(host, variables, replica=None, rank=None):
    labels = {"node": host}
    if replica is not None:
        labels["replica"] = str(replica)
    if rank is not None:
        labels["rank"] = str(rank)
    rack = variables.get("gpufleet_rack")
    if not _blank(rack):
        labels["rack"] = str(rack)
    return labels


def _serving_roles(hosts, groups, problems):
    """{host: (replica, rank)} for every serving node whose replica and rank are known."""
    roles = {}
    for host in groups.get("vllm_nodes", []):
        variables = hosts.get(host, {})
        replica = variables.get("vllm_replica")
        rank = _int(variables.get("vllm_node_rank", 0))
        if _blank(replica):
            problems.append(
                "vllm_replica is not set on %s (vllm_nodes); give every vLLM node the name of its replica" % host
            )
            continue
        if rank is None or rank < 0:
            problems.append("vllm_node_rank=%r on %s must be an integer >= 0" % (variables.get("vllm_node_rank"), host))
            continue
        roles[host] = (str(replica), rank)
    # A llama.cpp coordinator (rank 0) and its RPC workers (ranks 1.., in llama_rpc_workers order)
    # are one replica, "llama", as the gpufleet.inference.health_agent role names it.
    for coordinator in groups.get("llama_coordinator", []):
        roles.setdefault(coordinator, ("llama", 0))
    for index, worker in enumerate(groups.get("llama_rpc_workers", [])):
        roles.setdefault(worker, ("llama", index + 1))
    # The agent's own replica and rank, where the inventory sets them, win.
    for host in list(roles) + [h for g in SERVING_GROUPS for h in groups.get(g, []) if h not in roles]:
        variables = hosts.get(host, {})
        replica, rank = roles.get(host, (None, None))
        if not _blank(variables.get("health_agent_replica")):
            replica = str(variables["health_agent_replica"])
        if not _blank(variables.get("health_agent_rank")):
            rank = _int(variables["health_agent_rank"])
        if replica is not None or rank is not None:
            roles[host] = (replica, rank)
    return roles


def _unique(hosts_in_order):
    seen = []
    for host in hosts_in_order:
        if host not in seen:
            seen.append(host)
    return seen


def targets(hosts, groups):
    """Return ({job: file_sd list}, problems) for the inventory.

    hosts: {inventory_hostname: {variable: value}} with the VARIABLES of each host (absent or
    None where undefined); groups: {group: [hosts]}.
    """
    problems = []
    result = {job: [] for job in JOBS}
    roles = _serving_roles(hosts, groups, problems)
    serving = _unique(h for group in SERVING_GROUPS for h in groups.get(group, []))
    frontends = _unique(groups.get(FRONTEND_GROUP, []))

    for host in serving:
        variables = hosts.get(host, {})
        replica, rank = roles.get(host, (None, None))
        target = _target(host, variables, AGENT_JOB, problems)
        if target:
            result[AGENT_JOB].append({"targets": [target], "labels": _labels(host, variables, replica, rank)})

    for host in frontends:
        variables = hosts.get(host, {})
        for job in (HAPROXY_JOB, CONTROLLER_JOB):
            target = _target(host, variables, job, problems)
            if target:
                result[job].append({"targets": [target], "labels": _labels(host, variables)})

    # Only rank 0 of a vLLM replica runs the API server; headless ranks serve no HTTP.
    for host in _unique(groups.get("vllm_nodes", [])):
        variables = hosts.get(host, {})
        if _blank(variables.get("vllm_replica")) or _int(variables.get("vllm_node_rank", 0)) != 0:
            continue
        target = _target(host, variables, VLLM_JOB, problems, fallback=False)
        if target:
            labels = _labels(host, variables, variables["vllm_replica"], 0)
            result[VLLM_JOB].append({"targets": [target], "labels": labels})

    for job in JOBS:
        owners = {}
        for entry in result[job]:
            owners.setdefault(entry["targets"][0], []).append(entry["labels"]["node"])
        for target, nodes in sorted(owners.items()):
            if len(nodes) > 1:
                problems.append(
                    "job %s scrapes %s for %s; every host needs an address of its own (check ansible_host "
                    "and the address variables)" % (job, target, ", ".join(nodes))
                )
    return result, problems


def _read(hostvars, host):
    variables = {}
    problems = []
    if host not in hostvars:
        return variables, problems
    host_vars = hostvars[host]
    for name in VARIABLES:
        try:
            value = host_vars.get(name)
        except Exception as exc:  # an inventory template that does not render
            problems.append("%s on %s cannot be templated: %s; fix it in the inventory" % (name, host, exc))
            continue
        variables[name] = value
    return variables, problems


def inventory_targets(hostvars, groups):
    """Return ({job: file_sd list}, problems) for the inventory as Ansible holds it: hostvars (a
    mapping of host to its variables, read with .get) and groups ({group: [hosts]}). Only the
    VARIABLES of the hosts of the serving and front door groups are read; one that does not
    template is a problem, not an exception."""
    groups = {name: list(members or []) for name, members in groups.items()}
    wanted = set()
    for group in (*SERVING_GROUPS, FRONTEND_GROUP):
        wanted.update(groups.get(group, []))
    hosts = {}
    problems = []
    for host in sorted(wanted):
        hosts[host], read_problems = _read(hostvars, host)
        problems += read_problems
    result, target_problems = targets(hosts, groups)
    return result, problems + target_problems


# The monitoring role's settings ----------------------------------------------------------------

# <duration> (prometheus/common model.ParseDuration): each unit at most once, from years down to
# milliseconds, a year being 365 days; "0" alone is zero. Go's $ matches only at the very end.
_DURATION = re.compile(
    r"^(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?(?:([0-9]+)ms)?\Z"
)
_DURATION_UNITS_MS = (365 * 86400000, 7 * 86400000, 86400000, 3600000, 60000, 1000, 1)
# A query sees a series only up to the lookback delta (--query.lookback-delta, 5m) after its last
# sample (https://prometheus.io/docs/prometheus/latest/querying/basics/#staleness): a series
# scraped, or a rule evaluated, less often than that has gaps, and the alert rules' for: clauses
# (1m to 5m) reset at each one.
MAX_INTERVAL_MS = 5 * 60000
# <labelname>; names starting with __ are reserved for Prometheus' internal use
# (https://prometheus.io/docs/concepts/data_model/).
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
# The host of a <host>: a DNS name or IPv4 address, or an IPv6 address in brackets.
_HOST_NAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\Z")
_STATIC_CONFIG_KEYS = ("targets", "labels")
_SCHEMES = ("http", "https")


def duration_ms(value):
    """The milliseconds of a Prometheus duration ("1h30m", "15s", "0"), or None if value is not one."""
    if not isinstance(value, str):
        return None
    if value == "0":
        return 0
    match = _DURATION.match(value)
    if not value or not match:
        return None
    return sum(int(count) * unit for count, unit in zip(match.groups(), _DURATION_UNITS_MS) if count is not None)


def _duration_problem(name, value):
    milliseconds = duration_ms(value)
    if milliseconds is None:
        return "%s=%s is not a Prometheus duration; use e.g. 15s or 1m" % (name, _render.shown(value))
    if milliseconds == 0:
        return (
            "%s=%s is zero, which Prometheus replaces with a default without a word (1m for the global "
            "intervals); give the interval, e.g. 15s" % (name, _render.shown(value))
        )
    if milliseconds > MAX_INTERVAL_MS:
        return (
            "%s=%s is longer than 5m, the query lookback delta: series would go stale between samples and "
            "the alerts' for: clauses would reset; use 5m or less, e.g. 15s" % (name, _render.shown(value))
        )
    return None


def host_port_problem(value):
    """None for "host:port" (a DNS name, an IPv4 address or a bracketed IPv6 address, and a TCP
    port), else what is wrong with the value."""
    if not isinstance(value, str):
        return "is not a host:port string"
    host, colon, port = value.rpartition(":")
    if not colon or not host:
        return "is not host:port (no scheme, no path), e.g. alertmanager.example:9093"
    if host.startswith("[") and host.endswith("]"):
        address = _ip(host)
        if address is None or address.version != 6:
            return "has %s in brackets, which is not an IPv6 address" % host
    elif not _HOST_NAME.match(host) or (re.match(r"^[0-9.]+\Z", host) and _ip(host) is None):
        return (
            "is not host:port: the host %s must be a DNS name or an IP address (an IPv6 one in brackets, "
            "[2001:db8::1]:9093), without a scheme or a path" % _render.shown(host)
        )
    problem = _render.kind_problem("port", port)
    return "has port %s, which %s" % (_render.shown(port), problem) if problem else None


def _label_value_problem(name, value):
    if value is None or isinstance(value, (bool, dict, list, tuple)):
        return "%s=%s must be a string (a label value)" % (name, _render.shown(value))
    problem = _render.kind_problem("text", value)
    return "%s=%s %s" % (name, _render.shown(value), problem) if problem else None


def _labels_problems(name, labels, reserved_ok):
    """Label names and values of a mapping; names starting with __ refused unless reserved_ok."""
    if not isinstance(labels, dict):
        return ["%s=%s must be a mapping of label names to values" % (name, _render.shown(labels))]
    problems = []
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_NAME.match(key):
            problems.append(
                "%s has the key %s, which is not a Prometheus label name; use [a-zA-Z_][a-zA-Z0-9_]*, e.g. "
                "cluster_name" % (name, _render.shown(key))
            )
            continue
        if key.startswith("__") and not reserved_ok:
            problems.append(
                "%s has the key %s: label names starting with __ are reserved for Prometheus' internal use; "
                "rename it, e.g. %s" % (name, _render.shown(key), key.strip("_") or "cluster")
            )
            continue
        problems.append(_label_value_problem("%s.%s" % (name, key), value))
    return [problem for problem in problems if problem]


def _static_config_problems(name, static_configs):
    if not isinstance(static_configs, list):
        return [
            "%s=%s must be a list of {targets: [host:port, ...], labels: {name: value}}"
            % (name, _render.shown(static_configs))
        ]
    problems = []
    for index, static in enumerate(static_configs):
        where = "%s[%d]" % (name, index)
        if not isinstance(static, dict):
            problems.append(
                "%s=%s must be a mapping {targets: [host:port, ...], labels: {...}}" % (where, _render.shown(static))
            )
            continue
        unknown = sorted(str(key) for key in static if key not in _STATIC_CONFIG_KEYS)
        if unknown:
            problems.append(
                "%s has the keys %s; a static config holds targets and labels only" % (where, ", ".join(unknown))
            )
        targets = static.get("targets")
        if not isinstance(targets, list):
            problems.append("%s.targets=%s must be a list of host:port strings" % (where, _render.shown(targets)))
        else:
            for position, target in enumerate(targets):
                problem = host_port_problem(target)
                if problem:
                    problems.append("%s.targets[%d]=%s %s" % (where, position, _render.shown(target), problem))
        if "labels" in static:
            # Labels starting with __ drive the scrape (__metrics_path__, __scheme__, __param_<name>).
            problems += _labels_problems("%s.labels" % where, static["labels"], reserved_ok=True)
    return problems


def _scrape_config_problems(index, config, global_interval_ms):
    name = "monitoring_extra_scrape_configs[%d]" % index
    if not isinstance(config, dict):
        return ["%s=%s must be a mapping, a Prometheus scrape_config" % (name, _render.shown(config))]
    problems = []
    job = config.get("job_name")
    if not isinstance(job, str) or not job.strip() or _render.kind_problem("text", job):
        problems.append(
            "%s.job_name=%s must be a non-empty string without newlines or other control characters (the "
            "job label of every series it scrapes)" % (name, _render.shown(job))
        )
    intervals = {}
    for key in ("scrape_interval", "scrape_timeout"):
        if key in config:
            problem = _duration_problem("%s.%s" % (name, key), config[key])
            if problem:
                problems.append(problem)
            else:
                intervals[key] = duration_ms(config[key])
    interval = intervals.get("scrape_interval", global_interval_ms)
    if "scrape_timeout" in intervals and interval and intervals["scrape_timeout"] > interval:
        problems.append(
            "%s.scrape_timeout=%s is longer than the job's scrape interval, which Prometheus refuses; make it "
            "at most the interval" % (name, _render.shown(config["scrape_timeout"]))
        )
    if "scheme" in config and config["scheme"] not in _SCHEMES:
        problems.append("%s.scheme=%s must be http or https" % (name, _render.shown(config["scheme"])))
    if "metrics_path" in config:
        path = config["metrics_path"]
        if not isinstance(path, str) or not path or _render.kind_problem("text", path):
            problems.append(
                "%s.metrics_path=%s must be a URL path such as /metrics, without control characters"
                % (name, _render.shown(path))
            )
    if "static_configs" in config:
        problems += _static_config_problems("%s.static_configs" % name, config["static_configs"])
    return problems


def settings_problems(settings):
    """One message per problem in the monitoring role's settings, each naming the variable, the
    value and the fix; [] when they are all good.

    settings: {variable name: value} for the monitoring_* variables to check (any subset of
    monitoring_scrape_interval, monitoring_evaluation_interval, monitoring_external_labels,
    monitoring_alertmanagers, monitoring_extra_scrape_configs, monitoring_url and
    monitoring_verify_timeout)."""
    problems = []
    for name in ("monitoring_scrape_interval", "monitoring_evaluation_interval"):
        if name in settings:
            problems.append(_duration_problem(name, settings[name]))
    if "monitoring_external_labels" in settings:
        problems += _labels_problems("monitoring_external_labels", settings["monitoring_external_labels"], False)
    alertmanagers = settings.get("monitoring_alertmanagers", [])
    if not isinstance(alertmanagers, list):
        problems.append("monitoring_alertmanagers=%s must be a list of host:port" % _render.shown(alertmanagers))
        alertmanagers = []
    for index, address in enumerate(alertmanagers):
        problem = host_port_problem(address)
        if problem:
            problems.append("monitoring_alertmanagers[%d]=%s %s" % (index, _render.shown(address), problem))
    problems += _extra_jobs_problems(
        settings.get("monitoring_extra_scrape_configs", []), duration_ms(settings.get("monitoring_scrape_interval"))
    )
    checks = []
    if "monitoring_url" in settings:
        checks.append(["url", "monitoring_url", settings["monitoring_url"]])
    if "monitoring_verify_timeout" in settings:
        why = "seconds the verify step waits for Prometheus to be ready and to list the jobs"
        checks.append(
            [
                "int",
                "monitoring_verify_timeout",
                settings["monitoring_verify_timeout"],
                {"min": 1, "max": 3600, "why": why},
            ]
        )
    problems += _render.input_problems(checks)
    return [problem for problem in problems if problem]


def _extra_jobs_problems(configs, global_interval_ms):
    if not isinstance(configs, list):
        return ["monitoring_extra_scrape_configs=%s must be a list of scrape configs" % _render.shown(configs)]
    problems = []
    own = (PROMETHEUS_JOB, *JOBS)
    seen = {}
    for index, config in enumerate(configs):
        problems += _scrape_config_problems(index, config, global_interval_ms)
        job = config.get("job_name") if isinstance(config, dict) else None
        if not isinstance(job, str):
            continue
        if job in own:
            problems.append(
                "monitoring_extra_scrape_configs[%d].job_name=%s is one of the role's own jobs (%s); give the job "
                "another name" % (index, _render.shown(job), ", ".join(own))
            )
        elif job in seen:
            problems.append(
                "monitoring_extra_scrape_configs[%d].job_name=%s is also the name of entry %d; every job needs a "
                "name of its own" % (index, _render.shown(job), seen[job])
            )
        seen.setdefault(job, index)
    return problems
