"""Fabric acceptance benchmarks on the lab, each a ratio against a reference measured in the same run.

    make lab LAB_HOSTS=4                                    # or more hosts
    .venv/bin/python benchmarks/fabric.py engine [--runs 3 --duration 5 --streams 4]
    .venv/bin/python benchmarks/fabric.py schedule [--duration 3 --streams 2]

engine:   on one lab link (the first two lab hosts), link_bandwidth's built-in Python engine
          against iperf3, same duration and streams, runs alternating; the ratio is
          python / iperf3 of the median Gbit/s (target: at least 0.9).
schedule: the wall time of playbooks/validate_fabric.yml for every pair of the lab hosts with
          the circle schedule (N-1 rounds of disjoint pairs) against the naive sequential one
          (one pair at a time); the ratio is circle / sequential.

Results go to benchmarks/results/ as JSON. Nothing here asserts a time: these machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import save

ROOT = Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "inventories" / "lab" / "topology.yml"
PLAYBOOK_BIN = ROOT / ".venv" / "bin" / "ansible-playbook"
INVENTORY_BIN = ROOT / ".venv" / "bin" / "ansible-inventory"

# One measurement: a one-test server on the second host, the client on the first.
ENGINE_PLAY = """
- hosts: "{server}"
  gather_facts: false
  tasks:
    - gpufleet.inference.link_bandwidth:
        mode: server
        backend: "{backend}"
        bind: "{{{{ gpufleet_fabric_address }}}}"
        port: 5301
        duration: {duration}
        timeout: 60
      async: 120
      poll: 0
      register: job
- hosts: "{client}"
  gather_facts: false
  tasks:
    - gpufleet.inference.link_bandwidth:
        mode: client
        backend: "{backend}"
        peer: "{{{{ hostvars['{server}'].gpufleet_fabric_address }}}}"
        port: 5301
        duration: {duration}
        streams: {streams}
      register: result
    - ansible.builtin.copy:
        content: "{{{{ result | to_json }}}}"
        dest: "{out}"
        mode: "0644"
      delegate_to: localhost
- hosts: "{server}"
  gather_facts: false
  tasks:
    - ansible.builtin.async_status:
        jid: "{{{{ job.ansible_job_id }}}}"
      register: done
      until: done.finished
      retries: 60
      delay: 1
"""


def lab_hosts() -> list[str]:
    """The lab's fabric nodes, in the manifest's order, read through the topology plugin."""
    if not INVENTORY.exists():
        sys.exit("benchmark: no lab manifest; run `make lab LAB_HOSTS=4` first")
    proc = subprocess.run(
        [str(INVENTORY_BIN), "-i", str(INVENTORY), "--list"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    listing = json.loads(proc.stdout)
    return listing["fabric_nodes"]["hosts"]


def playbook(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(PLAYBOOK_BIN), "-i", str(INVENTORY), *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def measure(backend: str, client: str, server: str, duration: int, streams: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        out = Path(tmp, "result.json")
        play = Path(tmp, "play.yml")
        play.write_text(
            ENGINE_PLAY.format(
                backend=backend, client=client, server=server, duration=duration, streams=streams, out=out
            )
        )
        proc = playbook(str(play))
        if proc.returncode != 0 or not out.exists():
            sys.exit(f"benchmark: the {backend} measurement failed:\n{proc.stdout[-3000:]}")
        return json.loads(out.read_text())


def engine(args: argparse.Namespace) -> dict:
    client, server = lab_hosts()[:2]
    runs: dict[str, list[float]] = {"iperf3": [], "python": []}
    for _run in range(args.runs):
        for backend, values in runs.items():
            result = measure(backend, client, server, args.duration, args.streams)
            values.append(result["bits_per_second"] / 1e9)
    medians = {backend: statistics.median(values) for backend, values in runs.items()}
    return {
        "benchmark": "engine",
        "link": f"{client} -> {server}",
        "duration_s": args.duration,
        "streams": args.streams,
        "runs_gbps": runs,
        "median_gbps": medians,
        "ratio_python_over_iperf3": round(medians["python"] / medians["iperf3"], 3),
    }


def schedule(args: argparse.Namespace) -> dict:
    hosts = lab_hosts()
    walls = {}
    verdicts = {}
    for mode in ("sequential", "circle"):
        with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
            extra = {
                "fabric_validate_mode": mode,
                "fabric_validate_duration": args.duration,
                "fabric_validate_streams": args.streams,
                "fabric_validate_min_line_fraction": 0,
                "fabric_validate_min_best_fraction": 0.3,
                "fabric_validate_report_dir": tmp,
            }
            start = time.monotonic()
            proc = playbook(str(ROOT / "playbooks" / "validate_fabric.yml"), "-e", json.dumps(extra))
            walls[mode] = round(time.monotonic() - start, 1)
            # The wall time counts whatever the verdict: a failing pair on a busy machine is a
            # verdict, not a broken benchmark. Only a run that wrote no report is one.
            report = Path(tmp, "fabric-report.json")
            if not report.exists():
                sys.exit(f"benchmark: validate_fabric.yml ({mode}) wrote no report:\n{proc.stdout[-3000:]}")
            data = json.loads(report.read_text())
            verdicts[mode] = {"passed": data["passed"], "failing_pairs": len(data["failing"]), "rc": proc.returncode}
    pairs = len(hosts) * (len(hosts) - 1) // 2
    return {
        "benchmark": "schedule",
        "hosts": len(hosts),
        "pairs": pairs,
        "duration_s": args.duration,
        "streams": args.streams,
        "wall_s": walls,
        "verdict": verdicts,
        "ratio_circle_over_sequential": round(walls["circle"] / walls["sequential"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["engine", "schedule"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()
    save(f"fabric_{args.which}", engine(args) if args.which == "engine" else schedule(args))


if __name__ == "__main__":
    main()
