# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller content (controller/*.yml) checked offline, without a controller
(docs/controller.md): every survey against the rules AWX applies when it stores a survey and when
it launches a job, every survey variable against the argument specs of the roles its playbook
runs, the credential types against AWX's injector rules, every reference between objects, and
every parameter against the DOCUMENTATION of the installed awx.awx module that receives it.

Each check is a function returning a list of problems; test_checks_catch_broken_content feeds
each one a broken copy of the real content, so every check is shown able to fail.

AWX sources of the rules (ansible/awx, devel):
- awx/api/views/__init__.py, JobTemplateSurveySpec._validate_spec_data: name, description and a
  non-empty spec; type, question_name, variable (strings) and required (a boolean) in every
  question; unique variables; the seven types; defaults of the question's type (float: float,
  multiselect: a newline-separated string); integer min and max; choices for the two choice
  types; defaults among the choices ("Default choice must be answered from the choices listed").
- awx/main/models/mixins.py, SurveyJobTemplateMixin: a default is sent on every launch when it
  passes the question's own validation (text min/max are lengths, numbers within min..max), and a
  multiselect answer must be a list.
- awx/main/fields.py, CredentialTypeInputField and CredentialTypeInjectorField: the field keys,
  ids and types; env, extra_vars and file injectors; no ANSIBLE_* and no ENV_BLOCKLIST
  (awx/main/constants.py) environment names; every template renders with the declared fields.
"""

import ast
import copy
import functools
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from jinja2 import StrictUndefined, meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(__file__).resolve().parents[2]
CONTROLLER = REPO / "controller"
APPLY = REPO / "playbooks" / "controller_apply.yml"
FQCN_PREFIX = "gpufleet.inference."

# Which awx.awx module receives each list of controller/*.yml.
MODULES = {
    "controller_credential_types": "credential_type",
    "controller_credentials": "credential",
    "controller_execution_environments": "execution_environment",
    "controller_projects": "project",
    "controller_inventories": "inventory",
    "controller_inventory_sources": "inventory_source",
    "controller_templates": "job_template",
    "controller_workflows": "workflow_job_template",
}

# The playbooks an operator runs, each of which must have a job template.
OPERATOR_PLAYBOOKS = {
    "playbooks/cluster_80x5090.yml",
    "playbooks/llama_rpc_cluster.yml",
    "playbooks/single_node_vllm.yml",
    "playbooks/validate_fabric.yml",
    "playbooks/validate_serving.yml",
    "playbooks/gpu_stack.yml",
    "playbooks/frontdoor_drain.yml",
    "playbooks/frontdoor_undrain.yml",
    "playbooks/frontdoor_report.yml",
    "playbooks/rolling_restart.yml",
    "playbooks/upgrade_serving.yml",
}

# Variables a playbook reads itself (no role argument spec has them), each documented in the
# playbook's header comment (docs/operations.md lists the front door's too). They count for every
# playbook that imports the playbook. "bool_string": the playbook reads it with `| bool`, so a
# survey's "true"/"false" works.
PLAYBOOK_VARIABLES = {
    "playbooks/gpu_stack.yml": {
        "gpufleet_serial": {"type": "str", "default": "20%"},
    },
    "playbooks/frontdoor_drain.yml": {
        "replica": {"type": "str"},
        "reason": {"type": "str"},
    },
    "playbooks/frontdoor_undrain.yml": {
        "replica": {"type": "str"},
    },
    "playbooks/rolling_restart.yml": {
        "frontdoor_allow_outage": {"type": "bool_string", "default": "false"},
    },
    "playbooks/upgrade_serving.yml": {
        "serving_upgrade_change": {"type": "str", "default": "any", "choices": ["any", "model", "vllm", "settings"]},
        "serving_upgrade_batch_size": {"type": "int", "default": 1},
        "serving_upgrade_min_serving": {"type": "int", "default": 1},
        "serving_upgrade_allow_outage": {"type": "bool_string", "default": "false"},
    },
}

# AWX's question types and the Python type of their defaults (JobTemplateSurveySpec.ALLOWED_TYPES).
SURVEY_TYPES = {
    "text": str,
    "textarea": str,
    "password": str,
    "multiplechoice": str,
    "multiselect": str,
    "integer": int,
    "float": float,
}
QUESTION_KEYS = {
    "question_name",
    "question_description",
    "variable",
    "type",
    "required",
    "default",
    "choices",
    "min",
    "max",
}
# Which question types can carry a variable of each argument-spec type.
SURVEY_TYPES_FOR = {
    "str": {"text", "textarea", "multiplechoice"},
    "path": {"text", "textarea"},
    "int": {"integer"},
    "float": {"float", "integer"},
    "raw": {"text", "textarea", "multiplechoice", "integer", "float"},
    "list": {"multiselect"},
    "bool_string": {"multiplechoice"},
    # bool and dict: no survey type answers them (a survey answers strings; the roles test
    # `is boolean`). They are launch-time extra variables.
}
# Names that must never be a survey question: the secrets come from credentials.
SECRET_NAME = re.compile(r"(api_key|token|password|secret)$")

# AWX's custom credential types (awx/main/fields.py).
CREDENTIAL_KINDS = {"cloud", "net"}
FIELD_KEYS = {
    "id",
    "label",
    "type",
    "format",
    "choices",
    "help_text",
    "multiline",
    "secret",
    "ask_at_runtime",
    "default",
}
NAME_PATTERN = re.compile(r"^[a-zA-Z_]+[a-zA-Z0-9_]*$")
FILE_INJECTOR = re.compile(r"^template(\.[a-zA-Z_]+[a-zA-Z0-9_]*)?$")
ENV_BLOCKLIST = {
    "VIRTUAL_ENV", "PATH", "PYTHONPATH", "JOB_ID", "INVENTORY_ID", "INVENTORY_SOURCE_ID", "INVENTORY_UPDATE_ID",
    "AD_HOC_COMMAND_ID", "REST_API_URL", "REST_API_TOKEN", "MAX_EVENT_RES", "CALLBACK_QUEUE", "CALLBACK_CONNECTION",
    "CACHE", "JOB_CALLBACK_DEBUG", "INVENTORY_HOSTVARS", "AWX_HOST", "PROJECT_REVISION", "SUPERVISOR_CONFIG_PATH",
}  # fmt: skip
# Credential types the controller ships (managed), which the content may use by name.
BUILTIN_CREDENTIAL_TYPES = {"Machine"}
# Workflow node prompts and the job template setting that must allow each.
NODE_PROMPTS = {
    "extra_data": "ask_variables_on_launch",
    "inventory": "ask_inventory_on_launch",
    "limit": "ask_limit_on_launch",
    "job_tags": "ask_tags_on_launch",
    "skip_tags": "ask_skip_tags_on_launch",
    "job_type": "ask_job_type_on_launch",
    "diff_mode": "ask_diff_mode_on_launch",
    "verbosity": "ask_verbosity_on_launch",
    "forks": "ask_forks_on_launch",
    "timeout": "ask_timeout_on_launch",
    "scm_branch": "ask_scm_branch_on_launch",
    "execution_environment": "ask_execution_environment_on_launch",
    "job_slice_count": "ask_job_slice_count_on_launch",
}


# Files are read once (every check and every breakage reads them again); callers never change
# what they get.
@functools.cache
def load_yaml(path):
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def load_content():
    content = {}
    for path in sorted(CONTROLLER.glob("*.yml")):
        for key, value in load_yaml(path).items():
            assert key not in content, f"{key} is defined twice in controller/"
            content[key] = value
    return content


CONTENT = load_content()


# --- awx.awx's module documentation ---------------------------------------------------------


def awx_modules_dir():
    roots = [Path(sysconfig.get_paths()["purelib"]), *(Path(entry) for entry in sys.path if entry)]
    for root in roots:
        candidate = root / "ansible_collections" / "awx" / "awx" / "plugins" / "modules"
        if candidate.is_dir():
            return candidate
    pytest.fail("awx.awx is not installed (it comes with the pinned ansible package of requirements-test.txt)")
    return None


@functools.cache
def module_options(module):
    source = (awx_modules_dir() / f"{module}.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)["options"]
    raise AssertionError(f"awx.awx.{module} has no DOCUMENTATION")


# The Python types of the option types that awx.awx's DOCUMENTATION uses.
OPTION_TYPES = {"str": str, "bool": bool, "int": int, "float": (int, float), "list": list, "dict": dict}


def value_problems(value, option, where):
    """The value's type (and its elements') and choices, as the module's argument spec checks them."""
    kind = OPTION_TYPES.get(option.get("type", "str"))
    if kind is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        return [f"{where}: {value!r} is not of type {option.get('type', 'str')}"]
    elements = OPTION_TYPES.get(option.get("elements", ""))
    values = value if isinstance(value, list) else [value]
    if elements is not None and not all(isinstance(element, elements) for element in values):
        return [f"{where}: the elements of {value!r} are not of type {option['elements']}"]
    choices = [str(choice) for choice in option.get("choices") or []]
    if choices and any(str(element) not in choices for element in values):
        return [f"{where}: {value!r} is not one of {choices}"]
    return []


