"""Launch the collection's controller job templates (controller/*.yml) through ansible-runner.

ansible-runner is what AWX and Automation Platform run a job with. This script builds the
private data directory a controller would hand it for one job template, without a controller:

    env/extravars   the template's extra_vars, then its survey's answers (or defaults), then the launch's own
                    extra vars (later wins, as a controller applies them), then what the
                    template's credentials inject as extra_vars
    env/envvars     what the template's credentials inject as environment variables
    env/cmdline     job type check (--check), diff mode, job tags, skip tags, limit, verbosity
    env/*.cred      what the credentials inject as files (AWX's {{ tower.filename }}), 0600

and runs the template's playbook from the project directory (the checkout by default: its
ansible.cfg is the project's, as a controller's project sync would use it), with the inventory
given. The job's status, rc, its set_stats (the artifacts AWX shows) and its output come back.
The environment, credential files and extravars are written 0600 and never printed.

    .venv/bin/python scripts/controller_jobs.py list
    .venv/bin/python scripts/controller_jobs.py run "NAME" -i INVENTORY [-a VARIABLE=ANSWER] [-e KEY=JSON] \\
        [--input CREDENTIAL.FIELD=VALUE] [--tags T] [--skip-tags T] [--data-dir DIR]

`run` and `workflow` print the job's output on standard error as it comes, and one JSON summary
(status, rc, changed per host, set_stats) on standard output, which callers parse.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

ROOT = Path(__file__).resolve().parents[1]
CONTENT = ROOT / "controller"
VENV_BIN = ROOT / ".venv" / "bin"
# Credential types every controller has built in (not in controller/credential_types.yml).
BUILTIN_TYPES = {"Machine", "Vault", "Source Control", "Container Registry"}
# The controller's own survey types whose answers are strings; numbers stay numbers.
NUMERIC = {"integer": int, "float": float}


class JobError(Exception):
    """A job template that cannot be launched as given (the message says which value and why)."""


@dataclass
class Job:
    """One finished job: what a controller's job page shows."""

    template: str
    status: str
    rc: int
    stats: dict
    recap: dict
    stdout: str
    wall_s: float
    data_dir: Path
    argv: list[str] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, int]:
        """Changed tasks per host that the PLAY RECAP counted (every host of the play, 0 included)."""
        hosts = set().union(*(self.recap.get(key) or {} for key in ("ok", "changed", "failures", "dark", "skipped")))
        return {host: int((self.recap.get("changed") or {}).get(host, 0)) for host in sorted(hosts)}


def load_content(content_dir: Path = CONTENT) -> dict[str, list[dict]]:
    """Every controller_* list of the YAML files in content_dir; each list lives in one file
    (tests/packaging/test_controller_content.py holds the content to the same rule)."""
    content: dict[str, list[dict]] = {}
    for path in sorted(content_dir.glob("*.yml")):
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            if key in content:
                raise JobError(f"{key} is defined twice in {content_dir}")
            content[key] = value
    return content


def by_name(content: dict, key: str, name: str) -> dict:
    for item in content.get(key, []):
        if item.get("name") == name:
            return item
    known = ", ".join(sorted(item.get("name", "?") for item in content.get(key, [])))
    raise JobError(f"{key}: no {name!r}; known: {known or 'none'}")


JINJA = re.compile(r"\{\{|\{%|\{#")


def refuse_jinja(where: str, kind: str, variables: dict | None) -> None:
    """Refuse Jinja in what an operator gives at launch (survey answers, extra vars), as a
    controller does with its default ALLOW_JINJA_IN_EXTRA_VARS=template: only the template's own
    extra_vars may be templated, or an answer like {{ lookup('pipe', 'id') }} would run a command
    on the controller."""

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    for variable, value in (variables or {}).items():
        if any(JINJA.search(text) for text in strings(value)):
            raise JobError(
                f"{where}: {kind} {variable}={value!r} holds Jinja ({{{{, {{% or {{#), which a controller refuses in"
                " launch-time variables (ALLOW_JINJA_IN_EXTRA_VARS=template); give the plain value"
            )


