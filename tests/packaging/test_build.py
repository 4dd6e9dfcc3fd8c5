"""The built collection artifact ships the collection and nothing of the lab, tests or CI."""

import subprocess
import sys
import tarfile
from pathlib import Path

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
)
NOT_SHIPPED_PREFIXES = (
    ".ci/",
    ".config/",
    ".venv/",
    ".git/",
    "scripts/",
    "tests/",
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
