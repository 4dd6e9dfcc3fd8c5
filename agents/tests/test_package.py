# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The package's face: every console script of pyproject.toml names a main() that exists and says
the package's version; the wheel is reproducible and carries the shared module_utils as files."""

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import gpufleet_agents
import pytest
import tomllib
from conftest import program

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))
import gpufleet_build  # noqa: E402

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_the_three_programs_are_console_scripts():
    assert sorted(SCRIPTS) == ["gpufleet-frontdoor", "gpufleet-health-agent", "gpufleet-vllm-guard"]


@pytest.mark.parametrize(("script", "target"), sorted(SCRIPTS.items()))
def test_a_console_script_says_its_version(script, target):
    module_name, function = target.split(":")
    assert callable(getattr(importlib.import_module(module_name), function))
    proc = subprocess.run(
        [*program(module_name.split(".")[1]), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{script} {gpufleet_agents.__version__}\n"


def test_the_wheel_is_reproducible_and_holds_the_shared_files_as_files(tmp_path):
    name, data = gpufleet_build.wheel_bytes()
    assert name == f"gpufleet_agents-{gpufleet_agents.__version__}-py3-none-any.whl"
    assert gpufleet_build.wheel_bytes()[1] == data
    path, written = gpufleet_build.write_wheel(str(tmp_path))
    assert written and Path(path).read_bytes() == data
    assert gpufleet_build.write_wheel(str(tmp_path)) == (path, False)
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        for shared in ("_gpu.py", "_vllm_metrics.py", "_frontdoor.py", "_health_agent_config.py"):
            source = ROOT.parent / "plugins" / "module_utils" / shared
            assert wheel.read(f"gpufleet_agents/{shared}") == source.read_bytes()
        entry_points = wheel.read(f"gpufleet_agents-{gpufleet_agents.__version__}.dist-info/entry_points.txt").decode()
    assert all(f"{script} = {target}" in entry_points for script, target in SCRIPTS.items())
    assert not [entry for entry in names if "__pycache__" in entry or entry.endswith(".pyc")]
