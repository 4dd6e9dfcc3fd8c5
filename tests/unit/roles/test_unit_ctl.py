# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for roles/frontdoor/files/gpufleet_unit_ctl.py, the forced command of the restart key
(installed on the serving nodes as /usr/local/libexec/gpufleet-unit-ctl)."""

import importlib
import stat
import sys
from pathlib import Path

import pytest

# The role's files folder goes on sys.path once, and the program is an ordinary import from it.
ROLE_FILES = Path(__file__).resolve().parents[3] / "roles" / "frontdoor" / "files"
if str(ROLE_FILES) not in sys.path:
    sys.path.insert(0, str(ROLE_FILES))
unit_ctl = importlib.import_module("gpufleet_unit_ctl")
UNITS = "# managed\ngpufleet-vllm-lab.service\n\ngpufleet-llama-rpc-50052.service\n"


@pytest.fixture
def node(tmp_path, monkeypatch, capfd):
    """A units file and a fake systemctl that records its arguments and answers like systemctl."""
    units = tmp_path / "units"
    units.write_text(UNITS)
    calls = tmp_path / "calls"
    fake = tmp_path / "systemctl"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> "{calls}"\nif [ "$1" = is-active ]; then echo inactive; exit 3; fi\nexit 0\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return {"units": units, "calls": calls, "systemctl": fake, "monkeypatch": monkeypatch, "capfd": capfd, "logged": []}


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(node, request, units=None):
    """main() with the fake systemctl and units file, as sshd would run it for the key."""
    node["monkeypatch"].setattr(unit_ctl, "UNITS_FILE", str(units or node["units"]))
    node["monkeypatch"].setattr(unit_ctl, "SYSTEMCTL", str(node["systemctl"]))
    node["monkeypatch"].setattr(unit_ctl, "log", lambda message, priority="info": node["logged"].append(message))
    environ = {"SSH_CLIENT": "192.168.0.20 51234 22"}
    if request is not None:
        environ["SSH_ORIGINAL_COMMAND"] = request
    returncode = unit_ctl.main(environ)
    out = node["capfd"].readouterr()
    calls = node["calls"].read_text().splitlines() if node["calls"].exists() else []
    return Result(returncode, out.out, out.err), calls


@pytest.mark.parametrize("action", ["start", "stop"])
def test_start_and_stop_a_listed_unit(node, action):
    proc, calls = run(node, f"{action} gpufleet-vllm-lab.service")
    assert proc.returncode == 0, proc.stderr
    assert calls == [f"{action} gpufleet-vllm-lab.service"]


def test_is_active_passes_on_the_state_and_status(node):
    proc, calls = run(node, "is-active gpufleet-llama-rpc-50052.service")
    assert proc.returncode == 3
    assert proc.stdout.strip() == "inactive"
    assert calls == ["is-active gpufleet-llama-rpc-50052.service"]


@pytest.mark.parametrize(
    "request_",
    [
        "stop sshd.service",
        "restart gpufleet-vllm-lab.service",
        "stop gpufleet-vllm-lab.service; rm -rf /",
        "stop gpufleet-vllm-lab.service extra",
        "stop  gpufleet-vllm-lab.service",
        "stop gpufleet-vllm-lab.service\n",
        "stop gpufleet-vllm-*.service",
        "bash",
        "",
    ],
)
def test_anything_else_is_refused_with_status_2(node, request_):
    proc, calls = run(node, request_)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpufleet-unit-ctl: ")
    assert "start UNIT" in proc.stderr or "not a unit this node serves" in proc.stderr
    assert calls == []
    assert len(node["logged"]) == 1 and node["logged"][0].startswith("from 192.168.0.20: ")


def test_no_original_command_is_refused(node):
    proc, calls = run(node, None)
    assert proc.returncode == 2
    assert "no command" in proc.stderr
    assert calls == []


def test_without_a_units_file_nothing_is_allowed(node, tmp_path):
    proc, calls = run(node, "stop gpufleet-vllm-lab.service", units=tmp_path / "missing")
    assert proc.returncode == 2
    assert "none listed" in proc.stderr
    assert calls == []


def test_a_missing_systemctl_is_an_error_not_a_traceback(node, tmp_path):
    node["systemctl"] = tmp_path / "no-systemctl"
    proc, _calls = run(node, "stop gpufleet-vllm-lab.service")
    assert proc.returncode == 1
    assert "cannot run" in proc.stderr
    assert "Traceback" not in proc.stderr
