# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_acceptance role's input rules (_role_problems('gpu_acceptance')).

Apart from _gpu.py on purpose: the health agent loads _gpu.py beside itself on the host, where
only the standard library is importable."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.inference.plugins.module_utils import _render

# (kind, variable, options) of each input of the gpu_acceptance role, as _render.input_problems
# checks them; a null input is left out (its check is skipped, and the role's verify step says so).
ACCEPTANCE_INPUTS = (
    (
        "int",
        "gpu_acceptance_expected_count",
        {"min": 1, "max": 64, "why": "the GPUs each host must have; null skips acceptance"},
    ),
    ("int", "gpu_acceptance_min_memory_mib", {"min": 1, "max": 2097152, "why": "MiB per GPU"}),
    ("int", "gpu_acceptance_min_pcie_width", {"min": 1, "max": 32, "why": "PCIe lanes, e.g. 16"}),
    ("int", "gpu_acceptance_min_pcie_gen", {"min": 1, "max": 7, "why": "PCIe generation, e.g. 5"}),
    ("int", "gpu_acceptance_max_uncorrectable_ecc", {"max": 1000000}),
    ("regex", "gpu_acceptance_model", {}),
    ("text", "gpu_acceptance_min_driver_version", {}),
    ("text", "gpu_acceptance_nvidia_smi_path", {}),
)


def settings_problems(settings):
    """Every problem of the gpu_acceptance role's inputs (_role_problems('gpu_acceptance')), one
    message each. settings: {variable name: value}; a variable left out or null is not checked."""
    return _render.input_problems(
        [
            [kind, name, settings[name], options]
            for kind, name, options in ACCEPTANCE_INPUTS
            if settings.get(name) is not None
        ]
    )
