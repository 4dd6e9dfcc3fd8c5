#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lossless RoCE v2 class on one NIC (DSCP trust, PFC, DSCP map, ETS), read first, written only where it differs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: roce_qos
short_description: Configure the lossless RoCE v2 traffic class of one NIC with mlnx_qos or iproute2 dcb
version_added: 0.1.0
description:
  - Makes one port classify by DSCP (trust C(dscp)), enables PFC on exactly one priority, maps the
    RoCE DSCP to that priority and the CNP DSCP to the CNP priority, and optionally sets the ETS
    bandwidth shares of the eight traffic classes.
  - Reads the state first with C(mlnx_qos -i IF -a) or C(dcb -j pfc|app|ets|apptrust show dev IF),
    and runs only the commands that change something. Changing the PFC enable mask toggles the port
    link on mlx5, so PFC is written only when it differs, as the last command, and the result says
    RV(link_flap).
  - It writes one field at a time and reads the state again after each write. After C(--trust dscp)
    the firmware's default DSCP map (DSCP d to priority d >> 3, so 26 to 3 and 48 to 6) often
    needs no further write. A field still wrong after its own write fails the task, naming it
    (C(dcb app replace), for one, exits 0 even when the driver refused the change).
  - In check mode the DSCP map of a port that trusts PCP is unknown to C(mlnx_qos), so its command
    is listed although a real run may skip it.
  - With C(dcb) and a driver without the apptrust operations (mlx5), trust is what C(mlnx_qos)
    reports there too, C(dscp) exactly when the APP table holds a DSCP entry; mlx5 switches to DSCP
    trust when the first DSCP entry is added, so the DSCP map command also sets trust.
author:
  - gpufleet.inference developers (@gpufleet)
attributes:
  check_mode:
    description: Reads the state and returns the commands it would run, in RV(commands); runs no write.
    support: full
  diff_mode:
    description: Not supported; RV(before) and RV(after) show the change.
    support: none
options:
  interface:
    description: Network device of the RoCE port, such as C(ens1f0np0) (not the RDMA device C(mlx5_0)).
    type: str
    required: true
  tool:
    description:
      - C(mlnx_qos) (mlnx-tools, shipped with MLNX_OFED and DOCA-OFED) or C(dcb) (iproute2 5.12 or later).
      - C(auto) uses C(mlnx_qos) when O(mlnx_qos_path) is found, else C(dcb).
    type: str
    choices: [auto, mlnx_qos, dcb]
    default: auto
  mlnx_qos_path:
    description: Name or path of the mlnx_qos binary.
    type: str
    default: mlnx_qos
  dcb_path:
    description: Name or path of the iproute2 dcb binary.
    type: str
    default: dcb
  trust:
    description: What classifies received packets. Only C(dscp) is offered, as RoCE v2 is routed and untagged.
    type: str
    choices: [dscp]
    default: dscp
  pfc_priority:
    description: The lossless priority; PFC is enabled on it and disabled on every other priority.
    type: int
    default: 3
  dscp:
    description: DSCP of the RoCE traffic, mapped to O(pfc_priority). 26 (AF31) is what C(NCCL_IB_TC=106) sends.
    type: int
    default: 26
  cnp_dscp:
    description:
      - DSCP of the congestion notification packets (CNP), mapped to O(cnp_priority).
      - 48 with priority 6 are the ConnectX firmware defaults (C(CNP_DSCP_P1), C(CNP_802P_PRIO_P1)).
      - C(null) leaves the CNP mapping alone.
    type: int
    default: 48
  cnp_priority:
    description: Priority the CNP DSCP is mapped to.
    type: int
    default: 6
  ets:
    description:
      - Bandwidth percentages of traffic classes 0 to 7, summing to 100. Every class is set to ETS
        with its share; a class given 0 gets only what the others leave.
      - Give the classes that carry RoCE and CNP a share. Omitted, ETS is left as it is.
    type: list
    elements: int
