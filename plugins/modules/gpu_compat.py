#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight of the nvidia_driver role: can this driver branch, module flavour and CUDA drive these GPUs?"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_compat
short_description: Check an NVIDIA driver branch, kernel module flavour and CUDA versions against a host's GPUs
version_added: 0.1.0
description:
  - Reads the NVIDIA GPUs of the host from PCI IDs in sysfs (VGA and 3D controllers of vendor
    C(10de)), which works before any driver is installed, and names them with a table of NVIDIA
    device IDs and chip codenames taken from C(pci.ids).
  - Checks the requested driver branch, kernel module flavour and CUDA toolkit versions against
    each GPU's architecture, and the CUDA versions against the driver branch. Blackwell (RTX 50
    series, RTX PRO 6000 Blackwell, B200, B300) needs branch 570 or newer, the open kernel modules
    and CUDA 12.8 or newer. Maxwell, Pascal and Volta need the proprietary modules, a branch no
    newer than 580 and CUDA 12.x. The open modules support Turing and newer only.
  - Fails when a combination cannot work, with one sentence per problem that names the role
    variable (C(nvidia_driver_branch), C(nvidia_driver_kernel_modules) or C(cuda_toolkit_versions)),
    the bad value, the GPU and the fix. GPUs of one model that share a problem share a sentence.
  - Warns (RV(compat_warnings)), without failing, about GPUs it does not know, a branch that is end of life, and CUDA
    versions newer than the driver branch that still run through CUDA minor-version compatibility.
  - It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  sysfs_root:
    description: Where sysfs is mounted; the GPUs are read from its C(bus/pci/devices).
    type: path
    default: /sys
  driver_branch:
    description:
      - The driver branch to check, three digits such as C(580).
      - Omitted, the checks of the branch (against the GPUs and against the CUDA versions) are left out.
    type: str
  kernel_modules:
    description:
      - The kernel module flavour to check.
      - Omitted, the checks of the flavour are left out.
    type: str
    choices: [open, proprietary]
  cuda_versions:
    description:
      - CUDA toolkit versions to check, as C(X.Y) strings such as C(12.8).
      - Quote them in YAML; an unquoted C(12.10) is the number 12.1.
    type: list
    elements: str
    default: []
notes:
  - The messages name the role variables that feed the options, C(nvidia_driver_branch)
    (O(driver_branch)), C(nvidia_driver_kernel_modules) (O(kernel_modules)) and
    C(cuda_toolkit_versions) (O(cuda_versions)), because that is where the fix goes.
  - Only the branch is checked, not a point release. Some later boards need a later point
    release of a branch that supports their architecture (HGX B200 needs 570.133.20).
  - Sources of the rules are listed at the top of C(plugins/module_utils/_gpu_compat.py).
seealso:
  - module: gpufleet.inference.gpu_info
  - module: gpufleet.inference.gpu_check
"""

EXAMPLES = r"""
- name: Check the driver settings against the GPUs before installing anything
  gpufleet.inference.gpu_compat:
    driver_branch: "{{ nvidia_driver_branch }}"
    kernel_modules: "{{ nvidia_driver_kernel_modules }}"
    cuda_versions: "{{ cuda_toolkit_versions }}"

- name: Check only the CUDA toolkits against the GPUs
  gpufleet.inference.gpu_compat:
    cuda_versions: ["12.8"]

- name: Read the GPUs of a host
  gpufleet.inference.gpu_compat:
  register: __gpu_compat

- name: Show the GPU architectures
  ansible.builtin.debug:
    msg: "{{ __gpu_compat.gpus | map(attribute='architecture') | unique | list }}"
