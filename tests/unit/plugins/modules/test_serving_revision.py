# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving_revision module on a replica's real configuration directory: a switch snapshots
the files in place, records the new revision, and a rollback puts the old files back."""

import json
import os

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import serving_revision

OLD_MODEL, NEW_MODEL = "sha256:" + "1" * 64, "sha256:" + "2" * 64
VENV = "/opt/gpufleet/vllm/0.32.0-cpu-0d85b6e70cf3"


@pytest.fixture
def replica(tmp_path):
    """A replica's directory and unit as the vllm role writes them (the old revision)."""
    path, unit = tmp_path / "etc" / "pp", tmp_path / "systemd" / "gpufleet-vllm-pp.service"
    path.mkdir(parents=True)
    unit.parent.mkdir()
    write(path, unit, "old")
    return path, unit


def write(path, unit, text):
    (path / "config.yaml").write_text(f"model: /srv/models/{text}\n")
    (path / "vllm.env").write_text("HF_HUB_OFFLINE=1\n")
    (path / "secrets.env").write_text(f"VLLM_API_KEY=sk-{text}\n")
    os.chmod(path / "secrets.env", 0o600)
    unit.write_text(f"[Service]\nExecStart=/opt/vllm serve --config {text}\n")


def args(replica, model=NEW_MODEL, **more):
    """The target: the new model, at its own path."""
    path, unit = replica
    return {"path": str(path), "unit_path": str(unit), "venv": VENV, "model": model, "model_path": "/srv/r2", **more}


def test_a_switch_and_its_rollback(run_module, replica):
    path, unit = replica
    fresh = run_module(serving_revision, args(replica))
    assert fresh["record"] is None and fresh["snapshot"] is None and not fresh["changed"]
    # Never recorded: the files are known by their digest only.
    old = fresh["in_place"]
    assert (old["venv"], old["model"], old["model_path"]) == ("", "", "") and len(old["config"]) == 64
    # Before the switch: the old files are kept, the node is switching.
    snap = run_module(serving_revision, args(replica, state="snapshot", rollout={"id": "r1", "replica": "pp"}))
    assert snap["changed"] and snap["record"]["state"] == "switching" and snap["snapshot"] == old
    assert (path / "previous" / "unit").read_text() == unit.read_text()
    assert oct((path / "previous" / "secrets.env").stat().st_mode & 0o777) == "0o600"
    assert oct((path / "previous").stat().st_mode & 0o777) == "0o700"
    # The role writes the new revision; a failed check restores the old one.
    write(path, unit, "new")
    restored = run_module(serving_revision, args(replica, state="restored"))
    assert restored["record"]["state"] == "rolled_back"
    assert restored["record"]["current"] == old and restored["record"]["previous"]["config"] != old["config"]
    assert "old" in unit.read_text() and (path / "secrets.env").read_text() == "VLLM_API_KEY=sk-old\n"
    assert run_module(serving_revision, args(replica))["in_place"] == old
    # A second attempt that passes: the new revision is recorded, the old one as previous.
    run_module(serving_revision, args(replica, state="snapshot"))
    write(path, unit, "new")
    done = run_module(serving_revision, args(replica, state="recorded"))
    assert done["changed"] and done["record"]["state"] == "serving"
    assert done["record"]["current"]["model"] == NEW_MODEL and done["record"]["previous"] == old
    assert done["record"]["current"]["model_path"] == "/srv/r2" and done["in_place"] == done["record"]["current"]
    # Read back, the files in place carry the record's labels.
    assert run_module(serving_revision, args(replica, model="other"))["in_place"] == done["record"]["current"]
    on_disk = json.loads((path / "revision.json").read_text())
    assert on_disk["current"] == done["record"]["current"]
    assert "sk-" not in (path / "revision.json").read_text()
    # Recorded again: nothing changes.
    assert not run_module(serving_revision, args(replica, state="recorded"))["changed"]


def test_a_switch_cut_off_keeps_the_files_the_node_served_with(run_module, replica):
    path, unit = replica
    old = run_module(serving_revision, args(replica, state="snapshot"))["snapshot"]
    write(path, unit, "new")
    # The controller died here; the rerun snapshots again before switching.
    again = run_module(serving_revision, args(replica, state="snapshot"))
    assert again["snapshot"] == old and again["record"]["current"] == old
    assert "old" in (path / "previous" / "unit").read_text()


def test_check_mode_changes_nothing(run_module, replica):
    path, _unit = replica
    result = run_module(serving_revision, args(replica, state="snapshot"), check_mode=True)
    assert result["changed"] and not (path / "previous").exists() and not (path / "revision.json").exists()
    result = run_module(serving_revision, args(replica, state="recorded"), check_mode=True)
    assert result["changed"] and not (path / "revision.json").exists()


def test_a_restore_without_a_snapshot_fails_and_names_the_directory(run_module, replica):
    path, _unit = replica
    result = run_module(serving_revision, args(replica, state="restored"), failed=True)
    assert result["msg"] == "no snapshot to restore in %s: the node was never switched by a rollout" % (
        path / "previous"
    )


def test_a_replica_not_configured_yet_cannot_be_snapshot(run_module, replica):
    _path, unit = replica
    unit.unlink()
    result = run_module(serving_revision, args(replica, state="snapshot"), failed=True)
    assert f"the replica's files are not all in place ({unit})" in result["msg"]
    assert run_module(serving_revision, args(replica))["in_place"] is None
