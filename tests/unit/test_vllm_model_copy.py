# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm role's default model staging (vllm_model_staging=copy) through a real play on this
machine: its `model` entry point puts a directory (vllm_model_src) and an archive (vllm_model_url,
file://) in place. Check mode on a fresh host predicts changes and writes nothing, the run puts
both models in place, and a second run changes nothing. (The lab deploys with the fan-out; this
is the proof of the default.)"""

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_model
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
