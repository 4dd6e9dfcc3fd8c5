#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a fabric link against its plan: networkd's state, MTU, bond mode, members, LACP aggregator,
jumbo ping."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: fabric_link_check
short_description: Check fabric links, their bond and the jumbo path, and list every mismatch
version_added: 0.1.0
description:
  - With O(network_files) set, first waits for systemd-networkd to apply the configuration. It reads
    C(networkctl list --json=short) until every link of O(network_files) is C(configured) from its
    file. A link that is unmanaged, or configured from another file, does not count. A C(failed) link
    fails at once, since networkd does not try it again by itself.
  - Then reads C(<sysfs_root>/class/net/...) and checks that every link of O(mtus) has its MTU and,
    with O(bond) set, that the bond has exactly O(members), runs O(mode), has every member in its one
    LACP aggregator (802.3ad only; members in different aggregators mean the switch ports are not one
    port-channel) and has every member up.
  - Links settle after an apply (networkd's own work, then LACP negotiation), so both are read again
    every O(poll_interval) seconds until they all hold, for at most O(timeout) seconds and, with
    O(deadline), ending early enough for the pings to finish before it.
  - Then, with O(peers) set, sends a don't-fragment ping whose packet fills O(mtu) to every peer, from
    O(source), up to O(ping_attempts) times. The ping part runs alone when O(mtus) is empty, which is
    how a fabric test reuses it.
  - Fails with one line naming the first failed check, and the structured RV(mismatches) list. It
    never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  mtus:
    description: The MTU of every fabric link to check, keyed by link name (members, bond, VLANs).
    type: dict
    default: {}
  bond:
    description: The bond among the links; empty for a single NIC.
    type: str
    default: ""
  members:
    description: The bond's members.
    type: list
    elements: str
    default: []
  mode:
    description: The bond mode in the kernel's (and netplan's) spelling, such as C(802.3ad); empty skips it.
    type: str
    default: ""
  timeout:
    description:
      - Seconds the links may take to hold (networkd's state, then sysfs); 0 reads once. A bound against
        a hang, not an estimate of how long networkd takes.
    type: int
    default: 30
  deadline:
    description:
      - The time, in seconds since the epoch on the host's clock, by which the whole check should be
        over, such as when an automatic revert fires. The wait for the links then ends early enough for
        every peer's first ping try (O(ping_count) - 1 + O(ping_wait) seconds each); it never runs past
        O(timeout) either. A deadline already too close gives one read.
    type: float
  network_files:
    description:
      - The C(.network) file systemd-networkd must configure each link from, keyed by link name (such as
        C(eth0) to C(/etc/systemd/network/60-gpufleet-eth0.network)). Empty skips networkd's state, as
        for links another manager configures.
    type: dict
    default: {}
  networkctl_path:
    description: Name or path of systemd's networkctl (systemd 249 or later, for C(--json)); used with O(network_files).
    type: str
    default: networkctl
  poll_interval:
    description: Seconds between two reads of the links (networkctl, sysfs).
    type: float
    default: 1.0
  peers:
    description: Addresses to ping at full MTU without fragmenting.
    type: list
    elements: str
    default: []
  source:
    description: The address (or interface) the pings leave from, passed to C(ping -I); empty lets the kernel choose.
    type: str
    default: ""
  mtu:
    description:
      - The path MTU the pings must fill; the payload is the MTU minus 28 bytes (IPv4 and ICMP headers), or
        48 for an IPv6 peer. Required with O(peers).
    type: int
  ping_count:
    description: Echo requests per try (C(ping -c)); one reply passes.
    type: int
    default: 3
  ping_wait:
    description: Seconds to wait for a reply (C(ping -W)).
    type: int
    default: 2
  ping_attempts:
    description: Tries per peer, 2 seconds apart.
    type: int
    default: 3
  ping_path:
    description: Name or path of iputils ping.
    type: str
    default: ping
  sysfs_root:
    description: The sysfs mount; another root is for tests.
    type: path
    default: /sys
notes:
  - The sysfs files are those of drivers/net/bonding/bond_sysfs.c and bond_sysfs_slave.c in the Linux
    kernel; the ping options are iputils ping(8)'s C(-M do -s -c -W -I).
  - The setup states are those of networkctl(1) (C(pending), C(initialized), C(configuring),
    C(configured), C(unmanaged), C(failed), C(linger)); systemd 249 names the JSON key C(SetupState),
    later versions C(AdministrativeState), and both are read.
  - C(networkctl reload) returns before networkd has applied the files (docs/fabric-network.md), which
    is why the state is waited for rather than given a fixed time.
"""

EXAMPLES = r"""
- name: Check the bond after an apply
  gpufleet.inference.fabric_link_check:
    mtus: {ens1f0np0: 9000, ens1f1np1: 9000, bond0: 9000}
    bond: bond0
    members: [ens1f0np0, ens1f1np1]
    mode: 802.3ad
    peers: [10.10.0.12, 10.10.0.13]
    source: 10.10.0.11
    mtu: 9000

- name: Wait for networkd to configure eth0 from its file, then check its MTU and ping
  gpufleet.inference.fabric_link_check:
    network_files: {eth0: /etc/systemd/network/60-gpufleet-eth0.network}
    mtus: {eth0: 9000}
    timeout: 180
    deadline: "{{ __armed.stat.mtime + 170 }}"
    peers: [10.10.0.12]
    source: 10.10.0.11
    mtu: 9000

- name: Ping one peer at full MTU only, and keep going when it fails
  gpufleet.inference.fabric_link_check:
    peers: [10.10.0.12]
    source: 10.10.0.11
    mtu: 9000
    ping_attempts: 1
  register: __jumbo
  failed_when: false
"""

RETURN = r"""
mismatches:
  description: Every check that did not hold, in check order.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check, in words.
      type: str
      sample: "a don't-fragment ping at full MTU reaches every fabric peer"
    link:
      description: The link or peer it is about.
      type: str
    expected:
      description: What the plan asks for.
      type: raw
    found:
      description: What the host has.
      type: raw
    msg:
      description: One line about it.
      type: str
pings:
  description: One entry per peer.
  returned: always
  type: list
  elements: dict
  sample: [{"peer": "10.10.0.12", "payload": 8972, "ok": true, "rc": 0, "attempts": 1, "output": []}]
links:
  description: What was read for each link (mtu, operstate) at the last read.
  returned: always
  type: dict
networkd:
  description:
    - networkd's view of each link of O(network_files) at the last read, C(null) for a link it did not
      list; empty without O(network_files) or when networkctl failed.
  returned: always
  type: dict
  sample: {"eth0": {"state": "configured", "network_file": "/etc/systemd/network/60-gpufleet-eth0.network"}}
waited:
  description: Seconds spent reading the links before the result (the pings not included).
  returned: always
  type: float
  sample: 2.1
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _fabric_link


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mtus=dict(type="dict", default={}),
            bond=dict(type="str", default=""),
            members=dict(type="list", elements="str", default=[]),
            mode=dict(type="str", default=""),
            timeout=dict(type="int", default=30),
            deadline=dict(type="float"),
            network_files=dict(type="dict", default={}),
            networkctl_path=dict(type="str", default="networkctl"),
            poll_interval=dict(type="float", default=1.0),
            peers=dict(type="list", elements="str", default=[]),
            source=dict(type="str", default=""),
            mtu=dict(type="int"),
            ping_count=dict(type="int", default=3),
            ping_wait=dict(type="int", default=2),
            ping_attempts=dict(type="int", default=3),
            ping_path=dict(type="str", default="ping"),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["peers"] and params["mtu"] is None:
        module.fail_json(msg="mtu is required with peers: the ping fills the path MTU")
    root = params["sysfs_root"]
    mtus = params["mtus"]
    network_files = params["network_files"]

    def run(argv):
        return module.run_command(argv, environ_update={"LANG": "C", "LC_ALL": "C"})

    networkctl = None
    if network_files:
        networkctl = module.get_bin_path(params["networkctl_path"])
        if not networkctl:
            module.fail_json(
                msg="networkctl not found as %r; install systemd's networkctl or set networkctl_path"
                % params["networkctl_path"]
            )

    reserve = _fabric_link.ping_reserve(params["peers"], params["ping_count"], params["ping_wait"])
    wait = _fabric_link.wait_seconds(params["timeout"], params["deadline"], time.time(), reserve)
    start = time.monotonic()
    state = _fabric_link.wait_for_links(
        lambda: _fabric_link.read_links(
            run, networkctl, root, network_files, mtus, params["bond"], params["members"], params["mode"]
        ),
        start + wait,
        time.monotonic,
        time.sleep,
        max(0.1, params["poll_interval"]),
    )
    mismatches = state["mismatches"]

    links = dict(
        (link, dict((name, _fabric_link.read_attribute(root, link, name)) for name in ("mtu", "operstate")))
        for link in sorted(set(mtus) | set(params["members"]))
    )
    result = dict(changed=False, mismatches=mismatches, pings=[], links=links)
    result.update(networkd=state["networkd"], waited=round(time.monotonic() - start, 1))
    # A link that does not hold its plan makes the ping's failure a consequence, not news.
    if params["peers"] and not mismatches:
        ping = module.get_bin_path(params["ping_path"])
        if not ping:
            module.fail_json(msg="ping not found as %r; install iputils-ping or set ping_path" % params["ping_path"])
        result["pings"], mismatches = _fabric_link.ping_peers(
            run,
            ping,
            params["source"],
            params["peers"],
            params["mtu"],
            count=params["ping_count"],
            wait=params["ping_wait"],
            attempts=params["ping_attempts"],
            sleep=time.sleep,
        )
        result["mismatches"] = mismatches

    if mismatches:
        first = mismatches[0]["check"]
        msg = "%s: %s" % (first, "; ".join(item["msg"] for item in mismatches if item["check"] == first))
        # A networkctl that kept failing is a command failure: its rc, stdout and stderr go along.
        command = state["command"]
        extra = dict((key, command[key]) for key in ("rc", "stdout", "stderr")) if command else {}
        module.fail_json(msg=msg, **dict(result, **extra))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
