#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prove that a host's NVIDIA GPUs are what the inventory says: preflight and acceptance."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_check
short_description: Check a host's NVIDIA GPUs against the expected count, model, memory, driver and PCIe links
version_added: 0.1.0
description:
  - Reads the GPUs as M(gpufleet.inference.gpu_info) does, from C(nvidia-smi -q -x), and compares
    them with what is expected.
  - Fails when anything differs, with one line per mismatch in the message, and returns every
    mismatch in RV(mismatches), on failure too.
  - Options left unset are not checked. It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  nvidia_smi_path:
    description: The nvidia-smi binary, a name looked up in E(PATH) or an absolute path.
    type: str
    default: nvidia-smi
  expected_count:
    description: Number of GPUs the host must have.
    type: int
  expected_bus_ids:
    description:
      - PCI addresses the GPUs must have, such as C(0000:61:00.0) (nvidia-smi's C(00000000:61:00.0) is accepted too).
      - Missing and unexpected ones are named in the message.
    type: list
    elements: str
  model:
    description:
      - Regular expression, matched case-insensitively anywhere in every GPU's product name; a plain
        substring such as C(RTX 5090) works as is.
    type: str
  same_model:
    description: Whether every GPU must have the same product name.
    type: bool
    default: true
  min_memory_mib:
    description: Least total memory of every GPU, in MiB (an RTX 5090 reports 32607).
    type: int
  min_driver_version:
    description: Least driver version, compared numerically part by part (C(570.86.15)).
    type: str
  require_persistence:
    description: Whether persistence mode must be on for every GPU.
    type: bool
    default: false
  max_uncorrectable_ecc:
    description:
      - Most uncorrectable ECC errors allowed on any GPU, both since the driver loaded (volatile)
        and over the GPU's life (aggregate). GPUs without ECC counters are not checked.
    type: int
  min_pcie_width:
    description: Least current PCIe link width of every GPU (16 for x16).
    type: int
  min_pcie_gen:
    description:
      - Least PCIe generation every GPU's link can train to (its max link generation). The current
        generation is not used because GPUs drop to gen 1 while idle.
    type: int
seealso:
  - module: gpufleet.inference.gpu_info
"""

EXAMPLES = r"""
- name: Check that the host has eight RTX 5090 on full links
  gpufleet.inference.gpu_check:
    expected_count: 8
    model: RTX 5090
    min_memory_mib: 32000
    min_driver_version: "570.86.15"
    require_persistence: true
    max_uncorrectable_ecc: 0
    min_pcie_width: 16
    min_pcie_gen: 5

- name: Check the GPUs by slot, keeping the result for a report
  gpufleet.inference.gpu_check:
    expected_bus_ids: "{{ gpufleet_gpu_bus_ids }}"
  register: __gpu_check
  failed_when: false

- name: Show what differs
  ansible.builtin.debug:
    msg: "{{ __gpu_check.mismatches | map(attribute='message') | list }}"
"""

RETURN = r"""
mismatches:
  description: One entry per difference; empty when every check passed.
  returned: always
  type: list
  elements: dict
  contains:
    gpu:
      description: PCI bus id of the GPU concerned (the missing one for bus id checks); null for host-wide checks.
      type: str
    check:
      description:
        - Which check, one of C(count), C(bus_ids), C(driver_version), C(same_model), C(model),
          C(memory), C(persistence), C(ecc_uncorrectable_volatile), C(ecc_uncorrectable_aggregate),
          C(pcie_width), C(pcie_gen).
      type: str
    expected:
      description: The expected value, as given.
      type: raw
    actual:
      description: The value found.
      type: raw
    message:
      description: One sentence saying what was expected and what was found.
      type: str
      sample: "GPU 3 (0000:61:00.0): PCIe link x8, expected at least x16"
gpus:
  description: The GPUs as M(gpufleet.inference.gpu_info) returns them.
  returned: when nvidia-smi could be read
  type: list
  elements: dict
driver_version:
  description: The NVIDIA driver version.
  returned: when nvidia-smi could be read
  type: str
gpu_count:
  description: Number of GPUs found.
  returned: when nvidia-smi could be read
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu import check_gpus, run_nvidia_smi

CHECKS = (
    "expected_count",
    "model",
    "min_memory_mib",
    "min_driver_version",
    "require_persistence",
    "max_uncorrectable_ecc",
    "min_pcie_width",
    "min_pcie_gen",
    "same_model",
    "expected_bus_ids",
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            expected_count=dict(type="int"),
            expected_bus_ids=dict(type="list", elements="str"),
            model=dict(type="str"),
            same_model=dict(type="bool", default=True),
            min_memory_mib=dict(type="int"),
            min_driver_version=dict(type="str"),
            require_persistence=dict(type="bool", default=False),
            max_uncorrectable_ecc=dict(type="int"),
            min_pcie_width=dict(type="int"),
            min_pcie_gen=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    info = run_nvidia_smi(module, params["nvidia_smi_path"])
    try:
        mismatches = check_gpus(info, **dict((name, params[name]) for name in CHECKS))
    except ValueError as exc:
        module.fail_json(msg=str(exc), mismatches=[], gpus=info["gpus"])

    result = dict(
        changed=False,
        mismatches=mismatches,
        gpus=info["gpus"],
        driver_version=info["driver_version"],
        gpu_count=len(info["gpus"]),
    )
    if mismatches:
        module.fail_json(msg="\n".join(mismatch["message"] for mismatch in mismatches), **result)
    module.exit_json(msg="%d GPU(s) match every check" % len(info["gpus"]), **result)


if __name__ == "__main__":
    main()
