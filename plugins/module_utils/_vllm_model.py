# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Identity and shape of a Hugging Face model directory, as vLLM loads it.

- The tree digest names the exact bytes every node of a multi-node vLLM deployment must hold: the
  sha256 over the lines ``<sha256 hex>  <relative posix path>\\n`` of every regular file under
  the root, sorted by the bytes of the path. It equals
  ``cd ROOT && find . -type f | sed 's|^\\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum``
  for file names without whitespace or quotes (xargs splits those); names holding a backslash,
  a newline or a carriage return are escaped the way GNU sha256sum escapes them.
- Symbolic links are followed when they resolve to a regular file inside the root; the file is
  hashed under the link's own path. A link that leaves the root, a dangling link and a link to a
  directory are errors: the digest must not depend on files outside the directory being named.
  A Hugging Face cache snapshot (snapshots/<rev>/ linking into ../../blobs) is such a tree; copy
  it out with ``hf download --local-dir DIR`` or ``cp -rL``. Sockets, FIFOs and devices are
  skipped, as ``find -type f`` skips them.
- config.json is the file vLLM reads first (vllm/transformers_utils/config.py, get_config). The
  fields a planner needs follow transformers' PretrainedConfig: ``num_key_value_heads`` defaults
  to ``num_attention_heads`` and ``head_dim`` to ``hidden_size // num_attention_heads``
  (transformers models/llama/configuration_llama.py); transformers 5 writes ``dtype`` where 4.x
  wrote ``torch_dtype``. Multimodal configs keep the language model's fields in ``text_config``
  (Llama 4, Gemma 3, Qwen2-VL), which is where the pipeline-parallel split happens.

Everything here is pure but for reading files; Python 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat

CONFIG_NAME = "config.json"
CHUNK = 1 << 20
# The config.json fields returned, in the order documented by the module.
CONFIG_FIELDS = (
    "architectures",
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
)


class ModelDirError(Exception):
    """A model directory that cannot be read as vLLM would need it."""


def _within(root_real, path_real):
    return path_real == root_real or path_real.startswith(root_real.rstrip(os.sep) + os.sep)


def model_files(root):
    """Return [(relative posix path, absolute path, size)] for every file under root, sorted as LC_ALL=C sort.

    Raises ModelDirError for symlinks that leave the root, dangling links and links to directories.
    """
    root_real = os.path.realpath(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                raise ModelDirError(
                    "%s is a symbolic link to a directory; a model directory may only link to files inside it" % full
                )
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not _within(root_real, target):
                    raise ModelDirError(
                        "%s links to %s, outside %s; copy the model with hf download --local-dir or cp -rL so that"
                        " the directory holds its own files" % (full, target, root)
                    )
            try:
                info = os.stat(full)
            except OSError as exc:
                raise ModelDirError("cannot read %s: %s" % (full, exc)) from exc
            if not stat.S_ISREG(info.st_mode):
                if stat.S_ISDIR(info.st_mode):
                    raise ModelDirError(
                        "%s is a symbolic link to a directory; a model directory may only link to files inside it"
                        % full
                    )
                continue
            found.append((rel, full, info.st_size))
    found.sort(key=lambda item: os.fsencode(item[0]))
    return found


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256sum_line(hexdigest, rel):
    """One line of GNU sha256sum output, as bytes, escaped as coreutils escapes odd names."""
    name = os.fsencode(rel)
    if b"\\" in name or b"\n" in name or b"\r" in name:
        name = name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r")
        return b"\\" + hexdigest.encode("ascii") + b"  " + name + b"\n"
    return hexdigest.encode("ascii") + b"  " + name + b"\n"


def tree_digest(root, files=None):
    """Return the hex sha256 tree digest of root (see the module docstring); files from model_files() may be reused."""
    if files is None:
        files = model_files(root)
    digest = hashlib.sha256()
    for rel, full, _size in files:
        digest.update(sha256sum_line(file_sha256(full), rel))
    return digest.hexdigest()


def tree_size(files):
    """Return (file count, total bytes) of a model_files() list."""
    return len(files), sum(size for _rel, _full, size in files)


def model_config(config):
    """Return the planner's view of a parsed config.json (a dict)."""
    text = config.get("text_config")
    text = text if isinstance(text, dict) else {}

    def field(name):
        value = config.get(name)
        return text.get(name) if value is None else value

    result = dict((name, field(name)) for name in CONFIG_FIELDS)
    if result["num_key_value_heads"] is None:
        result["num_key_value_heads"] = result["num_attention_heads"]
    if result["head_dim"] is None and result["hidden_size"] and result["num_attention_heads"]:
        result["head_dim"] = result["hidden_size"] // result["num_attention_heads"]
    dtype = field("dtype")
    result["dtype"] = field("torch_dtype") if dtype is None else dtype
    if result["tie_word_embeddings"] is None:
        # PretrainedConfig's default.
        result["tie_word_embeddings"] = True
    quant = field("quantization_config")
    result["quantization"] = quant.get("quant_method") if isinstance(quant, dict) else None
    return result


def read_model_config(root):
    """Read root/config.json and return model_config() of it; ModelDirError when it is missing or not JSON."""
    path = os.path.join(root, CONFIG_NAME)
    if not os.path.isfile(path):
        raise ModelDirError(
            "%s has no %s; a vLLM model directory needs the config.json of a Hugging Face model"
            " (hf download MODEL --local-dir %s fetches one)" % (root, CONFIG_NAME, root)
        )
    try:
        with open(path, "rb") as handle:
            config = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError) as exc:
        raise ModelDirError("cannot read %s: %s" % (path, exc)) from exc
    except ValueError as exc:
        raise ModelDirError("%s is not JSON: %s" % (path, exc)) from exc
    if not isinstance(config, dict):
        raise ModelDirError("%s holds a JSON %s; a model config is an object" % (path, type(config).__name__))
    return model_config(config)
