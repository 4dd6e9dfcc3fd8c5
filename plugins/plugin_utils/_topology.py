# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan behind the gpufleet.inference.topology inventory plugin, as a pure function.

plan(manifest) checks a topology manifest (racks of servers on one fabric subnet, the serving
layout) and returns the hosts with their variables, the groups with their members and the
variables of group all. Nothing here imports Ansible, so it can be tested and reused alone.

Addresses come from a server's position, never from its index in a list: server = nthhost(subnet,
host_offset + (rack.id - 1) * rack_size + slot), the rule of netaddr's IPNetwork indexing and of
ansible.utils.nthhost. Rack ids and slots are explicit and max_racks * rack_size addresses are
reserved up front, so adding a server or a rack never renumbers the others (the failure mode that
index-based allocation has, e.g. https://github.com/aristanetworks/avd/issues/744). Pinned
addresses are allowed (brownfield) and every collision is refused, never warned about: an address
is one interface of the cluster, whichever network it is on.

Controller-side only (Python 3.11); netaddr is a controller requirement (requirements.txt).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

try:
    import netaddr
except ImportError:  # the plugin turns this into an error that says how to install it
    netaddr = None

HAS_NETADDR = netaddr is not None

# Rack, leaf, spine and topology names.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# Inventory hostnames are DNS names (RFC 1123 2.1): dot-separated labels of 1 to 63 letters, digits
# and '-' that neither start nor end with '-', at most 253 characters in all. The last label is not
# all digits (RFC 3696 2): inet_aton() reads "1234" and "10.1" as IPv4 addresses.
LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
HOSTNAME_MAX = 253
RESERVED_HOSTNAMES = {
    "all": "is the group of every host in any Ansible inventory, so the pattern all would not mean this server",
    "ungrouped": "is an Ansible group every inventory has, so the pattern ungrouped would not mean this server",
    "localhost": "names the local machine for Ansible and for every resolver (RFC 6761 6.3)",
}
# The gpufleet.inference.vllm role's rule for vllm_replica (roles/vllm/meta/argument_specs.yml).
REPLICA = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?\Z")
# Linux interface names: at most 15 bytes, no '/', ':' or whitespace (dev_valid_name() in
# net/core/dev.c); the same rule as the fabric_network role.
IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}\Z")
# IPv6 minimum link MTU (RFC 8200) up to the largest jumbo frame common 25/100G switches take.
MTU_MIN, MTU_MAX = 1280, 9216

DEFAULT_MTU = 9000
DEFAULT_HOST_OFFSET = 10
DEFAULT_RACK_SIZE = 16
DEFAULT_MAX_RACKS = 8


def _blocks(*table):
    """(network, what) pairs, parsed once."""
    return tuple((netaddr.IPNetwork(block), what) for block, what in table) if HAS_NETADDR else ()


# Address blocks no host interface is numbered from (the IANA IPv4 and IPv6 Special-Purpose
# Address Registries, RFC 6890, and RFC 4291): a fabric or management subnet that overlaps one is
# refused. ::/8 holds the unspecified, loopback and IPv4-mapped addresses.
SPECIAL_SUBNETS = _blocks(
    ("0.0.0.0/8", "'this network', a source address only (RFC 791 3.2, RFC 1122 3.2.1.3)"),
    ("127.0.0.0/8", "loopback (RFC 1122 3.2.1.3)"),
    ("169.254.0.0/16", "link-local (RFC 3927)"),
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    ("240.0.0.0/4", "reserved, with the limited broadcast address (RFC 1112 4, RFC 919 7)"),
    ("::/8", "reserved by the IETF, with the unspecified, loopback and IPv4-mapped addresses (RFC 4291 2.4, 2.5)"),
    ("fe80::/10", "link-local (RFC 4291 2.5.6)"),
    ("fec0::/10", "deprecated site-local (RFC 3879)"),
    ("ff00::/8", "multicast (RFC 4291 2.7)"),
)
# A pinned management address outside any declared subnet may be loopback (a lab that reaches
# containers through forwarded ports), but never an address no host can be reached at.
UNREACHABLE = _blocks(
    ("0.0.0.0/8", "'this network', a source address only (RFC 791 3.2, RFC 1122 3.2.1.3)"),
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    ("240.0.0.0/4", "reserved, with the limited broadcast address (RFC 1112 4, RFC 919 7)"),
    ("::/128", "the unspecified address (RFC 4291 2.5.2)"),
    ("ff00::/8", "multicast (RFC 4291 2.7)"),
)
PRIVATE_FIX = (
    "use a private subnet: 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 (RFC 1918), or a /64 of fd00::/8 (RFC 4193)"
)

