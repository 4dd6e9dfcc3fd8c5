# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module_utils files the roles copy beside their programs on a host import there.

A host has the standard library and nothing of the collection: a copied file that imports
ansible_collections (as a rule moved into it might) would break the program that loads it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
COPY = re.compile(r"role_path \}\}/\.\./\.\./plugins/module_utils/([^\"]+)\"")


def copied():
    """(role, file name) of every module_utils file a role's tasks copy onto hosts."""
    found = []
    for tasks in sorted(REPO.glob("roles/*/tasks/*.yml")):
        text = tasks.read_text()
        for name in COPY.findall(text):
            if name == "{{ item }}":
                loop = re.search(r"loop: \[([^\]]+)\]", text[text.index(name) :])
                found += [(tasks.parts[-3], item.strip()) for item in loop.group(1).split(",")]
            else:
                found.append((tasks.parts[-3], name))
    return found


def test_the_copies_are_found():
    assert {name for _role, name in copied()} >= {"_gpu.py", "_frontdoor.py", "_vllm_metrics.py"}


@pytest.mark.parametrize(("role", "name"), copied())
def test_a_copied_file_imports_with_the_standard_library_only(tmp_path, role, name):
    shutil.copy(REPO / "plugins" / "module_utils" / name, tmp_path / name)
    # -I: no PYTHONPATH, no user site, the script's directory only; no collection is importable.
    proc = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {Path(name).stem}"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, f"{role} copies {name} onto hosts, and there it does not import:\n{proc.stderr}"
