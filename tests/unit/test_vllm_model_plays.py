# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm role's model staging through real plays on this machine.

- The default, vllm_model_staging=copy: the `model` entry point puts a directory (vllm_model_src)
  and an archive (vllm_model_url, file://) in place. Check mode on a fresh host predicts changes
  and writes nothing, the run puts both models in place, and a second run changes nothing. (The
  lab deploys with the fan-out; this is the proof of the default.)
- The fan-out refuses a node without the space for its files before anything moves: the model
  is a sparse file larger than this machine's disk, whose manifest is already beside it (the
  manifest module reuses a manifest whose names and sizes match), so that nothing reads it."""

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging, _vllm_model
from ansible_collections.gpufleet.inference.tests.unit.conftest import local_play

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role's copy makes the files root's; run as root")

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Copy the directory
      ansible.builtin.include_role:
        name: gpufleet.inference.vllm
        tasks_from: model
      vars:
        vllm_model_src: "{{ src }}"
        vllm_model_checksum: "{{ src_checksum }}"
        vllm_model_path: "{{ root }}/from-src/model"

    - name: Download and unpack the archive
      ansible.builtin.include_role:
        name: gpufleet.inference.vllm
        tasks_from: model
      vars:
        vllm_model_url: "file://{{ archive }}"
        vllm_model_checksum: "{{ archive_checksum }}"
        vllm_model_path: "{{ root }}/from-url/model"
"""


@pytest.fixture
def models(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text('{"num_hidden_layers": 2}')
    (src / "model.safetensors").write_bytes(os.urandom(4096))
    files = _vllm_model.model_files(str(src))
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="model")
    return {
        "src": str(src),
        "src_checksum": "sha256:" + _vllm_model.tree_digest(str(src), files),
        "archive": str(archive),
        "archive_checksum": "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest(),
        "root": str(tmp_path / "nodes"),
    }


def changed(result):
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return int(re.search(r"^localhost\s+: ok=\d+\s+changed=(\d+)", result.stdout, re.M).group(1))


def test_copy_puts_a_directory_and_an_archive_in_place_and_a_rerun_changes_nothing(tmp_path, models):
    nodes = Path(models["root"])
    check = local_play(tmp_path, PLAY, models, "--check")
    assert changed(check) >= 2 and "would download file://" in check.stdout
    assert not nodes.exists()
    assert changed(local_play(tmp_path, PLAY, models)) >= 2
    for name in ("from-src", "from-url"):
        placed = nodes / name / "model"
        assert json.loads((placed / "config.json").read_text()) == {"num_hidden_layers": 2}
        assert (placed / "model.safetensors").read_bytes() == (Path(models["src"]) / "model.safetensors").read_bytes()
    assert changed(local_play(tmp_path, PLAY, models)) == 0


FANOUT = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Publish this host as a one-node replica, as the vllm role's preflight does
      ansible.builtin.set_fact:
        __vllm_node: {replica: r0, rank: 0, address: 127.0.0.1, pipeline_parallel_size: 1,
                      model_path: "{{ path }}", pp_layer_partition: ""}

    - name: Fan the model out
      ansible.builtin.include_role:
        name: gpufleet.inference.vllm
        tasks_from: stage
      vars:
        vllm_model_src: "{{ src }}"
        vllm_model_checksum: "{{ checksum }}"
        vllm_model_path: "{{ path }}"
        vllm_model_staging: fanout
"""


def test_the_fanout_refuses_a_node_without_the_space_before_anything_moves(tmp_path):
    src = tmp_path / "huge"
    src.mkdir()
    (src / "config.json").write_text('{"num_hidden_layers": 2}')
    size = 8 << 40  # 8 TiB, sparse: no block of it is written
    with open(src / "model.safetensors", "wb") as handle:
        handle.truncate(size)
    entries = [
        {"path": "config.json", "size": 24, "sha256": hashlib.sha256(b'{"num_hidden_layers": 2}').hexdigest()},
        {"path": "model.safetensors", "size": size, "sha256": "0" * 64},
    ]
    manifest = {
        "schema": _model_staging.SCHEMA,
        "source": str(src),
        "digest": _model_staging.digest_of(entries),
        "files": 2,
        "size_bytes": size + 24,
        "entries": entries,
    }
    (tmp_path / "huge.manifest.json").write_text(_model_staging.dumps(manifest))
    path = tmp_path / "nodes" / "model"
    extra = {"src": str(src), "checksum": manifest["digest"], "path": str(path)}
    result = local_play(tmp_path, FANOUT, extra)
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert "TASK [gpufleet.inference.vllm : Check that this node has the space for what it will receive]" in text
    assert f"localhost needs {size + 24} bytes for its part of the model in {path} but its filesystem has" in text
    assert "set vllm_model_path to a larger filesystem" in text
    assert not (tmp_path / "nodes").exists()
