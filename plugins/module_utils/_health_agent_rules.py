# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health_agent role's input rules, in one check (filter _role_problems, role health_agent).

Every message names the variable, the value found and the fix. The agent checks its agent.json
again (gpufleet-health-agent --check-config, when the role writes it, and when it starts) with
_health_agent_config.normalize_config; the limits of counts, intervals, the ping interval and the
GPU count come from that module, so that the role refuses, before anything is installed, exactly
the values the agent would. The role also refuses port 0, which the agent takes in its tests.

Values arrive as the inventory gives them (a string, a number, a boolean, None, a list or a
mapping); where a rule was a Jinja test, it reads the value as Jinja did (`| string` is str(), a
regular expression match anchors at the start only, hence the \\Z).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth, _health_agent_config, _render

# An IPv4 address in dotted-quad form: the ping mesh is IPv4, like the fabric the topology
# inventory allocates.
IPV4 = re.compile(r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])[.]){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\Z")
_DIGITS = re.compile(r"^[0-9]+\Z")

# (pattern, variable, the rest of the message after "<variable>=<value>") of the listener's,
# the user's and the replica's values.
_SHAPES = (
    (r"^[A-Za-z0-9.:_-]+\Z", "health_agent_listen_address", None),
    (r"^[a-z_][a-z0-9_-]{0,30}\Z", "health_agent_user", " must be a system user name ([a-z_][a-z0-9_-]*)"),
    (r"^[A-Za-z0-9._-]*\Z", "health_agent_replica", " may hold letters, digits and ._- only"),
    (r"^[0-9]+\Z", "health_agent_rank", " must be an integer >= 0 (0: the node that serves the API)"),
)

_LIMITS = _health_agent_config
_COUNT = {"min": _LIMITS.COUNT[0], "max": _LIMITS.COUNT[1], "why": "consecutive results or probes"}
_SECONDS = {"max": _LIMITS.SECONDS_MAX}
COUNTS = (
    "health_agent_gpu_fall",
    "health_agent_gpu_rise",
    "health_agent_engine_fall",
    "health_agent_engine_rise",
    "health_agent_engine_deep_every",
    "health_agent_journal_fall",
    "health_agent_journal_rise",
    "health_agent_ping_loss_threshold",
    "health_agent_ping_rise",
)
SECONDS = (
    "health_agent_gpu_interval",
    "health_agent_engine_interval",
    "health_agent_engine_timeout",
    "health_agent_journal_interval",
)
_PING_INTERVAL = {"min": _LIMITS.PING_INTERVAL_MS[0], "max": _LIMITS.PING_INTERVAL_MS[1], "why": "milliseconds"}
_PING_TIMEOUT_WHY = "at most health_agent_ping_interval_ms, so that one probe per peer is in flight"
_GPU_COUNT_WHY = (
    "the GPUs nvidia-smi must see on this node, default gpufleet_gpu_count; null compares against the NVIDIA GPUs "
    "on the PCI bus"
)
_XID = {"min": 1, "why": "an Xid number, https://docs.nvidia.com/deploy/xid-errors/"}
ENGINE_URL = re.compile(r"^https?://[A-Za-z0-9._:\[\]-]+/?\Z")


def _json(value):
    """The value as Ansible's to_json writes it."""
    return json.dumps(value, default=str)


def _is_list(value):
    """Jinja's `is sequence and is not string and is not mapping`."""
    return isinstance(value, (list, tuple))


def settings_problems(settings):
    """Every problem of the health_agent role's settings, one message each.

    settings: the health_agent_* variables by name and inventory_hostname. A variable left out is
    taken as absent: a rule that needs it reads None."""
    return (
        _listener_problems(settings)
        + _render.input_problems(_number_checks(settings))
        + _peer_list_problems(settings)
        + _gpu_problems(settings)
        + _engine_problems(settings)
        + _journal_problems(settings)
    )


def _listener_problems(settings):
    problems = []
    port = settings.get("health_agent_port")
    text = str(port)
    if not (_DIGITS.match(text) and 1 <= int(text) <= 65535):
        problems.append("health_agent_port=%s must be a port 1..65535 (default 9105)" % (port,))
    for pattern, name, rule in _SHAPES:
        value = settings.get(name)
        if re.match(pattern, str(value)):
            continue
        problems.append("%s=%s%s" % (name, value, rule or _listen_rule(settings)))
    return problems


def _listen_rule(settings):
    return " must be an address or host name of %s (default: ansible_host, the management address)" % (
        settings.get("inventory_hostname"),
    )


def _number_checks(settings):
    """[kind, name, value, options] of the counts, the intervals and the timeouts, for input_problems."""
    checks = [["int", name, settings.get(name), _COUNT] for name in COUNTS]
    checks += [["seconds", name, settings.get(name), _SECONDS] for name in SECONDS]
    interval = settings.get("health_agent_ping_interval_ms")
    checks.append(["int", "health_agent_ping_interval_ms", interval, _PING_INTERVAL])
    # One probe per peer in flight, so that losses are counted in order.
    limit = int(str(interval)) if _DIGITS.match(str(interval)) else _LIMITS.PING_INTERVAL_MS[1]
    checks.append(
        ["int", "health_agent_ping_timeout_ms", settings.get("health_agent_ping_timeout_ms"),
         {"min": 1, "max": limit, "why": _PING_TIMEOUT_WHY}]
    )  # fmt: skip
    return checks


def _peer_key(peer):
    """What makes a peer's name unique: the name, in any case (as Ansible's unique filter compares),
    '' where the peer has none."""
    name = peer.get("name", "") if isinstance(peer, dict) else ""
    return name.lower() if isinstance(name, str) else name


def _peer_list_problems(settings):
    """The fabric address, and the peer list's shape (a list naming each peer once), as one message."""
    address = settings.get("health_agent_fabric_address")
    peers = settings.get("health_agent_ping_peers")
    address_ok = address == "" or (isinstance(address, str) and IPV4.match(address))
    keys = [_peer_key(peer) for peer in peers] if _is_list(peers) else []
    unique = all(keys.count(key) == 1 for key in keys)
    problems = []
    if not (address_ok and _is_list(peers) and unique):
        if _is_list(peers):
            found = ", ".join(str(peer["name"]) if isinstance(peer, dict) and "name" in peer else "?" for peer in peers)
        else:
            found = str(peers)
        problems.append(
            "health_agent_fabric_address=%s must be an IPv4 address of %s on the fabric (default "
            "gpufleet_fabric_address) or empty, which disables the ping check; health_agent_ping_peers must be a "
            "list of {name, address, same_replica} naming each peer once, found %s."
            % (address, settings.get("inventory_hostname"), found)
        )
    for index, peer in enumerate(peers if _is_list(peers) else []):
        found = _peer_problems("health_agent_ping_peers[%d]" % index, peer)
        if found:
            problems.append(
                "health_agent_ping_peers holds %s: %s. The peers default to the other hosts of fabric_nodes with "
                "gpufleet_fabric_address: fix that host's gpufleet_fabric_address." % (peer, "; ".join(found))
            )
    return problems


def _peer_problems(where, peer):
    """Each problem of one peer, naming its field: health_agent_ping_peers[0].name="node-2\\nx"."""
    problems = []
    fields = peer if isinstance(peer, dict) else {}
    if not isinstance(peer, dict):
        problems.append("%s is not a mapping" % where)
    name = fields.get("name", "")
    if not _LIMITS.PEER_NAME.match(str(name)):
        problems.append(
            "%s.name=%s may hold letters, digits and ._- only (it names the peer in /health and the metrics)"
            % (where, _json(name))
        )
    address = fields.get("address", "")
    if not IPV4.match(str(address)):
        problems.append("%s.address=%s is not an IPv4 fabric address" % (where, _json(address)))
    if not isinstance(fields.get("same_replica", False), bool):
        problems.append("%s.same_replica=%s must be true or false" % (where, _json(fields["same_replica"])))
    return problems


def _gpu_problems(settings):
    checks = [
        ["abs_path", "health_agent_nvidia_smi_path", settings.get("health_agent_nvidia_smi_path")],
        ["abs_path", "health_agent_sysfs_root", settings.get("health_agent_sysfs_root")],
    ]
    # null (the default without gpufleet_gpu_count) compares against the PCI bus; an empty string is no count.
    count = settings.get("health_agent_gpu_expected_count")
    if count is not None:
        low, high = _LIMITS.GPU_COUNT
        limits = {"min": low, "max": high, "why": _GPU_COUNT_WHY}
        checks.append(["int", "health_agent_gpu_expected_count", count, limits])
    xids = settings.get("health_agent_gpu_fatal_xids")
    checks += [["int", "health_agent_gpu_fatal_xids", xid, _XID] for xid in (xids if _is_list(xids) else [])]
    problems = _render.input_problems(checks)
    if not _is_list(xids):
        problems.append("health_agent_gpu_fatal_xids=%s must be a list of Xid numbers, e.g. [79, 94]" % _json(xids))
    return problems


def _engine_problems(settings):
    """The engine check's URL, model and API key; the key never appears, only its length does, and a
    URL's password shows as ********."""
    problems = []
    url = settings.get("health_agent_engine_url")
    if _render.ansible_bool(settings.get("health_agent_engine_enabled")) and not ENGINE_URL.match(str(url)):
        problems.append(
            "health_agent_engine_url=%s must be the engine's base URL, http://HOST:PORT (by default from "
            "vllm_api_host and vllm_api_port, or llama_server_host and llama_server_port)"
            % _apt_auth.split(url, "health_agent_engine_url")["shown"]
        )
    model = settings.get("health_agent_engine_model")
    if not re.match(r"^[A-Za-z0-9._:/+-]*\Z", str(model)):
        problems.append("health_agent_engine_model=%s may hold letters, digits and ._:/+- only" % (model,))
    key = str(settings.get("health_agent_engine_api_key"))
    if not re.match(r"^[!-~]*\Z", key):
        problems.append(
            "health_agent_engine_api_key (%d characters) holds spaces or control characters; it is sent as "
            '"Authorization: Bearer <key>" (default vllm_api_key or llama_server_api_key)' % len(key)
        )
    return problems


def _journal_problems(settings):
    problems = []
    unit = settings.get("health_agent_journal_unit")
    if not re.match(r"^[A-Za-z0-9@._:*-]*\Z", str(unit)):
        problems.append(
            "health_agent_journal_unit=%s must be a unit name or a journalctl --unit pattern, e.g. "
            "gpufleet-vllm-r0.service" % (unit,)
        )
    if _render.ansible_bool(settings.get("health_agent_journal_enabled")) and unit in ("", None):
        problems.append(
            "health_agent_journal_enabled is true but health_agent_journal_unit is empty: name the serving unit"
        )
    patterns = settings.get("health_agent_journal_patterns")
    one_line = re.compile(r"^[^\x00-\x1f\x7f]+\Z")
    if not (_is_list(patterns) and patterns and all(one_line.match(str(pattern)) for pattern in patterns)):
        problems.append(
            "health_agent_journal_patterns must be a non-empty list of one-line regular expressions, found %s"
            % (patterns,)
        )
    # The agent compiles each pattern with Python's re.compile, no flags; the regex kind does the same.
    problems += _render.input_problems(
        [["regex", "health_agent_journal_patterns", pattern] for pattern in (patterns if _is_list(patterns) else [])]
    )
    return problems
