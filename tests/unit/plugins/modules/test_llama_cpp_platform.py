# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the llama_cpp_platform module, run against a fake sysfs, os-release and nvidia-smi."""

import platform

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import llama_cpp_platform
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary, pci_sysfs

DEBIAN_12 = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'
# An RTX 5090 (Blackwell, 10de:2b85) as sysfs shows it, plus its HDMI audio function and a non-NVIDIA NIC.
B6000 = {"vendor": "0x10de", "class": "0x030000", "device": "0x2b85"}
B6000_AUDIO = {"vendor": "0x10de", "class": "0x040300", "device": "0x22e8"}
H100_3D = {"vendor": "0x10de", "class": "0x030200", "device": "0x2330"}
MELLANOX_NIC = {"vendor": "0x15b3", "class": "0x020000", "device": "0x101d"}
NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


@pytest.fixture
def os_release(tmp_path):
    path = tmp_path / "os-release"
    path.write_text(DEBIAN_12)
    return path


def args_for(tmp_path, os_release, devices, smi):
    return {
        "sysfs_root": str(pci_sysfs(tmp_path, devices)),
        "os_release_path": str(os_release),
        "nvidia_smi_path": str(smi),
    }


def test_blackwell_host(run_module, tmp_path, os_release):
    devices = {"0000:01:00.0": B6000, "0000:01:00.1": B6000_AUDIO, "0000:02:00.0": B6000, "0000:03:00.0": MELLANOX_NIC}
    smi = fake_binary(tmp_path, "nvidia-smi", "12.0\n12.0\n")
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, devices, smi))
    assert result["platform_key"] == f"debian-12-{platform.machine()}"
    assert result["nvidia_gpu_count"] == 2
    assert result["nvidia_pci_ids"] == ["10de:2b85", "10de:2b85"]
    assert result["cuda_compute_caps"] == ["12.0", "12.0"]
    assert result["cuda_architectures"] == ["120"]
    assert result["nvidia_smi_error"] == ""
    assert (tmp_path / "nvidia-smi.args").read_text() == "--query-gpu=compute_cap --format=csv,noheader\n"


def test_mixed_gpus_and_3d_controllers(run_module, tmp_path, os_release):
    devices = {"0000:01:00.0": B6000, "0000:41:00.0": H100_3D}
    smi = fake_binary(tmp_path, "nvidia-smi", "12.0\n9.0\n")
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, devices, smi))
    assert result["nvidia_pci_ids"] == ["10de:2b85", "10de:2330"]
    assert result["cuda_architectures"] == ["90", "120"]


def test_nvml_failure_is_reported_not_failed(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi", NVML_MISMATCH + "\n", 9)
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, {"0000:01:00.0": B6000}, smi))
    assert result["nvidia_gpu_count"] == 1
    assert result["cuda_compute_caps"] == []
    assert result["cuda_architectures"] == []
    assert result["nvidia_smi_error"] == f"{smi} failed (rc=9): {NVML_MISMATCH}"


def test_nvml_failure_on_stderr(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi", rc=9, stderr=NVML_MISMATCH + "\n")
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, {"0000:01:00.0": B6000}, smi))
    assert result["nvidia_smi_error"] == f"{smi} failed (rc=9): {NVML_MISMATCH}"


def test_unparsable_compute_cap(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi", "[N/A]\n")
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, {"0000:01:00.0": B6000}, smi))
    assert result["cuda_compute_caps"] == ["[N/A]"]
    assert result["cuda_architectures"] == []
    assert result["nvidia_smi_error"] == "nvidia-smi reported not a CUDA compute capability: '[N/A]'"


@pytest.mark.parametrize("smi", ["/nonexistent/bin/nvidia-smi", "gpufleet-no-such-nvidia-smi"])
def test_missing_nvidia_smi(run_module, tmp_path, os_release, smi):
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, {"0000:01:00.0": B6000}, smi))
    assert result["nvidia_gpu_count"] == 1
    assert result["cuda_architectures"] == []
    assert result["nvidia_smi_error"] == (
        f"{smi} not found; install the NVIDIA driver first or set llama_cpp_cuda_architectures"
    )


def test_no_gpus_does_not_run_nvidia_smi(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi", "9.0\n")
    devices = {"0000:01:00.1": B6000_AUDIO, "0000:03:00.0": MELLANOX_NIC}
    result = run_module(llama_cpp_platform, args_for(tmp_path, os_release, devices, smi))
    assert not (tmp_path / "nvidia-smi.args").exists()
    assert result["nvidia_gpu_count"] == 0
    assert result["nvidia_pci_ids"] == []
    assert result["cuda_compute_caps"] == []
    assert result["cuda_architectures"] == []
    assert result["nvidia_smi_error"] == ""


def test_no_pci_bus_at_all(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi")
    args = {"sysfs_root": str(tmp_path / "nosys"), "os_release_path": str(os_release), "nvidia_smi_path": str(smi)}
    result = run_module(llama_cpp_platform, args)
    assert result["nvidia_gpu_count"] == 0
    assert not (tmp_path / "nvidia-smi.args").exists()


def test_device_with_unreadable_attribute_is_skipped(run_module, tmp_path, os_release):
    smi = fake_binary(tmp_path, "nvidia-smi", "12.0\n")
    broken = {"vendor": "0x10de", "device": "0x2b85"}  # no class file
    result = run_module(
        llama_cpp_platform, args_for(tmp_path, os_release, {"0000:01:00.0": B6000, "0000:02:00.0": broken}, smi)
    )
    assert result["nvidia_pci_ids"] == ["10de:2b85"]


def test_platform_key_from_quoted_os_release(run_module, tmp_path):
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nID="ubuntu"\nVERSION_ID="24.04"\n# comment\n\n')
    result = run_module(llama_cpp_platform, args_for(tmp_path, release, {}, tmp_path / "nvidia-smi"))
    assert result["platform_key"] == f"ubuntu-24.04-{platform.machine()}"


def test_platform_key_without_os_release(run_module, tmp_path):
    result = run_module(llama_cpp_platform, args_for(tmp_path, tmp_path / "absent", {}, tmp_path / "nvidia-smi"))
    assert result["platform_key"] == f"unknown-unknown-{platform.machine()}"
