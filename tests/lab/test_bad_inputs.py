# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bad-input suite (docs/testing.md): every case in tests/bad_inputs/cases*.yml must be refused by its
role's argument spec or read-only preflight, with a message that holds every `expect` string (the
variable, the bad value and the fix); every `accept` case must pass the same checks.

All cases run in one `ansible-playbook --check` against the local machine, one inventory host per
case with the case's variables as its inventory variables (tests/bad_inputs/preflight.yml). That
the preflight is the first thing each role's main runs is checked separately below, so a refusal
here is a refusal before any change.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "tests" / "bad_inputs"
# cases.yml, plus a cases-<topic>.yml per topic, so that work on two roles edits two files.
ALL_CASES = [case for path in sorted(SUITE.glob("cases*.yml")) for case in yaml.safe_load(path.read_text())]
# The edit-test loop on a few roles: BAD_INPUTS_ROLES=roce,nccl runs only their cases (the
# suite's size check then skips, saying why). make test and CI leave it unset.
ONLY_ROLES = {role for role in os.environ.get("BAD_INPUTS_ROLES", "").split(",") if role}
CASES = [case for case in ALL_CASES if not ONLY_ROLES or case["role"] in ONLY_ROLES]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# Entry points other than main that a case may run: they change no host.
READ_ONLY_ENTRIES = {"plan"}


def case_id(case):
    return case["id"]


def share_facts(work, inventory, env):
    """Gather the local machine's facts once and hand them to every case host.

    Every case is the same machine, so its facts are the same for each: the playbook's own
    gathering (ansible.cfg's `gathering = smart`) finds them, marked gathered by gather_facts, in
    this run's own fact cache and skips 120 identical gatherings (40 % of the suite's time)."""
    cache = work / "facts"
    env.update(ANSIBLE_CACHE_PLUGIN="ansible.builtin.jsonfile", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache))
    first = CASES[0]["id"]
    subprocess.run(
        [str(PLAYBOOK.parent / "ansible"), "-i", str(inventory), first, "-m", "ansible.builtin.gather_facts",
         "-a", "gather_subset=!all,min,network"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    # The plugin names a file <its format's prefix><host> (ansible-core 2.19 writes s1_<host>).
    (written,) = cache.iterdir()
    prefix = written.name.removesuffix(first)
    facts = written.read_text()
    for case in CASES[1:]:
        (cache / f"{prefix}{case['id']}").write_text(facts)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    work = tmp_path_factory.mktemp("bad-inputs")
    hosts = {}
    for case in CASES:
        role = case["role"]
        hosts[case["id"]] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "gpufleet_case_role": role,
            "gpufleet_case_entry": case.get("entry", "main"),
            "gpufleet_case_specs": str(REPO / "roles" / role / "meta" / "argument_specs.yml"),
            "gpufleet_case_vars": sorted(case.get("vars", {})),
            **case.get("vars", {}),
        }
    inventory = work / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    output = work / "results.json"
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env["PYTHONPATH"] = str(REPO / "collections")
    share_facts(work, inventory, env)
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), str(SUITE / "preflight.yml"), "--check", "--forks", "25",
         "-e", f"gpufleet_case_results={output}"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert output.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(output.read_text())


def test_the_suite_is_large_enough():
    if ONLY_ROLES:
        pytest.skip(f"BAD_INPUTS_ROLES={','.join(sorted(ONLY_ROLES))} runs part of the suite")
    refused = [case for case in CASES if "expect" in case]
    assert len(refused) >= 60
    assert len({case["role"] for case in refused}) >= 12
    assert len({case["id"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [c for c in CASES if "expect" in c], ids=case_id)
def test_bad_input_is_refused_with_a_clear_message(results, case):
    result = results[case["id"]]
    assert result["refused"], f"{case['id']}: accepted"
    missing = [text for text in case["expect"] if text not in result["msg"]]
    assert not missing, f"{case['id']}: {missing} not in the message of '{result['task']}':\n{result['msg']}"
    # A secret is described, never echoed.
    for name in case.get("secret", []):
        assert str(case["vars"][name]) not in result["msg"], f"{case['id']}: the message shows {name}"
    # Parts of a value that must never be shown, such as the password inside a URL.
    shown = [text for text in case.get("forbid", []) if text in result["msg"]]
    assert not shown, f"{case['id']}: the message shows {shown}:\n{result['msg']}"


@pytest.mark.parametrize("case", [c for c in CASES if c.get("accept")], ids=case_id)
def test_good_input_passes_the_same_checks(results, case):
    # Guards the suite: checks that refused everything would pass every case above.
    result = results[case["id"]]
    blocked = result["refused"] and (result["task"] in case["accept"] or result["task"].startswith("Validate the case"))
    assert not blocked, f"{case['id']} refused by '{result['task']}':\n{result['msg']}"


@pytest.mark.parametrize("entry", sorted({case["entry"] for case in CASES if "entry" in case}))
def test_other_entry_points_change_nothing(entry):
    # A case may run a read-only entry point instead of the preflight: it must be one that
    # computes on the controller and changes no host (vllm's plan writes its report there).
    assert entry in READ_ONLY_ENTRIES, f"entry {entry!r} is not a known read-only entry point"


@pytest.mark.parametrize("role", sorted({case["role"] for case in CASES}))
def test_the_preflight_runs_before_anything_changes(role):
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
    first = tasks[0]
    included = first.get("ansible.builtin.import_tasks") or first.get("ansible.builtin.include_tasks")
    assert included == "preflight.yml", f"{role}: the first task of main.yml is {first.get('name')!r}"


# serial is read before any task of its play: the playbooks check it in a play of their own first.
# A job template's survey answer arrives as an extra var, as -e gives it here.
@pytest.mark.parametrize(
    ("playbook", "group", "extra", "message"),
    [
        ("gpu_stack.yml", "gpu_nodes", "gpufleet_serial=abc", "gpufleet_serial='abc' is not a batch size"),
        ("gpu_stack.yml", "gpu_nodes", "gpufleet_serial=0", "gpufleet_serial='0' is not a batch size"),
        ("gpu_stack.yml", "gpu_nodes", "gpufleet_serial=-1", "gpufleet_serial='-1' is not a batch size"),
        ("fabric.yml", "fabric_nodes", '{"gpufleet_fabric_serial": [2, 0]}', "gpufleet_fabric_serial=[2, 0] is not"),
    ],
)
def test_a_batch_size_ansible_misreads_is_refused_before_the_first_batch(tmp_path, playbook, group, extra, message):
    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": {"node-1": host}}}}}))
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env["PYTHONPATH"] = str(REPO / "collections")
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), str(REPO / "playbooks" / playbook), "--check", "-e", extra],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert message in output and "batch size" in output, output[-3000:]
    assert "Unexpected Exception" not in output, output[-3000:]
    # Refused in the check play: no task of the roles ran.
    assert "gpufleet.inference.nvidia_driver" not in output and "gpufleet.inference.fabric_network" not in output
