# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure model and renderers of the fabric_network role: one fabric link (a single NIC or an LACP
bond of several), its MTU and addresses, and VLANs on top, rendered as a netplan file or as
systemd-networkd files. Validation happens here, before any file is written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render

# Linux interface names: at most 15 bytes, no '/', ':' or whitespace (dev_valid_name()).
IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
# Parameters of the flagship's 8x25G LACP bond (inventories/cluster-80x5090); netplan spelling -> networkd key.
BOND_DEFAULTS = {
    "mode": "802.3ad",
    "lacp-rate": "fast",
    "transmit-hash-policy": "layer3+4",
    "mii-monitor-interval": 100,
}
NETWORKD_BOND_KEYS = {
    "mode": "Mode",
    "lacp-rate": "LACPTransmitRate",
    "transmit-hash-policy": "TransmitHashPolicy",
    "mii-monitor-interval": "MIIMonitorSec",
}
BOND_CHOICES = {
    "mode": ("802.3ad", "balance-rr", "active-backup", "balance-xor", "broadcast", "balance-tlb", "balance-alb"),
    "lacp-rate": ("slow", "fast"),
    "transmit-hash-policy": ("layer2", "layer3+4", "layer2+3", "encap2+3", "encap3+4"),
}
PREFIX = "60-gpufleet-"
NETPLAN_PATH = "/etc/netplan/60-gpufleet-fabric.yaml"
NETWORKD_DIR = "/etc/systemd/network"


class FabricModelError(ValueError):
    pass


def _fail(variable, value, fix):
    raise FabricModelError("%s=%s %s" % (variable, value, fix))


def _ifname(variable, name):
    if not isinstance(name, str) or not IFNAME.fullmatch(name):
        _fail(variable, name, "is not a Linux interface name (1 to 15 letters, digits, '_', '-' or '.')")
    return name


def _addresses(variable, values):
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        _fail(variable, values, "must be a list of addresses with prefix, such as [10.10.0.11/24]")
    result = []
    for value in values:
        try:
            interface = ipaddress.ip_interface(str(value))
        except ValueError:
            interface = None
        if interface is None or "/" not in str(value):
            _fail(variable, value, "is not an address with its prefix length, such as 10.10.0.11/24")
        result.append(str(interface))
    return result


def _bond_parameters(bond_parameters):
    """The bond's parameters: the defaults with the overrides of fabric_network_bond_parameters."""
    # An empty value of any type means no override, as it always did.
    if bond_parameters and not isinstance(bond_parameters, dict):
        _fail("fabric_network_bond_parameters", bond_parameters, "must be a mapping, such as {lacp-rate: slow}")
    parameters = dict(BOND_DEFAULTS)
    for key, value in (bond_parameters or {}).items():
        if key not in BOND_DEFAULTS:
            _fail("fabric_network_bond_parameters", key, "is not a bond parameter; use %s" % ", ".join(BOND_DEFAULTS))
        parameters[key] = value
    for key, choices in BOND_CHOICES.items():
        if parameters[key] not in choices:
            _fail(
                "fabric_network_bond_parameters",
                "%s: %s" % (key, parameters[key]),
                "must be one of %s" % ", ".join(choices),
            )
    try:
        parameters["mii-monitor-interval"] = int(parameters["mii-monitor-interval"])
    except (TypeError, ValueError):
        _fail(
            "fabric_network_bond_parameters", parameters["mii-monitor-interval"], "mii-monitor-interval is milliseconds"
        )
    return parameters


