# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role has the one shape (docs/architecture.md, "One role shape"): tasks/main.yml is a table of
contents of import_tasks with imperative names, the tags are one vocabulary, restarts go through
handlers with listen topics, and structured variables declare their nested options."""

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/tasks/main.yml"))
PHASES = ("preflight", "install", "configure", "service", "verify")
# Dict variables whose keys are the operator's own (sysctl keys, interface names, vLLM flags,
# environment names, label names, Prometheus scrape configs): no fixed set of options to declare.
FREE_FORM = {
    ("host_tuning", "host_tuning_sysctls"),
    ("host_tuning", "host_tuning_sysctl_overrides"),
    ("host_tuning", "host_tuning_rings"),
    ("host_tuning", "host_tuning_channels"),
    ("monitoring", "monitoring_external_labels"),
    ("monitoring", "monitoring_extra_scrape_configs"),
    ("nccl", "nccl_env_overrides"),
    ("vllm", "vllm_args"),
    ("vllm", "vllm_env"),
}
# A restart decided by hand in a task instead of a handler.
HAND_ROLLED_RESTART = re.compile(r"'(restarted|reloaded)' if ")


def load(path):
    return yaml.safe_load(path.read_text()) or []


def task_files(role):
    return sorted((REPO / "roles" / role / "tasks").glob("*.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_main_is_a_table_of_contents_of_imports(role):
    for task in load(REPO / "roles" / role / "tasks" / "main.yml"):
        action = next((key for key in task if key not in ("name", "tags", "when", "vars")), None)
        assert action == "ansible.builtin.import_tasks", (
            f"roles/{role}/tasks/main.yml: {task.get('name')!r} uses {action}, not import_tasks"
        )
        name = task.get("name", "")
        first = name.split(" ", 1)[0]
        assert name[:1].isupper() and not first.endswith("ing"), (
            f"roles/{role}/tasks/main.yml: {name!r} is not an imperative name"
        )


@pytest.mark.parametrize("role", ROLES)
def test_tags_are_the_role_and_one_phase(role):
    allowed = {f"{role}_{phase}" for phase in PHASES}
    for task in load(REPO / "roles" / role / "tasks" / "main.yml"):
        tags = task.get("tags") or []
        tags = [tags] if isinstance(tags, str) else tags
        assert role in tags, f"roles/{role}/tasks/main.yml: {task.get('name')!r} lacks the tag {role}"
        phases = [tag for tag in tags if tag != role]
        assert len(phases) == 1 and phases[0] in allowed, (
            f"roles/{role}/tasks/main.yml: {task.get('name')!r} has tags {tags}; "
            f"use [{role}, <one of {sorted(allowed)}>]"
        )


@pytest.mark.parametrize("role", ROLES)
def test_handlers_listen_on_topics(role):
    path = REPO / "roles" / role / "handlers" / "main.yml"
    for handler in load(path) if path.exists() else []:
        assert handler.get("listen"), f"roles/{role}/handlers/main.yml: {handler.get('name')!r} has no listen topic"


@pytest.mark.parametrize("role", ROLES)
def test_restarts_are_not_decided_in_tasks(role):
    for path in task_files(role):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not HAND_ROLLED_RESTART.search(line), (
                f"{path.relative_to(REPO)}:{number} decides a restart in a task; notify a handler instead"
            )


@pytest.mark.parametrize("role", ROLES)
def test_structured_variables_declare_their_options(role):
    specs = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            structured = option.get("type") == "dict" or option.get("elements") == "dict"
            if structured and (role, name) not in FREE_FORM:
                assert option.get("options"), (
                    f"roles/{role}/meta/argument_specs.yml: {entry}.{name} declares no nested options"
                )


def test_the_free_form_list_names_real_variables():
    for role, name in FREE_FORM:
        specs = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
        assert any(name in (spec.get("options") or {}) for spec in specs.values()), (role, name)
