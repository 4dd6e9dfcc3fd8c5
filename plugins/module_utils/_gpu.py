# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what nvidia-smi says about a host's GPUs, and check it against what the inventory expects.

Facts (the captured outputs under tests/unit/plugins/module_utils/fixtures/nvidia-smi and
nvidia-smi-topo, see the READMEs there):
- `nvidia-smi -q -x` prints one <nvidia_smi_log> with <driver_version>, <cuda_version> and one
  <gpu id="00000000:61:00.0"> per GPU, after a DOCTYPE line naming the DTD (v10 to v13 seen).
  Missing values are printed as "N/A". A MIG-enabled GPU nests <mig_devices> with their own
  <fb_memory_usage>, so only direct children of <gpu> are read.
- ECC counters moved between DTD versions: v11 and v12 have ecc_errors/volatile/
  {sram,dram}_uncorrectable, v13 splits SRAM into sram_uncorrectable_parity and _secded, older
  ones have ecc_errors/volatile/double_bit/total.
- PCIe current_link_gen drops to 1 while a GPU idles to save power; max_link_gen is the link
  the GPU and its slot can train to, so the minimum generation is checked against it.
- `nvidia-smi topo -m` prints a matrix of GPU (and NIC) rows and columns, then extra columns
  (CPU Affinity, NUMA Affinity, GPU NUMA ID), a 'Legend:' and, on newer drivers, a
  'NIC Legend:' that maps NIC0.. to HCA names such as mlx5_0. Columns are separated by tabs on
  newer drivers and by spaces on older ones.

Everything here but run_nvidia_smi is pure, so the modules and the unit tests share it. The health
agent parses nvidia-smi with it too: the gpufleet-agents package (agents/) holds this file as
gpufleet_agents._gpu, so it imports the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
from collections import Counter
from xml.etree import ElementTree

_DOCTYPE = re.compile(r"<!DOCTYPE[^>\[]*>", re.IGNORECASE)
_INT = re.compile(r"^\s*(\d+)")
_LINK_VALUE = re.compile(r"^(X|NV\d+|SYS|NODE|PHB|PXB|PIX|PXN|N/A)$")

# Used only when the document has no <product_architecture> (DTD v10 and older drivers). The
# names are nvidia-smi's own spellings of the architecture.
_ARCHITECTURES = (
    ("Blackwell", r"RTX PRO \d+ Blackwell|RTX 50\d0|\bGB?[12]00\b|\bB[12]00\b"),
    ("Hopper", r"\bG?H[12]00\b|\bH800\b|\bH20\b"),
    ("Ada Lovelace", r"RTX 40\d0|RTX \d+ Ada|\bL40S?\b|\bL4\b|\bL20\b"),
    ("Ampere", r"RTX 30\d0|\bA100\b|\bA800\b|\bA40\b|\bA30\b|\bA10G?\b|\bA16\b|\bA2\b|RTX A\d+"),
    ("Turing", r"RTX 20\d0|GTX 16\d0|\bT4\b|Quadro RTX|TITAN RTX"),
    ("Volta", r"\bV100|TITAN V\b"),
    ("Pascal", r"GTX 10\d0|\bP100\b|\bP40\b|\bP4\b|Quadro P\d+|TITAN Xp?\b"),
)


class GpuError(Exception):
    """nvidia-smi output that cannot be read."""


def normalize_bus_id(value):
    """'00000000:61:00.0' (nvidia-smi) or '61:00.0' -> '0000:61:00.0', the form sysfs and lspci -D use."""
    if not value:
        return None
    value = value.strip().lower()
    match = re.match(r"^(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$", value)
    if not match:
        return value
    domain, bus, device, function = match.groups()
    return "%04x:%02x:%02x.%s" % (int(domain or "0", 16) & 0xFFFF, int(bus, 16), int(device, 16), function)


def _text(element, path):
    found = element.find(path) if element is not None else None
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "[N/A]", "Unknown Error", "Not Supported", "[Not Supported]") else value


def _int(element, path):
    match = _INT.match(_text(element, path) or "")
    return int(match.group(1)) if match else None


def _enabled(element, path):
    value = (_text(element, path) or "").lower()
    return {"enabled": True, "disabled": False}.get(value)


def _uncorrectable(counters):
    """Sum the uncorrectable counters of one <volatile> or <aggregate>; None when none is known."""
    if counters is None:
        return None
    values = []
    double_bit = counters.find("double_bit")
    if double_bit is not None:
        values.append(_int(double_bit, "total"))
    for child in counters:
        if "uncorrectable" in child.tag:
            values.append(_int(counters, child.tag))
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def architecture_from_name(name):
    """The architecture of a GPU by its product name, or None when the name is not known."""
    for architecture, pattern in _ARCHITECTURES:
        if name and re.search(pattern, name, re.IGNORECASE):
            return architecture
    return None