def build_model(interfaces, bond, mtu, addresses, vlans=None, bond_parameters=None):
    """Validate the role's inputs and return the normalised model.

    ``interfaces`` are the fabric NICs; with ``bond`` set they become its members, without it there
    must be exactly one. ``vlans`` is a list of {id, addresses, mtu (optional)} on the bond (or the
    single NIC). Raises FabricModelError whose message names the variable, the value and the fix.
    """
    if not isinstance(interfaces, list) or not interfaces:
        _fail("fabric_network_interfaces", interfaces, "must list the fabric NICs, for example [ens1f0np0, ens1f1np1]")
    members = [_ifname("fabric_network_interfaces", name) for name in interfaces]
    if len(set(members)) != len(members):
        _fail("fabric_network_interfaces", interfaces, "names a NIC twice")
    bond = bond or ""
    if bond:
        _ifname("fabric_network_bond", bond)
        if bond in members:
            _fail("fabric_network_bond", bond, "is also one of fabric_network_interfaces; give the bond its own name")
    elif len(members) != 1:
        _fail(
            "fabric_network_interfaces",
            interfaces,
            "lists %d NICs but fabric_network_bond is empty; set fabric_network_bond: bond0 to bond them"
            % len(members),
        )
    try:
        mtu = int(mtu)
    except (TypeError, ValueError):
        _fail("fabric_network_mtu", mtu, "must be a number of bytes, such as 9000")
    if not 1280 <= mtu <= 9216:
        _fail("fabric_network_mtu", mtu, "is outside 1280..9216; jumbo fabrics use 9000")
    parameters = _bond_parameters(bond_parameters)
    link = bond or members[0]
    if vlans and not isinstance(vlans, (list, tuple)):
        _fail("fabric_network_vlans", vlans, "must be a list, such as [{id: 100, addresses: [10.20.0.11/24]}]")
    result_vlans = []
    for vlan in vlans or []:
        vlan_id = vlan.get("id") if isinstance(vlan, dict) else None
        if not isinstance(vlan_id, int) or isinstance(vlan_id, bool) or not 1 <= vlan_id <= 4094:
            _fail(
                "fabric_network_vlans",
                vlan,
                "entries need an id in 1..4094, such as {id: 100, addresses: [10.20.0.11/24]}",
            )
        try:
            vlan_mtu = int(vlan.get("mtu", mtu))
        except (TypeError, ValueError):
            vlan_mtu = None
        if vlan_mtu is None or isinstance(vlan.get("mtu"), bool) or vlan_mtu < 1280:
            _fail("fabric_network_vlans", vlan, "has an MTU that is not a number of bytes of at least 1280")
        if vlan_mtu > mtu:
            _fail("fabric_network_vlans", vlan, "has an MTU above the link's %d" % mtu)
        name = "%s.%d" % (link, vlan["id"])
        if len(name) > 15:
            _fail("fabric_network_vlans", vlan, "makes the interface name %s, longer than 15 bytes" % name)
        if name in members:
            _fail("fabric_network_vlans", vlan, "makes the interface name %s, which is one of the NICs" % name)
        result_vlans.append(
            {
                "name": name,
                "id": vlan["id"],
                "mtu": vlan_mtu,
                "addresses": _addresses("fabric_network_vlans", vlan.get("addresses")),
            }
        )
    if len({vlan["id"] for vlan in result_vlans}) != len(result_vlans):
        _fail("fabric_network_vlans", [vlan["id"] for vlan in result_vlans], "repeats a VLAN id")
    return {
        "members": members,
        "bond": bond,
        "link": link,
        "mtu": mtu,
        "addresses": _addresses("fabric_network_addresses", addresses),
        "bond_parameters": parameters if bond else {},
        "vlans": result_vlans,
    }


def _netplan_link(mtu, addresses, renderer):
    # The renderer is set per device: netplan applies a top-level one to every file's devices,
    # which would hand the management NIC to another daemon.
    entry = {"renderer": renderer, "mtu": mtu, "dhcp4": False, "dhcp6": False, "link-local": []}
    if addresses:
        entry["addresses"] = list(addresses)
    return entry


def render_netplan(model, renderer="networkd"):
    """{path: YAML text} for netplan; deterministic, two-space indented, keys in a fixed order."""
    network = {"version": 2, "ethernets": {}}
    for name in model["members"]:
        network["ethernets"][name] = _netplan_link(model["mtu"], [] if model["bond"] else model["addresses"], renderer)
    if model["bond"]:
        bond = _netplan_link(model["mtu"], model["addresses"], renderer)
        bond["interfaces"] = list(model["members"])
        bond["parameters"] = dict(model["bond_parameters"])
        network["bonds"] = {model["bond"]: bond}
    if model["vlans"]:
        network["vlans"] = {}
        for vlan in model["vlans"]:
            entry = _netplan_link(vlan["mtu"], vlan["addresses"], renderer)
            entry.update({"id": vlan["id"], "link": model["link"]})
            network["vlans"][vlan["name"]] = entry
    lines = ["# Managed by gpufleet.inference.fabric_network: the inference fabric.", "network:"]
    lines.extend(_yaml(network, 1))
    return {NETPLAN_PATH: "\n".join(lines) + "\n"}


