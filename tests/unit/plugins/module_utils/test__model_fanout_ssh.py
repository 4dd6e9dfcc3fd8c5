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
import subprocess

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout as fanout
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging as staging
from ansible_collections.gpufleet.inference.tests.unit.conftest import HAS_RRSYNC_PEER, NO_RRSYNC_PEER

pytestmark = pytest.mark.skipif(not HAS_RRSYNC_PEER, reason=NO_RRSYNC_PEER)


@pytest.fixture
def peer(tmp_path, rrsync_peer):
    """A directory of models served by an sshd that admits only the job key, as rrsync -ro."""
    models = tmp_path / "models"
    (models / "m.source").mkdir(parents=True)
    (models / "m.source" / "config.json").write_text("{}")
    (models / "m.source" / "model-00001.safetensors").write_bytes(os.urandom(300_000))
    (tmp_path / "outside").write_text("not for the key")
    return {"models": models, "ssh_e": rrsync_peer(models)["ssh_e"], "tmp": tmp_path}


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
