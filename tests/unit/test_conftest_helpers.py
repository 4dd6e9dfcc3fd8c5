# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the shared helpers in tests/unit/conftest.py: each check they make can fail."""

import subprocess
import types

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.modules import gpu_check
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary, pci_sysfs, warned

READ_ONLY_DOC = "module: x\nextends_documentation_fragment:\n  - gpufleet.inference.read_only\n"


def stand_in(documentation, **result):
    """A module object whose main() exits with ``result``, as a module's main() does."""

    def main():
        module = AnsibleModule(argument_spec={}, supports_check_mode=True)
        module.warn("a warning")
        module.exit_json(**result)

    return types.SimpleNamespace(DOCUMENTATION=documentation, main=main)


def test_run_module_returns_the_result_and_its_warnings(run_module):
    result = run_module(stand_in(READ_ONLY_DOC, answer=42), {})
    assert result["answer"] == 42
    assert warned(result) == ["a warning"]


def test_run_module_refuses_a_failure_that_was_not_expected(run_module):
    with pytest.raises(AssertionError):
        run_module(gpu_check, {"nvidia_smi_path": "/nonexistent/nvidia-smi"})


def test_run_module_refuses_a_success_where_a_failure_was_expected(run_module):
    with pytest.raises(AssertionError):
        run_module(stand_in(READ_ONLY_DOC), {}, failed=True)


def test_run_module_refuses_a_change_from_a_read_only_module(run_module):
    with pytest.raises(AssertionError):
        run_module(stand_in(READ_ONLY_DOC, changed=True), {})
    assert run_module(stand_in("module: x\n", changed=True), {})["changed"] is True


def test_run_module_check_mode(run_module):
    def main():
        module = AnsibleModule(argument_spec={}, supports_check_mode=True)
        module.exit_json(check_mode=module.check_mode)

    module = types.SimpleNamespace(DOCUMENTATION="module: x\n", main=main)
    assert run_module(module, {}, check_mode=True)["check_mode"] is True
    assert run_module(module, {})["check_mode"] is False


def test_fake_binary_prints_exits_and_records_each_call(tmp_path):
    path = fake_binary(tmp_path, "tool", "out 'quoted' $HOME\n", 3, stderr="err\n")
    for argv in (["-q", "a b"], ["topo"]):
        proc = subprocess.run([path, *argv], capture_output=True, text=True, check=False)
        assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out 'quoted' $HOME\n", "err\n")
    assert (tmp_path / "tool.args").read_text() == "-q a b\ntopo\n"


def test_pci_sysfs_layout(tmp_path):
    root = pci_sysfs(tmp_path, {"0000:01:00.0": {"vendor": "0x10de"}}, drivers={"0000:01:00.0": "nvidia"})
    device = root / "bus" / "pci" / "devices" / "0000:01:00.0"
    assert (device / "vendor").read_text() == "0x10de\n"
    assert (device / "driver").resolve() == root / "bus" / "pci" / "drivers" / "nvidia"