def unknown_options(value, options, where):
    """Keys of value that the module's options (or suboptions) do not declare, and values that
    their types and choices refuse, recursively."""
    problems = []
    for key, item in value.items():
        if key not in options:
            problems.append(f"{where}: {key} is no option (known: {', '.join(sorted(options))})")
            continue
        problems += value_problems(item, options[key], f"{where}.{key}")
        suboptions = options[key].get("suboptions")
        if not suboptions:
            continue
        items = item if isinstance(item, list) else [item]
        for index, element in enumerate(items):
            if isinstance(element, dict):
                problems += unknown_options(element, suboptions, f"{where}.{key}[{index}]")
    return problems


def check_module_options(content):
    problems = []
    for key, module in MODULES.items():
        options = module_options(module)
        for item in content.get(key, []):
            problems += unknown_options(item, options, f"{key} {item.get('name')!r} (awx.awx.{module})")
    return problems


def apply_tasks():
    return [task for play in load_yaml(APPLY) for task in play.get("tasks", [])]


def check_apply_passes_every_key(content):
    """controller_apply.yml passes every key the content uses to the module: a key it drops is
    silently not applied."""
    problems = []
    tasks = apply_tasks()
    for key, module in MODULES.items():
        task = next((task for task in tasks if f"awx.awx.{module}" in task), None)
        if task is None:
            problems.append(f"{APPLY.name} has no awx.awx.{module} task")
            continue
        if key not in str(task.get("loop", "")):
            problems.append(f"{APPLY.name}: the awx.awx.{module} task does not loop over {key}")
        args = task[f"awx.awx.{module}"]
        passed = {name for name, value in args.items() if re.search(rf"\bitem\.{name}\b", str(value))}
        for item in content.get(key, []):
            for name in sorted(set(item) - passed):
                problems.append(f"{key} {item.get('name')!r}: {APPLY.name} does not pass {name} to awx.awx.{module}")
    return problems


# --- roles, argument specs and playbooks ------------------------------------------------------


def role_name(name):
    return name.removeprefix(FQCN_PREFIX)


def argument_specs(role):
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    return load_yaml(path).get("argument_specs", {}) if path.exists() else {}


def role_defaults(role):
    path = REPO / "roles" / role / "defaults" / "main.yml"
    return load_yaml(path) if path.exists() else {}


def walk_tasks(tasks):
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        yield task
        for section in ("block", "rescue", "always"):
            yield from walk_tasks(task.get(section))


def included_roles(tasks):
    for task in walk_tasks(tasks):
        for action in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
            if action in task:
                yield role_name(task[action]["name"]), task[action].get("tasks_from", "main")


def role_entry_points(role, entry, seen):
    """(role, entry point) pairs a role entry point runs, with the roles its tasks include."""
    if (role, entry) in seen:
        return
    seen.add((role, entry))
    for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
        for included in included_roles(load_yaml(path) or []):
            role_entry_points(*included, seen)


@functools.cache
def playbook_runs(playbook):
    """(role, entry point) pairs and playbook files a playbook runs, through import_playbook."""
    seen = set()
    playbooks = collect_playbook(playbook, seen)
    return frozenset(seen), tuple(playbooks)


def collect_playbook(playbook, seen):
    playbooks = [playbook]
    path = REPO / playbook
    for play in load_yaml(path) or []:
        if "ansible.builtin.import_playbook" in play or "import_playbook" in play:
            imported = play.get("ansible.builtin.import_playbook") or play["import_playbook"]
            imported_path = str((path.parent / imported).relative_to(REPO))
            playbooks += collect_playbook(imported_path, seen)
            continue
        for entry in play.get("roles") or []:
            name = entry if isinstance(entry, str) else entry.get("role") or entry.get("name")
            role_entry_points(role_name(name), "main", seen)
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            for included in included_roles(play.get(section)):
                role_entry_points(*included, seen)
    return playbooks


