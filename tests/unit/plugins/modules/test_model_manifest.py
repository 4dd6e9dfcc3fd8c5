# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the model_manifest module, on a sharded model directory built in tmp_path."""

import json

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import tree_digest
from ansible_collections.gpufleet.inference.plugins.modules import model_manifest

WEIGHT_MAP = {
    "model.embed_tokens.weight": "model-00001-of-00003.safetensors",
    "model.layers.0.mlp.weight": "model-00001-of-00003.safetensors",
    "model.layers.1.mlp.weight": "model-00002-of-00003.safetensors",
    "model.layers.2.mlp.weight": "model-00002-of-00003.safetensors",
    "model.layers.3.mlp.weight": "model-00003-of-00003.safetensors",
    "model.norm.weight": "model-00003-of-00003.safetensors",
    "lm_head.weight": "model-00003-of-00003.safetensors",
}


@pytest.fixture
def model(tmp_path):
    root = tmp_path / "model.source"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "tie_word_embeddings": False}))
    (root / "tokenizer.json").write_text("{}")
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": WEIGHT_MAP}))
    for n in (1, 2, 3):
        (root / f"model-0000{n}-of-00003.safetensors").write_bytes(bytes([n]) * 1000 * n)
    return root


def test_the_manifest_is_written_beside_the_model_and_kept_after(run_module, model):
    first = run_module(model_manifest, {"path": str(model)})
    assert first["changed"] and first["digest"] == "sha256:" + tree_digest(str(model))
    written = json.loads((model.parent / "model.source.manifest.json").read_text())
    assert written["digest"] == first["digest"] and written["source"] == str(model)
    again = run_module(model_manifest, {"path": str(model)})
    assert not again["changed"] and again["digest"] == first["digest"]
    # A file of another size makes it stale: it is read again.
    (model / "tokenizer.json").write_text('{"changed": true}')
    assert run_module(model_manifest, {"path": str(model)})["changed"]


def test_check_mode_writes_nothing(run_module, model):
    result = run_module(model_manifest, {"path": str(model)}, check_mode=True)
    assert result["changed"] and not (model.parent / "model.source.manifest.json").exists()


def test_a_source_that_is_not_the_named_model_fails(run_module, model):
    result = run_module(model_manifest, {"path": str(model), "checksum": "sha256:" + "0" * 64}, failed=True)
    assert "not vllm_model_checksum=sha256:000" in result["msg"] and result["digest"].startswith("sha256:")


def test_two_stages_are_planned_with_their_own_index(run_module, model):
    result = run_module(model_manifest, {"path": str(model), "layouts": [{"pp_size": 2}]})
    first, last = result["layouts"][0]["stages"]
    assert [f["path"] for f in first["files"] if f["path"].endswith(".safetensors")] == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
    ]
    assert [f["path"] for f in last["files"] if f["path"].endswith(".safetensors")] == [
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    own = json.loads(last["generated"]["model.safetensors.index.json"]["content"])
    assert "model.embed_tokens.weight" not in own["weight_map"] and "lm_head.weight" in own["weight_map"]
    assert first["digest"] != last["digest"] != result["digest"]


def test_a_missing_directory_fails_with_its_path(run_module, tmp_path):
    result = run_module(model_manifest, {"path": str(tmp_path / "nowhere")}, failed=True)
    assert "nowhere is not a directory" in result["msg"]
