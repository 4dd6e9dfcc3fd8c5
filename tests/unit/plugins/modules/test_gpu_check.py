# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the gpu_check module, with a fake nvidia-smi that prints real captured outputs."""

from pathlib import Path

from ansible_collections.gpufleet.inference.plugins.modules import gpu_check
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "nvidia-smi"


def test_passes(run_module, tmp_path):
    args = {
        "nvidia_smi_path": fake_binary(tmp_path, "nvidia-smi", (FIXTURES / "a100-sxm4-v12.xml").read_text()),
        "expected_count": 1,
        "model": "A100",
        "min_memory_mib": 80000,
        "min_driver_version": "535.54.03",
        "max_uncorrectable_ecc": 0,
        "min_pcie_width": 16,
        "min_pcie_gen": 4,
        "expected_bus_ids": ["00000000:01:00.0"],
    }
    result = run_module(gpu_check, args)
    assert result["changed"] is False
    assert result["mismatches"] == []
    assert result["gpu_count"] == 1
    assert result["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_fails_with_every_mismatch_one_line_each(run_module, tmp_path):
    args = {
        "nvidia_smi_path": fake_binary(tmp_path, "nvidia-smi", (FIXTURES / "tesla-t4.xml").read_text()),
        "expected_count": 8,
        "model": "RTX 5090",
        "min_memory_mib": 32607,
        "min_driver_version": "570.86.15",
        "require_persistence": True,
        "min_pcie_width": 16,
    }
    result = run_module(gpu_check, args, failed=True)
    assert result["msg"].splitlines() == [
        "expected 8 GPUs, found 1",
        "driver 515.105.01 is older than the required 570.86.15",
        "GPU 0 (0000:00:1e.0): model Tesla T4 does not match 'RTX 5090'",
        "GPU 0 (0000:00:1e.0): 15360 MiB of memory, expected at least 32607 MiB",
        "GPU 0 (0000:00:1e.0): persistence mode is disabled, expected enabled",
        "GPU 0 (0000:00:1e.0): PCIe link x8, expected at least x16",
    ]
    assert [m["check"] for m in result["mismatches"]] == [
        "count",
        "driver_version",
        "model",
        "memory",
        "persistence",
        "pcie_width",
    ]
    assert result["gpus"][0]["name"] == "Tesla T4"


def test_bad_model_regex(run_module, tmp_path):
    args = {
        "nvidia_smi_path": fake_binary(tmp_path, "nvidia-smi", (FIXTURES / "tesla-t4.xml").read_text()),
        "model": "RTX [",
    }
    result = run_module(gpu_check, args, failed=True)
    assert result["msg"].startswith("model 'RTX [' is not a valid regular expression")
    assert result["mismatches"] == []


def test_missing_binary(run_module, tmp_path):
    result = run_module(gpu_check, {"nvidia_smi_path": str(tmp_path / "nvidia-smi"), "expected_count": 8}, failed=True)
    assert result["msg"].startswith("nvidia-smi not found at ")
