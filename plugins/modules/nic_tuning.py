#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set a NIC's ring buffer sizes and channel counts with ethtool, where the driver offers them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nic_tuning
short_description: Set NIC ring buffer sizes and channel counts with ethtool where the NIC supports it
version_added: 0.1.0
description:
  - Reads the ring parameters (C(ethtool -g)) and the channel parameters (C(ethtool -l)) of O(interface)
    and sets the requested ones with C(ethtool -G) and C(ethtool -L), only where the current value differs.
  - A driver that does not implement a query (ethtool exits non-zero with C(Operation not supported), as
    veth does for rings) makes that part unsupported; it is reported in RV(rings) or RV(channels) and
    RV(unsupported), and nothing is attempted for it. The other part is still handled.
  - A requested parameter whose hardware maximum is 0 or C(n/a) is not offered by the driver; it is listed
    in RV(unsupported) and skipped. The task does not fail for it.
  - A value above the hardware maximum fails the task before anything is written. Use C(max) to ask for
    the maximum the NIC reports.
  - After a write it reads the parameters again and fails, naming the field, when a value did not take.
    Drivers may round ring sizes (mlx5 to a power of two, ice to a multiple of 32); ask for a value the
    driver keeps as is, or for C(max).
  - Changing rings or channels makes most drivers (mlx5, ice, i40e) tear down and rebuild their queues,
    which drops traffic and can take the link down for a moment. RV(link_reset) says when that happened.
    Run it before the host takes traffic, or one host at a time.
  - Settings made with ethtool do not survive a reboot or a driver reload.
author:
  - gpufleet.inference developers (@gpufleet)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
options:
  interface:
    description: Network interface to tune, for example C(ens1f0np0).
    type: str
    required: true
  ethtool_path:
    description: Name or path of the ethtool binary.
    type: str
    default: ethtool
  rings:
    description:
      - Ring buffer sizes in descriptors, keyed by C(rx), C(tx), C(rx-jumbo) and C(rx-mini) (the names
        C(ethtool -G) takes). Each value is an integer of at least 1 or the string C(max), the hardware
        maximum.
      - Keys left out are not changed.
    type: dict
  channels:
    description:
      - Channel (queue) counts, keyed by C(rx), C(tx), C(other) and C(combined) (the names C(ethtool -L)
        takes). Each value is an integer of at least 0 or the string C(max).
      - Most high-speed NICs (mlx5, ice, i40e) use C(combined) channels.
      - Keys left out are not changed.
    type: dict
notes:
  - Needs root (CAP_NET_ADMIN) to change anything; reading works without it.
  - In check mode it reads and plans only; RV(commands) lists what it would run.
  - The options map to C(ethtool -G|--set-ring DEV [rx N] [rx-mini N] [rx-jumbo N] [tx N]) and
    C(ethtool -L|--set-channels DEV [rx N] [tx N] [other N] [combined N]), see ethtool(8).
"""

EXAMPLES = r"""
- name: Raise the fabric NIC's rings to the hardware maximum
  gpufleet.inference.nic_tuning:
    interface: ens1f0np0
    rings:
      rx: max
      tx: max

- name: Use one combined channel per core of the local NUMA node
  gpufleet.inference.nic_tuning:
    interface: ens1f0np0
    channels:
      combined: 16
  register: __nic_tuning

- name: Show what a NIC would change, without touching it
  gpufleet.inference.nic_tuning:
    interface: "{{ item }}"
    rings:
      rx: 4096
    channels:
      combined: max
  check_mode: true
  loop: "{{ fabric_interfaces }}"
"""

RETURN = r"""
interface:
  description: O(interface).
  returned: always
  type: str
rings:
  description: Ring parameters of the NIC.
  returned: always
  type: dict
  contains:
    supported:
      description: Whether the driver answered C(ethtool -g).
      type: bool
    reason:
      description: ethtool's message when RV(rings.supported) is false, else null.
      type: str
      sample: "netlink error: Operation not supported"
    max:
      description:
        - Hardware maximums by key (C(rx), C(rx-mini), C(rx-jumbo), C(tx)); null for C(n/a).
        - Null when RV(rings.supported) is false.
      type: dict
      sample: {"rx": 8160, "rx-mini": null, "rx-jumbo": null, "tx": 8160}
    current:
      description: Current values by key, read again after a write. Null when unsupported.
      type: dict
      sample: {"rx": 4096, "rx-mini": null, "rx-jumbo": null, "tx": 4096}
    requested:
      description: The requested values the NIC offers, with C(max) resolved to a number.
      type: dict
      sample: {"rx": 8160}
