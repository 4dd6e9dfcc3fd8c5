# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL environment rules, shared by the nccl_env filter and the nccl_info module.

This is a private module_utils file (leading underscore): its API may change without notice.
Everything here is a pure function of its arguments, so the rules are unit-tested directly and
the same code runs on the controller (filter) and on targets (module). Target-side code must
run on Python 3.8, so no match statements and no PEP 604 unions at runtime.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

TRANSPORTS = ("socket", "roce", "ib")

# NCCL caps helper threads at 16 (MAX_THREADS) and sockets per connection at 64 (MAX_SOCKETS)
# in src/transport/net_socket.cc; larger values are silently reduced, hiding the operator error.
MAX_SOCKET_NTHREADS = 16
MAX_SOCKETS = 64

# The flagship's 25GbE TCP design, tuned for 8x25G LACP bonds (docs/nccl.md).
SOCKET_DEFAULTS = {
    "NCCL_IB_DISABLE": "1",
    "NCCL_NET_GDR_LEVEL": "0",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "2",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_BUFFSIZE": "8388608",
}

# Environment variables NCCL documents in its user guide (NVIDIA/nccl docs/userguide/source/env.rst,
# the source of env.html, up to 2.30) plus the few its source reads without documenting them
# (NCCL_PARAM declarations: NCCL_HOSTID, NCCL_WORK_FIFO_BYTES, ...). Deprecated names that NCCL
# still reads stay in; names its source no longer reads are in NO_LONGER_READ instead. Used to
# catch typos, which NCCL itself ignores silently. docs/nccl.md says how the list was made and
# how to extend it.
KNOWN_VARIABLES = frozenset(
    """
NCCL_ALGO NCCL_ALLOC_P2P_NET_LL_BUFFERS NCCL_BUFFSIZE NCCL_CGA_CLUSTER_SIZE NCCL_CHECK_MODE
NCCL_CHECK_POINTERS NCCL_COLLNET_ENABLE NCCL_COLLNET_NODE_THRESHOLD NCCL_COMM_BLOCKING NCCL_COMM_ID
NCCL_CONF_FILE NCCL_CROSS_NIC NCCL_CTA_POLICY NCCL_CUMEM_ENABLE NCCL_CUMEM_HOST_ENABLE NCCL_DEBUG
NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_DEBUG_TIMESTAMP_LEVELS
NCCL_DMABUF_ENABLE NCCL_ENV_PLUGIN NCCL_GDRCOPY_ENABLE NCCL_GDRCOPY_FIFO_ENABLE
NCCL_GDRCOPY_FLUSH_ENABLE NCCL_GDRCOPY_SYNC_ENABLE NCCL_GRAPH_DUMP_FILE NCCL_GRAPH_FILE
NCCL_GRAPH_MIXING_SUPPORT NCCL_GRAPH_REGISTER NCCL_GRAPH_STREAM_ORDERING NCCL_HOSTID
NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_AR_THRESHOLD
NCCL_IB_DISABLE NCCL_IB_ECE_ENABLE NCCL_IB_FIFO_TC NCCL_IB_GID_INDEX NCCL_IB_HCA NCCL_IB_MERGE_NICS
NCCL_IB_OOO_RQ NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_QPS_PER_CONNECTION NCCL_IB_RETRY_CNT
NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_ROCE_VERSION_NUM NCCL_IB_SL NCCL_IB_SPLIT_DATA_ON_QPS
NCCL_IB_TC NCCL_IB_TIMEOUT NCCL_IGNORE_COLLNET_MISMATCH NCCL_IGNORE_CPU_AFFINITY
NCCL_IGNORE_NET_MISMATCH NCCL_IPC_USE_ABSTRACT_SOCKET NCCL_LAUNCH_MODE NCCL_LAUNCH_ORDER_IMPLICIT
NCCL_LAUNCH_RACE_FATAL NCCL_LEGACY_CUDA_REGISTER NCCL_LL128_BUFFSIZE NCCL_LOCAL_REGISTER
NCCL_MAX_CTAS NCCL_MAX_NCHANNELS NCCL_MAX_NRINGS NCCL_MEM_SYNC_DOMAIN NCCL_MIN_CTAS
NCCL_MIN_NCHANNELS NCCL_MIN_NRINGS NCCL_MNNVL_CLIQUE_ID NCCL_MNNVL_ENABLE NCCL_MNNVL_UUID
NCCL_MULTI_RANK_GPU_ENABLE NCCL_NCHANNELS_PER_NET_PEER NCCL_NET NCCL_NETDEVS_POLICY
NCCL_NET_GDR_C2C NCCL_NET_GDR_LEVEL NCCL_NET_GDR_READ NCCL_NET_MERGE_LEVEL NCCL_NET_MERGE_POLICY
NCCL_NET_PLUGIN NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_NO_CACHE NCCL_NSOCKS_PERTHREAD
NCCL_NTHREADS NCCL_NVB_DISABLE NCCL_NVLS_ENABLE NCCL_NVLS_NCHANNELS NCCL_OOB_NET_ENABLE
NCCL_OOB_NET_IFNAME NCCL_P2P_DIRECT_DISABLE NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_P2P_LL_THRESHOLD
NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE NCCL_P2P_PXN_LEVEL
NCCL_PROFILER_PLUGIN NCCL_PROTO NCCL_PXN_C2C NCCL_PXN_DISABLE NCCL_RAS_ADDR NCCL_RAS_ENABLE
NCCL_RAS_TIMEOUT_FACTOR NCCL_RUNTIME_CONNECT NCCL_SET_STACK_SIZE NCCL_SET_THREAD_NAME
NCCL_SHM_DISABLE NCCL_SOCKET_FAMILY NCCL_SOCKET_IFNAME NCCL_SOCKET_MAGIC NCCL_SOCKET_NTHREADS
NCCL_SOCKET_POLL_TIMEOUT_MSEC NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC
NCCL_SYM_GIN_KERNELS_ENABLE NCCL_TOPO_DUMP_FILE NCCL_TOPO_FILE NCCL_TUNER_PLUGIN
NCCL_UID_STAGGER_RATE NCCL_UID_STAGGER_THRESHOLD NCCL_WIN_ENABLE NCCL_WORK_FIFO_BYTES
""".split()
)

