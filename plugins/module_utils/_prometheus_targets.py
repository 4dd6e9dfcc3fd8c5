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
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

AGENT_JOB = "gpufleet-health-agent"
HAPROXY_JOB = "gpufleet-frontdoor-haproxy"
CONTROLLER_JOB = "gpufleet-frontdoor-controller"
VLLM_JOB = "vllm"
JOBS = (AGENT_JOB, HAPROXY_JOB, CONTROLLER_JOB, VLLM_JOB)

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
