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


def _vllm_group(inventory):
    return yaml.safe_load((REPO / "inventories" / inventory / "group_vars" / "vllm_nodes.yml").read_text())


def test_flagship_vllm_layout_is_one_replica_of_ten_stages():
    from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_catalogue, _vllm_replica

    group = _vllm_group("cluster-80x5090")
    config, problems = _vllm_catalogue.validate(group["vllm_args"], group["vllm_version"])
    assert problems == []
    assert config["quantization"] == "gptq" and config["dtype"] == "auto"
    members = []
    for path in sorted((REPO / "inventories/cluster-80x5090/host_vars").glob("gpu*.yml")):
        host = yaml.safe_load(path.read_text())
        members.append(
            {
                "host": path.stem,
                "rank": host["vllm_node_rank"],
                "address": host["gpufleet_fabric_address"],
                "tensor_parallel_size": group["vllm_tensor_parallel_size"],
                "pipeline_parallel_size": group["vllm_pipeline_parallel_size"],
            }
        )
    plan, problems = _vllm_replica.plan(group["vllm_replica"], members)
    assert problems == []
    assert plan["nnodes"] == 10 and plan["local_world_size"] == 8
    assert [n["rank"] for n in plan["nodes"]] == list(range(10))
    assert plan["master_addr"] == members[0]["address"]


def test_single_node_vllm_settings_are_real_flags():
    from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_catalogue

    group = _vllm_group("single-node")
    config, problems = _vllm_catalogue.validate(group["vllm_args"], group["vllm_version"])
    assert problems == []
    assert config["enable-expert-parallel"] is True and config["enable-prefix-caching"] is True
