"""Deploy the lab site as an operator does, through the controller's workflow and job templates.

    .venv/bin/python scripts/lab.py up --hosts 10 --serving site
    .venv/bin/python tests/site/deploy.py

The lab stage of `make test` runs this on fresh hosts (docs/testing.md). Every job runs through
ansible-runner as AWX runs it (tests/site/_jobs.py), on inventories/lab/topology.yml:

1. the workflow "flagship preflight, deploy, validate": the preflight (the site in check mode with
   diff, on hosts that have nothing yet), the deploy without the validation layer, then fabric
   acceptance on every host, then the serving acceptance (vllm bench serve from the front door
   against every replica and through the front door), each node on the success of the one before,
   with the artifacts handed down. Every node must pass; the preflight's and the deploy's
   set_stats must hold every replica's capacity plan, the fabric acceptance's must say passed on
   every host, and the serving acceptance's must say passed for every replica and the front door;
2. "deploy single-node vLLM" on the one-node TP=2 replica's host alone, with an inventory of that
   host (as the template's own inventory is one server): a rerun that changes nothing;
3. "deploy llama.cpp RPC cluster": a rerun on the cluster that changes nothing and hands over the
   smoke test's completion, served through both RPC workers; the credential's key never shows;
4. "front door report": its set_stats show every replica (the two vLLM replicas and the llama.cpp
   coordinator, which serves the same model name) on every front door.

Any other outcome makes the command fail. The job's wall times are printed and written to
tests/output/site/deploy.json; nothing is asserted about a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import _jobs

ROOT = _jobs.ROOT
OUTPUT = ROOT / "tests" / "output" / "site"
WORKFLOW = "gpufleet flagship preflight, deploy, validate"
REPORT = "gpufleet front door report"
SINGLE = "gpufleet deploy single-node vLLM"
LLAMA = "gpufleet deploy llama.cpp RPC cluster"
# The fabric acceptance survey's variables, which the lab's inventory sets to its short
# measurements and loose bar (docs/lab.md).
LAB_ACCEPTANCE = (
    "fabric_validate_duration",
    "fabric_validate_streams",
    "fabric_validate_direction",
    "fabric_validate_min_line_fraction",
    "fabric_validate_min_best_fraction",
)


def fail(message: str, job=None) -> None:
    if job is not None:
        sys.stdout.write(job.stdout[-6000:])
    sys.exit(f"site: {message}")


def expect(job, what: str, idempotent: bool = False) -> None:
    """Exit unless the job succeeded (and, if idempotent, changed nothing on any host)."""
    if job.status != "successful" or job.rc != 0:
        fail(f"{what} failed (job {job.template!r}: status {job.status}, rc {job.rc})", job)
    if not job.changed:
        fail(f"{what}: no PLAY RECAP; nothing was run")
    offenders = {host: n for host, n in job.changed.items() if n}
    if idempotent and offenders:
        fail(f"{what} is not idempotent, changed tasks per host: {offenders}", job)


def one_host_inventory(host: str) -> Path:
    """The lab inventory cut down to one host, as a site's single-node inventory holds one server:
    ansible-inventory's own YAML export of that host, its groups and their variables (without the
    fact cache, whose facts are no inventory variables)."""
    export = ["--list", "--yaml", "--export", "--limit", host]
    proc = subprocess.run(
        [str(_jobs.BIN / "ansible-inventory"), "-i", str(_jobs.MANIFEST), *export],
        cwd=ROOT,
        env=dict(_jobs.ENV, ANSIBLE_CACHE_PLUGIN="ansible.builtin.memory"),
        capture_output=True,
        text=True,
        check=True,
    )
    path = Path(tempfile.mkdtemp(prefix="gpufleet-site-single-")) / "inventory.yml"
    path.write_text(proc.stdout)
    return path


def main() -> int:
    data = _jobs.inventory()
    hostvars = data["_meta"]["hostvars"]
    groups = {name: body.get("hosts", []) for name, body in data.items() if isinstance(body, dict)}
    replicas = sorted(group[len("vllm_replica_") :] for group in data if group.startswith("vllm_replica_"))
    answers = {"vllm_model_path": _jobs.one_value(hostvars, "vllm_model_path")}
    # The acceptance template's survey defaults (10 s, 4 streams, 0.85 of the line rate) beat the
    # inventory; the workflow's launch vars beat them, as a site gives its own bar.
    acceptance_vars = {name: _jobs.one_value(hostvars, name) for name in LAB_ACCEPTANCE}

    flow = _jobs.workflow(WORKFLOW, hostvars, answers=answers, extra_vars=acceptance_vars, echo=True)
    if list(flow.jobs) != ["preflight", "deploy", "validate", "serving"] or flow.status != "successful":
        failed = next((job for job in flow.jobs.values() if job.status != "successful"), None)
        fail(f"the workflow ran {list(flow.jobs)} and ended {flow.status}", failed)
    preflight, deploy, validate = flow.jobs["preflight"], flow.jobs["deploy"], flow.jobs["validate"]
    serving = flow.jobs["serving"]
    for job, what in (
        (preflight, "the preflight"),
        (deploy, "the deploy"),
        (validate, "the validation"),
        (serving, "the serving acceptance"),
    ):
        expect(job, what)
    for job, what in ((preflight, "preflight (check mode)"), (deploy, "deploy")):
        planned = sorted(job.stats.get("vllm_capacity_plans") or {})
        if planned != replicas:
            fail(f"the {what} set_stats plan replicas {planned}, the inventory has {replicas}")
    acceptance = validate.stats.get("fabric_acceptance") or {}
    if acceptance.get("passed") is not True or acceptance.get("summary", {}).get("hosts") != len(hostvars):
        fail(f"the workflow's fabric acceptance did not pass on every host: {acceptance}")
    # Every vLLM replica, the llama.cpp coordinator and the front door, measured and passed.
    measured = serving.stats.get("serving_acceptance") or {}
    expected = sorted([*replicas, *groups["llama_coordinator"], "frontdoor"])
    if measured.get("passed") is not True or sorted(measured.get("summary") or {}) != expected:
        fail(f"the workflow's serving acceptance did not pass on {expected}: {measured}", serving)

    # The single-node template on the one-node replica's host alone: plan, host and serving layers.
    single_host = next(hosts[0] for name, hosts in groups.items() if name == "vllm_replica_tp")
    single = _jobs.launch(SINGLE, hostvars, answers=answers, inventory=one_host_inventory(single_host))
    expect(single, "the single-node vLLM deploy", idempotent=True)
    if sorted(single.changed) != [single_host, "localhost"] and sorted(single.changed) != [single_host]:
        fail(f"the single-node vLLM deploy ran on {sorted(single.changed)}, not {single_host} alone")

    coordinator = groups["llama_coordinator"][0]
    llama_answers = {
        "llama_server_model_path": hostvars[coordinator]["llama_server_model_path"],
        "llama_server_ctx_size": hostvars[coordinator]["llama_server_ctx_size"],
    }
    llama = _jobs.launch(LLAMA, hostvars, answers=llama_answers)
    expect(llama, "the llama.cpp RPC cluster deploy", idempotent=True)
    smoke = (llama.stats.get("llama_server_smoke") or {}).get(coordinator) or {}
    if not smoke.get("tokens") or len(smoke.get("workers") or []) != len(groups["llama_rpc_workers"]):
        fail(f"the llama.cpp job's smoke test did not serve through every worker: {smoke}")
    if hostvars[coordinator]["llama_server_api_key"] in llama.stdout:
        fail("the llama.cpp job's output shows the API key")

    front = _jobs.launch(REPORT, hostvars)
    expect(front, "the front door report", idempotent=True)
    # Behind the front door: the vLLM replicas and the llama.cpp coordinator, each a replica.
    fronted = sorted([*replicas, coordinator])
    seen = {host: sorted(r["name"] for r in view["replicas"]) for host, view in front.stats["frontdoor_status"].items()}
    if not seen or any(names != fronted for names in seen.values()):
        fail(f"the front door report shows {seen}, the inventory has replicas {fronted}")

    times = {
        "hosts": len(deploy.changed),
        "preflight_s": preflight.wall_s,
        "preflight_would_change": sum(preflight.changed.values()),
        "deploy_s": deploy.wall_s,
        "deploy_changed": sum(deploy.changed.values()),
        "validate_s": validate.wall_s,
        "serving_acceptance_s": serving.wall_s,
        "single_node_s": single.wall_s,
        "llama_s": llama.wall_s,
        "report_s": front.wall_s,
    }
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "deploy.json").write_text(json.dumps(times, indent=2) + "\n")
    print(f"site: the workflow and the job templates passed: {json.dumps(times)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
