# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the gpu_check module, with a fake nvidia-smi that prints real captured outputs."""

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.inference.plugins.modules import gpu_check

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "nvidia-smi"


def fake_nvidia_smi(tmp_path, xml):
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncat "{FIXTURES / xml}"\n')
    script.chmod(0o755)
    return str(script)


def run_module(capsys, args, expect_rc=0):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        gpu_check.main()
    assert (exc.value.code or 0) == expect_rc
    return json.loads(capsys.readouterr().out)


def test_passes(capsys, tmp_path):
    args = {
        "nvidia_smi_path": fake_nvidia_smi(tmp_path, "a100-sxm4-v12.xml"),
        "expected_count": 1,
        "model": "A100",
        "min_memory_mib": 80000,
        "min_driver_version": "535.54.03",
        "max_uncorrectable_ecc": 0,
        "min_pcie_width": 16,
        "min_pcie_gen": 4,
        "expected_bus_ids": ["00000000:01:00.0"],
    }
    result = run_module(capsys, args)
    assert result["changed"] is False
    assert result["mismatches"] == []
    assert result["gpu_count"] == 1
    assert result["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_fails_with_every_mismatch_one_line_each(capsys, tmp_path):
    args = {
        "nvidia_smi_path": fake_nvidia_smi(tmp_path, "tesla-t4.xml"),
        "expected_count": 8,
        "model": "RTX 5090",
        "min_memory_mib": 32607,
        "min_driver_version": "570.86.15",
        "require_persistence": True,
        "min_pcie_width": 16,
    }
    result = run_module(capsys, args, expect_rc=1)
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


def test_bad_model_regex(capsys, tmp_path):
    args = {"nvidia_smi_path": fake_nvidia_smi(tmp_path, "tesla-t4.xml"), "model": "RTX ["}
    result = run_module(capsys, args, expect_rc=1)
    assert result["msg"].startswith("model 'RTX [' is not a valid regular expression")
    assert result["mismatches"] == []


def test_missing_binary(capsys, tmp_path):
    result = run_module(capsys, {"nvidia_smi_path": str(tmp_path / "nvidia-smi"), "expected_count": 8}, expect_rc=1)
    assert result["msg"].startswith("nvidia-smi not found at ")