notes:
  - Needs root to write; reads work unprivileged.
  - It changes the running state only. Persist it by running the module at boot or from the role that owns the port.
  - When DCBX is firmware-controlled, a switch speaking DCBX may override these settings; the module warns.
seealso:
  - name: mlnx-tools (python/mlnx_qos)
    description: Option syntax; --trust and --dscp2prio cannot share one call.
    link: https://github.com/Mellanox/mlnx-tools
  - name: dcb-app(8)
    description: The APP table and C(dcb app replace).
    link: https://man7.org/linux/man-pages/man8/dcb-app.8.html
"""

EXAMPLES = r"""
- name: Make priority 3 lossless for RoCE on the fabric port
  gpufleet.inference.roce_qos:
    interface: ens1f0np0
  register: __roce_qos

- name: Use iproute2 dcb and give RoCE half the bandwidth
  gpufleet.inference.roce_qos:
    interface: ens1f0np0
    tool: dcb
    ets: [50, 0, 0, 40, 0, 0, 10, 0]

- name: Show what would change, without touching the link
  gpufleet.inference.roce_qos:
    interface: ens1f0np0
  check_mode: true
  register: __roce_qos_plan
"""

RETURN = r"""
tool:
  description: The tool that read and wrote the state.
  returned: success
  type: str
  sample: mlnx_qos
before:
  description:
    - State before any write. C(trust), C(pfc_enabled) (priorities with PFC on), C(dscp2prio) (DSCP,
      as a string, to priority; a list where the APP table holds several), C(ets) (C(tsa), C(bw),
      C(prio_tc) per traffic class, or null), C(cable_len) (the PFC delay), C(dcbx) (C(os),
      C(firmware), or null with dcb) and, with dcb, C(apptrust) (null where unsupported).
  returned: always
  type: dict
  sample: {"trust": "pcp", "pfc_enabled": [], "dscp2prio": {}, "ets": null, "cable_len": 7, "dcbx": "os"}
after:
  description:
    - State read after the last write, as RV(before); equal to it when nothing was due.
    - Null in check mode when a change is due.
  returned: success, and failure after a write that did not take effect
  type: dict
commands:
  description: The write commands, as argv lists, that ran (or would run in check mode), in order.
  returned: always
  type: list
  elements: list
  sample:
    - ["mlnx_qos", "-i", "ens1f0np0", "--trust", "dscp"]
    - ["mlnx_qos", "-i", "ens1f0np0", "--pfc", "0,0,0,1,0,0,0,0", "--cable_len", "7"]
boot_commands:
  description:
    - Every write of the class, as argv lists, as it would run on a port that has none of it set,
      for a script that sets the class again at boot (the running state does not survive a reboot
      or a driver reload). Uses the PFC delay read now.
  returned: success
  type: list
  elements: list
link_flap:
  description: Whether the PFC enable mask is written, which toggles the port link on mlx5.
  returned: always
  type: bool
