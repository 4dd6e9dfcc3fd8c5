# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit role's input rules (the _role_problems filter): the Docker source,
the repository and key URLs (_apt_auth.split, the rules the repository_url filter applies when
the role splits their credentials off), the Docker restart policy and the toolkit version.

The settings are the role's variables by name. A URL's password is never shown."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth

DOCKER_SOURCES = ("distro", "docker-ce")
# A Debian package version of the toolkit: upstream X.Y.Z, then an optional revision.
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.~+]+)?\Z")


def settings_problems(settings):
    problems = []
    source = settings.get("nvidia_container_toolkit_docker_source")
    if source not in DOCKER_SOURCES:
        problems.append(
            "nvidia_container_toolkit_docker_source=%s is neither distro (the distribution's docker.io) nor docker-ce "
            "(Docker's repository); set one of them." % (source,)
        )
    problem = _apt_auth.split(settings.get("nvidia_container_toolkit_repo_url"), "nvidia_container_toolkit_repo_url")
    if problem["problem"]:
        problems.append(
            "%s; give the repository's http(s):// URL, such as "
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)" % problem["problem"]
        )
    problem = _apt_auth.split(settings.get("nvidia_container_toolkit_key_url"), "nvidia_container_toolkit_key_url")
    if problem["problem"]:
        problems.append(
            "%s; give the http(s):// URL of the repository's signing key, such as "
            "https://nvidia.github.io/libnvidia-container/gpgkey" % problem["problem"]
        )
    if source == "docker-ce":
        problems += _docker_ce_url_problems(settings.get("nvidia_container_toolkit_docker_ce_url"))
    restart = settings.get("nvidia_container_toolkit_restart_docker")
    if restart is not None and not isinstance(restart, bool):
        problems.append(
            "nvidia_container_toolkit_restart_docker=%s must be null (restart when no container runs), true (always "
            "restart) or false (never restart)." % (restart,)
        )
    version = settings.get("nvidia_container_toolkit_version")
    if str(version) and not VERSION.match(str(version)):
        problems.append(
            'nvidia_container_toolkit_version="%s" is not a package version; set it to one such as "1.17.8-1", or "" '
            "for the repository's current version." % (version,)
        )
    return problems


def _docker_ce_url_problems(url):
    """Docker's repository URL goes into the world-readable source as it is: no credentials."""
    split = _apt_auth.split(url, "nvidia_container_toolkit_docker_ce_url")
    if split["problem"]:
        return ["%s; give the http(s):// URL of Docker's repository, such as https://download.docker.com/linux"
                % split["problem"]]  # fmt: skip
    if split["auth"]:
        return [
            "nvidia_container_toolkit_docker_ce_url=%s carries credentials, which would be written into the "
            "world-readable apt source; use a mirror that needs none, such as https://download.docker.com/linux"
            % split["shown"]
        ]
    return []
