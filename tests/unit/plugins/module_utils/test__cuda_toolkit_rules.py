# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_cuda_toolkit_rules.py: the cuda_toolkit preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._cuda_toolkit_rules import settings_problems

VERSIONS_FIX = 'must list distinct CUDA versions as "X.Y" strings, for example ["12.8"]; the role installs'


@pytest.mark.parametrize(
    ("versions", "default"),
    [(["12.5"], ""), (["12.8", "12.5"], "12.5"), ([12.8, "13.0"], "12.8"), (["12.8"], 12.8), (["12.10"], "12.10")],
)
def test_good_settings_have_no_problems(versions, default):
    assert settings_problems({"cuda_toolkit_versions": versions, "cuda_toolkit_default_version": default}) == []


@pytest.mark.parametrize(
    ("versions", "default", "messages"),
    [
        ([], "", ["cuda_toolkit_versions=[] " + VERSIONS_FIX]),
        (["12.8.1"], "", ["cuda_toolkit_versions=['12.8.1'] " + VERSIONS_FIX]),
        (["12.8", "12.8"], "", ["cuda_toolkit_versions=['12.8', '12.8'] " + VERSIONS_FIX]),
        (["12.8", 12.8], "", ["cuda_toolkit_versions=['12.8', 12.8] " + VERSIONS_FIX]),
        ("12.8", "", ["cuda_toolkit_versions=12.8 " + VERSIONS_FIX]),
        (None, "", ["cuda_toolkit_versions=None " + VERSIONS_FIX]),
        (
            ["12.8"],
            "12.9",
            ["cuda_toolkit_default_version=12.9 is not one of cuda_toolkit_versions=['12.8']; add it there or leave "
             "it empty."],
        ),
        (["12.8"], None, ["cuda_toolkit_default_version=None is not one of"]),
        (["x"], "12.8", ["cuda_toolkit_versions=['x'] " + VERSIONS_FIX, "cuda_toolkit_default_version=12.8 is not"]),
    ],
)  # fmt: skip
def test_each_problem_is_named_with_its_value_and_the_fix(versions, default, messages):
    problems = settings_problems({"cuda_toolkit_versions": versions, "cuda_toolkit_default_version": default})
    assert len(problems) == len(messages)
    for problem, message in zip(problems, messages):
        assert problem.startswith(message)
