# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the ExecStart= quoting of module_utils/_render.py and its systemd_exec_line filter.

The expected lines follow systemd.service(5), "Command lines": words in double quotes are
C-unescaped, "%" starts a specifier ("%%" is a literal one), "$" a variable ("$$" a literal one).
"""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import systemd_exec_line as exec_filter
from ansible_collections.gpufleet.inference.plugins.module_utils._render import exec_line, exec_word


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ("two words", '"two words"'),
        ('CUDA0" --foo "', '"CUDA0\\" --foo \\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("%h/models", '"%%h/models"'),
        ("$HOME ${USER}", '"$$HOME $${USER}"'),
        (";", '";"'),
        ("it's", '"it\'s"'),
        (8080, '"8080"'),
        ("", '""'),
    ],
)
def test_exec_word_quotes_every_special_character(value, quoted):
    assert exec_word(value, "x") == quoted


@pytest.mark.parametrize("value", ["x\nExecStartPre=+/bin/sh -c id", "a\rb", "tab\there", "nul\x00", "esc\x1b[0m"])
def test_exec_word_refuses_control_characters(value):
    with pytest.raises(ValueError, match=r"llama_server_extra_args\[3\]=.* contains the control character"):
        exec_word(value, "llama_server_extra_args[3]")


@pytest.mark.parametrize("value", [None, True, ["a"], {"a": 1}])
def test_exec_word_refuses_what_is_not_one_value(value):
    with pytest.raises(ValueError, match="must be a string or a number"):
        exec_word(value, "v")


def test_exec_line_quotes_the_program_and_each_argument():
    line = exec_line(["/opt/llama.cpp/abc/bin/llama-server", "--alias", "my model", "--port", 8080], "ExecStart")
    assert line == '"/opt/llama.cpp/abc/bin/llama-server" "--alias" "my model" "--port" "8080"'


@pytest.mark.parametrize("program", ["llama-server", "-/bin/true", "+/bin/sh", ""])
def test_exec_line_needs_an_absolute_program(program):
    with pytest.raises(ValueError, match=r"ExecStart\[0\]=.* must be the absolute path of the program"):
        exec_line([program, "--help"], "ExecStart")


@pytest.mark.parametrize("argv", [[], None, "/bin/true"])
def test_exec_line_needs_a_list(argv):
    with pytest.raises(ValueError, match="must be a non-empty list"):
        exec_line(argv, "ExecStart")


def test_exec_line_names_the_bad_item():
    with pytest.raises(ValueError, match=r"^llama_rpc_worker ExecStart\[2\]='a\\nb' contains"):
        exec_line(["/bin/rpc", "--host", "a\nb"], "llama_rpc_worker ExecStart")


def test_filter_is_registered_and_wraps_the_helper():
    filters = exec_filter.FilterModule().filters()
    assert filters == {"systemd_exec_line": exec_filter.systemd_exec_line}
    assert exec_filter.systemd_exec_line(("/bin/echo", "50%")) == '"/bin/echo" "50%%"'
    with pytest.raises(AnsibleFilterError, match=r"unit\[1\]='x\\ny' contains the control character"):
        exec_filter.systemd_exec_line(["/bin/echo", "x\ny"], "unit")