@functools.cache
def playbook_variables(playbook):
    """Every variable a playbook takes: {name: {"type", "default"?, "no_log"?, "source"}}."""
    entries, playbooks = playbook_runs(playbook)
    variables = {}
    for role, entry in sorted(entries):
        options = argument_specs(role).get(entry, {}).get("options", {}) or {}
        defaults = role_defaults(role)
        for name, spec in options.items():
            described = dict(spec, type=spec.get("type", "str"), source=f"roles/{role} ({entry})")
            if "default" not in spec and name in defaults:
                described["default"] = defaults[name]
            variables.setdefault(name, described)
    for path in playbooks:
        for name, spec in PLAYBOOK_VARIABLES.get(path, {}).items():
            variables.setdefault(name, dict(spec, source=path))
    return variables


@functools.cache
def playbook_texts(playbook):
    """The text of a playbook, the playbooks it imports and the task files of its roles."""
    entries, playbooks = playbook_runs(playbook)
    texts = [(REPO / path).read_text() for path in playbooks]
    for role in sorted({entry[0] for entry in entries}):
        texts += [path.read_text() for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml"))]
    return "\n".join(texts)


def is_template(value):
    return isinstance(value, str) and "{{" in value


def inventory_values(content, inventory):
    """Literal values the inventory's sources set in group_vars (and a hosts file's all.vars):
    {name: value}; a name set by a Jinja expression maps to None (the inventory computes it)."""
    values = {}
    for source in content.get("controller_inventory_sources", []):
        if source.get("inventory") != inventory or not source.get("source_path"):
            continue
        path = REPO / source["source_path"]
        files = sorted((path.parent / "group_vars").glob("*.yml"))
        found = [load_yaml(file) for file in files]
        if path.exists() and "plugin" not in load_yaml(path):
            found.append(load_yaml(path).get("all", {}).get("vars", {}) or {})
        for data in found:
            for name, value in data.items():
                values[name] = None if is_template(value) else value
    return values


# --- surveys ------------------------------------------------------------------------------------


def is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def question_structure(question, where):
    """The keys and their types; None when the question is too broken to read further."""
    for key in ("type", "question_name", "variable", "required"):
        if key not in question:
            return None, [f"{where}: '{key}' missing from the question"]
    problems = [
        f"{where}: {key} must be a string"
        for key in ("type", "question_name", "variable")
        if not isinstance(question[key], str)
    ]
    if not isinstance(question["required"], bool):
        problems.append(f"{where}: required must be a boolean")
    problems += [f"{where}: {key} is no survey question key" for key in sorted(set(question) - QUESTION_KEYS)]
    if question["type"] not in SURVEY_TYPES:
        return None, [*problems, f"{where}: type {question['type']!r} is not one of {', '.join(SURVEY_TYPES)}"]
    if question["type"] == "password":
        problems.append(f"{where}: a password question asks for a secret; secrets come from the credentials")
    for key in ("min", "max"):
        if question.get(key) is not None and not is_integer(question[key]):
            problems.append(f"{where}: {key} must be an integer (AWX refuses other limits, a float question's too)")
    return question["type"], problems


def question_default(question, qtype, where):
    """The default's type and presence; None when there is no default to check further."""
    default = question.get("default")
    if "default" in question and default in ("", None):
        return None, [f"{where}: an empty default is sent as '' or dropped, by AWX version; leave it out"]
    if "default" not in question:
        if not question["required"] and qtype not in ("integer", "float"):
            return None, [
                f"{where}: an optional {qtype} question without a default reaches the play as '' or null when left"
                " blank; give a default or make it required (an unanswered number is left out)"
            ]
        return None, []
    if isinstance(default, bool) or not isinstance(default, SURVEY_TYPES[qtype]):
        return None, [
            f"{where}: default {default!r} must be of type {SURVEY_TYPES[qtype].__name__} for the {qtype} question"
        ]
    if isinstance(default, str) and default.startswith("$encrypted$"):
        return None, [f"{where}: $encrypted$ is reserved for password defaults"]
    return default, []


def question_choices(question, qtype, default, where):
    if qtype not in ("multiplechoice", "multiselect"):
        return [f"{where}: choices on a {qtype} question"] if "choices" in question else []
    choices = question.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(choice, str) for choice in choices):
        return [f"{where}: {qtype} needs choices, a list of strings (the form AWX stores and returns)"]
    problems = [f"{where}: choices repeat"] if len(set(choices)) != len(choices) else []
    if default is None:
        return problems
    defaults = default.split("\n") if qtype == "multiselect" else [default]
    if qtype == "multiselect" and any(not line.strip() for line in defaults):
        problems.append(f"{where}: the multiselect default has empty lines, which AWX strips (a change on every apply)")
    missing = [value for value in defaults if value not in choices]
    if missing:
        problems.append(f"{where}: default {missing} is not among the choices {choices}")
    return problems


def question_limits(question, qtype, default, where):
    """min and max bound a number's value and a text's length."""
    if default is None or qtype not in ("integer", "float", "text", "textarea"):
        return []
    measured = len(default) if qtype in ("text", "textarea") else default
    low, high = question.get("min"), question.get("max")
    if (low is not None and measured < low) or (high is not None and measured > high):
        what = f" ({len(default)} characters)" if qtype in ("text", "textarea") else ""
        return [f"{where}: default {default!r}{what} is outside min..max {low}..{high}"]
    return []


def check_question(question, where):
    """AWX's rules for one question, when it stores the survey and when it launches with it."""
    qtype, problems = question_structure(question, where)
    if qtype is None:
        return problems
    default, found = question_default(question, qtype, where)
    return (
        problems
        + found
        + question_choices(question, qtype, default, where)
        + question_limits(question, qtype, default, where)
    )


def check_survey_spec(survey, where):
    problems = []
    for key, kind in (("name", str), ("description", str), ("spec", list)):
        if not isinstance(survey.get(key), kind):
            problems.append(f"{where}: survey_spec.{key} missing or not a {kind.__name__}")
    spec = survey.get("spec") if isinstance(survey.get("spec"), list) else []
    if not spec:
        problems.append(f"{where}: survey_spec.spec has no questions")
    variables = [question.get("variable") for question in spec if isinstance(question, dict)]
    problems += [
        f"{where}: variable {name} is asked twice" for name in sorted({n for n in variables if variables.count(n) > 1})
    ]
    for index, question in enumerate(spec):
        if not isinstance(question, dict):
            problems.append(f"{where}: question {index} is not a mapping")
            continue
        problems += check_question(question, f"{where} question {index} ({question.get('variable')})")
    return problems