channels:
  description:
    - Channel parameters of the NIC, as RV(rings) but keyed by C(rx), C(tx), C(other) and C(combined).
  returned: always
  type: dict
  sample:
    supported: true
    reason: null
    max: {"rx": 16, "tx": 16, "other": 1, "combined": 16}
    current: {"rx": 0, "tx": 0, "other": 1, "combined": 4}
    requested: {"combined": 16}
commands:
  description: The C(ethtool -G) / C(ethtool -L) argv lists that ran, or in check mode would run.
  returned: always
  type: list
  elements: list
  sample: [["/usr/sbin/ethtool", "-G", "ice0", "rx", "8160", "tx", "8160"]]
unsupported:
  description: Requested parameters the NIC does not offer, as C(<kind>.<key>) or C(<kind>) and the reason; skipped.
  returned: always
  type: list
  elements: str
  sample: ["rings.rx-jumbo: not supported by the NIC (maximum is n/a)"]
link_reset:
  description:
    - Whether rings or channels were written (in check mode, would be). Most drivers rebuild their queues
      then, which drops traffic and may take the link down briefly.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._ethtool import (
    KINDS,
    EthtoolParseError,
    mismatches,
    normalize_request,
    parse,
    plan,
    read_argv,
    unsupported_reason,
    write_argv,
)

# ethtool's messages are strerror() text; keep them in English for unsupported_reason().
C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}


def run(module, argv):
    return module.run_command(argv, environ_update=C_LOCALE)


def fail_command(module, argv, rc, stdout, stderr, hint=""):
    message = (stderr or stdout).strip() or "no output"
    module.fail_json(
        msg="%s failed (rc=%d): %s%s" % (" ".join(argv), rc, message, hint),
        cmd=argv,
        rc=rc,
        stdout=stdout,
        stderr=stderr,
    )


def read(module, ethtool, kind, interface):
    """(model, reason): the parsed model, or (None, reason) when the driver does not support the query."""
    argv = read_argv(ethtool, kind, interface)
    rc, stdout, stderr = run(module, argv)
    reason = unsupported_reason(rc, stdout, stderr)
    if reason:
        return None, reason
    if rc != 0:
        fail_command(module, argv, rc, stdout, stderr, "; check that interface %r exists" % interface)
    try:
        return parse(kind, stdout), None
    except EthtoolParseError as exc:
        module.fail_json(
            msg="could not read the output of %s: %s" % (" ".join(argv), exc), cmd=argv, rc=rc, stdout=stdout
        )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type="str", required=True),
            ethtool_path=dict(type="str", default="ethtool"),
            rings=dict(type="dict"),
            channels=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    interface = params["interface"]

    requests = {}
    problems = []
    for kind in KINDS:
        requests[kind], bad = normalize_request(kind, params[kind])
        problems += bad
    if problems:
        module.fail_json(msg="; ".join(problems))

    ethtool = module.get_bin_path(params["ethtool_path"])
    if not ethtool:
        module.fail_json(msg="ethtool not found as %r; install ethtool or set ethtool_path" % params["ethtool_path"])

    result = dict(changed=False, interface=interface, commands=[], unsupported=[], link_reset=False)
    plans = {}
    for kind in KINDS:
        model, reason = read(module, ethtool, kind, interface)
        part = dict(supported=model is not None, reason=reason, max=None, current=None, requested={})
        if model is None:
            if requests[kind]:
                result["unsupported"].append("%s: not supported by the NIC (%s)" % (kind, reason))
        else:
            plans[kind] = plan(kind, model, requests[kind])
            part.update(max=model["max"], current=model["current"], requested=plans[kind]["requested"])
            result["unsupported"] += plans[kind]["unsupported"]
            problems += plans[kind]["problems"]
        result[kind] = part
    if problems:
        module.fail_json(msg="%s: %s" % (interface, "; ".join(problems)), **result)

    for kind, planned in plans.items():
        argv = write_argv(ethtool, kind, interface, planned["changes"])
        if not argv:
            continue
        result["commands"].append(argv)
        result.update(changed=True, link_reset=True)
        if module.check_mode:
            continue
        rc, stdout, stderr = run(module, argv)
        if rc != 0:
            fail_command(module, argv, rc, stdout, stderr)
        model, reason = read(module, ethtool, kind, interface)
        if model is None:
            module.fail_json(msg="%s: re-reading %s after %s failed: %s" % (interface, kind, " ".join(argv), reason))
        result[kind]["current"] = model["current"]
        wrong = mismatches(kind, model, planned["requested"])
        if wrong:
            module.fail_json(
                msg="%s: %s did not take: %s. The driver may round or clamp the value; ask for one it keeps, "
                "or for 'max'" % (interface, " ".join(argv), "; ".join(wrong)),
                **result,
            )

    module.exit_json(**result)


if __name__ == "__main__":
    main()
