# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric link checks, read-only: systemd-networkd's view of every link (configured, from the
file the role wrote), MTU of every link, the bond's mode and members, one LACP aggregator for every
member, members up (all from sysfs, under a sysfs_root), and the don't-fragment ping at full MTU.
Pure logic: sysfs is read under a root directory the tests build in tmp_path, networkctl and the
ping run through a callable (module.run_command in the module), and the wait takes its clock and
sleep as arguments.

The sysfs formats are the kernel's: drivers/net/bonding/bond_sysfs.c prints bonding/mode as
"<name> <number>" ("802.3ad 4"), bonding/slaves as the member names separated by spaces and
bonding/ad_aggregator as a number in 802.3ad mode; drivers/net/bonding/bond_sysfs_slave.c prints
bonding_slave/ad_aggregator_id as a number, or "N/A" outside 802.3ad or before the member has an
aggregator.

networkd's view is `networkctl list --json=short` (networkctl(1); the JSON is networkd's
Describe() D-Bus method, systemd 249 and later): {"Interfaces": [{"Name", "AdministrativeState",
"NetworkFile", ...}]}. AdministrativeState is the setup state networkctl(1) lists (pending,
initialized, configuring, configured, unmanaged, failed, linger); systemd 249 called the key
SetupState (src/network/networkd-json.c). NetworkFile is absent while no .network file matches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

# The check names, as the fabric_network role reports the first one that failed.
NETWORKD = "systemd-networkd configured every fabric link from its file"
MTU = "every fabric link has its MTU"
MEMBERS = "the bond has all its members up"
MODE = "the bond runs its mode with every member in one LACP aggregator"
AGGREGATOR = "the switch put every bond member into the same aggregator"
UP = "every bond member is up"
PING = "a don't-fragment ping at full MTU reaches every fabric peer"

LACP = "802.3ad"

# networkd's setup states that end a wait: the link holds its file, or networkd gave up on it.
CONFIGURED = "configured"
FAILED = "failed"


def read_attribute(sysfs_root, link, attribute):
    """The stripped content of <sysfs_root>/class/net/<link>/<attribute>, or None when it is absent."""
    try:
        with open(os.path.join(sysfs_root, "class", "net", link, attribute)) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def _mismatch(check, link, expected, found, msg):
    return dict(check=check, link=link, expected=expected, found=found, msg=msg)


def link_mismatches(sysfs_root, mtus, bond="", members=(), mode="", states=None):
    """Mismatches between sysfs and the plan, in the order of the checks; [] when all hold.

    mtus maps each fabric link to its MTU; bond, members and mode (netplan spelling) describe the
    bond when there is one. states (link -> networkd's setup state) words an MTU mismatch as what
    it is after networkd reported the link configured."""
    found = []
    for link in sorted(mtus):
        mtu = read_attribute(sysfs_root, link, "mtu")
        if mtu != str(mtus[link]):
            if states and link in states:
                msg = "%s: %s but MTU %s, not %s" % (link, states[link], mtu, mtus[link])
            else:
                msg = "%s has MTU %s, not %s" % (link, mtu, mtus[link])
            found.append(_mismatch(MTU, link, mtus[link], mtu, msg))
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


