"""Upgrade trials on the lab: playbooks/upgrade_serving.yml under a client load through the front door.

    .venv/bin/python scripts/lab.py up --hosts 10 --serving site
    .venv/bin/ansible-playbook -i inventories/lab playbooks/site.yml --skip-tags gpufleet_validation
    .venv/bin/python tests/site/upgrade.py

The `upgrade` stage of scripts/run_tests.py runs exactly that (docs/upgrades.md, docs/testing.md).
It needs the site layout's two vLLM replicas behind the front door (`pp`, PP=2 over two hosts, and
`tp`, TP=2 on one). Each trial runs the client load of tests/site/operations.py (completions
through the front door over TLS) for its whole length, and must end with 0 failed requests.

New model revisions are made here from the lab's model, on the controller, without torch: the
safetensors format is a JSON header and the raw tensors, so a revision is a copy with one float32
tensor's signs flipped (other weights: it loads, it serves other tokens) or a config.json whose
intermediate_size no longer matches its tensors (it does not load).

1. upgrade:     the job template "gpufleet upgrade serving" switches both replicas to revision 2.
2. no-load:     a target that does not load: pp fails at its start and is switched back by
                itself, tp is not touched, the job fails naming pp and the step.
3. missed:      a target that loads but misses the acceptance target set for the rollout (a TPOT no
                CPU replica meets): pp fails at the acceptance, is switched back, tp is not touched.
4. interrupted: the controller is killed inside pp's switch; the replica is left drained, its nodes
                say switching; the job template's rerun switches pp first, then tp.

The figures go to tests/output/site/upgrade.json: failed requests per trial, each replica's
out-of-service time per switch and the engine's share of it, the rollback times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import _jobs
from operations import OUTPUT, Lab, Load, TrialError, all_serving, replica_view, serving

ROOT = _jobs.ROOT
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import _vllm_model  # noqa: E402

REVISIONS = ROOT / ".cache" / "upgrade-models"
TEMPLATE = "gpufleet upgrade serving"
# The rollout's acceptance target that trial 3's revision misses: a TPOT no CPU replica reaches.
MISSED_TPOT_MS = 0.01


def log(message: str) -> None:
    print(f"upgrade: {time.strftime('%H:%M:%S')} {message}", flush=True)


def flip_signs(path: Path, tensor: str) -> None:
    """Flip the sign of every float32 of tensor in the safetensors file path, in place."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    info = header[tensor]
    if info["dtype"] != "F32":
        raise TrialError(f"{tensor} in {path} is {info['dtype']}, not F32")
    begin, end = (8 + size + offset for offset in info["data_offsets"])
    for index in range(begin + 3, end, 4):
        data[index] ^= 0x80
    path.write_bytes(bytes(data))


def revision(source: Path, name: str, *, flip: str = "", intermediate: int = 0) -> tuple[Path, str]:
    """A copy of the model source as revision name, changed; (its directory, its digest)."""
    out = REVISIONS / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out)
    if flip:
        index = json.loads((out / "model.safetensors.index.json").read_text())
        flip_signs(out / index["weight_map"][flip], flip)
    if intermediate:
        config = json.loads((out / "config.json").read_text())
        config["intermediate_size"] = intermediate
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    digest = "sha256:" + _vllm_model.tree_digest(str(out), _vllm_model.model_files(str(out)))
    log(f"revision {name}: {digest}")
    return out, digest


def target(path: Path, digest: str, name: str, **more) -> dict:
    return {
        "vllm_model_src": str(path),
        "vllm_model_checksum": digest,
        "vllm_model_path": f"/var/lib/gpufleet/models/{name}",
        **more,
    }


def records(lab: Lab) -> dict:
    """Every vLLM node's revision.json ({replica: {host: record or None}})."""
    found = {}
    for name, hosts in lab.replicas.items():
        for host in hosts:
            proc = lab.ssh(host, "cat", f"/etc/gpufleet/vllm/{name}/revision.json", check=False)
            found.setdefault(name, {})[host] = json.loads(proc.stdout) if proc.returncode == 0 else None
    return found


def state(found: dict, name: str) -> set:
    return {(r or {}).get("state") for r in found[name].values()}


def model(found: dict, name: str) -> set:
    return {((r or {}).get("current") or {}).get("model") for r in found[name].values()}


def both_serving(lab: Lab, digest: str) -> None:
    """Every node of pp and tp records the revision of model digest, serving."""
    found = records(lab)
    for name in ("pp", "tp"):
        check(state(found, name) == {"serving"} and model(found, name) == {digest}, f"{name}'s records: {found[name]}")


def launch(lab: Lab, extra: dict, answers: dict | None = None):
    log(f"job template {TEMPLATE!r} {json.dumps(extra)}")
    return _jobs.launch(
        TEMPLATE, lab.hostvars, extra_vars=extra, answers=answers or {"serving_upgrade_change": "model"}
    )


def outcome(job) -> dict:
    return job.stats.get("serving_upgrade") or {}


def check(condition: bool, what: str, job=None) -> None:
    if not condition:
        if job is not None:
            sys.stdout.write(job.stdout[-8000:])
        raise TrialError(what)


def times(result: dict) -> dict:
    return {
        name: {k: item.get(k) for k in ("upgraded", "step", "out_of_service_s", "switch_s", "engine_start_s")}
        for name, item in (result.get("replicas") or {}).items()
    }