def survey_answers(template: dict, given: dict | None = None) -> dict:
    """The survey's answers: the operator's where given, else the defaults, typed and checked as
    the controller types and checks them (required, choices, length of text, range of numbers)."""
    spec = template.get("survey_spec") or {}
    given = dict(given or {})
    if not template.get("survey_enabled", bool(spec)):
        if given:
            raise JobError(f"{template['name']}: has no survey to answer {', '.join(sorted(given))}")
        return {}
    questions = {question["variable"]: question for question in spec.get("spec", [])}
    unknown = sorted(set(given) - set(questions))
    if unknown:
        raise JobError(
            f"{template['name']}: no survey question for {', '.join(unknown)}; asked: {', '.join(questions)}"
        )
    answers = {}
    for variable, question in questions.items():
        value = given.get(variable, question.get("default"))
        if value in ("", None):
            if question.get("required"):
                raise JobError(f"{template['name']}: survey question {variable!r} is required; answer it")
            continue
        answers[variable] = typed_answer(f"{template['name']}: {variable}", question, value)
    return answers


def typed_answer(where: str, question: dict, value):
    """One answer as the controller types it, or a JobError saying which rule it breaks."""
    kind = question["type"]
    if kind in NUMERIC:
        value = NUMERIC[kind](value)
        low, high = question.get("min"), question.get("max")
        if (low is not None and value < low) or (high is not None and value > high):
            raise JobError(f"{where}={value} is outside {low}..{high}")
    elif kind == "multiselect":
        value = [line for line in value.split("\n") if line] if isinstance(value, str) else list(value)
        stray = [item for item in value if item not in question.get("choices", [])]
        if stray:
            raise JobError(f"{where}: {stray} not among {question.get('choices')}")
    elif kind == "multiplechoice" and value not in question.get("choices", []):
        raise JobError(f"{where}={value!r} is not among {question.get('choices')}")
    elif kind in ("text", "textarea", "password"):
        value = str(value)
        low, high = question.get("min") or 0, question.get("max")
        if len(value) < low or (high is not None and len(value) > high):
            raise JobError(f"{where} must be {low} to {high} characters")
    return value


def render(template_text, context: dict):
    """An injector value, rendered as a controller renders it (Jinja over the credential's inputs)."""
    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    if isinstance(template_text, str):
        return env.from_string(template_text).render(context)
    return template_text


def inject(
    content: dict, template: dict, inputs: dict[str, dict], env_dir: Path, skip: tuple[str, ...] = ()
) -> tuple[dict, dict, list[str]]:
    """(extra_vars, env, secret values) that the template's credentials inject, less the credentials
    in skip (playbooks/controller_apply.yml's gpufleet_controller_skip_credentials: not attached)."""
    extra_vars: dict = {}
    envvars: dict = {}
    secrets: list[str] = []
    defined = {item.get("name") for item in content.get("controller_credential_types", [])}
    known = {item.get("name") for item in content.get("controller_credentials", [])}
    stray = sorted(set(skip) - known)
    if stray:
        raise JobError(
            f"skipped credential {stray[0]!r} is not in controller_credentials; known: {', '.join(sorted(known))}"
        )
    for credential_name in template.get("credentials", []):
        if credential_name in skip:
            continue
        credential = by_name(content, "controller_credentials", credential_name)
        if credential["credential_type"] not in defined and credential["credential_type"] in BUILTIN_TYPES:
            # The controller's own kinds (the SSH key, a vault password): here the inventory and
            # the caller's ssh-agent or key file stand in for them, as on the lab's hosts.
            continue
        ctype = by_name(content, "controller_credential_types", credential["credential_type"])
        fields = {f["id"]: f for f in (ctype.get("inputs") or {}).get("fields", [])}
        given = dict(credential.get("inputs") or {}, **inputs.get(credential_name, {}))
        missing = [f for f in (ctype.get("inputs") or {}).get("required", []) if f not in given]
        if missing:
            raise JobError(
                f"credential {credential_name!r}: no value for {', '.join(missing)}; "
                f"give --input {credential_name}.{missing[0]}=VALUE"
            )
        secrets += [str(given[f]) for f, spec in fields.items() if spec.get("secret") and given.get(f)]
        injectors = ctype.get("injectors") or {}
        # A controller renders a field nobody filled in as an empty string.
        context: dict = {**dict.fromkeys(fields, ""), **given}
        files = {}
        for file_key, file_template in (injectors.get("file") or {}).items():
            # AWX names them template (one file) or template.NAME; {{ tower.filename[.NAME] }}.
            handle, path = tempfile.mkstemp(prefix="cred-", suffix=".cred", dir=env_dir)
            with os.fdopen(handle, "w") as out:
                out.write(render(file_template, context))
            os.chmod(path, 0o600)
            files[file_key.removeprefix("template").removeprefix(".") or None] = path
        if files:
            # Jinja reads {{ tower.filename.NAME }} from a dict as it reads an attribute.
            filename = files[None] if None in files else files
            context["tower"] = context["awx"] = {"filename": filename}
        for key, value in (injectors.get("env") or {}).items():
            envvars[key] = render(value, context)
        for key, value in (injectors.get("extra_vars") or {}).items():
            extra_vars[key] = render(value, context)
    return extra_vars, envvars, secrets


