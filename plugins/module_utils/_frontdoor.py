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

The front door's own settings (the role's ``frontdoor_*`` variables) are checked here too
(settings_problems, the filter's ``settings``), and the controller's and the planned restart's
(config_problems) by the same code in the role's preflight and in gpufleet-frontdoor: the
gpufleet-agents package (agents/) holds this file as gpufleet_agents._frontdoor.

Private module_utils (leading underscore); Python 3.8+ and the standard library only: on a host,
in the package, nothing else of the collection exists.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import math
import re

try:
    from ansible_collections.gpufleet.inference.plugins.module_utils import _render
except ImportError:  # in the gpufleet-agents package on a front door, which calls only config_problems()
    _render = None

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
LLAMA_RPC_UNIT_PORT = re.compile(r"^gpufleet-llama-rpc-([0-9]+)\.service\Z")
AGENT_PORT = 9105

# Loopback is an address only this host reaches, and nothing else: a name that merely starts
# with 127 (127.evil.example) resolves wherever its DNS says.
LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")
LOOPBACK_V6 = ipaddress.ip_address("::1")

# HAProxy's time format (configuration manual section 2.5): digits, then us, ms, s, m, h or d, and
# no unit is milliseconds. parse_time_err() (src/tools.c) rounds up to whole milliseconds and
# refuses 2^31 ms and more ("maximum value is 2147483647 ms or ~24.8 days").
HAPROXY_TIME = re.compile(r"^([0-9]+)(us|ms|s|m|h|d)?\Z")
HAPROXY_TIME_MAX_MS = 2**31 - 1
_HAPROXY_US = {None: 1000, "us": 1, "ms": 1000, "s": 10**6, "m": 60 * 10**6, "h": 3600 * 10**6, "d": 86400 * 10**6}
# Zero is "unset" for a HAProxy timeout, which is no timeout at all ("An unspecified timeout
# results in an infinite timeout", manual, "timeout client"); "inter 0" is refused when HAProxy
# loads the configuration, after the package is installed.
HAPROXY_TIMEOUTS = (
    "frontdoor_timeout_client",
    "frontdoor_timeout_server",
    "frontdoor_timeout_connect",
    "frontdoor_timeout_check",
)
HAPROXY_INTERVALS = ("frontdoor_check_inter", "frontdoor_check_fastinter", "frontdoor_check_downinter")

# systemd time spans as the timer takes them (systemd.time(7)): seconds without a unit, or numbers
# each with a unit.
SYSTEMD_SPAN = re.compile(r"^(?:[0-9]+|(?:[0-9]+ ?(?:us|ms|s|sec|m|min|h|hr|d|w) ?)+)\Z")
_SYSTEMD_PART = re.compile(r"([0-9]+) ?(us|ms|sec|s|min|m|hr|h|d|w)?")
_SYSTEMD_SECONDS = {
    None: 1,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1,
    "sec": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "hr": 3600,
    "d": 86400,
    "w": 7 * 86400,
}
HOUR, WEEK, YEAR = 3600, 7 * 86400, 365 * 86400

CHECK_HOST = re.compile(r"^[A-Za-z0-9.:\[\]-]+\Z")
# Names of HAProxy proxies the front door's own haproxy.cfg uses besides the backend.
OWN_PROXIES = ("stats",)
ADDRESSES = (
    ("frontdoor_bind_address", "must be an IP address or a host name (the address clients connect to)"),
    ("frontdoor_stats_address", "must be an IP address or a host name"),
    ("frontdoor_controller_metrics_address", "must be an IP address or a host name"),
    ("frontdoor_restart_ssh_source", "must be the IP address or host name this front door connects from"),
)
PORTS = ("frontdoor_port", "frontdoor_stats_port", "frontdoor_controller_metrics_port")
TRUE = ("y", "yes", "on", "1", "true", "t", "1.0")
# HAProxy's counts and sizes, as checks of the collection's input_problems kinds. fall and rise
# only need to be above 0 for HAProxy; past 100 checks in a row a replica's state no longer follows
# its health. Every retry may first wait "timeout connect", then a turn-around of min(timeout
# connect, 1 s) (manual, "retries"), so 10 already hold a client about a minute at the default 5s.
# tune.bufsize (null keeps HAProxy's own): HTTP/2 needs 16384 (manual, "tune.bufsize"), and
# HAProxy rounds the value up to a multiple of 16 and refuses 256 MiB or more when a proxy is in
# HTTP mode (check_config_validity() in src/cfgparse.c, "global.tune.bufsize must be below 256 MB
# when HTTP is in use", since 2.5).
COUNTS = (
    ("frontdoor_check_fall", 1, 100, "failed checks in a row; more keeps a dead replica in rotation"),
    ("frontdoor_check_rise", 1, 100, "passed checks in a row; more keeps a healed replica out"),
    ("frontdoor_retries", 0, 10, "each retry may wait timeout connect and 1 s more; more only holds clients"),
    ("frontdoor_tune_bufsize", 16384, 2**28 - 16, "HTTP/2 needs 16384; HAProxy refuses 256 MiB or more"),
)

# frontdoor.json's "controller" and "restart" settings: the section and key, the role variable that
# sets it (None: the program's own), its kind ("seconds" above 0, "seconds_or_off" 0 or above,
# "count" a whole number from low), low, high (None: the number of replicas) and why the bounds.
# The role's preflight checks its variables by these rules and gpufleet-frontdoor its config
# (config_problems), so the two refuse the same values. The role's variables of type int must be
# whole there too: the role writes them with `| int`.
SETTINGS = (
    ("controller", "interval", "frontdoor_controller_interval", "seconds", 0, WEEK, ""),
    ("controller", "agent_timeout", "frontdoor_agent_timeout", "seconds", 0, WEEK, ""),
    (
        "controller",
        "unreachable_fall",
        "frontdoor_unreachable_fall",
        "count",
        1,
        100,
        "polls in a row; more would keep a dead node's replica in service for good",
    ),
    (
        "controller",
        "undrain_rise_s",
        "frontdoor_undrain_rise_s",
        "seconds",
        0,
        WEEK,
        "0 would undrain a flapping replica on its first healthy poll",
    ),
    (
        "controller",
        "max_auto_drained",
        "frontdoor_max_auto_drained",
        "count",
        0,
        None,
        "0 never drains; the controller never drains the last replica serving either",
    ),
    ("controller", "remediate_after_s", "frontdoor_remediate_after_s", "seconds_or_off", 0, WEEK, "0 turns it off"),
    (
        "controller",
        "remediate_backoff_s",
        "frontdoor_remediate_backoff_s",
        "seconds",
        0,
        WEEK,
        "0 would restart a wedged replica again on every poll",
    ),
    (
        "restart",
        "drain_timeout",
        "frontdoor_restart_drain_timeout",
        "seconds",
        0,
        WEEK,
        "0 would stop a replica with its requests still running",
    ),
    ("restart", "stop_timeout", "frontdoor_restart_stop_timeout", "seconds", 0, WEEK, ""),
    ("restart", "ready_timeout", "frontdoor_restart_ready_timeout", "seconds", 0, WEEK, ""),
    ("restart", "ssh_connect_timeout", "frontdoor_restart_ssh_connect_timeout", "seconds", 0, WEEK, ""),
    ("restart", "poll_interval", None, "seconds", 0, WEEK, ""),
)
# The role variables above of type float; the others are written with `| int`.
FRACTIONAL = ("frontdoor_controller_interval", "frontdoor_agent_timeout")


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
    problems = [] if _uri_ok(uri) else [_uri_problem(uri)]
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


def _uri_ok(uri):
    return isinstance(uri, str) and bool(URI.fullmatch(uri))


def _uri_problem(uri):
    return "frontdoor_check_uri=%s must be a path such as /v1/completions" % (uri,)


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


def is_loopback(address):
    """True for an address only this host reaches: one in 127.0.0.0/8, ::1, or exactly ``localhost``.

    Tested as an IP address, never by prefix: any other name is not loopback, whatever it starts
    with. An IPv4-mapped address (``::ffff:127.0.0.1``) is not taken as loopback either."""
    if address == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(str(address))
    except ValueError:
        return False
    return ip in LOOPBACK_V4 if ip.version == 4 else ip == LOOPBACK_V6


def _url_host(address):
    return "[%s]" % address if ":" in address else address


def _api_address(hostvars, host, value, origin, frontend, problems):
    """Where the front door reaches an API that listens on value (on host)."""
    address = str(value if value is not None else "").strip()
    if address in UNSPECIFIED:
        address = str(
            _get(hostvars, host, "gpufleet_fabric_address", {}) or _get(hostvars, host, "ansible_host", {}) or host
        )
    if is_loopback(address) and host != frontend:
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


def plan(hostvars, groups, defaults=None, frontend="", check_host=None, check_uri=None, settings=None):
    """The replicas behind one front door; raises FrontdoorError with every problem, one per line.

    settings: the front door's role variables by name, checked with the replicas (settings_problems);
    their problems come first. check_host and check_uri default to its frontdoor_check_host and
    frontdoor_check_uri, else to localhost and /v1/completions."""
    own = settings or {}
    if check_host is None:
        check_host = own.get("frontdoor_check_host", "localhost")
    if check_uri is None:
        check_uri = own.get("frontdoor_check_uri", "/v1/completions")
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
    if not problems and not found:
        problems.append(
            "no replica found for the front door %s: the groups vllm_nodes and llama_coordinator are empty; "
            "put the serving hosts in the inventory (the topology plugin's serving section) or leave "
            "inference_frontends empty" % (frontend or "(this host)")
        )
    if not problems:
        _check_replicas(found, problems)
    if settings is not None:
        # What needs the replicas (their number, the ports on this host) is checked once they are sound.
        replicas = [r["name"] for r in found] if not problems else None
        taken = _host_ports(found, frontend) if not problems else None
        problems[:0] = settings_problems(settings, frontend, replicas, taken)
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


def _check_replicas(found, problems):
    """One model and key, unique names, a host in one replica."""
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


def _host_ports(found, frontend):
    """{port: what listens there} for the serving processes on the front door's own host."""
    taken = {}
    for replica in found:
        if replica["head"] == frontend and replica["port"]:
            origin = "vllm_api_port" if replica["kind"] == "vllm" else "llama_server_port"
            taken.setdefault(replica["port"], "%s on %s (the API of replica %s)" % (origin, frontend, replica["name"]))
        for node in replica["nodes"]:
            if node["name"] != frontend:
                continue
            rpc = LLAMA_RPC_UNIT_PORT.match(node["unit"])
            if rpc:
                taken.setdefault(int(rpc.group(1)), "llama_rpc_port on %s (a llama.cpp RPC server)" % frontend)
            agent = int(node["agent_url"].rsplit(":", 1)[1])
            taken.setdefault(agent, "health_agent_port on %s (its health agent)" % frontend)
    return taken


# The front door's own settings --------------------------------------------------------------


def settings_problems(settings, frontend="", replicas=None, taken=None):
    """Every problem of the front door's role variables (settings: {variable name: value}), one line each.

    replicas: the names of the replicas behind the front door, when known (frontdoor_max_auto_drained
    is at most their number); taken: {port: what listens there} on the front door's own host."""
    problems = []
    for name, rule in ADDRESSES:
        if name in settings and not _address_ok(settings[name]):
            problems.append("%s=%s %s" % (name, settings[name], rule))
    problems += _tls_problems(settings, frontend)
    problems += _haproxy_problems(settings)
    problems += _render.input_problems(
        [
            ["int", name, settings[name], {"min": low, "max": high, "why": why}]
            for name, low, high, why in COUNTS
            if name in settings and not (name == "frontdoor_tune_bufsize" and settings[name] is None)
        ]
    )
    for name in HAPROXY_TIMEOUTS + HAPROXY_INTERVALS:
        if name in settings:
            problems += _haproxy_time_problems(name, settings[name])
    problems += _timer_problems(settings)
    problems += _port_problems(settings, taken or {})
    problems += _settings_problems(settings, replicas)
    return problems


def _address_ok(value):
    text = "" if isinstance(value, bool) or value is None else str(value)
    return _is_ip(text) or bool(HOSTNAME.fullmatch(text))


def _is_ip(value):
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def _true(value):
    """Ansible's truth (the bool filter): true, yes, on, 1, y, t."""
    return value is True or (not isinstance(value, bool) and str(value).strip().lower() in TRUE)


def _tls_problems(settings, frontend):
    certificate = settings.get("frontdoor_tls_certificate") or ""
    key = settings.get("frontdoor_tls_key") or ""
    if bool(certificate) != bool(key):
        return ["set both frontdoor_tls_certificate (%s) and frontdoor_tls_key (%s), or neither" % (certificate, key)]
    address = settings.get("frontdoor_bind_address", "127.0.0.1")
    if certificate or _true(settings.get("frontdoor_allow_plaintext", False)) or is_loopback(address):
        return []
    why = ""
    if not _is_ip(address):
        why = " Only 127.0.0.0/8, ::1 and the name localhost are loopback; any other name is bound where it resolves."
    return [
        "frontdoor_bind_address=%s exposes the API beyond %s without TLS, and an exposed API must never send its key "
        "in clear.%s Set frontdoor_tls_certificate and frontdoor_tls_key (PEM files on the controller), keep "
        "frontdoor_bind_address at 127.0.0.1, or set frontdoor_allow_plaintext: true on a trusted network."
        % (address, frontend or "this host", why)
    ]


def _haproxy_problems(settings):
    problems = []
    backend = settings.get("frontdoor_backend", "inference")
    if not isinstance(backend, str) or not HAPROXY_NAME.fullmatch(backend):
        problems.append(
            "frontdoor_backend=%s is not a valid HAProxy name: use letters, digits and - _ . : only" % (backend,)
        )
    elif backend in OWN_PROXIES:
        problems.append(
            "frontdoor_backend=%s is the name of the front door's own frontends: pick another name" % (backend,)
        )
    uri = settings.get("frontdoor_check_uri", "/v1/completions")
    if not _uri_ok(uri):
        problems.append(_uri_problem(uri))
    host = settings.get("frontdoor_check_host", "localhost")
    if not isinstance(host, str) or not CHECK_HOST.fullmatch(host):
        problems.append("frontdoor_check_host=%s must be a host name" % (host,))
    return problems


def haproxy_ms(value):
    """A HAProxy time in milliseconds as HAProxy reads it (rounded up), or None when it is not one."""
    match = None if isinstance(value, bool) else HAPROXY_TIME.match(str(value))
    if not match:
        return None
    return -(-int(match.group(1)) * _HAPROXY_US[match.group(2)] // 1000)


def _haproxy_time_problems(name, value):
    ms = haproxy_ms(value)
    if ms is None:
        return [
            "%s=%s must be a HAProxy time such as 600s, 2s or 500ms (digits and a unit us/ms/s/m/h/d)" % (name, value)
        ]
    if ms == 0:
        if name == "frontdoor_timeout_check":
            why = "HAProxy reads a zero timeout as none set, and then bounds a check by the check interval only"
        elif name in HAPROXY_TIMEOUTS:
            why = "HAProxy reads a zero timeout as no timeout at all: a stalled peer holds its connection for ever"
        else:
            why = "HAProxy refuses a zero check interval"
        return ["%s=%s must be above 0 (%s): give a time such as 600s, 2s or 500ms" % (name, value, why)]
    if ms > HAPROXY_TIME_MAX_MS:
        return [
            "%s=%s is longer than HAProxy takes: at most 2147483647 ms (24d, about 24.8 days; HAProxy refuses the "
            "configuration)" % (name, value)
        ]
    return []


def systemd_seconds(value):
    """A systemd time span in seconds (systemd.time(7)), or None when it is not one this role takes."""
    text = None if isinstance(value, bool) else str(value)
    if text is None or not SYSTEMD_SPAN.match(text):
        return None
    return sum(int(digits) * _SYSTEMD_SECONDS[unit or None] for digits, unit in _SYSTEMD_PART.findall(text))


def _timer_problems(settings):
    problems = []
    spans = (
        ("frontdoor_restart_interval", HOUR, "48h"),
        ("frontdoor_restart_randomized_delay", 0, "2h"),
    )
    for name, low, default in spans:
        value = settings.get(name, default)
        seconds = systemd_seconds(value)
        if seconds is None:
            problems.append(
                "%s=%s: use systemd time spans such as 48h or 2h 30min (seconds, or numbers each with a unit "
                "us/ms/s/sec/m/min/h/hr/d/w; systemd.time(7))" % (name, value)
            )
        elif seconds < low:  # the interval only
            problems.append(
                "%s=%s is shorter than an hour: the timer would restart the replicas back to back (a span of 0 "
                "elapses again as soon as a run starts); give a span such as 48h, or set frontdoor_restart_timer: "
                "false and run playbooks/rolling_restart.yml when you choose" % (name, value)
            )
        elif seconds > YEAR:
            problems.append(
                "%s=%s is longer than a year (365d), which is no schedule; to turn the timer off set "
                "frontdoor_restart_timer: false" % (name, value)
            )
    timer = settings.get("frontdoor_restart_timer", True)
    if str(timer).lower() not in ("true", "false"):
        problems.append("frontdoor_restart_timer=%s must be true or false" % (timer,))
    return problems


def _as_port(value):
    text = "" if isinstance(value, bool) else str(value)
    return int(text) if re.match(r"^[0-9]{1,5}\Z", text) and 1 <= int(text) <= 65535 else None


def _port_problems(settings, taken):
    """Three ports of the front door's own, none of them a port a serving process takes on this host."""
    if not all(name in settings for name in PORTS):
        return []
    ports = [_as_port(settings[name]) for name in PORTS]
    problems = []
    if None not in ports and len(set(ports)) != len(ports):
        problems.append(
            "frontdoor_port=%s, frontdoor_stats_port=%s and frontdoor_controller_metrics_port=%s must be three "
            "different ports" % tuple(settings[name] for name in PORTS)
        )
    for name, port in zip(PORTS, ports):
        if port in taken:
            problems.append(
                "%s=%d is also %s, which serves on the front door's own host: two services cannot listen on one "
                "port, whatever their addresses; give %s another port" % (name, port, taken[port], name)
            )
    return problems


def _settings_problems(settings, replicas):
    problems = []
    for _section, _key, variable, kind, low, high, why in SETTINGS:
        if variable is None or variable not in settings:
            continue
        count = None if replicas is None else len(replicas)
        limit, reason = _limit(high, why, count, ": " + ", ".join(replicas or []))
        rule = _setting_rule(settings[variable], kind, low, limit, reason, variable not in FRACTIONAL, strict=False)
        if rule:
            problems.append("%s=%r %s" % (variable, settings[variable], rule))
    return problems


def config_problems(controller, restart, replicas=None):
    """The problems of frontdoor.json's "controller" and "restart" settings, as gpufleet-frontdoor
    names them (``controller 'interval' must be ..., found 0``); the same rules as the role's
    variables. replicas: how many replicas the config has, when that is known."""
    sections = {"controller": controller, "restart": restart}
    problems = []
    for section, key, _variable, kind, low, high, why in SETTINGS:
        limit, reason = _limit(high, why, replicas, "")
        value = sections[section].get(key)
        rule = _setting_rule(value, kind, low, limit, reason, whole=False, strict=True)
        if rule:
            problems.append("%s %r %s, found %r" % (section, key, rule, value))
    return problems


def _limit(high, why, replicas, names):
    """The bound of a setting and why; high None is the number of replicas, when that is known."""
    if high is not None or replicas is None:
        return high, why
    return replicas, "the replicas behind the front door%s; %s" % (names, why)


def _setting_rule(value, kind, low, high, why, whole, strict):
    """None when value keeps the rule, else the rule ("must be ..."). strict: numbers only (JSON);
    else also their text, as a role variable may be given (-e name=15)."""
    high = 2**31 - 1 if high is None else high
    if kind == "count":
        number = _number(value, whole=True, strict=strict)
        if number is None or not low <= number <= high:
            return "must be an integer >= %d and at most %d%s" % (low, high, " (%s)" % why if why else "")
        return None
    number = _number(value, whole=whole, strict=strict)
    above = "> 0" if kind == "seconds" else ">= 0"
    if number is None or not (number > 0 or (kind == "seconds_or_off" and number == 0)) or number > high:
        return "must be %s of seconds %s and at most %d%s%s" % (
            "a whole number" if whole else "a number",
            above,
            high,
            " (a week)" if high == WEEK else "",
            " (%s)" % why if why else "",
        )
    return None


def _number(value, whole, strict):
    """value as a finite int or float, or None; whole: an integral value only (strict: an int)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = value
    elif strict or not isinstance(value, str):
        return None
    else:
        try:
            number = int(value) if re.match(r"^\s*-?[0-9]+\s*\Z", value) else float(value)
        except ValueError:
            return None
    if isinstance(number, float) and not math.isfinite(number):
        return None
    if whole and (isinstance(number, float) and (strict or not number.is_integer())):
        return None
    return number
