# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/controller_jobs.py launches a job template through ansible-runner as a controller
would: these run real ansible-runner jobs against the local machine with a small template."""

import sys
import textwrap

import pytest
import yaml
from script_loader import load_script

jobs = load_script("scripts/controller_jobs.py")
SECRET = "s3cret-token-value"

CONTENT = {
    "controller_credential_types": [
        {
            "name": "Example token",
            "kind": "cloud",
            "inputs": {
                "fields": [
                    {"id": "token", "type": "string", "secret": True},
                    {"id": "realm", "type": "string"},
                ],
                "required": ["token"],
            },
            "injectors": {
                "env": {"EXAMPLE_TOKEN": "{{ token }}", "EXAMPLE_TOKEN_FILE": "{{ tower.filename }}"},
                "file": {"template": "token={{ token }}\n"},
                "extra_vars": {"example_token_length": "{{ token | length }}", "example_realm": "{{ realm }}"},
            },
        }
    ],
    "controller_credentials": [
        {"name": "example", "credential_type": "Example token"},
        {"name": "ssh", "credential_type": "Machine"},
    ],
    "controller_templates": [
        {
            "name": "example job",
            "playbook": "playbooks/job.yml",
            "job_type": "run",
            "diff_mode": True,
            "credentials": ["example", "ssh"],
            "extra_vars": {"from_template": "t", "overridden": "template"},
            "ask_variables_on_launch": True,
            "survey_enabled": True,
            "survey_spec": {
                "name": "example",
                "description": "example",
                "spec": [
                    {"type": "integer", "variable": "count", "question_name": "n", "default": "3", "required": True},
                    {
                        "type": "multiselect",
                        "variable": "picked",
                        "question_name": "p",
                        "choices": ["a", "b", "c"],
                        "default": "a\nc",
                    },
                    {"type": "text", "variable": "overridden", "question_name": "o", "default": "survey"},
                ],
            },
        },
        {"name": "check job", "playbook": "playbooks/job.yml", "job_type": "check", "credentials": ["example"]},
        {"name": "no launch vars", "playbook": "playbooks/job.yml", "credentials": ["example"]},
        {"name": "failing job", "playbook": "playbooks/fail.yml"},
        {"name": "leaky job", "playbook": "playbooks/leak.yml", "credentials": ["example"]},
        {"name": "stats job", "playbook": "playbooks/stats.yml"},
        {"name": "reads job", "playbook": "playbooks/reads.yml", "extra_vars": {"wf_var": "template"}},
    ],
    "controller_workflows": [
        {
            "name": "example flow",
            "ask_variables_on_launch": True,
            "survey_enabled": True,
            "survey_spec": {
                "name": "flow",
                "description": "flow",
                "spec": [{"type": "text", "variable": "wf_var", "question_name": "w", "default": "workflow"}],
            },
            "workflow_nodes": [
                {
                    "identifier": "first",
                    "unified_job_template": {"name": "stats job", "type": "job_template"},
                    "related": {"success_nodes": [{"identifier": "second"}]},
                },
                {"identifier": "second", "unified_job_template": {"name": "reads job", "type": "job_template"}},
            ],
        },
        {
            "name": "failing flow",
            "workflow_nodes": [
                {
                    "identifier": "bad",
                    "unified_job_template": {"name": "failing job", "type": "job_template"},
                    "related": {
                        "success_nodes": [{"identifier": "never"}],
                        "failure_nodes": [{"identifier": "recover"}],
                    },
                },
                {"identifier": "never", "unified_job_template": {"name": "stats job", "type": "job_template"}},
                {"identifier": "recover", "unified_job_template": {"name": "reads job", "type": "job_template"}},
            ],
        },
        {
            "name": "unhandled flow",
            "workflow_nodes": [
                {"identifier": "bad", "unified_job_template": {"name": "failing job", "type": "job_template"}}
            ],
        },
        {
            "name": "prompting flow",
            "workflow_nodes": [
                {
                    "identifier": "tagged",
                    "unified_job_template": {"name": "stats job", "type": "job_template"},
                    "skip_tags": "x",
                }
            ],
        },
    ],
}

JOB = """\
- name: Report what the job was given
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the injected file
      ansible.builtin.slurp:
        src: "{{ lookup('ansible.builtin.env', 'EXAMPLE_TOKEN_FILE') }}"
      register: token_file
    - name: Hand the values to the controller
      ansible.builtin.set_stats:
        data:
          count: "{{ count | default('none') }}"
          count_is_int: "{{ count is defined and count is number }}"
          picked: "{{ picked | default([]) }}"
          from_template: "{{ from_template | default('none') }}"
          overridden: "{{ overridden | default('none') }}"
          token_length: "{{ example_token_length }}"
          realm: "{{ example_realm }}"
          env_length: "{{ lookup('ansible.builtin.env', 'EXAMPLE_TOKEN') | length }}"
          file_ok: "{{ (token_file.content | b64decode) == 'token=' ~ lookup('ansible.builtin.env', 'EXAMPLE_TOKEN') }}"
          check_mode: "{{ ansible_check_mode }}"
          diff_mode: "{{ ansible_diff_mode }}"
