# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_cache_seed module with the real rsync: between directories of this machine, and over
ssh through rrsync as the vllm role limits its key."""

import json
import os
import pwd
import shutil
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_cache
from ansible_collections.gpufleet.inference.plugins.modules import vllm_cache_seed
from ansible_collections.gpufleet.inference.tests.unit.conftest import HAS_RRSYNC_PEER, NO_RRSYNC_PEER, warned

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (apt-get install rsync)")

CPUINFO = str(Path(__file__).parents[1] / "module_utils" / "fixtures" / "cpuinfo" / "debian12-vm-x86_64.txt")
SHAPE = {
    "vllm": "0a1b2c3d4e5f",
    "model": "sha256:" + "4" * 64,
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 2,
    "rank": 1,
    "gpus": [],
}


def tree(root):
    """Relative path -> bytes of every file under root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@pytest.fixture
def caches(tmp_path, run_module):
    """A cache root (as /var/cache/gpufleet-vllm) with replica r0's warm cache, recorded by the module."""
    root = tmp_path / "cache"
    warm = root / "r0" / "vllm"
    graphs = warm / "torch_compile_cache" / "5f0e1d2c3b" / "rank_1_0" / "backbone"
    graphs.mkdir(parents=True)
    (graphs / "computation_graph.py").write_text("def forward(x): return x\n")
    (graphs / "cache_key_factors.json").write_bytes(os.urandom(20_000))
    (warm / "modelinfos").mkdir()
    (warm / "modelinfos" / "vllm.model_executor.models.llama-LlamaForCausalLM.json").write_text("{}")
    (warm / "vllm.log").write_text("not part of a seed")
    run_module(vllm_cache_seed, args(warm, state="recorded"))
    return root


def args(path, **more):
    return {"path": str(path), "shape": SHAPE, "cpuinfo": CPUINFO, **more}


def local(root, name="peer"):
    return {"name": name, "host": "", "path": str(root / "r0" / "vllm")}


def test_recording_writes_the_key_once(run_module, tmp_path):
    path = tmp_path / "r0" / "vllm"
    dry = run_module(vllm_cache_seed, args(path, state="recorded"), check_mode=True)
    assert dry["changed"] and not dry["warm"] and not path.exists()
    result = run_module(vllm_cache_seed, args(path, state="recorded"))
    key = json.loads((path / _vllm_cache.KEY_FILE).read_text())
    assert result["changed"] and key == result["key"] and key["cpu"].startswith("AMD EPYC; flags ")
    assert oct((path / _vllm_cache.KEY_FILE).stat().st_mode & 0o777) == "0o644"
    again = run_module(vllm_cache_seed, args(path, state="recorded"))
    assert not again["changed"] and again["warm"] and again["present_digest"] == result["digest"]


def test_a_cold_cache_is_seeded_from_a_peer_of_its_shape(run_module, tmp_path, caches):
    path = tmp_path / "new" / "r0" / "vllm"
    dry = run_module(vllm_cache_seed, args(path, sources=[local(caches)]), check_mode=True)
    assert dry["changed"] and dry["seeded_from"] == "peer" and not path.exists()
    me = pwd.getpwuid(os.getuid()).pw_name
    result = run_module(vllm_cache_seed, args(path, sources=[local(caches)], owner=me))
    assert result["changed"] and result["seeded_from"] == "peer" and result["tried"] == []
    assert result["bytes"] > 20_000
    copied = tree(path)
    # The compiled graphs, the model-class inspection and the key; not the peer's log.
    assert copied == {k: v for k, v in tree(caches / "r0" / "vllm").items() if k != "vllm.log"}
    again = run_module(vllm_cache_seed, args(path, sources=[local(caches)]))
    assert not again["changed"] and again["warm"]