def surveyed(content):
    """(where, survey, [playbooks], inventory) of every job template and workflow with a survey."""
    templates = {template["name"]: template for template in content.get("controller_templates", [])}
    found = []
    for template in content.get("controller_templates", []):
        if template.get("survey_enabled") or template.get("survey_spec"):
            where = f"template {template['name']!r}"
            found.append(
                (where, template.get("survey_spec") or {}, [template.get("playbook")], template.get("inventory"))
            )
    for workflow in content.get("controller_workflows", []):
        if workflow.get("survey_enabled") or workflow.get("survey_spec"):
            names = [node.get("unified_job_template", {}).get("name") for node in workflow.get("workflow_nodes", [])]
            playbooks = [templates[name].get("playbook") for name in names if name in templates]
            where = f"workflow {workflow['name']!r}"
            found.append((where, workflow.get("survey_spec") or {}, playbooks, workflow.get("inventory")))
    return found


def check_surveys(content):
    problems = []
    for template in content.get("controller_templates", []) + content.get("controller_workflows", []):
        if bool(template.get("survey_enabled")) != bool(template.get("survey_spec")):
            problems.append(f"{template['name']!r}: survey_enabled and survey_spec must come together")
    for where, survey, _playbooks, _inventory in surveyed(content):
        problems += check_survey_spec(survey, where)
    return problems


def injected_variables(content):
    return {
        name
        for ctype in content.get("controller_credential_types", [])
        for name in ctype.get("injectors", {}).get("extra_vars", {})
    }


def variable_fits(question, spec, secret, where):
    """The question can answer the variable: not a secret, a type and choices the variable takes."""
    name, qtype = question.get("variable"), question.get("type")
    problems = [f"{where}: {name} is a secret; it comes from a credential, not a survey"] if secret else []
    if qtype not in SURVEY_TYPES_FOR.get(spec["type"], set()):
        return [*problems, f"{where}: {name} is {spec['type']} ({spec['source']}); a {qtype} question cannot answer it"]
    allowed = spec.get("choices") or (["true", "false"] if spec["type"] == "bool_string" else None)
    if allowed and (qtype != "multiplechoice" or not set(question.get("choices") or []) <= {str(c) for c in allowed}):
        problems.append(f"{where}: {name} takes only {allowed} ({spec['source']}); ask with multiplechoice among them")
    return problems


def default_changes_nothing(question, spec, in_inventory, inventory, where):
    """A default is sent on every launch: it must be the value the run takes without the survey."""
    name = question.get("variable")
    if "default" not in question:
        return []
    if name in in_inventory:
        expected, origin = in_inventory[name], f"the inventory {inventory!r} sets it"
    else:
        expected, origin = spec.get("default"), f"the default of {spec['source']}"
    if expected is None or is_template(expected):
        return [
            f"{where}: {name} has a default although {origin} is computed:"
            " drop the default (an unanswered number is left out)"
        ]
    if question["default"] != expected and str(question["default"]) != str(expected):
        return [
            f"{where}: {name} defaults to {question['default']!r}, but {origin} to {expected!r}:"
            " a survey default is sent on every launch and would override it"
        ]
    return []


def check_survey_variables(content):
    """Every question asks for a variable the playbook takes, of a type the question can answer,
    and its default is what the run takes without the survey."""
    problems = []
    injected = injected_variables(content)
    for where, survey, playbooks, inventory in surveyed(content):
        known = {}
        for playbook in playbooks:
            if playbook and (REPO / playbook).exists():
                for name, spec in playbook_variables(playbook).items():
                    known.setdefault(name, spec)
        in_inventory = inventory_values(content, inventory)
        for question in (survey.get("spec") or []) if isinstance(survey.get("spec"), list) else []:
            if not isinstance(question, dict):
                continue
            name = question.get("variable")
            spec = known.get(name)
            if spec is None:
                listed = ", ".join(map(str, playbooks))
                problems.append(
                    f"{where}: {name} is in no argument spec of the roles of {listed}"
                    " and no documented playbook variable"
                )
                continue
            secret = bool(spec.get("no_log") or name in injected or SECRET_NAME.search(name or ""))
            problems += variable_fits(question, spec, secret, where)
            problems += default_changes_nothing(question, spec, in_inventory, inventory, where)
    return problems


# --- credential types -------------------------------------------------------------------------


def render(template, namespace, strict=True):
    environment = (
        ImmutableSandboxedEnvironment(undefined=StrictUndefined) if strict else ImmutableSandboxedEnvironment()
    )
    return environment.from_string(template).render(namespace)


@functools.cache
def argspec_options():
    options = {}
    for path in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        for entry in (load_yaml(path).get("argument_specs") or {}).values():
            for name, spec in (entry.get("options") or {}).items():
                options.setdefault(name, spec)
    return options


def credential_fields(inputs, where):
    problems = [
        f"{where}: inputs.{key} is not fields or required" for key in sorted(set(inputs) - {"fields", "required"})
    ]
    fields = inputs.get("fields") or []
    for field in fields:
        fwhere = f"{where} field {field.get('id')!r}"
        problems += [f"{fwhere}: {key} is no field key" for key in sorted(set(field) - FIELD_KEYS)]
        if not NAME_PATTERN.match(str(field.get("id"))) or field.get("id") == "tower":
            problems.append(f"{fwhere}: the id must be a variable name other than tower")
        if not field.get("label"):
            problems.append(f"{fwhere}: a label is required")
        # AWX adds type: string where it is missing, so the stored inputs would differ from the
        # file's and every apply would report a change.
        if field.get("type") not in ("string", "boolean"):
            problems.append(f"{fwhere}: type must be given, string or boolean")
        # Every field of these types holds a secret (the values that are not secret are the
        # inventory's), so every one is encrypted and masked.
        if field.get("secret") is not True:
            problems.append(f"{fwhere}: not marked secret: true")
    ids, labels = [field.get("id") for field in fields], [field.get("label") for field in fields]
    if len(set(ids)) != len(ids) or len(set(labels)) != len(labels):
        problems.append(f"{where}: field ids and labels must be unique")
    problems += [f"{where}: required {name} is no field" for name in inputs.get("required", []) if name not in ids]
    return problems


