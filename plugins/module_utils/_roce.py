# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lossless RoCE v2 class on one NIC: read it with mlnx_qos or iproute2 dcb, plan the fewest writes.

State model shared by both tools (what `read_state` returns and the module reports):
  trust        "dscp", "pcp" or "none": what classifies received packets
  pfc_enabled  sorted priorities with PFC on
  dscp2prio    {dscp: priority}; a list of priorities where the APP table holds several for one DSCP
  ets          {"tsa": [8], "bw": [8], "prio_tc": [8]} per traffic class, None when not read
  cable_len    the PFC delay field (mlx5 reads it as cable length in metres); None when not read
  apptrust     dcb only: the `dcb apptrust` order, None where the kernel, driver or iproute2 lacks it

Facts this relies on (sources in the fixture READMEs and tests/unit/.../fixtures):
- Mellanox/mlnx-tools python/mlnx_qos prints the state after every call; `-a` lists every TC.
  `--trust` and `--dscp2prio` in one call exit 1 ("cannot be used at the same time");
  `--dscp2prio set,D,P` may repeat. Without /sys/class/net/IF/qos/trust (inbox mlx5) it works
  through DCB netlink: trust is "dscp" exactly when the APP table holds a DSCP entry, and
  `--trust dscp` adds the firmware default map (DSCP d -> priority d >> 3).
  Older mlnx_qos wrote PFC with delay 0 unless --cable_len was given, so the current one is passed.
- Changing the PFC enable mask toggles the port link in mlx5 (mlx5e_dcbnl_ieee_setpfc), so PFC is
  written only when it differs, and last.
- iproute2 dcb prints JSON with -j; DSCP keys are always numeric there. Some releases print each
  dscp-prio entry as [dscp, prio, " "]. `dcb app replace` exits 0 even when it could not apply
  the change, so every write is checked by reading again. `dcb app` exists from iproute2 5.12,
  `dcb apptrust` from 6.2, and only drivers with the apptrust ops answer it (not mlx5); elsewhere
  the mlnx_qos rule above decides trust.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

PRIORITIES = 8
MAX_DSCP = 63
TOOLS = ("mlnx_qos", "dcb")
TSA_ETS = "ets"


class RoceError(Exception):
    """A read or write that failed; details carry rc/stdout/stderr/cmd where a command was run."""

    def __init__(self, msg, **details):
        super(RoceError, self).__init__(msg)
        self.details = details


def _add_mapping(mapping, dscp, prio):
    if dscp not in mapping:
        mapping[dscp] = prio
        return
    prios = mapping[dscp] if isinstance(mapping[dscp], list) else [mapping[dscp]]
    if prio not in prios:
        mapping[dscp] = sorted([*prios, prio])


# ---------------------------------------------------------------- mlnx_qos


_MLNX_TC = re.compile(r"^tc:\s*(\d+)\s+ratelimit:\s*[^,]*,\s*tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?")