KEYS = {
    "": ("plugin", "name", "fabric", "management", "spines", "racks", "serving", "operations", "vars"),
    "fabric": ("subnet", "interface", "mtu", "bond_members", "roce", "host_offset", "rack_size", "max_racks"),
    "management": ("subnet", "host_offset", "rack_size"),
    "spine": ("name", "id"),
    "rack": ("name", "id", "leaf", "servers"),
    "server": ("name", "slot", "management_address", "fabric_address", "fabric_nics", "gpus", "vars"),
    "serving": ("vllm", "llama_cpp"),
    "vllm": ("replica", "nodes", "vars"),
    "llama_cpp": ("coordinator", "workers"),
    "operations": ("frontends", "prometheus"),
}

# Variables the plan sets itself, with the manifest key that sets them: pass-through vars may
# not set them, because the plan's host vars would silently win over (or lose to) them.
DERIVED = {
    "ansible_host": "racks[].servers[].management_address",
    "gpufleet_fabric_interface": "fabric.interface",
    "gpufleet_fabric_address": "racks[].servers[].fabric_address",
    "gpufleet_fabric_subnet": "fabric.subnet",
    "gpufleet_fabric_mtu": "fabric.mtu",
    "fabric_network_interfaces": "fabric.bond_members or racks[].servers[].fabric_nics",
    "fabric_network_bond": "fabric.interface and fabric.bond_members",
    "gpufleet_gpu_count": "racks[].servers[].gpus",
    "gpufleet_rack": "racks[].name",
    "gpufleet_leaf": "racks[].leaf",
    "gpufleet_slot": "racks[].servers[].slot",
    "vllm_replica": "serving.vllm[].replica",
    "vllm_node_rank": "the order of serving.vllm[].nodes",
    "gpufleet_topology": "the manifest itself",
    "gpufleet_topology_name": "name",
}


class TopologyError(ValueError):
    """A manifest the plan refuses: the key path, the value found, what is wrong and the fix."""

    def __init__(self, path, value, problem, fix):
        self.path = path
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__("%s = %s: %s. Fix: %s." % (path or "(manifest)", _show(value), problem, fix))


