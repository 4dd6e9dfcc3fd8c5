# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared plumbing for the unit tests: run a module as Ansible runs it, and build the fakes they read.

Fixtures (pytest finds them here, under `ansible-test units` and under `pytest tests/unit` alike):
``run_module``, ``fresh_warnings`` and ``rrsync_peer``. Plain helpers, imported as
``from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary, pci_sysfs, warned``;
``local_play`` runs a play against this machine with the collection of this checkout.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

READ_ONLY_FRAGMENT = "gpufleet.inference.read_only"


@pytest.fixture
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide dict, and goes to the display instead once any
    controller code has been imported in this process: start every test as a module with none."""
    monkeypatch.setattr(ansible_internal, "is_controller", False)
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})


def _read_only(module) -> bool:
    """Whether the module's DOCUMENTATION declares it never changes anything."""
    fragments = yaml.safe_load(module.DOCUMENTATION).get("extends_documentation_fragment") or []
    return READ_ONLY_FRAGMENT in ([fragments] if isinstance(fragments, str) else fragments)


@pytest.fixture
def run_module(capsys, fresh_warnings):
    """``run_module(module, args, *, failed=False, check_mode=False)``: run ``module.main()`` with
    ``args`` as Ansible passes them and return the JSON result it printed.

    It asserts the exit code and ``failed`` agree with ``failed``, and that a module documented as
    read-only (the read_only fragment) reports no change.
    """

    def run(module, args, *, failed=False, check_mode=False):
        if check_mode:
            args = {**args, "_ansible_check_mode": True}
        with patch_module_args(args), pytest.raises(SystemExit) as exc:
            module.main()
        result = json.loads(capsys.readouterr().out)
        assert bool(result.get("failed")) is failed, result
        assert (exc.value.code or 0) == (1 if failed else 0), result
        if _read_only(module):
            assert result.get("changed", False) is False, result
        return result

    return run


def warned(result) -> list[str]:
    """The messages of the Ansible warnings of a result (ansible-core 2.19 returns them as events)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


def fake_binary(tmp_path: Path, name: str, stdout: str = "", rc: int = 0, *, stderr: str = "") -> str:
    """An executable ``tmp_path/name`` that prints ``stdout`` (and ``stderr``) exactly and exits ``rc``.

    Each call appends its arguments as one line to ``tmp_path/<name>.args``, so a test can check what
    ran and that nothing ran (the file is absent). Returns the path as a string, as a module takes it.
    """
    path = tmp_path / name
    (tmp_path / f"{name}.stdout").write_text(stdout)
    (tmp_path / f"{name}.stderr").write_text(stderr)
    quoted = shlex.quote(str(path))
    path.write_text(
        f'#!/bin/sh\necho "$@" >> {quoted}.args\ncat {quoted}.stdout\ncat {quoted}.stderr >&2\nexit {int(rc)}\n'
    )
    path.chmod(0o755)
    return str(path)


def pci_sysfs(tmp_path: Path, devices: dict, drivers: dict | None = None) -> Path:
    """A sysfs root with ``bus/pci/devices/<address>/<attribute>`` files as the kernel shows them.

    ``devices`` maps a PCI address to its attributes ({"vendor": "0x10de", "class": "0x030000", ...});
    ``drivers`` maps an address to the driver bound to it (a ``driver`` symlink into bus/pci/drivers).
    """
    root = tmp_path / "sys"
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    for address, attributes in devices.items():
        device = root / "bus" / "pci" / "devices" / address
        device.mkdir()
        for attribute, value in attributes.items():
            (device / attribute).write_text(value + "\n")
    for address, driver in (drivers or {}).items():
        target = root / "bus" / "pci" / "drivers" / driver
        target.mkdir(parents=True, exist_ok=True)
        (root / "bus" / "pci" / "devices" / address / "driver").symlink_to(target)
    return root


def ansible_playbook() -> tuple[list[str], str]:
    """The ansible-playbook command beside this Python, and the collections path that holds this
    checkout's collection (the tree ansible-test copied it into, or the checkout's collections/)."""
    repo = Path(__file__).resolve().parents[2]
    collections = repo.parents[2] if repo.parent.parent.name == "ansible_collections" else repo / "collections"
    exe = Path(sys.executable).with_name("ansible-playbook")
    return ([str(exe)] if exe.exists() else [sys.executable, "-m", "ansible.cli.playbook"]), str(collections)


def local_play(tmp_path: Path, play: str, extra: dict, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook of the play text against localhost (local connection), with this
    checkout's collection, its async results under tmp_path and extra as extra vars."""
    argv, collections = ansible_playbook()
    (tmp_path / "play.yml").write_text(play)
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=collections,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_ASYNC_DIR=str(tmp_path / "async"),
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    extra = dict(extra, ansible_python_interpreter=sys.executable)
    return subprocess.run(
        [*argv, "-i", "localhost,", str(tmp_path / "play.yml"), "-e", json.dumps(extra), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


SSHD = "/usr/sbin/sshd"
RRSYNC = shutil.which("rrsync") or "/usr/bin/rrsync"
HAS_RRSYNC_PEER = bool(
    os.path.exists(SSHD) and os.path.exists(RRSYNC) and shutil.which("rsync") and shutil.which("ssh")
)
NO_RRSYNC_PEER = "needs openssh-server, openssh-client and rsync (with rrsync) on this machine"


@pytest.fixture
def rrsync_peer(tmp_path):
    """``rrsync_peer(root, comment)``: an sshd on a free loopback port that admits only a job key,
    limited as the vllm role limits it (restrict, from=, command="rrsync -ro <root>").

    It is this machine's sshd, run unprivileged with its own host key and authorized_keys. Returns
    {"user", "port", "key", "known_hosts", "ssh_e"} (ssh_e: the fan-out's rsync -e command)."""
    from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout

    procs = []

    def start(root, comment="gpufleet-model-stage"):
        for name in ("hostkey", "jobkey"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
        public = " ".join((tmp_path / "jobkey.pub").read_text().split()[:2])
        (tmp_path / "authorized_keys").write_text(
            f'restrict,from="127.0.0.1",command="{RRSYNC} -ro {root}" {public} {comment}\n'
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        user = subprocess.run(["id", "-un"], check=True, capture_output=True, text=True).stdout.strip()
        config = tmp_path / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'hostkey'}\n"
            f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPasswordAuthentication no\n"
            f"PermitRootLogin prohibit-password\nStrictModes no\nPidFile {tmp_path / 'sshd.pid'}\nUsePAM no\n"
        )
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(
            f"[127.0.0.1]:{port} " + " ".join((tmp_path / "hostkey.pub").read_text().split()[:2]) + "\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "sshd exited at start"
                time.sleep(0.05)
        key = str(tmp_path / "jobkey")
        return {
            "user": user,
            "port": port,
            "key": key,
            "known_hosts": str(known_hosts),
            "ssh_e": _model_fanout.ssh_command("ssh", key, str(known_hosts), user, port),
        }

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait()