def credential_injectors(injectors, ids, where):
    """AWX's injector schema, its refused environment names, and templates of declared fields."""
    problems = [
        f"{where}: injectors.{key} is not env, extra_vars or file"
        for key in sorted(set(injectors) - {"env", "extra_vars", "file"})
    ]
    for name in injectors.get("env", {}):
        if not NAME_PATTERN.match(name) or name.startswith("ANSIBLE_") or name in ENV_BLOCKLIST:
            problems.append(f"{where}: env {name} is refused by AWX (ANSIBLE_* and its own names)")
    for name in injectors.get("extra_vars", {}):
        if not NAME_PATTERN.match(name):
            problems.append(f"{where}: extra_vars {name} is no variable name")
    problems += [
        f"{where}: file injector {name} must be template or template.NAME"
        for name in injectors.get("file", {})
        if not FILE_INJECTOR.match(name)
    ]
    namespace = {field_id: "EXAMPLE" for field_id in ids} | {"tower": {"filename": "EXAMPLE_FILENAME"}}
    parser = ImmutableSandboxedEnvironment()
    for kind in ("env", "extra_vars", "file"):
        for name, template in (injectors.get(kind) or {}).items():
            undefined = meta.find_undeclared_variables(parser.parse(str(template))) - set(namespace)
            problems += [f"{where}: {kind}.{name} uses {field}, which is no field" for field in sorted(undefined)]
            if not undefined:
                render(str(template), namespace)
    return problems


def credential_variables(ctype, where):
    """What the injected extra vars do to the roles' variables."""
    problems = []
    options = argspec_options()
    required = {field_id: "EXAMPLE" for field_id in (ctype.get("inputs") or {}).get("required", [])}
    for name, template in ((ctype.get("injectors") or {}).get("extra_vars") or {}).items():
        if name not in options:
            problems.append(f"{where}: extra_vars.{name} is in no role argument spec")
            continue
        # An empty field renders '' and the injector still sets the variable: that must be the
        # variable's own default, or attaching the credential would change the run.
        default = options[name].get("default")
        if render(str(template), required, strict=False) == "" and default != "":
            problems.append(
                f"{where}: extra_vars.{name} is '' when its optional fields are empty, but the variable's default"
                f" is {default!r}: make the field required"
            )
        if options[name].get("no_log") and not re.fullmatch(r"\{\{\s*\w+\s*\}\}", str(template)):
            problems.append(f"{where}: extra_vars.{name} is a no_log variable; inject its secret field as it is")
    return problems


def check_credential_types(content):
    problems = []
    for ctype in content.get("controller_credential_types", []):
        where = f"credential type {ctype.get('name')!r}"
        if ctype.get("kind") not in CREDENTIAL_KINDS:
            problems.append(f"{where}: kind {ctype.get('kind')!r} is not one of {sorted(CREDENTIAL_KINDS)}")
        inputs = ctype.get("inputs") or {}
        problems += credential_fields(inputs, where)
        problems += credential_injectors(
            ctype.get("injectors") or {}, [field.get("id") for field in inputs.get("fields") or []], where
        )
        problems += credential_variables(ctype, where)
    return problems


def template_injections(template, content):
    """(kind, name, credential) of every name the credentials of a template inject."""
    types = {ctype["name"]: ctype for ctype in content.get("controller_credential_types", [])}
    credentials = {cred["name"]: cred for cred in content.get("controller_credentials", [])}
    for credential in template.get("credentials", []):
        injectors = types.get(credentials.get(credential, {}).get("credential_type"), {}).get("injectors") or {}
        for kind in ("env", "extra_vars", "file"):
            for name in injectors.get(kind) or {}:
                yield kind, name, credential


def check_injector_collisions(content):
    """The credential types of one template must not inject the same name twice, and no survey
    question may ask for an injected variable."""
    problems = []
    for template in content.get("controller_templates", []):
        where = f"template {template['name']!r}"
        seen = {}
        for kind, name, credential in template_injections(template, content):
            if (kind, name) in seen:
                problems.append(f"{where}: {kind} {name} is injected by both {seen[kind, name]!r} and {credential!r}")
            seen[kind, name] = credential
        asked = {question.get("variable") for question in (template.get("survey_spec") or {}).get("spec") or []}
        given = set(template.get("extra_vars") or {})
        for (kind, name), credential in seen.items():
            if kind == "extra_vars" and name in asked | given:
                problems.append(f"{where}: {name} is injected by {credential!r} and also asked or set")
    return problems


# --- references -------------------------------------------------------------------------------


def names_of(content, key):
    return {item.get("name") for item in content.get(key, [])}


def not_defined(where, key, value, known):
    return [f"{where}: {key} {value!r} is not defined"] if value not in known else []


def check_object_references(content):
    """Credentials, projects and inventory sources name objects that exist, and files that do."""
    problems = []
    projects, inventories = names_of(content, "controller_projects"), names_of(content, "controller_inventories")
    environments = names_of(content, "controller_execution_environments")
    types = names_of(content, "controller_credential_types") | BUILTIN_CREDENTIAL_TYPES
    for key in MODULES:
        listed = [item.get("name") for item in content.get(key, [])]
        problems += [f"{key}: {name!r} is defined twice" for name in sorted({n for n in listed if listed.count(n) > 1})]
    for credential in content.get("controller_credentials", []):
        where = f"credential {credential['name']!r}"
        problems += not_defined(where, "credential type", credential.get("credential_type"), types)
        if "inputs" in credential:
            problems.append(
                f"{where}: inputs are the operator's (gpufleet_controller_credential_inputs), not the repository's"
            )
    for project in content.get("controller_projects", []):
        if project.get("default_environment"):
            problems += not_defined(
                f"project {project['name']!r}", "execution environment", project["default_environment"], environments
            )
    for source in content.get("controller_inventory_sources", []):
        where = f"inventory source {source['name']!r}"
        problems += not_defined(where, "inventory", source.get("inventory"), inventories)
        if source.get("source") == "scm":
            problems += not_defined(where, "project", source.get("source_project"), projects)
            if not (REPO / str(source.get("source_path"))).is_file():
                problems.append(f"{where}: {source.get('source_path')} is not a file of the repository")
        if source.get("execution_environment"):
            problems += not_defined(where, "execution environment", source["execution_environment"], environments)
    return problems