def _show(value):
    """The value as the operator wrote it (plain types: no loader tags in the message)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, str):
        return "'%s'" % str(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (str(k), _show(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(_show(v) for v in value)
    return str(value)


def _join(path, key):
    return "%s.%s" % (path, key) if path else key


def _mapping(value, path, what):
    if not isinstance(value, dict):
        raise TopologyError(path, value, "must be a mapping", "write %s as key: value pairs" % what)
    return value


def _sequence(value, path, what):
    if not isinstance(value, list):
        raise TopologyError(path, value, "must be a list", "write %s as a YAML list" % what)
    return value


def _keys(mapping, path, kind, required=(), allowed_extra=()):
    known = KEYS[kind] + tuple(allowed_extra)
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = "did you mean %s? Known keys: " % close[0] if close else "use one of the known keys: "
            raise TopologyError(_join(path, str(key)), mapping[key], "unknown key", hint + ", ".join(KEYS[kind]))
    for key in required:
        if mapping.get(key) is None:
            raise TopologyError(_join(path, key), None, "is required", "set %s" % _join(path, key))


def _int(mapping, key, path, default, low, high, why):
    value = mapping.get(key, default)
    if value is None:
        value = default
    where = _join(path, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(where, value, "must be an integer", "write a whole number from %d to %d" % (low, high))
    if not low <= value <= high:
        raise TopologyError(where, value, "is outside %d..%d" % (low, high), why)
    return int(value)


def _name(value, path, what):
    if not isinstance(value, str) or not NAME.match(value):
        raise TopologyError(
            path,
            value,
            "is not a valid %s" % what,
            "use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return str(value)


def _hostname(value, path):
    if (
        not isinstance(value, str)
        or len(value) > HOSTNAME_MAX
        or not all(LABEL.match(label) for label in value.split("."))
        or value.rsplit(".", 1)[-1].isdigit()
    ):
        raise TopologyError(
            path,
            value,
            "is not a valid hostname",
            "use dot-separated labels of 1 to 63 letters, digits and '-' that neither start nor end with '-', "
            "253 characters at most, the last label not all digits (RFC 1123 2.1)",
        )
    if value.lower() in RESERVED_HOSTNAMES:
        raise TopologyError(path, value, "is reserved: it " + RESERVED_HOSTNAMES[value.lower()], "rename the server")
    return str(value)


def _group(prefix, name):
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", name)


def _vars(value, path):
    if value is None:
        return {}
    _mapping(value, path, "the variables")
    for key in value:
        if not isinstance(key, str):
            raise TopologyError(_join(path, str(key)), key, "is not a variable name", "use a string key")
        if key in DERIVED:
            raise TopologyError(
                _join(path, key),
                value[key],
                "is set by the topology plugin from %s" % DERIVED[key],
                "remove it from %s and set %s instead" % (path, DERIVED[key]),
            )
    return value


def _network(value, path):
    if not isinstance(value, str) or "/" not in value:
        raise TopologyError(path, value, "is not a subnet in CIDR notation", "write it like 10.20.0.0/24")
    try:
        network = netaddr.IPNetwork(value)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        raise TopologyError(path, value, "is not a subnet in CIDR notation", "write it like 10.20.0.0/24") from None
    if network.ip != network.network:
        raise TopologyError(path, value, "has host bits set", "write the network address, %s" % network.cidr)
    for block, what in SPECIAL_SUBNETS:
        if _overlaps(network, block):
            raise TopologyError(path, value, "overlaps %s, %s" % (block, what), PRIVATE_FIX)
    return network.cidr


def _overlaps(one, other):
    """Whether two networks share an address (CIDR blocks are nested or apart)."""
    return one.version == other.version and one.first <= other.last and other.first <= one.last


def _last_usable(network):
    """Index of the last address a host may take (IPv4 keeps the broadcast address free)."""
    return network.size - 2 if network.version == 4 else network.size - 1


def _reserve(block, path, network, max_racks, slots=None):
    """host_offset and rack_size of a block, refusing a subnet too small for max_racks racks.

    slots: the highest slot (fabric.rack_size) when the block is not the fabric's. A rack_size
    below it would give a rack's last slots the next rack's addresses, and the last rack's would
    run past the reservation.
    """
    host_offset = _int(
        block, "host_offset", path, DEFAULT_HOST_OFFSET, 0, 2**31, "use a non-negative number of addresses to skip"
    )
    rack_size = _int(block, "rack_size", path, DEFAULT_RACK_SIZE, 1, 2**31, "reserve at least one address per rack")
    if slots is not None and rack_size < slots:
        raise TopologyError(
            _join(path, "rack_size"),
            rack_size,
            "is smaller than fabric.rack_size %d, so slots %d..%d of a rack would take the next rack's %s addresses"
            % (slots, rack_size + 1, slots, path),
            "set %s to at least %d, or lower fabric.rack_size" % (_join(path, "rack_size"), slots),
        )
    needs = host_offset + max_racks * rack_size
    has = _last_usable(network)
    if needs > has:
        raise TopologyError(
            _join(path, "subnet"),
            str(network),
            "subnet too small: needs %d addresses (host_offset %d + max_racks %d * rack_size %d), /%d has %d"
            % (needs, host_offset, max_racks, rack_size, network.prefixlen, max(has, 0)),
            "use a larger subnet or smaller rack_size/max_racks",
        )
    return host_offset, rack_size


def _address(value, path, network, network_key):
    """A pinned address: an IP, inside network when there is one, not its network or broadcast."""
    try:
        if not isinstance(value, str):
            raise TypeError(value)
        address = netaddr.IPAddress(value)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        raise TopologyError(path, value, "is not an IP address", "write a single address like 10.20.0.11") from None
    if network is None:
        return _reachable(address, value, path)
    if address not in network:
        raise TopologyError(
            path,
            value,
            "is outside %s %s" % (network_key, network),
            "pin an address inside %s, or remove the key to allocate one" % network,
        )
    if address == network.network or (network.version == 4 and address == network.broadcast):
        raise TopologyError(
            path,
            value,
            "is the %s address of %s" % ("network" if address == network.network else "broadcast", network),
            "pin a host address of %s, or remove the key to allocate one" % network,
        )
    return address


def _reachable(address, value, path):
    """A pinned address outside any declared subnet: one a host can be reached at."""
    if address.version == 6 and address.is_ipv4_mapped():
        raise TopologyError(
            path,
            value,
            "is an IPv4-mapped IPv6 address (RFC 4291 2.5.5.2)",
            "write %s, the IPv4 address itself" % address.ipv4(),
        )
    for block, what in UNREACHABLE:
        if address in block:
            raise TopologyError(
                path, value, "is in %s, %s" % (block, what), "pin the address the server is reached at over SSH"
            )
    return address


def _nics(value, path):
    if isinstance(value, str):
        value = [value]
    _sequence(value, path, "the NIC names")
    seen = set()
    for index, nic in enumerate(value):
        where = "%s[%d]" % (path, index)
        if not isinstance(nic, str) or not IFNAME.match(nic):
            raise TopologyError(
                where,
                nic,
                "is not a Linux interface name",
                "use 1 to 15 letters, digits, '_', '-' or '.' (the name `ip link` shows)",
            )
        if nic in seen:
            raise TopologyError(where, nic, "is listed twice", "list each NIC once")
        seen.add(nic)
    return [str(nic) for nic in value]


def _link(interface, members, path):
    """fabric_network_interfaces and fabric_network_bond of one server."""
    if len(members) >= 2 or interface.startswith("bond"):
        if interface in members:
            raise TopologyError(
                path,
                members,
                "contains the bond's own name %s" % interface,
                "list the physical NICs; fabric.interface names the bond over them",
            )
        if not members:
            raise TopologyError(
                path,
                None,
                "fabric.interface %s is a bond but this server has no members" % interface,
                "list the bond's NICs in fabric.bond_members or in this server's fabric_nics",
            )
        return list(members), interface
    if members and members[0] != interface:
        raise TopologyError(
            path,
            members,
            "a single fabric NIC is the fabric link itself, but fabric.interface is %s" % interface,
            "set fabric.interface to %s, list 2 or more members to bond them, or name the link bondN" % members[0],
        )
    return [interface], ""


def _fabric(manifest):
    fabric = _mapping(manifest.get("fabric"), "fabric", "the fabric")
    _keys(fabric, "fabric", "fabric", required=("subnet", "interface"))
    network = _network(fabric["subnet"], "fabric.subnet")
    max_racks = _int(fabric, "max_racks", "fabric", DEFAULT_MAX_RACKS, 1, 4096, "reserve between 1 and 4096 racks")
    host_offset, rack_size = _reserve(fabric, "fabric", network, max_racks)
    interface = fabric["interface"]
    if not isinstance(interface, str) or not IFNAME.match(interface):
        raise TopologyError(
            "fabric.interface",
            interface,
            "is not a Linux interface name",
            "use 1 to 15 letters, digits, '_', '-' or '.', such as bond0",
        )
    mtu = _int(
        fabric,
        "mtu",
        "fabric",
        DEFAULT_MTU,
        MTU_MIN,
        MTU_MAX,
        "use %d (the IPv6 minimum) to %d (jumbo frames); 9000 on a jumbo fabric" % (MTU_MIN, MTU_MAX),
    )
    members = None
    if fabric.get("bond_members") is not None:
        members = _nics(fabric["bond_members"], "fabric.bond_members")
    roce = fabric.get("roce", False)
    if not isinstance(roce, bool):
        raise TopologyError("fabric.roce", roce, "must be true or false", "write roce: true or roce: false")
    return {
        "network": network,
        "interface": str(interface),
        "mtu": mtu,
        "members": members,
        "roce": roce,
        "max_racks": max_racks,
        "host_offset": host_offset,
        "rack_size": rack_size,
    }


def _management(manifest, fabric):
    block = manifest.get("management")
    if block is None:
        return None
    _mapping(block, "management", "the management network")
    _keys(block, "management", "management")
    if block.get("subnet") is None:
        return None
    network = _network(block["subnet"], "management.subnet")
    if _overlaps(network, fabric["network"]):
        raise TopologyError(
            "management.subnet",
            block["subnet"],
            "overlaps fabric.subnet %s: each server would have two interfaces on one subnet, and the kernel may "
            "send fabric traffic out of the management NIC" % fabric["network"],
            "give the management network a subnet apart from the fabric's",
        )
    host_offset, rack_size = _reserve(block, "management", network, fabric["max_racks"], fabric["rack_size"])
    return {"network": network, "host_offset": host_offset, "rack_size": rack_size}


def _spines(manifest):
    spines = _sequence(manifest.get("spines") or [], "spines", "the spines")
    result, names, ids = [], {}, {}
    for index, spine in enumerate(spines):
        path = "spines[%d]" % index
        _mapping(spine, path, "a spine")
        _keys(spine, path, "spine", required=("name", "id"))
        name = _name(spine["name"], path + ".name", "spine name")
        spine_id = _int(spine, "id", path, None, 1, 2**31, "number the spines from 1")
        if name in names:
            raise TopologyError(path + ".name", name, "is already %s" % names[name], "give each spine its own name")
        if spine_id in ids:
            raise TopologyError(path + ".id", spine_id, "is already %s" % ids[spine_id], "give each spine its own id")
        names[name], ids[spine_id] = path, path
        result.append({"name": name, "id": spine_id})
    return result


def _claim(taken, address, path, host, how):
    """Record an address, refusing one that another server already has."""
    if address in taken:
        other_path, other_host, other_how = taken[address]
        raise TopologyError(
            path,
            str(address),
            "is already the address of %s (%s, %s)" % (other_host, other_path, other_how),
            "pin another address, or move this server to a free rack slot",
        )
    taken[address] = (path, host, how)


def _addresses(servers, fabric, management):
    """The fabric and management address of every server. One address is one interface of the
    cluster, so the two networks share one register: a management address that is a fabric address
    (another server's or its own) is refused like two servers with one fabric address. Allocated
    addresses are claimed first and the pinned ones after them, so a collision is always reported
    on the pinned server that causes it. A dict, never pairs of servers: linear in the servers."""
    taken = {}
    networks = (
        ("fabric_address", fabric, "fabric.subnet"),
        ("management_address", management, "management.subnet"),
    )
    for key, block, _network_key in networks:
        if block is None:
            continue
        for server in servers:
            if server["pinned"][key] is None:
                # Always inside the reservation _reserve checked: slot <= fabric.rack_size <= rack_size.
                index = block["host_offset"] + (server["rack_id"] - 1) * block["rack_size"] + server["slot"]
                address = block["network"][index]
                server["address"][key] = address
                how = "allocated from rack %d slot %d" % (server["rack_id"], server["slot"])
                _claim(taken, address, server["path"] + "." + key, server["name"], how)
    for key, block, network_key in networks:
        for server in servers:
            value = server["pinned"][key]
            if value is None:
                continue
            path = server["path"] + "." + key
            address = _address(value, path, block["network"] if block else None, network_key)
            server["address"][key] = address
            _claim(taken, address, path, server["name"], "pinned")
            if block is None and address in fabric["network"]:
                raise TopologyError(
                    path,
                    value,
                    "is inside fabric.subnet %s: the management interface would share the fabric's subnet"
                    % fabric["network"],
                    "pin the server's address on the management network, or set management.subnet",
                )


def _rack(rack, path, fabric, rack_ids, rack_groups):
    """The rack's own keys: name, group, id and leaf."""
    _mapping(rack, path, "a rack")
    _keys(rack, path, "rack", required=("name", "id"))
    name = _name(rack["name"], path + ".name", "rack name")
    group = _group("rack_", name)
    if group in rack_groups:
        raise TopologyError(
            path + ".name",
            name,
            "makes group %s, which %s already makes" % (group, rack_groups[group]),
            "rename one of the racks",
        )
    rack_groups[group] = path
    rack_id = _int(
        rack,
        "id",
        path,
        None,
        1,
        fabric["max_racks"],
        "give the rack an id from 1 to fabric.max_racks (%d), or raise fabric.max_racks" % fabric["max_racks"],
    )
    if rack_id in rack_ids:
        raise TopologyError(
            path + ".id", rack_id, "is already the id of %s" % rack_ids[rack_id], "give each rack its own id"
        )
    rack_ids[rack_id] = path
    entry = {"name": name, "id": rack_id, "group": group, "servers": []}
    leaf = rack.get("leaf")
    if isinstance(leaf, list):
        entry["leaf"] = [_name(one, "%s.leaf[%d]" % (path, i), "leaf name") for i, one in enumerate(leaf)]
    elif leaf is not None:
        entry["leaf"] = _name(leaf, path + ".leaf", "leaf name")
    return entry


def _server(server, path, entry, fabric, management, hosts, slots):
    """One server of a rack, before its addresses are known."""
    _mapping(server, path, "a server")
    _keys(server, path, "server", required=("name", "slot"))
    host = _hostname(server["name"], path + ".name")
    if host.lower() in hosts:
        other_path, other = hosts[host.lower()]
        if other == host:
            raise TopologyError(path + ".name", host, "is already %s" % other_path, "give each server its own name")
        raise TopologyError(
            path + ".name",
            host,
            "differs from %s (%s) only in case: DNS names are case-insensitive (RFC 4343), so both name one host"
            % (other, other_path),
            "give each server its own name",
        )
    hosts[host.lower()] = (path, host)
    slot = _int(
        server,
        "slot",
        path,
        None,
        1,
        fabric["rack_size"],
        "use a slot from 1 to fabric.rack_size (%d), or raise fabric.rack_size" % fabric["rack_size"],
    )
    if slot in slots:
        raise TopologyError(
            path + ".slot", slot, "is already the slot of %s" % slots[slot], "give each server its own slot"
        )
    slots[slot] = host
    if server.get("management_address") is None and management is None:
        raise TopologyError(
            path + ".management_address",
            None,
            "is required when management.subnet does not allocate one",
            "set this server's management_address (its SSH address), or set management.subnet",
        )
    gpus = _int(server, "gpus", path, 0, 0, 64, "give the number of GPUs in the server (0 for none)")
    if server.get("fabric_nics") is not None:
        nics = _nics(server["fabric_nics"], path + ".fabric_nics")
    else:
        nics = fabric["members"] or []
    interfaces, bond = _link(fabric["interface"], nics, path + ".fabric_nics")
    return {
        "name": host,
        "path": path,
        "rack": entry,
        "rack_id": entry["id"],
        "slot": slot,
        "gpus": gpus,
        "interfaces": interfaces,
        "bond": bond,
        "vars": _vars(server.get("vars"), path + ".vars"),
        "pinned": {
            "fabric_address": server.get("fabric_address"),
            "management_address": server.get("management_address"),
        },
        "address": {},
    }


def _racks(manifest, fabric, management):
    racks = _sequence(manifest.get("racks"), "racks", "the racks")
    if not racks:
        raise TopologyError("racks", racks, "is empty", "declare at least one rack with its servers")
    result, servers = [], []
    rack_ids, rack_groups, hosts = {}, {}, {}
    for rack_index, rack in enumerate(racks):
        path = "racks[%d]" % rack_index
        entry = _rack(rack, path, fabric, rack_ids, rack_groups)
        slots = {}
        members = _sequence(rack.get("servers") or [], path + ".servers", "the rack's servers")
        for server_index, server in enumerate(members):
            spath = "%s.servers[%d]" % (path, server_index)
            servers.append(_server(server, spath, entry, fabric, management, hosts, slots))
            entry["servers"].append(servers[-1]["name"])
        result.append(entry)
    if not servers:
        raise TopologyError(
            "racks",
            racks,
            "declares no servers",
            "list the servers under racks[].servers: an empty inventory runs nothing",
        )
    _addresses(servers, fabric, management)
    return result, servers


def _node_list(value, path, what, hosts, allow_empty):
    nodes = _sequence(value if value is not None else [], path, what)
    if not nodes and not allow_empty:
        raise TopologyError(path, nodes, "is empty", "list the replica's servers, rank 0 first")
    seen = set()
    for index, node in enumerate(nodes):
        where = "%s[%d]" % (path, index)
        if not isinstance(node, str) or node not in hosts:
            raise TopologyError(where, node, "is not a server of this manifest", "list servers declared under racks")
        if node in seen:
            raise TopologyError(where, node, "is listed twice", "list each server once")
        seen.add(node)
    return [str(node) for node in nodes]


def _serving(manifest, hosts):
    serving = manifest.get("serving")
    replicas, clusters = [], []
    if serving is None:
        return replicas, clusters
    _mapping(serving, "serving", "the serving layout")
    _keys(serving, "serving", "serving")
    owner = {}
    names = {}
    for index, replica in enumerate(_sequence(serving.get("vllm") or [], "serving.vllm", "the vLLM replicas")):
        path = "serving.vllm[%d]" % index
        _mapping(replica, path, "a vLLM replica")
        _keys(replica, path, "vllm", required=("replica",))
        name = replica["replica"]
        if not isinstance(name, str) or not REPLICA.match(name):
            raise TopologyError(
                path + ".replica",
                name,
                "is not a valid vllm_replica name",
                "use 1 to 32 of a-z, 0-9 and '-', starting and ending with a letter or digit",
            )
        if name in names:
            raise TopologyError(
                path + ".replica", name, "is already %s" % names[name], "give each replica its own name"
            )
        names[name] = path
        nodes = _node_list(replica.get("nodes"), path + ".nodes", "the replica's servers", hosts, allow_empty=False)
        for rank, node in enumerate(nodes):
            if node in owner:
                raise TopologyError(
                    "%s.nodes[%d]" % (path, rank),
                    node,
                    "is already a node of %s" % owner[node],
                    "put each server in at most one vLLM replica",
                )
            owner[node] = path
        replicas.append(
            {
                "name": str(name),
                "group": _group("vllm_replica_", name),
                "nodes": nodes,
                "vars": _vars(replica.get("vars"), path + ".vars"),
            }
        )
    llama = _sequence(serving.get("llama_cpp") or [], "serving.llama_cpp", "the llama.cpp clusters")
    if len(llama) > 1:
        raise TopologyError(
            "serving.llama_cpp[1]",
            llama[1],
            "the llama.cpp roles read one cluster per inventory (groups llama_coordinator and llama_rpc_workers)",
            "describe the second cluster in a manifest of its own",
        )
    for index, cluster in enumerate(llama):
        path = "serving.llama_cpp[%d]" % index
        _mapping(cluster, path, "a llama.cpp cluster")
        _keys(cluster, path, "llama_cpp", required=("coordinator",))
        coordinator = cluster["coordinator"]
        if not isinstance(coordinator, str) or coordinator not in hosts:
            raise TopologyError(
                path + ".coordinator",
                coordinator,
                "is not a server of this manifest",
                "name a server declared under racks",
            )
        workers = _node_list(cluster.get("workers"), path + ".workers", "the RPC workers", hosts, allow_empty=True)
        if coordinator in workers:
            raise TopologyError(
                "%s.workers[%d]" % (path, workers.index(coordinator)),
                coordinator,
                "is the coordinator of this cluster",
                "list the coordinator only under coordinator; it serves the API and offloads to the workers",
            )
        clusters.append({"coordinator": str(coordinator), "workers": workers})
    return replicas, clusters


def _operations(manifest, hosts):
    """The operations hosts: HAProxy front doors (inference_frontends) and Prometheus servers."""
    operations = manifest.get("operations")
    if operations is None:
        return {"frontends": [], "prometheus": []}
    _mapping(operations, "operations", "the operations hosts")
    _keys(operations, "operations", "operations")
    return {
        key: _node_list(operations.get(key), "operations." + key, what, hosts, allow_empty=True)
        for key, what in (("frontends", "the front-door hosts"), ("prometheus", "the Prometheus servers"))
    }


def plan(manifest, allowed_extra=()):
    """Check a topology manifest and return its inventory.

    allowed_extra: further top-level keys the caller handles itself (the inventory plugin's
    constructed options: compose, groups, keyed_groups, ...).

    Returns {"hosts": {host: vars}, "groups": {group: [hosts]}, "vars": {var: value}} where
    "vars" are those of group all. Raises TopologyError on the first problem.
    """
    if not HAS_NETADDR:
        raise RuntimeError("the topology plan needs the netaddr Python package (pip install netaddr)")
    _mapping(manifest, "", "the manifest")
    _keys(manifest, "", "", required=("fabric", "racks"), allowed_extra=allowed_extra)
    name = manifest.get("name")
    if name is not None:
        name = _name(name, "name", "topology name")
    fabric = _fabric(manifest)
    management = _management(manifest, fabric)
    spines = _spines(manifest)
    racks, servers = _racks(manifest, fabric, management)
    replicas, clusters = _serving(manifest, {server["name"] for server in servers})
    operations = _operations(manifest, {server["name"] for server in servers})
    all_vars = dict(_vars(manifest.get("vars"), "vars"))

    hosts = {}
    for server in servers:
        host = {
            "ansible_host": str(server["address"]["management_address"]),
            "gpufleet_rack": server["rack"]["name"],
            "gpufleet_slot": server["slot"],
            "gpufleet_fabric_interface": fabric["interface"],
            "gpufleet_fabric_address": str(server["address"]["fabric_address"]),
            "gpufleet_fabric_subnet": str(fabric["network"]),
            "gpufleet_fabric_mtu": fabric["mtu"],
            "fabric_network_interfaces": server["interfaces"],
            "fabric_network_bond": server["bond"],
        }
        if "leaf" in server["rack"]:
            host["gpufleet_leaf"] = server["rack"]["leaf"]
        if server["gpus"] > 0:
            host["gpufleet_gpu_count"] = server["gpus"]
        hosts[server["name"]] = host
    for replica in replicas:
        for rank, node in enumerate(replica["nodes"]):
            hosts[node].update(replica["vars"])
            hosts[node]["vllm_replica"] = replica["name"]
            hosts[node]["vllm_node_rank"] = rank
    # A server's own vars are the most specific and win over its replica's.
    for server in servers:
        hosts[server["name"]].update(server["vars"])

    groups = {
        "fabric_nodes": [server["name"] for server in servers],
        "gpu_nodes": [server["name"] for server in servers if server["gpus"] > 0],
        "roce_nodes": [server["name"] for server in servers] if fabric["roce"] else [],
        "vllm_nodes": [node for replica in replicas for node in replica["nodes"]],
        "llama_coordinator": [cluster["coordinator"] for cluster in clusters],
        "llama_rpc_workers": [worker for cluster in clusters for worker in cluster["workers"]],
        "inference_frontends": operations["frontends"],
        "prometheus_servers": operations["prometheus"],
    }
    for replica in replicas:
        groups[replica["group"]] = list(replica["nodes"])
    for rack in racks:
        groups[rack["group"]] = list(rack["servers"])

    # Group all's summary is folded into every host's variables (ansible-inventory --list does, and
    # every consumer of hostvars sees it), so it holds nothing that grows with the servers: a
    # list of racks or of replica nodes here made the inventory grow with the square of the
    # cluster. Who is in a rack, a replica or a llama.cpp cluster is in the groups.
    topology = {
        "name": name or "",
        "fabric": {
            "subnet": str(fabric["network"]),
            "interface": fabric["interface"],
            "mtu": fabric["mtu"],
            "roce": fabric["roce"],
        },
        "spines": spines,
        "counts": {
            "servers": len(servers),
            "gpus": sum(server["gpus"] for server in servers),
            "racks": len(racks),
            "vllm_replicas": len(replicas),
            "llama_cpp_clusters": len(clusters),
        },
        "operations": operations,
    }
    if management is not None:
        topology["management"] = {"subnet": str(management["network"])}
    all_vars["gpufleet_topology"] = topology
    if name is not None:
        all_vars["gpufleet_topology_name"] = name
    return {"hosts": hosts, "groups": groups, "vars": all_vars}