def _pci_device_id(value):
    """nvidia-smi's '2B8510DE' (device then vendor) -> '10de:2b85', as lspci -n prints it."""
    if value and re.match(r"^(0x)?[0-9a-fA-F]{8}$", value):
        value = value[-8:].lower()
        return "%s:%s" % (value[4:], value[:4])
    return None


def _parse_gpu(gpu, position):
    name = _text(gpu, "product_name")
    minor = _text(gpu, "minor_number")
    link = gpu.find("pci/pci_gpu_link_info")
    ecc = gpu.find("ecc_errors")
    return {
        "index": int(minor) if minor and minor.isdigit() else position,
        "uuid": _text(gpu, "uuid"),
        "name": name,
        "architecture": _text(gpu, "product_architecture") or architecture_from_name(name),
        "pci_bus_id": normalize_bus_id(_text(gpu, "pci/pci_bus_id") or gpu.get("id")),
        "pci_device_id": _pci_device_id(_text(gpu, "pci/pci_device_id")),
        "memory_total_mib": _int(gpu, "fb_memory_usage/total"),
        "persistence_mode": _enabled(gpu, "persistence_mode"),
        "ecc_mode_current": _enabled(gpu, "ecc_mode/current_ecc"),
        "ecc_uncorrectable_volatile_total": _uncorrectable(ecc.find("volatile") if ecc is not None else None),
        "ecc_uncorrectable_aggregate_total": _uncorrectable(ecc.find("aggregate") if ecc is not None else None),
        "pcie_gen_current": _int(link, "pcie_gen/current_link_gen"),
        "pcie_gen_max": _int(link, "pcie_gen/max_link_gen"),
        "pcie_width_current": _int(link, "link_widths/current_link_width"),
        "pcie_width_max": _int(link, "link_widths/max_link_width"),
    }


def parse_smi_xml(text):
    """Parse `nvidia-smi -q -x` into {driver_version, cuda_version, attached_gpus, gpus}."""
    # The DOCTYPE only names the DTD file; drop it, and refuse any other DTD content, so that no
    # entity is ever expanded.
    body = _DOCTYPE.sub("", text or "", count=1)
    if "<!DOCTYPE" in body.upper() or "<!ENTITY" in body.upper():
        raise GpuError("nvidia-smi output holds an inline DTD or entities; refusing to parse it")
    try:
        root = ElementTree.fromstring(body.strip().encode("utf-8"))
    except ElementTree.ParseError as exc:
        raise GpuError("nvidia-smi -q -x printed no valid XML (%s)" % exc) from None
    if root.tag != "nvidia_smi_log":
        raise GpuError("expected an <nvidia_smi_log> document from nvidia-smi -q -x, found <%s>" % root.tag)
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int(root, "attached_gpus"),
        "gpus": [_parse_gpu(gpu, position) for position, gpu in enumerate(root.findall("gpu"))],
    }


def _cells(line, tabs):
    if tabs:
        return [cell.strip() for cell in line.split("\t")]
    return line.split()


