"""Fetch the pinned llama.cpp source and make the tiny lab model, once, into the lab cache.

The llama_rpc molecule scenario, the lab stage of `make test` and `make demo` hand both to the
roles as controller-local files, the way an air-gapped site would:

    python3 scripts/lab/llama_assets.py [--source-url URL] [--source-checksum sha256:HEX]
        # prints one line of JSON: source, checksum, model, model_checksum, artifacts

The source is the llama-cpp-python sdist from PyPI, which vendors the full llama.cpp tree; it is
the llama_cpp role's default source, so the pin lives in roles/llama_cpp/defaults/main.yml
(llama_cpp_source, llama_cpp_source_checksum). Files are reused when their checksums match, so
only the first run downloads. Without a route to PyPI, either give --source-url a mirror of the
same file (the pinned checksum still applies), or put the file into $GPUFLEET_LAB_CACHE/src/
under its own name beforehand. --source-checksum replaces the pin, for another sdist; the
model is then made from that sdist's tree (NAME-VERSION/vendor/llama.cpp).

Standard output is the JSON alone, on the first run as on a cached one: the progress of this
script and of make_tiny_gguf.py goes to standard error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml
from _stdout import stdout_to_stderr

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
DEFAULTS = ROOT / "roles" / "llama_cpp" / "defaults" / "main.yml"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_source(url: str, checksum: str) -> tuple[Path, str]:
    expected = checksum.split(":", 1)[1]
    path = CACHE / "src" / url.rsplit("/", 1)[1]
    if path.exists() and sha256(path) == expected:
        return path, checksum
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    print(f"llama_assets: downloading {url}", file=sys.stderr, flush=True)
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
        print(f"llama_assets: making {model}", file=sys.stderr, flush=True)
        script = ROOT / "scripts" / "lab" / "make_tiny_gguf.py"
        argv = [sys.executable, str(script), "--source", str(source), "--tree", tree_of(source), "--out", str(model)]
        subprocess.run(argv, check=True)
    return model, "sha256:" + sha256(model)


def main(argv: list[str] | None = None) -> int:
    defaults = yaml.safe_load(DEFAULTS.read_text())
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source-url", default=defaults["llama_cpp_source"], help="default: %(default)s")
    parser.add_argument(
        "--source-checksum", default=defaults["llama_cpp_source_checksum"], help="sha256:HEX; default: %(default)s"
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", args.source_checksum):
        parser.error(f"--source-checksum {args.source_checksum}: give sha256:<64 hex digits>")
    with stdout_to_stderr():
        source, checksum = fetch_source(args.source_url, args.source_checksum)
        model, model_checksum = make_model(source)
    result = {
        "source": str(source),
        "checksum": checksum,
        "model": str(model),
        "model_checksum": model_checksum,
        "artifacts": str(CACHE / "llama.cpp"),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
