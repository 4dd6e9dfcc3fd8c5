# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fan-out's transport for real: rsync over ssh to an sshd on loopback, with the job key limited
as the vllm role limits it (restrict, from=, command="rrsync -ro <models' directory>").

It proves the rsync options the fetch uses pass rrsync, and that the key reads below the models'
directory and nothing else. The sshd is this machine's (openssh-server), run unprivileged on a
free loopback port with its own host key and authorized_keys; the test is skipped, with that
reason, where there is none.
"""

import os
import shlex
import shutil
import socket
import subprocess
import time

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout as fanout
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging as staging

SSHD = "/usr/sbin/sshd"
RRSYNC = shutil.which("rrsync") or "/usr/bin/rrsync"
pytestmark = pytest.mark.skipif(
    not (os.path.exists(SSHD) and os.path.exists(RRSYNC) and shutil.which("rsync") and shutil.which("ssh")),
    reason="needs openssh-server, openssh-client and rsync (with rrsync) on this machine",
)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def peer(tmp_path):
    """A directory of models served by an sshd that admits only the job key, as rrsync -ro."""
    models = tmp_path / "models"
    (models / "m.source").mkdir(parents=True)
    (models / "m.source" / "config.json").write_text("{}")
    (models / "m.source" / "model-00001.safetensors").write_bytes(os.urandom(300_000))
    (tmp_path / "outside").write_text("not for the key")
    for name in ("hostkey", "jobkey"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    public = " ".join((tmp_path / "jobkey.pub").read_text().split()[:2])
    (tmp_path / "authorized_keys").write_text(
        f'restrict,from="127.0.0.1",command="{RRSYNC} -ro {models}" {public} gpufleet-model-stage\n'
    )
    port = free_port()
    user = subprocess.run(["id", "-un"], check=True, capture_output=True, text=True).stdout.strip()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'hostkey'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"PermitRootLogin prohibit-password\nStrictModes no\nPidFile {tmp_path / 'sshd.pid'}\nUsePAM no\n"
    )
    (tmp_path / "known_hosts").write_text(
        f"[127.0.0.1]:{port} " + " ".join((tmp_path / "hostkey.pub").read_text().split()[:2]) + "\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, "sshd exited at start"
            time.sleep(0.05)
    ssh_e = fanout.ssh_command("ssh", str(tmp_path / "jobkey"), str(tmp_path / "known_hosts"), user, port)
    yield {"models": models, "ssh_e": ssh_e, "tmp": tmp_path}
    proc.terminate()
    proc.wait()


def test_a_node_fetches_a_peers_model_through_rrsync(peer):
    manifest = staging.build(str(peer["models"] / "m.source"))
    source = {"name": "peer", "host": "127.0.0.1", "path": "m.source"}
    fetch = fanout.Fetch(
        str(peer["tmp"] / "dest"),
        manifest["entries"],
        {e["path"]: [source] for e in manifest["entries"]},
        ssh_e=peer["ssh_e"],
        stall_s=30,
    )
    _changed, result = fetch.run()
    assert result["by_source"] == {"peer": manifest["size_bytes"]} and result["bytes_received"] >= 300_000
    assert staging.build(str(peer["tmp"] / "dest"))["digest"] == manifest["digest"]


def test_the_key_reads_below_the_models_directory_and_nothing_else(peer):
    rsync = ["rsync", "-e", peer["ssh_e"]]
    outside = subprocess.run(
        [*rsync, "127.0.0.1:../outside", str(peer["tmp"] / "got")], capture_output=True, check=False
    )
    assert outside.returncode != 0 and not (peer["tmp"] / "got").exists()
    write = subprocess.run(
        [*rsync, str(peer["tmp"] / "outside"), "127.0.0.1:m.source/planted"], capture_output=True, check=False
    )
    assert write.returncode != 0 and not (peer["models"] / "m.source" / "planted").exists()
    shell = subprocess.run(
        [*shlex.split(peer["ssh_e"]), "127.0.0.1", "id"], capture_output=True, text=True, check=False
    )
    assert shell.returncode != 0 and "uid=" not in shell.stdout
