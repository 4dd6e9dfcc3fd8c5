# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model_fanout_wait action through a real play on this machine: model_fanout runs with async
and the real rsync between two directories, held to a slow rate by --bwlimit so that it is
still running when the action first reads its status, and the action prints its progress."""

import json
import os
import shutil

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout, _model_staging
from ansible_collections.gpufleet.inference.tests.unit.conftest import local_play

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (apt-get install rsync)")

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Start the fan-out
      gpufleet.inference.model_fanout:
        path: "{{ dest }}"
        files: "{{ files }}"
        sources: "{{ sources }}"
        bwlimit: "{{ bwlimit }}"
        stall_timeout: 0
      async: 300
      poll: 0
      register: job

    - name: Wait for it
      gpufleet.inference.model_fanout_wait:
        jid: "{{ job.ansible_job_id }}"
        path: "{{ dest }}"
        timeout: 300
        interval: 1
      register: waited

    - name: Keep what it returned
      ansible.builtin.copy:
        content: "{{ waited | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def play(tmp_path, root, bwlimit, entries=None):
    entries = entries or _model_staging.build(str(root))["entries"]
    chain = [{"name": "stage-host", "host": "", "path": str(root)}]
    extra = {
        "dest": str(tmp_path / "dest"),
        "files": entries,
        "sources": {entry["path"]: chain for entry in entries},
        "bwlimit": bwlimit,
        "out": str(tmp_path / "waited.json"),
    }
    return local_play(tmp_path, PLAY, extra)


def test_progress_is_printed_while_the_files_arrive(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "config.json").write_text("{}")
    # 1 MiB at 128 KiB/s: at least 8 s of transfer on any machine, so the action's first look
    # (one second after the job starts) finds it running.
    (root / "model-00001.safetensors").write_bytes(os.urandom(1 << 20))
    result = play(tmp_path, root, bwlimit=128)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    # Progress goes to stderr, so that a machine-readable stdout stays one document.
    assert "localhost: " not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("localhost: ")]
    running = [line for line in lines if not line.startswith("localhost: done")]
    assert running and all(" files, " in line and " MiB/s" in line for line in running), lines
    assert lines[-1].startswith("localhost: done, 2/2 files, 1.0 MiB of 1.0 MiB (100%)"), lines
    waited = json.loads((tmp_path / "waited.json").read_text())
    assert waited["files_done"] == 2 and waited["state"] == "done" and waited["changed"]
    assert "ansible_job_id" not in waited
    # The action removed the job's async result once it had read it.
    assert not list((tmp_path / "async").glob("*"))


def test_a_failed_fan_out_fails_the_wait_with_its_message(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "config.json").write_text("{}")
    entries = _model_staging.build(str(root))["entries"]
    # The manifest names a file the source no longer has.
    (root / "config.json").unlink()
    result = play(tmp_path, root, bwlimit=0, entries=entries)
    assert result.returncode != 0
    assert "config.json could not be fetched from any source (stage-host: nothing arrived for 0 s" in result.stdout


def test_a_progress_line_names_files_bytes_rate_and_sources():
    status = {
        "files_done": 3,
        "files_total": 5,
        "bytes_done": 3 << 20,
        "bytes_in_flight": 1 << 19,
        "bytes_total": 7 << 20,
        "rate_bytes_s": 1.5 * (1 << 20),
        "by_source": {"lab-w1": 1 << 20, "lab-head": 2 << 20},
        "refetched": [{"path": "a"}],
    }
    assert _model_fanout.progress_text(status) == (
        "3/5 files, 3.5 MiB of 7.0 MiB (50%), 1.5 MiB/s, from lab-head 2.0 MiB, lab-w1 1.0 MiB, 1 fetched again"
    )
    assert _model_fanout.progress_text({}) == "0/0 files, 0.0 MiB of 0.0 MiB, 0.0 MiB/s"
