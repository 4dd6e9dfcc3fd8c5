# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replicas behind a front door, and HAProxy quoting, as pure functions (filter frontdoor_replicas).

A replica is one failure domain and one HAProxy server:

* vLLM: the hosts of ``vllm_nodes`` with the same ``vllm_replica``; rank 0 serves the API at
  ``vllm_api_host:vllm_api_port``, every node runs ``gpufleet-vllm-<replica>.service``;
* llama.cpp: a host of ``llama_coordinator`` (``gpufleet-llama-server.service`` at
  ``llama_server_host:llama_server_port``) with its RPC workers (``gpufleet-llama-rpc-<port>.service``,
  one per server the gpufleet.inference.llama_rpc_worker role plans).

One HAProxy backend has one health check request, so every replica behind it must answer the
same model name with the same API key; anything else is refused here, before a file changes.

Quoting follows HAProxy's configuration parser (doc/configuration.txt of HAProxy 2.6, section 2.2
"Quoting and escaping"): inside double quotes (weak quoting) a space, ``'`` and ``#`` are literal,
``"``, ``\\`` and ``$`` must be escaped with a backslash (``$`` would start an environment variable),
and control characters have no literal form, so they are refused. Arguments that follow the
log-format rules (``http-check send hdr <name> <fmt>``, section 8.2.4) also need ``%`` as ``%%``.

Private module_utils (leading underscore); Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render

# HAProxy's rule for proxy names (configuration.txt section 3.5: letters, digits, '-', '_', '.',
# ':'); server names go through the same invalid_char() check of the parser.
HAPROXY_NAME = re.compile(r"^[A-Za-z0-9_.:-]+\Z")
# What a node address may be: an IP address or a DNS name.
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
URI = re.compile(r"^/[A-Za-z0-9._~/-]*\Z")
# What the API key may be: the vllm role's rule (printable, no spaces).
API_KEY = re.compile(r"^[!-~]*\Z")
UNSPECIFIED = ("0.0.0.0", "::", "")

VLLM_UNIT = "gpufleet-vllm-%s.service"
LLAMA_SERVER_UNIT = "gpufleet-llama-server.service"
LLAMA_RPC_UNIT = "gpufleet-llama-rpc-%d.service"
AGENT_PORT = 9105


