# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The topology inventory plugin: a thin wrapper over plugin_utils/_topology.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: topology
short_description: Build the inventory of a GPU cluster from a rack-and-slot topology manifest
version_added: 0.1.0
author:
  - gpufleet.inference developers (@gpufleet)
description:
  - Reads a manifest (a YAML file whose name ends in C(topology.yml) or C(topology.yaml)) that
    describes the fabric subnet, the racks with their servers, and the serving layout, and
    creates the hosts, their variables and the groups the gpufleet.inference playbooks use.
  - "Addresses come from a server's position, not from its place in a list: the fabric address
    of a server is the host number O(fabric.host_offset) + (rack id - 1) * O(fabric.rack_size) + slot
    of O(fabric.subnet), the same index C(ansible.utils.nthhost) takes. Rack ids and slots are
    explicit and O(fabric.max_racks) * O(fabric.rack_size) addresses are reserved, so adding a
    server or a rack never renumbers the others. O(management.subnet) allocates management
    addresses by the same rule."
  - "Every host gets C(ansible_host), C(gpufleet_rack), C(gpufleet_slot), C(gpufleet_leaf) (when
    the rack names one), C(gpufleet_fabric_interface), C(gpufleet_fabric_address),
    C(gpufleet_fabric_subnet), C(gpufleet_fabric_mtu), C(fabric_network_interfaces) and
    C(fabric_network_bond); hosts with GPUs C(gpufleet_gpu_count); vLLM nodes C(vllm_replica) and
    C(vllm_node_rank). Group C(all) gets C(gpufleet_topology), a summary of the manifest for
    reports (name, fabric, management subnet, spines, operations hosts and counts; it lists no
    servers, because every host carries it: membership is in the groups), and
    C(gpufleet_topology_name)."
  - "Groups: C(fabric_nodes) (every server), C(gpu_nodes) (servers with GPUs), C(roce_nodes) (every
    server when O(fabric.roce)), C(vllm_nodes) and C(vllm_replica_<name>), C(llama_coordinator),
    C(llama_rpc_workers), C(inference_frontends) and C(prometheus_servers) (from O(operations)),
    and C(rack_<name>) per rack. All but the rack groups always exist, possibly empty."
  - These are inventory host variables, so they beat C(group_vars/) files next to the manifest;
    keep per-host data in the manifest and role settings in C(group_vars/).
  - The manifest is refused, with the key path, the value and the fix, on unknown keys, subnets
    too small for the reservation, overlapping each other or overlapping loopback, link-local,
    multicast or reserved space, rack blocks that would overlap, duplicate or out-of-range rack ids
    and slots, hostnames that are not DNS names or that repeat regardless of case, one address on
    two interfaces (fabric or management, pinned or allocated), no servers at all, and inconsistent
    serving layouts. See docs/topology.md in the collection.
  - "The plugin wants every file whose name ends in C(topology.yml) or C(topology.yaml), without
    reading it; one that is empty or lacks C(plugin: gpufleet.inference.topology) is refused with
    what to add. Through the C(auto) plugin such a file never reaches this plugin, and the C(yaml)
    or C(ini) plugin reads it as an inventory without hosts: enable this plugin alone in
    C([inventory] enable_plugins) to make that fatal (docs/topology.md, \"Which files it reads\")."
requirements:
  - netaddr (on the controller)
extends_documentation_fragment:
  - ansible.builtin.constructed
options:
  plugin:
    description: Marks the file as a manifest of this plugin.
    type: str
    required: true
    choices: [gpufleet.inference.topology]
  name:
    description: Name of the topology; becomes C(gpufleet_topology_name) on group C(all).
    type: str
  fabric:
    description: The fabric L2 subnet and the fabric link of every server.
    type: dict
    required: true
    suboptions:
      subnet:
        description:
          - The fabric subnet in CIDR notation, for example C(10.20.0.0/24).
          - A subnet overlapping C(0.0.0.0/8), loopback, link-local, multicast, C(240.0.0.0/4), C(::/8)
            or the deprecated site-local C(fec0::/10) is refused.
        type: str
        required: true
      interface:
        description:
          - Name of the fabric link on every server (C(gpufleet_fabric_interface)).
          - It is a bond (C(fabric_network_bond)) when the server has two or more members or when
            the name starts with C(bond); otherwise it is the one NIC itself.
        type: str
        required: true
      mtu:
        description: MTU of the fabric link, 1280 to 9216 (C(gpufleet_fabric_mtu)).
        type: int
        default: 9000
      bond_members:
        description:
          - Default members of the fabric bond for every server (C(fabric_network_interfaces));
            a server's O(racks[].servers[].fabric_nics) replaces them.
        type: list
        elements: str
      roce:
        description: Put every server in C(roce_nodes) (the lossless RoCE v2 class).
        type: bool
        default: false
      host_offset:
        description: Host numbers up to this one are left free (gateways, switches).
        type: int
        default: 10
      rack_size:
        description: Addresses reserved per rack; slots run from 1 to this.
        type: int
        default: 16
      max_racks:
        description:
          - Racks reserved; rack ids run from 1 to this. O(fabric.host_offset) +
            O(fabric.max_racks) * O(fabric.rack_size) must fit in the subnet, or the manifest is refused.
        type: int
        default: 8
  management:
    description: The management (SSH) network.
    type: dict
    suboptions:
      subnet:
        description:
          - When set, a server without O(racks[].servers[].management_address) gets one allocated
            like its fabric address, and pinned ones must lie inside it.
          - It may not overlap O(fabric.subnet), nor the blocks refused there.
        type: str
      host_offset:
        description: As O(fabric.host_offset), for the management subnet.
        type: int
        default: 10
      rack_size:
        description:
          - As O(fabric.rack_size), for the management subnet (with O(fabric.max_racks) racks).
          - At least O(fabric.rack_size), or a rack's last slots would take the next rack's addresses.
        type: int
        default: 16
  spines:
    description: The spine switches, for reports only (C(gpufleet_topology.spines)); they are not hosts.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Spine name.
        type: str
        required: true
      id:
        description: Spine number, unique.
        type: int
        required: true
  racks:
    description: The racks; each rack is one leaf (or leaf pair) and becomes group C(rack_<name>).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Rack name; C(gpufleet_rack) and group C(rack_<name>) (characters other than letters,
            digits and C(_) become C(_); names that collide after that are refused).
        type: str
        required: true
      id:
        description: Rack number, 1 to O(fabric.max_racks), unique; it places the rack's address block.
        type: int
        required: true
      leaf:
        description: The rack's leaf switch (or a list of two for a pair); C(gpufleet_leaf), informational.
        type: raw
      servers:
        description: The servers of the rack.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description:
              - Inventory hostname, a DNS name (RFC 1123) unique across the manifest regardless of case
                (dot-separated labels of letters, digits and C(-); not C(all), C(ungrouped) or C(localhost)).
            type: str
            required: true
          slot:
            description: Position in the rack, 1 to O(fabric.rack_size), unique in the rack.
            type: int
            required: true
          management_address:
            description:
              - The address Ansible connects to (C(ansible_host)).
              - Required unless O(management.subnet) allocates one; unique, and no server's fabric address.
              - Without O(management.subnet), it may not lie inside O(fabric.subnet).
            type: str
          fabric_address:
            description:
              - Pins the fabric address (brownfield) instead of allocating it. It must lie inside
                O(fabric.subnet), not be its network or broadcast address, and not be any other
                server's address, allocated or pinned.
            type: str
          fabric_nics:
            description: This server's bond members (or its one fabric NIC), replacing O(fabric.bond_members).
            type: list
            elements: str
          gpus:
            description: GPUs in the server; more than 0 puts it in C(gpu_nodes) and sets C(gpufleet_gpu_count).
            type: int
            default: 0
          vars:
            description:
              - Extra host variables. Variables the plugin sets itself are refused here, with the
                manifest key that sets them.
            type: dict
            default: {}
  serving:
    description: What the servers serve.
    type: dict
    suboptions:
      vllm:
        description: vLLM replicas.
        type: list
        elements: dict
        default: []
        suboptions:
          replica:
            description: Replica name (C(vllm_replica); 1 to 32 of a-z, 0-9 and C(-)); group C(vllm_replica_<name>).
            type: str
            required: true
          nodes:
            description:
              - The replica's servers, rank 0 first (C(vllm_node_rank) is the position); not empty.
              - A server is in at most one replica.
            type: list
            elements: str
            required: true
          vars:
            description: Host variables for the replica's nodes; a server's own O(racks[].servers[].vars) win.
            type: dict
            default: {}
      llama_cpp:
        description:
          - The llama.cpp RPC cluster. A list for symmetry with O(serving.vllm), but the llama.cpp
            roles read one cluster per inventory, so a second entry is refused.
        type: list
        elements: dict
        default: []
        suboptions:
          coordinator:
            description: The server running llama-server (group C(llama_coordinator)).
            type: str
            required: true
          workers:
            description: The servers running ggml-rpc-server (group C(llama_rpc_workers)), in C(--rpc) order.
            type: list
            elements: str
            default: []
  operations:
    description: The hosts of the operations layer (playbooks/operations.yml, playbooks/monitoring.yml).
    type: dict
    default: {}
    suboptions:
      frontends:
        description:
          - Servers that run the HAProxy front door, its controller and the planned restarts
            (group C(inference_frontends)). They must reach the replicas' API addresses.
        type: list
        elements: str
        default: []
      prometheus:
        description:
          - Servers that run Prometheus with the collection's scrape configuration and alert
            rules (group C(prometheus_servers)).
        type: list
        elements: str
        default: []
  vars:
    description: Variables of group C(all); variables the plugin sets per host are refused here.
    type: dict
    default: {}
"""

EXAMPLES = r"""
# inventories/cluster/topology.yml; group_vars/ next to it holds the role settings.
# ansible-inventory -i inventories/cluster/topology.yml --graph
plugin: gpufleet.inference.topology
name: cluster-a
fabric:
  subnet: 10.20.0.0/24
  interface: bond0
  bond_members: [ens1f0np0, ens1f1np1]
management:
  subnet: 192.168.10.0/24
racks:
  - name: r1
    id: 1
    leaf: leaf1
    servers:
      - {name: gpu01, slot: 1, gpus: 8}   # 10.20.0.11, 192.168.10.11
      - {name: gpu02, slot: 2, gpus: 8}   # 10.20.0.12, 192.168.10.12
  - name: r2
    id: 2
    servers:
      # rack 2 starts at host 10 + 16 + 1: 10.20.0.27
      - {name: gpu17, slot: 1, gpus: 8}
      # brownfield: keep the address the server already has
      - {name: gpu18, slot: 2, gpus: 8, fabric_address: 10.20.0.200}
serving:
  vllm:
    - replica: kimi
      nodes: [gpu01, gpu02, gpu17, gpu18]

---
# Constructed options work on the generated variables.
plugin: gpufleet.inference.topology
fabric: {subnet: 10.30.0.0/24, interface: eth1}
racks:
  - name: lab
    id: 1
    servers:
      - {name: lab-head, slot: 1, management_address: 192.0.2.10}
keyed_groups:
  - key: gpufleet_rack
    prefix: site
"""

from collections.abc import Mapping

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable
from ansible_collections.gpufleet.inference.plugins.plugin_utils import _topology

# Top-level keys that belong to the constructed doc fragment, not to the manifest.
CONSTRUCTED = ("strict", "compose", "groups", "keyed_groups", "use_extra_vars", "leading_separator")


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "gpufleet.inference.topology"

    def verify_file(self, path):
        # By name, without reading the file: a file named like a manifest is one, and parse() says
        # what it lacks; every other file is left to the plugins after this one (docs/topology.md,
        # "Which files it reads").
        return super().verify_file(path) and path.endswith(("topology.yml", "topology.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache=cache)
        if not _topology.HAS_NETADDR:
            raise AnsibleError(
                "The gpufleet.inference.topology inventory plugin needs the netaddr Python package on the "
                "controller: pip install netaddr (it is in the collection's requirements.txt)"
            )
        try:
            # unsafe: no deep copy of what was just parsed for this call alone (cache none); the
            # plan never changes the manifest. The copy took longer than the parse on 2,000 servers.
            manifest = loader.load_from_file(path, cache="none", unsafe=True, trusted_as_template=True)
        except Exception as e:
            raise AnsibleParserError(to_native(e)) from e
        try:
            self._is_ours(manifest)
            plan = _topology.plan(dict(manifest), allowed_extra=CONSTRUCTED)
        except _topology.TopologyError as e:
            raise AnsibleParserError("%s: %s" % (path, to_native(e))) from e
        # Only now: the manifest's own checks give clearer messages than option type errors.
        self.set_options(direct=manifest, var_options=self._vars)
        self._populate(plan)

    def _is_ours(self, manifest):
        """Refuse a file named like a manifest that does not say it is one, saying what to add."""
        add = "add the line `plugin: %s` at the top of the manifest" % self.NAME
        if manifest is None:
            raise _topology.TopologyError("", None, "the file is empty", add + ", then fabric and racks")
        if not isinstance(manifest, Mapping):
            raise _topology.TopologyError("", manifest, "must be a mapping", add + ", then fabric and racks as keys")
        plugin = manifest.get("plugin")
        if plugin is None:
            raise _topology.TopologyError("plugin", None, "is required: it says which plugin reads the file", add)
        if plugin not in (getattr(self, "_redirected_names", None) or [self.NAME]):
            raise _topology.TopologyError(
                "plugin",
                plugin,
                "is not %s" % self.NAME,
                "write `plugin: %s` if this is a topology manifest; give another plugin's file a name that does "
                "not end in topology.yml or topology.yaml" % self.NAME,
            )

    def _populate(self, plan):
        for group in plan["groups"]:
            self.inventory.add_group(group)
        for key, value in plan["vars"].items():
            self.inventory.set_variable("all", key, value)
        for host, variables in plan["hosts"].items():
            self.inventory.add_host(host)
            for key, value in variables.items():
                self.inventory.set_variable(host, key, value)
        for group, members in plan["groups"].items():
            for host in members:
                self.inventory.add_child(group, host)
        strict = self.get_option("strict")
        for host in plan["hosts"]:
            hostvars = self.inventory.get_host(host).get_vars()
            self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host, strict=strict)
