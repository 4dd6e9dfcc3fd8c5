"""What the pipeline split costs, measured by the serving acceptance: the PP=2 vLLM replica's
time to first token, time per output token and output throughput at each concurrency, as ratios
of the one-node replica serving the same model, from one run of playbooks/validate_serving.yml.

Run on the demo lab (`make bench` does it all; or `make demo`, whose 4-host lab has the PP=2
replica `lab` on lab-head and lab-w1 and the one-node replica `solo` on lab-w2):

    .venv/bin/python benchmarks/serving_pipeline.py [--concurrency 1 2 4]

The acceptance measures the two replicas one after the other from the front door host with
vllm bench serve (the lab's chat workload: 64-token prompts, 32 generated tokens), so the machine's
load may differ between them; the ratios are medians (p50) per point. The JSON goes to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _lab import ROOT, inventory
from _results import save

REPORT = ROOT / "serving-acceptance" / "pipeline"


def ratio(pp, one):
    """PP=2 over one node, or None when either is missing."""
    return round(pp / one, 3) if pp and one else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    groups = inventory("make demo")[0]
    if "vllm_replica_lab" not in groups or "vllm_replica_solo" not in groups:
        sys.exit("benchmark: the demo lab's replicas lab (PP=2) and solo (one node) are needed; run `make demo`")
    extra = {
        "serving_acceptance_targets": ["lab", "solo"],
        "serving_acceptance_concurrency": args.concurrency,
        "serving_acceptance_report_dir": str(REPORT),
    }
    proc = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "ansible-playbook"),
            "-i",
            "inventories/lab",
            "playbooks/validate_serving.yml",
            "-e",
            json.dumps(extra),
        ],
        cwd=ROOT,
        check=False,
    )
    report = json.loads((REPORT / "serving-acceptance.json").read_text())
    targets = {target["name"]: target for target in report["targets"]}
    points = {}
    for pp, one in zip(targets["lab"]["points"], targets["solo"]["points"]):
        points[pp["name"]] = {
            "ttft_ratio": ratio(pp["ttft_ms"].get("p50"), one["ttft_ms"].get("p50")),
            "tpot_ratio": ratio(pp["tpot_ms"].get("p50"), one["tpot_ms"].get("p50")),
            "throughput_ratio": ratio(pp["output_throughput"], one["output_throughput"]),
            "pp": {
                "ttft_ms_p50": pp["ttft_ms"].get("p50"),
                "tpot_ms_p50": pp["tpot_ms"].get("p50"),
                "tokens_per_s": pp["output_throughput"],
            },
            "one_node": {
                "ttft_ms_p50": one["ttft_ms"].get("p50"),
                "tpot_ms_p50": one["tpot_ms"].get("p50"),
                "tokens_per_s": one["output_throughput"],
            },
        }
    save(
        "serving-pipeline",
        {
            "what": "PP=2 replica 'lab' against the one-node replica 'solo', the same model, one acceptance run",
            "command": "benchmarks/serving_pipeline.py --concurrency " + " ".join(map(str, args.concurrency)),
            "acceptance_rc": proc.returncode,
            "verdict": report["verdict"],
            "points": points,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