def check_template_references(content):
    """Each template's playbook, project, inventory, EE, credentials and tags exist."""
    problems = []
    known = {
        "project": names_of(content, "controller_projects"),
        "inventory": names_of(content, "controller_inventories"),
        "execution_environment": names_of(content, "controller_execution_environments"),
    }
    credentials = names_of(content, "controller_credentials")
    for template in content.get("controller_templates", []):
        where = f"template {template.get('name')!r}"
        playbook = str(template.get("playbook"))
        for key, values in known.items():
            problems += not_defined(where, key, template.get(key), values)
        for credential in template.get("credentials", []):
            problems += not_defined(where, "credential", credential, credentials)
        if not playbook.startswith("playbooks/") or not (REPO / playbook).is_file():
            problems.append(f"{where}: playbook {playbook} is not a playbook of the project (playbooks/*.yml)")
            continue
        text = playbook_texts(playbook)
        for key in ("job_tags", "skip_tags"):
            for tag in (tag.strip() for tag in str(template.get(key) or "").split(",")):
                if tag and not re.search(rf"\b{re.escape(tag)}\b", text):
                    problems.append(f"{where}: {key} {tag} is a tag of no task of {playbook} and its roles")
    return problems


def check_workflow_references(content):
    """Workflow nodes name templates, prompt only for what the template asks, link known nodes."""
    problems = []
    templates = {template.get("name"): template for template in content.get("controller_templates", [])}
    for workflow in content.get("controller_workflows", []):
        where = f"workflow {workflow['name']!r}"
        if workflow.get("inventory"):
            problems += not_defined(
                where, "inventory", workflow["inventory"], names_of(content, "controller_inventories")
            )
        nodes = workflow.get("workflow_nodes") or []
        identifiers = [node.get("identifier") for node in nodes]
        if len(set(identifiers)) != len(identifiers):
            problems.append(f"{where}: node identifiers repeat")
        for node in nodes:
            nwhere = f"{where} node {node.get('identifier')!r}"
            target = templates.get((node.get("unified_job_template") or {}).get("name"))
            if target is None:
                problems.append(f"{nwhere}: no job template of that name")
                continue
            problems += [
                f"{nwhere}: {prompt} needs {setting} on {target['name']!r}"
                for prompt, setting in NODE_PROMPTS.items()
                if prompt in node and not target.get(setting)
            ]
            for link in ("success_nodes", "failure_nodes", "always_nodes"):
                for linked in (node.get("related") or {}).get(link, []):
                    if linked.get("identifier") not in identifiers:
                        problems.append(f"{nwhere}: {link} names unknown node {linked.get('identifier')!r}")
    return problems


def check_workflow_shape(content):
    """The flagship's workflow is preflight (check mode), then deploy, then the fabric acceptance, then the
    serving acceptance, each on success."""
    problems = []
    templates = {template["name"]: template for template in content.get("controller_templates", [])}
    workflows = content.get("controller_workflows", [])
    if not workflows:
        return ["controller_workflows is empty"]
    for workflow in workflows:
        nodes = {node["identifier"]: node for node in workflow.get("workflow_nodes", [])}
        chain = ["preflight", "deploy", "validate", "serving"]
        if list(nodes) != chain:
            problems.append(f"workflow {workflow['name']!r}: nodes {list(nodes)} are not {chain}")
            continue
        for first, second in zip(chain, chain[1:]):
            linked = [link.get("identifier") for link in (nodes[first].get("related") or {}).get("success_nodes", [])]
            if linked != [second]:
                problems.append(
                    f"workflow {workflow['name']!r}: {second} must run on the success of {first} (success_nodes)"
                )
        kinds = {key: templates.get(nodes[key]["unified_job_template"]["name"], {}) for key in chain}
        if kinds["preflight"].get("job_type") != "check":
            problems.append(f"workflow {workflow['name']!r}: the preflight node's template does not run in check mode")
        if kinds["deploy"].get("job_type", "run") != "run" or kinds["deploy"].get("playbook") != kinds["preflight"].get(
            "playbook"
        ):
            problems.append(
                f"workflow {workflow['name']!r}: the deploy node must run the playbook the preflight checked"
            )
        # A node's set_stats artifacts become extra vars of every later node (docs/workflow.md of
        # AWX). In the site run only the validation layer (tag gpufleet_validation) sets stats: the
        # nodes that run the site must skip it. The acceptances' own keys (fabric_acceptance,
        # serving_acceptance) are read by no role.
        for key in ("preflight", "deploy"):
            skipped = f"{nodes[key].get('skip_tags', '')},{kinds[key].get('skip_tags', '')}"
            if "set_stats" in playbook_texts(kinds[key].get("playbook", "")) and "gpufleet_validation" not in skipped:
                problems.append(
                    f"workflow {workflow['name']!r}: node {key} would hand its set_stats to the later nodes;"
                    " skip gpufleet_validation there"
                )
    return problems


def check_operator_playbooks(content):
    covered = {template.get("playbook") for template in content.get("controller_templates", [])}
    return [f"{playbook} has no job template" for playbook in sorted(OPERATOR_PLAYBOOKS - covered)]


def check_playbook_variables_documented(content):
    """Each listed playbook variable is read by its playbook and named in its header comment, and
    a template runs the playbook."""
    problems = []
    run = set()
    for template in content.get("controller_templates", []):
        if (REPO / str(template.get("playbook"))).is_file():
            run.update(playbook_runs(template["playbook"])[1])
    for playbook, variables in PLAYBOOK_VARIABLES.items():
        if playbook not in run:
            problems.append(f"{playbook} has playbook variables listed, but no template runs it")
        lines = (REPO / playbook).read_text().splitlines()
        header = "\n".join(line for line in lines if line.startswith("#"))
        body = "\n".join(line for line in lines if not line.startswith("#"))
        for name in variables:
            if not re.search(rf"\b{name}\b", body):
                problems.append(f"{playbook} does not read {name}")
            if not re.search(rf"\b{name}\b", header):
                problems.append(f"{playbook} does not document {name} in its header")
    return problems


def check_docs(content):
    """docs/controller.md names every template, workflow and survey variable."""
    text = (REPO / "docs" / "controller.md").read_text()
    problems = []
    for item in content.get("controller_templates", []) + content.get("controller_workflows", []):
        if item["name"] not in text:
            problems.append(f"docs/controller.md does not list {item['name']!r}")
        section = text.split(item["name"], 1)[-1].split("\n### ", 1)[0]
        for question in (item.get("survey_spec") or {}).get("spec") or []:
            if f"`{question.get('variable')}`" not in section:
                problems.append(
                    f"docs/controller.md: {item['name']!r} does not list its survey variable {question.get('variable')}"
                )
    return problems


