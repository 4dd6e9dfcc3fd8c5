# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_gpu_compat.py: PCI scan of a fake sysfs, the device-ID table against
pci.ids (fixtures/pci-ids/README.md), and the driver, module flavour and CUDA rules."""

import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _gpu_compat
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_compat import (
    ARCHITECTURES,
    check_compat,
    identify,
    read_gpus,
    scan_pci,
)
from ansible_collections.gpufleet.inference.tests.unit.conftest import pci_sysfs

PCI_IDS = Path(__file__).parent / "fixtures" / "pci-ids" / "nvidia.ids"
# Functions of a GPU board that are not the GPU; the module never reads them (wrong PCI class).
NOT_A_GPU = re.compile(r"Audio|USB|UCSI|NVSwitch|bridge|PCIe host", re.IGNORECASE)

RTX_5090 = {"vendor": "0x10de", "class": "0x030000", "device": "0x2b85"}
RTX_5090_AUDIO = {"vendor": "0x10de", "class": "0x040300", "device": "0x22e8"}
H100_SXM = {"vendor": "0x10de", "class": "0x030200", "device": "0x2330"}
MELLANOX_NIC = {"vendor": "0x15b3", "class": "0x020000", "device": "0x101d"}
EIGHT = [f"0000:{bus:02x}:00.0" for bus in (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1)]


def pci_ids_entries():
    """(device id, name) of every NVIDIA device line of the trimmed pci.ids."""
    entries = []
    for line in PCI_IDS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\t([0-9a-f]{4})  (.+)$", line)
        if match:
            entries.append((int(match.group(1), 16), match.group(2)))
    return entries


def gpu(bus_id, device_id):
    """One read_gpus() entry."""
    found = {"bus_id": bus_id, "pci_id": f"10de:{device_id:04x}", "device_id": device_id}
    found.update(subsystem_id=None, driver=None, **identify(device_id))
    return found


def only(entries, variable):
    matching = [entry for entry in entries if entry["variable"] == variable]
    assert len(matching) == 1, entries
    return matching[0]


# ---------------------------------------------------------------- device table against pci.ids


def test_every_gpu_entry_of_pci_ids_lands_in_its_chips_architecture():
    checked = 0
    for device_id, name in pci_ids_entries():
        codename = re.match(r"^(GK|GM|GP|GV|TU|GA|AD|GH|GB)\d{2}\w*", name)
        if not codename or NOT_A_GPU.search(name):
            continue
        found = identify(device_id)
        assert found["architecture"] == ARCHITECTURES[codename.group(1)], (hex(device_id), name, found)
        assert codename.group(0).startswith(found["chip"]), (hex(device_id), name, found)
        checked += 1
    assert checked > 800


def test_names_are_those_of_pci_ids():
    listed = dict(pci_ids_entries())
    for device_id, name in _gpu_compat._NAMES.items():
        assert f"[{name}]" in listed[device_id], hex(device_id)


def test_chip_ranges_do_not_hide_each_other():
    # A later range that an earlier one covers entirely would never match.
    for index, (first, last, chip) in enumerate(_gpu_compat._CHIPS):
        for earlier in _gpu_compat._CHIPS[:index]:
            assert not (earlier[0] <= first and last <= earlier[1]), chip


@pytest.mark.parametrize(
    ("device_id", "name", "architecture", "chip"),
    [
        (0x2B85, "NVIDIA GeForce RTX 5090", "Blackwell", "GB202"),
        (0x2C02, "NVIDIA GeForce RTX 5080", "Blackwell", "GB203"),
        (0x2BB1, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "Blackwell", "GB202"),
        (0x2BB4, "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Blackwell", "GB202"),
        (0x2BB5, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", "GB202"),
        (0x2901, "NVIDIA B200", "Blackwell", "GB100"),
        (0x3182, "NVIDIA B300 SXM6 AC", "Blackwell", "GB110"),
        (0x2330, "NVIDIA H100 SXM5 80GB", "Hopper", "GH100"),
        (0x2331, "NVIDIA H100 PCIe", "Hopper", "GH100"),
        (0x2321, "NVIDIA H100L 94GB", "Hopper", "GH100"),
        (0x2335, "NVIDIA H200 SXM 141GB", "Hopper", "GH100"),
        (0x2329, "NVIDIA H20", "Hopper", "GH100"),
        (0x20B2, "NVIDIA A100 SXM4 80GB", "Ampere", "GA100"),
        (0x2236, "NVIDIA A10", "Ampere", "GA102"),
        (0x20B7, "NVIDIA A30 PCIe", "Ampere", "GA100"),
        (0x2235, "NVIDIA A40", "Ampere", "GA102"),
        (0x27B8, "NVIDIA L4", "Ada Lovelace", "AD104"),
        (0x26B5, "NVIDIA L40", "Ada Lovelace", "AD102"),
        (0x26B9, "NVIDIA L40S", "Ada Lovelace", "AD102"),
        (0x2684, "NVIDIA GeForce RTX 4090", "Ada Lovelace", "AD102"),
        (0x26B1, "NVIDIA RTX 6000 Ada Generation", "Ada Lovelace", "AD102"),
        (0x1EB8, "NVIDIA Tesla T4", "Turing", "TU104"),
        (0x1DB4, "NVIDIA Tesla V100 PCIe 16GB", "Volta", "GV100"),
        (0x1B06, "NVIDIA GeForce GTX 1080 Ti", "Pascal", "GP102"),
        (0x13F2, "NVIDIA Tesla M60", "Maxwell", "GM204"),
        (0x2B8C, "NVIDIA GB202 GPU", "Blackwell", "GB202"),  # in pci.ids, not in our name list
    ],
)
def test_identify(device_id, name, architecture, chip):
    assert identify(device_id) == {"name": name, "architecture": architecture, "chip": chip}


@pytest.mark.parametrize("device_id", [0x3000, 0x0DE1, 0xFFFF])  # Rubin GR100, Fermi, nothing
def test_identify_unknown(device_id):
    assert identify(device_id) == {"name": "Unknown NVIDIA GPU", "architecture": "unknown", "chip": None}


# ---------------------------------------------------------------- scan_pci


def test_scan_pci_keeps_nvidia_gpus_only(tmp_path):
    devices = {
        "0000:01:00.0": dict(RTX_5090, subsystem_vendor="0x1043", subsystem_device="0x89e7"),
        "0000:01:00.1": RTX_5090_AUDIO,
        "0000:41:00.0": H100_SXM,
        "0000:c1:00.0": MELLANOX_NIC,
    }
    root = pci_sysfs(tmp_path, devices, drivers={"0000:01:00.0": "nouveau", "0000:01:00.1": "snd_hda_intel"})
    assert scan_pci(str(root)) == [
        {
            "bus_id": "0000:01:00.0",
            "pci_id": "10de:2b85",
            "device_id": 0x2B85,
            "subsystem_id": "1043:89e7",
            "driver": "nouveau",
        },
        {"bus_id": "0000:41:00.0", "pci_id": "10de:2330", "device_id": 0x2330, "subsystem_id": None, "driver": None},
    ]


def test_scan_pci_skips_unreadable_entries(tmp_path):
    devices = {
        "0000:01:00.0": RTX_5090,
        "0000:02:00.0": {"vendor": "0x10de", "class": "0x030000"},  # no device file
        "0000:03:00.0": {"vendor": "0x10de", "class": "garbage", "device": "0x2b85"},
        "0000:04:00.0": {},
    }
    root = pci_sysfs(tmp_path, devices)
    assert [found["bus_id"] for found in scan_pci(str(root))] == ["0000:01:00.0"]


def test_scan_pci_without_a_pci_bus(tmp_path):
    assert scan_pci(str(tmp_path)) == []


def test_read_gpus_adds_names(tmp_path):
    root = pci_sysfs(tmp_path, {"0000:01:00.0": RTX_5090})
    (found,) = read_gpus(str(root))
    assert (found["name"], found["architecture"], found["chip"]) == ("NVIDIA GeForce RTX 5090", "Blackwell", "GB202")


# ---------------------------------------------------------------- check_compat: Blackwell


def test_branch_555_cannot_drive_an_rtx_5090():
    result = check_compat([gpu("0000:01:00.0", 0x2B85)], "555", "open", [])
    error = only(result["errors"], "nvidia_driver_branch")
    assert error["value"] == "555"
    assert error["bus_id"] == "0000:01:00.0"
    assert error["msg"] == (
        "nvidia_driver_branch=555 cannot drive NVIDIA GeForce RTX 5090 at 0000:01:00.0 (10de:2b85, Blackwell): "
        'Blackwell needs branch 570 or newer. Fix: set nvidia_driver_branch: "580" (the current LTS branch).'
    )
    assert len(result["errors"]) == 1
    # 555 is also end of life, which is a warning of its own.
    assert only(result["warnings"], "nvidia_driver_branch")["msg"].startswith("nvidia_driver_branch=555 is end of life")


def test_proprietary_modules_cannot_drive_blackwell():
    result = check_compat([gpu("0000:01:00.0", 0x2BB1)], "580", "proprietary", ["12.8"])
    error = only(result["errors"], "nvidia_driver_kernel_modules")
    assert error["value"] == "proprietary"
    assert "NVIDIA RTX PRO 6000 Blackwell Workstation Edition at 0000:01:00.0 (10de:2bb1, Blackwell)" in error["msg"]
    assert error["msg"].endswith("Fix: set nvidia_driver_kernel_modules: open.")
    assert len(result["errors"]) == 1


def test_cuda_12_5_cannot_build_for_blackwell():
    result = check_compat([gpu("0000:01:00.0", 0x2B85)], "580", "open", ["12.5", "12.8"])
    error = only(result["errors"], "cuda_toolkit_versions")
    assert error["value"] == "12.5"
    assert "Blackwell needs CUDA 12.8 or newer" in error["msg"]
    assert "Fix: use 12.8 or newer in cuda_toolkit_versions" in error["msg"]


def test_580_open_cuda_12_8_drives_eight_rtx_5090():
    result = check_compat([gpu(bus_id, 0x2B85) for bus_id in EIGHT], "580", "open", ["12.8"])
    assert result == {"errors": [], "warnings": []}


def test_eight_identical_gpus_give_one_message_per_problem():
    result = check_compat([gpu(bus_id, 0x2B85) for bus_id in EIGHT], "555", "proprietary", ["12.5"])
    assert [error["variable"] for error in result["errors"]] == [
        "nvidia_driver_branch",
        "nvidia_driver_kernel_modules",
        "cuda_toolkit_versions",
    ]
    for error in result["errors"]:
        assert error["bus_ids"] == EIGHT
        assert error["bus_id"] == EIGHT[0]
        assert f"8x NVIDIA GeForce RTX 5090 at {', '.join(EIGHT)} (10de:2b85, Blackwell)" in error["msg"]


def test_different_models_are_not_grouped():
    gpus = [gpu("0000:01:00.0", 0x2B85), gpu("0000:02:00.0", 0x2BB5), gpu("0000:03:00.0", 0x2B85)]
    errors = check_compat(gpus, "560", "open", [])["errors"]
    assert [error["bus_ids"] for error in errors] == [["0000:01:00.0", "0000:03:00.0"], ["0000:02:00.0"]]


def test_grace_hopper_needs_open_modules_but_h100_does_not():
    gpus = [gpu("0000:01:00.0", 0x2342), gpu("0000:02:00.0", 0x2330)]
    error = only(check_compat(gpus, "580", "proprietary", [])["errors"], "nvidia_driver_kernel_modules")
    assert error["bus_ids"] == ["0000:01:00.0"]
    assert "Grace Hopper (GH200) is supported by the open kernel modules only" in error["msg"]


# ---------------------------------------------------------------- check_compat: older GPUs


@pytest.mark.parametrize(("device_id", "architecture"), [(0x1B06, "Pascal"), (0x1DB4, "Volta"), (0x13F2, "Maxwell")])
def test_open_modules_cannot_drive_pre_turing(device_id, architecture):
    result = check_compat([gpu("0000:03:00.0", device_id)], "580", "open", ["12.4"])
    error = only(result["errors"], "nvidia_driver_kernel_modules")
    assert error["value"] == "open"
    assert f"(10de:{device_id:04x}, {architecture})" in error["msg"]
    assert "the open kernel modules support Turing and newer only" in error["msg"]
    assert error["msg"].endswith("Fix: set nvidia_driver_kernel_modules: proprietary.")
    assert len(result["errors"]) == 1


def test_branch_590_dropped_pascal():
    result = check_compat([gpu("0000:03:00.0", 0x1B06)], "590", "proprietary", [])
    error = only(result["errors"], "nvidia_driver_branch")
    assert error["value"] == "590"
    assert error["msg"] == (
        "nvidia_driver_branch=590 cannot drive NVIDIA GeForce GTX 1080 Ti at 0000:03:00.0 (10de:1b06, Pascal): "
        'branches after 580 dropped Pascal. Fix: set nvidia_driver_branch: "580" (the last branch for Maxwell, '
        "Pascal and Volta)."
    )


def test_turing_still_works_on_590_with_open_modules():
    assert check_compat([gpu("0000:03:00.0", 0x1EB8)], "590", "open", ["13.1"])["errors"] == []


def test_cuda_13_dropped_volta():
    error = only(
        check_compat([gpu("0000:03:00.0", 0x1DB4)], "580", "proprietary", ["13.0"])["errors"], "cuda_toolkit_versions"
    )
    assert "CUDA 13.0 and newer dropped Volta. Fix: use CUDA 12.x in cuda_toolkit_versions." in error["msg"]


def test_kepler_ends_at_470():
    result = check_compat([gpu("0000:03:00.0", 0x102D)], "535", "proprietary", ["12.2"])  # Tesla K80
    assert [error["variable"] for error in result["errors"]] == ["nvidia_driver_branch", "cuda_toolkit_versions"]
    assert 'Fix: set nvidia_driver_branch: "470" (the last branch for Kepler).' in result["errors"][0]["msg"]
    # No end-of-life advice to move to 580 when a GPU cannot go there.
    assert [warning["variable"] for warning in result["warnings"]] == []


def test_ga100_needs_less_than_the_rest_of_ampere():
    gpus = [gpu("0000:01:00.0", 0x20B2), gpu("0000:02:00.0", 0x2236)]
    errors = check_compat(gpus, "580", "open", ["11.0"])["errors"]
    assert [error["bus_ids"] for error in errors] == [["0000:02:00.0"]]
    assert "Ampere needs CUDA 11.1 or newer" in errors[0]["msg"]


def test_h100_535_cuda_12_2():
    result = check_compat([gpu("0000:41:00.0", 0x2330)], "535", "open", ["12.2"])
    assert result["errors"] == []
    # 535 works but its support ended: the only warning.
    assert [warning["variable"] for warning in result["warnings"]] == ["nvidia_driver_branch"]


def test_blackwell_and_pascal_cannot_share_a_host():
    gpus = [gpu("0000:01:00.0", 0x2B85), gpu("0000:02:00.0", 0x1B06)]
    errors = check_compat(gpus, "580", "open", [])["errors"]
    conflict = only(errors, None)
    assert conflict["bus_id"] is None
    assert "Blackwell needs the open kernel modules and Pascal the proprietary ones" in conflict["msg"]


def test_blackwell_and_kepler_need_disjoint_branches():
    gpus = [gpu("0000:01:00.0", 0x2B85), gpu("0000:02:00.0", 0x102D)]
    conflict = only(check_compat(gpus, "580", "open", [])["errors"], None)
    assert "Blackwell needs branch 570 or newer and Kepler branch 470 or older" in conflict["msg"]


# ---------------------------------------------------------------- check_compat: unknown and none


def test_unknown_gpu_is_a_warning():
    result = check_compat([gpu("0000:05:00.0", 0x3000), gpu("0000:06:00.0", 0x3000)], "580", "open", ["13.0"])
    assert result["errors"] == []
    (warning,) = result["warnings"]
    assert warning["variable"] is None
    assert warning["bus_ids"] == ["0000:05:00.0", "0000:06:00.0"]
    assert warning["msg"].startswith("2x Unknown NVIDIA GPU at 0000:05:00.0, 0000:06:00.0 (10de:3000) is not in")


def test_no_gpus():
    result = check_compat([], "580", "open", ["12.8"])
    assert result["errors"] == []
    (warning,) = result["warnings"]
    assert warning["bus_id"] is None
    assert warning["msg"].startswith("No NVIDIA GPU was found on the PCI bus")


def test_no_gpus_and_nothing_to_check_is_silent():
    assert check_compat([], None, None, []) == {"errors": [], "warnings": []}


# ---------------------------------------------------------------- check_compat: CUDA and driver


def test_cuda_12_8_needs_at_least_the_cuda_12_branch():
    error = only(check_compat([], "520", "open", ["12.8"])["errors"], "cuda_toolkit_versions")
    assert error["value"] == "12.8"
    assert "needs driver branch 525 or newer" in error["msg"]
    assert "nvidia_driver_branch=520" in error["msg"]


def test_cuda_13_needs_580():
    error = only(
        check_compat([gpu("0000:41:00.0", 0x2330)], "575", "open", ["13.0"])["errors"], "cuda_toolkit_versions"
    )
    assert error["msg"] == (
        "cuda_toolkit_versions has 13.0, which needs driver branch 580 or newer (CUDA 13.x minor-version "
        'compatibility), but nvidia_driver_branch=575. Fix: set nvidia_driver_branch: "580" (the current LTS '
        "branch), or use an older CUDA."
    )


def test_cuda_12_8_on_branch_550_runs_by_minor_version_compatibility_only():
    # CUDA release notes, table 2: any 12.x runs on >= 525. Below 12.8's own driver (570.26), PTX
    # JIT and newer APIs fail: a warning, not a refusal (12.8 on a Blackwell GPU is refused anyway).
    result = check_compat([gpu("0000:41:00.0", 0x2330)], "550", "open", ["12.8"])
    assert result["errors"] == []
    warning = only(result["warnings"], "cuda_toolkit_versions")
    assert warning["value"] == "12.8"
    assert "shipped with driver 570.26, but nvidia_driver_branch=550" in warning["msg"]
    assert 'Fix: set nvidia_driver_branch: "570" or newer.' in warning["msg"]
    assert only(check_compat([gpu("0000:01:00.0", 0x2B85)], "550", "open", ["12.8"])["errors"], "nvidia_driver_branch")


def test_cuda_12_8_on_branch_570():
    result = check_compat([gpu("0000:01:00.0", 0x2B85)], "570", "open", ["12.8"])
    assert result["errors"] == []
    assert [warning["variable"] for warning in result["warnings"]] == ["nvidia_driver_branch"]  # end of life


def test_unknown_cuda_versions_warn():
    warnings = check_compat([], "580", "open", ["12.7", "14.0"])["warnings"]
    assert [warning["value"] for warning in warnings if warning["variable"]] == ["12.7", "14.0"]


@pytest.mark.parametrize(
    ("branch", "modules", "versions"),
    [("58", "open", []), ("r580", "open", []), ("580", "closed", []), ("580", "open", ["12.8.1"])],
)
def test_malformed_input(branch, modules, versions):
    with pytest.raises(ValueError):
        check_compat([], branch, modules, versions)


def test_check_compat_without_branch_or_modules_checks_only_cuda_against_the_gpus():
    gpus = [{"bus_id": "0000:01:00.0", "pci_id": "10de:2b85", "device_id": 0x2B85, **_gpu_compat.identify(0x2B85)}]
    found = _gpu_compat.check_compat(gpus, None, None, ["12.5"])
    assert [error["variable"] for error in found["errors"]] == ["cuda_toolkit_versions"]
    assert found["warnings"] == []
    assert _gpu_compat.check_compat(gpus, None, None, ["12.8"]) == {"errors": [], "warnings": []}


# ------------------------------------------------- branch floors per board, against NVIDIA's list

FIRST_RELEASE = Path(__file__).parent / "fixtures" / "nvidia-driver-readme" / "blackwell-first-release.tsv"


def first_releases():
    """(device id, first release, name) of every Blackwell board NVIDIA's driver README lists."""
    rows = []
    for line in FIRST_RELEASE.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            device, release, name = line.split("\t")
            rows.append((int(device, 16), release, name))
    return rows


