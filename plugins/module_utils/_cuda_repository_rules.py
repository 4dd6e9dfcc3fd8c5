# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cuda_repository role's input rules (the _role_problems filter): that NVIDIA publishes a CUDA
repository for the host's distribution and architecture, and the repository and keyring URLs
(_apt_auth.split, the rules the repository_url filter applies when the role splits their
credentials off).

The settings are the role's variables by name, plus ``inventory_hostname``, the host's
``distribution``, ``distribution_major_version`` and ``architecture`` facts, and the role's
tables of NVIDIA's names (``distros``: "Debian-12" -> "debian12"; ``arches``: "aarch64" ->
"sbsa"). A URL's password is never shown."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth

NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos/"
KEYRING = "cuda-keyring_1.1-1_all.deb"
DIRECTORY_URL = re.compile(r"^(https?|file)://\S+/\Z")
DEB_URL = re.compile(r"^(https?|file)://\S+\.deb\Z")


def default_url(settings):
    """NVIDIA's repository for the host, or None where it publishes none."""
    distros, arches = settings.get("distros") or {}, settings.get("arches") or {}
    name = "%s-%s" % (settings.get("distribution"), settings.get("distribution_major_version"))
    arch = settings.get("architecture")
    if name not in distros or not isinstance(arch, str) or arch not in arches:
        return None
    return "%s%s/%s/" % (NVIDIA_REPOS, distros[name], arches[arch])


def settings_problems(settings):
    problems = []
    default = default_url(settings)
    if default is None:
        problems.append(
            "%s runs %s-%s on %s; gpufleet.inference installs NVIDIA's CUDA repository on %s (%s)."
            % (
                settings.get("inventory_hostname"),
                settings.get("distribution"),
                settings.get("distribution_major_version"),
                settings.get("architecture"),
                ", ".join(settings.get("distros") or {}),
                ", ".join(settings.get("arches") or {}),
            )
        )
    given = settings.get("cuda_repository_url")
    url = given if given else default
    repository, good = None, False
    if url is not None:
        repository = _apt_auth.split(url, "cuda_repository_url")
        good = not repository["problem"] and DIRECTORY_URL.match(repository["url"])
        if not good:
            problems.append(
                "%s; give the http(s):// (or file://) URL of the flat repository directory, ending with '/', for "
                "example %s"
                % (
                    repository["problem"]
                    or "cuda_repository_url=%s is not a repository directory URL" % repository["shown"],
                    default or NVIDIA_REPOS + "<distribution>/<architecture>/",
                )
            )
    keyring = settings.get("cuda_repository_keyring_url")
    # The default keyring URL is derived from the repository's: checked only when that one is good.
    if keyring or good:
        split = _apt_auth.split(keyring if keyring else url + KEYRING, "cuda_repository_keyring_url")
        if split["problem"] or not DEB_URL.match(split["url"]):
            problems.append(
                "%s; leave it empty to use %s%s"
                % (
                    split["problem"] or "cuda_repository_keyring_url=%s is not the URL of a .deb" % split["shown"],
                    repository["shown"] if repository else NVIDIA_REPOS + "<distribution>/<architecture>/",
                    KEYRING,
                )
            )
    return problems
