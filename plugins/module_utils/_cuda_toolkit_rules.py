# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cuda_toolkit role's input rules (the _role_problems filter): the toolkit versions and the
default one. The settings are the role's variables by name."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+\Z")


def settings_problems(settings):
    problems = []
    versions = settings.get("cuda_toolkit_versions")
    names = [str(version) for version in versions] if isinstance(versions, list) else []
    if not names or not all(CUDA_VERSION.match(name) for name in names) or len(set(names)) != len(names):
        problems.append(
            'cuda_toolkit_versions=%s must list distinct CUDA versions as "X.Y" strings, for example ["12.8"]; '
            "the role installs cuda-toolkit-X-Y for each." % (versions,)
        )
    default = settings.get("cuda_toolkit_default_version")
    # Empty means the first of the versions, which is one of them.
    if str(default) and str(default) not in names:
        problems.append(
            "cuda_toolkit_default_version=%s is not one of cuda_toolkit_versions=%s; add it there or leave it empty."
            % (default, versions)
        )
    return problems