"""


@pytest.fixture(name="lab")
def fixture_lab(tmp_path):
    content = tmp_path / "controller"
    content.mkdir()
    (content / "all.yml").write_text(yaml.safe_dump(CONTENT))
    project = tmp_path / "project"
    (project / "playbooks").mkdir(parents=True)
    (project / "playbooks" / "job.yml").write_text(JOB)
    (project / "playbooks" / "fail.yml").write_text(
        textwrap.dedent("""\
        - name: Fail
          hosts: all
          gather_facts: false
          tasks:
            - name: Fail on purpose
              ansible.builtin.fail:
                msg: refused
        """)
    )
    (project / "playbooks" / "leak.yml").write_text(
        textwrap.dedent("""\
        - name: Leak
          hosts: all
          gather_facts: false
          tasks:
            - name: Print the token
              ansible.builtin.debug:
                msg: "{{ lookup('ansible.builtin.env', 'EXAMPLE_TOKEN') }}"
        """)
    )
    (project / "playbooks" / "stats.yml").write_text(
        textwrap.dedent("""\
        - name: Hand artifacts down
          hosts: all
          gather_facts: false
          tasks:
            - name: Set the artifacts
              ansible.builtin.set_stats:
                data:
                  handed: from-first
                  beaten: artifact
        """)
    )
    (project / "playbooks" / "reads.yml").write_text(
        textwrap.dedent("""\
        - name: Read what was handed down
          hosts: all
          gather_facts: false
          tasks:
            - name: Report the variables
              ansible.builtin.set_stats:
                data:
                  saw_handed: "{{ handed | default('none') }}"
                  saw_wf_var: "{{ wf_var }}"
                  saw_beaten: "{{ beaten | default('none') }}"
        """)
    )
    inventory = tmp_path / "hosts"
    inventory.write_text(f"local ansible_connection=local ansible_python_interpreter={sys.executable}\n")

    def launch(name, **kwargs):
        kwargs.setdefault("inputs", {"example": {"token": SECRET}})
        return jobs.launch(
            name, inventory, project_dir=project, content_dir=content, data_dir=tmp_path / "job", **kwargs
        )

    def workflow(name, **kwargs):
        return jobs.launch_workflow(name, inventory, project_dir=project, content_dir=content, **kwargs)

    launch.workflow = workflow
    return launch


def test_a_launch_with_the_survey_defaults(lab):
    job = lab("example job", extra_vars={"overridden": "launch"})
    assert (job.status, job.rc) == ("successful", 0), job.stdout
    assert job.stats == {
        "count": 3,
        "count_is_int": True,
        "picked": ["a", "c"],
        "from_template": "t",
        "overridden": "launch",
        # A controller renders injected extra_vars to strings.
        "token_length": str(len(SECRET)),
        # An optional field left empty renders as an empty string; the built-in ssh one is skipped.
        "realm": "",
        "env_length": len(SECRET),
        "file_ok": True,
        "check_mode": False,
        "diff_mode": True,
    }


def test_the_survey_default_wins_over_the_template_extra_vars(lab):
    assert lab("example job").stats["overridden"] == "survey"


def test_job_type_check_runs_in_check_mode(lab):
    job = lab("check job")
    assert job.status == "successful", job.stdout
    assert (job.stats["check_mode"], job.stats["diff_mode"]) == (True, False)


def test_inputs_are_written_for_the_owner_only(lab, tmp_path):
    lab("check job")
    for name in ("extravars", "envvars", "cmdline"):
        assert (tmp_path / "job" / "env" / name).stat().st_mode & 0o077 == 0, name
    (cred,) = (tmp_path / "job" / "env").glob("*.cred")
    assert cred.stat().st_mode & 0o077 == 0


def test_a_failing_playbook_is_a_failed_job(lab):
    job = lab("failing job")
    assert (job.status, job.rc) == ("failed", 2)


def test_a_secret_in_the_output_is_refused(lab):
    with pytest.raises(jobs.JobError, match="secret appears in the job output"):
        lab("leaky job")


def test_a_missing_credential_input_names_the_field(lab):
    with pytest.raises(
        jobs.JobError, match=r"credential 'example': no value for token; give --input example.token=VALUE"
    ):
        lab("check job", inputs={})


def test_launch_vars_need_ask_variables_on_launch(lab):
    with pytest.raises(jobs.JobError, match="ask_variables_on_launch"):
        lab("no launch vars", extra_vars={"x": 1})


def test_an_unknown_template_lists_the_known_ones(lab):
    with pytest.raises(jobs.JobError, match="no 'nope'; known: check job, example job"):
        lab("nope")


def test_survey_answers_replace_the_defaults(lab):
    job = lab("example job", answers={"count": "5", "picked": "b", "overridden": "answer"})
    assert (job.stats["count"], job.stats["picked"], job.stats["overridden"]) == (5, ["b"], "answer")


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"nope": "1"}, "no survey question for nope"),
        ({"picked": "z"}, r"picked: \['z'\] not among"),
        ({"count": ""}, "'count' is required"),
    ],
)
def test_a_bad_survey_answer_is_refused(lab, answers, message):
    with pytest.raises(jobs.JobError, match=message):
        lab("example job", answers=answers)


def test_the_recap_counts_every_host(lab):
    assert lab("example job").changed == {"local": 0}


def test_a_skipped_credential_is_neither_required_nor_injected(lab):
    # As playbooks/controller_apply.yml's gpufleet_controller_skip_credentials: not attached, so the
    # leaky job has no secret to show and needs no input.
    job = lab("leaky job", inputs={}, skip_credentials=("example",))
    assert (job.status, job.rc) == ("successful", 0), job.stdout


def test_skipping_an_unknown_credential_is_refused(lab):
    message = "skipped credential 'nope' is not in controller_credentials; known: example"
    with pytest.raises(jobs.JobError, match=message):
        lab("check job", skip_credentials=("nope",))


def test_a_workflow_hands_its_vars_and_the_artifacts_down(lab):
    flow = lab.workflow("example flow", extra_vars={"beaten": "launch"})
    assert flow.status == "successful"
    assert list(flow.jobs) == ["first", "second"]
    # The workflow's survey default beats the template's extra_vars; an ancestor's artifact beats
    # even the workflow's launch vars (AWX's docs/workflow.md).
    assert flow.jobs["second"].stats == {"saw_handed": "from-first", "saw_wf_var": "workflow", "saw_beaten": "artifact"}


def test_a_failed_node_takes_its_failure_edge(lab):
    flow = lab.workflow("failing flow")
    assert list(flow.jobs) == ["bad", "recover"]
    assert (flow.jobs["bad"].status, flow.jobs["recover"].status) == ("failed", "successful")
    # The failure was handled by a failure edge.
    assert flow.status == "successful"
    assert flow.jobs["recover"].stats["saw_handed"] == "none"


def test_a_failed_node_without_a_failure_edge_fails_the_workflow(lab):
    assert lab.workflow("unhandled flow").status == "failed"


def test_a_node_prompt_the_template_does_not_ask_for_is_refused(lab):
    with pytest.raises(
        jobs.JobError, match="node 'tagged' sets skip_tags, and 'stats job' lacks ask_skip_tags_on_launch"
    ):
        lab.workflow("prompting flow")


def test_workflow_launch_vars_need_ask_variables_on_launch(lab):
    with pytest.raises(jobs.JobError, match="failing flow: extra vars at launch need ask_variables_on_launch"):
        lab.workflow("failing flow", extra_vars={"x": 1})


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"answers": {"overridden": "{{ lookup('ansible.builtin.pipe', 'touch MARKER') }}"}}, "the survey answer"),
        (
            {"extra_vars": {"overridden": "{% for x in [1] %}{{ lookup('pipe', 'touch MARKER') }}{% endfor %}"}},
            "the launch variable",
        ),
        ({"extra_vars": {"nested": {"list": ["ok", "{# a comment #}"]}}}, "the launch variable"),
    ],
)
def test_jinja_in_what_the_operator_gives_at_launch_is_refused_before_anything_runs(lab, tmp_path, kwargs, kind):
    """A controller with its default ALLOW_JINJA_IN_EXTRA_VARS=template refuses it: an answer like
    {{ lookup('pipe', ...) }} would otherwise run a command on the controller."""
    marker = tmp_path / "ran"
    given = {key: {var: _replace(value, marker) for var, value in values.items()} for key, values in kwargs.items()}
    with pytest.raises(jobs.JobError, match=f"example job: {kind} .* holds Jinja .*give the plain value"):
        lab("example job", **given)
    assert not marker.exists()
    assert not (tmp_path / "job").exists()


def _replace(value, marker):
    if isinstance(value, str):
        return value.replace("MARKER", str(marker))
    return value


def test_jinja_in_a_workflow_s_launch_answers_is_refused(lab):
    with pytest.raises(jobs.JobError, match=r"the launch variable wf_var=.* holds Jinja"):
        lab.workflow("example flow", extra_vars={"wf_var": "{{ 1 + 1 }}"})
