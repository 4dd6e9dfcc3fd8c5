# Lab stand-in for mlnx_qos (Mellanox/mlnx-tools python/mlnx_qos): the lab has no RDMA NIC.
# It keeps a port's QoS state in a JSON file, applies the set options the roce role uses (--trust,
# --dscp2prio set,D,P, --pfc, --cable_len, --tsa, --tcbw), logs each write, and prints the state
# report after every call as the real tool does, in the layout of its pretty_print() (the layout of
# tests/unit/plugins/module_utils/fixtures/mlnx_qos/eth4-os-dscp-pfc3.txt). An option it does not
# know fails, so a wrong write command fails the role instead of passing.
#
# The port starts as a host before its RoCE configuration: PCP trust, no PFC, and a DSCP map with
# DSCP 26 on priority 0 (hidden under PCP trust), so the role must write trust, the map and PFC.
import json
import os
import sys

PRIORITIES = 8
STATE_DIR = "/var/lib/gpufleet-lab"
LOG = "/var/log/gpufleet-lab-mlnx_qos.log"
# The traffic classes of the captured report: TC 0 holds priority 1, TC 1 priority 0.
PRIO_TC = [1, 0, 2, 3, 4, 5, 6, 7]


def initial():
    dscp2prio = dict((str(dscp), dscp >> 3) for dscp in range(64))
    dscp2prio["26"] = 0
    return {
        "trust": "pcp",
        "pfc": [0] * PRIORITIES,
        "cable_len": 7,
        "dscp2prio": dscp2prio,
        "tsa": ["vendor"] * PRIORITIES,
        "bw": [0] * PRIORITIES,
    }


def fail(message):
    sys.stderr.write(f"mlnx_qos stand-in: {message}\n")
    sys.exit(1)


def eight(text, what, allowed=None):
    values = text.split(",")
    if len(values) != PRIORITIES or (allowed and set(values) - set(allowed)):
        fail(f"{what} needs 8 comma-separated values, got {text!r}")
    return values


def report(state):
    lines = ["DCBX mode: OS controlled", f"Priority trust state: {state['trust']}"]
    if state["trust"] == "dscp":
        lines.append("dscp2prio mapping:")
        for prio in range(PRIORITIES):
            dscps = sorted((int(d) for d, p in state["dscp2prio"].items() if p == prio), reverse=True)
            for start in range(0, len(dscps), 8):
                listed = "".join(f"{d:02d}," for d in dscps[start : start + 8])
                lines.append(f"        prio:{prio} dscp:{listed}")
    lines.append(f"Cable len: {state['cable_len']}")
    lines.append("PFC configuration:")
    lines.append("        priority    0   1   2   3   4   5   6   7")
    lines.append("        enabled     " + "".join(f"{flag}   " for flag in state["pfc"]))
    for tc in range(PRIORITIES):
        bw = f", bw: {state['bw'][tc]}%" if state["tsa"][tc] == "ets" else ""
        lines.append(f"tc: {tc} ratelimit: unlimited, tsa: {state['tsa'][tc]}{bw}")
        lines.extend(f"         priority:  {prio}" for prio in range(PRIORITIES) if PRIO_TC[prio] == tc)
    return "\n".join(lines) + "\n"


def parse_args(args):
    """(interface, [(flag, value)] of the set options)."""
    interface = None
    writes = []
    index = 0
    while index < len(args):
        flag = args[index]
        if flag == "-a":
            index += 1
            continue
        if index + 1 >= len(args):
            fail(f"{flag} needs a value")
        value = args[index + 1]
        index += 2
        if flag == "-i":
            interface = value
        elif flag in ("--trust", "--pfc", "--cable_len", "--dscp2prio", "--tsa", "--tcbw"):
            writes.append((flag, value))
        else:
            fail(f"unknown option {flag}")
    if not interface:
        fail("-i INTERFACE is required")
    if not os.path.exists(os.path.join("/sys/class/net", interface)):
        fail(f"no such interface {interface}")
    return interface, writes


def set_dscp2prio(state, value):
    parts = value.split(",")
    if len(parts) != 3 or parts[0] != "set" or not 0 <= int(parts[1]) <= 63 or not 0 <= int(parts[2]) <= 7:
        fail(f"--dscp2prio takes set,DSCP,PRIO, got {value!r}")
    state["dscp2prio"][str(int(parts[1]))] = int(parts[2])


def apply(state, flag, value):
    if flag == "--trust":
        if value not in ("pcp", "dscp"):
            fail(f"--trust takes pcp or dscp, got {value!r}")
        state["trust"] = value
    elif flag == "--pfc":
        state["pfc"] = [int(bit) for bit in eight(value, "--pfc", ("0", "1"))]
    elif flag == "--cable_len":
        state["cable_len"] = int(value)
    elif flag == "--dscp2prio":
        set_dscp2prio(state, value)
    elif flag == "--tsa":
        state["tsa"] = eight(value, "--tsa", ("ets", "strict", "vendor"))
    elif flag == "--tcbw":
        state["bw"] = [int(share) for share in eight(value, "--tcbw")]


def main(args):
    interface, writes = parse_args(args)
    name = os.path.basename(sys.argv[0])
    path = os.path.join(STATE_DIR, f"{name}-{interface}.json")
    state = initial()
    if os.path.exists(path):
        with open(path) as handle:
            state = json.load(handle)
    for flag, value in writes:
        apply(state, flag, value)
    if writes:
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(path, "w") as handle:
            json.dump(state, handle)
        with open(LOG, "a") as handle:
            handle.write(f"{name} {' '.join(args)}\n")
    sys.stdout.write(report(state))


if __name__ == "__main__":
    main(sys.argv[1:])
