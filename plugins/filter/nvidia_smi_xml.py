# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_smi_xml filter: a thin wrapper over module_utils/_gpu.py's parser."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nvidia_smi_xml
short_description: Parse the output of nvidia-smi -q -x
version_added: 0.1.0
description:
  - Parses C(nvidia-smi -q -x) with the parser of M(gpufleet.inference.gpu_info), for output that
    a module cannot read itself, such as that of a container run with C(docker run --gpus all).
  - Fails with the parser's message when the output is not an C(nvidia_smi_log) document.
options:
  _input:
    description: The output of C(nvidia-smi -q -x).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Count the GPUs a container sees
  ansible.builtin.debug:
    msg: "{{ (smoke.stdout | gpufleet.inference.nvidia_smi_xml).gpus | length }}"
"""

RETURN = r"""
_value:
  description: C(driver_version), C(cuda_version), C(attached_gpus) and C(gpus), as gpu_info returns them.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils import _gpu


def nvidia_smi_xml(text):
    try:
        return _gpu.parse_smi_xml(text)
    except _gpu.GpuError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"nvidia_smi_xml": nvidia_smi_xml}
