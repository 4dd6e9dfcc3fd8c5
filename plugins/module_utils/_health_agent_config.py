# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health agent's configuration (agent.json): its keys, their defaults and their limits, and the
one check of a whole file (normalize_config).

The agent checks its file with normalize_config when it starts and when the role writes it
(`--check-config`, the template's validate); the role's rules (_health_agent_rules) take their
limits from here, so that a value the role accepts is one the agent accepts. The role's rules read
role variables and name them; the agent's messages name agent.json's keys. The one difference is
deliberate: the agent takes port 0 (any free port, for its tests), the role only 1..65535.

The gpufleet-agents package (agents/) holds this file as gpufleet_agents._health_agent_config:
Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# Limits shared with the role's rules: consecutive results or probes (fall, rise, loss_threshold,
# deep_every), seconds (interval, timeout: above 0), the ping interval in milliseconds, the GPUs
# of one node.
COUNT = (1, 1000)
SECONDS_MAX = 3600
PING_INTERVAL_MS = (10, 60000)
GPU_COUNT = (1, 64)
# A peer's name goes into the journal's lines and the metrics' peer label: one line, no spaces.
PEER_NAME = re.compile(r"^[A-Za-z0-9._-]+\Z")

CHECKS = ("gpu", "engine", "journal", "ping")
# Xids after which NVIDIA's catalogue (https://docs.nvidia.com/deploy/xid-errors/) asks for a
# GPU reset, a node reboot or a hardware check: double-bit/uncontained/unrecovered ECC (48, 94,
# 95, 140), row remapping (63, 64), high single-bit ECC rate (92), micro-controller halt (62),
# NVLink (74), fallen off the bus (79), GSP errors and timeouts (119, 120).
FATAL_XIDS = [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140]
NCCL_PATTERNS = [
    "NCCL WARN",
    "ncclSystemError",
    "ncclInternalError",
    "ncclUnhandledCudaError",
    "ncclRemoteError",
    "unhandled system error",
    "NCCL error",
]

CHECK_DEFAULTS = {
    "gpu": {
        "enabled": True,
        "reason_disabled": "",
        "expected_count": None,
        "nvidia_smi": "/usr/bin/nvidia-smi",
        "sysfs_root": "/sys",
        "fatal_xids": FATAL_XIDS,
        "interval": 30,
        "fall": 1,
        "rise": 2,
    },
    "engine": {
        "enabled": True,
        "reason_disabled": "",
        "url": "",
        "model": "",
        "api_key_file": "",
        "interval": 2,
        "timeout": 5,
        "fall": 2,
        "rise": 2,
        "deep_every": 1,
    },
    "journal": {
        "enabled": True,
        "reason_disabled": "",
        "unit": "",
        "patterns": NCCL_PATTERNS,
        "interval": 5,
        "fall": 1,
        "rise": 12,
    },
    "ping": {
        "enabled": True,
        "reason_disabled": "",
        "source_address": "",
        "peers": [],
        "interval_ms": 100,
        "timeout_ms": 100,
        "loss_threshold": 5,
        "rise": 10,
    },
}
TOP_DEFAULTS = {
    "listen_address": "127.0.0.1",
    "port": 9105,
    "replica": "",
    "rank": 0,
    "journalctl": "/usr/bin/journalctl",
}


def normalize_config(raw):
    """(config with defaults, problems): problems lists what is wrong, one line each."""
    if not isinstance(raw, dict):
        return None, [f"expected a JSON object, found {type(raw).__name__}"]
    config = dict(TOP_DEFAULTS)
    config.update({key: value for key, value in raw.items() if key != "checks"})
    checks = raw.get("checks", {})
    problems = []
    if not isinstance(checks, dict):
        problems.append(f"'checks' must be an object, found {checks!r}")
        checks = {}
    config["checks"] = {}
    for name in CHECKS:
        section = checks.get(name)
        merged = dict(CHECK_DEFAULTS[name])
        if section is None:
            merged.update(enabled=False, reason_disabled="not configured")
        elif isinstance(section, dict):
            merged.update(section)
        else:
            problems.append(f"checks.{name} must be an object, found {section!r}")
        config["checks"][name] = merged
    problems.extend(_config_problems(config))
    return config, problems


def _is_int(value, minimum=None, maximum=None):
    ok = isinstance(value, int) and not isinstance(value, bool)
    return ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def _is_seconds(value):
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and 0 < value <= SECONDS_MAX


def _is_ipv4(value):
    try:
        ipaddress.IPv4Address(value)
    except (ValueError, TypeError):
        return False
    return True


def _config_problems(config):
    yield from _top_problems(config)
    for name in CHECKS:
        yield from _common_problems(name, config["checks"][name])
    yield from _gpu_problems(config["checks"]["gpu"])
    yield from _engine_problems(config["checks"]["engine"])
    yield from _journal_problems(config["checks"]["journal"])
    yield from _ping_problems(config["checks"]["ping"])


def _top_problems(config):
    if not isinstance(config.get("node"), str) or not config["node"]:
        yield f"'node' must be a non-empty string, found {config.get('node')!r}"
    if not isinstance(config["replica"], str):
        yield f"'replica' must be a string, found {config['replica']!r}"
    if not _is_int(config["rank"], 0):
        yield f"'rank' must be an integer >= 0, found {config['rank']!r}"
    if not isinstance(config["listen_address"], str) or not config["listen_address"]:
        yield f"'listen_address' must be an address, found {config['listen_address']!r}"
    if not _is_int(config["port"], 0, 65535):
        yield f"'port' must be an integer 0..65535 (0: any free port), found {config['port']!r}"
    if not isinstance(config["journalctl"], str) or not config["journalctl"].startswith("/"):
        yield f"'journalctl' must be an absolute path, found {config['journalctl']!r}"


def _common_problems(name, check):
    if not isinstance(check["enabled"], bool):
        yield f"checks.{name}.enabled must be true or false, found {check['enabled']!r}"
    if not isinstance(check["reason_disabled"], str):
        yield f"checks.{name}.reason_disabled must be a string, found {check['reason_disabled']!r}"
    for key in ("interval", "timeout"):
        if key in check and not _is_seconds(check[key]):
            yield f"checks.{name}.{key} must be a number of seconds > 0 and <= {SECONDS_MAX}, found {check[key]!r}"
    for key in ("fall", "rise", "loss_threshold"):
        if key in check and not _is_int(check[key], *COUNT):
            yield f"checks.{name}.{key} must be an integer {COUNT[0]}..{COUNT[1]}, found {check[key]!r}"


def _gpu_problems(gpu):
    if gpu["expected_count"] is not None and not _is_int(gpu["expected_count"], *GPU_COUNT):
        low, high = GPU_COUNT
        yield f"checks.gpu.expected_count must be null or an integer {low}..{high}, found {gpu['expected_count']!r}"
    if not isinstance(gpu["fatal_xids"], list) or not all(_is_int(xid, 1) for xid in gpu["fatal_xids"]):
        yield f"checks.gpu.fatal_xids must be a list of Xid numbers, found {gpu['fatal_xids']!r}"
    for key in ("nvidia_smi", "sysfs_root"):
        if not isinstance(gpu[key], str) or not gpu[key].startswith("/"):
            yield f"checks.gpu.{key} must be an absolute path, found {gpu[key]!r}"


def _engine_problems(engine):
    url = engine["url"]
    if engine["enabled"] and not (isinstance(url, str) and re.match(r"^https?://[^/\s]+/?$", url)):
        yield f"checks.engine.url must be the engine's base URL (http://HOST:PORT), found {url!r}"
    for key in ("model", "api_key_file"):
        if not isinstance(engine[key], str):
            yield f"checks.engine.{key} must be a string, found {engine[key]!r}"
    if not _is_int(engine["deep_every"], *COUNT):
        found = engine["deep_every"]
        yield (
            f"checks.engine.deep_every must be an integer {COUNT[0]}..{COUNT[1]} (1: every probe is a completion), "
            f"found {found!r}"
        )


def _journal_problems(journal):
    if journal["enabled"] and (not isinstance(journal["unit"], str) or not journal["unit"]):
        yield f"checks.journal.unit must name the serving unit, found {journal['unit']!r}"
    patterns = journal["patterns"]
    if not isinstance(patterns, list) or not patterns or not all(isinstance(item, str) for item in patterns):
        yield f"checks.journal.patterns must be a non-empty list of regular expressions, found {patterns!r}"
        return
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            yield f"checks.journal.patterns: {pattern!r} is not a regular expression: {exc}"


def _ping_problems(ping):
    if ping["source_address"] and not _is_ipv4(ping["source_address"]):
        yield f"checks.ping.source_address must be an IPv4 address or empty, found {ping['source_address']!r}"
    if not _is_int(ping["interval_ms"], *PING_INTERVAL_MS):
        low, high = PING_INTERVAL_MS
        yield f"checks.ping.interval_ms must be an integer {low}..{high}, found {ping['interval_ms']!r}"
    elif not _is_int(ping["timeout_ms"], 1, ping["interval_ms"]):
        # At most one probe per peer in flight, so that outcomes come in order and "consecutive" holds.
        limit = ping["interval_ms"]
        yield f"checks.ping.timeout_ms must be an integer 1..interval_ms ({limit}), found {ping['timeout_ms']!r}"
    peers = ping["peers"]
    shape = (
        all(
            isinstance(peer, dict)
            and isinstance(peer.get("name"), str)
            and peer["name"]
            and _is_ipv4(peer.get("address"))
            and isinstance(peer.get("same_replica", False), bool)
            for peer in peers
        )
        if isinstance(peers, list)
        else False
    )
    if not shape:
        yield f'checks.ping.peers must be a list of {{"name", "address" (IPv4), "same_replica": bool}}, found {peers!r}'
        return
    names = [peer["name"] for peer in peers]
    bad = [name for name in names if not PEER_NAME.match(name)]
    if bad:
        yield f"checks.ping.peers names may hold letters, digits and ._- only, found {', '.join(map(repr, bad))}"
    if len(set(names)) != len(names):
        yield f"checks.ping.peers names each peer once, found {', '.join(names)}"
    for peer in peers:
        peer.setdefault("same_replica", False)
