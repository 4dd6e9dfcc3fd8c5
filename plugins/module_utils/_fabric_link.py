# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric link checks, read-only: MTU of every link, the bond's mode and members, one LACP
aggregator for every member, members up (all from sysfs, under a sysfs_root), and the
don't-fragment ping at full MTU. Pure logic: sysfs is read under a root directory the tests build
in tmp_path, and the ping runs through a callable (module.run_command in the module).

The sysfs formats are the kernel's: drivers/net/bonding/bond_sysfs.c prints bonding/mode as
"<name> <number>" ("802.3ad 4"), bonding/slaves as the member names separated by spaces and
bonding/ad_aggregator as a number in 802.3ad mode; drivers/net/bonding/bond_sysfs_slave.c prints
bonding_slave/ad_aggregator_id as a number, or "N/A" outside 802.3ad or before the member has an
aggregator."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# The check names, as the fabric_network role reports the first one that failed.
MTU = "every fabric link has its MTU"
MEMBERS = "the bond has all its members up"
MODE = "the bond runs its mode with every member in one LACP aggregator"
AGGREGATOR = "the switch put every bond member into the same aggregator"
UP = "every bond member is up"
PING = "a don't-fragment ping at full MTU reaches every fabric peer"

LACP = "802.3ad"


def read_attribute(sysfs_root, link, attribute):
    """The stripped content of <sysfs_root>/class/net/<link>/<attribute>, or None when it is absent."""
    try:
        with open(os.path.join(sysfs_root, "class", "net", link, attribute)) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _mismatch(check, link, expected, found, msg):
    return dict(check=check, link=link, expected=expected, found=found, msg=msg)


def link_mismatches(sysfs_root, mtus, bond="", members=(), mode=""):
    """Mismatches between sysfs and the plan, in the order of the checks; [] when all hold.

    mtus maps each fabric link to its MTU; bond, members and mode (netplan spelling) describe the
    bond when there is one."""
    found = []
    for link in sorted(mtus):
        mtu = read_attribute(sysfs_root, link, "mtu")
        if mtu != str(mtus[link]):
            found.append(_mismatch(MTU, link, mtus[link], mtu, "%s has MTU %s, not %s" % (link, mtu, mtus[link])))
    if not bond:
        return found

    slaves = read_attribute(sysfs_root, bond, "bonding/slaves")
    have = sorted((slaves or "").split())
    if have != sorted(members):
        found.append(
            _mismatch(MEMBERS, bond, sorted(members), have, "%s has members %s, not %s" % (bond, have, sorted(members)))
        )

    running = read_attribute(sysfs_root, bond, "bonding/mode")
    running_name = (running or "").split(" ")[0] or None
    if mode and running_name != mode:
        found.append(_mismatch(MODE, bond, mode, running_name, "%s runs mode %s, not %s" % (bond, running_name, mode)))
    elif mode == LACP:
        aggregator = read_attribute(sysfs_root, bond, "bonding/ad_aggregator")
        ids = dict((member, read_attribute(sysfs_root, member, "bonding_slave/ad_aggregator_id")) for member in members)
        if set(ids.values()) != set([aggregator]) or aggregator in (None, "", "0"):
            # Members in different aggregators mean the switch ports are not one port-channel:
            # traffic would run on one link only.
            found.append(
                _mismatch(
                    AGGREGATOR,
                    bond,
                    aggregator,
                    ids,
                    "%s has aggregator %s but its members are in %s: the switch ports are not one LACP port-channel"
                    % (bond, aggregator, ", ".join("%s=%s" % item for item in sorted(ids.items()))),
                )
            )

    for member in members:
        state = read_attribute(sysfs_root, member, "operstate")
        if state != "up":
            found.append(_mismatch(UP, member, "up", state, "%s is %s, not up" % (member, state)))
    return found


def ping_payload(mtu, peer):
    """The ICMP payload that fills an MTU: minus the IPv4 (20) or IPv6 (40) header and ICMP's 8 bytes."""
    return int(mtu) - (48 if ":" in peer else 28)


def ping_argv(ping, source, peer, mtu, count=3, wait=2):
    """A don't-fragment ping at full MTU from source (an address or an interface) to peer (iputils ping(8))."""
    argv = [ping, "-M", "do", "-s", str(ping_payload(mtu, peer)), "-c", str(count), "-W", str(wait)]
    if source:
        argv += ["-I", source]
    return [*argv, peer]


def ping_peers(run, ping, source, peers, mtu, count=3, wait=2, attempts=3, sleep=None, delay=2):
    """(pings, mismatches): one result per peer and one mismatch per peer that never answered.

    run(argv) returns (rc, stdout, stderr), as AnsibleModule.run_command does; a peer gets up to
    `attempts` tries, `delay` seconds apart (sleep is time.sleep, a stub in tests)."""
    pings = []
    found = []
    for peer in peers:
        argv = ping_argv(ping, source, peer, mtu, count, wait)
        for attempt in range(1, max(1, attempts) + 1):
            rc, stdout, stderr = run(argv)
            if rc == 0 or attempt >= attempts:
                break
            if sleep:
                sleep(delay)
        tail = (stdout or stderr or "").strip().splitlines()[-2:]
        pings.append(dict(peer=peer, payload=ping_payload(mtu, peer), ok=rc == 0, rc=rc, attempts=attempt, output=tail))
        if rc != 0:
            found.append(
                _mismatch(
                    PING,
                    peer,
                    "a reply to a %d-byte don't-fragment ping" % ping_payload(mtu, peer),
                    " ".join(tail) or "rc=%d" % rc,
                    "%s: no reply to a %d-byte don't-fragment ping from %s (MTU %s) after %d tries"
                    % (peer, ping_payload(mtu, peer), source or "the default route", mtu, attempt),
                )
            )
    return pings, found