"""

RETURN = r"""
gpus:
  description: The NVIDIA GPUs on the PCI bus, in bus id order.
  returned: always
  type: list
  elements: dict
  contains:
    bus_id:
      description: PCI address, as sysfs names it.
      type: str
      sample: "0000:01:00.0"
    pci_id:
      description: PCI vendor and device id, as C(lspci -n) prints them.
      type: str
      sample: "10de:2b85"
    name:
      description:
        - Product name from C(pci.ids), such as C(NVIDIA GeForce RTX 5090); C(NVIDIA <chip> GPU)
          for a known chip without a listed name, and C(Unknown NVIDIA GPU) for an unknown id.
      type: str
      sample: NVIDIA GeForce RTX 5090
    architecture:
      description:
        - C(Kepler), C(Maxwell), C(Pascal), C(Volta), C(Turing), C(Ampere), C(Ada Lovelace),
          C(Hopper), C(Blackwell), or C(unknown).
      type: str
      sample: Blackwell
    chip:
      description: Chip codename; null when the architecture is unknown.
      type: str
      sample: GB202
    driver:
      description: Kernel driver bound to the GPU now (C(nvidia), C(nouveau), C(vfio-pci)), or null.
      type: str
      sample: nouveau
errors:
  description:
    - The combinations that cannot work. Each has C(bus_id) (the first GPU concerned, null for a
      problem of no GPU in particular), C(bus_ids) (every GPU concerned), C(variable), C(value)
      and C(msg).
  returned: always
  type: list
  elements: dict
  sample: [{"bus_id": "0000:01:00.0", "bus_ids": ["0000:01:00.0"], "variable": "nvidia_driver_branch",
            "value": "555", "msg": "nvidia_driver_branch=555 cannot drive NVIDIA GeForce RTX 5090 at
            0000:01:00.0 (10de:2b85, Blackwell): Blackwell needs branch 570 or newer. Fix: set
            nvidia_driver_branch: \"580\" (the current LTS branch)."}]
compat_warnings:
  description:
    - Problems that do not stop the driver from working, in the same form as RV(errors). Each
      C(msg) is also emitted as an Ansible warning. (C(warnings) is a name Ansible keeps for itself.)
  returned: always
  type: list
  elements: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_compat import check_compat, read_gpus

RETURNED_GPU_KEYS = ("bus_id", "pci_id", "name", "architecture", "chip", "driver")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/sys"),
            driver_branch=dict(type="str"),
            kernel_modules=dict(type="str", choices=["open", "proprietary"]),
            cuda_versions=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["driver_branch"] is not None and not re.match(r"^\d{3}\Z", params["driver_branch"]):
        module.fail_json(
            msg='driver_branch must be a driver branch of three digits, such as "580"; got %r' % params["driver_branch"]
        )
    for version in params["cuda_versions"]:
        if not re.match(r"^\d+\.\d+\Z", version):
            module.fail_json(msg='cuda_versions must hold X.Y versions, such as "12.8"; got %r' % version)

    gpus = read_gpus(params["sysfs_root"])
    found = check_compat(gpus, params["driver_branch"], params["kernel_modules"], params["cuda_versions"])
    for warning in found["warnings"]:
        module.warn(warning["msg"])
    result = dict(
        changed=False,
        gpus=[dict((key, gpu[key]) for key in RETURNED_GPU_KEYS) for gpu in gpus],
        errors=found["errors"],
        compat_warnings=found["warnings"],
    )
    errors = found["errors"]
    if errors:
        # "2 problems: nvidia_driver_branch=555, ..." once per setting, though several GPU models may share it.
        names = [
            "%s=%s" % (error["variable"], error["value"]) if error["variable"] else "mixed GPUs" for error in errors
        ]
        summary = "%d problem%s: %s" % (
            len(errors),
            "" if len(errors) == 1 else "s",
            ", ".join(sorted(set(names), key=names.index)),
        )
        module.fail_json(msg="\n".join([summary] + [error["msg"] for error in errors]), **result)
    module.exit_json(msg="%d NVIDIA GPU(s) checked, no problem found" % len(gpus), **result)


if __name__ == "__main__":
    main()
