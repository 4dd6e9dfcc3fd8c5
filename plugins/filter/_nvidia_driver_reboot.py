# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver_reboot filter: a thin wrapper over module_utils/_nvidia_driver.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _nvidia_driver_reboot
short_description: Decide whether a host must reboot before its installed NVIDIA driver runs
version_added: 0.1.0
description:
  - A reboot is required when the host has NVIDIA GPUs and nouveau is loaded, the nvidia module
    is not loaded, or the loaded module's version differs from the installed kernel-module package.
  - In a container, or on a host without NVIDIA GPUs, the question does not apply; C(skipped)
    then says why, so the role can say so visibly.
options:
  _input:
    description:
      - Upstream version of the installed kernel-module package, or null.
      - That is C(installed_version) of the gpufleet.inference._nvidia_driver_plan filter.
    type: str
    required: true
  gpu_count:
    description: NVIDIA GPUs on the PCI bus.
    type: int
    required: true
  container:
    description: The container technology the host runs in (C(docker), C(lxc), ...), or empty on a real host or VM.
    type: str
    required: true
  loaded_version:
    description: Contents of C(/sys/module/nvidia/version), or empty when the module is not loaded.
    type: str
    required: true
  nouveau_loaded:
    description: Whether C(/sys/module/nouveau) exists.
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Decide on the reboot
  ansible.builtin.set_fact:
    __nvidia_driver_reboot: >-
      {{ __plan.installed_version | gpufleet.inference._nvidia_driver_reboot(
           gpu_count=8, container='', loaded_version='570.195.03', nouveau_loaded=false) }}
"""

RETURN = r"""
_value:
  description: C(required) (bool), C(reason) (why, or empty) and C(skipped) (why the question does not apply, or empty).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._nvidia_driver import reboot_plan


def nvidia_driver_reboot(installed_version, gpu_count, container, loaded_version, nouveau_loaded):
    try:
        gpu_count = int(gpu_count)
    except (TypeError, ValueError):
        raise AnsibleFilterError("nvidia_driver_reboot gpu_count=%r is not a number of GPUs" % (gpu_count,)) from None
    loaded = (loaded_version or "").strip() or None
    return reboot_plan(gpu_count, container or "", loaded, installed_version or None, bool(nouveau_loaded))


class FilterModule(object):
    def filters(self):
        return {"_nvidia_driver_reboot": nvidia_driver_reboot}
