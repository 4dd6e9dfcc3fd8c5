# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one validation and quoting helper for values rendered into files other programs parse."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _render


@pytest.mark.parametrize("value", ["x\nExecStartPre=+/bin/sh -c id", "a\rb", "tab\there", "nul\x00", "esc\x1b[0m"])
def test_control_characters_are_refused_naming_the_variable(value):
    with pytest.raises(ValueError) as excinfo:
        _render.check_text(value, "llama_server_extra_args[1]")
    assert "llama_server_extra_args[1]=" in str(excinfo.value)
    assert "control character" in str(excinfo.value)


@pytest.mark.parametrize("value", [None, True, {"a": 1}, ["a"]])
def test_non_scalars_are_refused(value):
    with pytest.raises(ValueError, match="must be a string or a number"):
        _render.check_text(value, "v")


def test_env_file_quotes_values_and_sorts_names():
    lines = _render.env_file({"B": 'say "hi"', "A": 1, "C": "back\\slash"}, "vllm_env")
    assert lines == ['A="1"', 'B="say \\"hi\\""', 'C="back\\\\slash"']


# "A\n": Python's $ matches before a final newline, so the name check must anchor with \Z.
@pytest.mark.parametrize("name", ["1ABC", "BAD NAME", "A-B", "", 3, "A\n", "A\nB"])
def test_env_names_must_be_names(name):
    with pytest.raises(ValueError, match="is not an environment variable name"):
        _render.env_line(name, "1", "vllm_env")


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (["ip", "fabric_validate_address", "10.0.0.300"], "fabric_validate_address='10.0.0.300' is not an IP address"),
        (["ip", "a", "host.example"], "a='host.example' is not an IP address"),
        (["ip", "a", "10.0.0.1\n"], "a='10.0.0.1\\n' is not an IP address"),
        (["port", "fabric_validate_port", 0], "fabric_validate_port=0 is not a TCP port"),
        (["port", "fabric_validate_port", 70000], "fabric_validate_port=70000 is not a TCP port"),
        (["port", "p", "80\n"], "p='80\\n' is not a TCP port"),
        (["port", "p", True], "p=True is not a TCP port"),
        (["file_name", "fabric_validate_report_name", "a/b"], "fabric_validate_report_name='a/b' is not a file name"),
        (["file_name", "n", ".."], "n='..' is not a file name"),
        (["file_name", "n", ""], "n='' is not a file name"),
        (["text", "t", "x\ny"], "t='x\\ny' contains a control character"),
        (["text", "t", ["x"]], "t=['x'] must be a string, not a list"),
        (
            ["port", "vllm_master_port", 22, {"min": 1024, "why": "vLLM runs unprivileged"}],
            "vllm_master_port=22 is not a TCP port of 1024..65535 (vLLM runs unprivileged)",
        ),
        (["int", "n", -1, {"min": 1}], "n=-1 must be a whole number from 1 to 2147483647"),
        (["int", "n", "", {"min": 1}], "n='' must be a whole number from 1 to 2147483647"),
        (["int", "n", 1.5], "n=1.5 must be a whole number from 0"),
        (["int", "n", True], "n=True must be a whole number"),
        (
            ["int", "n", 10**12, {"max": 10**6, "why": "a million"}],
            "n=1000000000000 must be a whole number from 0 to 1000000 (a million)",
        ),
        (
            ["seconds", "vllm_ready_timeout", 0],
            "vllm_ready_timeout=0 must be a number of seconds above 0 and at most 604800",
        ),
        (["seconds", "s", -5], "s=-5 must be a number of seconds above 0"),
        (["seconds", "s", "nan"], "s='nan' must be a number of seconds above 0"),
        (["seconds", "s", "inf"], "s='inf' must be a number of seconds above 0"),
        (["seconds", "s", "soon"], "s='soon' must be a number of seconds above 0"),
        (["seconds", "s", 61, {"max": 60}], "s=61 must be a number of seconds above 0 and at most 60"),
        (["abs_path", "vllm_venv_root", "opt/venvs"], "vllm_venv_root='opt/venvs' must be an absolute path"),
        (
            ["abs_path", "d", "/etc/gpufleet\nExecStartPre=+/bin/sh"],
            "d='/etc/gpufleet\\nExecStartPre=+/bin/sh' must be an absolute path",
        ),
        (["abs_path", "d", "/srv/../etc"], "d='/srv/../etc' must be an absolute path"),
        (["abs_path", "d", "/srv/a b"], "d='/srv/a b' must be an absolute path"),
        (["user", "vllm_user", "root\nExecStartPre=+/bin/sh -c 'id > /tmp/pwn'"], 'vllm_user="root\\nExecStartPre'),
        (["user", "u", "Root"], "u='Root' is not a user name"),
        (["user", "u", "-x"], "u='-x' is not a user name"),
        (
            ["network", "vllm_allowed_clients[0]", "10.0.0.1/8"],
            "vllm_allowed_clients[0]='10.0.0.1/8' has host bits set: write the network as 10.0.0.0/8 "
            "(or one address as 10.0.0.1/32)",
        ),
        (["network", "n", "10.0.0.0/33"], "n='10.0.0.0/33' is not an IP address or network"),
        (
            ["network", "n", "fd00::1/64"],
            "n='fd00::1/64' has host bits set: write the network as fd00::/64 (or one address as fd00::1/128)",
        ),
        (["url", "monitoring_url", "ftp://x"], "monitoring_url='ftp://x' is not a URL of scheme http:// or https://"),
        (["url", "u", "https://"], "u='https://' is not a URL"),
        (["url", "u", "https://a b"], "u='https://a b' contains a space"),
        (
            ["url", "u", "ftp://user:hunter2@x/m.tar", {"schemes": ["https"]}],
            "u='ftp://user:********@x/m.tar' is not a URL of scheme https://",
        ),
        (["regex", "p", "Xid ("], "p='Xid (' is not a regular expression (missing ), unterminated subpattern"),
        (["regex", "p", 3], "p=3 must be a regular expression as a string"),
        (["serial", "gpufleet_serial", "abc"], "gpufleet_serial='abc' is not a batch size"),
        (["serial", "gpufleet_serial", 0], "gpufleet_serial=0 is not a batch size"),
        (["serial", "gpufleet_serial", -1], "gpufleet_serial=-1 is not a batch size"),
        (["serial", "s", "0%"], "s='0%' is not a batch size"),
        (["serial", "s", "150%"], "s='150%' is not a batch size"),
        (["serial", "s", [1, "x"]], "s=[1, 'x'] is not a batch size"),
        (["serial", "s", []], "s=[] is not a batch size"),
    ],
)
def test_input_problems_name_the_variable_and_the_value(check, message):
    problems = _render.input_problems([["port", "ok_port", 5201], check, ["ip", "ok_ip", "fd00::1"]])
    assert len(problems) == 1 and problems[0].startswith(message)


