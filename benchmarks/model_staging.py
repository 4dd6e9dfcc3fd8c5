"""Staging a model onto lab hosts: the vllm role's fan-out against the controller copy of today and
against the bound of the model's bytes over one link's rate, measured in one run.

    .venv/bin/python benchmarks/model_staging.py [--rate-mbit 200] [--shards 64] [--shard-mib 32]

Needs a lab of at least 10 hosts (`make lab LAB_HOSTS=10 LAB_SERVING=none`). Every link is
shaped with tc's token bucket filter to --rate-mbit: each host's egress on the management network
and on the fabric, and the controller's egress on the management bridge (its one link towards the
hosts). The bound is then a real number, and the two cores of a lab machine are not the limit.

For 4 and then 10 hosts it times, from the playbook's start to its end:
- fanout: the vllm role's `stage` entry point with vllm_model_staging=fanout: one copy onto the
  first host over the controller's link (landing), then rsync between the hosts on the fabric;
- copy: ansible.builtin.copy of the directory from the controller to every host, as
  vllm_model_staging=copy does (10 hosts only; its time grows with the hosts by construction).
The fan-out's own part is read from the role's per-host results (the longest fetch). The model is
--shards random shards (a fixed seed) with a config.json and a model.safetensors.index.json.
The shard size follows the link: a 32 MiB shard over 200 Mbit/s takes 1.3 s, as a 4.3 GB shard
of a DeepSeek-class checkpoint takes over the flagship's 25 Gbit/s, so the per-file costs of the
fan-out (an rsync run, a sha256, a host waiting on the one before it) weigh as they would there.
The shaping is removed at the end. The JSON goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from _lab import ROOT, inventory
from _results import save

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
PLAYBOOK = ROOT / "benchmarks" / "model_staging.yml"
DEST = "/var/lib/gpufleet/models/bench"
MGMT_NETWORK = "gpufleet-lab-mgmt"


def build_model(shards: int, shard_mib: int) -> tuple[Path, str, int]:
    import _vllm_model  # noqa: PLC0415  (plugins/module_utils, as the collection computes the digest)

    path = CACHE / "bench" / f"model-{shards}x{shard_mib}MiB"
    if not (path / "config.json").exists():
        path.mkdir(parents=True, exist_ok=True)
        rng = random.Random(20261205)
        weight_map = {}
        for n in range(shards):
            name = f"model-{n + 1:05d}-of-{shards:05d}.safetensors"
            (path / name).write_bytes(rng.randbytes(shard_mib << 20))
            weight_map[f"model.layers.{n}.mlp.weight"] = name
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        (path / "config.json").write_text(json.dumps({"num_hidden_layers": shards}))
    files = _vllm_model.model_files(str(path))
    return path, "sha256:" + _vllm_model.tree_digest(str(path), files), sum(size for _r, _f, size in files)


def sh(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def shape(hosts: list[str], rate: str, on: bool) -> None:
    bridge = "br-" + sh(["docker", "network", "inspect", "-f", "{{.Id}}", MGMT_NETWORK]).stdout.strip()[:12]
    targets = [(None, bridge)] + [(host, dev) for host in hosts for dev in ("eth0", "eth1")]
    for host, dev in targets:
        prefix = ["docker", "exec", host] if host else []
        if on:
            sh(
                [
                    *prefix,
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    "256kb",
                    "latency",
                    "100ms",
                ]
            )
        else:
            sh([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], check=False)


def clean(hosts: list[str]) -> None:
    for host in hosts:
        sh(
            [
                "docker",
                "exec",
                host,
                "sh",
                "-c",
                f"rm -rf {DEST} {DEST}.source {DEST}.staging {DEST}.source.manifest.json",
            ]
        )


def play(hosts: list[str], mode: str, src: Path, checksum: str, size: int) -> tuple[float, str]:
    extra = {
        "bench_mode": mode,
        "bench_src": str(src),
        "bench_checksum": checksum,
        "bench_path": DEST,
        "bench_bytes": size,
    }
    start = time.monotonic()
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            str(ROOT / "inventories" / "lab"),
            "-f",
            str(len(hosts)),
            "--limit",
            ",".join(hosts),
            "-e",
            json.dumps(extra),
            str(PLAYBOOK),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
    )
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark: the {mode} play failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def fetch_seconds(output: str) -> dict:
    """The role's per-host fetch results (the 'Wait for this node's files' task) from the json callback."""
    data = json.loads(output)
    found = {}
    for each in data["plays"]:
        for task in each["tasks"]:
            if task["task"]["name"].endswith("Wait for this node's files"):
                for host, result in task["hosts"].items():
                    found[host] = {"elapsed_s": result.get("elapsed_s"), "by_source": result.get("by_source")}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate-mbit", type=int, default=200)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--shard-mib", type=int, default=32)
    args = parser.parse_args()
    _groups, hostvars = inventory("make lab LAB_HOSTS=10 LAB_SERVING=none")
    hosts = sorted(hostvars, key=lambda h: (h != "lab-head", len(h), h))
    if len(hosts) < 10:
        sys.exit(f"benchmark: the lab has {len(hosts)} hosts; run `make lab LAB_HOSTS=10 LAB_SERVING=none`")
    src, checksum, size = build_model(args.shards, args.shard_mib)
    rate_bytes = args.rate_mbit * 1_000_000 / 8
    bound = size / rate_bytes
    result = {
        "model_bytes": size,
        "shards": args.shards,
        "rate_mbit": args.rate_mbit,
        "bound_s": round(bound, 2),
        "runs": {},
    }
    shape(hosts, f"{args.rate_mbit}mbit", on=True)
    try:
        for count, mode in ((4, "fanout"), (10, "fanout"), (10, "copy")):
            clean(hosts)
            elapsed, output = play(hosts[:count], mode, src, checksum, size)
            run = {"hosts": count, "mode": mode, "play_s": round(elapsed, 2)}
            if mode == "fanout":
                fetches = fetch_seconds(output)
                run["fetch_s"] = max(v["elapsed_s"] or 0 for v in fetches.values())
                run["fetch_over_bound"] = round(run["fetch_s"] / bound, 2)
                run["by_source"] = {k: v["by_source"] for k, v in fetches.items()}
            result["runs"][f"{mode}-{count}"] = run
            print(json.dumps(run), file=sys.stderr)
    finally:
        shape(hosts, "", on=False)
        clean(hosts)
    runs = result["runs"]
    result["copy_over_fanout_10"] = round(runs["copy-10"]["play_s"] / runs["fanout-10"]["play_s"], 2)
    result["fanout_10_over_4"] = round(runs["fanout-10"]["fetch_s"] / runs["fanout-4"]["fetch_s"], 2)
    save("model-staging", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
