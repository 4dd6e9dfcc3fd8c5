"""Run every bad input of a cases file through a real playbook run and check the refusal.

    python3 bad_inputs.py --cases CASES.yml --playbook PLAYBOOK --inventory INVENTORY --limit HOSTS
        [--replica NAME] [--check] [--tags TAGS]             -> JSON summary; exit 1 on any miss

Each case is one real `ansible-playbook` run with the case's variables as extra vars (the highest
precedence, as an operator's -e would be); --check and --tags narrow it to a preflight where the
caller wants that. A case passes when the run fails and its output holds every fragment of its
`expect` list ({replica} in a fragment is NAME). Two runs at a time. The callers compare the hosts'
units and files before and after all the cases, so a refusal is a refusal before any change.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import yaml

# The checkout, whose ansible.cfg resolves the collection's FQCNs (ANSIBLE_CONFIG, where the caller
# sets it, as molecule does, wins).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--cases", required=True)
parser.add_argument("--playbook", required=True)
parser.add_argument("--inventory", required=True)
parser.add_argument("--limit", required=True)
parser.add_argument("--replica", default="")
parser.add_argument("--check", action="store_true")
parser.add_argument("--tags", default="")
args = parser.parse_args()
with open(args.cases) as handle:
    cases = yaml.safe_load(handle)
ansible_playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run(case):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(case["vars"], handle)
    argv = [ansible_playbook, "-i", args.inventory, args.playbook, "--limit", args.limit, "-e", "@" + handle.name]
    argv += ["--check"] if args.check else []
    argv += ["--tags", args.tags] if args.tags else []
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    os.unlink(handle.name)
    # Ansible folds long messages over lines; compare on the text with whitespace collapsed.
    output = " ".join((proc.stdout + proc.stderr).split())
    expected = [" ".join(fragment.replace("{replica}", args.replica).split()) for fragment in case["expect"]]
    missing = [fragment for fragment in expected if fragment not in output]
    ok = proc.returncode != 0 and not missing
    detail = "" if ok else output[-2500:]
    return {"name": case["name"], "refused": proc.returncode != 0, "missing": missing, "ok": ok, "output": detail}


with ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(run, cases))
summary = {"cases": len(results), "refused_clearly": sum(r["ok"] for r in results), "results": results}
print(json.dumps(summary))
sys.exit(0 if summary["refused_clearly"] == len(results) else 1)
