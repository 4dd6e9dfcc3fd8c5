# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM replica layout and its firewall, as pure functions (filters vllm_replica_plan, vllm_nft).

A replica is the set of hosts that serve one copy of a model with vLLM's mp multi-node
launcher: ``--nnodes N --node-rank i --master-addr <rank 0> --master-port P``; rank 0 serves
the API and ranks > 0 run ``--headless``. vLLM orders ranks tensor-parallel innermost, so with
TP = GPUs per node node i is pipeline stage i (vllm/config/parallel.py; the multi-node example
in vLLM's docs/serving/parallelism_scaling.md runs ``-tp 8 -pp 2 --nnodes 2``).

Private module_utils (leading underscore); Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render, _vllm_catalogue

REPLICA_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?\Z")


def _int(value):
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _ranks(replica, members, problems):
    by_rank = {}
    for member in members:
        rank = _int(member.get("rank"))
        if rank is None or rank < 0:
            problems.append("vllm_node_rank=%r on %s must be an integer >= 0" % (member.get("rank"), member["host"]))
            continue
        if rank in by_rank:
            problems.append(
                "vllm_node_rank=%d is set on both %s and %s of replica %s; give each node its own rank"
                % (rank, by_rank[rank]["host"], member["host"], replica)
            )
            continue
        by_rank[rank] = member
    nnodes = len(members)
    missing = [r for r in range(nnodes) if r not in by_rank]
    if missing and not problems:
        problems.append(
            "replica %s has %d node(s) in this play, so its ranks must be 0..%d; rank(s) %s are missing "
            "(ranks present: %s). Put every node of a replica in the play and number them from 0"
            % (replica, nnodes, nnodes - 1, ", ".join(map(str, missing)), ", ".join(map(str, sorted(by_rank))))
        )
    return by_rank


def _shared(replica, members, problems):
    # The settings every node must agree on, named by the role's one table of settings.
    for key, variable in _vllm_catalogue.SHARED:
        values = {}
        for member in members:
            values.setdefault(repr(member.get(key)), []).append(member["host"])
        if len(values) > 1:
            detail = "; ".join("%s on %s" % (value, ", ".join(hosts)) for value, hosts in sorted(values.items()))
            problems.append(
                "%s differs between the nodes of replica %s (%s); every node of a replica needs the same value"
                % (variable, replica, detail)
            )


def _addresses(replica, members, problems):
    seen = {}
    for member in members:
        try:
            address = ipaddress.ip_address(str(member.get("address")))
        except ValueError:
            problems.append(
                "vllm_host_ip=%r on %s is not an IP address; set gpufleet_fabric_address (or vllm_host_ip) "
                "to the node's fabric address" % (member.get("address"), member["host"])
            )
            continue
        if address.is_loopback and len(members) > 1:
            problems.append(
                "vllm_host_ip=%s on %s is a loopback address, which the other nodes of replica %s cannot reach"
                % (address, member["host"], replica)
            )
        if str(address) in seen:
            problems.append(
                "vllm_host_ip=%s is the address of both %s and %s" % (address, seen[str(address)], member["host"])
            )
        seen[str(address)] = member["host"]
    for member in members:
        api_host = member.get("api_host")
        if _int(member.get("rank")) == 0 and api_host is not None and api_host != "localhost":
            try:
                ipaddress.ip_address(str(api_host))
            except ValueError:
                problems.append(
                    "vllm_api_host=%r on %s must be an IP address of the host (127.0.0.1, the default, keeps the "
                    "API on the host)" % (api_host, member["host"])
                )


def _sizes(replica, first, nnodes, problems):
    """Ranks per node, or None with a problem."""
    tp = _int(first.get("tensor_parallel_size"))
    pp = _int(first.get("pipeline_parallel_size"))
    if tp is None or tp < 1:
        problems.append("vllm_tensor_parallel_size=%r must be an integer >= 1" % (first.get("tensor_parallel_size"),))
    if pp is None or pp < 1:
        problems.append(
            "vllm_pipeline_parallel_size=%r must be an integer >= 1" % (first.get("pipeline_parallel_size"),)
        )
    if not (tp and pp and tp > 0 and pp > 0):
        return None
    partition = first.get("pp_layer_partition") or ""
    if partition:
        parts = str(partition).split(",")
        if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            problems.append(
                "vllm_pp_layer_partition=%r must be a comma list of positive layer counts, e.g. '7,6,6'" % (partition,)
            )
        elif len(parts) != pp:
            problems.append(
                "vllm_pp_layer_partition=%r has %d stage(s) but vllm_pipeline_parallel_size is %d; vLLM refuses a "
                "partition whose length differs from the PP size" % (partition, len(parts), pp)
            )
    world = tp * pp
    if world % nnodes:
        problems.append(
            "replica %s: TP %d x PP %d = %d ranks cannot be split evenly over its %d node(s); use a node "
            "count that divides %d, or change vllm_tensor_parallel_size / vllm_pipeline_parallel_size"
            % (replica, tp, pp, world, nnodes, world)
        )
        return None
    if nnodes > 1 and pp > 1 and pp % nnodes:
        problems.append(
            "replica %s: PP %d stages over %d nodes would put parts of one stage on two nodes; set "
            "vllm_pipeline_parallel_size to a multiple of the node count" % (replica, pp, nnodes)
        )
        return None
    return world // nnodes


def plan(replica, members):
    """Check one replica's members and return (plan, problems).

    members: one dict per host of the play that has this replica, with host, rank, address
    and the keys of _vllm_catalogue.SHARED. plan: {"name", "nnodes", "master_addr", "nodes": [{host, rank,
    address}] by rank, "local_world_size"}.
    """
    if not isinstance(replica, str) or not REPLICA_NAME.match(replica):
        return None, [
            "vllm_replica=%r must be 1-32 characters of a-z, 0-9 and '-', starting and ending with a letter "
            "or digit (it names units, files and an nftables table)" % (replica,)
        ]
    if not members:
        return None, ["vllm_replica=%s has no host in this play" % replica]
    problems = []
    by_rank = _ranks(replica, members, problems)
    _shared(replica, members, problems)
    _addresses(replica, members, problems)
    local = _sizes(replica, members[0], len(members), problems)
    if problems:
        return None, problems
    nodes = [
        {"host": by_rank[r]["host"], "rank": r, "address": str(by_rank[r]["address"])} for r in range(len(members))
    ]
    return {
        "name": replica,
        "nnodes": len(members),
        "master_addr": nodes[0]["address"],
        "nodes": nodes,
        "local_world_size": local,
    }, []


def _networks(values, origin):
    nets, problems = [], []
    if not isinstance(values, (list, tuple)):
        return [], ["%s must be a list of addresses or networks, got %r" % (origin, values)]
    for value in values:
        try:
            nets.append(ipaddress.ip_network(str(value), strict=False))
        except ValueError:
            problems.append(
                "%s: %r is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24); fix or remove it"
                % (origin, value)
            )
            continue
        # 10.0.0.1/8 would open the port to all of 10.0.0.0/8: the collection's one rule says so.
        problems.extend(_render.input_problems([["network", origin, value]]))
    return nets, problems


def _port(value, origin, problems):
    port = _int(value)
    if port is None or not 1 <= port <= 65535:
        problems.append("%s=%r must be a TCP port, 1..65535" % (origin, value))
        return None
    return port


def nft_rules(table, peers, api_port, api_clients, internal_ports, ephemeral):
    """The text of an nftables file that replaces only our table (returns (text, problems)).

    peers: the addresses of every node of the replica; api_clients: addresses or networks that
    may open api_port; internal_ports: {variable: port} of the ports vLLM and the guard listen on
    besides the API; ephemeral: (low, high) of net.ipv4.ip_local_port_range, where gloo and ZMQ
    bind their listening sockets.
    """
    problems = []
    if not isinstance(table, str) or not re.match(r"^[a-z][a-z0-9_]{0,40}\Z", table):
        problems.append("nftables table name %r must be [a-z][a-z0-9_]*" % (table,))
    peer_nets, p = _networks(peers, "replica node addresses")
    problems += p
    client_nets, p = _networks(api_clients, "vllm_api_allowed_clients")
    problems += p
    api = _port(api_port, "vllm_api_port", problems)
    ports = []
    for variable in sorted(internal_ports):
        port = _port(internal_ports[variable], variable, problems)
        if port is not None and port == api:
            problems.append("%s=%d is also vllm_api_port; give it a port of its own" % (variable, port))
        ports.append(port)
    low, high = (_int(x) for x in ephemeral)
    if low is None or high is None or not 1 <= low <= high <= 65535:
        problems.append("the ephemeral port range %r is not low..high" % (ephemeral,))
    if problems:
        return None, problems

    def elements(nets, family):
        return ", ".join(str(n) for n in nets if n.version == family)

    lines = [
        "# vLLM replica firewall: the API port for vllm_api_allowed_clients, the internode ports",
        "# (master port, gloo and ZMQ in the ephemeral range, the guard) for the replica's own nodes.",
        "# Declaring, deleting and redefining the table replaces only this table.",
        "table inet %s" % table,
        "delete table inet %s" % table,
        "table inet %s {" % table,
    ]
    for name, nets in (("replica", peer_nets), ("api_clients", client_nets)):
        for family, kind in ((4, "ipv4_addr"), (6, "ipv6_addr")):
            if elements(nets, family):
                lines += [
                    "    set %s_v%d {" % (name, family),
                    "        type %s" % kind,
                    "        flags interval",
                    "        elements = { %s }" % elements(nets, family),
                    "    }",
                ]
    internal = ", ".join(str(p) for p in sorted(set(ports)))
    internal = "%s, %d-%d" % (internal, low, high) if internal else "%d-%d" % (low, high)
    lines += [
        "    chain input {",
        "        type filter hook input priority filter - 5; policy accept;",
        "        iif lo accept",
        "        ct state established,related accept",
    ]
    for name, nets, ports_expr in (("api_clients", client_nets, str(api)), ("replica", peer_nets, "{ %s }" % internal)):
        for family, match in ((4, "ip"), (6, "ip6")):
            if elements(nets, family):
                lines.append("        tcp dport %s %s saddr @%s_v%d accept" % (ports_expr, match, name, family))
    lines += [
        "        tcp dport { %d, %s } counter drop" % (api, internal),
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n", []