# Names the NCCL user guide still lists but NCCL's source (2.30.7) no longer reads, so a setting
# of them does nothing, silently: name -> (what became of it, the fix). Checked against
# src/ of NVIDIA/nccl at each release tag (docs/nccl.md).
NO_LONGER_READ = {
    "NCCL_IB_GDR_LEVEL": ("renamed NCCL_NET_GDR_LEVEL in NCCL 2.4", "rename the key to NCCL_NET_GDR_LEVEL"),
    "NCCL_IB_CUDA_SUPPORT": (
        "removed in NCCL 2.4",
        "use NCCL_NET_GDR_LEVEL instead (LOC turns GPU Direct RDMA off, SYS allows it at any distance)",
    ),
    "NCCL_LL_THRESHOLD": ("removed in NCCL 2.5", "use NCCL_PROTO to choose the protocols instead"),
    "NCCL_TREE_THRESHOLD": ("removed in NCCL 2.5", "use NCCL_ALGO to choose the algorithms instead"),
    "NCCL_SINGLE_RING_THRESHOLD": (
        "removed in NCCL 2.3",
        "remove it (NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS bound the channels)",
    ),
    "NCCL_CHECKS_DISABLE": ("deprecated in NCCL 2.2.12 and no longer read", "remove it"),
}

# The path levels NCCL_NET_GDR_LEVEL and NCCL_P2P_LEVEL take (ncclGetLevel in src/graph/paths.cc,
# the names of topoPathTypeStr in src/graph/topo.cc up to SYS, compared case-sensitively), or an
# integer of the old scale (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS). NCCL treats any other
# value as unset and keeps its default, silently.
PATH_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
LEVEL_VARIABLES = ("NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL")