def command_line(template: dict, tags: str | None, skip_tags: str | None, limit: str | None) -> list[str]:
    """The ansible-playbook options the template's settings stand for."""
    args: list[str] = []
    if template.get("job_type", "run") == "check":
        args.append("--check")
    if template.get("diff_mode"):
        args.append("--diff")
    tags = tags if tags is not None else template.get("job_tags")
    skip_tags = skip_tags if skip_tags is not None else template.get("skip_tags")
    limit = limit if limit is not None else template.get("limit")
    if tags:
        args += ["--tags", tags]
    if skip_tags:
        args += ["--skip-tags", skip_tags]
    if limit:
        args += ["--limit", limit]
    if template.get("forks"):
        args += ["--forks", str(template["forks"])]
    verbosity = int(template.get("verbosity") or 0)
    if verbosity:
        args.append("-" + "v" * verbosity)
    return args


def write_private(path: Path, data) -> None:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.chmod(path, 0o600)


def stats_of(artifacts: Path) -> tuple[dict, dict]:
    """(what the job's set_stats left, the PLAY RECAP's counts per host): the playbook_on_stats
    event's artifact_data, and its ok, changed, failures, dark (unreachable) and skipped."""
    for event in sorted((artifacts / "job_events").glob("*.json")):
        data = json.loads(event.read_text())
        if data.get("event") == "playbook_on_stats":
            event_data = data.get("event_data", {})
            recap = {key: event_data.get(key) or {} for key in ("ok", "changed", "failures", "dark", "skipped")}
            return event_data.get("artifact_data") or {}, recap
    return {}, {}


