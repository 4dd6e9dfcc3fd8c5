# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NVIDIA GPUs a host has, from PCI IDs in sysfs, and whether a driver branch, kernel
module flavour and CUDA toolkit versions can drive them. Runs before any driver is installed.

Facts, and where they come from:
- Device IDs and chip codenames: pci.ids 2026.10.24 (https://pci-ids.ucw.cz/, Debian package
  pci.ids 0.0~2026.10.24-1). tests/unit/plugins/module_utils/fixtures/pci-ids/ holds the NVIDIA
  part, and a test proves every GPU entry there lands in its chip's architecture. NVIDIA gives
  each chip blocks of 0x40 or 0x80 IDs, so the ranges below cover whole blocks and new boards of
  a known chip are recognised too. 0x2b85 is the GeForce RTX 5090; the RTX PRO 6000 Blackwell
  boards are 0x2bb1 (Workstation), 0x2bb4 (Max-Q) and 0x2bb5 (Server).
- Kernel module flavours: the open modules support Turing and newer only (they need the GSP);
  Maxwell, Pascal and Volta need the proprietary ones. Grace Hopper and Blackwell are supported
  by the open modules only. NVIDIA Driver Installation Guide, "Kernel Modules",
  https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html, and
  NVIDIA's "NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules" (2024-07-17).
- Branch limits: "The release 580 series will be the last to support GPUs based on the Maxwell,
  Pascal, and Volta architectures" (NVIDIA Unix graphics feature deprecation schedule); 470 was
  the last for Kepler. Blackwell needs R570 (the first branch with the RTX 50 series and B200).
  Older minimums are the driver of the CUDA release that first targeted the architecture:
  Turing 410 (CUDA 10.0), GA100 450 (11.0), GA10x 455 (11.1), Ada and Hopper 520 (11.8). Some
  later boards need a later point release of a branch (HGX B200 needs 570.133.20, NVIDIA GPU
  Operator platform support); a branch cannot say that, so it is not checked.