# Characters that would change meaning in a systemd EnvironmentFile or in /etc/nccl.conf.
_UNSAFE_VALUE = re.compile(r"[\s\"'\\$`#]")


def _problem(variable, key, value, msg):
    return {"variable": variable, "key": key, "value": value, "msg": msg}


def _origin(origins, key):
    return (origins or {}).get(key, "nccl_env_overrides.%s" % key)


def suggest_variable(name):
    """Return the known NCCL variable closest to ``name``, or None."""
    # Compare without the shared NCCL_ prefix, which would make any two names look alike.
    suffixes = dict((known[5:], known) for known in KNOWN_VARIABLES)
    wanted = name.upper()
    wanted = wanted[5:] if wanted.startswith("NCCL_") else wanted
    matches = difflib.get_close_matches(wanted, sorted(suffixes), n=1, cutoff=0.6)
    return suffixes[matches[0]] if matches else None


def transport_env(transport, socket_ifname="", ib_hca="", ib_gid_index=None, ib_tc=None):
    """Return the NCCL variables a transport sets, before overrides.

    ``socket``: the flagship's TCP design (NCCL_IB_DISABLE=1 and the socket tuning).
    ``roce``/``ib``: the net_ib transport; IB_HCA and IB_TC for both, IB_GID_INDEX only for RoCE,
    because InfiniBand addresses ports by LID and ignores the GID index.
    NCCL_SOCKET_IFNAME is set for every transport: NCCL bootstraps over TCP even on RDMA.
    """
    env = {}
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = str(socket_ifname)
    if transport == "socket":
        env.update(SOCKET_DEFAULTS)
    elif transport in ("roce", "ib"):
        if ib_hca:
            env["NCCL_IB_HCA"] = str(ib_hca)
        if ib_tc is not None:
            env["NCCL_IB_TC"] = str(ib_tc)
        if transport == "roce" and ib_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(ib_gid_index)
    return env