_SGR = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text):
    """Parse `nvidia-smi topo -m` into {devices: [...], matrix: {row: {column: link}}}."""
    # Current nvidia-smi underlines the header row (ESC[4m ... ESC[0m) even into a pipe; left in,
    # the header is not found and the GPU0 row is taken for it.
    lines = _SGR.sub("", text or "").splitlines()
    header_at = None
    for number, line in enumerate(lines):
        if line.split()[:1] == ["GPU0"]:
            header_at = number
            break
    if header_at is None:
        raise GpuError("no 'GPU0 ...' header line found in the nvidia-smi topo -m output")

    tabs = "\t" in lines[header_at]
    header = [cell for cell in _cells(lines[header_at], tabs) if cell]
    if not tabs:
        # Space-separated headers split 'CPU Affinity' into two words; rejoin them.
        header = re.split(r"\s{2,}", lines[header_at].strip())

    rows = []
    nic_names = {}
    section = "matrix"
    for line in lines[header_at + 1 :]:
        stripped = line.strip()
        if stripped.startswith("Legend:"):
            section = "legend"
        elif stripped.startswith("NIC Legend:"):
            section = "nic_legend"
        elif section == "nic_legend":
            match = re.match(r"^(NIC\d+):\s*(\S+)$", stripped)
            if match:
                nic_names[match.group(1)] = match.group(2)
        elif section == "matrix" and stripped:
            rows.append(_cells(line, tabs))

    labels = [row[0] for row in rows]
    devices_in_header = [column for column in header if column in labels]
    extra_columns = header[len(devices_in_header) :]
    matrix = {}
    devices = []
    for row in rows:
        label, cells = row[0], row[1:]
        values = cells[: len(devices_in_header)]
        bad = [value for value in values if not _LINK_VALUE.match(value)]
        if bad or len(values) != len(devices_in_header):
            raise GpuError("row %s of nvidia-smi topo -m has unexpected values: %s" % (label, " ".join(cells)))
        matrix[label] = dict(zip(devices_in_header, values))
        # Tab-separated output leaves an empty cell before GPU NUMA ID; NIC rows have no extras.
        extras = [None if cell == "N/A" else cell for cell in cells[len(devices_in_header) :] if cell]
        info = dict(zip(extra_columns, extras))
        devices.append(
            {
                "name": label,
                "kind": "gpu" if re.match(r"^GPU\d+$", label) else "nic",
                "device": nic_names.get(label, label),
                "cpu_affinity": info.get("CPU Affinity"),
                "numa_affinity": info.get("NUMA Affinity"),
                "gpu_numa_id": info.get("GPU NUMA ID"),
            }
        )
    return {"devices": devices, "matrix": matrix}


def _version_key(version):
    return tuple(int(part) for part in re.findall(r"\d+", version or ""))


def _label(gpu):
    return "GPU %s (%s)" % (gpu["index"], gpu["pci_bus_id"])


def _mismatch(gpu, check, expected, actual, message):
    key = None
    if gpu is not None:
        key = gpu["pci_bus_id"] if gpu["pci_bus_id"] else gpu["index"]
    return {"gpu": key, "check": check, "expected": expected, "actual": actual, "message": message}


def _host_mismatches(info, expected_count, min_driver_version, same_model, expected_bus_ids):
    gpus = info["gpus"]
    mismatches = []
    found_ids = [gpu["pci_bus_id"] for gpu in gpus]
    wanted, missing, unexpected = [], [], []
    if expected_bus_ids is not None:
        wanted = [normalize_bus_id(bus_id) for bus_id in expected_bus_ids]
        missing = [bus_id for bus_id in wanted if bus_id not in found_ids]
        unexpected = [bus_id for bus_id in found_ids if bus_id not in wanted]
    details = ", ".join(
        ["%s missing" % bus_id for bus_id in missing] + ["%s unexpected" % bus_id for bus_id in unexpected]
    )

    if expected_count is not None and len(gpus) != expected_count:
        message = "expected %d GPUs, found %d" % (expected_count, len(gpus))
        message += ": " + details if details else ""
        mismatches.append(_mismatch(None, "count", expected_count, len(gpus), message))
    elif details:
        message = "expected GPUs at %s: %s" % (", ".join(wanted), details)
        mismatches.append(_mismatch(None, "bus_ids", wanted, found_ids, message))

    if min_driver_version is not None:
        driver = info.get("driver_version")
        if driver is None:
            message = "driver version unknown, expected at least %s" % min_driver_version
            mismatches.append(_mismatch(None, "driver_version", min_driver_version, driver, message))
        elif _version_key(driver) < _version_key(min_driver_version):
            message = "driver %s is older than the required %s" % (driver, min_driver_version)
            mismatches.append(_mismatch(None, "driver_version", min_driver_version, driver, message))

    counts = Counter(gpu["name"] for gpu in gpus)
    if same_model and len(counts) > 1:
        ordered = sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))
        message = "mixed models: " + ", ".join("%d x %s" % (count, name) for name, count in ordered)
        mismatches.append(_mismatch(None, "same_model", 1, len(counts), message))
    return mismatches


