#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only view of a host's NVIDIA GPUs, as nvidia-smi reports them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_info
short_description: Report the NVIDIA GPUs of a host, their driver and, on request, their topology
version_added: 0.1.0
description:
  - Runs C(nvidia-smi -q -x) and returns, for every GPU, its index, UUID, name, architecture, PCI
    bus id, total memory, persistence mode, ECC mode and uncorrectable error counts, and PCIe link
    generation and width, with the driver and CUDA versions.
  - With O(topology=true) also runs C(nvidia-smi topo -m) and returns its matrix of GPU and NIC
    links (C(X), C(NV#), C(PIX), C(PXB), C(PHB), C(NODE), C(SYS)).
  - Understands the XML of DTD versions v10 to v13 (drivers 418 to 5xx).
  - Fails with distinct messages when nvidia-smi is missing, when it cannot talk to the driver
    (module not loaded, or a kernel module that does not match the libraries after an upgrade),
    and when the driver sees no GPU. It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  nvidia_smi_path:
    description:
      - The nvidia-smi binary, a name looked up in E(PATH) or an absolute path.
    type: str
    default: nvidia-smi
  topology:
    description: Whether to run C(nvidia-smi topo -m) and return RV(topology).
    type: bool
    default: false
notes:
  - RV(gpus[].index) is the GPU's C(minor_number) (its C(/dev/nvidiaN)) when nvidia-smi prints
    one, else its position in the output.
  - RV(gpus[].architecture) comes from C(product_architecture); drivers that do not print it get
    one derived from well-known product names, or null.
seealso:
  - module: gpufleet.inference.gpu_check
"""

EXAMPLES = r"""
- name: Read the GPUs of the host
  gpufleet.inference.gpu_info:
  register: __gpu_info

- name: Show the GPU models
  ansible.builtin.debug:
    msg: "{{ __gpu_info.gpus | map(attribute='name') | list }}"

- name: Read the GPUs and their topology with a driver outside PATH
  gpufleet.inference.gpu_info:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    topology: true
  register: __gpu_info
"""

RETURN = r"""
driver_version:
  description: The NVIDIA driver version; null when nvidia-smi does not print it.
  returned: success
  type: str
  sample: 570.124.04
cuda_version:
  description: The newest CUDA version the driver supports; null when nvidia-smi does not print it.
  returned: success
  type: str
  sample: "12.8"
gpu_count:
  description: Number of GPUs nvidia-smi listed.
  returned: success
  type: int
  sample: 8
gpus:
  description: One entry per GPU, in nvidia-smi's order.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: Minor number of the GPU, or its position when nvidia-smi prints none.
      type: int
    uuid:
      description: The GPU's UUID.
      type: str
      sample: GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625
    name:
      description: Product name.
      type: str
      sample: NVIDIA GeForce RTX 3060
    architecture:
      description:
        - Architecture (C(Pascal), C(Turing), C(Ampere), C(Ada Lovelace), C(Hopper), C(Blackwell)); null when unknown.
      type: str
    pci_bus_id:
      description: PCI address in the lower-case C(dddd:bb:dd.f) form of sysfs and C(lspci -D).
      type: str
      sample: "0000:2d:00.0"
    pci_device_id:
      description: PCI vendor and device id as C(lspci -n) prints them; null when not printed.
      type: str
      sample: "10de:2487"
    memory_total_mib:
      description: Total framebuffer memory in MiB.
      type: int
      sample: 12288
    persistence_mode:
      description: Whether persistence mode is on; null when not applicable.
      type: bool
    ecc_mode_current:
      description: Whether ECC is on; null when the GPU has no ECC.
      type: bool
    ecc_uncorrectable_volatile_total:
      description: Uncorrectable ECC errors since the driver loaded; null when not counted.
      type: int
    ecc_uncorrectable_aggregate_total:
      description: Uncorrectable ECC errors over the GPU's life; null when not counted.
      type: int
    pcie_gen_current:
      description: Current PCIe generation; drops to 1 while the GPU idles.
      type: int
    pcie_gen_max:
      description: Highest PCIe generation the GPU and its slot can train to.
      type: int
    pcie_width_current:
      description: Current PCIe link width (16 for x16).
      type: int
    pcie_width_max:
      description: Highest PCIe link width.
      type: int
topology:
  description:
    - The C(nvidia-smi topo -m) matrix. C(devices) lists the rows, each with C(name) (C(GPU0),
      C(NIC0), C(mlx5_0)), C(kind) (C(gpu) or C(nic)), C(device) (the HCA name from the NIC
      legend for NICs), C(cpu_affinity), C(numa_affinity) and C(gpu_numa_id) (null when absent).
    - C(matrix) maps each row name to a dict of column name to link type.
  returned: when O(topology=true)
  type: dict
  sample: {"devices": [{"name": "GPU0", "kind": "gpu", "device": "GPU0", "cpu_affinity": "0-63",
           "numa_affinity": "0", "gpu_numa_id": null}],
           "matrix": {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu import run_nvidia_smi


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            topology=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    info = run_nvidia_smi(module, module.params["nvidia_smi_path"], topology=module.params["topology"])
    result = dict(
        changed=False,
        driver_version=info["driver_version"],
        cuda_version=info["cuda_version"],
        gpu_count=len(info["gpus"]),
        gpus=info["gpus"],
    )
    if "topology" in info:
        result["topology"] = info["topology"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
