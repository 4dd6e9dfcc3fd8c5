"""What the pipeline split costs: a PP=2 vLLM replica's decode tokens/s and time to first token,
as ratios of a single-node vLLM serving the same model, measured in the same run.

Run on the demo lab (`make bench` does it all; or `make demo`, whose 4-host lab has the PP=2
replica `lab` on lab-head and lab-w1 and the one-node replica `solo` on lab-w2):

    .venv/bin/python benchmarks/vllm_pipeline.py [--runs 5] [--tokens 96]

From the single-node replica's host it alternates streaming completions between the PP=2 replica
(rank 0 on another host, the second stage on a third) and the single-node replica on the client
host itself, so both see the same machine load. Time to first token is the time to the first
streamed token; decode tokens/s counts the tokens after the first over the time after the first.
Greedy sampling with ignore_eos, so every run decodes exactly --tokens tokens. The JSON goes to
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from _lab import inventory
from _results import save

# Runs on the client host with the vLLM venv's python: one streamed completion, timed.
CLIENT = r"""
import json, sys, time, urllib.request
url, key, model, prompt, tokens = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
body = json.dumps({"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                   "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()
req = urllib.request.Request(url + "/v1/completions", data=body, headers={
    "Content-Type": "application/json", "Authorization": "Bearer " + key})
start = time.monotonic(); first = None; chunks = 0; usage = None
with urllib.request.urlopen(req, timeout=600) as resp:
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            usage = event["usage"]
        if event.get("choices") and event["choices"][0].get("text"):
            chunks += 1
            if first is None:
                first = time.monotonic()
end = time.monotonic()
n = usage["completion_tokens"] if usage else chunks
print(json.dumps({"ttft_s": first - start, "decode_tps": (n - 1) / (end - first), "tokens": n}))
"""
PROMPT = "Pipeline parallel stages pass activations between the nodes of a replica for every token"


def docker_exec(host: str, *argv: str) -> str:
    proc = subprocess.run(["docker", "exec", host, *argv], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"benchmark: {argv[:2]} on {host} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--pipeline", default="lab", help="the PP=2 replica")
    parser.add_argument("--single", default="solo", help="the one-node replica, whose host is the client")
    args = parser.parse_args()
    groups, hostvars = inventory("make demo")
    replicas = {
        name[len("vllm_replica_") :]: hosts for name, hosts in groups.items() if name.startswith("vllm_replica_")
    }
    if len(replicas.get(args.pipeline, [])) != 2 or len(replicas.get(args.single, [])) != 1:
        sys.exit(f"benchmark: needs a two-node {args.pipeline} and a one-node {args.single}; the lab has {replicas}")
    head, client = hostvars[replicas[args.pipeline][0]], replicas[args.single][0]
    args.client = client
    args.pipeline_url = f"http://{head['gpufleet_fabric_address']}:8000"
    args.single_url = f"http://{hostvars[client]['gpufleet_fabric_address']}:8000"
    args.model, args.key = head["vllm_served_model_name"], head["vllm_api_key"]

    python = docker_exec(args.client, "sh", "-c", "ls -d /opt/gpufleet/vllm/*/bin/python | head -n 1").strip()
    samples: dict[str, list[dict]] = {"pipeline": [], "single": []}
    # One warm-up each (first-request allocations), then alternate.
    for url in (args.pipeline_url, args.single_url):
        docker_exec(args.client, python, "-c", CLIENT, url, args.key, args.model, PROMPT, "8")
    for _unused in range(args.runs):
        for name, url in (("pipeline", args.pipeline_url), ("single", args.single_url)):
            out = docker_exec(args.client, python, "-c", CLIENT, url, args.key, args.model, PROMPT, str(args.tokens))
            samples[name].append(json.loads(out))

    def median(name: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[name])

    result = {
        "what": "vLLM PP=2 over two lab hosts vs one lab host, same model, same client, alternating runs",
        "runs": args.runs,
        "tokens": args.tokens,
        "pipeline": {"ttft_s": median("pipeline", "ttft_s"), "decode_tps": median("pipeline", "decode_tps")},
        "single": {"ttft_s": median("single", "ttft_s"), "decode_tps": median("single", "decode_tps")},
        "samples": samples,
    }
    result["decode_tps_ratio_pipeline_over_single"] = round(
        result["pipeline"]["decode_tps"] / result["single"]["decode_tps"], 3
    )
    result["ttft_ratio_pipeline_over_single"] = round(result["pipeline"]["ttft_s"] / result["single"]["ttft_s"], 3)
    # Per-token cost of the pipeline: the extra time each decoded token spends, in milliseconds.
    result["extra_ms_per_token"] = round(
        1000 / result["pipeline"]["decode_tps"] - 1000 / result["single"]["decode_tps"], 2
    )
    save("vllm-pipeline", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
