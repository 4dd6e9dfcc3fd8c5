# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_gpu_acceptance_rules.py: the gpu_acceptance role's inputs."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu_acceptance_rules import settings_problems


def acceptance_settings(**changes):
    settings = {
        "gpu_acceptance_expected_count": 8,
        "gpu_acceptance_min_memory_mib": 32000,
        "gpu_acceptance_min_pcie_width": 16,
        "gpu_acceptance_min_pcie_gen": 5,
        "gpu_acceptance_max_uncorrectable_ecc": 0,
        "gpu_acceptance_model": "NVIDIA GeForce RTX 5090",
        "gpu_acceptance_min_driver_version": "575",
        "gpu_acceptance_nvidia_smi_path": "nvidia-smi",
    }
    settings.update(changes)
    return settings


def test_good_acceptance_inputs_pass():
    assert settings_problems(acceptance_settings()) == []
    assert settings_problems(acceptance_settings(gpu_acceptance_expected_count="8")) == []


def test_null_inputs_skip_their_checks():
    assert settings_problems(dict((name, None) for name in acceptance_settings())) == []


@pytest.mark.parametrize(
    "name, value, message",
    [
        (
            "gpu_acceptance_expected_count",
            0,
            "gpu_acceptance_expected_count=0 must be a whole number from 1 to 64 (the GPUs each host must have; null "
            "skips acceptance)",
        ),
        (
            "gpu_acceptance_expected_count",
            "",
            "gpu_acceptance_expected_count='' must be a whole number from 1 to 64 (the GPUs each host must have; null "
            "skips acceptance)",
        ),
        (
            "gpu_acceptance_min_memory_mib",
            1000000000000000,
            "gpu_acceptance_min_memory_mib=1000000000000000 must be a whole number from 1 to 2097152 (MiB per GPU)",
        ),
        (
            "gpu_acceptance_min_pcie_width",
            0,
            "gpu_acceptance_min_pcie_width=0 must be a whole number from 1 to 32 (PCIe lanes, e.g. 16)",
        ),
        (
            "gpu_acceptance_min_pcie_gen",
            9,
            "gpu_acceptance_min_pcie_gen=9 must be a whole number from 1 to 7 (PCIe generation, e.g. 5)",
        ),
        (
            "gpu_acceptance_max_uncorrectable_ecc",
            -1,
            "gpu_acceptance_max_uncorrectable_ecc=-1 must be a whole number from 0 to 1000000",
        ),
        (
            "gpu_acceptance_min_driver_version",
            "575\n",
            "gpu_acceptance_min_driver_version='575\\n' contains a control character",
        ),
        (
            "gpu_acceptance_nvidia_smi_path",
            ["nvidia-smi"],
            "gpu_acceptance_nvidia_smi_path=['nvidia-smi'] must be a string, not a list",
        ),
    ],
)
def test_a_bad_acceptance_input_is_refused(name, value, message):
    (problem,) = settings_problems(acceptance_settings(**{name: value}))
    assert problem.startswith(message)


def test_a_model_that_is_not_a_regular_expression_is_refused():
    (problem,) = settings_problems(acceptance_settings(gpu_acceptance_model="RTX (5090"))
    assert problem.startswith("gpu_acceptance_model='RTX (5090' is not a regular expression")
    assert problem.endswith("escape literal characters with \\")


def test_every_acceptance_problem_comes_back_at_once():
    problems = settings_problems(
        acceptance_settings(gpu_acceptance_expected_count=-1, gpu_acceptance_min_pcie_gen=9, gpu_acceptance_model="(")
    )
    assert [problem.split("=")[0] for problem in problems] == [
        "gpu_acceptance_expected_count",
        "gpu_acceptance_min_pcie_gen",
        "gpu_acceptance_model",
    ]