def test_a_peer_of_another_shape_is_never_copied_from(run_module, tmp_path, caches):
    path = tmp_path / "new" / "vllm"
    other = dict(SHAPE, rank=0)
    result = run_module(vllm_cache_seed, dict(args(path, sources=[local(caches)]), shape=other))
    assert not result["changed"] and result["seeded_from"] == ""
    theirs = _vllm_cache.digest_of(json.loads((caches / "r0/vllm" / _vllm_cache.KEY_FILE).read_text()))
    assert result["tried"] == [f"peer: its cache key is {theirs}, not this node's {result['digest']}"]
    assert "was not seeded, so vLLM builds it at start" in warned(result)[0]
    assert tree(path) == {}


def test_a_failing_peer_is_left_for_the_next(run_module, tmp_path, caches):
    path = tmp_path / "new" / "vllm"
    (tmp_path / "unrecorded").mkdir()
    unrecorded = {"name": "unrecorded", "host": "", "path": str(tmp_path / "unrecorded")}
    gone = {"name": "gone", "host": "", "path": str(tmp_path / "nowhere")}
    result = run_module(vllm_cache_seed, args(path, sources=[unrecorded, gone, local(caches)]))
    assert result["seeded_from"] == "peer"
    assert result["tried"][0] == f"unrecorded: it holds no readable {_vllm_cache.KEY_FILE}"
    assert result["tried"][1].startswith("gone: rsync exited 23: ")


def test_an_interrupted_seed_is_finished_by_the_next_run(run_module, tmp_path, caches):
    path = tmp_path / "new" / "vllm"
    # What an interrupted seed leaves: some files, and no key, so the cache is not warm.
    (path / "modelinfos").mkdir(parents=True)
    shutil.copy(next((caches / "r0/vllm/modelinfos").iterdir()), path / "modelinfos")
    assert not run_module(vllm_cache_seed, args(path), check_mode=True)["warm"]
    result = run_module(vllm_cache_seed, args(path, sources=[local(caches)]))
    assert result["seeded_from"] == "peer" and (path / _vllm_cache.KEY_FILE).exists()
    assert len(tree(path)) == 4


def test_a_model_without_a_digest_keys_nothing(run_module, tmp_path):
    unpinned = dict(SHAPE, model="hub:org/model@main")
    for state in ("recorded", "seeded"):
        result = run_module(vllm_cache_seed, dict(args(tmp_path / "vllm", state=state), shape=unpinned))
        assert not result["changed"] and not result["keyed"] and result["digest"] == ""
        assert result["reason"].startswith("the model 'hub:org/model@main' has no digest to key a vLLM cache by")
    assert not (tmp_path / "vllm").exists()


def test_without_a_peer_nothing_changes(run_module, tmp_path):
    result = run_module(vllm_cache_seed, args(tmp_path / "vllm"))
    assert not result["changed"] and not result["warm"] and result["seeded_from"] == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sources": [{"name": "x"}]}, "sources[0] needs a name and a path, not {'name': 'x'}"),
        ({"owner": "no-such-user-here"}, "owner no-such-user-here is no user on this host"),
        (
            {"sources": [{"name": "x", "host": "10.0.0.2", "path": "r0/vllm"}]},
            "sources on other hosts need ssh_key and known_hosts",
        ),
    ],
)
def test_bad_arguments_fail_naming_the_problem(run_module, tmp_path, change, message):
    result = run_module(vllm_cache_seed, {**args(tmp_path / "vllm"), **change}, failed=True)
    assert message in result["msg"]


@pytest.mark.skipif(not HAS_RRSYNC_PEER, reason=NO_RRSYNC_PEER)
def test_a_peer_serves_its_cache_through_rrsync(run_module, tmp_path, caches, rrsync_peer):
    peer = rrsync_peer(caches, "gpufleet-cache-seed")
    path = tmp_path / "new" / "vllm"
    source = {"name": "peer", "host": "127.0.0.1", "path": "r0/vllm"}
    given = args(path, sources=[source], ssh_key=peer["key"], known_hosts=peer["known_hosts"])
    result = run_module(vllm_cache_seed, dict(given, ssh_user=peer["user"], ssh_port=peer["port"]))
    assert result["seeded_from"] == "peer", result
    assert tree(path) == {k: v for k, v in tree(caches / "r0" / "vllm").items() if k != "vllm.log"}
