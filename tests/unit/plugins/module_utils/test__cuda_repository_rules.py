# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_cuda_repository_rules.py: the cuda_repository preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._cuda_repository_rules import (
    default_url,
    settings_problems,
)

DEBIAN = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
URL_FIX = "; give the http(s):// (or file://) URL of the flat repository directory, ending with '/', for example "


def settings(**overrides):
    # The role's tables (roles/cuda_repository/vars/main.yml) and a Debian 12 x86_64 host.
    base = {
        "inventory_hostname": "gpu-1",
        "distribution": "Debian",
        "distribution_major_version": "12",
        "architecture": "x86_64",
        "distros": {"Debian-12": "debian12", "Ubuntu-22": "ubuntu2204", "Ubuntu-24": "ubuntu2404"},
        "arches": {"x86_64": "x86_64", "aarch64": "sbsa"},
        "cuda_repository_url": "",
        "cuda_repository_keyring_url": "",
    }
    base.update(overrides)
    return base


def test_the_default_is_nvidias_repository_for_the_host():
    assert default_url(settings()) == DEBIAN
    assert default_url(settings(distribution="Ubuntu", distribution_major_version="24", architecture="aarch64")) == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
    )
    assert default_url(settings(distribution="Fedora")) is None


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"cuda_repository_url": "https://fleet:hunter2-cuda@mirror.example/cuda/"},
        {"cuda_repository_url": "file:///srv/mirror/cuda/", "cuda_repository_keyring_url": "file:///srv/k/keyring.deb"},
        {"cuda_repository_keyring_url": "https://fleet:pw@mirror.example/cuda-keyring_1.1-1_all.deb"},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"distribution": "Rocky", "distribution_major_version": "9"},
            "gpu-1 runs Rocky-9 on x86_64; gpufleet.inference installs NVIDIA's CUDA repository on Debian-12, "
            "Ubuntu-22, Ubuntu-24 (x86_64, aarch64).",
        ),
        ({"architecture": "ppc64le"}, "gpu-1 runs Debian-12 on ppc64le; gpufleet.inference installs"),
        (
            {"cuda_repository_url": "https://mirror.example/cuda"},
            "cuda_repository_url=https://mirror.example/cuda is not a repository directory URL" + URL_FIX + DEBIAN,
        ),
        (
            {"cuda_repository_url": "ftp://mirror.example/cuda/"},
            "cuda_repository_url=ftp://mirror.example/cuda/ is not an http://, https:// or file:// URL" + URL_FIX,
        ),
        (
            {"cuda_repository_url": "https://fleet:hunter2@mirror.example/cuda/\nSigned-By: /tmp/evil.gpg\n"},
            "cuda_repository_url='https://fleet:********@mirror.example/cuda/\\nSigned-By: /tmp/evil.gpg\\n' contains",
        ),
        (
            {"cuda_repository_keyring_url": "https://mirror.example/cuda/cuda-keyring.txt"},
            "cuda_repository_keyring_url=https://mirror.example/cuda/cuda-keyring.txt is not the URL of a .deb; leave "
            "it empty to use " + DEBIAN + "cuda-keyring_1.1-1_all.deb",
        ),
        (
            {"cuda_repository_keyring_url": "https://fleet:hunter2@mirror.example/k.deb\nx"},
            "cuda_repository_keyring_url='https://fleet:********@mirror.example/k.deb\\nx' contains '\\n'",
        ),
    ],
)
def test_each_problem_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(settings(**overrides))
    assert len(problems) == 1, problems
    assert problems[0].startswith(message)
    assert "hunter2" not in problems[0]


def test_a_bad_repository_url_does_not_blame_the_keyring_derived_from_it():
    # The keyring defaults to <repository>/cuda-keyring_1.1-1_all.deb: one message, the repository's.
    (problem,) = settings_problems(settings(cuda_repository_url="https://mirror.example/cuda/\nSigned-By: x"))
    assert problem.startswith("cuda_repository_url=")


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(architecture="ppc64le", cuda_repository_url="https://m.example/c", cuda_repository_keyring_url="x")
    )
    assert [problem.split(" ")[0].split("=")[0] for problem in problems] == [
        "gpu-1",
        "cuda_repository_url",
        "cuda_repository_keyring_url",
    ]
