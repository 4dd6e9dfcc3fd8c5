# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet-agents wheel as a host gets it (agents/README.md): built by the agents role's
command from the checkout and from the built collection alike, installed with pip and no index
into a venv that has nothing of the collection, where its programs run and say their version."""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / "agents"
BUILD = Path("build_backend") / "gpufleet_build.py"
GALAXY = Path(sys.executable).parent / "ansible-galaxy"
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
PROGRAMS = ("gpufleet-health-agent", "gpufleet-frontdoor", "gpufleet-vllm-guard")


def build(source: Path, out: Path) -> Path:
    """The wheel, built as the agents role builds it: `python3 gpufleet_build.py OUT_DIR`."""
    proc = subprocess.run(
        [sys.executable, str(source / BUILD), str(out)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.splitlines()[0])
    assert path.parent == out and proc.stdout.splitlines()[1] == "written"
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build(AGENTS, tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel):
    """A fresh venv with the wheel installed offline; no site packages, no collection."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    proc = subprocess.run(
        [root / "bin" / "python", "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
         wheel],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def test_the_package_has_the_collections_version(wheel):
    assert wheel.name == f"gpufleet_agents-{VERSION}-py3-none-any.whl"


def test_pip_builds_the_same_wheel_through_the_backend_hooks(tmp_path, wheel):
    """pyproject.toml's in-tree backend, as pip calls it (PEP 517), with no index."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-index", "--no-deps", "--disable-pip-version-check",
         "-w", str(tmp_path), str(AGENTS)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / wheel.name).read_bytes() == wheel.read_bytes()


def test_the_built_collection_builds_the_same_wheel(tmp_path, wheel):
    """The shared module_utils are links in the source tree: the collection artifact keeps them."""
    proc = subprocess.run(
        [str(GALAXY), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (artifact,) = tmp_path.glob("gpufleet-inference-*.tar.gz")
    with tarfile.open(artifact) as tar:
        tar.extractall(tmp_path / "collection", filter="tar")
    assert build(tmp_path / "collection" / "agents", tmp_path / "out").read_bytes() == wheel.read_bytes()


@pytest.mark.parametrize("program", PROGRAMS)
def test_an_installed_program_says_its_version(venv, program, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run(
        [venv / "bin" / program, "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, f"{program} {VERSION}\n"), proc.stderr


def test_the_installed_front_door_checks_its_config_with_the_shared_rules(venv, tmp_path):
    """_frontdoor (module_utils) is in the package: the CLI refuses a bad config with its message."""
    config = tmp_path / "frontdoor.json"
    config.write_text(
        '{"haproxy_socket": "/run/haproxy/admin.sock", "backend": "inference", "state_dir": "/nonexistent",'
        ' "controller": {"interval": 0}}'
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run(
        [venv / "bin" / "gpufleet-frontdoor", "--config", config, "status"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "controller 'interval' must be a number of seconds > 0" in proc.stdout, proc.stdout
