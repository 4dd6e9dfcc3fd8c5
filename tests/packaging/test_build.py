"""The built collection artifact ships the collection and nothing of the lab, tests or CI."""

import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
GALAXY = Path(sys.executable).parent / "ansible-galaxy"

SHIPPED = (
    "MANIFEST.json",
    "meta/runtime.yml",
    "README.md",
    "LICENSE",
    "roles/nccl/tasks/main.yml",
    "plugins/modules/nccl_info.py",
    "plugins/filter/nccl_env.py",
    "plugins/module_utils/_nccl.py",
    "playbooks/site.yml",
    "agents/pyproject.toml",
    "agents/build_backend/gpufleet_build.py",
    "agents/src/gpufleet_agents/health_agent.py",
    "agents/src/gpufleet_agents/_gpu.py",
)
NOT_SHIPPED_PREFIXES = (
    ".ci/",
    ".config/",
    ".venv/",
    ".git/",
    "scripts/",
    "tests/",
    "agents/tests/",
    "molecule/",
    "build/",
    "collections/",
    "inventories/lab/",
    "benchmarks/",
)


def test_build_leaves_out_lab_tests_and_ci(tmp_path):
    proc = subprocess.run(
        [str(GALAXY), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (artifact,) = tmp_path.glob("gpufleet-inference-*.tar.gz")
    with tarfile.open(artifact) as tar:
        names = {name.removeprefix("./") for name in tar.getnames()}
    missing = [name for name in SHIPPED if name not in names]
    assert not missing, f"artifact lacks {missing}"
    leaked = sorted(n for n in names if n.startswith(NOT_SHIPPED_PREFIXES) or n + "/" in NOT_SHIPPED_PREFIXES)
    assert not leaked, f"artifact ships development files: {leaked}"


def test_what_runs_leave_in_the_checkout_is_not_built():
    """Every top-level path .gitignore names (fact cache, reports, the lab's inventory, build
    outputs) is in galaxy.yml's build_ignore: an artifact never carries a site's hosts, and a build
    beside a running play never reads files the play is writing."""
    ignored = {
        line.strip().strip("/")
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.startswith("/") and not line.startswith("/gpufleet-inference-")
    }
    build_ignore = set(yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"])
    covered = {path for path in ignored if any(path == i or path.startswith(f"{i}/") for i in build_ignore)}
    assert sorted(ignored - covered) == []
