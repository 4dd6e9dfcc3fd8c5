"""The lab's playbook runs, launched as the controller launches them: through the collection's job
templates (controller/job_templates.yml) with ansible-runner (scripts/controller_jobs.py).

So the lab proves the templates as AWX runs them: the survey answers, the credential injectors,
the job type and diff mode, the tags, the limit, and the job's status, rc and set_stats.

The lab attaches two of the templates' credentials only, as a site does with
playbooks/controller_apply.yml's gpufleet_controller_skip_credentials: it has no Hugging Face token
(its models are generated locally) and no NVIDIA repositories (it has no GPU host). The API key
credential gets the key the lab inventory gives the replicas: a credential's extra vars beat the
inventory, so any other key would tell the front door and the agents a key the replicas refuse.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "inventories" / "lab" / "topology.yml"
BIN = ROOT / ".venv" / "bin"
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
SKIPPED_CREDENTIALS = ("gpufleet Hugging Face token", "gpufleet repository credentials")


# scripts/ is not a package: its folder goes on sys.path and controller_jobs is imported as a module.
sys.path.insert(0, str(ROOT / "scripts"))
import controller_jobs as jobs  # noqa: E402


def inventory() -> dict:
    """The lab inventory as ansible-inventory --list gives it."""
    if not MANIFEST.exists():
        sys.exit("lab: no lab manifest; run `scripts/lab.py up --hosts 10 --serving site` first")
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(MANIFEST), "--list"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    # ansible-inventory writes values the plugin marks unsafe as {"__ansible_unsafe": value}.
    return json.loads(
        proc.stdout, object_hook=lambda obj: obj["__ansible_unsafe"] if set(obj) == {"__ansible_unsafe"} else obj
    )


def one_value(hostvars: dict, variable: str):
    """The value every host that sets variable gives it, or exit naming the disagreement."""
    values = {json.dumps(hv[variable]) for hv in hostvars.values() if variable in hv}
    if len(values) != 1:
        sys.exit(f"lab: the job templates need one {variable} for the whole lab, the inventory gives {sorted(values)}")
    return json.loads(values.pop())


def credentials(hostvars: dict) -> dict:
    """What the lab's jobs attach: the API key credential with the lab's key, the others skipped."""
    return {
        "inputs": {"gpufleet inference API key": {"api_key": one_value(hostvars, "vllm_api_key")}},
        "skip_credentials": SKIPPED_CREDENTIALS,
        "env": {"ANSIBLE_NOCOLOR": "1"},
    }


def report(job: jobs.Job, what: str) -> None:
    """One line of the job's result; a successful job's private data dir (its extravars hold the
    API key, 0600) is removed, a failed one's stays to read."""
    changed = sum(job.changed.values())
    print(
        f"lab: {what}: status {job.status}, rc {job.rc}, {len(job.changed)} host(s), changed {changed}, "
        f"set_stats {sorted(job.stats)}, {job.wall_s} s",
        flush=True,
    )
    if job.status == "successful":
        shutil.rmtree(job.data_dir, ignore_errors=True)
    else:
        print(f"lab: the failed job's private data dir: {job.data_dir}", flush=True)


def playbook(play: str, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook of play (relative to the checkout) on the lab inventory, as an operator runs
    it from the checkout; args are further options. The caller reads its output and return code."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "inventories/lab", play, *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )


def launch(name: str, hostvars: dict, *, echo: bool = False, inventory: Path = MANIFEST, **kwargs) -> jobs.Job:
    """Run job template name on the lab (or on inventory); print one line of its result; exit if it
    cannot launch.

    kwargs are scripts/controller_jobs.py launch()'s (answers, extra_vars, tags, skip_tags, limit)."""
    try:
        job = jobs.launch(
            name,
            inventory,
            data_dir=Path(tempfile.mkdtemp(prefix="gpufleet-lab-job-")),
            echo=echo,
            **credentials(hostvars),
            **kwargs,
        )
    except jobs.JobError as error:
        sys.exit(f"lab: job template {name!r} cannot launch: {error}")
    report(job, f"job {name!r}")
    return job


def workflow(name: str, hostvars: dict, *, echo: bool = False, **kwargs) -> jobs.WorkflowJob:
    """Run workflow name on the lab (its nodes in order, artifacts handed down); one line per node."""
    try:
        flow = jobs.launch_workflow(name, MANIFEST, echo=echo, **credentials(hostvars), **kwargs)
    except jobs.JobError as error:
        sys.exit(f"lab: workflow {name!r} cannot launch: {error}")
    for ident, job in flow.jobs.items():
        report(job, f"workflow {name!r} node {ident!r} (job {job.template!r})")
    print(f"lab: workflow {name!r}: {flow.status}", flush=True)
    return flow
