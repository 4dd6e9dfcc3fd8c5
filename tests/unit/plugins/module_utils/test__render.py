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
    ],
)
def test_input_problems_name_the_variable_and_the_value(check, message):
    problems = _render.input_problems([["port", "ok_port", 5201], check, ["ip", "ok_ip", "fd00::1"]])
    assert len(problems) == 1 and problems[0].startswith(message)


def test_input_problems_of_good_values_are_empty():
    checks = [["ip", "a", "10.0.0.1"], ["port", "p", "65535"], ["file_name", "n", "fabric-report"], ["text", "t", "x"]]
    assert _render.input_problems(checks) == []


@pytest.mark.parametrize("check", [["url", "a", "x"], ["ip", "a"], "ip"])
def test_input_problems_refuse_a_malformed_check(check):
    with pytest.raises(ValueError, match="each check is \\[kind, name, value\\]"):
        _render.input_problems([check])