def parse_networkctl_list(text):
    """{link: {"state": ..., "network_file": ...}} from `networkctl list --json=short`.

    A name listed twice (a link lingering while a new one takes its name) keeps the entry that is
    not lingering. Raises ValueError when the text is not networkd's list of links."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("Interfaces"), list):
        raise ValueError("no list of Interfaces")
    view = {}
    for item in data["Interfaces"]:
        if not isinstance(item, dict) or not isinstance(item.get("Name"), str):
            continue
        state = item.get("AdministrativeState", item.get("SetupState"))
        if item["Name"] in view and state == "linger":
            continue
        view[item["Name"]] = dict(state=state, network_file=item.get("NetworkFile"))
    return view


# Why a link in these setup states does not carry the plan yet.
_STATE_WORDS = {
    "unmanaged": "networkd has not matched {expected} to it",
    "linger": "the link is gone and networkd has not dropped it yet",
    "pending": "udev has not finished with the link, so networkd has not applied {expected}",
}


def _networkd_msg(link, entry, expected):
    if entry is None:
        return "%s: absent (networkd does not list the link)" % link
    state, network_file = entry["state"], entry["network_file"]
    if state == FAILED:
        origin = " from %s" % network_file if network_file else ""
        why = "networkd could not configure it%s; journalctl -u systemd-networkd says why" % origin
    elif state in _STATE_WORDS:
        why = _STATE_WORDS[state].format(expected=expected)
    elif network_file and network_file != expected:
        why = "from %s, not %s: another file matches the link first" % (network_file, expected)
    else:
        why = "networkd has not finished applying %s" % expected
    return "%s: %s (%s)" % (link, state, why)


def networkd_mismatches(view, network_files):
    """(mismatches, final): every link of network_files (link -> .network path) that networkd does
    not report configured from that file, and whether waiting cannot help (a link is failed).

    Only `configured` from the expected file counts as applied: a link unmanaged, or configured
    from another file, does not carry the plan whatever sysfs shows. networkd leaves a failed link
    alone until it is reconfigured (src/network/networkd-link.c), so `failed` is final."""
    found = []
    final = False
    for link in sorted(network_files):
        expected = network_files[link]
        entry = view.get(link)
        if entry and entry["state"] == CONFIGURED and entry["network_file"] == expected:
            continue
        final = final or bool(entry and entry["state"] == FAILED)
        found.append(
            _mismatch(
                NETWORKD,
                link,
                dict(state=CONFIGURED, network_file=expected),
                entry,
                _networkd_msg(link, entry, expected),
            )
        )
    return found, final


def read_links(run, networkctl, sysfs_root, network_files, mtus, bond="", members=(), mode=""):
    """One look at the links: networkd's view of every link of network_files (when there are any),
    then, once each is configured from its file, the sysfs checks of link_mismatches.

    run(argv) returns (rc, stdout, stderr). Returns dict(done, mismatches, networkd, command):
    done when everything holds or a link failed; networkd is its view of the planned links (None
    for one it does not list); command is the networkctl run when it failed or printed no list,
    which counts as not done (networkd may be busy or restarting)."""
    planned = {}
    states = None
    if network_files:
        argv = [networkctl, "list", "--json=short"]
        rc, stdout, stderr = run(argv)
        problem = None
        if rc != 0:
            problem = "exited with %d: %s" % (rc, " ".join((stderr or stdout or "").split()) or "no output")
        else:
            try:
                view = parse_networkctl_list(stdout)
            except ValueError as exc:
                problem = "printed no list of links (%s)" % exc
        if problem:
            command = dict(argv=argv, rc=rc, stdout=stdout, stderr=stderr)
            msg = "networkctl %s %s" % (" ".join(argv[1:]), problem)
            found = [_mismatch(NETWORKD, "networkctl", "a list of links", problem, msg)]
            return dict(done=False, mismatches=found, networkd=planned, command=command)
        planned = dict((link, view.get(link)) for link in sorted(network_files))
        found, final = networkd_mismatches(view, network_files)
        if found:
            return dict(done=final, mismatches=found, networkd=planned, command=None)
        states = dict((link, view[link]["state"]) for link in network_files)
    found = link_mismatches(sysfs_root, mtus, bond, members, mode, states=states)
    return dict(done=not found, mismatches=found, networkd=planned, command=None)


def wait_for_links(read, until, clock, sleep, interval):
    """Call read() (read_links with its arguments bound) until it is done or clock() reaches until;
    the last result. clock and sleep are time.monotonic and time.sleep, stubs in tests."""
    while True:
        result = read()
        if result["done"] or clock() >= until:
            return result
        sleep(interval)


def ping_reserve(peers, count=3, wait=2):
    """Seconds the pings take when every peer answers its first try at the last moment: count
    requests a second apart, then up to `wait` seconds for the reply (iputils ping(8) -c, -W)."""
    return len(peers) * (max(1, count) - 1 + max(0, wait))


def wait_seconds(timeout, deadline=None, now=0.0, reserve=0):
    """How long the links may take: at most timeout, and ending `reserve` seconds before deadline
    (seconds since the epoch, like now) when there is one; never below 0 (then one read)."""
    wait = max(0, timeout)
    if deadline is not None:
        wait = min(wait, deadline - reserve - now)
    return max(0, wait)


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