def parse_mlnx_qos(text):
    """State from `mlnx_qos -i IF [-a]` (every MLNX_OFED / mlnx-tools format seen; blank lines ignored)."""
    state = {
        "trust": None,
        "pfc_enabled": None,
        "dscp2prio": {},
        "ets": None,
        "cable_len": None,
        "dcbx": None,
        "lldpad_running": "lldpad service is running" in text,
    }
    tsa, bw, prio_tc = [None] * PRIORITIES, [None] * PRIORITIES, [None] * PRIORITIES
    tc = None
    in_pfc = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("DCBX mode:"):
            state["dcbx"] = "os" if "OS" in line else "firmware"
        elif line.startswith("Priority trust state:"):
            state["trust"] = line.split(":", 1)[1].strip() or None
        elif re.match(r"prio:\d+$", line):
            # Under 'default priority:' (mlnx-tools before 2024-11), one per ETHERTYPE APP entry: not
            # a DSCP map line, and not state this collection manages (the dcb backend has no such key).
            pass
        elif line.startswith("prio:"):
            match = re.match(r"prio:(\d+)\s+dscp:([\d,\s]*)$", line)
            if not match:
                raise RoceError("mlnx_qos printed an unreadable dscp2prio line: %r" % line)
            for dscp in re.findall(r"\d+", match.group(2)):
                _add_mapping(state["dscp2prio"], int(dscp), int(match.group(1)))
        elif line.startswith("Cable len:"):
            state["cable_len"] = int(line.split(":", 1)[1])
        elif line.startswith("PFC configuration"):
            in_pfc = True
        elif in_pfc and line.startswith("enabled"):
            flags = line.split()[1:]
            if len(flags) != PRIORITIES or set(flags) - {"0", "1"}:
                raise RoceError("mlnx_qos printed an unreadable PFC line: %r" % line)
            state["pfc_enabled"] = [prio for prio, flag in enumerate(flags) if flag == "1"]
        elif line.startswith("tc:"):
            in_pfc = False
            match = _MLNX_TC.match(line)
            if not match:
                raise RoceError("mlnx_qos printed an unreadable traffic class line: %r" % line)
            tc = int(match.group(1))
            tsa[tc] = match.group(2)
            bw[tc] = int(match.group(3) or 0)
        elif line.startswith("priority:") and tc is not None:
            prio_tc[int(line.split(":", 1)[1])] = tc
    if state["pfc_enabled"] is None:
        raise RoceError("mlnx_qos printed no 'PFC configuration' with an 'enabled' line")
    if any(value is not None for value in tsa):
        state["ets"] = {"tsa": tsa, "bw": bw, "prio_tc": prio_tc}
    return state


def mlnx_qos_read_argv(binary, interface):
    return [binary, "-i", interface, "-a"]


# ---------------------------------------------------------------- dcb


def _load_dcb_json(text, what):
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        raise RoceError("dcb %s printed no JSON: %r" % (what, text[:200])) from None
    if not isinstance(data, dict):
        raise RoceError("dcb %s printed JSON that is not an object: %r" % (what, text[:200]))
    return data


def _eight(values, what):
    if not isinstance(values, list) or len(values) != PRIORITIES:
        raise RoceError("dcb %s: expected 8 values, got %r" % (what, values))
    return values


def parse_dcb_pfc(text):
    """(pfc_enabled, delay) from `dcb -j pfc show dev IF`."""
    data = _load_dcb_json(text, "pfc show")
    flags = _eight(data.get("prio_pfc"), "pfc show prio_pfc")
    if any(not isinstance(flag, bool) for flag in flags):
        raise RoceError("dcb pfc show: expected true/false per priority, got %r" % (flags,))
    return [prio for prio, flag in enumerate(flags) if flag], data.get("delay")


def parse_dcb_app(text):
    """{dscp: prio} from `dcb -j app show dev IF dscp-prio`; entries are [dscp, prio] or [dscp, prio, " "]."""
    mapping = {}
    for entry in _load_dcb_json(text, "app show").get("dscp_prio", []):
        if not isinstance(entry, list) or len(entry) < 2:
            raise RoceError("dcb app show: unreadable dscp_prio entry %r" % (entry,))
        _add_mapping(mapping, int(entry[0]), int(entry[1]))
    return mapping


def parse_dcb_ets(text):
    """{"tsa", "bw", "prio_tc"} from `dcb -j ets show dev IF prio-tc tc-tsa tc-bw`."""
    data = _load_dcb_json(text, "ets show")
    return {
        "tsa": list(_eight(data.get("tc_tsa"), "ets show tc_tsa")),
        "bw": [int(value) for value in _eight(data.get("tc_bw"), "ets show tc_bw")],
        "prio_tc": [int(value) for value in _eight(data.get("prio_tc"), "ets show prio_tc")],
    }


def parse_dcb_apptrust(text):
    """The trusted selectors, in order, from `dcb -j apptrust show dev IF`."""
    order = _load_dcb_json(text, "apptrust show").get("order", [])
    if not isinstance(order, list):
        raise RoceError("dcb apptrust show: unreadable order %r" % (order,))
    return [str(selector) for selector in order]


