# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_model_staging.py: the manifest, each stage's files and the fan-out.

The index and config are a real Llama 3.1 8B export (see fixtures/staging/README.md).
"""

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_staging as staging
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import model_config, tree_digest

FIXTURES = Path(__file__).parent / "fixtures" / "staging"
INDEX = json.loads((FIXTURES / "llama-3.1-8b-int8.index.json").read_text())
CONFIG = model_config(json.loads((FIXTURES / "llama-3.1-8b-int8.config.json").read_text()))
SHARD = "model-0000%d-of-00006.safetensors"


def fixture_manifest():
    """A manifest of the fixture model: its six shards, its index and its small files (sizes and digests made up)."""
    paths = [SHARD % n for n in range(1, 7)] + [
        staging.INDEX_NAME,
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "LICENSE.txt",
    ]
    entries = [
        {"path": path, "size": ((n + 1) << 30 if path.endswith(".safetensors") else 10), "sha256": f"{n:064x}"}
        for n, path in enumerate(paths)
    ]
    return {"schema": staging.SCHEMA, "digest": staging.digest_of(entries), "entries": entries}


def shards(stage):
    return sorted(f["path"] for f in stage["files"] if f["path"].endswith(".safetensors"))


def test_the_manifest_digest_is_the_tree_digest(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub" / "a b.bin").write_bytes(b"\0" * 5000)
    manifest = staging.build(str(tmp_path), source="ctl:/models/x")
    assert manifest["digest"] == "sha256:" + tree_digest(str(tmp_path))
    assert [e["path"] for e in manifest["entries"]] == ["config.json", "sub/a b.bin"]
    assert manifest["size_bytes"] == 5002 and manifest["files"] == 2
    assert staging.problems(json.loads(staging.dumps(manifest))) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda m: m["entries"][0].update(path="../etc/passwd"), "'..' component"),
        (lambda m: m["entries"][0].update(path="/abs"), "must be relative"),
        (lambda m: m["entries"][0].update(sha256="ABC"), "not 64 lowercase hex"),
        (lambda m: m["entries"][0].update(size=-1), "not a byte count"),
        (lambda m: m["entries"].append(dict(m["entries"][0])), "twice"),
        (lambda m: m["entries"][0].update(sha256="f" * 64), "edited by hand"),
        (lambda m: m.update(schema="other/v9"), "schema 'other/v9'"),
    ],
)
def test_a_damaged_manifest_is_refused(edit, expected):
    manifest = fixture_manifest()
    edit(manifest)
    found = staging.problems(manifest, "the manifest of m")
    assert found and expected in found[0], found


@pytest.mark.parametrize(
    ("layers", "pp", "override", "expected"),
    [
        (32, 2, "", [16, 16]),
        (61, 4, "", [15, 15, 16, 15]),  # the remainder goes to the second to last stage first, as get_pp_indices does
        (62, 4, "", [15, 16, 16, 15]),
        (80, 10, "", [8] * 10),
        (32, 2, "20,12", [20, 12]),
    ],
)
def test_the_layer_partition_is_vllms(layers, pp, override, expected):
    assert staging.layer_partition(layers, pp, override) == expected


def test_a_partition_that_does_not_add_up_is_refused():
    with pytest.raises(staging.StagingError, match="summing to num_hidden_layers=32"):
        staging.layer_partition(32, 2, "20,10")


def test_two_stages_of_the_real_index_hold_their_own_shards():
    first, last = staging.stages(fixture_manifest(), INDEX, CONFIG, 2)
    # Shard 1 has the embedding, 2 layers 0-8, 3 layers 8-16, 4 16-24, 5 the head, 6 24-31 and the final norm.
    assert shards(first) == [SHARD % 1, SHARD % 2, SHARD % 3]
    assert shards(last) == [SHARD % 3, SHARD % 4, SHARD % 5, SHARD % 6]
    assert first["layers"] == [0, 16] and last["layers"] == [16, 32]
    for stage in (first, last):
        paths = [f["path"] for f in stage["files"]]
        assert "tokenizer.json" in paths and "config.json" in paths and staging.INDEX_NAME not in paths
        own = json.loads(stage["generated"][staging.INDEX_NAME]["content"])
        assert sorted(set(own["weight_map"].values())) == shards(stage)
        assert own["metadata"] == INDEX["metadata"]
    total = sum(e["size"] for e in fixture_manifest()["entries"])
    assert first["bytes"] < total and last["bytes"] < total


def test_a_tied_head_sends_the_embedding_to_the_last_stage():
    tied = dict(CONFIG, tie_word_embeddings=True)
    _first, last = staging.stages(fixture_manifest(), INDEX, tied, 2)
    assert SHARD % 1 in shards(last)


def test_an_unknown_tensor_goes_to_every_stage_and_a_layer_past_the_last_to_the_last():
    index = {"weight_map": dict(INDEX["weight_map"])}
    index["weight_map"]["model.vision_tower.patch.weight"] = SHARD % 5
    index["weight_map"]["model.layers.32.shared_head.head.weight"] = SHARD % 1
    stages = staging.stages(fixture_manifest(), index, CONFIG, 4)
    assert all(SHARD % 5 in shards(stage) for stage in stages)
    assert SHARD % 1 in shards(stages[-1])


def test_no_index_or_one_stage_means_the_whole_model():
    manifest = fixture_manifest()
    whole = staging.stages(manifest, None, CONFIG, 2)
    assert [s["stage"] for s in whole] == [0, 1]
    assert all(s["whole"] and len(s["files"]) == len(manifest["entries"]) for s in whole)
    assert "no model.safetensors.index.json" in whole[0]["reason"]
    assert staging.stages(manifest, INDEX, CONFIG, 1)[0]["whole"]


def test_an_index_naming_a_shard_the_manifest_lacks_is_refused():
    manifest = fixture_manifest()
    manifest["entries"] = [e for e in manifest["entries"] if e["path"] != SHARD % 4]
    with pytest.raises(staging.StagingError, match="model-00004-of-00006"):
        staging.stages(manifest, INDEX, CONFIG, 2)


def test_the_stage_digest_matches_the_directory_a_stage_gets(tmp_path):
    manifest = staging.build(str(_write_model(tmp_path / "src")))
    index = json.loads((tmp_path / "src" / staging.INDEX_NAME).read_text())
    stage = staging.stages(manifest, index, {"num_hidden_layers": 2, "tie_word_embeddings": False}, 2)[1]
    out = tmp_path / "stage1"
    out.mkdir()
    for item in stage["files"]:
        (out / item["path"]).write_bytes((tmp_path / "src" / item["path"]).read_bytes())
    (out / staging.INDEX_NAME).write_text(stage["generated"][staging.INDEX_NAME]["content"])
    assert staging.stage_digest(stage) == "sha256:" + tree_digest(str(out))


def _write_model(root):
    root.mkdir()
    (root / "config.json").write_text('{"num_hidden_layers": 2}')
    weight_map = {
        "model.embed_tokens.weight": "a.safetensors",
        "model.layers.0.w": "a.safetensors",
        "model.layers.1.w": "b.safetensors",
        "lm_head.weight": "b.safetensors",
    }
    (root / staging.INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}))
    (root / "a.safetensors").write_bytes(b"a" * 100)
    (root / "b.safetensors").write_bytes(b"b" * 100)
    return root


def test_the_fanout_is_a_chain_per_file_with_the_source_last():
    files = [{"path": "x", "sha256": "1"}, {"path": "y", "sha256": "2"}]
    needs = {"s": files, "a": files, "b": files[:1], "c": files}
    plan = staging.fanout("s", ["s", "a", "b", "c"], needs)
    assert plan["s"] == {"x": ["s"], "y": ["s"]}
    assert plan["a"] == {"x": ["s"], "y": ["s"]}
    assert plan["b"] == {"x": ["a", "s"]}
    assert plan["c"] == {"x": ["b", "a", "s"], "y": ["a", "s"]}


def test_a_file_with_other_content_has_its_own_chain():
    plan = staging.fanout(
        "s",
        ["a", "b", "c"],
        {
            "a": [{"path": "index", "sha256": "1"}],
            "b": [{"path": "index", "sha256": "2"}],
            "c": [{"path": "index", "sha256": "1"}],
        },
    )
    assert plan["b"]["index"] == ["s"] and plan["c"]["index"] == ["a", "s"]


def test_fallbacks_are_bounded():
    hosts = [f"h{n}" for n in range(10)]
    plan = staging.fanout("s", hosts, dict((h, [{"path": "x", "sha256": "1"}]) for h in hosts))
    assert plan["h9"]["x"] == ["h8", "h7", "h6", "s"]


def nodes(*layout):
    """(host, replica size, pp, rank) -> the nodes host_plans reads, with 10.0.0.N addresses."""
    return [
        {"host": host, "address": f"10.0.0.{n}", "model_path": "/m/model", "pp_size": pp, "nnodes": size, "rank": rank}
        for n, (host, size, pp, rank) in enumerate(layout, start=1)
    ]


def test_each_pp_node_fetches_its_stage_along_a_chain_from_the_staging_host():
    manifest = fixture_manifest()
    layouts = [{"pp_size": 2, "partition": "", "stages": staging.stages(manifest, INDEX, CONFIG, 2)}]
    plans = staging.host_plans(
        nodes(("a0", 2, 2, 0), ("a1", 2, 2, 1), ("b0", 2, 2, 0), ("b1", 2, 2, 1)), "a0", manifest, layouts
    )
    assert [plans[h]["stage"] for h in ("a0", "a1", "b0", "b1")] == [0, 1, 0, 1]
    assert shards(plans["a1"]) == shards(layouts[0]["stages"][1])
    # The staging host copies from its own source directory; the others over ssh, from the node before them.
    assert plans["a0"]["sources"][SHARD % 1] == [{"name": "a0", "host": "", "path": "/m/model.source"}]
    assert plans["a1"]["sources"][SHARD % 4] == [{"name": "a0", "host": "10.0.0.1", "path": "model.source"}]
    assert plans["b1"]["sources"][SHARD % 4][0] == {"name": "a1", "host": "10.0.0.2", "path": "model"}
    assert plans["b0"]["sources"][SHARD % 1][0]["name"] == "a0"
    # Shard 3 holds layers of both stages, so b1 takes it from b0, the node before it in its chain.
    assert plans["b1"]["sources"][SHARD % 3][0]["name"] == "b0"
    assert plans["b1"]["upstreams"] == ["a0", "a1", "b0"]
    assert plans["a1"]["digest"] == staging.stage_digest(layouts[0]["stages"][1]) != manifest["digest"]


def test_stage_only_off_and_tensor_parallel_nodes_get_the_whole_model():
    manifest = fixture_manifest()
    layouts = [{"pp_size": 2, "partition": "", "stages": staging.stages(manifest, INDEX, CONFIG, 2)}]
    plans = staging.host_plans(nodes(("a0", 2, 2, 0), ("a1", 2, 2, 1)), "a0", manifest, layouts, stage_only=False)
    assert all(plan["whole"] and plan["digest"] == manifest["digest"] for plan in plans.values())
    tp = staging.host_plans(nodes(("t0", 2, 1, 0), ("t1", 2, 1, 1)), "t0", manifest, [])
    assert tp["t1"]["whole"] and len(tp["t1"]["files"]) == len(manifest["entries"])


def test_a_staging_host_outside_the_play_is_refused():
    with pytest.raises(staging.StagingError, match="the staging host x is not one of the play's vLLM hosts"):
        staging.host_plans(nodes(("a0", 1, 1, 0)), "x", fixture_manifest(), [])