def merge_overrides(env, overrides):
    """Apply ``nccl_env_overrides``: a value replaces, ``None`` removes a transport default."""
    merged = dict(env)
    for key, value in (overrides or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def parse_ifname_spec(spec):
    """Split an NCCL_SOCKET_IFNAME value into (exclude, exact, names), as NCCL does.

    A leading ``^`` excludes the listed names, a following ``=`` makes them exact names instead
    of prefixes; the rest is a comma-separated list.
    """
    spec = str(spec)
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    names = [part for part in spec.split(",") if part]
    return exclude, exact, names


def ifname_selects(spec, interfaces):
    """Return the interfaces of ``interfaces`` that NCCL_SOCKET_IFNAME=``spec`` selects."""
    exclude, exact, names = parse_ifname_spec(spec)

    def matches(iface):
        if exact:
            return iface in names
        return any(iface.startswith(name) for name in names)

    return sorted(iface for iface in interfaces if matches(iface) != exclude)


def parse_nccl_int(value):
    """Read an integer the way NCCL does (strtoll with base 0: 0x hex, leading 0 octal).

    Return None unless the whole value is such an integer: NCCL would stop at the first bad
    character and use what came before, which hides the operator's mistake.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    match = re.match(r"^([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\Z", text)
    if not match:
        return None
    sign, digits = match.groups()
    if digits[:2].lower() == "0x":
        number = int(digits[2:], 16)
    elif digits.startswith("0"):
        number = int(digits, 8)
    else:
        number = int(digits, 10)
    return -number if sign == "-" else number


def _check_int_range(env, key, low, high, origins, problems, skip=()):
    if key not in env or key in skip:
        return None
    number = parse_nccl_int(env[key])
    if number is None or not low <= number <= high:
        problems.append(
            _problem(
                _origin(origins, key),
                key,
                env[key],
                "%s=%s is outside %d..%d; set %s to an integer in that range"
                % (key, env[key], low, high, _origin(origins, key)),
            )
        )
        return None
    return number


def _is_path_level(value):
    """True for a value ncclGetLevel reads: a path name, or digits (the old integer scale)."""
    text = str(value)
    return text in PATH_LEVELS or bool(re.match(r"^[0-9]+\Z", text))


def validate_env(env, transport, interfaces=None, origins=None):
    """Check a merged NCCL environment. Return a list of problems (empty when valid).

    Each problem names the role variable that supplied the value (``origins`` maps an NCCL key to
    it; keys without an origin came from nccl_env_overrides), the value, and the fix.
    ``interfaces`` is the host's interface names; None skips the interface check.
    """
    problems = []
    flagged = set()
    if transport not in TRANSPORTS:
        problems.append(
            _problem(
                "nccl_transport",
                None,
                transport,
                "nccl_transport=%r is not one of %s; choose one of them" % (transport, ", ".join(TRANSPORTS)),
            )
        )

    for key in sorted(env):
        value = env[key]
        variable = _origin(origins, key)
        if key in NO_LONGER_READ:
            became, fix = NO_LONGER_READ[key]
            problems.append(
                _problem(
                    variable,
                    key,
                    value,
                    "%s is no longer read by NCCL (%s; NCCL ignores it silently); %s" % (key, became, fix),
                )
            )
            flagged.add(key)
            continue
        if key not in KNOWN_VARIABLES:
            guess = suggest_variable(key)
            hint = ("did you mean %s? Rename the key" % guess) if guess else "remove it"
            problems.append(
                _problem(
                    variable,
                    key,
                    value,
                    "%s is not an NCCL variable (NCCL ignores unknown names silently); %s" % (key, hint),
                )
            )
            flagged.add(key)
            continue
        if key == "NCCL_IB_HCA" and value == "" and transport in ("roce", "ib"):
            continue  # reported below with the fix that applies to RDMA designs
        if isinstance(value, (dict, list, bool)) or value == "":
            flagged.add(key)
            problems.append(
                _problem(
                    variable,
                    key,
                    value,
                    "%s=%r is not a plain value; set %s to a string or an integer "
                    "(use 0/1, not true/false), or to null to drop it" % (key, value, variable),
                )
            )
        elif _UNSAFE_VALUE.search(str(value)):
            flagged.add(key)
            problems.append(
                _problem(
                    variable,
                    key,
                    value,
                    "%s=%r contains whitespace, a quote, a backslash, '$', '`' or '#', which "
                    "nccl.conf and systemd EnvironmentFile parse differently; remove them" % (key, value),
                )
            )

    for key in LEVEL_VARIABLES:
        if key in env and key not in flagged and not _is_path_level(env[key]):
            variable = _origin(origins, key)
            problems.append(
                _problem(
                    variable,
                    key,
                    env[key],
                    "%s=%s is not a level NCCL reads (NCCL treats it as unset and keeps its default, silently); "
                    "set %s to one of %s (upper case) or an integer 0-4 (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS)"
                    % (key, env[key], variable, ", ".join(PATH_LEVELS)),
                )
            )

    nthreads = _check_int_range(env, "NCCL_SOCKET_NTHREADS", 1, MAX_SOCKET_NTHREADS, origins, problems, flagged)
    nsocks = _check_int_range(env, "NCCL_NSOCKS_PERTHREAD", 1, MAX_SOCKETS, origins, problems, flagged)
    if nthreads is not None and nsocks is not None and nthreads * nsocks > MAX_SOCKETS:
        problems.append(
            _problem(
                _origin(origins, "NCCL_NSOCKS_PERTHREAD"),
                "NCCL_NSOCKS_PERTHREAD",
                env["NCCL_NSOCKS_PERTHREAD"],
                "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS = %d x %d = %d exceeds NCCL's limit of %d sockets "
                "(NCCL would silently reduce it); lower one of them so the product is at most %d"
                % (nsocks, nthreads, nsocks * nthreads, MAX_SOCKETS, MAX_SOCKETS),
            )
        )

    if transport in ("roce", "ib"):
        # NCCL reads it with strtoll and gives up on net_ib for any non-zero value.
        if "NCCL_IB_DISABLE" in env and parse_nccl_int(env["NCCL_IB_DISABLE"]) != 0:
            problems.append(
                _problem(
                    _origin(origins, "NCCL_IB_DISABLE"),
                    "NCCL_IB_DISABLE",
                    env["NCCL_IB_DISABLE"],
                    "NCCL_IB_DISABLE=1 disables NCCL's net_ib transport, which carries RoCE as well as "
                    "InfiniBand, so nccl_transport=%s would silently fall back to TCP sockets; remove "
                    "NCCL_IB_DISABLE or use nccl_transport=socket" % transport,
                )
            )
        if not env.get("NCCL_IB_HCA"):
            problems.append(
                _problem(
                    _origin(origins, "NCCL_IB_HCA"),
                    "NCCL_IB_HCA",
                    env.get("NCCL_IB_HCA", ""),
                    "nccl_transport=%s needs the RDMA devices NCCL may use; set %s, e.g. '=mlx5_0:1,mlx5_1:1'"
                    % (transport, _origin(origins, "NCCL_IB_HCA")),
                )
            )
        _check_int_range(env, "NCCL_IB_TC", 0, 255, origins, problems, flagged)
        _check_int_range(env, "NCCL_IB_GID_INDEX", -1, 255, origins, problems, flagged)

    if interfaces is not None and env.get("NCCL_SOCKET_IFNAME"):
        spec = env["NCCL_SOCKET_IFNAME"]
        if not ifname_selects(spec, interfaces):
            variable = _origin(origins, "NCCL_SOCKET_IFNAME")
            known = ", ".join(sorted(interfaces)) or "none"
            problems.append(
                _problem(
                    variable,
                    "NCCL_SOCKET_IFNAME",
                    spec,
                    "NCCL_SOCKET_IFNAME=%r selects no interface on this host (interfaces: %s); NCCL "
                    "matches names by prefix, '=' makes them exact and '^' excludes; set %s to one of "
                    "the host's interfaces" % (spec, known, variable),
                )
            )
    return problems


def format_problems(problems):
    """One line per problem, each naming the variable, for a failure message."""
    return "; ".join("%s: %s" % (p["variable"], p["msg"]) for p in problems)


def parse_env_lines(text):
    """Parse ``KEY=value`` lines (nccl.conf or an EnvironmentFile); ``#`` lines are comments."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        env[key.strip()] = value.strip()
    return env


def build_env(
    overrides, transport, socket_ifname="", ib_hca="", ib_gid_index=None, ib_tc=None, interfaces=None, origins=None
):
    """The merged NCCL environment and its problems (validate_env's), as the nccl_env filter and the
    role's preflight build it: overrides (nccl_env_overrides; None is none) over the transport's
    variables. An overridden key is blamed on the override, not on the role variable it replaced.
    Returns (env, problems); env is None when overrides is not a mapping."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        return None, [
            _problem(
                "nccl_env_overrides",
                None,
                overrides,
                "nccl_env_overrides must be a mapping of NCCL_* names to values, got %s %r"
                % (type(overrides).__name__, overrides),
            )
        ]
    env = merge_overrides(transport_env(transport, socket_ifname, ib_hca, ib_gid_index, ib_tc), overrides)
    origins = dict((key, var) for key, var in (origins or {}).items() if key not in overrides)
    problems = validate_env(
        env, transport, interfaces=None if interfaces is None else list(interfaces), origins=origins
    )
    return env, problems


# The nccl role's settings ---------------------------------------------------------------------

# The GID check's advice, whatever went wrong with the automatic choice.
_GID_FIX = (
    "Set nccl_ib_gid_index to the index (show_gids or /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/), "
    "or fix the fabric address or nccl_ib_hca."
)


def _blank(value):
    return value is None or value in ("", [], {})


def _dscp(value):
    """The DSCP as a whole number 0..63, or None."""
    text = str(value)
    if isinstance(value, bool) or not re.match(r"^[0-9]+\Z", text) or int(text) > 63:
        return None
    return int(text)


def _binding_problem(settings):
    """An empty nccl_socket_ifname where the fabric layer defines a fabric link for the host."""
    address = settings.get("gpufleet_fabric_address")
    interfaces = settings.get("fabric_network_interfaces") or []
    if not _blank(settings.get("nccl_socket_ifname")):
        return None
    if address is None and _blank(interfaces) and _blank(settings.get("fabric_network_bond")):
        return None
    if address is not None:
        found = "gpufleet_fabric_address=%s" % (address,)
    else:
        names = interfaces if isinstance(interfaces, (list, tuple)) else [interfaces]
        found = "fabric_network_interfaces=%s" % ",".join(str(name) for name in names)
    return (
        "nccl_socket_ifname is empty on %s, but the fabric layer defines a fabric link for it (%s). Set "
        "gpufleet_fabric_interface to that link (e.g. bond0), or nccl_socket_ifname to '=<interface>'."
        % (settings.get("inventory_hostname", "this host"), found)
    )


def _gid_problem(rdma, ib_hca):
    """What is wrong with the GID rdma_info chose (its registered result), or None."""
    selected = rdma.get("selected")
    problem = rdma.get("selection_problem") or ""
    hca = str(ib_hca)
    if selected is not None and not problem:
        listed = re.search("(^|[=,])" + re.escape(str(selected.get("device", ""))) + "(:|,|$)", hca)
        if hca.startswith("^") or listed:
            return None
    if not problem:
        if selected is not None:
            problem = "the RoCE v2 GID of the fabric address is on %s, which nccl_ib_hca=%s does not list" % (
                selected.get("device"),
                hca,
            )
        else:
            problem = "no RoCE v2 GID found; set gpufleet_fabric_interface and gpufleet_fabric_address"
    return "nccl_ib_gid_index=auto: %s. %s" % (problem, _GID_FIX)


def settings_problems(settings):
    """Every problem of the nccl role's settings, one message each (_role_problems('nccl')).

    settings: the nccl_* variables, inventory_hostname, the fabric layer's gpufleet_fabric_address
    (None where undefined), fabric_network_interfaces and fabric_network_bond, the host's
    interfaces (ansible_facts['interfaces']) and rdma, the registered result of rdma_info (skipped
    unless nccl_transport is roce and nccl_ib_gid_index auto). The environment is checked as
    build_env builds it, each problem as "<role variable>: <what and the fix>"."""
    problems = []
    dscp = settings.get("nccl_ib_dscp")
    if _dscp(dscp) is None:
        problems.append(
            "nccl_ib_dscp=%s is not a DSCP value; set it to an integer in 0..63 (the roce role's lossless class "
            "uses 26)." % (dscp,)
        )
    binding = _binding_problem(settings)
    if binding:
        problems.append(binding)
    rdma = settings.get("rdma") or {}
    gid_index = settings.get("nccl_ib_gid_index")
    if isinstance(rdma, dict) and rdma and not rdma.get("skipped"):
        gid = _gid_problem(rdma, settings.get("nccl_ib_hca", ""))
        if gid:
            problems.append(gid)
            gid_index = None
        else:
            gid_index = rdma["selected"].get("gid_index")
    elif str(gid_index) == "auto":
        gid_index = -1
    tc = None if _dscp(dscp) is None else _dscp(dscp) * 4
    _env, env_problems = build_env(
        settings.get("nccl_env_overrides"),
        settings.get("nccl_transport"),
        socket_ifname=settings.get("nccl_socket_ifname") or "",
        ib_hca=settings.get("nccl_ib_hca") or "",
        ib_gid_index=gid_index,
        ib_tc=tc,
        interfaces=settings.get("interfaces"),
        origins=settings.get("origins"),
    )
    problems += ["%s: %s" % (problem["variable"], problem["msg"]) for problem in env_problems]
    return problems