def _scalar(value):
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return '"%s"' % text if re.search(r"[:#\[\]{}, ]|^[0-9.+-]", text) else text


def _yaml(mapping, depth):
    lines = []
    pad = "  " * depth
    for key, value in mapping.items():
        if isinstance(value, dict):
            lines.append("%s%s:" % (pad, _scalar(key)))
            lines.extend(_yaml(value, depth + 1))
        elif isinstance(value, list):
            lines.append("%s%s: [%s]" % (pad, _scalar(key), ", ".join(_scalar(item) for item in value)))
        else:
            lines.append("%s%s: %s" % (pad, _scalar(key), _scalar(value)))
    return lines


def _ini(sections):
    chunks = ["# Managed by gpufleet.inference.fabric_network: the inference fabric."]
    for section, pairs in sections:
        chunks.append("[%s]" % section)
        chunks.extend("%s=%s" % pair for pair in pairs)
        chunks.append("")
    return "\n".join(chunks)


def _networkd_network(name, mtu, addresses, extra=()):
    network = [("LinkLocalAddressing", "no"), ("IPv6AcceptRA", "no")]
    network.extend(("Address", address) for address in addresses)
    network.extend(extra)
    return _ini([("Match", [("Name", name)]), ("Link", [("MTUBytes", str(mtu))]), ("Network", network)])


def networkd_path(link, suffix):
    """The path of the .network or .netdev file (suffix) this role writes for a link."""
    return "%s/%s%s.%s" % (NETWORKD_DIR, PREFIX, link, suffix)


def render_networkd(model):
    """{path: INI text} of .netdev/.network files for systemd-networkd."""
    files = {}
    vlan_refs = [("VLAN", vlan["name"]) for vlan in model["vlans"]]
    if model["bond"]:
        parameters = model["bond_parameters"]
        bond = [(NETWORKD_BOND_KEYS[key], parameters[key]) for key in ("mode", "lacp-rate", "transmit-hash-policy")]
        bond.append(("MIIMonitorSec", "%dms" % parameters["mii-monitor-interval"]))
        files[networkd_path(model["bond"], "netdev")] = _ini(
            [("NetDev", [("Name", model["bond"]), ("Kind", "bond"), ("MTUBytes", str(model["mtu"]))]), ("Bond", bond)]
        )
        for member in model["members"]:
            files[networkd_path(member, "network")] = _ini(
                [
                    ("Match", [("Name", member)]),
                    ("Link", [("MTUBytes", str(model["mtu"]))]),
                    ("Network", [("Bond", model["bond"])]),
                ]
            )
    files[networkd_path(model["link"], "network")] = _networkd_network(
        model["link"], model["mtu"], model["addresses"], vlan_refs
    )
    for vlan in model["vlans"]:
        files[networkd_path(vlan["name"], "netdev")] = _ini(
            [
                ("NetDev", [("Name", vlan["name"]), ("Kind", "vlan"), ("MTUBytes", str(vlan["mtu"]))]),
                ("VLAN", [("Id", str(vlan["id"]))]),
            ]
        )
        files[networkd_path(vlan["name"], "network")] = _networkd_network(vlan["name"], vlan["mtu"], vlan["addresses"])
    return files


def render(model, backend, renderer="networkd"):
    if renderer not in ("networkd", "NetworkManager"):
        raise FabricModelError("the netplan renderer %s is not networkd or NetworkManager" % renderer)
    if backend == "netplan":
        return render_netplan(model, renderer)
    if backend == "networkd":
        return render_networkd(model)
    raise FabricModelError("fabric_network_backend=%s is not netplan or networkd" % backend)


def virtual_links(model):
    """Links the configuration creates (a revert deletes them when they did not exist before)."""
    return ([model["bond"]] if model["bond"] else []) + [vlan["name"] for vlan in model["vlans"]]


def links(model):
    """Every link the configuration sets, members first."""
    return list(model["members"]) + virtual_links(model)


def expected_mtus(model):
    """link -> MTU the configuration gives it."""
    mtus = dict((name, model["mtu"]) for name in model["members"] + ([model["bond"]] if model["bond"] else []))
    mtus.update((vlan["name"], vlan["mtu"]) for vlan in model["vlans"])
    return mtus