class FrontdoorError(ValueError):
    """The problems found, one line each."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def haproxy_quote(value, origin, log_format=False):
    """One double-quoted word of haproxy.cfg holding value verbatim; refuses control characters."""
    text = _render.check_text(value, origin)
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    if log_format:
        text = text.replace("%", "%%")
    return '"%s"' % text


def check_name(value, origin):
    """A valid HAProxy proxy or server name, or ValueError naming origin and the rule."""
    if not isinstance(value, str) or not HAPROXY_NAME.fullmatch(value):
        raise ValueError(
            "%s=%r is not a valid HAProxy name: use letters, digits, '-', '_', '.' and ':' only "
            "(HAProxy configuration manual, section 3.5)" % (origin, value)
        )
    return value


def check_send(model, api_key, host, uri):
    """The arguments of ``http-check send``: a 1-token completion, so a check passes only when the engine serves."""
    problems = []
    if not isinstance(uri, str) or not URI.fullmatch(uri):
        problems.append("frontdoor_check_uri=%r must be a path such as /v1/completions" % (uri,))
    words = ["meth", "POST", "uri", uri if not problems else "/", "ver", "HTTP/1.1"]
    try:
        words += ["hdr", "Host", haproxy_quote(host, "frontdoor_check_host", log_format=True)]
    except ValueError as exc:
        problems.append(str(exc))
    words += ["hdr", "Content-Type", "application/json"]
    if api_key:
        words += ["hdr", "Authorization", haproxy_quote("Bearer " + api_key, "the API key", log_format=True)]
    body = json.dumps({"model": model, "prompt": "ok", "max_tokens": 1}, separators=(",", ":"), sort_keys=True)
    words += ["body", haproxy_quote(body, "the served model name")]
    if problems:
        raise FrontdoorError(problems)
    return " ".join(words)


def _get(hostvars, host, name, defaults, fallback=None):
    node = hostvars[host] if host in hostvars else {}
    value = node.get(name) if hasattr(node, "get") else None
    if value is None:
        value = defaults.get(name, fallback)
    return value


def _port(value, origin, problems):
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = None
    if isinstance(value, bool) or port is None or not 1 <= port <= 65535:
        problems.append("%s=%r must be a TCP port, 1..65535" % (origin, value))
        return None
    return port


def _is_loopback(address):
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _url_host(address):
    return "[%s]" % address if ":" in address else address


def _api_address(hostvars, host, value, origin, frontend, problems):
    """Where the front door reaches an API that listens on value (on host)."""
    address = str(value if value is not None else "").strip()
    if address in UNSPECIFIED:
        address = str(
            _get(hostvars, host, "gpufleet_fabric_address", {}) or _get(hostvars, host, "ansible_host", {}) or host
        )
    if _is_loopback(address) and host != frontend:
        problems.append(
            "%s=%r on %s is a loopback address that the front door %s cannot reach; set %s to an address of "
            "%s that the front door reaches, e.g. '{{ gpufleet_fabric_address }}', and let the firewall admit "
            "the front door" % (origin, address, host, frontend, origin, host)
        )
        return None
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not HOSTNAME.fullmatch(address):
            problems.append("%s=%r on %s is neither an IP address nor a DNS name" % (origin, address, host))
            return None
    return address


def _agent_url(hostvars, host, defaults, problems):
    address = str(_get(hostvars, host, "health_agent_listen_address", {}) or "")
    if address in UNSPECIFIED:
        address = str(_get(hostvars, host, "ansible_host", {}) or host)
    port = _port(
        _get(hostvars, host, "health_agent_port", defaults, AGENT_PORT), "health_agent_port on " + host, problems
    )
    return "http://%s:%s" % (_url_host(address), port) if port else None


def _ssh_host(hostvars, host, problems):
    address = str(_get(hostvars, host, "ansible_host", {}) or host)
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not HOSTNAME.fullmatch(address):
            problems.append("ansible_host=%r of %s is neither an IP address nor a DNS name" % (address, host))
    return address


def _node(hostvars, host, rank, unit, defaults, problems):
    agent = _agent_url(hostvars, host, defaults, problems)
    return {
        "name": host,
        "rank": rank,
        "agent_url": agent,
        "ssh_host": _ssh_host(hostvars, host, problems),
        "unit": unit,
    }


def _vllm_replicas(hostvars, hosts, defaults, frontend, problems):
    by_name = {}
    for host in hosts:
        name = _get(hostvars, host, "vllm_replica", {})
        if not name:
            problems.append(
                "vllm_replica is empty on %s (in vllm_nodes); set it to the replica the host serves in" % host
            )
            continue
        try:
            check_name(str(name), "vllm_replica on " + host)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        by_name.setdefault(str(name), []).append(host)
    out = []
    for name in sorted(by_name):
        members = []
        for host in by_name[name]:
            try:
                rank = int(_get(hostvars, host, "vllm_node_rank", {}, 0))
            except (TypeError, ValueError):
                problems.append(
                    "vllm_node_rank=%r on %s must be an integer >= 0"
                    % (_get(hostvars, host, "vllm_node_rank", {}), host)
                )
                continue
            members.append((rank, host))
        members.sort()
        heads = [host for rank, host in members if rank == 0]
        if len(heads) != 1:
            problems.append(
                "replica %s has %s rank 0 (vllm_node_rank: 0 on %s); exactly one node serves its API: give one node "
                "vllm_node_rank: 0"
                % (
                    name,
                    "no" if not heads else "more than one",
                    ", ".join(heads) or "none of " + ", ".join(by_name[name]),
                )
            )
            continue
        head = heads[0]
        address = _api_address(
            hostvars, head, _get(hostvars, head, "vllm_api_host", defaults), "vllm_api_host", frontend, problems
        )
        port = _port(_get(hostvars, head, "vllm_api_port", defaults), "vllm_api_port on " + head, problems)
        model = (
            _get(hostvars, head, "vllm_served_model_name", defaults)
            or _get(hostvars, head, "vllm_model_hub_id", defaults)
            or _get(hostvars, head, "vllm_model_path", defaults)
            or ""
        )
        out.append(
            {
                "name": name,
                "kind": "vllm",
                "head": head,
                "address": address,
                "port": port,
                "model": str(model),
                "model_origin": "vllm_served_model_name on " + head,
                "api_key": str(_get(hostvars, head, "vllm_api_key", defaults) or ""),
                "api_key_origin": "vllm_api_key on " + head,
                "metrics_url": "http://%s:%s/metrics" % (_url_host(address), port) if address and port else None,
                "nodes": [_node(hostvars, host, rank, VLLM_UNIT % name, defaults, problems) for rank, host in members],
            }
        )
    return out


def _rpc_units(hostvars, worker, defaults, problems):
    port = _port(_get(hostvars, worker, "llama_rpc_port", defaults, 50052), "llama_rpc_port on " + worker, problems)
    if port is None:
        return []
    if not _get(hostvars, worker, "llama_rpc_per_device", defaults, False):
        return [LLAMA_RPC_UNIT % port]
    count = len(_get(hostvars, worker, "llama_rpc_devices", defaults, []) or []) or int(
        _get(hostvars, worker, "gpufleet_gpu_count", {}, 0) or 0
    )
    if count < 1:
        problems.append(
            "llama_rpc_per_device is true on %s but neither llama_rpc_devices nor gpufleet_gpu_count says how many "
            "RPC servers it runs; set llama_rpc_devices" % worker
        )
        return []
    return [LLAMA_RPC_UNIT % (port + index) for index in range(count)]


def _llama_replicas(hostvars, coordinators, workers_group, defaults, frontend, problems):
    out = []
    for head in coordinators:
        try:
            check_name(head, "the llama_coordinator host name")
        except ValueError as exc:
            problems.append(str(exc) + "; the coordinator's inventory name is the replica's name")
            continue
        workers = _get(hostvars, head, "llama_server_workers", {}) or list(workers_group)
        address = _api_address(
            hostvars, head, _get(hostvars, head, "llama_server_host", defaults), "llama_server_host", frontend, problems
        )
        port = _port(_get(hostvars, head, "llama_server_port", defaults), "llama_server_port on " + head, problems)
        nodes = [_node(hostvars, head, 0, LLAMA_SERVER_UNIT, defaults, problems)]
        for rank, worker in enumerate(workers, start=1):
            for unit in _rpc_units(hostvars, worker, defaults, problems):
                nodes.append(_node(hostvars, worker, rank, unit, defaults, problems))
        out.append(
            {
                "name": head,
                "kind": "llama",
                "head": head,
                "address": address,
                "port": port,
                # llama-server names its model by --alias, else by the model path (GET /v1/models).
                "model": str(
                    _alias(_get(hostvars, head, "llama_server_extra_args", defaults, []))
                    or _get(hostvars, head, "llama_server_model_path", defaults)
                    or ""
                ),
                "model_origin": "llama_server_model_path (or --alias in llama_server_extra_args) on " + head,
                "api_key": str(_get(hostvars, head, "llama_server_api_key", defaults) or ""),
                "api_key_origin": "llama_server_api_key on " + head,
                "metrics_url": None,
                "nodes": nodes,
            }
        )
    return out


def _alias(args):
    args = [str(a) for a in args] if isinstance(args, (list, tuple)) else []
    for index, arg in enumerate(args):
        if arg in ("-a", "--alias") and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--alias="):
            return arg.split("=", 1)[1]
    return ""


def plan(hostvars, groups, defaults=None, frontend="", check_host="localhost", check_uri="/v1/completions"):
    """The replicas behind one front door; raises FrontdoorError with every problem, one per line."""
    defaults = dict(defaults or {})
    groups = groups or {}
    problems = []
    found = _vllm_replicas(hostvars, list(groups.get("vllm_nodes", [])), defaults, frontend, problems)
    found += _llama_replicas(
        hostvars,
        list(groups.get("llama_coordinator", [])),
        groups.get("llama_rpc_workers", []),
        defaults,
        frontend,
        problems,
    )
    if problems:
        raise FrontdoorError(problems)
    if not found:
        raise FrontdoorError(
            [
                "no replica found for the front door %s: the groups vllm_nodes and llama_coordinator are empty; "
                "put the serving hosts in the inventory (the topology plugin's serving section) or leave "
                "inference_frontends empty" % (frontend or "(this host)")
            ]
        )
    _agree(found, problems)
    names = {}
    for replica in found:
        if replica["name"] in names:
            problems.append(
                "two replicas are named %s (%s and %s); HAProxy server names must be unique: rename one"
                % (replica["name"], names[replica["name"]], replica["head"])
            )
        names[replica["name"]] = replica["head"]
        if not API_KEY.fullmatch(replica["api_key"]):
            problems.append(
                "%s contains spaces or control characters; use printable characters only" % replica["api_key_origin"]
            )
    owners = {}
    for replica in found:
        for node in replica["nodes"]:
            other = owners.setdefault(node["name"], replica["name"])
            if other != replica["name"]:
                problems.append(
                    "%s serves in both replica %s and replica %s; a host serves one replica"
                    % (node["name"], other, replica["name"])
                )
    if problems:
        raise FrontdoorError(problems)
    model, api_key = found[0]["model"], found[0]["api_key"]
    send = check_send(model, api_key, check_host, check_uri)
    return {
        "replicas": [
            {
                "name": r["name"],
                "server": r["name"],
                "kind": r["kind"],
                "metrics_url": r["metrics_url"],
                "nodes": r["nodes"],
            }
            for r in found
        ],
        "servers": [{"name": r["name"], "address": r["address"], "port": r["port"]} for r in found],
        "model": model,
        "api_key": api_key,
        "check_send": send,
        "hosts": _hosts(found),
    }


def _agree(found, problems):
    first = found[0]
    for replica in found[1:]:
        if replica["model"] != first["model"]:
            problems.append(
                "replica %s serves model %r (%s) and replica %s serves %r (%s): one front door sends one model name, "
                "so every replica behind it must serve the same one; set the same served model name on both, or give "
                "them separate front doors"
                % (
                    first["name"],
                    first["model"],
                    first["model_origin"],
                    replica["name"],
                    replica["model"],
                    replica["model_origin"],
                )
            )
        if replica["api_key"] != first["api_key"]:
            problems.append(
                "replica %s and replica %s have different API keys (%s, %s): the front door's health check sends one "
                "key, so every replica behind it must accept the same one; set the same key on both"
                % (first["name"], replica["name"], first["api_key_origin"], replica["api_key_origin"])
            )


def _hosts(found):
    """Every serving host once, with the address the restart connects to and the units it may control."""
    hosts = {}
    for replica in found:
        for node in replica["nodes"]:
            entry = hosts.setdefault(node["name"], {"name": node["name"], "ssh_host": node["ssh_host"], "units": []})
            if node["unit"] not in entry["units"]:
                entry["units"].append(node["unit"])
    return [hosts[name] for name in sorted(hosts)]
