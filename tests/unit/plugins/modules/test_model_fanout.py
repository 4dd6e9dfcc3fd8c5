# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the model_fanout module with the real rsync between directories of this machine."""

import shutil

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging
from ansible_collections.gpufleet.inference.plugins.modules import model_fanout

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (apt-get install rsync)")


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "config.json").write_text("{}")
    (root / "model-00001.safetensors").write_bytes(b"w" * 5000)
    return root, _model_staging.build(str(root))["entries"]


def args(tmp_path, source):
    root, entries = source
    chain = [{"name": "stage-host", "host": "", "path": str(root)}]
    return {"path": str(tmp_path / "dest"), "files": entries, "sources": {e["path"]: chain for e in entries}}


def test_check_mode_reports_the_bytes_needed_and_free(run_module, tmp_path, source):
    result = run_module(model_fanout, args(tmp_path, source), check_mode=True)
    assert result["changed"] and result["needed_bytes"] == 5002 and result["free_bytes"] > 0
    assert not (tmp_path / "dest").exists()


def test_the_files_arrive_and_a_second_run_changes_nothing(run_module, tmp_path, source):
    result = run_module(model_fanout, args(tmp_path, source))
    assert result["changed"] and result["files_done"] == 2 and result["by_source"] == {"stage-host": 5002}
    assert (tmp_path / "dest" / "model-00001.safetensors").read_bytes() == b"w" * 5000
    again = run_module(model_fanout, args(tmp_path, source))
    assert not again["changed"] and again["resumed_files"] == 2


def test_a_file_without_a_source_is_refused(run_module, tmp_path, source):
    given = args(tmp_path, source)
    given["sources"].pop("config.json")
    result = run_module(model_fanout, given, failed=True)
    assert result["msg"] == "files config.json have no source"


def test_a_peer_source_needs_the_key(run_module, tmp_path, source):
    given = args(tmp_path, source)
    given["sources"]["config.json"] = [{"name": "peer", "host": "10.0.0.2", "path": "model"}]
    result = run_module(model_fanout, given, failed=True)
    assert result["msg"] == "sources on other hosts need ssh_key and known_hosts"


def test_a_source_that_lost_a_file_fails_naming_it(run_module, tmp_path, source):
    root, _entries = source
    (root / "config.json").unlink()
    given = dict(args(tmp_path, source), stall_timeout=0)
    result = run_module(model_fanout, given, failed=True)
    assert "config.json could not be fetched from any source (stage-host: nothing arrived" in result["msg"]
    assert result["state"] == "failed"
