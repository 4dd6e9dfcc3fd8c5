"""The topology inventory plugin at scale: `ansible-inventory --list` on generated manifests.

    .venv/bin/python benchmarks/topology_scale.py [--sizes 100,500,2000] [--runs 3]

Each manifest has racks of 16 servers with 8 GPUs each and vLLM replicas of 8 nodes, the shape
of a large site. For every size: the median wall time of `ansible-inventory --list` over --runs,
its output size and the largest resident memory of one run. The figure of merit is the marginal
time per server, (t[i] - t[i-1]) / (n[i] - n[i-1]), of the largest step against the smallest:
about 1 when the plugin is linear in the servers, and growing with the size when it is not
(a per-host copy of something that grows with the cluster gives about 4 here). Ansible's own
start-up, the same at every size, drops out of the difference.

Results go to benchmarks/results/ as JSON. Nothing here asserts a time: these machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from _results import save

ROOT = Path(__file__).resolve().parents[1]
INVENTORY_BIN = ROOT / ".venv" / "bin" / "ansible-inventory"
RACK = 16
REPLICA = 8


def manifest(servers: int) -> dict:
    """A valid manifest of `servers` servers: addresses from /12 subnets, racks of 16, replicas of 8."""
    racks = []
    names = []
    for rack in range((servers + RACK - 1) // RACK):
        members = []
        for slot in range(1, RACK + 1):
            if len(names) == servers:
                break
            names.append(f"gpu{len(names) + 1:05d}")
            members.append({"name": names[-1], "slot": slot, "gpus": 8})
        racks.append({"name": f"r{rack + 1}", "id": rack + 1, "servers": members})
    replicas = [
        {"replica": f"rep{index // REPLICA + 1}", "nodes": names[index : index + REPLICA]}
        for index in range(0, len(names) - len(names) % REPLICA, REPLICA)
    ]
    return {
        "plugin": "gpufleet.inference.topology",
        "name": f"scale-{servers}",
        "fabric": {
            "subnet": "10.0.0.0/12",
            "interface": "eth1",
            "mtu": 9000,
            "host_offset": 10,
            "rack_size": RACK,
            "max_racks": len(racks),
        },
        "management": {"subnet": "172.16.0.0/12", "host_offset": 10, "rack_size": RACK},
        "racks": racks,
        "serving": {"vllm": replicas},
    }


def measure(path: Path) -> tuple[float, int]:
    """Wall seconds and output bytes of one `ansible-inventory --list`."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    start = time.monotonic()
    proc = subprocess.run(
        [str(INVENTORY_BIN), "-i", str(path), "--list"], cwd=ROOT, env=env, capture_output=True, check=True
    )
    return time.monotonic() - start, len(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500,2000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-topology-scale-") as tmp:
        for size in sizes:
            # The plugin reads only files named topology.yml.
            path = Path(tmp, str(size), "topology.yml")
            path.parent.mkdir()
            path.write_text(yaml.safe_dump(manifest(size), sort_keys=False))
            times, output = [], 0
            for _run in range(args.runs):
                seconds, output = measure(path)
                times.append(seconds)
            # ru_maxrss of the children so far: the sizes grow, so it is this size's run.
            peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            rows.append(
                {
                    "servers": size,
                    "median_s": round(statistics.median(times), 3),
                    "runs_s": [round(t, 3) for t in times],
                    "output_bytes": output,
                    "peak_rss_mib": round(peak_mib, 1),
                }
            )
            print(f"{size} servers: {rows[-1]['median_s']} s, {output} bytes, {peak_mib:.0f} MiB", flush=True)
    steps = [
        (later["median_s"] - earlier["median_s"]) / (later["servers"] - earlier["servers"])
        for earlier, later in zip(rows, rows[1:])
    ]
    result = {
        "what": "ansible-inventory --list on topology manifests of racks of 16 and replicas of 8",
        "sizes": rows,
        "per_server_s": {str(row["servers"]): round(row["median_s"] / row["servers"], 5) for row in rows},
        "marginal_per_server_s": [round(step, 6) for step in steps],
        # About 1 when linear; it grows with the size when every host carries an O(n) copy.
        "ratio_largest_to_smallest_step": round(steps[-1] / steps[0], 2) if len(steps) > 1 and steps[0] > 0 else None,
    }
    save("topology-scale", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
