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
addresses are allowed (brownfield) and every collision is refused, never warned about.

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

# Inventory hostnames (and rack, leaf and spine names).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
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
    return network.cidr


def _last_usable(network):
    """Index of the last address a host may take (IPv4 keeps the broadcast address free)."""
    return network.size - 2 if network.version == 4 else network.size - 1


def _reserve(block, path, network, max_racks):
    """host_offset and rack_size of a block, refusing a subnet too small for max_racks racks."""
    host_offset = _int(
        block, "host_offset", path, DEFAULT_HOST_OFFSET, 0, 2**31, "use a non-negative number of addresses to skip"
    )
    rack_size = _int(block, "rack_size", path, DEFAULT_RACK_SIZE, 1, 2**31, "reserve at least one address per rack")
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
        return address
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


def _management(manifest, max_racks):
    block = manifest.get("management")
    if block is None:
        return None
    _mapping(block, "management", "the management network")
    _keys(block, "management", "management")
    if block.get("subnet") is None:
        return None
    network = _network(block["subnet"], "management.subnet")
    host_offset, rack_size = _reserve(block, "management", network, max_racks)
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


def _allocate(servers, key, block, network_key):
    """Addresses of every server for one network: allocated ones first, then the pinned ones,
    so a collision is always reported on the pinned server that causes it."""
    taken = {}
    for server in servers:
        if server["pinned"][key] is None:
            index = block["host_offset"] + (server["rack_id"] - 1) * block["rack_size"] + server["slot"]
            address = block["network"][index]
            server["address"][key] = address
            how = "allocated from rack %d slot %d" % (server["rack_id"], server["slot"])
            _claim(taken, address, server["path"] + "." + key, server["name"], how)
    for server in servers:
        value = server["pinned"][key]
        if value is not None:
            path = server["path"] + "." + key
            network = block["network"] if block else None
            address = _address(value, path, network, network_key)
            server["address"][key] = address
            _claim(taken, address, path, server["name"], "pinned")


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
    host = _name(server["name"], path + ".name", "hostname")
    if host in hosts:
        raise TopologyError(path + ".name", host, "is already %s" % hosts[host], "give each server its own name")
    hosts[host] = path
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
    _allocate(servers, "fabric_address", fabric, "fabric.subnet")
    _allocate(servers, "management_address", management, "management.subnet")
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
    management = _management(manifest, fabric["max_racks"])
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
