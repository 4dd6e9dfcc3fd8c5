# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/controller_jobs.py launches a job template through ansible-runner as a controller
would: these run real ansible-runner jobs against the local machine with a small template."""

import sys
import textwrap

import pytest
import yaml
from script_loader import load_script

jobs = load_script("scripts/controller_jobs.py", "gpufleet_controller_jobs_script")
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
    inventory = tmp_path / "hosts"
    inventory.write_text(f"local ansible_connection=local ansible_python_interpreter={sys.executable}\n")

    def launch(name, **kwargs):
        kwargs.setdefault("inputs", {"example": {"token": SECRET}})
        return jobs.launch(
            name, inventory, project_dir=project, content_dir=content, data_dir=tmp_path / "job", **kwargs
        )

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