def branch_errors(device_id, branch):
    return check_compat([gpu("0000:01:00.0", device_id)], branch, "open", [])["errors"]


@pytest.mark.parametrize(("device_id", "release", "name"), first_releases(), ids=str)
def test_every_blackwell_board_needs_the_branch_that_first_lists_it(device_id, release, name):
    assert identify(device_id)["architecture"] == "Blackwell", name
    first = int(release.split(".")[0])
    assert branch_errors(device_id, str(first)) == [], f"{name} is listed from {release} on"
    before = {570: 565, 575: 570, 580: 575}[first]
    (error,) = branch_errors(device_id, str(before))
    assert error["variable"] == "nvidia_driver_branch"
    assert f"needs branch {first} or newer" in error["msg"]


def test_the_board_table_is_the_list_of_boards_after_branch_570():
    listed = {
        device_id: (release, name) for device_id, release, name in first_releases() if not release.startswith("570.")
    }
    assert _gpu_compat._FIRST_RELEASE == listed


def test_the_rtx_pro_6000_server_edition_is_refused_on_branch_570_naming_its_first_release():
    (error,) = branch_errors(0x2BB5, "570")
    assert error["msg"] == (
        "nvidia_driver_branch=570 cannot drive NVIDIA RTX PRO 6000 Blackwell Server Edition at 0000:01:00.0 "
        "(10de:2bb5, Blackwell): the NVIDIA RTX PRO 6000 Blackwell Server Edition (NVIDIA's driver lists it "
        'from 575.57.08 on) needs branch 575 or newer. Fix: set nvidia_driver_branch: "580" (the current LTS branch).'
    )
    # Its workstation sibling came with branch 570.
    assert branch_errors(0x2BB1, "570") == []


# ------------------------------------------------- CUDA releases newer than the table


def test_a_cuda_release_after_the_table_is_judged_by_its_major_minimum():
    assert (13, 3) not in _gpu_compat.CUDA_RELEASE_DRIVERS
    refused = only(
        check_compat([gpu("0000:01:00.0", 0x2B85)], "575", "open", ["13.3"])["errors"], "cuda_toolkit_versions"
    )
    assert "needs driver branch 580 or newer (CUDA 13.x minor-version compatibility)" in refused["msg"]
    (note,) = check_compat([gpu("0000:01:00.0", 0x2B85)], "580", "open", ["13.3"])["warnings"]
    assert note["value"] == "13.3"
    assert (
        "not a CUDA release gpu_compat knows, so it was checked against the CUDA 13.x minimum (branch 580)"
        in note["msg"]
    )
