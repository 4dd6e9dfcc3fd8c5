# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_model_fanout.py with the real rsync, between directories of this machine.

Peers are directories here (rsync's local mode): the choice of source, the checks against the
manifest, the refetch of a corrupted or truncated file, the resume of an interrupted run and the
refusal when no source is left. The same code over ssh between lab hosts is the lab's proof.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout as fanout
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging as staging

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (apt-get install rsync)")
COLLECTIONS = Path(os.path.abspath(fanout.__file__)).parents[5]


def make_model(root, shards=4, size=64 << 10):
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"num_hidden_layers": 4}\n')
    (root / "tok").mkdir()
    (root / "tok" / "tokenizer.json").write_text('{"v": 1}\n')
    for n in range(shards):
        (root / f"model-{n:05d}.safetensors").write_bytes(os.urandom(size))
    return staging.build(str(root))


def source(name, path):
    return {"name": name, "host": "", "path": str(path)}


def fetch_for(dest, manifest, chains, **kwargs):
    sources = dict((e["path"], chains) for e in manifest["entries"])
    return fanout.Fetch(str(dest), manifest["entries"], sources, **kwargs)


def test_every_file_arrives_verified_and_a_second_run_fetches_nothing(tmp_path):
    manifest = make_model(tmp_path / "src")
    changed, result = fetch_for(tmp_path / "dest", manifest, [source("src", tmp_path / "src")]).run()
    assert changed and result["state"] == "done"
    assert staging.build(str(tmp_path / "dest"))["digest"] == manifest["digest"]
    assert result["files_done"] == result["files_total"] == 6 and result["resumed_files"] == 0
    assert result["bytes_fetched"] == manifest["size_bytes"] == result["by_source"]["src"]
    status = json.loads((tmp_path / "dest.staging" / "status.json").read_text())
    assert status["state"] == "done" and status["bytes_done"] == manifest["size_bytes"]
    assert oct(os.stat(tmp_path / "dest" / "tok" / "tokenizer.json").st_mode & 0o777) == "0o644"

    changed, again = fetch_for(tmp_path / "dest", manifest, [source("src", tmp_path / "src")]).run()
    assert not changed and again["resumed_files"] == 6 and again["bytes_fetched"] == 0 and again["rounds"] == 0


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_a_bad_copy_at_a_peer_is_fetched_again_from_the_next_source(tmp_path, damage):
    manifest = make_model(tmp_path / "src")
    fetch_for(tmp_path / "peer", manifest, [source("src", tmp_path / "src")]).run()
    shard = tmp_path / "peer" / "model-00002.safetensors"
    data = bytearray(shard.read_bytes())
    if damage == "corrupt":
        data[100] ^= 0xFF
    else:
        del data[1000:]
    shard.write_bytes(bytes(data))

    _changed, result = fetch_for(
        tmp_path / "dest", manifest, [source("peer", tmp_path / "peer"), source("src", tmp_path / "src")]
    ).run()
    assert staging.build(str(tmp_path / "dest"))["digest"] == manifest["digest"]
    assert [(r["path"], r["source"]) for r in result["refetched"]] == [("model-00002.safetensors", "peer")]
    assert ("sha256" if damage == "corrupt" else "size 1000") in result["refetched"][0]["why"]
    assert result["by_source"]["src"] == len(data) if damage == "corrupt" else result["by_source"]["src"] == 64 << 10


def test_a_file_no_source_has_fails_with_every_source_named(tmp_path):
    manifest = make_model(tmp_path / "src")
    empty = tmp_path / "empty"
    empty.mkdir()
    fetch = fetch_for(tmp_path / "dest", manifest, [source("peer-a", empty), source("peer-b", empty)], stall_s=0)
    with pytest.raises(fanout.FetchError, match=r"could not be fetched from any source \(peer-a: nothing arrived"):
        fetch.run()
    assert json.loads((tmp_path / "dest.staging" / "status.json").read_text())["state"] == "failed"


def test_a_peer_that_never_gets_a_file_is_left_for_the_source(tmp_path):
    manifest = make_model(tmp_path / "src")
    empty = tmp_path / "empty"
    empty.mkdir()
    _changed, result = fetch_for(
        tmp_path / "dest", manifest, [source("peer", empty), source("src", tmp_path / "src")], stall_s=0
    ).run()
    assert result["by_source"] == {"src": manifest["size_bytes"]}


def test_stale_files_are_removed_and_the_generated_index_written(tmp_path):
    manifest = make_model(tmp_path / "src")
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "model-00099.safetensors").write_bytes(b"old")
    generated = {staging.INDEX_NAME: {"content": "{}\n", "sha256": hashlib.sha256(b"{}\n").hexdigest()}}
    fetch = fetch_for(tmp_path / "dest", manifest, [source("src", tmp_path / "src")], generated=generated)
    _changed, result = fetch.run()
    assert result["removed"] == ["model-00099.safetensors"] and result["generated"] == [staging.INDEX_NAME]
    assert (tmp_path / "dest" / staging.INDEX_NAME).read_text() == "{}\n"
    assert not (tmp_path / "dest" / "model-00099.safetensors").exists()


def test_check_mode_reports_and_changes_nothing(tmp_path):
    manifest = make_model(tmp_path / "src")
    changed, result = fetch_for(tmp_path / "dest", manifest, [source("src", tmp_path / "src")]).run(check_mode=True)
    assert changed and result["state"] == "check" and len(result["pending"]) == 6
    assert not (tmp_path / "dest").exists() and not (tmp_path / "dest.staging").exists()


CHILD = """
import json, sys
sys.path.insert(0, %(collections)r)
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout as fanout
manifest = json.load(open(%(manifest)r))
src = {"name": "src", "host": "", "path": %(src)r}
fanout.Fetch(%(dest)r, manifest["entries"], dict((e["path"], [src]) for e in manifest["entries"]),
             rsync_args=["--bwlimit=2000"]).run()
"""


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    manifest = make_model(tmp_path / "src", shards=3, size=1 << 20)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    dest = tmp_path / "dest"
    code = CHILD % {
        "collections": str(COLLECTIONS),
        "manifest": str(tmp_path / "manifest.json"),
        "src": str(tmp_path / "src"),
        "dest": str(dest),
    }
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    status = dest.parent / "dest.staging" / "status.json"
    deadline = time.monotonic() + 120
    try:
        # Wait for the event: one shard checked and in place while the next one arrives (rsync is
        # held at 2 MB/s and fetches one file per run).
        while time.monotonic() < deadline and child.poll() is None:
            if status.exists() and json.loads(status.read_text())["bytes_done"] >= 1 << 20:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the rate-limited fetch ended before it could be interrupted"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
        child.wait()
    _changed, result = fetch_for(dest, manifest, [source("src", tmp_path / "src")]).run()
    assert result["files_done"] == 5 and result["state"] == "done"
    # What crossed the wire again is less than the model: the whole file and the half one were kept.
    assert 0 < result["bytes_received"] < manifest["size_bytes"] - (1 << 20)
    assert staging.build(str(dest))["digest"] == manifest["digest"]