def dcb_trust(apptrust, dscp2prio):
    """Trust as mlnx_qos derives it without sysfs, unless the driver reports an apptrust order."""
    if apptrust is None:
        return "dscp" if dscp2prio else "pcp"
    return apptrust[0] if apptrust else "none"


def dcb_read_argvs(binary, interface):
    return {
        "pfc": [binary, "-j", "pfc", "show", "dev", interface],
        "app": [binary, "-j", "app", "show", "dev", interface, "dscp-prio"],
        "ets": [binary, "-j", "ets", "show", "dev", interface, "prio-tc", "tc-tsa", "tc-bw"],
        "apptrust": [binary, "-j", "apptrust", "show", "dev", interface],
    }


# ---------------------------------------------------------------- reading


def _run_read(run, argv):
    rc, out, err = run(argv)
    if rc != 0:
        detail = " ".join((err or out or "").split()) or "no output"
        raise RoceError("%s failed (rc %d): %s" % (" ".join(argv), rc, detail), rc=rc, stdout=out, stderr=err, cmd=argv)
    return out


def read_state(tool, binary, interface, run, need_ets=False):
    """The NIC's state through `run(argv) -> (rc, stdout, stderr)`; raises RoceError naming the command."""
    if tool == "mlnx_qos":
        argv = mlnx_qos_read_argv(binary, interface)
        out = _run_read(run, argv)
        try:
            return parse_mlnx_qos(out)
        except RoceError as exc:
            raise RoceError("%s: %s" % (" ".join(argv), exc), stdout=out, cmd=argv) from None
    argvs = dcb_read_argvs(binary, interface)
    state = {"dcbx": None, "lldpad_running": False}
    state["pfc_enabled"], state["cable_len"] = parse_dcb_pfc(_run_read(run, argvs["pfc"]))
    state["dscp2prio"] = parse_dcb_app(_run_read(run, argvs["app"]))
    try:
        state["ets"] = parse_dcb_ets(_run_read(run, argvs["ets"]))
    except RoceError:
        # Only a failure when ETS is to be managed; otherwise it is reported as unknown.
        if need_ets:
            raise
        state["ets"] = None
    rc, out, _err = run(argvs["apptrust"])
    state["apptrust"] = parse_dcb_apptrust(out) if rc == 0 else None
    state["trust"] = dcb_trust(state["apptrust"], state["dscp2prio"])
    return state


# ---------------------------------------------------------------- desired state and plan


def desired_state(pfc_priority, dscp, cnp_dscp, cnp_priority, ets):
    mapping = {dscp: pfc_priority}
    if cnp_dscp is not None:
        mapping[cnp_dscp] = cnp_priority
    return {"trust": "dscp", "pfc_enabled": [pfc_priority], "dscp2prio": mapping, "ets": ets}


def validate(params):
    """Problems with the options, each naming the option and what to give instead."""
    problems = []
    interface = params["interface"]
    if not interface or len(interface) > 15 or re.search(r"[\s/:]", interface):
        problems.append(
            "interface=%r is not a network device name; give the netdev of the RoCE port, such as ens1f0np0" % interface
        )
    for name, top in (("pfc_priority", PRIORITIES - 1), ("cnp_priority", PRIORITIES - 1)):
        if not 0 <= params[name] <= top:
            problems.append("%s=%d is out of range; use a priority 0..7" % (name, params[name]))
    for name in ("dscp", "cnp_dscp"):
        if params[name] is not None and not 0 <= params[name] <= MAX_DSCP:
            problems.append("%s=%d is out of range; use a DSCP value 0..63 (26 is AF31)" % (name, params[name]))
    if params["cnp_dscp"] == params["dscp"] and params["cnp_priority"] != params["pfc_priority"]:
        problems.append(
            "cnp_dscp=%d equals dscp but cnp_priority=%d differs from pfc_priority=%d; give CNP its own "
            "code point (48 is the firmware default) or set cnp_dscp to null"
            % (params["cnp_dscp"], params["cnp_priority"], params["pfc_priority"])
        )
    ets = params["ets"]
    if ets is not None:
        if len(ets) != PRIORITIES or any(not 0 <= share <= 100 for share in ets):
            problems.append("ets=%r must be 8 percentages 0..100, one per traffic class 0..7" % (ets,))
        elif sum(ets) != 100:
            problems.append("ets=%r sums to %d; the shares must sum to 100, or omit ets" % (ets, sum(ets)))
    return problems


