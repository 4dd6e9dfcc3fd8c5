#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a llama.cpp build depends on: OS release, CPU architecture, NVIDIA GPUs and their CUDA architectures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: llama_cpp_platform
short_description: Report the build platform of a host for llama.cpp
version_added: 0.1.0
description:
  - Reads the OS release and CPU architecture, counts NVIDIA GPUs on the PCI bus from sysfs
    (this works without a driver), and asks C(nvidia-smi) for their compute capabilities, which
    become C(CMAKE_CUDA_ARCHITECTURES) values (V(120) Blackwell, V(90) Hopper, V(89) Ada,
    V(86)/V(80) Ampere).
  - Hosts with the same RV(platform_key) and CUDA architectures run the same binaries, so the
    P(gpufleet.inference.llama_cpp#role) role builds once per distinct platform. It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  sysfs_root:
    description: Root of sysfs; PCI devices are read from C(<sysfs_root>/bus/pci/devices). A seam for tests.
    type: path
    default: /sys
  os_release_path:
    description: Path of the os-release file. A seam for tests.
    type: path
    default: /etc/os-release
  nvidia_smi_path:
    description: Path or name of C(nvidia-smi); only run when NVIDIA GPUs are on the PCI bus.
    type: str
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Read the build platform
  gpufleet.inference.llama_cpp_platform:
  register: __llama_cpp_platform
"""

RETURN = r"""
platform_key:
  description: C(<os id>-<version id>-<machine>), the part of the build identity that the host's OS sets.
  returned: success
  type: str
  sample: debian-12-x86_64
nvidia_gpu_count:
  description: NVIDIA display and 3D controllers on the PCI bus.
  returned: success
  type: int
nvidia_pci_ids:
  description: C(<vendor>:<device>) PCI IDs of those GPUs, one per GPU.
  returned: success
  type: list
  elements: str
  sample: ["10de:2b85"]
cuda_compute_caps:
  description: Compute capabilities nvidia-smi reports, one per GPU; empty without GPUs or without a working driver.
  returned: success
  type: list
  elements: str
cuda_architectures:
  description: Distinct CMAKE_CUDA_ARCHITECTURES values for those GPUs, sorted.
  returned: success
  type: list
  elements: str
  sample: ["120"]
nvidia_smi_error:
  description: Why the compute capabilities are unknown although NVIDIA GPUs are present; empty otherwise.
  returned: success
  type: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_compat import scan_pci
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import cuda_architectures


def os_release(path):
    values = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep:
                    values[key] = value.strip().strip('"')
    except (IOError, OSError):
        pass
    return values


def main():
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "os_release_path": {"type": "path", "default": "/etc/os-release"},
            "nvidia_smi_path": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    release = os_release(module.params["os_release_path"])
    key = "%s-%s-%s" % (release.get("ID", "unknown"), release.get("VERSION_ID", "unknown"), platform.machine())
    pci_ids = [gpu["pci_id"] for gpu in scan_pci(module.params["sysfs_root"])]
    caps, error = [], ""
    if pci_ids:
        smi = module.get_bin_path(module.params["nvidia_smi_path"]) or (
            module.params["nvidia_smi_path"] if os.path.isabs(module.params["nvidia_smi_path"]) else None
        )
        if not smi or not os.path.exists(smi):
            error = (
                "%s not found; install the NVIDIA driver first or set llama_cpp_cuda_architectures"
                % (module.params["nvidia_smi_path"])
            )
        else:
            rc, out, err = module.run_command([smi, "--query-gpu=compute_cap", "--format=csv,noheader"])
            if rc != 0:
                error = "%s failed (rc=%d): %s" % (smi, rc, (err or out).strip())
            else:
                caps = [line.strip() for line in out.splitlines() if line.strip()]
    try:
        archs = cuda_architectures(caps)
    except ValueError as exc:
        archs, error = [], "nvidia-smi reported %s" % exc
    module.exit_json(
        changed=False,
        platform_key=key,
        nvidia_gpu_count=len(pci_ids),
        nvidia_pci_ids=pci_ids,
        cuda_compute_caps=caps,
        cuda_architectures=archs,
        nvidia_smi_error=error,
    )


if __name__ == "__main__":
    main()
