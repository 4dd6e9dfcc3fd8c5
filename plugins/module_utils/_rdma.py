# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RDMA devices, ports and GID tables from sysfs, `ibv_devinfo -v` parsing, and the choice of the
RoCE v2 GID that NCCL should use (NCCL_IB_GID_INDEX).

Facts, and where they come from:
- Layout: <sysfs>/class/infiniband/<dev>/{node_guid,node_type,fw_ver} and ports/<n>/{state,
  phys_state,rate,link_layer}, gids/<i>, gid_attrs/types/<i>, gid_attrs/ndevs/<i>: the kernel's
  Documentation/ABI/stable/sysfs-class-infiniband. hca_type and board_id exist only for some
  drivers (mthca, mlx4, mlx5, cxgb4, qib); rxe and siw have neither.
- Formats, from drivers/infiniband/core/sysfs.c: state "<n>: <NAME>" ("4: ACTIVE", "1: DOWN"),
  phys_state "<n>: <Name>" ("5: LinkUp", "3: Disabled"), node_type "<n>: <type>" ("1: CA"), rate
  "<g>[.5] Gb/sec (<w>X <speed>)" without the space ("100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)").
- gids/<i> is printed with %pI6 (eight groups of four hex digits). An empty or reserved slot reads
  as the zero GID, while its types/<i> and ndevs/<i> fail with EINVAL "for user space compatibility
  reasons" (sysfs.c, show_port_gid and _show_port_gid_attr; NVIDIA/nccl#1573 is NCCL tripping on
  it). ndevs/<i> fails too on InfiniBand ports, whose GIDs have no net device. So every read
  error is an empty value here. Like rdma-core's ibv_devinfo (null_gid) and NVIDIA's show_gids, a
  GID whose interface identifier (low 64 bits) is zero counts as empty.
