"""What the RPC split costs: the lab cluster's tokens/s as a ratio of one local llama-server's.

Run after `make llama-demo` (the lab is up and serves through its RPC workers):

    .venv/bin/python benchmarks/llama_rpc_overhead.py [--runs 5] [--tokens 64]

On the coordinator, it starts a second llama-server from the same build and the same model,
without --rpc (the whole model on the coordinator's CPU), on a spare loopback port. Then it
alternates completions between the two servers, so both see the same machine load, and reports
the median prefill and decode tokens/s of each (llama-server's own timings) and their ratio
(cluster / local). The reference is measured in the same run; nothing is compared with a fixed
number. The JSON goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _lab import inventory
from _results import save

ROOT = Path(__file__).resolve().parents[1]
LOCAL_PORT = 18181
PROMPT = (
    "The RPC backend of llama.cpp lets one coordinator run a model whose layers and experts live in the "
    "memory of several other machines. Explain in detail how tensors move between them during a forward pass."
)
# Runs inside the coordinator: one completion against a port, printing llama-server's timings.
CLIENT = """
import json, sys, urllib.request
port, n_predict, prompt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"prompt": prompt, "n_predict": n_predict, "seed": 42, "cache_prompt": False,
                   "ignore_eos": True}).encode()
req = urllib.request.Request("http://127.0.0.1:%d/completion" % port, data=body,
                             headers={"Content-Type": "application/json"})
print(json.dumps(json.load(urllib.request.urlopen(req, timeout=300))["timings"]))
"""


def docker_exec(host: str, *argv: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", host, *argv], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"benchmark: {' '.join(argv)} on {host} failed: {proc.stderr.strip()}")
    return proc.stdout


def completion(host: str, port: int, tokens: int) -> dict:
    return json.loads(docker_exec(host, "python3", "-c", CLIENT, str(port), str(tokens), PROMPT))


def try_completion(host: str, port: int, tokens: int) -> dict | None:
    proc = subprocess.run(
        ["docker", "exec", host, "python3", "-c", CLIENT, str(port), str(tokens), PROMPT],
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    groups, hostvars = inventory("make llama-demo")
    if not groups.get("llama_coordinator"):
        sys.exit("benchmark: the lab has no llama.cpp cluster; run `make llama-demo` first")
    head = groups["llama_coordinator"][0]
    workers = groups.get("llama_rpc_workers", [])
    model = hostvars[head]["llama_server_model_path"]
    ctx = str(hostvars[head].get("llama_server_ctx_size", 512))
    server = "/opt/llama.cpp/current/bin/llama-server"

    unit = docker_exec(head, "systemctl", "show", "-P", "ExecStart", "gpufleet-llama-server.service")
    if "--rpc" not in unit:
        sys.exit("benchmark: gpufleet-llama-server on the coordinator has no --rpc; run `make llama-demo` first")
    cluster_port = int(hostvars[head].get("llama_server_port", 8080))

    docker_exec(
        head,
        "systemd-run",
        "--unit=gpufleet-bench-local",
        "--collect",
        server,
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(LOCAL_PORT),
        "--ctx-size",
        ctx,
        "--n-gpu-layers",
        "0",
    )
    try:
        deadline = time.monotonic() + 120
        while try_completion(head, LOCAL_PORT, 1) is None:  # loading the model
            if time.monotonic() > deadline:
                sys.exit("benchmark: the local reference llama-server did not answer within 120 s")
            time.sleep(2)
        completion(head, cluster_port, 1)  # warm both before measuring
        cluster, local = [], []
        for _run in range(args.runs):
            cluster.append(completion(head, cluster_port, args.tokens))
            local.append(completion(head, LOCAL_PORT, args.tokens))
    finally:
        docker_exec(head, "systemctl", "stop", "gpufleet-bench-local", check=False)

    def median(runs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    result = {
        "coordinator": head,
        "workers": workers,
        "runs": args.runs,
        "generated_tokens": args.tokens,
        "prompt_tokens": cluster[-1]["prompt_n"],
        "cluster": {
            "prefill_tps": median(cluster, "prompt_per_second"),
            "decode_tps": median(cluster, "predicted_per_second"),
        },
        "local": {
            "prefill_tps": median(local, "prompt_per_second"),
            "decode_tps": median(local, "predicted_per_second"),
        },
    }
    result["ratio"] = {
        "prefill": round(result["cluster"]["prefill_tps"] / result["local"]["prefill_tps"], 3),
        "decode": round(result["cluster"]["decode_tps"] / result["local"]["decode_tps"], 3),
    }
    save("llama_rpc_overhead", result)


if __name__ == "__main__":
    main()
