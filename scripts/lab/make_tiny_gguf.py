"""Write a tiny llama-architecture GGUF with random weights and a real vocabulary.

The lab serves this model through llama.cpp RPC: it is big enough to be split across RPC
workers and to produce real tokens, and small enough (about 20 MB) to move through a
container lab in seconds. The text it generates is noise; the tests only need tokens.

Everything comes from the llama.cpp source tarball the roles build: gguf-py (the writer)
and models/ggml-vocab-llama-spm.gguf (a real SentencePiece vocabulary). numpy, PyYAML and
tqdm come from requirements-test.txt.

    python3 scripts/lab/make_tiny_gguf.py --source SRC.tar.gz --tree llama_cpp_python-0.3.36/vendor/llama.cpp \
        --out tiny.gguf

Standard output is one line, `OUT sha256:HEX` (the model file and its digest), and nothing else:
progress, and whatever gguf-py writes, goes to standard error.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tarfile
import tempfile
from pathlib import Path

from _stdout import stdout_to_stderr

VOCAB = "models/ggml-vocab-llama-spm.gguf"
# The shape of the model. Four layers let the coordinator keep some and offload the rest.
N_LAYER = 4
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_CTX = 512
SEED = 20261130


def extract(source: Path, tree: str, dest: Path) -> Path:
    """Extract gguf-py and the vocabulary from the source tarball into dest."""
    wanted = (f"{tree}/gguf-py/", f"{tree}/{VOCAB}")
    with tarfile.open(source) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(wanted) and (m.isfile() or m.isdir())]
        if not members:
            sys.exit(f"make_tiny_gguf: {source} has no {tree}/gguf-py; check --tree")
        archive.extractall(dest, members=members, filter="data")
    return dest / tree


def build(tree: Path, out: Path) -> None:
    sys.path.insert(0, str(tree / "gguf-py"))
    import numpy as np  # noqa: PLC0415 (numpy is only needed here, and gguf-py comes from the tree)
    from gguf import GGUFReader, GGUFValueType, GGUFWriter  # noqa: PLC0415

    vocab = GGUFReader(tree / VOCAB)
    writer = GGUFWriter(out, arch="llama")
    writer.add_name("gpufleet-lab-tiny-llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32

    n_vocab = 0
    for field in vocab.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == GGUFValueType.ARRAY:
            writer.add_key_value(field.name, value, vtype, sub_type=field.types[-1])
            if field.name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(field.name, value, vtype)
    if not n_vocab:
        sys.exit(f"make_tiny_gguf: {VOCAB} has no tokenizer.ggml.tokens")

    rng = np.random.default_rng(SEED)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def norm() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)

    n_embd_kv = N_EMBD // N_HEAD * N_HEAD_KV
    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    for layer in range(N_LAYER):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", norm())
        writer.add_tensor(f"{prefix}.attn_q.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_k.weight", weight(n_embd_kv, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_v.weight", weight(n_embd_kv, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_output.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", norm())
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", weight(n_vocab, N_EMBD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="llama.cpp source tarball")
    parser.add_argument("--tree", required=True, help="path of the llama.cpp tree inside the tarball")
    parser.add_argument("--out", type=Path, required=True, help="GGUF file to write")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with stdout_to_stderr(), tempfile.TemporaryDirectory(prefix="gpufleet-gguf-") as tmp:
        print(f"make_tiny_gguf: writing {args.out} with gguf-py of {args.source}", file=sys.stderr, flush=True)
        tree = extract(args.source, args.tree, Path(tmp))
        partial = args.out.with_suffix(".partial")
        build(tree, partial)
        partial.replace(args.out)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"{args.out} sha256:{digest}")


if __name__ == "__main__":
    main()
