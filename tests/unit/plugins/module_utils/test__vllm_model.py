# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_vllm_model.py: the tree digest, checked against coreutils, and config.json fields.

The config fixture is the one scripts/lab/vllm_model.py writes (see fixtures/vllm/README.md).
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import (
    ModelDirError,
    model_config,
    model_files,
    read_model_config,
    sha256sum_line,
    tree_digest,
    tree_size,
)

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"
TINY_CONFIG = FIXTURES / "tiny-llama-config.json"
COREUTILS = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("find", "sed", "sort", "xargs", "sha256sum")),
    reason="needs GNU coreutils, find and sed",
)


def coreutils_digest(root, follow=False):
    """The documented pipeline, run by the shell: find | sed | LC_ALL=C sort | xargs sha256sum | sha256sum."""
    find = "find -L ." if follow else "find ."
    pipeline = f"cd '{root}' && {find} -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum"
    out = subprocess.run(["sh", "-c", pipeline], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


def model_tree(root):
    """A model-like tree whose names sort differently by bytes and by locale or case-folding."""
    (root / "tokenizer" / "sub").mkdir(parents=True)
    shutil.copy(TINY_CONFIG, root / "config.json")
    (root / "model-00001-of-00002.safetensors").write_bytes(bytes(range(256)) * 64)
    (root / "model-00002-of-00002.safetensors").write_bytes(b"\x00" * 5000)
    (root / "Model.safetensors.index.json").write_text('{"weight_map": {}}\n')
    (root / "tokenizer.json").write_text("{}")
    (root / "tokenizer-extra").write_text("dash sorts before dot and slash\n")
    (root / "tokenizer" / "sub" / "vocab.txt").write_text("a\nb\n")
    (root / "_empty").write_bytes(b"")
    return root


@COREUTILS
def test_tree_digest_equals_the_coreutils_pipeline(tmp_path):
    root = model_tree(tmp_path / "model")
    assert tree_digest(str(root)) == coreutils_digest(root)


@COREUTILS
def test_in_tree_symlinks_are_hashed_like_find_L(tmp_path):
    root = model_tree(tmp_path / "model")
    os.symlink("tokenizer.json", root / "tokenizer.link.json")
    os.symlink("../../config.json", root / "tokenizer" / "sub" / "config.json")
    assert tree_digest(str(root)) == coreutils_digest(root, follow=True)
    assert tree_digest(str(root)) != coreutils_digest(root)


@COREUTILS
def test_odd_names_are_escaped_as_sha256sum_escapes_them(tmp_path):
    root = tmp_path / "model"
    root.mkdir()
    names = ["back\\slash", "new\nline", "carriage\rreturn", "plain"]
    for name in names:
        (root / name).write_text(name)
    ordered = sorted(names, key=os.fsencode)
    out = subprocess.run(["sha256sum", *ordered], cwd=root, capture_output=True, check=True).stdout
    expected = subprocess.run(["sha256sum"], input=out, capture_output=True, check=True).stdout.split()[0]
    assert tree_digest(str(root)) == expected.decode()
    assert sha256sum_line("ab" * 32, "back\\slash").startswith(b"\\abab")


def test_files_are_sorted_by_bytes_with_sizes(tmp_path):
    root = model_tree(tmp_path / "model")
    files = model_files(str(root))
    assert [rel for rel, _full, _size in files] == [
        "Model.safetensors.index.json",
        "_empty",
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer-extra",
        "tokenizer.json",
        "tokenizer/sub/vocab.txt",
    ]
    assert tree_size(files) == (8, 19 + 0 + TINY_CONFIG.stat().st_size + 16384 + 5000 + 32 + 2 + 4)


def test_digest_changes_with_one_byte_and_with_a_rename(tmp_path):
    root = model_tree(tmp_path / "model")
    before = tree_digest(str(root))
    (root / "tokenizer.json").write_text("{ }")
    changed = tree_digest(str(root))
    (root / "tokenizer.json").rename(root / "tokenizer2.json")
    assert len({before, changed, tree_digest(str(root))}) == 3


def test_fifo_is_skipped_as_find_type_f_skips_it(tmp_path):
    root = model_tree(tmp_path / "model")
    before = tree_digest(str(root))
    os.mkfifo(root / "pipe")
    assert tree_digest(str(root)) == before


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda root, out: os.symlink(out / "weights.bin", root / "model.safetensors"), "outside"),
        (lambda root, out: os.symlink(out, root / "blobs"), "to a directory"),
        (lambda root, out: os.symlink("tokenizer", root / "tok"), "to a directory"),
        (lambda root, out: os.symlink("absent.bin", root / "dangling.bin"), "cannot read"),
    ],
    ids=["file-outside", "dir-outside", "dir-inside", "dangling"],
)
def test_links_that_leave_or_loop_are_refused(tmp_path, make, words):
    root = model_tree(tmp_path / "model")
    outside = tmp_path / "blobs"
    outside.mkdir()
    (outside / "weights.bin").write_bytes(b"w")
    make(root, outside)
    with pytest.raises(ModelDirError, match=words):
        tree_digest(str(root))


def test_hf_cache_snapshot_error_says_how_to_copy_it(tmp_path):
    blobs = tmp_path / "models--org--m" / "blobs"
    snapshot = tmp_path / "models--org--m" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (blobs / "f00d").write_text("{}")
    os.symlink("../../blobs/f00d", snapshot / "config.json")
    with pytest.raises(ModelDirError) as exc:
        model_files(str(snapshot))
    assert str(snapshot / "config.json") in str(exc.value)
    assert "--local-dir" in str(exc.value)


def test_read_model_config_of_the_lab_model(tmp_path):
    shutil.copy(TINY_CONFIG, tmp_path / "config.json")
    assert read_model_config(str(tmp_path)) == {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 2048,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
        "dtype": "float32",
        "quantization": None,
    }


def test_missing_config_names_the_directory(tmp_path):
    with pytest.raises(ModelDirError) as exc:
        read_model_config(str(tmp_path))
    assert str(tmp_path) in str(exc.value)
    assert "needs the config.json" in str(exc.value)


@pytest.mark.parametrize("text, words", [("{not json", "is not JSON"), ("[1, 2]", "holds a JSON list")])
def test_unreadable_config_is_an_error(tmp_path, text, words):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ModelDirError, match=words):
        read_model_config(str(tmp_path))


def test_transformers_defaults_fill_missing_fields():
    # A transformers 4 config: torch_dtype, no head_dim, no num_key_value_heads, tie by default.
    config = model_config(
        {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "torch_dtype": "bfloat16"}
    )
    assert config["num_key_value_heads"] == 32
    assert config["head_dim"] == 128
    assert config["dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is True
    assert config["num_hidden_layers"] is None


def test_text_config_and_quantization_method():
    config = model_config(
        {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": {"num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32, "head_dim": 128},
            "quantization_config": {"quant_method": "awq", "bits": 4},
        }
    )
    assert config["model_type"] == "gemma3"
    assert config["num_hidden_layers"] == 62
    assert config["head_dim"] == 128
    assert config["quantization"] == "awq"


def test_root_may_itself_be_a_link(tmp_path):
    # /srv/models/current -> llama-v2 is how operators switch models; only links below the root are checked.
    root = model_tree(tmp_path / "llama-v2")
    os.symlink(root, tmp_path / "current")
    assert tree_digest(str(tmp_path / "current")) == tree_digest(str(root))