def trial_upgrade(lab: Lab, args, r2) -> dict:
    with Load(lab, args) as load:
        job = launch(lab, target(*r2, "tiny-llama-r2"))
    result = outcome(job)
    check(job.status == "successful", f"the upgrade to revision 2 failed (rc {job.rc})", job)
    check(result.get("upgraded") == ["pp", "tp"], f"serving_upgrade does not list pp and tp upgraded: {result}", job)
    both_serving(lab, r2[1])
    check(load.failed == 0 and load.sent > 0, f"client requests failed during the upgrade: {load.figures()}")
    return {
        "trial": "upgrade both replicas to revision 2",
        "job_s": job.wall_s,
        "replicas": times(result),
        **load.figures(),
    }


def trial_rolled_back(lab: Lab, args, extra: dict, step: str, what: str) -> dict:
    before = records(lab)
    with Load(lab, args) as load:
        job = launch(lab, extra)
    result = outcome(job)
    check(job.status != "successful", f"the upgrade to {what} succeeded", job)
    check(
        result.get("rolled_back") == ["pp"] and result.get("not_attempted") == ["tp"], f"serving_upgrade: {result}", job
    )
    check((result["replicas"]["pp"] or {}).get("step") == step, f"pp did not fail at {step}: {result}", job)
    message = f"replica pp failed at {step}"
    check(message in job.stdout, f"the job's output does not say {message!r}", job)
    after = records(lab)
    check(state(after, "pp") == {"rolled_back"} and model(after, "pp") == model(before, "pp"), f"pp: {after['pp']}")
    check(after["tp"] == before["tp"], f"tp was touched: {before['tp']} -> {after['tp']}")
    check(serving(replica_view(lab.status(), "pp")), "pp is not serving behind the front door after its rollback")
    check(load.failed == 0 and load.sent > 0, f"client requests failed: {load.figures()}")
    pp = result["replicas"]["pp"]
    return {
        "trial": f"upgrade to {what}: pp switched back by itself",
        "job_s": job.wall_s,
        "rollback_out_of_service_s": pp.get("out_of_service_s"),
        "failed_step": pp.get("step"),
        **load.figures(),
    }


def trial_interrupted(lab: Lab, args, r4) -> dict:
    extra = target(*r4, "tiny-llama-r4")
    with Load(lab, args) as load:
        log("ansible-playbook playbooks/upgrade_serving.yml, to be killed inside pp's switch")
        proc = subprocess.Popen(
            [
                str(_jobs.BIN / "ansible-playbook"),
                "-i",
                "inventories/lab",
                "playbooks/upgrade_serving.yml",
                "-e",
                json.dumps(extra),
            ],
            cwd=ROOT,
            env=dict(_jobs.ENV, PYTHONUNBUFFERED="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "Restart the replica on the target" in line or "Stop every node of the vLLM replica" in line:
                break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log("killed the controller inside pp's switch")
        check(
            any("Restart the replica on the target" in line for line in seen), "the playbook ended before pp's switch"
        )
        found = records(lab)
        check("switching" in state(found, "pp"), f"pp's nodes do not say switching: {found['pp']}")
        view = replica_view(lab.status(), "pp")
        check((view.get("record") or {}).get("owner") == "operator", f"pp is not held drained: {view}")
        job = launch(lab, extra)
    result = outcome(job)
    check(job.status == "successful", f"the rerun failed (rc {job.rc})", job)
    check(result.get("upgraded") == ["pp", "tp"], f"the rerun did not switch pp, then tp: {result}", job)
    check("first, replicas cut off in an earlier switch: pp" in job.stdout, "the rerun did not take pp as cut off", job)
    both_serving(lab, r4[1])
    check(load.failed == 0 and load.sent > 0, f"client requests failed: {load.figures()}")
    return {
        "trial": "controller killed inside pp's switch, then the job rerun",
        "rerun_s": job.wall_s,
        "replicas": times(result),
        **load.figures(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("--requests", type=int, default=100000)
    parser.add_argument("--cap", type=float, default=3600)
    parser.add_argument(
        "--ready-timeout",
        type=int,
        default=300,
        help="vllm_ready_timeout of the target that does not load: its start fails after it",
    )
    parser.add_argument("trials", nargs="*", default=["upgrade", "no-load", "missed", "interrupted"])
    args = parser.parse_args()
    lab = Lab()
    all_serving(lab)
    source = Path(lab.hostvars[lab.replicas["pp"][0]]["vllm_model_src"])
    REVISIONS.mkdir(parents=True, exist_ok=True)
    r2 = revision(source, "tiny-llama-r2", flip="lm_head.weight")
    r3 = revision(r2[0], "tiny-llama-r3", intermediate=512)
    r4 = revision(r2[0], "tiny-llama-r4", flip="model.norm.weight")
    results, failed = [], None
    plan = {
        "upgrade": lambda: trial_upgrade(lab, args, r2),
        "no-load": lambda: trial_rolled_back(
            lab,
            args,
            target(*r3, "tiny-llama-r3", vllm_ready_timeout=args.ready_timeout),
            "start",
            "a revision that does not load",
        ),
        "missed": lambda: trial_rolled_back(
            lab,
            args,
            target(*r4, "tiny-llama-r4", serving_acceptance_tpot_ms=MISSED_TPOT_MS),
            "acceptance",
            f"a revision that misses a TPOT target of {MISSED_TPOT_MS} ms",
        ),
        "interrupted": lambda: trial_interrupted(lab, args, r4),
    }
    for name in args.trials:
        log(f"trial {name}")
        try:
            results.append({"name": name, **plan[name]()})
        except TrialError as error:
            failed = f"{name}: {error}"
            break
        log(json.dumps(results[-1]))
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "upgrade.json").write_text(json.dumps({"trials": results, "failed": failed}, indent=2) + "\n")
    if failed:
        sys.exit(f"upgrade: trial {failed}")
    log(f"every trial passed: {[r['name'] for r in results]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
