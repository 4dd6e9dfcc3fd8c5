# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the gpu_compat module, run against a fake sysfs."""

import json

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.inference.plugins.modules import gpu_compat

# An RTX 5090 as sysfs shows it, with its HDMI audio function; an H100 SXM (3D controller); a NIC.
RTX_5090 = {"vendor": "0x10de", "class": "0x030000", "device": "0x2b85"}
RTX_5090_AUDIO = {"vendor": "0x10de", "class": "0x040300", "device": "0x22e8"}
H100_SXM = {"vendor": "0x10de", "class": "0x030200", "device": "0x2330"}
MELLANOX_NIC = {"vendor": "0x15b3", "class": "0x020000", "device": "0x101d"}
EIGHT = [f"0000:{bus:02x}:00.0" for bus in (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1)]


def fake_sysfs(tmp_path, devices, drivers=None):
    root = tmp_path / "sys"
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    for address, attributes in devices.items():
        device = root / "bus" / "pci" / "devices" / address
        device.mkdir()
        for name, value in attributes.items():
            (device / name).write_text(value + "\n")
    for address, driver in (drivers or {}).items():
        target = root / "bus" / "pci" / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (root / "bus" / "pci" / "devices" / address / "driver").symlink_to(target)
    return str(root)


def eight_rtx_5090(tmp_path):
    devices = {}
    for bus_id in EIGHT:
        devices[bus_id] = RTX_5090
        devices[bus_id[:-1] + "1"] = RTX_5090_AUDIO
    devices["0000:f1:00.0"] = MELLANOX_NIC
    return fake_sysfs(tmp_path, devices, drivers={EIGHT[0]: "nouveau"})


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide dict, and goes to the display instead once any
    controller code has been imported in this process: start every test as a module with none."""
    monkeypatch.setattr(ansible_internal, "is_controller", False)
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})


def warned(result):
    """The messages of the Ansible warnings of a result (ansible-core 2.19 returns them as events)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


def run_module(capsys, args, failed=False):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        gpu_compat.main()
    result = json.loads(capsys.readouterr().out)
    assert bool(result.get("failed")) is failed, result
    assert (exc.value.code or 0) == (1 if failed else 0)
    assert result.get("changed") in (False, None)
    return result


def test_eight_rtx_5090_pass_with_580_open_and_cuda_12_8(capsys, tmp_path):
    args = {"sysfs_root": eight_rtx_5090(tmp_path), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(capsys, dict(args, cuda_versions=["12.8"]))
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


def test_555_proprietary_cuda_12_5_on_eight_rtx_5090_fails(capsys, tmp_path):
    args = {
        "sysfs_root": eight_rtx_5090(tmp_path),
        "driver_branch": "555",
        "kernel_modules": "proprietary",
        "cuda_versions": ["12.5"],
    }
    result = run_module(capsys, args, failed=True)
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


def test_one_problem_is_singular(capsys, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path, {"0000:41:00.0": H100_SXM}), "driver_branch": "580"}
    result = run_module(capsys, dict(args, kernel_modules="open", cuda_versions=["11.7"]), failed=True)
    assert result["msg"].splitlines()[0] == "1 problem: cuda_toolkit_versions=11.7"


def test_h100_with_535_and_cuda_12_2(capsys, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path, {"0000:41:00.0": H100_SXM}), "kernel_modules": "open"}
    result = run_module(capsys, dict(args, driver_branch="535", cuda_versions=["12.2"]))
    assert result["errors"] == []
    assert [gpu["name"] for gpu in result["gpus"]] == ["NVIDIA H100 SXM5 80GB"]
    assert [warning["variable"] for warning in result["compat_warnings"]] == ["nvidia_driver_branch"]


def test_unknown_gpu_warns(capsys, tmp_path):
    rubin = {"vendor": "0x10de", "class": "0x030200", "device": "0x3002"}
    args = {"sysfs_root": fake_sysfs(tmp_path, {"0000:41:00.0": rubin}), "driver_branch": "580"}
    result = run_module(capsys, dict(args, kernel_modules="open"))
    assert result["gpus"][0]["architecture"] == "unknown"
    (warning,) = result["compat_warnings"]
    assert warning["msg"].startswith("Unknown NVIDIA GPU at 0000:41:00.0 (10de:3002) is not in")
    assert warned(result) == [warning["msg"]]


def test_no_gpu_warns_only(capsys, tmp_path):
    devices = {"0000:01:00.1": RTX_5090_AUDIO, "0000:03:00.0": MELLANOX_NIC}
    args = {"sysfs_root": fake_sysfs(tmp_path, devices), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(capsys, args)
    assert result["gpus"] == []
    assert len(result["compat_warnings"]) == 1
    assert warned(result)[0].startswith("No NVIDIA GPU was found")


def test_check_mode(capsys, tmp_path):
    args = {"sysfs_root": eight_rtx_5090(tmp_path), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(capsys, dict(args, _ansible_check_mode=True))
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
def test_malformed_options_are_named(capsys, tmp_path, option, value, message):
    args = {"sysfs_root": fake_sysfs(tmp_path, {}), "driver_branch": "580", "kernel_modules": "open"}
    result = run_module(capsys, dict(args, **{option: value}), failed=True)
    assert result["msg"] == message


def test_kernel_modules_choices(capsys, tmp_path):
    args = {"sysfs_root": fake_sysfs(tmp_path, {}), "driver_branch": "580", "kernel_modules": "closed"}
    result = run_module(capsys, args, failed=True)
    assert "kernel_modules" in result["msg"]
    assert "open, proprietary" in result["msg"]