- Branch floors per board: Blackwell boards that NVIDIA added after branch 570 need the branch
  that first lists them. The list is the "supported GPUs" table of the README.md of NVIDIA's
  open-gpu-kernel-modules at each release tag (https://github.com/NVIDIA/open-gpu-kernel-modules),
  read from 570.86.15 to 595.45.04; _FIRST_RELEASE names, per PCI device id, the first release
  whose table lists it (the RTX PRO 6000 Blackwell Server Edition 575.57.08, B300 and GB300
  580.82.07, GB10 580.94.13). Blackwell has only the open modules, so that table is the whole
  list; for older architectures the proprietary driver can support a board before the open
  modules list it, so they keep their architecture's floor. Within branch 580 GB10 is listed by
  580.94.13 and 580.119.02 and later, not by 580.95.05 or 580.105.08: a branch cannot say that.
- CUDA per architecture: Blackwell needs 12.8 (sm_100/sm_120 first appear there), Ada and
  Hopper 11.8, GA10x 11.1, GA100 11.0, Turing 10.0, Volta 9.0, Pascal 8.0. CUDA 12.0 removed
  Kepler (sm_35/sm_37) and CUDA 13.0 removed Maxwell, Pascal and Volta ("Deprecated
  Architectures" in the CUDA 13.0 release notes).
- CUDA and the driver: the CUDA Toolkit release notes, tables 2 and 3,
  https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html. A toolkit runs on any
  driver of at least its major's minimum (11.x 450, 12.x 525, 13.x 580) through minor-version
  compatibility; below the driver its minor release shipped with, PTX it builds cannot be
  JIT-compiled and newer APIs fail, so that is a warning, not a refusal.
- End of life: NVIDIA's data center support matrix
  (https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html)
  lists R535 (LTS) until June 2026, R570 until February 2026, R580 (LTS) until August 2028, and
  every other older branch (R575, R565, R560, R555, R550, ...) as end of life.

Everything but scan_pci and read_gpus is pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

NVIDIA_VENDOR = 0x10DE
# PCI base class and subclass: 0x0300 VGA controller, 0x0302 3D controller (datacenter GPUs).
GPU_CLASSES = (0x0300, 0x0302)
LTS_BRANCH = "580"
UNKNOWN = "unknown"

BRANCH_VARIABLE = "nvidia_driver_branch"
MODULES_VARIABLE = "nvidia_driver_kernel_modules"
CUDA_VARIABLE = "cuda_toolkit_versions"

# (first, last, chip), first match wins: the single IDs that sit inside another chip's block
# come before that block.
_CHIPS = (
    (0x0FC0, 0x0FFF, "GK107"),
    (0x1024, 0x1024, "GK180"),
    (0x102D, 0x102D, "GK210"),
    (0x1000, 0x103F, "GK110"),
    (0x1180, 0x11BF, "GK104"),
    (0x11C0, 0x11FF, "GK106"),
    (0x1280, 0x12BF, "GK208"),
    (0x130B, 0x130B, "GK110"),
    (0x1340, 0x137F, "GM108"),
    (0x13AD, 0x13AE, "GM204"),  # engineering boards pci.ids lists as "GM204 [GM107 ...]"
    (0x13BE, 0x13BF, "GM204"),
    (0x1380, 0x13BF, "GM107"),
    (0x13C0, 0x13FF, "GM204"),
    (0x1400, 0x143F, "GM206"),
    (0x15C0, 0x15FF, "GP100"),
    (0x1600, 0x167F, "GM204"),
    (0x1720, 0x173F, "GP100"),
    (0x1740, 0x177F, "GM108"),
    (0x1780, 0x17BF, "GM107"),
    (0x17C0, 0x17FF, "GM200"),
    (0x1B00, 0x1B7F, "GP102"),
    (0x1B80, 0x1BFF, "GP104"),
    (0x1C00, 0x1C7F, "GP106"),
    (0x1C80, 0x1CFF, "GP107"),
    (0x1D00, 0x1D7F, "GP108"),
    (0x1D80, 0x1DFF, "GV100"),
    (0x1E00, 0x1E7F, "TU102"),
    (0x1E80, 0x1EFF, "TU104"),
    (0x1F00, 0x1F7F, "TU106"),
    (0x1F80, 0x1FFF, "TU117"),
    (0x2080, 0x20FF, "GA100"),
    (0x2180, 0x21FF, "TU116"),
    (0x2200, 0x227F, "GA102"),
    (0x2300, 0x23FF, "GH100"),
    (0x2400, 0x247F, "GA103"),
    (0x2480, 0x24FF, "GA104"),
    (0x2500, 0x257F, "GA106"),
    (0x2580, 0x25FF, "GA107"),
    (0x2680, 0x26FF, "AD102"),
    (0x2700, 0x277F, "AD103"),
    (0x2780, 0x27FF, "AD104"),
    (0x2800, 0x287F, "AD106"),
    (0x2880, 0x28FF, "AD107"),
    (0x2900, 0x297F, "GB100"),
    (0x2980, 0x29FF, "GB102"),
    (0x2B00, 0x2B7F, "GB10B"),
    (0x2B80, 0x2BFF, "GB202"),
    (0x2C00, 0x2C7F, "GB203"),
    (0x2D00, 0x2D7F, "GB206"),
    (0x2D80, 0x2DFF, "GB207"),
    (0x2E00, 0x2E7F, "GB20B"),
    (0x2F00, 0x2F7F, "GB205"),
    (0x3180, 0x31FF, "GB110"),
    (0x3200, 0x327F, "GB112"),
    (0x3300, 0x337F, "GB120"),
    (0x3400, 0x3400, "GB10B"),
)

# Chip codename prefix -> architecture, spelled as nvidia-smi's product_architecture (_gpu.py).
ARCHITECTURES = {
    "GK": "Kepler",
    "GM": "Maxwell",
    "GP": "Pascal",
    "GV": "Volta",
    "TU": "Turing",
    "GA": "Ampere",
    "AD": "Ada Lovelace",
    "GH": "Hopper",
    "GB": "Blackwell",
}

# pci.ids' names of the boards this collection meets most; other IDs get "NVIDIA <chip> GPU".
_NAMES = {
    0x13BD: "Tesla M10",
    0x13F2: "Tesla M60",
    0x17FD: "Tesla M40",
    0x15F7: "Tesla P100 PCIe 12GB",
    0x15F8: "Tesla P100 PCIe 16GB",
    0x15F9: "Tesla P100 SXM2 16GB",
    0x1B06: "GeForce GTX 1080 Ti",
    0x1B38: "Tesla P40",
    0x1DB1: "Tesla V100 SXM2 16GB",
    0x1DB4: "Tesla V100 PCIe 16GB",
    0x1DB5: "Tesla V100 SXM2 32GB",
    0x1DB6: "Tesla V100 PCIe 32GB",
    0x1DF6: "Tesla V100S PCIe 32GB",
    0x1E04: "GeForce RTX 2080 Ti",
    0x1E07: "GeForce RTX 2080 Ti Rev. A",
    0x1EB8: "Tesla T4",
    0x20B0: "A100 SXM4 40GB",
    0x20B1: "A100 PCIe 40GB",
    0x20B2: "A100 SXM4 80GB",
    0x20B5: "A100 PCIe 80GB",
    0x20B7: "A30 PCIe",
    0x20F1: "A100 PCIe 40GB",
    0x20F3: "A800-SXM4-80GB",
    0x20F5: "A800 80GB PCIe",
    0x2204: "GeForce RTX 3090",
    0x2230: "RTX A6000",
    0x2235: "A40",
    0x2236: "A10",
    0x2237: "A10G",
    0x2321: "H100L 94GB",
    0x2322: "H800 PCIe",
    0x2324: "H800",
    0x2329: "H20",
    0x232C: "H20 HBM3e",
    0x2330: "H100 SXM5 80GB",
    0x2331: "H100 PCIe",
    0x2335: "H200 SXM 141GB",
    0x2339: "H100 SXM5 94GB",
    0x233B: "H200 NVL",
    0x233D: "H100 96GB",
    0x2342: "GH200 120GB / 480GB",
    0x2348: "GH200 144G HBM3e",
    0x2684: "GeForce RTX 4090",
    0x2704: "GeForce RTX 4080",
    0x26B1: "RTX 6000 Ada Generation",
    0x26B5: "L40",
    0x26B9: "L40S",
    0x26BA: "L20",
    0x27B8: "L4",
    0x2901: "B200",
    0x2909: "HGX B200 168GB",
    0x290A: "B200",
    0x2941: "HGX GB200",
    0x2B85: "GeForce RTX 5090",
    0x2B87: "GeForce RTX 5090 D",
    0x2BB1: "RTX PRO 6000 Blackwell Workstation Edition",
    0x2BB4: "RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    0x2BB5: "RTX PRO 6000 Blackwell Server Edition",
    0x2C02: "GeForce RTX 5080",
    0x2C05: "GeForce RTX 5070 Ti",
    0x2E12: "GB10",
    0x3182: "B300 SXM6 AC",
    0x31C2: "GB300",
}

# What an architecture needs. min_branch/max_branch: driver branches; min_cuda: (major, minor);
# max_cuda_major: newest CUDA major that still targets it; open/proprietary: kernel module
# flavours that drive it.
_LAST_FOR_OLD = "the last branch for Maxwell, Pascal and Volta"
_REQUIREMENTS = {
    "Kepler": dict(max_branch=470, max_note="the last branch for Kepler", max_cuda_major=11, open=False),
    "Maxwell": dict(max_branch=580, max_note=_LAST_FOR_OLD, max_cuda_major=12, open=False),
    "Pascal": dict(max_branch=580, max_note=_LAST_FOR_OLD, max_cuda_major=12, min_cuda=(8, 0), open=False),
    "Volta": dict(max_branch=580, max_note=_LAST_FOR_OLD, max_cuda_major=12, min_cuda=(9, 0), open=False),
    "Turing": dict(min_branch=410, min_cuda=(10, 0)),
    "Ampere": dict(min_branch=455, min_cuda=(11, 1)),
    "Ada Lovelace": dict(min_branch=520, min_cuda=(11, 8)),
    "Hopper": dict(min_branch=520, min_cuda=(11, 8)),
    "Blackwell": dict(min_branch=570, min_cuda=(12, 8), proprietary=False),
}
# Narrower facts than an architecture's; "basis" is who the message says needs it.
_CHIP_REQUIREMENTS = {"GA100": dict(min_branch=450, min_cuda=(11, 0), basis="GA100 (Ampere)")}
_DEVICE_REQUIREMENTS = dict(
    (device_id, dict(proprietary=False, basis="Grace Hopper (GH200)")) for device_id in (0x2342, 0x2348)
)
# Blackwell boards whose first driver release is after branch 570: PCI device id -> (the first
# release whose README "supported GPUs" table lists it, the name that table gives).
_FIRST_RELEASE = {
    0x29BB: ("580.82.07", "NVIDIA DRIVE P2021"),
    0x2B8C: ("580.76.05", "NVIDIA GeForce RTX 5090 D V2"),
    0x2BB2: ("580.95.05", "NVIDIA RTX PRO 6000D Blackwell Workstation Edition"),
    0x2BB5: ("575.57.08", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    0x2BB9: ("580.82.07", "NVIDIA RTX 6000D"),
    0x2BBC: ("580.95.05", "NVIDIA RTX PRO 6000D Blackwell Max-Q Workstation Edition"),
    0x2C3A: ("580.142", "NVIDIA RTX PRO 4500 Blackwell Server Edition"),
    0x2C77: ("580.94.10", "NVIDIA RTX PRO 5000 Blackwell Embedded GPU"),
    0x2D83: ("575.64.03", "NVIDIA GeForce RTX 5050"),
    0x2E12: ("580.94.13", "NVIDIA GB10"),
    0x3182: ("580.82.07", "NVIDIA B300 SXM6 AC"),
    0x31C2: ("580.82.07", "NVIDIA GB300"),
}
_DEVICE_REQUIREMENTS.update(
    (
        device_id,
        dict(
            min_branch=int(release.split(".", 1)[0]),
            basis="the %s (NVIDIA's driver lists it from %s on)" % (name, release),
        ),
    )
    for device_id, (release, name) in _FIRST_RELEASE.items()
)

# CUDA toolkit minor release -> the Linux driver it shipped with: the CUDA Toolkit release notes,
# "CUDA Toolkit and Corresponding Driver Versions" (table 3), the GA row of each release
# (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html). A release missing here
# is still judged by its major's minimum (CUDA_MAJOR_BRANCHES) and named in a warning; to add
# one, add its GA row's Linux driver.
CUDA_RELEASE_DRIVERS = {
    (11, 0): "450.51.05",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
    (13, 1): "590.44.01",
    (13, 2): "595.45.04",
}
# CUDA major -> the least driver branch of its minor-version compatibility: the release notes'
# "Driver Range for Minor Version Compatibility" (table 2) and NVIDIA's CUDA Compatibility guide
# (https://docs.nvidia.com/deploy/cuda-compatibility/): 11.x 450.80.02, 12.x 525.60.13, 13.x 580.
# A major missing here is not judged at all, with a warning.
CUDA_MAJOR_BRANCHES = {11: 450, 12: 525, 13: 580}


def _read(path):
    with open(path) as handle:
        return handle.read().strip()


def scan_pci(sysfs_root):
    """The NVIDIA VGA and 3D controllers under <sysfs_root>/bus/pci/devices, sorted by bus id.

    Each is {bus_id, pci_id, device_id, subsystem_id, driver}; driver is the bound kernel driver
    (nvidia, nouveau, vfio-pci) or None. Entries that cannot be read are skipped.
    """
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except (IOError, OSError):
        return []
    found = []
    for name in names:
        device = os.path.join(base, name)
        try:
            if int(_read(os.path.join(device, "vendor")), 16) != NVIDIA_VENDOR:
                continue
            if int(_read(os.path.join(device, "class")), 16) >> 8 not in GPU_CLASSES:
                continue
            device_id = int(_read(os.path.join(device, "device")), 16)
        except (IOError, OSError, ValueError):
            continue
        try:
            subsystem_id = "%04x:%04x" % (
                int(_read(os.path.join(device, "subsystem_vendor")), 16),
                int(_read(os.path.join(device, "subsystem_device")), 16),
            )
        except (IOError, OSError, ValueError):
            subsystem_id = None
        driver = os.path.join(device, "driver")
        found.append(
            {
                "bus_id": name,
                "pci_id": "%04x:%04x" % (NVIDIA_VENDOR, device_id),
                "device_id": device_id,
                "subsystem_id": subsystem_id,
                "driver": os.path.basename(os.path.realpath(driver)) if os.path.lexists(driver) else None,
            }
        )
    return found


def identify(device_id):
    """{name, architecture, chip} of an NVIDIA PCI device id; architecture 'unknown' and chip None
    for an id outside the table."""
    chip = next((chip for first, last, chip in _CHIPS if first <= device_id <= last), None)
    if chip is None:
        return {"name": "Unknown NVIDIA GPU", "architecture": UNKNOWN, "chip": None}
    name = _NAMES.get(device_id)
    return {
        "name": "NVIDIA %s" % name if name else "NVIDIA %s GPU" % chip,
        "architecture": ARCHITECTURES[chip[:2]],
        "chip": chip,
    }


def read_gpus(sysfs_root):
    """scan_pci() entries, each with identify()'s name, architecture and chip added."""
    return [dict(gpu, **identify(gpu["device_id"])) for gpu in scan_pci(sysfs_root)]


# One sentence per problem: what is wrong, on which GPU, what it needs, and the fix. {gpus}
# stands for the GPU, or the GPUs of one model that share the problem, and their bus ids.
_LTS_FIX = 'Fix: set nvidia_driver_branch: "580" (the current LTS branch).'
_MESSAGES = {
    "unknown_gpu": "{gpus} (%(pci_id)s) is not in gpu_compat's device table, so nvidia_driver_branch, "
    "nvidia_driver_kernel_modules and cuda_toolkit_versions were not checked against it. Fix: check "
    "NVIDIA's list of GPUs supported by the driver branch by hand.",
    "branch_too_old": "nvidia_driver_branch=%(branch)d cannot drive %(where)s: %(basis)s needs branch "
    "%(min_branch)d or newer. " + _LTS_FIX,
    "branch_too_new": "nvidia_driver_branch=%(branch)d cannot drive %(where)s: branches after "
    '%(max_branch)d dropped %(basis)s. Fix: set nvidia_driver_branch: "%(max_branch)d" (%(max_note)s).',
    "open_unsupported": "nvidia_driver_kernel_modules=open cannot drive %(where)s: the open kernel modules "
    "support Turing and newer only. Fix: set nvidia_driver_kernel_modules: proprietary.",
    "proprietary_unsupported": "nvidia_driver_kernel_modules=proprietary cannot drive %(where)s: %(basis)s "
    "is supported by the open kernel modules only. Fix: set nvidia_driver_kernel_modules: open.",
    "cuda_too_old": "cuda_toolkit_versions has %(cuda)s, which cannot build for %(where)s: %(basis)s needs "
    "CUDA %(min_cuda)s or newer. Fix: use %(min_cuda)s or newer in cuda_toolkit_versions.",
    "cuda_too_new": "cuda_toolkit_versions has %(cuda)s, which cannot build for %(where)s: CUDA "
    "%(dropped)d.0 and newer dropped %(basis)s. Fix: use CUDA %(last)d.x in cuda_toolkit_versions.",
    "no_single_driver": "No single NVIDIA driver can drive the GPUs of this host together: %(reasons)s. "
    "Fix: move one kind of GPU to other hosts.",
    "cuda_major_unknown": "cuda_toolkit_versions has %(cuda)s, a CUDA major gpu_compat has no driver table "
    "for, so it was not checked against nvidia_driver_branch=%(branch)d. Fix: check the CUDA release "
    "notes by hand.",
    "cuda_needs_branch": "cuda_toolkit_versions has %(cuda)s, which needs driver branch %(least)d or newer "
    "(CUDA %(major)d.x minor-version compatibility), but nvidia_driver_branch=%(branch)d. "
    'Fix: set nvidia_driver_branch: "580" (the current LTS branch), or use an older CUDA.',
    "cuda_release_unknown": "cuda_toolkit_versions has %(cuda)s, which is not a CUDA release gpu_compat "
    "knows, so it was checked against the CUDA %(major)d.x minimum (branch %(least)d) only. Fix: check "
    "the version.",
    "cuda_minor_compat": "cuda_toolkit_versions has %(cuda)s, which shipped with driver %(driver)s, but "
    "nvidia_driver_branch=%(branch)d: it runs through CUDA minor-version compatibility, but PTX that "
    "CUDA %(cuda)s builds cannot be JIT-compiled by that driver and newer CUDA APIs fail. "
    'Fix: set nvidia_driver_branch: "%(driver_branch)s" or newer.',
    "no_gpu": "No NVIDIA GPU was found on the PCI bus, so nvidia_driver_branch, nvidia_driver_kernel_modules "
    "and cuda_toolkit_versions were not checked against any GPU. Fix: check that this host belongs in "
    "the GPU group and that lspci shows its GPUs.",
    "end_of_life": "nvidia_driver_branch=%(branch)d is end of life: NVIDIA supports no branch older than "
    "580 any more (R570 ended in February 2026 and R535, the previous LTS branch, in June 2026). " + _LTS_FIX,
}


def _problem(severity, variable, value, kind, **fields):
    """(severity, variable, value, message); the message may still hold {gpus}."""
    return (severity, variable, value, _MESSAGES[kind] % fields)


def _requirements(gpu):
    found = dict(_REQUIREMENTS.get(gpu["architecture"], {}), basis=gpu["architecture"])
    found.update(_CHIP_REQUIREMENTS.get(gpu.get("chip"), {}))
    found.update(_DEVICE_REQUIREMENTS.get(gpu.get("device_id"), {}))
    return found


def _version(text):
    major, minor = text.split(".")
    return int(major), int(minor)


def _gpu_problems(gpu, branch, kernel_modules, cuda_versions):
    if gpu["architecture"] == UNKNOWN:
        return [_problem("warning", None, None, "unknown_gpu", pci_id=gpu["pci_id"], branch=branch)]
    needs = _requirements(gpu)
    fields = dict(needs, branch=branch, where="{gpus} (%s, %s)" % (gpu["pci_id"], gpu["architecture"]))
    problems = []
    if branch is not None and branch < needs.get("min_branch", 0):
        problems.append(_problem("error", BRANCH_VARIABLE, str(branch), "branch_too_old", **fields))
    if branch is not None and branch > needs.get("max_branch", 999):
        problems.append(_problem("error", BRANCH_VARIABLE, str(branch), "branch_too_new", **fields))
    if kernel_modules == "open" and not needs.get("open", True):
        problems.append(_problem("error", MODULES_VARIABLE, kernel_modules, "open_unsupported", **fields))
    if kernel_modules == "proprietary" and not needs.get("proprietary", True):
        problems.append(_problem("error", MODULES_VARIABLE, kernel_modules, "proprietary_unsupported", **fields))
    for text in cuda_versions:
        version = _version(text)
        if version < needs.get("min_cuda", (0, 0)):
            fields["min_cuda"] = "%d.%d" % needs["min_cuda"]
            problems.append(_problem("error", CUDA_VARIABLE, text, "cuda_too_old", cuda=text, **fields))
        last = needs.get("max_cuda_major", 99)
        if version[0] > last:
            problems.append(
                _problem("error", CUDA_VARIABLE, text, "cuda_too_new", cuda=text, dropped=last + 1, last=last, **fields)
            )
    return problems


def _conflicts(gpus):
    """One error when no single branch, or no single module flavour, drives every known GPU."""
    known = {}
    for gpu in gpus:
        if gpu["architecture"] != UNKNOWN:
            needs = _requirements(gpu)
            known.setdefault(needs["basis"], needs)
    low = max([(needs.get("min_branch", 0), basis) for basis, needs in known.items()] or [(0, None)])
    high = min([(needs.get("max_branch", 999), basis) for basis, needs in known.items()] or [(999, None)])
    open_only = sorted(basis for basis, needs in known.items() if not needs.get("proprietary", True))
    proprietary_only = sorted(basis for basis, needs in known.items() if not needs.get("open", True))
    reasons = []
    if low[0] > high[0]:
        reasons.append("%s needs branch %d or newer and %s branch %d or older" % (low[1], low[0], high[1], high[0]))
    if open_only and proprietary_only:
        reasons.append(
            "%s needs the open kernel modules and %s the proprietary ones"
            % (" and ".join(open_only), " and ".join(proprietary_only))
        )
    return [_problem("error", None, None, "no_single_driver", reasons="; ".join(reasons))] if reasons else []


def _cuda_driver_problems(branch, cuda_versions):
    problems = []
    if branch is None:
        return problems
    for text in cuda_versions:
        version = _version(text)
        least = CUDA_MAJOR_BRANCHES.get(version[0])
        driver = CUDA_RELEASE_DRIVERS.get(version)
        fields = dict(cuda=text, branch=branch, major=version[0], least=least, driver=driver)
        if least is None:
            problems.append(_problem("warning", CUDA_VARIABLE, text, "cuda_major_unknown", **fields))
        elif branch < least:
            problems.append(_problem("error", CUDA_VARIABLE, text, "cuda_needs_branch", **fields))
        elif driver is None:
            problems.append(_problem("warning", CUDA_VARIABLE, text, "cuda_release_unknown", **fields))
        elif branch < int(driver.split(".")[0]):
            fields["driver_branch"] = driver.split(".")[0]
            problems.append(_problem("warning", CUDA_VARIABLE, text, "cuda_minor_compat", **fields))
    return problems


def _describe(gpus):
    """'NVIDIA GeForce RTX 5090 at 0000:01:00.0', or '8x NVIDIA GeForce RTX 5090 at a, b, ...'."""
    count = "%dx " % len(gpus) if len(gpus) > 1 else ""
    return "%s%s at %s" % (count, gpus[0]["name"], ", ".join(gpu["bus_id"] for gpu in gpus))


def check_compat(gpus, driver_branch, kernel_modules, cuda_versions):
    """Check GPUs (read_gpus() entries) against a driver branch ("580"), a kernel module flavour
    ("open" or "proprietary") and CUDA toolkit versions (["12.8"], may be empty). A driver_branch or
    kernel_modules of None leaves the checks of that setting out (the cuda_toolkit role checks only
    its CUDA versions against the GPUs).

    Returns {errors, warnings}, lists of {bus_id, bus_ids, variable, value, msg}. A problem shared
    by several GPUs of one model is one entry naming all their bus ids; bus_id is the first of
    them, and None for a problem of no GPU in particular. Raises ValueError on malformed input.
    """
    if driver_branch is not None and not re.match(r"^\d{3}\Z", str(driver_branch)):
        raise ValueError("driver_branch must be three digits, such as 580; got %r" % (driver_branch,))
    if kernel_modules not in ("open", "proprietary", None):
        raise ValueError("kernel_modules must be open or proprietary; got %r" % (kernel_modules,))
    cuda_versions = [str(text) for text in cuda_versions]
    for text in cuda_versions:
        if not re.match(r"^\d+\.\d+\Z", text):
            raise ValueError("CUDA versions must be X.Y, such as 12.8; got %r" % (text,))
    branch = None if driver_branch is None else int(driver_branch)

    grouped = []  # [problem, [gpus]] in order of first appearance
    for gpu in gpus:
        for problem in _gpu_problems(gpu, branch, kernel_modules, cuda_versions):
            # The message names the model and its PCI id, so equal messages mean equal GPUs.
            match = next((entry for entry in grouped if entry[0] == problem), None)
            if match:
                match[1].append(gpu)
            else:
                grouped.append([problem, [gpu]])
    others = _conflicts(gpus) + _cuda_driver_problems(branch, cuda_versions)
    if not gpus and (branch is not None or kernel_modules is not None or cuda_versions):
        # Only a check that had something to check against warns; a caller that only reads the
        # GPUs (the vllm role, on a CPU host) gets none.
        others.append(_problem("warning", None, None, "no_gpu"))
    elif (
        branch is not None
        and branch < int(LTS_BRANCH)
        and all(_requirements(gpu).get("max_branch", 999) >= int(LTS_BRANCH) for gpu in gpus)
    ):
        others.append(_problem("warning", BRANCH_VARIABLE, str(branch), "end_of_life", branch=branch))
    grouped.extend([problem, []] for problem in others)

    result = {"errors": [], "warnings": []}
    for (severity, variable, value, message), members in grouped:
        result[severity + "s"].append(
            {
                "bus_id": members[0]["bus_id"] if members else None,
                "bus_ids": [gpu["bus_id"] for gpu in members],
                "variable": variable,
                "value": value,
                "msg": message.replace("{gpus}", _describe(members)) if members else message,
            }
        )
    return result