def network_files(model, backend):
    """link -> the .network file systemd-networkd must configure it from, for the networkd backend.

    Every link (members, bond, VLANs) gets a .network file of its own. Empty for netplan, which
    names and places the files it generates itself (and may not render for networkd at all)."""
    if backend != "networkd":
        return {}
    return dict((link, networkd_path(link, "network")) for link in links(model))


def reconfigure_links(model, changed, interfaces):
    """The links to hand to `networkctl reconfigure` after `networkctl reload`, in plan order.

    changed: the files the apply wrote; interfaces: the links the host had before the apply.
    A link qualifies when its .network file was written and it existed before. A link the plan
    creates does not exist yet, and a bond or VLAN whose .netdev changed was deleted before the
    reload (networkd creates it again): neither can be reconfigured, nor carry a stale state."""
    changed = set(changed or ())
    interfaces = set(interfaces or ())
    return [
        link
        for link in links(model)
        if networkd_path(link, "network") in changed
        and link in interfaces
        and networkd_path(link, "netdev") not in changed
    ]


# ---------------------------------------------------------------- the role's settings

# The peers' check takes what the role's preflight gave before: characters of an IPv4 or IPv6
# address; the ping after the apply names a peer that does not answer.
_PEER = re.compile(r"^[0-9a-fA-F.:]+\Z")
# Seconds the link check needs before the revert fires: a base, and the pings of each peer.
REVERT_BASE_SECONDS = 30
REVERT_SECONDS_PER_PEER = 20
_PEERS_DEFAULT = "null means the other hosts of the batch and of committed batches"


def peer_problems(verify_peers, peers, revert_seconds):
    """What is wrong with the peers the check after the apply pings (peers: fabric_network_verify_peers,
    or the other hosts' fabric addresses where it is null) and with the revert window they need."""
    if not isinstance(peers, (list, tuple)):
        return [
            "fabric_network_verify_peers=%s must be a list of fabric IP addresses (%s)" % (verify_peers, _PEERS_DEFAULT)
        ]
    problems = []
    bad = [str(peer) for peer in peers if not _PEER.match(str(peer))]
    if bad:
        problems.append(
            "fabric_network_verify_peers=%s has entries that are not IP addresses: %s" % (verify_peers, ", ".join(bad))
        )
    if not peers:
        problems.append(
            "fabric_network_verify_peers=%s leaves no peer to check jumbo frames against (%s, here none): run two "
            "hosts or name a configured peer" % (verify_peers, _PEERS_DEFAULT)
        )
    need = REVERT_BASE_SECONDS + REVERT_SECONDS_PER_PEER * len(peers)
    if _render.jinja_int(revert_seconds) < need:
        problems.append(
            "fabric_network_revert_seconds=%s leaves the checks too little time before the revert fires: set at least "
            "%d + %d per peer = %d" % (revert_seconds, REVERT_BASE_SECONDS, REVERT_SECONDS_PER_PEER, need)
        )
    return problems


def settings_problems(settings):
    """Every problem of the fabric_network role's settings (its preflight, through the _role_problems
    filter): the peers and the revert window, the link as the plan would refuse it, and an address.

    settings: the role's variables, with peers (the resolved fabric_network_verify_peers),
    addresses (fabric_network_addresses, or the inventory's fabric address with its prefix) and
    inventory_hostname."""
    problems = peer_problems(
        settings["fabric_network_verify_peers"], settings["peers"], settings["fabric_network_revert_seconds"]
    )
    interfaces = settings["fabric_network_interfaces"]
    addresses = settings["addresses"] if settings["addresses"] is not None else []
    try:
        build_model(
            list(interfaces) if isinstance(interfaces, tuple) else (interfaces if interfaces is not None else []),
            settings["fabric_network_bond"],
            _render.jinja_int(settings["fabric_network_mtu"]),
            addresses,
            settings["fabric_network_vlans"],
            settings["fabric_network_bond_parameters"],
        )
    except FabricModelError as exc:
        # The model stops at its first problem: the link's settings depend on each other.
        problems.append(str(exc))
    if isinstance(addresses, (list, tuple)) and not addresses:
        problems.append(
            "%s has no fabric address: set fabric_network_addresses (such as [10.10.0.11/24]) or "
            "gpufleet_fabric_address with gpufleet_fabric_subnet." % settings["inventory_hostname"]
        )
    return problems
