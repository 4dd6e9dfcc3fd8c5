# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the gpu_info module, with a fake nvidia-smi that prints real captured outputs."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import gpu_info
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures"
NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.133"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def fake_nvidia_smi(tmp_path, xml="rtx-3060-v12.xml", topo="v100-sxm2-8gpu-mlx5.txt"):
    """A shell script that answers -q -x and topo -m from fixtures, as nvidia-smi would."""
    script = tmp_path / "nvidia-smi"
    topo_path, xml_path = FIXTURES / "nvidia-smi-topo" / topo, FIXTURES / "nvidia-smi" / xml
    script.write_text(f'#!/bin/sh\nif [ "$1" = topo ]; then cat "{topo_path}"; else cat "{xml_path}"; fi\n')
    script.chmod(0o755)
    return str(script)


def test_reports_the_gpus(run_module, tmp_path):
    result = run_module(gpu_info, {"nvidia_smi_path": fake_nvidia_smi(tmp_path)})
    assert result["changed"] is False
    assert result["driver_version"] == "570.124.04"
    assert result["cuda_version"] == "12.8"
    assert result["gpu_count"] == 1
    assert result["gpus"][0]["name"] == "NVIDIA GeForce RTX 3060"
    assert result["gpus"][0]["memory_total_mib"] == 12288
    assert result["gpus"][0]["pci_bus_id"] == "0000:2d:00.0"
    assert "topology" not in result


def test_topology_on_request(run_module, tmp_path):
    result = run_module(gpu_info, {"nvidia_smi_path": fake_nvidia_smi(tmp_path), "topology": True})
    topology = result["topology"]
    assert topology["matrix"]["GPU2"]["mlx5_0"] == "PIX"
    assert topology["matrix"]["GPU0"]["GPU3"] == "NV2"
    assert topology["matrix"]["mlx5_0"]["mlx5_0"] == "X"
    assert [device["name"] for device in topology["devices"]] == [f"GPU{i}" for i in range(8)] + ["mlx5_0"]


def test_missing_binary(run_module, tmp_path):
    path = str(tmp_path / "bin" / "nvidia-smi")
    result = run_module(gpu_info, {"nvidia_smi_path": path}, failed=True)
    assert result["msg"] == (
        f"nvidia-smi not found at {path}; install the NVIDIA driver (nvidia-smi ships with it) or set nvidia_smi_path"
    )


def test_missing_binary_by_name(run_module):
    result = run_module(gpu_info, {"nvidia_smi_path": "nvidia-smi-not-installed-here"}, failed=True)
    assert result["msg"].startswith("nvidia-smi not found at nvidia-smi-not-installed-here; install the NVIDIA driver")


@pytest.mark.parametrize("text", [NVML_MISMATCH, NO_DRIVER])
def test_driver_that_nvml_cannot_reach(run_module, tmp_path, text):
    path = fake_binary(tmp_path, "nvidia-smi", text + "\n", 9)
    result = run_module(gpu_info, {"nvidia_smi_path": path}, failed=True)
    assert result["rc"] == 9
    assert result["msg"].startswith(f"{path} -q -x failed (rc 9): {' '.join(text.split())}; ")
    assert "the NVIDIA kernel driver is not loaded or does not match" in result["msg"]
    assert "modprobe nvidia" in result["msg"] and "reboot" in result["msg"]
    assert text.splitlines()[0] in result["stdout"]


def test_no_devices_found(run_module, tmp_path):
    result = run_module(
        gpu_info, {"nvidia_smi_path": fake_binary(tmp_path, "nvidia-smi", "No devices were found\n", 6)}, failed=True
    )
    assert "found no GPU (rc 6): No devices were found" in result["msg"]
    assert "not loaded" not in result["msg"]


def test_unreadable_output(run_module, tmp_path):
    path = fake_binary(tmp_path, "nvidia-smi", "garbage\n", 0)
    result = run_module(gpu_info, {"nvidia_smi_path": path}, failed=True)
    assert result["msg"].startswith(f"{path}: nvidia-smi -q -x printed no valid XML")