def test_input_problems_of_good_values_are_empty():
    checks = [
        ["ip", "a", "10.0.0.1"], ["port", "p", "65535"], ["file_name", "n", "fabric-report"], ["text", "t", "x"],
        ["port", "p", 1024, {"min": 1024}], ["int", "n", "0"], ["int", "n", 7, {"min": 1, "max": 7}],
        ["seconds", "s", 0.5], ["seconds", "s", "600"], ["abs_path", "d", "/opt/gpufleet-vllm"],
        ["user", "u", "gpufleet-vllm"], ["user", "u", "_svc"], ["network", "n", "10.0.0.0/8"],
        ["network", "n", "10.0.0.1"], ["network", "n", "fd00::/64"], ["url", "u", "http://127.0.0.1:9090"],
        ["url", "u", "file:///srv/m.tar", {"schemes": ["file"]}], ["serial", "s", 1], ["serial", "s", "20%"],
        ["serial", "s", "100%"], ["serial", "s", [2, "50%", "100%"]], ["serial", "s", "3"],
        ["regex", "r", "NVRM: Xid \\(PCI:"],
    ]  # fmt: skip
    assert _render.input_problems(checks) == []


def test_a_refusal_never_prints_a_url_password():
    [problem] = _render.input_problems([["abs_path", "vllm_model_url", "https://user:hunter2@h.example/m.tar"]])
    assert "hunter2" not in problem and "user:********@h.example" in problem


@pytest.mark.parametrize("check", [["nope", "a", "x"], ["ip", "a"], "ip", ["int", "a", 1, "min=1"]])
def test_input_problems_refuse_a_malformed_check(check):
    with pytest.raises(ValueError, match="each check is \\[kind, name, value\\]"):
        _render.input_problems([check])


def test_env_file_never_shows_a_secret_value_it_refuses():
    with pytest.raises(ValueError) as excinfo:
        _render.env_file({"WANDB_API_KEY": "hunter2\nExecStartPre=+/bin/sh"}, "vllm_env")
    message = str(excinfo.value)
    assert "vllm_env.WANDB_API_KEY=<a secret of 29 characters, not shown> contains the control character" in message
    assert "hunter2" not in message


def test_env_file_parts_split_secret_names_from_the_rest():
    env = {"OMP_NUM_THREADS": "4", "HF_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "k", "PGPASSWORD": "p", "TMPDIR": "/run"}
    assert _render.env_file(env, "vllm_env", "public") == ['OMP_NUM_THREADS="4"', 'TMPDIR="/run"']
    secret = ['AWS_SECRET_ACCESS_KEY="k"', 'HF_TOKEN="t"', 'PGPASSWORD="p"']
    assert _render.env_file(env, "vllm_env", "secret") == secret
    assert _render.env_file(env, "vllm_env") == sorted(
        _render.env_file(env, "vllm_env", "public") + _render.env_file(env, "vllm_env", "secret")
    )
    # Every entry is checked, also those of the part that is not kept.
    with pytest.raises(ValueError, match=r"vllm_env\.HF_TOKEN"):
        _render.env_file({"HF_TOKEN": "a\nb"}, "vllm_env", "public")
    with pytest.raises(ValueError, match="part must be one of all, public, secret"):
        _render.env_file(env, "vllm_env", "secrets")
