# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the sysctl_apply module over a /proc/sys tree in tmp_path (the proc_root seam)."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpufleet.inference.plugins.modules import sysctl_apply

WANTED = {"net.ipv4.tcp_rmem": "4096 87380 16777216", "net.core.rmem_max": 16777216}


def run_module(capsys, args, expect_rc=0):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        sysctl_apply.main()
    assert (exc.value.code or 0) == expect_rc
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def proc(tmp_path):
    for key, value in {"net.ipv4.tcp_rmem": "4096\t131072\t6291456\n", "net.core.rmem_max": "16777216\n"}.items():
        path = tmp_path.joinpath(*key.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    return tmp_path


def value(proc, key):
    return proc.joinpath(*key.split(".")).read_text()


def test_only_the_values_that_differ_are_written_and_a_second_run_changes_nothing(capsys, proc):
    result = run_module(capsys, dict(sysctls=WANTED, proc_root=str(proc)))
    assert result["changed"] is True
    assert result["written"] == ["net.ipv4.tcp_rmem"]
    assert result["live"]["net.ipv4.tcp_rmem"] == "4096 87380 16777216"
    assert value(proc, "net.ipv4.tcp_rmem") == "4096 87380 16777216\n"
    again = run_module(capsys, dict(sysctls=WANTED, proc_root=str(proc)))
    assert again["changed"] is False
    assert again["written"] == []


def test_check_mode_writes_nothing_and_diff_shows_the_change(capsys, proc):
    result = run_module(capsys, dict(sysctls=WANTED, proc_root=str(proc), _ansible_check_mode=True, _ansible_diff=True))
    assert result["changed"] is True
    assert result["written"] == ["net.ipv4.tcp_rmem"]
    assert result["diff"]["before"] == "net.ipv4.tcp_rmem = 4096 131072 6291456\n"
    assert result["diff"]["after"] == "net.ipv4.tcp_rmem = 4096 87380 16777216\n"
    assert value(proc, "net.ipv4.tcp_rmem") == "4096\t131072\t6291456\n"


def test_an_absent_key_fails_before_anything_is_written(capsys, proc):
    wanted = dict(WANTED, **{"net.ipv4.tcp_rmemm": 1})
    result = run_module(capsys, dict(sysctls=wanted, proc_root=str(proc), container="docker"), expect_rc=1)
    assert result["absent"] == ["net.ipv4.tcp_rmemm"]
    assert "the kernel has no net.ipv4.tcp_rmemm" in result["msg"]
    assert value(proc, "net.ipv4.tcp_rmem") == "4096\t131072\t6291456\n"


def refuse(monkeypatch):
    # A container's kernel answers EPERM, or takes the write and keeps the old value.
    monkeypatch.setattr(
        sysctl_apply._sysctl, "write", lambda root, key, value: "the kernel refused the write: Permission denied"
    )
    monkeypatch.setattr(sysctl_apply._sysctl, "writable", lambda root, key: False)


def test_a_container_reports_what_its_kernel_refuses(capsys, proc, monkeypatch):
    refuse(monkeypatch)
    wanted = dict(WANTED, **{"net.core.netdev_max_backlog": 250000})
    args = dict(sysctls=wanted, proc_root=str(proc), container="docker")
    result = run_module(capsys, args)
    assert result["changed"] is False
    assert result["refused"] == {"net.ipv4.tcp_rmem": "the kernel refused the write: Permission denied"}
    assert result["hidden"] == ["net.core.netdev_max_backlog"]
    checked = run_module(capsys, dict(args, _ansible_check_mode=True))
    assert checked["changed"] is False
    assert checked["refused"] == {"net.ipv4.tcp_rmem": "not writable in this container"}


def test_a_refused_write_fails_on_a_host(capsys, proc, monkeypatch):
    refuse(monkeypatch)
    result = run_module(capsys, dict(sysctls=WANTED, proc_root=str(proc)), expect_rc=1)
    assert result["msg"] == "net.ipv4.tcp_rmem=4096 87380 16777216: the kernel refused the write: Permission denied"
    # A host's check mode predicts the write: root may write what its mode does not allow.
    checked = run_module(capsys, dict(sysctls=WANTED, proc_root=str(proc), _ansible_check_mode=True))
    assert checked["written"] == ["net.ipv4.tcp_rmem"]


def test_a_bad_value_fails_naming_it(capsys, proc):
    result = run_module(
        capsys, dict(sysctls={"net.core.rmem_max": "1\nkernel.panic = 1"}, proc_root=str(proc)), expect_rc=1
    )
    assert "net.core.rmem_max='1\\nkernel.panic = 1' is not a sysctl value" in result["msg"]
