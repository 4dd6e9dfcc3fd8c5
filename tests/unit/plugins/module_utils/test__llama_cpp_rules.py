# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_llama_cpp_rules.py: the llama_cpp preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp_rules import settings_problems

CHECKSUM = "sha256:832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# What llama_cpp_platform returns on a host without NVIDIA GPUs, and on one with eight RTX 5090
# whose driver is not installed yet (nvidia-smi missing).
NO_GPU = {"nvidia_gpu_count": 0, "nvidia_pci_ids": [], "cuda_architectures": [], "nvidia_smi_error": ""}
NO_DRIVER = {
    "nvidia_gpu_count": 8,
    "nvidia_pci_ids": ["10de:2b85"],
    "cuda_architectures": [],
    "nvidia_smi_error": "nvidia-smi not found; install the NVIDIA driver first or set llama_cpp_cuda_architectures",
}
HOPPER = dict(NO_GPU, nvidia_gpu_count=8, nvidia_pci_ids=["10de:2335"], cuda_architectures=["90"])


def settings(**overrides):
    base = {
        "inventory_hostname": "coord-1",
        "ansible_play_hosts_all": ["coord-1", "worker-1"],
        "llama_cpp_source": "https://files.pythonhosted.org/packages/ec/e9/llama_cpp_python-0.3.36.tar.gz",
        "llama_cpp_source_checksum": CHECKSUM,
        "llama_cpp_cuda": "auto",
        "llama_cpp_cuda_architectures": [],
        "llama_cpp_build_host": "",
        "llama_cpp_build_jobs": 0,
        "platform": NO_GPU,
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"llama_cpp_source": "/srv/mirror/llama.cpp-b6000.tar.gz", "llama_cpp_build_jobs": "16"},
        {"llama_cpp_build_host": "worker-1", "llama_cpp_cuda": False},
        {"llama_cpp_cuda": True, "llama_cpp_cuda_architectures": ["120", 90, "90a", "100f-real", "native"]},
        {"llama_cpp_cuda": "TRUE", "platform": HOPPER},
        # auto on a host without GPUs builds for the CPU: no architecture needed.
        {"llama_cpp_cuda": "auto", "platform": NO_GPU},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"llama_cpp_cuda": "maybe"}, "llama_cpp_cuda=maybe (auto, true or false)"),
        ({"llama_cpp_cuda": None}, "llama_cpp_cuda=None (auto, true or false)"),
        ({"llama_cpp_source": ""}, "llama_cpp_source='' (a URL or a controller path)"),
        ({"llama_cpp_source_checksum": "md5:abc"}, "llama_cpp_source_checksum='md5:abc' (sha256:<64 hex>)"),
        ({"llama_cpp_source_checksum": CHECKSUM + "\n"}, "llama_cpp_source_checksum='" + CHECKSUM + "\n'"),
        ({"llama_cpp_build_host": "builder"}, "llama_cpp_build_host='builder' (empty, or a host of this play)"),
        ({"llama_cpp_build_jobs": "many"}, "llama_cpp_build_jobs=many (an integer, 0 for all CPUs)"),
        ({"llama_cpp_build_jobs": -1}, "llama_cpp_build_jobs=-1 (an integer, 0 for all CPUs)"),
        ({"llama_cpp_build_jobs": True}, "llama_cpp_build_jobs=True (an integer, 0 for all CPUs)"),
        ({"llama_cpp_cuda_architectures": "120"}, 'llama_cpp_cuda_architectures=120 must be a list, such as ["120"]'),
        (
            {"llama_cpp_cuda_architectures": ["12.0"]},
            "llama_cpp_cuda_architectures[0]='12.0' is not a CUDA architecture",
        ),
        ({"llama_cpp_cuda_architectures": ["90;75"]}, "llama_cpp_cuda_architectures[0]='90;75' is not a CUDA"),
    ],
)
def test_each_bad_variable_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(settings(**overrides))
    assert len(problems) == 1
    assert problems[0].startswith(message)


def test_a_cuda_build_without_known_architectures_says_what_the_host_has():
    (problem,) = settings_problems(settings(platform=NO_DRIVER))
    assert problem == (
        "coord-1: llama_cpp_cuda=auto needs CUDA architectures, and none are known (8 NVIDIA GPU(s) on the PCI bus "
        "10de:2b85; nvidia-smi not found; install the NVIDIA driver first or set llama_cpp_cuda_architectures). "
        'Set llama_cpp_cuda_architectures (e.g. ["120"] for RTX 5090 / RTX PRO 6000, ["90"] for H100/H200), '
        "or llama_cpp_cuda: false for a CPU-only build."
    )


def test_a_forced_cuda_build_on_a_host_without_gpus_keeps_the_message_of_the_site_suite():
    # tests/site/tools/llama_bad_inputs.yml expects this fragment.
    (problem,) = settings_problems(settings(llama_cpp_cuda=True))
    assert (
        "llama_cpp_cuda=True needs CUDA architectures, and none are known (0 NVIDIA GPU(s) on the PCI bus)." in problem
    )


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(llama_cpp_cuda="maybe", llama_cpp_build_jobs="many", llama_cpp_source_checksum="md5:abc")
    )
    assert [problem.split("=")[0] for problem in problems] == [
        "llama_cpp_cuda",
        "llama_cpp_source_checksum",
        "llama_cpp_build_jobs",
    ]