mismatches:
  description: Fields that still differ when a write did not take effect.
  returned: failure after a write that did not take effect
  type: list
  elements: str
  sample: ["pfc"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._roce import (
    RoceError,
    boot_plan,
    describe_differences,
    desired_state,
    differences,
    plan,
    public_state,
    read_state,
    validate,
)


def choose_tool(module):
    """(tool, binary) after the tool option and the binaries found; fails naming what to install."""
    params = module.params
    if params["tool"] in ("auto", "mlnx_qos"):
        binary = module.get_bin_path(params["mlnx_qos_path"])
        if binary:
            return "mlnx_qos", binary
        if params["tool"] == "mlnx_qos":
            module.fail_json(
                msg="mlnx_qos not found as %r; install mlnx-tools (MLNX_OFED or DOCA-OFED), set mlnx_qos_path, "
                "or use tool=dcb" % params["mlnx_qos_path"]
            )
    binary = module.get_bin_path(params["dcb_path"])
    if binary:
        return "dcb", binary
    if params["tool"] == "dcb":
        module.fail_json(
            msg="dcb not found as %r; install iproute2 5.12 or later, or set dcb_path" % params["dcb_path"]
        )
    module.fail_json(
        msg="neither mlnx_qos (%r) nor dcb (%r) was found; install iproute2 5.12 or later, or mlnx-tools, "
        "or set mlnx_qos_path / dcb_path" % (params["mlnx_qos_path"], params["dcb_path"])
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type="str", required=True),
            tool=dict(type="str", default="auto", choices=["auto", "mlnx_qos", "dcb"]),
            mlnx_qos_path=dict(type="str", default="mlnx_qos"),
            dcb_path=dict(type="str", default="dcb"),
            trust=dict(type="str", default="dscp", choices=["dscp"]),
            pfc_priority=dict(type="int", default=3),
            dscp=dict(type="int", default=26),
            cnp_dscp=dict(type="int", default=48),
            cnp_priority=dict(type="int", default=6),
            ets=dict(type="list", elements="int"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = validate(params)
    if problems:
        module.fail_json(msg="; ".join(problems))

    tool, binary = choose_tool(module)
    interface = params["interface"]
    desired = desired_state(
        params["pfc_priority"], params["dscp"], params["cnp_dscp"], params["cnp_priority"], params["ets"]
    )
    result = dict(changed=False, tool=tool, before=None, commands=[], boot_commands=[], link_flap=False)

    def read(when):
        try:
            return read_state(tool, binary, interface, module.run_command, need_ets=params["ets"] is not None)
        except RoceError as exc:
            result.update(exc.details)
            module.fail_json(msg="roce_qos on %s could not read the state %s: %s" % (interface, when, exc), **result)

    before = read("before writing")
    result["before"] = public_state(before)
    result["boot_commands"] = [step["argv"] for step in boot_plan(tool, binary, interface, before, desired)]
    steps = plan(tool, binary, interface, before, desired)
    if before.get("lldpad_running"):
        module.warn("lldpad is running on this host and may overwrite these settings")
    if steps and before.get("dcbx") == "firmware":
        module.warn(
            "DCBX on %s is firmware controlled: a switch speaking DCBX may override these settings "
            "(mlnx_qos -i %s -d os hands them to the host)" % (interface, interface)
        )
    if not steps or module.check_mode:
        result.update(
            changed=bool(steps),
            commands=[step["argv"] for step in steps],
            link_flap=any(step["field"] == "pfc" for step in steps),
        )
        module.exit_json(after=None if steps else result["before"], **result)

    # One write at a time, each followed by a read: after --trust dscp the firmware's default DSCP
    # map may already be right, and a field that is still wrong after its own write is a failure.
    current, written = before, []
    while steps:
        step = steps[0]
        if step["field"] in written:
            left = differences(current, desired)
            module.fail_json(
                msg="roce_qos on %s: the %s command ran but the state still differs: %s. The driver or "
                "firmware refused or reverted it (DCBX from the switch, lldpad, or a driver without DCB support)"
                % (interface, step["field"], describe_differences(left)),
                mismatches=sorted(left),
                after=public_state(current),
                **result,
            )
        rc, out, err = module.run_command(step["argv"])
        written.append(step["field"])
        result.update(
            changed=True,
            commands=result["commands"] + [step["argv"]],
            link_flap=result["link_flap"] or step["field"] == "pfc",
        )
        if rc != 0:
            module.fail_json(
                msg="roce_qos on %s: the %s command failed (rc %d): %s"
                % (interface, step["field"], rc, " ".join((err or out or "no output").split())),
                rc=rc,
                stdout=out,
                stderr=err,
                cmd=step["argv"],
                **result,
            )
        current = read("after the %s command" % step["field"])
        steps = plan(tool, binary, interface, current, desired)
    module.exit_json(after=public_state(current), **result)


if __name__ == "__main__":
    main()
