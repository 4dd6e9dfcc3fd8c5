"""The serving acceptance's lab proofs, on the site the deploy step left serving.

    .venv/bin/python scripts/lab.py up --hosts 10 --serving site
    .venv/bin/python tests/site/deploy.py          # its workflow runs the acceptance once, passing
    .venv/bin/python tests/site/serving.py

1. Refused before any load is sent: playbooks/validate_serving.yml in check mode with a workload
   the replicas cannot take (a 512 + 1,024-token request over their max-model-len of 512, a
   concurrency of 100 over their capacity plan's 8) and with a tokenizer directory that holds none.
   Each run must fail in the role's preflight, naming the variable, the value and the fix.
2. A slowed replica fails by name: the `tp` replica's unit is held to a sliver of a core
   (`systemctl set-property --runtime ... CPUQuota=`), and the job template "gpufleet serving
   acceptance" measures `pp` and `tp` in one run. The job must fail; its artifacts must say `tp`
   failed, naming the metric, and `pp` passed.
3. Undoing the slowdown makes it pass: the quota is lifted and the template measures `tp` again,
   in rate mode (requests arriving at a rate, at most two in flight). This run also sets the load
   generator's CPU (the benchmark's own, from the report) beside the replica's (its unit's CPU
   seconds over the run, `scripts/lab.py cpu`).

The figures go to tests/output/site/serving.json. Nothing is asserted about a time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import _jobs

ROOT = _jobs.ROOT
OUTPUT = ROOT / "tests" / "output" / "site"
TEMPLATE = "gpufleet serving acceptance"
MEASURE = "TASK [gpufleet.inference.serving_acceptance : Measure each target at each point"
SLOW = "tp"
# A sliver of one core: the replica still answers its health checks (so the front door and the
# guard leave it alone for the few seconds of the trial), but every token takes tens of times longer.
QUOTA = "4%"


def fail(message: str, output: str = "") -> None:
    if output:
        sys.stdout.write(output[-6000:])
    sys.exit(f"serving: {message}")


def playbook_check(extra: dict) -> subprocess.CompletedProcess:
    """validate_serving.yml in check mode with extra vars, as an operator runs it."""
    return _jobs.playbook("playbooks/validate_serving.yml", "--check", "-e", json.dumps(extra))


def refused(extra: dict, task: str, expected: list[str]) -> None:
    proc = playbook_check(extra)
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:
        fail(f"validate_serving.yml accepted {extra}", out)
    if f"TASK [gpufleet.inference.serving_acceptance : {task}]" not in out or MEASURE in out:
        fail(f"validate_serving.yml with {extra} did not stop in the preflight task {task!r}", out)
    missing = [text for text in expected if text not in out]
    if missing:
        fail(f"validate_serving.yml with {extra} was refused without {missing}", out)
    print(f"serving: refused before any load: {sorted(extra)}", flush=True)


def unit(host: str, *args: str) -> None:
    subprocess.run(["docker", "exec", host, "systemctl", *args], check=True, capture_output=True, text=True)


def unit_cpu(host: str, name: str) -> float:
    """CPU seconds of a unit's live processes on a lab host (scripts/lab.py cpu)."""
    path = OUTPUT / "serving-cpu.json"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "lab.py"), "cpu", "--output", str(path)],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    report = json.loads(path.read_text())
    return float(report["hosts"][host]["units_s"].get(name, 0.0))


def acceptance(hostvars: dict, name: str, targets: list[str], **extra):
    extra = {
        "serving_acceptance_targets": targets,
        "serving_acceptance_concurrency": [1],
        "serving_acceptance_report_dir": str(OUTPUT / f"serving-{name}"),
        **{"serving_acceptance_" + key: value for key, value in extra.items()},
    }
    return _jobs.launch(TEMPLATE, hostvars, extra_vars=extra)


