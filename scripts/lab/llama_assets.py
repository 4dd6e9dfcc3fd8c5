"""Fetch the pinned llama.cpp source and make the tiny lab model, once, into the lab cache.

The llama_rpc molecule scenario, the lab stage of `make test` and `make demo` hand both to the
roles as controller-local files, the way an air-gapped site would:

    python3 scripts/lab/llama_assets.py            # prints JSON: source, checksum, model, model_checksum

The source is the llama-cpp-python sdist from PyPI, which vendors the full llama.cpp tree; it is
the llama_cpp role's default source, so the pin lives in roles/llama_cpp/defaults/main.yml.
Files are reused when their checksums match, so only the first run downloads.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
DEFAULTS = ROOT / "roles" / "llama_cpp" / "defaults" / "main.yml"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_source() -> tuple[Path, str]:
    defaults = yaml.safe_load(DEFAULTS.read_text())
    url, checksum = defaults["llama_cpp_source"], defaults["llama_cpp_source_checksum"]
    expected = checksum.split(":", 1)[1]
    path = CACHE / "src" / url.rsplit("/", 1)[1]
    if path.exists() and sha256(path) == expected:
        return path, checksum
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    print(f"llama_assets: downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=300) as response, partial.open("wb") as out:
        while block := response.read(1 << 20):
            out.write(block)
    got = sha256(partial)
    if got != expected:
        partial.unlink()
        sys.exit(f"llama_assets: {url} has sha256:{got}, expected {checksum}")
    partial.replace(path)
    return path, checksum


def tree_of(source: Path) -> str:
    """The llama.cpp tree inside the sdist: <name>-<version>/vendor/llama.cpp."""
    return source.name.removesuffix(".tar.gz") + "/vendor/llama.cpp"


def make_model(source: Path) -> tuple[Path, str]:
    model = CACHE / "models" / f"tiny-llama-{sha256(source)[:12]}.gguf"
    if not model.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "lab" / "make_tiny_gguf.py"),
                "--source",
                str(source),
                "--tree",
                tree_of(source),
                "--out",
                str(model),
            ],
            check=True,
            stdout=sys.stderr,
        )
    return model, "sha256:" + sha256(model)


def main() -> None:
    source, checksum = fetch_source()
    model, model_checksum = make_model(source)
    print(
        json.dumps(
            {
                "source": str(source),
                "checksum": checksum,
                "model": str(model),
                "model_checksum": model_checksum,
                "artifacts": str(CACHE / "llama.cpp"),
            }
        )
    )


if __name__ == "__main__":
    main()
