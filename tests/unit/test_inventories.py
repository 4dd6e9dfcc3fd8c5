# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped scenario inventories ask for a driver, modules and CUDA that can drive their GPUs."""

from pathlib import Path

import yaml
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_compat import check_compat, identify

REPO = Path(__file__).resolve().parents[2]
RTX_5090 = 0x2B85


def gpus(device_id, count):
    return [
        {"bus_id": f"0000:{16 * n:02x}:00.0", "pci_id": f"10de:{device_id:04x}", "device_id": device_id}
        | identify(device_id)
        for n in range(1, count + 1)
    ]


def test_rtx_5090_inventory_drives_its_gpus():
    values = yaml.safe_load((REPO / "inventories/cluster-80x5090/group_vars/gpu_nodes.yml").read_text())
    assert values["nvidia_driver_cuda_versions"] == "{{ cuda_toolkit_versions }}"
    found = check_compat(
        gpus(RTX_5090, values["gpufleet_gpu_count"]),
        values["nvidia_driver_branch"],
        values["nvidia_driver_kernel_modules"],
        values["cuda_toolkit_versions"],
    )
    assert found["errors"] == []
    assert values["gpufleet_gpu_count"] == 8
    assert identify(RTX_5090)["name"].endswith("RTX 5090")


def test_role_defaults_are_refused_on_rtx_5090_only_for_cuda():
    """The design card's CUDA 12.5 stays the default; on Blackwell it is refused, the branch is not."""
    driver = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    toolkit = yaml.safe_load((REPO / "roles/cuda_toolkit/defaults/main.yml").read_text())
    found = check_compat(
        gpus(RTX_5090, 8),
        driver["nvidia_driver_branch"],
        driver["nvidia_driver_kernel_modules"],
        toolkit["cuda_toolkit_versions"],
    )
    assert [(error["variable"], error["value"]) for error in found["errors"]] == [("cuda_toolkit_versions", "12.5")]


def test_seed_articles_pair_is_refused_on_rtx_5090():
    found = check_compat(gpus(RTX_5090, 8), "555", "proprietary", ["12.5"])
    variables = sorted({error["variable"] for error in found["errors"]})
    assert variables == ["cuda_toolkit_versions", "nvidia_driver_branch", "nvidia_driver_kernel_modules"]