def differences(current, desired):
    """{field: (want, have)} for every field of `desired` the current state does not meet."""
    found = {}
    if current["trust"] != desired["trust"]:
        found["trust"] = (desired["trust"], current["trust"])
    if sorted(current["pfc_enabled"] or []) != desired["pfc_enabled"]:
        found["pfc"] = (desired["pfc_enabled"], current["pfc_enabled"])
    missing = {d: p for d, p in desired["dscp2prio"].items() if current["dscp2prio"].get(d) != p}
    if missing:
        found["dscp2prio"] = (missing, {d: current["dscp2prio"].get(d) for d in missing})
    if desired["ets"] is not None:
        want = {"tsa": [TSA_ETS] * PRIORITIES, "bw": list(desired["ets"])}
        have = current["ets"] or {}
        if have.get("tsa") != want["tsa"] or have.get("bw") != want["bw"]:
            found["ets"] = (want, {"tsa": have.get("tsa"), "bw": have.get("bw")})
    return found


def plan(tool, binary, interface, current, desired):
    """[{"field", "argv"}] that bring `current` to `desired`: trust, DSCP map, ETS, then PFC (it flaps the link)."""
    found = differences(current, desired)
    steps = []
    mapping = found.get("dscp2prio", ({}, None))[0]
    if tool == "mlnx_qos":
        base = [binary, "-i", interface]
        if "trust" in found:
            steps.append({"field": "trust", "argv": [*base, "--trust", "dscp"]})
        if mapping:
            argv = list(base)
            for dscp in sorted(mapping):
                argv += ["--dscp2prio", "set,%d,%d" % (dscp, mapping[dscp])]
            steps.append({"field": "dscp2prio", "argv": argv})
        if "ets" in found:
            shares = ",".join(str(share) for share in desired["ets"])
            steps.append({"field": "ets", "argv": [*base, "--tsa", ",".join([TSA_ETS] * PRIORITIES), "--tcbw", shares]})
        if "pfc" in found:
            flags = ",".join("1" if prio in desired["pfc_enabled"] else "0" for prio in range(PRIORITIES))
            argv = [*base, "--pfc", flags]
            if current.get("cable_len") is not None:
                argv += ["--cable_len", str(current["cable_len"])]
            steps.append({"field": "pfc", "argv": argv})
        return steps
    if "trust" in found and current.get("apptrust") is not None:
        rest = [selector for selector in current["apptrust"] if selector != "dscp"]
        steps.append({"field": "trust", "argv": [binary, "apptrust", "set", "dev", interface, "order", "dscp", *rest]})
    if mapping:
        # replace, not add: it also removes any other priority held by the same DSCP.
        pairs = ["%d:%d" % (dscp, mapping[dscp]) for dscp in sorted(mapping)]
        steps.append({"field": "dscp2prio", "argv": [binary, "app", "replace", "dev", interface, "dscp-prio", *pairs]})
    if "ets" in found:
        shares = ["%d:%d" % (tc, share) for tc, share in enumerate(desired["ets"])]
        argv = [binary, "ets", "set", "dev", interface, "tc-tsa", "all:ets", "tc-bw", *shares]
        steps.append({"field": "ets", "argv": argv})
    if "pfc" in found:
        pairs = ["%d:on" % prio for prio in desired["pfc_enabled"]]
        steps.append({"field": "pfc", "argv": [binary, "pfc", "set", "dev", interface, "prio-pfc", "all:off", *pairs]})
    return steps


