"""Run every bad input of bad_inputs.yml through the vllm role's preflight and check the refusal.

    python3 bad_inputs.py CASES.yml PLAYBOOK INVENTORY HOST   -> JSON summary; exit 1 on any miss

Each case is one real `ansible-playbook --check --tags vllm_preflight` run with the case's
variables as extra vars (the highest precedence, as an operator's -e would be). A case passes
when the run fails and its output holds every expected fragment. Two runs at a time.
"""

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import yaml

cases_file, playbook, inventory, host = sys.argv[1:5]
cases = yaml.safe_load(open(cases_file))
ansible_playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run(case):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(case["vars"], handle)
    argv = [ansible_playbook, "-i", inventory, playbook, "--limit", "localhost," + host]
    argv += ["--tags", "vllm_preflight", "--check", "-e", "@" + handle.name]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    os.unlink(handle.name)
    # Ansible folds long messages over lines; compare on the text with whitespace collapsed.
    output = " ".join((proc.stdout + proc.stderr).split())
    missing = [f for f in case["expect"] if " ".join(f.split()) not in output]
    ok = proc.returncode != 0 and not missing
    detail = "" if ok else output[-2500:]
    return {"name": case["name"], "refused": proc.returncode != 0, "missing": missing, "ok": ok, "output": detail}


with ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(run, cases))
summary = {"cases": len(results), "refused_clearly": sum(r["ok"] for r in results), "results": results}
print(json.dumps(summary))
sys.exit(0 if summary["refused_clearly"] == len(results) else 1)