def launch(
    name: str,
    inventory: Path,
    *,
    extra_vars: dict | None = None,
    answers: dict | None = None,
    inputs: dict[str, dict] | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
    limit: str | None = None,
    project_dir: Path = ROOT,
    content_dir: Path = CONTENT,
    data_dir: Path | None = None,
    env: dict[str, str] | None = None,
    skip_credentials: tuple[str, ...] = (),
    workflow_vars: dict | None = None,
    echo: bool | TextIO = False,
) -> Job:
    """Run one job template as a controller would; return the finished job.

    workflow_vars are what a workflow hands its nodes: its own extra vars and survey answers, then
    the artifacts of the node's ancestors. They reach the job whatever its prompts allow, and beat
    the template's variables and survey (docs/workflow.md of AWX)."""
    content = load_content(content_dir)
    template = by_name(content, "controller_templates", name)
    playbook = template["playbook"]
    if not (project_dir / playbook).is_file():
        raise JobError(f"{name}: playbook {playbook!r} is not in the project {project_dir}")
    if extra_vars and not template.get("ask_variables_on_launch"):
        raise JobError(f"{name}: extra vars at launch need ask_variables_on_launch: true (a controller drops them)")
    refuse_jinja(name, "the survey answer", answers)
    refuse_jinja(name, "the launch variable", extra_vars)
    data_dir = Path(data_dir or tempfile.mkdtemp(prefix="gpufleet-job-"))
    env_dir = data_dir / "env"
    env_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    cred_vars, cred_env, secrets = inject(content, template, inputs or {}, env_dir, tuple(skip_credentials))
    survey = survey_answers(template, answers)
    variables = {
        **(template.get("extra_vars") or {}),
        **survey,
        **(extra_vars or {}),
        **(workflow_vars or {}),
        **cred_vars,
    }
    write_private(env_dir / "extravars", variables)
    write_private(env_dir / "envvars", {**(env or {}), **cred_env})
    cmdline = command_line(template, tags, skip_tags, limit)
    write_private(env_dir / "cmdline", shlex.join(cmdline))
    ident = f"job-{int(time.time() * 1000)}"
    runner = shutil.which("ansible-runner", path=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    argv = [
        runner or "ansible-runner",
        "run",
        str(data_dir),
        "--project-dir",
        str(project_dir),
        "-p",
        playbook,
        "--inventory",
        str(inventory),
        "--ident",
        ident,
    ]
    run_env = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=project_dir, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            # echo=True: standard output; or the stream given (the CLI keeps stdout for its JSON).
            (sys.stdout if echo is True else echo).write(line)
    proc.wait()
    wall = round(time.monotonic() - start, 1)
    artifacts = data_dir / "artifacts" / ident
    status = (artifacts / "status").read_text().strip() if (artifacts / "status").exists() else "error"
    rc = int((artifacts / "rc").read_text().strip()) if (artifacts / "rc").exists() else proc.returncode
    stats, recap = stats_of(artifacts)
    job = Job(name, status, rc, stats, recap, "".join(lines), wall, data_dir, [*argv, *cmdline])
    leaked = leaks(data_dir, secrets, job.stdout)
    if leaked:
        raise JobError(f"{name}: a credential's secret appears in {', '.join(leaked)}")
    return job


@dataclass
class WorkflowJob:
    """One finished workflow: its status and the jobs of the nodes that ran, in order."""

    workflow: str
    status: str
    jobs: dict[str, Job]


# A node's own prompt fields reach its job only where the template asks for them on launch.
NODE_PROMPTS = {
    "job_type": "ask_job_type_on_launch",
    "job_tags": "ask_tags_on_launch",
    "skip_tags": "ask_skip_tags_on_launch",
    "limit": "ask_limit_on_launch",
    "inventory": "ask_inventory_on_launch",
    "diff_mode": "ask_diff_mode_on_launch",
}
EDGES = ("success_nodes", "failure_nodes", "always_nodes")


def workflow_graph(workflow: dict) -> tuple[dict[str, dict], dict[str, dict[str, list[str]]], list[str]]:
    """(nodes by identifier, their children per edge, the root nodes) of a workflow, or a JobError
    for an edge to no node, or for a node with two parents: a convergence node, which AWX runs
    (all or any parents) and this launcher does not."""
    nodes = {node["identifier"]: node for node in workflow.get("workflow_nodes", [])}
    children = {
        ident: {edge: [child["identifier"] for child in (node.get("related") or {}).get(edge, [])] for edge in EDGES}
        for ident, node in nodes.items()
    }
    parents: dict[str, str] = {}
    for ident, edges in children.items():
        for child in (child for kids in edges.values() for child in kids):
            if child not in nodes:
                raise JobError(f"{workflow['name']}: node {ident!r} leads to {child!r}, which is not a node")
            if child in parents:
                raise JobError(
                    f"{workflow['name']}: node {child!r} has two parents, {parents[child]!r} and {ident!r}: "
                    "a convergence, which this launcher does not run"
                )
            parents[child] = ident
    return nodes, children, [ident for ident in nodes if ident not in parents]


def launch_workflow(
    name: str,
    inventory: Path,
    *,
    answers: dict | None = None,
    extra_vars: dict | None = None,
    content_dir: Path = CONTENT,
    **kwargs,
) -> WorkflowJob:
    """Run a workflow as a controller does: from its root nodes, each node's job template with the
    workflow's extra vars and survey answers and the cumulative artifacts (set_stats) of its
    ancestors as workflow vars, then the node's success, failure or always children.

    kwargs go to launch() for every node (inputs, skip_credentials, project_dir, env, echo)."""
    content = load_content(content_dir)
    workflow = by_name(content, "controller_workflows", name)
    if extra_vars and not workflow.get("ask_variables_on_launch"):
        raise JobError(f"{name}: extra vars at launch need ask_variables_on_launch: true (a controller drops them)")
    refuse_jinja(name, "the survey answer", answers)
    refuse_jinja(name, "the launch variable", extra_vars)
    handed = {**(workflow.get("extra_vars") or {}), **survey_answers(workflow, answers), **(extra_vars or {})}
    nodes, children, roots = workflow_graph(workflow)
    pending: list[tuple[str, dict]] = [(root, {}) for root in roots]
    ran: dict[str, Job] = {}
    failed_unhandled = False
    while pending:
        ident, artifacts = pending.pop(0)
        node = nodes[ident]
        template = by_name(content, "controller_templates", node["unified_job_template"]["name"])
        for prompt, ask in NODE_PROMPTS.items():
            if prompt in node and not template.get(ask):
                raise JobError(f"{name}: node {ident!r} sets {prompt}, and {template['name']!r} lacks {ask}: true")
        if "inventory" in node or "job_type" in node or "diff_mode" in node:
            raise JobError(f"{name}: node {ident!r}: only job_tags, skip_tags and limit are launched here")
        job = launch(
            template["name"],
            inventory,
            answers=node.get("extra_data"),
            tags=node.get("job_tags"),
            skip_tags=node.get("skip_tags"),
            limit=node.get("limit"),
            content_dir=content_dir,
            workflow_vars={**handed, **artifacts},
            **kwargs,
        )
        ran[ident] = job
        edge = "success_nodes" if job.status == "successful" else "failure_nodes"
        if edge == "failure_nodes" and not children[ident]["failure_nodes"] + children[ident]["always_nodes"]:
            failed_unhandled = True
        # A child's artifacts are its ancestors', the nearer ones winning.
        passed_on = {**artifacts, **job.stats}
        pending += [(child, passed_on) for child in children[ident][edge] + children[ident]["always_nodes"]]
    return WorkflowJob(name, "failed" if failed_unhandled else "successful", ran)


def leaks(data_dir: Path, secrets: list[str], stdout: str) -> list[str]:
    """Where a secret shows up in what a controller shows: the output and the job events.

    ansible-runner records the job's whole environment in artifacts/ID/command, as AWX keeps
    the job's environment: that file may hold a secret only while nobody but its owner reads it."""
    found = ["the job output"] if any(s in stdout for s in secrets) else []
    for path in sorted((data_dir / "artifacts").rglob("*")):
        if not path.is_file() or not any(s in path.read_text(errors="replace") for s in secrets):
            continue
        if path.name == "command" and path.stat().st_mode & 0o077 == 0:
            continue
        found.append(str(path.relative_to(data_dir)))
    return found


def parse_pairs(values: list[str], what: str) -> dict:
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise JobError(f"{what} {item!r}: use KEY=VALUE")
        try:
            pairs[key] = json.loads(value)
        except json.JSONDecodeError:
            pairs[key] = value
    return pairs


def summary(job: Job) -> dict:
    """What the command prints of a job: its template, status, rc, set_stats, changed per host, time."""
    return {
        "template": job.template,
        "status": job.status,
        "rc": job.rc,
        "stats": job.stats,
        "changed": job.changed,
        "wall_s": job.wall_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the job templates and their playbooks")
    run = sub.add_parser("run", help="launch one job template")
    run.add_argument("name")
    run.add_argument("-i", "--inventory", required=True, type=Path)
    run.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("-a", "--answer", action="append", default=[], metavar="VARIABLE=VALUE", help="a survey answer")
    run.add_argument("--input", action="append", default=[], metavar="CREDENTIAL.FIELD=VALUE")
    run.add_argument("--tags")
    run.add_argument("--skip-tags")
    run.add_argument("--limit")
    run.add_argument("--data-dir", type=Path)
    run.add_argument(
        "--skip-credential", action="append", default=[], metavar="NAME", help="a credential not attached (as on apply)"
    )
    flow = sub.add_parser("workflow", help="launch one workflow: its nodes in order, artifacts handed down")
    flow.add_argument("name")
    flow.add_argument("-i", "--inventory", required=True, type=Path)
    flow.add_argument("-e", "--extra-var", action="append", default=[], metavar="KEY=VALUE")
    flow.add_argument("-a", "--answer", action="append", default=[], metavar="VARIABLE=VALUE")
    flow.add_argument("--input", action="append", default=[], metavar="CREDENTIAL.FIELD=VALUE")
    flow.add_argument("--skip-credential", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for template in load_content().get("controller_templates", []):
                print(f"{template['name']}: {template['playbook']}")
            return 0
        inputs: dict[str, dict] = {}
        for key, value in parse_pairs(args.input, "--input").items():
            credential, dot, input_field = key.rpartition(".")
            if not dot:
                raise JobError(f"--input {key}: use CREDENTIAL.FIELD=VALUE")
            inputs.setdefault(credential, {})[input_field] = value
        common = {
            "extra_vars": parse_pairs(args.extra_var, "-e"),
            "answers": {key: str(value) for key, value in parse_pairs(args.answer, "-a").items()},
            "inputs": inputs,
            "skip_credentials": tuple(args.skip_credential),
            # The job's output is progress: standard output is the JSON summary alone.
            "echo": sys.stderr,
        }
        if args.command == "workflow":
            flow = launch_workflow(args.name, args.inventory, **common)
            print(
                json.dumps(
                    {
                        "workflow": flow.workflow,
                        "status": flow.status,
                        "jobs": {k: summary(j) for k, j in flow.jobs.items()},
                    }
                )
            )
            return 0 if flow.status == "successful" else 1
        job = launch(
            args.name,
            args.inventory,
            tags=args.tags,
            skip_tags=args.skip_tags,
            limit=args.limit,
            data_dir=args.data_dir,
            **common,
        )
    except JobError as error:
        print(f"controller_jobs: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary(job)))
    return 0 if job.status == "successful" else 1


if __name__ == "__main__":
    sys.exit(main())