- types/<i> is "IB/RoCE v1" or "RoCE v2" (the ABI document; ib_cache_gid_type_str in core/cache.c;
  rdma-core's libibverbs reads the same two strings in ibv_query_gid_type).
- Every address of a RoCE net device gets a v1 and a v2 GID. With one IPv4 address a ConnectX
  port usually holds link-local v1/v2 at 0/1 and ::ffff:<ipv4> v1/v2 at 2/3, global IPv6 after
  (show_gids outputs in NVIDIA/nccl-tests#192 and NVIDIA/nccl#1573, ibv_devinfo in NVIDIA/nccl#769).
  The index moves when addresses change or in containers (NVIDIA/nccl#718), hence this lookup.
  Link-local GIDs do not route between hosts (NVIDIA/nccl#769), so they are only chosen by address.
- RoCE LAG: with a bond over both ports of a ConnectX, mlx5 shows one device, mlx5_bond_<n>, whose
  GIDs carry the bond as ndev (show_gids in NVIDIA/nccl#551); nothing special is needed here.
- NCCL picks a RoCE v2 (NCCL_IB_ROCE_VERSION_NUM=2), IPv4 (NCCL_IB_ADDR_FAMILY=AF_INET) GID by
  default, so a net device alone selects its IPv4-mapped GID first.
- No RDMA device usually means mlx5_ib is not loaded; rdma-core's udev rules load it for every
  mlx5_core net device (kernel-boot/rdma-hw-modules.rules).

Everything but read_devices is pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import os
import re

ROCE_V1 = "IB/RoCE v1"
ROCE_V2 = "RoCE v2"
ACTIVE = "ACTIVE"
CLASS_PATH = ("class", "infiniband")
NO_DEVICE_FIX = (
    "load the RDMA driver (modprobe mlx5_ib for ConnectX) and install rdma-core, whose udev rules load it at boot"
)
# net/core/dev.c dev_valid_name: 1 to IFNAMSIZ-1 characters, not "." or "..", no '/', ':' or whitespace.
IFNAME = re.compile(r"^[^/:\s]{1,15}\Z")

NUMBERED = re.compile(r"^\d+:\s*(.*)$")
RATE = re.compile(r"^(\d+(?:\.\d+)?) Gb/sec")
DIGITS = re.compile(r"(\d+)")

# ibv_devinfo -v (rdma-core libibverbs/examples/devinfo.c): "hca_id:\t<name>", "\t\tport:\t<n>",
# "\t<field>:\t\t<value>", and, with -v, "\t\t\tGID[%3d]:\t\t<gid>[, <type>]" per non-empty GID.
DEVINFO_HCA = re.compile(r"^hca_id:\s*(\S+)\s*$")
DEVINFO_PORT = re.compile(r"^\s+port:\s*(\d+)\s*$")
DEVINFO_GID = re.compile(r"^\s+GID\[\s*(\d+)\]:\s+([0-9A-Fa-f:.]+)(?:,\s*(.*\S))?\s*$")
DEVINFO_FIELD = re.compile(r"^\s+([a-z_]+):\s+(.*\S)\s*$")
DEVINFO_CODE = re.compile(r"^(.*\S)\s+\(\d+\)$")
DEVICE_FIELDS = ("fw_ver", "node_guid", "vendor_part_id", "board_id")
PORT_FIELDS = ("state", "phys_state", "link_layer", "active_width", "active_speed")
CROSS_CHECKED = ("fw_ver", "board_id")


# ---------------------------------------------------------------- sysfs


def _read(path):
    """The stripped content of a sysfs file, or None when it cannot be read (EINVAL, ENOENT, EACCES)."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError, ValueError):
        return None


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def _natural(name):
    return [int(part) if part.isdigit() else part for part in DIGITS.split(name)]


def _numbered(text):
    """'4: ACTIVE' -> 'ACTIVE'; None stays None."""
    if text is None:
        return None
    match = NUMBERED.match(text)
    return match.group(1).strip() if match else text


def parse_rate(text):
    """Gbit/s of a port's rate file ('100 Gb/sec (4X EDR)' -> 100.0), or None."""
    match = RATE.match(text or "")
    return float(match.group(1)) if match else None


def gid_entry(index, text, gid_type=None, ndev=None):
    """One GID table entry, or None for an empty slot or text that is not a GID."""
    if not text:
        return None
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if address.packed[8:] == b"\0" * 8:
        return None
    mapped = address.ipv4_mapped
    link_local = mapped.is_link_local if mapped else address.is_link_local
    return {
        "index": index,
        "gid": text,
        "type": gid_type,
        "ndev": ndev,
        "ipv4": str(mapped) if mapped else None,
        "ipv6": None if mapped or link_local else str(address),
        "link_local": link_local,
    }


def _fallback_netdev(device_dir, number):
    """The net device under the device's PCI function, for ports whose GIDs name none (InfiniBand)."""
    base = os.path.join(device_dir, "device", "net")
    names = sorted(_listdir(base), key=_natural)
    if len(names) == 1:
        return names[0]
    # Several ports on one PCI function (mlx4): dev_port is the 0-based port of each net device.
    for name in names:
        if _read(os.path.join(base, name, "dev_port")) == str(number - 1):
            return name
    return None


def read_port(device_dir, number):
    port_dir = os.path.join(device_dir, "ports", str(number))
    gids = []
    for name in sorted((n for n in _listdir(os.path.join(port_dir, "gids")) if n.isdigit()), key=int):
        entry = gid_entry(
            int(name),
            _read(os.path.join(port_dir, "gids", name)),
            _read(os.path.join(port_dir, "gid_attrs", "types", name)) or None,
            _read(os.path.join(port_dir, "gid_attrs", "ndevs", name)) or None,
        )
        if entry:
            gids.append(entry)
    rate = _read(os.path.join(port_dir, "rate"))
    return {
        "number": number,
        "state": _numbered(_read(os.path.join(port_dir, "state"))),
        "phys_state": _numbered(_read(os.path.join(port_dir, "phys_state"))),
        "link_layer": _read(os.path.join(port_dir, "link_layer")),
        "rate": rate,
        "rate_gbps": parse_rate(rate),
        "netdev": next((gid["ndev"] for gid in gids if gid["ndev"]), None) or _fallback_netdev(device_dir, number),
        "gids": gids,
    }


def read_devices(sysfs_root):
    """Every RDMA device under <sysfs_root>/class/infiniband, in natural name order; [] when there is none."""
    base = os.path.join(sysfs_root, *CLASS_PATH)
    devices = []
    for name in sorted(_listdir(base), key=_natural):
        device_dir = os.path.join(base, name)
        numbers = sorted(int(n) for n in _listdir(os.path.join(device_dir, "ports")) if n.isdigit())
        devices.append(
            {
                "name": name,
                "node_guid": _read(os.path.join(device_dir, "node_guid")),
                "node_type": _numbered(_read(os.path.join(device_dir, "node_type"))),
                "fw_ver": _read(os.path.join(device_dir, "fw_ver")) or None,
                "hca_type": _read(os.path.join(device_dir, "hca_type")) or None,
                "board_id": _read(os.path.join(device_dir, "board_id")) or None,
                "ports": [read_port(device_dir, number) for number in numbers],
            }
        )
    return devices


# ---------------------------------------------------------------- ibv_devinfo


def _without_code(value):
    """'PORT_ACTIVE (4)' -> 'PORT_ACTIVE'."""
    match = DEVINFO_CODE.match(value)
    return match.group(1) if match else value


def parse_ibv_devinfo(text):
    """Devices of `ibv_devinfo [-v]` output: name, fw_ver, node_guid, vendor_part_id, board_id and
    ports (number, state, phys_state, link_layer, active_width, active_speed, gids). Other lines
    are ignored; GIDs keep ibv_devinfo's text and its type (None before rdma-core v28)."""
    devices = []
    device = port = None
    for line in text.splitlines():
        match = DEVINFO_HCA.match(line)
        if match:
            device = {"name": match.group(1), "ports": []}
            device.update((field, None) for field in DEVICE_FIELDS)
            devices.append(device)
            port = None
            continue
        if device is None:
            continue
        match = DEVINFO_PORT.match(line)
        if match:
            port = {"number": int(match.group(1)), "gids": []}
            port.update((field, None) for field in PORT_FIELDS)
            device["ports"].append(port)
            continue
        match = DEVINFO_GID.match(line)
        if match and port is not None:
            port["gids"].append({"index": int(match.group(1)), "gid": match.group(2), "type": match.group(3)})
            continue
        match = DEVINFO_FIELD.match(line)
        if not match:
            continue
        field, value = match.groups()
        if port is not None and field in PORT_FIELDS:
            port[field] = _without_code(value)
        elif port is None and field in DEVICE_FIELDS:
            device[field] = value
    return devices


def _same_gid(left, right):
    try:
        return ipaddress.IPv6Address(left) == ipaddress.IPv6Address(right)
    except ValueError:
        return left == right


def merge_ibv_devinfo(devices, reported):
    """Fill fw_ver/board_id that sysfs lacks from ibv_devinfo's ``reported`` devices, in place, and
    return warnings for what the two disagree on (a firmware update not yet active, a GID table
    that changed between the reads, a device only one of them sees)."""
    warnings = []
    by_name = {device["name"]: device for device in devices}
    for other in reported:
        device = by_name.get(other["name"])
        if device is None:
            warnings.append("ibv_devinfo lists %s, which sysfs does not show under class/infiniband" % other["name"])
            continue
        for field in CROSS_CHECKED:
            if other[field] and not device[field]:
                device[field] = other[field]
            elif other[field] and other[field] != device[field]:
                warnings.append(
                    "%s: sysfs %s is %s but ibv_devinfo reports %s"
                    % (device["name"], field, device[field], other[field])
                )
        ports = {port["number"]: port for port in device["ports"]}
        for other_port in other["ports"]:
            port = ports.get(other_port["number"])
            if port is None:
                continue
            gids = {gid["index"]: gid["gid"] for gid in port["gids"]}
            for gid in other_port["gids"]:
                if gid["index"] in gids and not _same_gid(gid["gid"], gids[gid["index"]]):
                    warnings.append(
                        "%s port %d GID %d: sysfs has %s but ibv_devinfo reports %s (the table changed between reads?)"
                        % (device["name"], port["number"], gid["index"], gids[gid["index"]], gid["gid"])
                    )
    return warnings


# ---------------------------------------------------------------- selection


def netdev_problem(name):
    """Why ``name`` cannot be a Linux network interface name, or None when it can."""
    if IFNAME.match(name) and name not in (".", ".."):
        return None
    return "must be a network interface name (1 to 15 characters, none of '/', ':' or whitespace), got %r" % name


def parse_address(text):
    """An IPv4Address or IPv6Address; IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes IPv4. ValueError otherwise."""
    if "/" in text or "%" in text:
        raise ValueError("must be a single IPv4 or IPv6 address without prefix length or zone, got %r" % text)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError("must be an IPv4 or IPv6 address, got %r" % text) from None
    if address.version == 6 and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _gid_address(gid):
    return parse_address(gid["ipv4"]) if gid["ipv4"] else ipaddress.IPv6Address(gid["gid"])


def _shown(gid):
    return gid["ipv4"] or str(ipaddress.IPv6Address(gid["gid"]))


def _ndev(gid, port):
    return gid["ndev"] or port["netdev"]


def _matches(gid, port, netdev, wanted):
    if gid["type"] != ROCE_V2:
        return False
    if netdev and _ndev(gid, port) != netdev:
        return False
    if wanted is not None:
        return _gid_address(gid) == wanted
    return not gid["link_local"]


def _listing(devices, netdev):
    """What each port offers, for the failure message: the ports of ``netdev`` when it has any, else all."""
    ports = [(device, port) for device in devices for port in device["ports"]]
    if netdev:
        own = [(d, p) for d, p in ports if p["netdev"] == netdev or any(g["ndev"] == netdev for g in p["gids"])]
        ports = own or ports
    lines = []
    for device, port in ports:
        ndevs = []
        for gid in port["gids"]:
            if _ndev(gid, port) and _ndev(gid, port) not in ndevs:
                ndevs.append(_ndev(gid, port))
        label = "%s port %d (%s, %s)" % (
            device["name"],
            port["number"],
            ", ".join(ndevs) or port["netdev"] or "no netdev",
            port["state"] or "state unknown",
        )
        addresses = []
        for gid in port["gids"]:
            if gid["type"] == ROCE_V2 and _shown(gid) not in addresses:
                addresses.append(_shown(gid))
        if addresses:
            lines.append("%s has RoCE v2 GIDs for %s" % (label, ", ".join(addresses)))
        elif port["link_layer"] == "InfiniBand":
            lines.append("%s is InfiniBand, without RoCE GIDs" % label)
        else:
            lines.append("%s has no RoCE v2 GID" % label)
    return "; ".join(lines) or "no port"


def _selected(device, port, gid):
    return {
        "device": device["name"],
        "port": port["number"],
        "gid_index": gid["index"],
        "gid": gid["gid"],
        "type": gid["type"],
        "netdev": _ndev(gid, port),
        "ipv4": gid["ipv4"],
        "ipv6": gid["ipv6"],
        "port_state": port["state"],
    }


def select_gid(devices, netdev=None, address=None, source="/sys/class/infiniband"):
    """The RoCE v2 GID for ``netdev`` and/or ``address`` as (entry, problem).

    entry is a dict (device, port, gid_index, gid, type, netdev, ipv4, ipv6, port_state) or None;
    problem says why nothing matched, or, next to an entry, that only a port that is not ACTIVE
    matched. Active ports win; among them IPv4-mapped GIDs (what NCCL uses by default), then the
    lowest device, port and index. ``source`` names where the devices were read, for the message
    when there is none. ValueError for an address that is not one."""
    if not netdev and not address:
        return None, None
    wanted = parse_address(address) if address else None
    if not devices:
        return None, "no RDMA device under %s: %s" % (source, NO_DEVICE_FIX)
    active, inactive = [], []
    for device in devices:
        for port in device["ports"]:
            for gid in port["gids"]:
                if _matches(gid, port, netdev, wanted):
                    (active if port["state"] == ACTIVE else inactive).append((device, port, gid))
    for pool in (active, inactive):
        if not pool:
            continue
        # A stable sort: IPv4-mapped first, device, port and index order otherwise kept.
        device, port, gid = sorted(pool, key=lambda candidate: candidate[2]["ipv4"] is None)[0]
        entry = _selected(device, port, gid)
        if pool is active:
            return entry, None
        return entry, (
            "no ACTIVE port has a matching RoCE v2 GID; selected %s port %d, which is %s (%s): "
            "RDMA traffic fails until its link is up"
            % (device["name"], port["number"], port["state"], port["phys_state"] or "physical state unknown")
        )
    wanted_text = " with %s" % wanted if wanted is not None else " with an IPv4 or global IPv6 address"
    target = " for %s" % netdev if netdev else ""
    return None, "no RoCE v2 GID%s%s: %s" % (target, wanted_text, _listing(devices, netdev))