def main() -> int:
    data = _jobs.inventory()
    hostvars = data["_meta"]["hostvars"]
    slow_host = data["vllm_replica_" + SLOW]["hosts"][0]
    slow_unit = f"gpufleet-vllm-{SLOW}.service"

    refused(
        {
            "serving_acceptance_prompt_tokens": 512,
            "serving_acceptance_output_tokens": 1024,
            "serving_acceptance_concurrency": [100],
        },
        "Check the settings against the replicas and their capacity plans",
        [
            "serving_acceptance_prompt_tokens (512) + serving_acceptance_output_tokens (1024) = 1536 is over replica",
            "max-model-len 512",
            "serving_acceptance_concurrency=100 is over the",
            "send at most",
        ],
    )
    refused(
        {"serving_acceptance_tokenizer_src": "/nonexistent/tokenizer"},
        "Refuse a directory without a tokenizer",
        ["/nonexistent/tokenizer on localhost holds no tokenizer", "give serving_acceptance_tokenizer_src"],
    )

    unit(slow_host, "set-property", "--runtime", slow_unit, f"CPUQuota={QUOTA}")
    try:
        # Short requests, and targets far above a healthy replica's figures under the lab's load
        # (p99 TPOT about 20 ms, TTFT about 30 ms) and far below the slowed one's (seconds).
        slowed = acceptance(
            hostvars, "slowed", ["pp", SLOW], output_tokens=8, min_requests=2, ttft_ms=2000, tpot_ms=250
        )
    finally:
        unit(slow_host, "set-property", "--runtime", slow_unit, "CPUQuota=")
    verdict = slowed.stats.get("serving_acceptance") or {}
    summary = verdict.get("summary") or {}
    failures = verdict.get("failures") or []
    if slowed.status == "successful" or verdict.get("passed") is not False:
        fail(f"the acceptance passed with {SLOW} held to {QUOTA} of a core: {verdict}", slowed.stdout)
    if summary.get("pp", {}).get("passed") is not True or summary.get(SLOW, {}).get("passed") is not False:
        fail(f"the acceptance did not fail {SLOW} alone: {summary}", slowed.stdout)
    if not failures or not all(line.startswith(f"replica {SLOW}: ") for line in failures):
        fail(f"the failures do not name replica {SLOW} only: {failures}", slowed.stdout)
    if f"replica {SLOW}: " not in slowed.stdout:
        fail("the failed job's output does not name the slow replica", slowed.stdout)
    print(f"serving: {SLOW} at {QUOTA} of a core failed by name: {failures}", flush=True)

    before = unit_cpu(slow_host, slow_unit)
    # In rate mode: requests arrive at 1 per second (Poisson), at most 2 in flight.
    again = acceptance(hostvars, "undone", [SLOW], mode="rate", request_rates=[1], rate_duration_s=6, concurrency=[2])
    replica_cpu = unit_cpu(slow_host, slow_unit) - before
    verdict = again.stats.get("serving_acceptance") or {}
    if again.status != "successful" or verdict.get("passed") is not True:
        fail(f"the acceptance of {SLOW} did not pass once the quota was lifted: {verdict}", again.stdout)
    report = json.loads((OUTPUT / "serving-undone" / "serving-acceptance.json").read_text())
    points = report["targets"][0]["points"]
    load_cpu = sum(point["load_cpu_s"] or 0.0 for point in points)
    busy = sum(point["duration_s"] or 0.0 for point in points)
    figures = {
        "slowed_failures": failures,
        "slowed_s": slowed.wall_s,
        "undone_s": again.wall_s,
        "load_generator_cpu_s": round(load_cpu, 2),
        "replica_cpu_s": round(replica_cpu, 2),
        "measured_s": round(busy, 2),
        "points": {
            point["name"]: {
                "ttft_ms": point["ttft_ms"],
                "tpot_ms": point["tpot_ms"],
                "tokens_per_s": point["output_throughput"],
            }
            for point in points
        },
    }
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "serving.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"serving: {SLOW} passes again with the quota lifted: {json.dumps(figures)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
