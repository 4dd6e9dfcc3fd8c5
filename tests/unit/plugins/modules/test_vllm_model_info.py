# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the vllm_model_info module, run against model directories built in tmp_path."""

import shutil
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import tree_digest
from ansible_collections.gpufleet.inference.plugins.modules import vllm_model_info

TINY_CONFIG = Path(__file__).parents[1] / "module_utils" / "fixtures" / "vllm" / "tiny-llama-config.json"


@pytest.fixture
def model(tmp_path):
    root = tmp_path / "tiny-llama"
    root.mkdir()
    shutil.copy(TINY_CONFIG, root / "config.json")
    (root / "model.safetensors").write_bytes(b"\x01" * 1000)
    return root


def test_model_directory_is_described(run_module, model):
    result = run_module(vllm_model_info, {"path": str(model)})
    assert result["changed"] is False
    assert result["exists"] is True
    assert result["digest"] == "sha256:" + tree_digest(str(model))
    assert result["files"] == 2
    assert result["size_bytes"] == 1000 + TINY_CONFIG.stat().st_size
    assert result["config"]["num_hidden_layers"] == 4
    assert result["config"]["num_key_value_heads"] == 2
    assert result["config"]["architectures"] == ["LlamaForCausalLM"]


def test_digest_false_skips_hashing(run_module, model):
    result = run_module(vllm_model_info, {"path": str(model), "digest": False})
    assert result["digest"] is None
    assert result["files"] == 2
    assert result["config"]["hidden_size"] == 128


def test_check_mode_reads_the_same(run_module, model):
    result = run_module(vllm_model_info, {"path": str(model), "_ansible_check_mode": True})
    assert result["changed"] is False
    assert result["digest"] == "sha256:" + tree_digest(str(model))


def test_missing_directory_is_reported_not_failed(run_module, tmp_path):
    result = run_module(vllm_model_info, {"path": str(tmp_path / "absent")})
    assert result.get("failed") is not True
    assert result["changed"] is False
    assert result["exists"] is False
    assert result["digest"] is None
    assert result["config"] == {}


def test_directory_without_config_fails_naming_it(run_module, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"w")
    result = run_module(vllm_model_info, {"path": str(tmp_path)}, failed=True)
    assert result["failed"] is True
    assert str(tmp_path) in result["msg"]
    assert "vLLM model directory needs the config.json" in result["msg"]


def test_file_instead_of_directory_fails(run_module, tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    result = run_module(vllm_model_info, {"path": str(path)}, failed=True)
    assert "is not a directory" in result["msg"]


def test_link_leaving_the_directory_fails_with_a_fix(run_module, tmp_path, model):
    (tmp_path / "blob").write_bytes(b"w")
    (model / "extra.bin").symlink_to(tmp_path / "blob")
    result = run_module(vllm_model_info, {"path": str(model)}, failed=True)
    assert "outside" in result["msg"]
    assert "cp -rL" in result["msg"]