CHECKS = [
    check_module_options,
    check_apply_passes_every_key,
    check_surveys,
    check_survey_variables,
    check_credential_types,
    check_injector_collisions,
    check_object_references,
    check_template_references,
    check_workflow_references,
    check_workflow_shape,
    check_operator_playbooks,
    check_playbook_variables_documented,
    check_docs,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_controller_content(check):
    problems = check(CONTENT)
    assert not problems, "\n".join(problems)


def test_content_has_every_list():
    assert set(MODULES) <= set(CONTENT), f"controller/ lacks {sorted(set(MODULES) - set(CONTENT))}"


# --- every check can fail ---------------------------------------------------------------------


def find_template(content, name):
    return next(item for item in content["controller_templates"] if item["name"] == name)


def find_question(content, name, variable):
    return next(q for q in find_template(content, name)["survey_spec"]["spec"] if q["variable"] == variable)


def find_ctype(content, name):
    return next(item for item in content["controller_credential_types"] if item["name"] == name)


FABRIC = "gpufleet fabric acceptance"
FLAGSHIP = "gpufleet deploy flagship 80x5090"
DRAIN = "gpufleet drain a replica"
API_KEY = "gpufleet inference API key"
REPOSITORIES = "gpufleet repository credentials"

BREAKAGES = {
    # awx.awx's options, and what the apply playbook passes.
    "unknown job_template option": (
        check_module_options,
        lambda c: find_template(c, FLAGSHIP).update(ask_variables=True),
    ),
    "unknown workflow node suboption": (
        check_module_options,
        lambda c: c["controller_workflows"][0]["workflow_nodes"][0].update(success=[]),
    ),
    "option value outside its choices": (
        check_module_options,
        lambda c: find_template(c, FLAGSHIP).update(job_type="dry"),
    ),
    "option value of the wrong type": (
        check_module_options,
        lambda c: find_template(c, FLAGSHIP).update(ask_limit_on_launch="false"),
    ),
    "key the apply drops": (check_apply_passes_every_key, lambda c: find_template(c, FLAGSHIP).update(forks=5)),
    # Survey rules.
    "survey without description": (check_surveys, lambda c: find_template(c, FABRIC)["survey_spec"].pop("description")),
    "survey without name": (check_surveys, lambda c: find_template(c, FABRIC)["survey_spec"].pop("name")),
    "question without required": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").pop("required"),
    ),
    "unknown question type": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_duration").update(type="number"),
    ),
    "variable asked twice": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_streams").update(variable="fabric_validate_duration"),
    ),
    "multiplechoice default not a choice": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(default="mesh"),
    ),
    "multiplechoice without choices": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").pop("choices"),
    ),
    "multiselect default outside the choices": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(type="multiselect", default="circle\nmesh"),
    ),
    "multiselect default with an empty line": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(type="multiselect", default="circle\n\nring"),
    ),
    "integer default above max": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_streams").update(default=129),
    ),
    "integer default of the wrong type": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_streams").update(default="4"),
    ),
    "float default that is an int": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_min_line_fraction").update(default=1),
    ),
    "float limit that is a float": (
        check_surveys,
        lambda c: find_question(c, FABRIC, "fabric_validate_min_line_fraction").update(max=1.5),
    ),
    "text default longer than max": (
        check_surveys,
        lambda c: find_question(c, FLAGSHIP, "nvidia_driver_branch").update(default="58000"),
    ),
    "optional text without default": (
        check_surveys,
        lambda c: find_question(c, DRAIN, "reason").update(required=False),
    ),
    "password question": (check_surveys, lambda c: find_question(c, DRAIN, "reason").update(type="password")),
    # Survey variables against the playbooks.
    "variable in no argument spec": (
        check_survey_variables,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(variable="fabric_mode"),
    ),
    "variable of a role the playbook does not run": (
        check_survey_variables,
        lambda c: find_question(c, DRAIN, "reason").update(variable="vllm_model_path"),
    ),
    "default against the inventory": (
        check_survey_variables,
        lambda c: find_question(c, FLAGSHIP, "vllm_model_path").update(default="/srv/model"),
    ),
    "default against the role default": (
        check_survey_variables,
        lambda c: find_question(c, FABRIC, "fabric_validate_duration").update(default=20),
    ),
    "choice the role refuses": (
        check_survey_variables,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(choices=["circle", "mesh"]),
    ),
    "boolean role variable": (
        check_survey_variables,
        lambda c: find_question(c, FABRIC, "fabric_validate_mode").update(
            variable="fabric_validate_jumbo_check", choices=["true"], default="true"
        ),
    ),
    "secret variable asked": (
        check_survey_variables,
        lambda c: find_question(c, FLAGSHIP, "vllm_model_path").update(variable="vllm_hf_token", default=""),
    ),
    # Credential types.
    "ANSIBLE_ environment name": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["injectors"].update(env={"ANSIBLE_API_KEY": "{{ api_key }}"}),
    ),
    "blocklisted environment name": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["injectors"].update(env={"JOB_ID": "{{ api_key }}"}),
    ),
    "injector of an undeclared field": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["injectors"]["extra_vars"].update(vllm_api_key="{{ apikey }}"),
    ),
    "field without its type": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["inputs"]["fields"][0].pop("type"),
    ),
    "secret field not secret": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["inputs"]["fields"][0].pop("secret"),
    ),
    "optional field over a non-empty default": (
        check_credential_types,
        lambda c: find_ctype(c, REPOSITORIES)["inputs"]["required"].remove("nvidia_container_toolkit_repo_url"),
    ),
    "injected variable in no argument spec": (
        check_credential_types,
        lambda c: find_ctype(c, API_KEY)["injectors"]["extra_vars"].update(vllm_key="{{ api_key }}"),
    ),
    "collision across credential types": (
        check_injector_collisions,
        lambda c: find_ctype(c, "gpufleet Hugging Face token")["injectors"]["extra_vars"].update(
            vllm_api_key="{{ hf_token }}"
        ),
    ),
    # References and shape.
    "missing inventory source file": (
        check_object_references,
        lambda c: c["controller_inventory_sources"][0].update(source_path="inventories/flagship/topology.yml"),
    ),
    "unknown credential type": (
        check_object_references,
        lambda c: c["controller_credentials"][2].update(credential_type="Hugging Face"),
    ),
    "missing playbook": (
        check_template_references,
        lambda c: find_template(c, FABRIC).update(playbook="playbooks/validate-fabric.yml"),
    ),
    "missing credential": (
        check_template_references,
        lambda c: find_template(c, FABRIC)["credentials"].append("gpufleet vault"),
    ),
    "missing execution environment": (
        check_template_references,
        lambda c: find_template(c, FABRIC).update(execution_environment="default EE"),
    ),
    "missing project": (check_template_references, lambda c: find_template(c, FABRIC).update(project="gpufleet")),
    "unknown job tag": (
        check_template_references,
        lambda c: find_template(c, "gpufleet GPU acceptance").update(job_tags="gpu_accept"),
    ),
    "credential with inputs in the repository": (
        check_object_references,
        lambda c: c["controller_credentials"][1].update(inputs={"api_key": "x"}),
    ),
    "workflow node of an unknown template": (
        check_workflow_references,
        lambda c: c["controller_workflows"][0]["workflow_nodes"][2]["unified_job_template"].update(
            name="gpufleet validate"
        ),
    ),
    "node prompt the template does not allow": (
        check_workflow_references,
        lambda c: find_template(c, FLAGSHIP).pop("ask_skip_tags_on_launch"),
    ),
    "workflow node that hands on its artifacts": (
        check_workflow_shape,
        lambda c: c["controller_workflows"][0]["workflow_nodes"][1].pop("skip_tags"),
    ),
    "workflow without its order": (
        check_workflow_shape,
        lambda c: c["controller_workflows"][0]["workflow_nodes"][0]["related"].update(
            success_nodes=[{"identifier": "validate"}]
        ),
    ),
    "operator playbook without a template": (
        check_operator_playbooks,
        lambda c: c["controller_templates"].remove(find_template(c, "gpufleet rolling restart")),
    ),
    "undocumented template": (check_docs, lambda c: find_template(c, FABRIC).update(name="gpufleet fabric check")),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_checks_catch_broken_content(breakage):
    check, breaking = BREAKAGES[breakage]
    assert not check(CONTENT), f"{check.__name__} fails on the real content"
    broken = copy.deepcopy(CONTENT)
    breaking(broken)
    assert check(broken), f"{check.__name__} did not notice: {breakage}"