def _gpu_mismatches(gpu, model, pattern, limits):
    """Mismatches of one GPU; ``limits`` holds the per-GPU options of check_gpus."""
    label = _label(gpu)
    mismatches = []

    def add(check, expected, actual, problem):
        mismatches.append(_mismatch(gpu, check, expected, actual, "%s: %s" % (label, problem)))

    if pattern is not None and not pattern.search(gpu["name"] or ""):
        add("model", model, gpu["name"], "model %s does not match %r" % (gpu["name"], model))
    memory, minimum = gpu["memory_total_mib"], limits["min_memory_mib"]
    if minimum is not None and (memory is None or memory < minimum):
        add("memory", minimum, memory, "%s MiB of memory, expected at least %d MiB" % (memory, minimum))
    if limits["require_persistence"] and gpu["persistence_mode"] is not True:
        state = {False: "disabled", None: "unknown"}[gpu["persistence_mode"]]
        add("persistence", True, gpu["persistence_mode"], "persistence mode is %s, expected enabled" % state)
    maximum = limits["max_uncorrectable_ecc"]
    for kind in ("volatile", "aggregate") if maximum is not None else ():
        count = gpu["ecc_uncorrectable_%s_total" % kind]
        if count is not None and count > maximum:
            problem = "%d uncorrectable ECC errors (%s), expected at most %d" % (count, kind, maximum)
            add("ecc_uncorrectable_%s" % kind, maximum, count, problem)
    width, minimum = gpu["pcie_width_current"], limits["min_pcie_width"]
    if minimum is not None and (width is None or width < minimum):
        add("pcie_width", minimum, width, "PCIe link x%s, expected at least x%d" % (width, minimum))
    gen, minimum = gpu["pcie_gen_max"], limits["min_pcie_gen"]
    if minimum is not None and (gen is None or gen < minimum):
        add("pcie_gen", minimum, gen, "PCIe link trains to gen %s at most, expected at least gen %d" % (gen, minimum))
    return mismatches


def check_gpus(
    info,
    expected_count=None,
    model=None,
    min_memory_mib=None,
    min_driver_version=None,
    require_persistence=False,
    max_uncorrectable_ecc=None,
    min_pcie_width=None,
    min_pcie_gen=None,
    same_model=True,
    expected_bus_ids=None,
):
    """Compare parse_smi_xml's result with what is expected; return one mismatch dict per problem.

    Host-wide mismatches come first (gpu None), then each GPU's. Raises ValueError when model is
    not a valid regular expression.
    """
    pattern = None
    if model is not None:
        try:
            pattern = re.compile(model, re.IGNORECASE)
        except re.error as exc:
            raise ValueError("model %r is not a valid regular expression: %s" % (model, exc)) from None
    limits = dict(
        min_memory_mib=min_memory_mib,
        require_persistence=require_persistence,
        max_uncorrectable_ecc=max_uncorrectable_ecc,
        min_pcie_width=min_pcie_width,
        min_pcie_gen=min_pcie_gen,
    )
    mismatches = _host_mismatches(info, expected_count, min_driver_version, same_model, expected_bus_ids)
    for gpu in info["gpus"]:
        mismatches.extend(_gpu_mismatches(gpu, model, pattern, limits))
    return mismatches


# What nvidia-smi prints when the driver is loaded but sees no GPU.
_NO_DEVICES = "No devices were found"


def run_nvidia_smi(module, nvidia_smi_path, topology=False):
    """Run nvidia-smi on the host and return parse_smi_xml's result, plus 'topology' when asked.

    Fails the module with a message that tells a missing binary, a driver that NVML cannot reach
    and output that cannot be read apart.
    """
    if os.sep in nvidia_smi_path:
        binary = nvidia_smi_path if os.path.isfile(nvidia_smi_path) and os.access(nvidia_smi_path, os.X_OK) else None
    else:
        binary = module.get_bin_path(nvidia_smi_path)
    if binary is None:
        module.fail_json(
            msg="nvidia-smi not found at %s; install the NVIDIA driver (nvidia-smi ships with it) "
            "or set nvidia_smi_path" % nvidia_smi_path
        )

    def run(args):
        rc, out, err = module.run_command([binary, *args])
        if rc != 0:
            said = " ".join((out + " " + err).split()) or "nothing"
            if _NO_DEVICES in out + err:
                msg = (
                    "%s %s found no GPU (rc %d): %s; check that the GPUs are on the PCI bus (lspci -d 10de:) "
                    "and that the BIOS enables Above 4G decoding" % (binary, " ".join(args), rc, said)
                )
            else:
                msg = (
                    "%s %s failed (rc %d): %s; the NVIDIA kernel driver is not loaded or does not match the "
                    "installed driver libraries. Load it (modprobe nvidia) or reboot after a driver install "
                    "or upgrade" % (binary, " ".join(args), rc, said)
                )
            module.fail_json(msg=msg, rc=rc, stdout=out, stderr=err)
        return out

    try:
        result = parse_smi_xml(run(["-q", "-x"]))
        if topology:
            result["topology"] = parse_topo(run(["topo", "-m"]))
    except GpuError as exc:
        module.fail_json(msg="%s: %s" % (binary, exc))
    return result
