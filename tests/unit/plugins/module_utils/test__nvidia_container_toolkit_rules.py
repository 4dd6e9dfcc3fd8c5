# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_nvidia_container_toolkit_rules.py: the nvidia_container_toolkit
preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._nvidia_container_toolkit_rules import (
    settings_problems,
)


def settings(**overrides):
    base = {
        "nvidia_container_toolkit_docker_source": "distro",
        "nvidia_container_toolkit_docker_ce_url": "https://download.docker.com/linux",
        "nvidia_container_toolkit_repo_url": "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
        "nvidia_container_toolkit_key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
        "nvidia_container_toolkit_restart_docker": None,
        "nvidia_container_toolkit_version": "",
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"nvidia_container_toolkit_docker_source": "docker-ce", "nvidia_container_toolkit_version": "1.17.8-1"},
        {"nvidia_container_toolkit_restart_docker": True, "nvidia_container_toolkit_version": "1.17.8-1~bpo12+1"},
        {"nvidia_container_toolkit_restart_docker": False, "nvidia_container_toolkit_version": "1.17.8"},
        {"nvidia_container_toolkit_repo_url": "https://fleet:s3cr%40t@mirror.example/stable/deb/$(ARCH)"},
        {"nvidia_container_toolkit_key_url": "file:///srv/mirror/gpgkey"},
        # Docker's URL is only used with docker-ce.
        {"nvidia_container_toolkit_docker_ce_url": "https://fleet:pw@mirror.example/linux"},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"nvidia_container_toolkit_docker_source": "snap"},
            "nvidia_container_toolkit_docker_source=snap is neither distro (the distribution's docker.io) nor "
            "docker-ce (Docker's repository); set one of them.",
        ),
        (
            {"nvidia_container_toolkit_repo_url": "https://mirror.example/stable/deb/$(ARCH)\nSigned-By: /tmp/x"},
            "nvidia_container_toolkit_repo_url='https://mirror.example/stable/deb/$(ARCH)\\nSigned-By: /tmp/x' "
            "contains '\\n'",
        ),
        (
            {"nvidia_container_toolkit_repo_url": "file://fleet:hunter2@/srv/mirror/"},
            "nvidia_container_toolkit_repo_url=file://fleet:********@/srv/mirror/ is a file:// URL with credentials; "
            "remove 'login:password@'; give the repository's http(s):// URL, such as "
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
        ),
        (
            {"nvidia_container_toolkit_key_url": "ftp://mirror.example/gpgkey"},
            "nvidia_container_toolkit_key_url=ftp://mirror.example/gpgkey is not an http://, https:// or file:// URL; "
            "give the http(s):// URL of the repository's signing key, such as "
            "https://nvidia.github.io/libnvidia-container/gpgkey",
        ),
        (
            {"nvidia_container_toolkit_docker_source": "docker-ce",
             "nvidia_container_toolkit_docker_ce_url": "https://fleet:hunter2@mirror.example/linux"},
            "nvidia_container_toolkit_docker_ce_url=https://fleet:********@mirror.example/linux carries credentials",
        ),
        (
            {"nvidia_container_toolkit_docker_source": "docker-ce",
             "nvidia_container_toolkit_docker_ce_url": "download.docker.com/linux"},
            "nvidia_container_toolkit_docker_ce_url=download.docker.com/linux is not an http://, https:// or file:// "
            "URL; give the http(s):// URL of Docker's repository",
        ),
        (
            {"nvidia_container_toolkit_restart_docker": "maybe"},
            "nvidia_container_toolkit_restart_docker=maybe must be null (restart when no container runs), true "
            "(always restart) or false (never restart).",
        ),
        (
            {"nvidia_container_toolkit_version": "latest"},
            'nvidia_container_toolkit_version="latest" is not a package version; set it to one such as "1.17.8-1", '
            "or \"\" for the repository's current version.",
        ),
        ({"nvidia_container_toolkit_version": None}, 'nvidia_container_toolkit_version="None" is not a package'),
    ],
)  # fmt: skip
def test_each_bad_variable_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(settings(**overrides))
    assert len(problems) == 1
    assert problems[0].startswith(message)
    assert "hunter2" not in problems[0]


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(nvidia_container_toolkit_docker_source="snap", nvidia_container_toolkit_version="1.17")
    )
    assert [problem.split("=")[0] for problem in problems] == [
        "nvidia_container_toolkit_docker_source",
        "nvidia_container_toolkit_version",
    ]
