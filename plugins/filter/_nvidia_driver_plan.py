# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver_plan filter: a thin wrapper over module_utils/_nvidia_driver.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _nvidia_driver_plan
short_description: Plan a clean NVIDIA driver branch or kernel-module switch from the installed packages
version_added: 0.1.0
description:
  - Reads C(ansible_facts.packages) and finds the NVIDIA driver packages of other branches than
    O(branch) (by a three-digit branch as the first component of their version), the
    C(nvidia-driver-pinning-*) packages of other branches, and, when the installed kernel modules
    are of the other flavour, that flavour's module and metapackages.
  - Those are what a clean switch removes before the requested branch is installed.
  - Packages that share the C(nvidia-) prefix but are not the driver (C(nvidia-container-toolkit),
    version 1.x) are never listed.
options:
  _input:
    description: C(ansible_facts.packages) as gathered by M(ansible.builtin.package_facts).
    type: dict
    required: true
  branch:
    description: The requested driver branch, three digits.
    type: str
    required: true
  kernel_modules:
    description: The requested kernel-module flavour.
    type: str
    choices: [open, proprietary]
    required: true
"""

EXAMPLES = r"""
- name: Plan the switch
  ansible.builtin.set_fact:
    __nvidia_driver_plan: >-
      {{ ansible_facts.packages | gpufleet.inference._nvidia_driver_plan(branch='580', kernel_modules='open') }}
"""

RETURN = r"""
_value:
  description:
    - C(installed_branches), C(installed_modules) (C(open), C(proprietary) or null),
      C(installed_version) (upstream version of the kernel-module package, or null), C(pinning)
      (branches of installed pinning packages), C(remove) (package names) and C(switch) (bool).
  type: dict
"""

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._nvidia_driver import driver_plan


def nvidia_driver_plan(packages, branch, kernel_modules):
    if kernel_modules not in ("open", "proprietary"):
        raise AnsibleFilterError("nvidia_driver_plan kernel_modules=%r: use open or proprietary" % (kernel_modules,))
    if not isinstance(branch, str) or not re.match(r"^[0-9]{3}\Z", branch):
        raise AnsibleFilterError("nvidia_driver_plan branch=%r: give a three-digit branch such as '580'" % (branch,))
    if not isinstance(packages, dict):
        raise AnsibleFilterError(
            "nvidia_driver_plan expects ansible_facts.packages (a dict), got %s %.80r"
            % (type(packages).__name__, packages)
        )
    return driver_plan(packages, branch, kernel_modules)


class FilterModule(object):
    def filters(self):
        return {"_nvidia_driver_plan": nvidia_driver_plan}
