"""The site composition on the lab over SSH: run it, time it, and compare SSH transports.

    make lab LAB_HOSTS=10                                   # the 10-host flagship lab
    .venv/bin/python benchmarks/site.py run                 # the workflow and the job templates
    .venv/bin/python benchmarks/site.py ssh [--runs 2] [--mitogen DIR]   # pipelining off, on, Mitogen

run:  the flagship's workflow and job templates (controller/), launched with ansible-runner as
      AWX launches them (benchmarks/_jobs.py), on inventories/lab/topology.yml:
      - the workflow "flagship preflight, deploy, validate" on the new hosts: the preflight
        (playbooks/cluster_80x5090.yml, the site run, in check mode with diff), then the deploy
        without the validation layer, then fabric acceptance on every host, each node on the
        success of the one before, with the artifacts handed down. Every node must pass, the
        preflight's and the deploy's set_stats must hold every replica's capacity plan, and the
        acceptance's must say passed;
      - "deploy single-node vLLM" (plan, host and serving layers): a rerun that changes nothing;
      - "front door report": its set_stats show every replica on every front door.
      Any other outcome makes the command fail: `make test` runs this.
      Reported: the wall times and the ratio preflight / first. The idempotent second run of the
      site is `make test`'s next step: from the built artifact, installed in a clean venv
      (scripts/installed_collection.py playbook --unchanged site --skip-tags gpufleet_validation).
ssh:  the idempotent run (every check of every layer, nothing to change) with SSH pipelining off
      and on, alternating; the ratio is pipelined / not. With --mitogen DIR (pip install --target
      DIR mitogen) it also runs under Mitogen's mitogen_linear strategy, or says why it cannot.

Results go to benchmarks/results/ as JSON. Nothing here asserts a time: these machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _jobs
from _results import save

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "inventories" / "lab" / "topology.yml"
PLAYBOOK_BIN = ROOT / ".venv" / "bin" / "ansible-playbook"
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)")
SECOND_RUN = ["--skip-tags", "gpufleet_validation"]
WORKFLOW = "gpufleet flagship preflight, deploy, validate"
DEPLOY = "gpufleet deploy flagship 80x5090"
REPORT = "gpufleet front door report"
SINGLE = "gpufleet deploy single-node vLLM"
# The fabric acceptance survey's variables, which the lab's inventory sets to its short
# measurements and loose bar (docs/lab.md).
LAB_ACCEPTANCE = (
    "fabric_validate_duration",
    "fabric_validate_streams",
    "fabric_validate_direction",
    "fabric_validate_min_line_fraction",
    "fabric_validate_min_best_fraction",
)


def site(*extra: str, env: dict[str, str] | None = None, echo: bool = True) -> tuple[float, int, dict[str, int], str]:
    """Run the site with ansible-playbook itself (the ssh benchmark compares transports); return
    (wall seconds, rc, changed per host, output)."""
    if not MANIFEST.exists():
        sys.exit("benchmark: no lab manifest; run `make lab LAB_HOSTS=10` first")
    argv = [str(PLAYBOOK_BIN), "-i", str(MANIFEST), str(ROOT / "playbooks" / "site.yml"), *extra]
    run_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    print(f"benchmark: {' '.join(argv)} {' '.join(f'{k}={v}' for k, v in (env or {}).items())}", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            sys.stdout.write(line)
    rc = proc.wait()
    wall = round(time.monotonic() - start, 1)
    changed = {m["host"]: int(m["changed"]) for m in map(RECAP.match, lines) if m}
    return wall, rc, changed, "".join(lines)


def run(_args: argparse.Namespace) -> dict:
    """The flagship's workflow and job templates on the lab (benchmarks/_jobs.py), in the order an
    operator launches them on new hosts: the workflow (preflight, deploy, validate), then
    single-node vLLM over the same layers, and the front door report."""
    data = _jobs.inventory()
    hostvars = data["_meta"]["hostvars"]
    answers = {"vllm_model_path": _jobs.one_value(hostvars, "vllm_model_path")}
    # The acceptance template's survey defaults (10 s, 4 streams, 0.85 of the line rate) beat the
    # inventory; the workflow's launch vars beat them, as a site gives its own bar.
    acceptance_vars = {name: _jobs.one_value(hostvars, name) for name in LAB_ACCEPTANCE}
    flow = _jobs.workflow(WORKFLOW, hostvars, answers=answers, extra_vars=acceptance_vars, echo=True)
    if list(flow.jobs) != ["preflight", "deploy", "validate"] or flow.status != "successful":
        failed = next((job for job in flow.jobs.values() if job.status != "successful"), None)
        sys.stdout.write(failed.stdout[-6000:] if failed else "")
        sys.exit(f"benchmark: the workflow ran {list(flow.jobs)} and ended {flow.status}")
    preflight, first, validate = flow.jobs["preflight"], flow.jobs["deploy"], flow.jobs["validate"]
    for job, what in ((preflight, "the preflight"), (first, "the deploy"), (validate, "the validation")):
        expect(job, what)
    replicas = sorted(group[len("vllm_replica_") :] for group in data if group.startswith("vllm_replica_"))
    for job, what in ((preflight, "preflight (check mode)"), (first, "deploy")):
        planned = sorted(job.stats.get("vllm_capacity_plans") or {})
        if planned != replicas:
            sys.exit(f"benchmark: the {what} set_stats plan replicas {planned}, the inventory has {replicas}")
    acceptance = validate.stats.get("fabric_acceptance") or {}
    if acceptance.get("passed") is not True or acceptance.get("summary", {}).get("hosts") != len(hostvars):
        sys.exit(f"benchmark: the workflow's fabric acceptance did not pass on every host: {acceptance}")
    # The idempotent rerun of the whole site is the next step of the lab stage, from the built
    # artifact installed in a clean venv (scripts/installed_collection.py playbook --unchanged).
    # The single-node template's playbook is the plan, the host layer and the serving layer: on the
    # lab's two one-node replicas it is a rerun of those layers, which must change nothing.
    single = _jobs.launch(SINGLE, hostvars, answers=answers)
    expect(single, "the single-node vLLM deploy", idempotent=True)
    front = _jobs.launch(REPORT, hostvars)
    expect(front, "the front door report", idempotent=True)
    seen = {host: sorted(r["name"] for r in view["replicas"]) for host, view in front.stats["frontdoor_status"].items()}
    if not seen or any(names != replicas for names in seen.values()):
        sys.exit(f"benchmark: the front door report shows {seen}, the inventory has replicas {replicas}")
    print(f"benchmark: the workflow and the job templates passed on {len(first.changed)} host(s)")
    return {
        "benchmark": "site",
        "hosts": len(first.changed),
        "preflight_fresh_s": preflight.wall_s,
        "preflight_fresh_would_change": sum(preflight.changed.values()),
        "first_run_s": first.wall_s,
        "first_run_changed": sum(first.changed.values()),
        "validate_s": validate.wall_s,
        "ratio_preflight_over_first": round(preflight.wall_s / first.wall_s, 3),
        "single_node_s": single.wall_s,
        "report_s": front.wall_s,
    }


def expect(job, what: str, idempotent: bool = False) -> None:
    """Exit unless the job succeeded (and, if idempotent, changed nothing on any host)."""
    if job.status != "successful" or job.rc != 0:
        sys.stdout.write(job.stdout[-6000:])
        sys.exit(f"benchmark: {what} failed (job {job.template!r}: status {job.status}, rc {job.rc})")
    if not job.changed:
        sys.exit(f"benchmark: {what}: no PLAY RECAP; nothing was run")
    offenders = {host: n for host, n in job.changed.items() if n}
    if idempotent and offenders:
        sys.stdout.write(job.stdout[-6000:])
        sys.exit(f"benchmark: {what} is not idempotent, changed tasks per host: {offenders}")


def mitogen_env(path: str) -> tuple[dict[str, str] | None, str]:
    """The environment that runs the site under Mitogen from PATH (a directory holding
    ansible_mitogen, e.g. `pip install --target PATH mitogen`), or None and the reason."""
    if not path:
        return None, "not measured: no --mitogen PATH given (pip install --target PATH mitogen)"
    package = Path(path, "ansible_mitogen")
    if not package.is_dir():
        return None, f"not measured: {package} does not exist"
    env = {"PYTHONPATH": f"{path}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", "import ansible_mitogen.loaders"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, **env),
    )
    if proc.returncode != 0:
        return None, f"not measured: ansible_mitogen refuses this ansible-core: {proc.stderr.strip().splitlines()[-1]}"
    env.update(ANSIBLE_STRATEGY_PLUGINS=str(package / "plugins" / "strategy"), ANSIBLE_STRATEGY="mitogen_linear")
    return env, "measured"


def ssh(args: argparse.Namespace) -> dict:
    variants = {
        "no_pipelining": {"ANSIBLE_PIPELINING": "False"},
        "pipelining": {"ANSIBLE_PIPELINING": "True"},
    }
    mitogen, mitogen_note = mitogen_env(args.mitogen)
    if mitogen:
        variants["mitogen"] = dict(mitogen, ANSIBLE_PIPELINING="True")
    walls: dict[str, list[float]] = {name: [] for name in variants}
    for _run in range(args.runs):
        for name, env in variants.items():
            wall, rc, changed, out = site(*SECOND_RUN, env=env, echo=False)
            if rc != 0 or any(changed.values()):
                sys.exit(f"benchmark: the {name} run failed (rc={rc}, changed={changed}):\n{out[-3000:]}")
            walls[name].append(wall)
            print(f"benchmark: {name}: {wall} s", flush=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    result = {
        "benchmark": "ssh",
        "playbook": "site.yml " + " ".join(SECOND_RUN),
        "runs_s": walls,
        "median_s": medians,
        "ratio_pipelining_over_none": round(medians["pipelining"] / medians["no_pipelining"], 3),
        "mitogen": mitogen_note,
    }
    if "mitogen" in medians:
        result["ratio_mitogen_over_pipelining"] = round(medians["mitogen"] / medians["pipelining"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["run", "ssh"])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--mitogen", default="", help="a directory holding ansible_mitogen (ssh only)")
    args = parser.parse_args()
    save(f"site_{args.which}", run(args) if args.which == "run" else ssh(args))


if __name__ == "__main__":
    main()