def boot_plan(tool, binary, interface, current, desired):
    """Every write of the class, as on a port that has none of it (for a boot-time script); the PFC
    delay and the apptrust support come from `current`."""
    blank = dict(current, trust=None, pfc_enabled=[], dscp2prio={}, ets=None)
    return plan(tool, binary, interface, blank, desired)


def describe_differences(found):
    """One clause per field, naming it, for a failure message."""
    return "; ".join("%s: want %s, have %s" % (field, want, have) for field, (want, have) in sorted(found.items()))


def public_state(state):
    """The state as the module returns it: DSCP keys as strings (JSON objects have string keys)."""
    if state is None:
        return None
    shown = {key: value for key, value in state.items() if key != "lldpad_running"}
    shown["dscp2prio"] = {str(dscp): prio for dscp, prio in sorted(state["dscp2prio"].items())}
    return shown


# ---------------------------------------------------------------- the role's settings

# What the roce role's preflight checks before it reads or writes a port (the _role_problems
# filter). Numbers are checked the way they were given: an inventory's "3" and 3 are both a
# priority, 3.0 and True are not.
_PRIORITY = re.compile(r"^[0-7]\Z")
_DSCP = re.compile(r"^[0-9]{1,2}\Z")
_WHOLE = re.compile(r"^[0-9]+\Z")
RDMA_CM_MODES = ("RoCE v2", "IB/RoCE v1")


def _missing(names, present):
    """The names not in present, in the order given, each once."""
    found = []
    for name in names:
        if name not in present and name not in found:
            found.append(name)
    return found


def sorted_names(names):
    """Names sorted as Jinja's sort filter does by default: ignoring case."""
    return sorted((str(name) for name in names), key=str.lower)


def _ets_ok(ets):
    if ets is None:
        return True
    if not isinstance(ets, (list, tuple)) or len(ets) != PRIORITIES:
        return False
    if not all(_WHOLE.match(str(share)) for share in ets):
        return False
    return sum(int(str(share)) for share in ets) == 100


def settings_problems(settings):
    """One message per bad roce_* variable, each naming it, its value and what is allowed.

    settings: the role's variables, plus inventory_hostname and interfaces (the host's
    ansible_facts['interfaces'])."""
    problems = []
    host = settings["inventory_hostname"]
    interfaces = settings["roce_interfaces"]
    present = settings["interfaces"] or []
    if not isinstance(interfaces, (list, tuple)):
        problems.append("roce_interfaces=%s must be a list of the RoCE NICs of %s" % (interfaces, host))
    elif not interfaces:
        problems.append("roce_interfaces is empty: name the RoCE NICs of %s" % host)
    else:
        missing = _missing(interfaces, present)
        if missing:
            problems.append(
                "roce_interfaces=%s names %s, which %s does not have (it has %s)"
                % (interfaces, ", ".join(str(name) for name in missing), host, ", ".join(sorted_names(present)))
            )
    for name in ("roce_pfc_priority", "roce_cnp_priority"):
        if not _PRIORITY.match(str(settings[name])):
            problems.append("%s=%s must be a priority, 0..7" % (name, settings[name]))
    for name in ("roce_dscp", "roce_cnp_dscp"):
        text = str(settings[name])
        if not (_DSCP.match(text) and int(text) <= MAX_DSCP):
            problems.append("%s=%s must be a DSCP value, 0..63" % (name, settings[name]))
    if str(settings["roce_dscp"]) == str(settings["roce_cnp_dscp"]):
        problems.append(
            "roce_dscp=%s and roce_cnp_dscp=%s must differ: congestion notifications need their own DSCP"
            % (settings["roce_dscp"], settings["roce_cnp_dscp"])
        )
    if not _ets_ok(settings["roce_ets"]):
        problems.append(
            "roce_ets=%s must be null or 8 whole percentages, each 0..100, summing to 100 (one share per traffic class)"
            % (settings["roce_ets"],)
        )
    if settings["roce_rdma_cm_mode"] not in RDMA_CM_MODES:
        problems.append('roce_rdma_cm_mode=%s must be "RoCE v2" or "IB/RoCE v1"' % (settings["roce_rdma_cm_mode"],))
    return problems