def test_undocumented_playbook_variable_is_caught(monkeypatch):
    monkeypatch.setitem(PLAYBOOK_VARIABLES, "playbooks/rolling_restart.yml", {"replicas_timeout": {"type": "str"}})
    assert check_playbook_variables_documented(CONTENT)


# --- the apply playbook's checks, without a controller ---------------------------------------


def test_apply_checks_inputs_before_any_change(tmp_path):
    """controller_apply.yml reads the content and refuses credential inputs that lack a required
    field before its first awx.awx task, naming the field and never the value."""
    sentinel = "SENTINEL-secret-0123456789"
    secrets = tmp_path / "secrets.yml"
    secrets.write_text(
        yaml.safe_dump(
            {
                "gpufleet_controller_credential_inputs": {
                    "gpufleet hosts SSH": {"username": "root", "ssh_key_data": sentinel},
                    "gpufleet inference API key": {"api_key": sentinel},
                    "gpufleet Hugging Face token": {"hf_token": sentinel},
                    "gpufleet repository credentials": {"cuda_repository_url": f"https://u:{sentinel}@mirror/"},
                }
            }
        )
    )
    playbook = Path(sys.executable).parent / "ansible-playbook"
    environment = {
        "PATH": f"{playbook.parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
        # Nothing listens there: a task that reached the controller would fail differently.
        "CONTROLLER_HOST": "https://127.0.0.1:9",
    }
    result = subprocess.run(
        [str(playbook), str(APPLY), "-e", f"@{secrets}"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert (
        "required fields without a value: nvidia_container_toolkit_repo_url, nvidia_container_toolkit_key_url" in output
    ), output
    assert "Apply the credential types" not in output, output
    assert sentinel not in output, "a secret reached the output"


def task_files():
    return (
        sorted(REPO.glob("roles/*/tasks/*.yml"))
        + sorted(REPO.glob("roles/*/handlers/*.yml"))
        + sorted(REPO.glob("playbooks/*.yml"))
    )


def all_tasks(path):
    data = load_yaml(path) or []
    for item in data if isinstance(data, list) else []:
        # A playbook's plays hold their tasks; a task file is the tasks.
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            yield from walk_tasks(item.get(section))
        if not any(key in item for key in ("hosts", "import_playbook", "ansible.builtin.import_playbook")):
            yield from walk_tasks([item])


def artifact_keys(path):
    """Every set_stats data key of a task or playbook file."""
    for task in all_tasks(path):
        args = task.get("ansible.builtin.set_stats") or task.get("set_stats")
        if isinstance(args, dict) and isinstance(args.get("data"), dict):
            yield from args["data"]


def variables_read_or_set():
    """Names a role or playbook takes or sets: argument spec options, defaults, vars, set_fact
    keys and registered results."""
    names = set()
    for role_dir in sorted((REPO / "roles").iterdir()):
        for spec in argument_specs(role_dir.name).values():
            names |= set(spec.get("options") or {})
        names |= set(role_defaults(role_dir.name) or {})
        vars_file = role_dir / "vars" / "main.yml"
        names |= set(load_yaml(vars_file) or {}) if vars_file.exists() else set()
    for path in task_files():
        for task in all_tasks(path):
            facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
            if isinstance(facts, dict):
                names |= set(facts) - {"cacheable"}
            if task.get("register"):
                names.add(task["register"])
    return names


def test_no_artifact_is_named_as_a_variable():
    """AWX hands a job's set_stats to the later jobs of a workflow as extra vars, which beat every
    variable of the same name: an artifact named as a fact or a role variable would replace it in
    the next job (fabric_validate's verdict read such a fact until 2026-12)."""
    artifacts = {key: path.relative_to(REPO) for path in task_files() for key in artifact_keys(path)}
    assert {"fabric_acceptance", "vllm_capacity_plans", "frontdoor_status"} <= set(artifacts), sorted(artifacts)
    clashes = {key: str(path) for key, path in artifacts.items() if key in variables_read_or_set()}
    assert not clashes, f"set_stats keys that are also variables (rename the artifact): {clashes}"
