# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the gpu_compat module, run against a fake sysfs."""

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import gpu_compat
from ansible_collections.gpufleet.inference.tests.unit.conftest import pci_sysfs, warned

# An RTX 5090 as sysfs shows it, with its HDMI audio function; an H100 SXM (3D controller); a NIC.
RTX_5090 = {"vendor": "0x10de", "class": "0x030000", "device": "0x2b85"}
RTX_5090_AUDIO = {"vendor": "0x10de", "class": "0x040300", "device": "0x22e8"}
H100_SXM = {"vendor": "0x10de", "class": "0x030200", "device": "0x2330"}
MELLANOX_NIC = {"vendor": "0x15b3", "class": "0x020000", "device": "0x101d"}
EIGHT = [f"0000:{bus:02x}:00.0" for bus in (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1)]


def eight_rtx_5090(tmp_path):
    devices = {}
    for bus_id in EIGHT:
        devices[bus_id] = RTX_5090
        devices[bus_id[:-1] + "1"] = RTX_5090_AUDIO
    devices["0000:f1:00.0"] = MELLANOX_NIC
    return str(pci_sysfs(tmp_path, devices, drivers={EIGHT[0]: "nouveau"}))


def test_eight_rtx_5090_pass_with_580_open_and_cuda_12_8(run_module, tmp_path):
    args = {"sysfs_root": eight_rtx_5090(tmp_path), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(gpu_compat, dict(args, cuda_versions=["12.8"]))
    assert result["errors"] == []
    assert result["compat_warnings"] == []
    assert "warnings" not in result
    assert [gpu["bus_id"] for gpu in result["gpus"]] == EIGHT
    assert result["gpus"][0] == {
        "bus_id": EIGHT[0],
        "pci_id": "10de:2b85",
        "name": "NVIDIA GeForce RTX 5090",
        "architecture": "Blackwell",
        "chip": "GB202",
        "driver": "nouveau",
    }
    assert result["gpus"][1]["driver"] is None


def test_555_proprietary_cuda_12_5_on_eight_rtx_5090_fails(run_module, tmp_path):
    args = {
        "sysfs_root": eight_rtx_5090(tmp_path),
        "driver_branch": "555",
        "kernel_modules": "proprietary",
        "cuda_versions": ["12.5"],
    }
    result = run_module(gpu_compat, args, failed=True)
    lines = result["msg"].splitlines()
    assert lines[0] == (
        "3 problems: nvidia_driver_branch=555, nvidia_driver_kernel_modules=proprietary, cuda_toolkit_versions=12.5"
    )
    assert lines[1:] == [error["msg"] for error in result["errors"]]
    assert lines[1].startswith("nvidia_driver_branch=555 cannot drive 8x NVIDIA GeForce RTX 5090 at 0000:01:00.0, ")
    assert lines[1].endswith('Fix: set nvidia_driver_branch: "580" (the current LTS branch).')
    assert all(error["bus_ids"] == EIGHT for error in result["errors"])
    assert len(result["gpus"]) == 8
    # The end-of-life warning is returned and also emitted as an Ansible warning.
    (warning,) = result["compat_warnings"]
    assert warned(result) == [warning["msg"]]


def test_one_problem_is_singular(run_module, tmp_path):
    args = {"sysfs_root": str(pci_sysfs(tmp_path, {"0000:41:00.0": H100_SXM})), "driver_branch": "580"}
    result = run_module(gpu_compat, dict(args, kernel_modules="open", cuda_versions=["11.7"]), failed=True)
    assert result["msg"].splitlines()[0] == "1 problem: cuda_toolkit_versions=11.7"


def test_h100_with_535_and_cuda_12_2(run_module, tmp_path):
    args = {"sysfs_root": str(pci_sysfs(tmp_path, {"0000:41:00.0": H100_SXM})), "kernel_modules": "open"}
    result = run_module(gpu_compat, dict(args, driver_branch="535", cuda_versions=["12.2"]))
    assert result["errors"] == []
    assert [gpu["name"] for gpu in result["gpus"]] == ["NVIDIA H100 SXM5 80GB"]
    assert [warning["variable"] for warning in result["compat_warnings"]] == ["nvidia_driver_branch"]


def test_unknown_gpu_warns(run_module, tmp_path):
    rubin = {"vendor": "0x10de", "class": "0x030200", "device": "0x3002"}
    args = {"sysfs_root": str(pci_sysfs(tmp_path, {"0000:41:00.0": rubin})), "driver_branch": "580"}
    result = run_module(gpu_compat, dict(args, kernel_modules="open"))
    assert result["gpus"][0]["architecture"] == "unknown"
    (warning,) = result["compat_warnings"]
    assert warning["msg"].startswith("Unknown NVIDIA GPU at 0000:41:00.0 (10de:3002) is not in")
    assert warned(result) == [warning["msg"]]


def test_no_gpu_warns_only(run_module, tmp_path):
    devices = {"0000:01:00.1": RTX_5090_AUDIO, "0000:03:00.0": MELLANOX_NIC}
    args = {"sysfs_root": str(pci_sysfs(tmp_path, devices)), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(gpu_compat, args)
    assert result["gpus"] == []
    assert len(result["compat_warnings"]) == 1
    assert warned(result)[0].startswith("No NVIDIA GPU was found")


def test_check_mode(run_module, tmp_path):
    args = {"sysfs_root": eight_rtx_5090(tmp_path), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(gpu_compat, dict(args, _ansible_check_mode=True))
    assert len(result["gpus"]) == 8


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("driver_branch", "5800", "driver_branch must be a driver branch of three digits, such as \"580\"; got '5800'"),
        ("driver_branch", "r580", "driver_branch must be a driver branch of three digits, such as \"580\"; got 'r580'"),
        ("cuda_versions", ["12.8", "12.8.1"], "cuda_versions must hold X.Y versions, such as \"12.8\"; got '12.8.1'"),
        ("cuda_versions", ["cuda12"], "cuda_versions must hold X.Y versions, such as \"12.8\"; got 'cuda12'"),
    ],
)
def test_malformed_options_are_named(run_module, tmp_path, option, value, message):
    args = {"sysfs_root": str(pci_sysfs(tmp_path, {})), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(gpu_compat, dict(args, **{option: value}), failed=True)
    assert result["msg"] == message


def test_kernel_modules_choices(run_module, tmp_path):
    args = {"sysfs_root": str(pci_sysfs(tmp_path, {})), "driver_branch": "580", "kernel_modules": "closed"}
    result = run_module(gpu_compat, args, failed=True)
    assert "kernel_modules" in result["msg"]
    assert "open, proprietary" in result["msg"]
