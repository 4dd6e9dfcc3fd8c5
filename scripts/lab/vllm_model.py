"""Build a tiny random-weight Llama model directory that vLLM serves, and HF reference outputs for it.

The lab's vLLM roles need a model that every node can hold, that loads in seconds on CPU, and
whose output can be checked: greedy decoding is deterministic, so vLLM's temperature-0 tokens
must equal those of Hugging Face transformers' generate() on the same weights. Nothing comes
from the Hub: the weights are drawn from a fixed seed and the tokenizer is trained here, on text
this script generates, so the directory is byte-for-byte the same on every run.

    python scripts/lab/vllm_model.py build OUTDIR
    python scripts/lab/vllm_model.py reference OUTDIR --prompt "The cluster" --max-tokens 16

The python needs torch, transformers, tokenizers and safetensors (a vLLM venv has them all);
they are imported inside the functions, so the lab and ruff can load this file without them.
Both commands print one JSON document on standard output and nothing else (vllm_assets.py and
molecule/vllm parse it): progress, and whatever those libraries write, goes to standard error.

The model: LlamaForCausalLM, hidden 128, intermediate 256, 4 layers, 4 heads, 2 KV heads
(head_dim 32), 512 positions, untied embeddings, float32, about 1.1 M parameters, saved in shards
of at most 1 MB with their model.safetensors.index.json. The tokenizer:
byte-level BPE of 2048 tokens whose alphabet is printable ASCII, so every token decodes to
ASCII text and decoded texts compare exactly (a full 256-byte alphabet lets a random model emit
half UTF-8 sequences that incremental and whole-sequence detokenizers render differently).
Characters outside that alphabet are dropped when a prompt is encoded.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path

from _stdout import stdout_to_stderr

REPO = Path(__file__).resolve().parents[2]
# The digest has one implementation, the collection's: imported as a module from its folder.
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
import _vllm_model  # noqa: E402

SEED = 20261130
VOCAB_SIZE = 2048
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 4
HEADS = 4
KV_HEADS = 2
MAX_POSITIONS = 512
# Weights are N(0, 0.02) like transformers' initializer_range, but lm_head gets a wider spread:
# logits then differ by whole units, so float32 rounding differences between vLLM's CPU kernels
# and transformers' cannot flip a greedy argmax.
INIT_STD = 0.02
SHARD_SIZE = "1MB"
LM_HEAD_STD = 0.5
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
# vLLM renders chat requests with this template and tokenises the result without special tokens
# (the template holds the BOS itself), as for Llama 3's template.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TEXT = """\
A cluster of inference nodes serves one model. Each node holds the same weights, and the
coordinator splits the layers between them: pipeline parallel stages pass activations over the
fabric, tensor parallel ranks exchange partial sums with NCCL. The operator checks the digest of
the model directory on every host before the service starts, because a single changed byte in a
shard would make the replies differ from node to node.
"""
SYLLABLES = (
    "ka ri to ne mu sa lo vi de pa gu fe zo ha ji bu ce wa ti no ra me si ku ya po le di mo fa tu "
    "ge qu xe zi an el in on ur ast ent ion ing est ork ack ump ild ess"
).split()


def corpus() -> list[str]:
    """Deterministic training text: prose, every printable ASCII character, numbers and made-up words."""
    rng = random.Random(SEED)
    lines = [*TEXT.splitlines(), string.printable, " ".join(str(n) for n in range(0, 1000, 7))]
    for _unused in range(3000):
        words = [
            "".join(rng.choice(SYLLABLES) for _unused in range(rng.randint(1, 4)))
            for _unused2 in range(rng.randint(4, 12))
        ]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice((".", ",", "!", "?", ":", ";")))
    return lines


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: PLC0415

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS, PAD], show_progress=False, min_frequency=1
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        sys.exit(f"vllm_model: the tokenizer has {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def log(msg: str) -> None:
    print(f"vllm_model: {msg}", file=sys.stderr, flush=True)


def build(out: Path) -> dict:
    log("training the tokenizer")
    import torch  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: PLC0415

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
    )
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    # Draw every weight here, in name order, so the values do not depend on transformers' init code.
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                std = LM_HEAD_STD if name == "lm_head.weight" else INIT_STD
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32) * std)
    if out.exists() and any(out.iterdir()):
        sys.exit(f"vllm_model: {out} is not empty; build into a new directory so that no stale file joins the digest")
    out.mkdir(parents=True, exist_ok=True)
    log(f"writing {out}")
    # Sharded like a real checkpoint (model.safetensors.index.json and several shards, one layer
    # split across two of them), so that a pipeline stage's node can hold only its own shards.
    model.save_pretrained(out, safe_serialization=True, max_shard_size=SHARD_SIZE)
    tokenizer.save_pretrained(out)
    # save_pretrained writes the weights through a private temporary file (mode 0600); a vLLM
    # service running as its own user must be able to read them.
    for path in out.iterdir():
        path.chmod(0o644)

    files = _vllm_model.model_files(str(out))
    return {
        "path": str(out),
        "digest": "sha256:" + _vllm_model.tree_digest(str(out), files),
        "files": [rel for rel, _full, _size in files],
        "num_hidden_layers": LAYERS,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def reference(model_dir: Path, prompt: str, max_tokens: int) -> dict:
    """Greedy generation with transformers on CPU, tokenised as vLLM's /v1/completions tokenises.

    vLLM's completions endpoint encodes the prompt with add_special_tokens=True (its default), so
    the tokenizer's post-processor puts BOS in front; tokenizer(prompt) here does the same. The
    generated ids stop at max_tokens or after EOS, as vLLM's do; the text is decoded with
    skip_special_tokens=True, vLLM's default.
    """
    log(f"greedy generation with transformers on {model_dir}")
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    encoded = tokenizer(prompt, add_special_tokens=True, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(
            **encoded,
            do_sample=False,
            max_new_tokens=max_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    prompt_ids = encoded["input_ids"][0].tolist()
    generated = output[0][len(prompt_ids) :].tolist()
    return {
        "prompt_token_ids": prompt_ids,
        "token_ids": generated,
        "text": tokenizer.decode(generated, skip_special_tokens=True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="write the model directory and print its digest")
    build_cmd.add_argument("outdir", type=Path)
    ref_cmd = commands.add_parser("reference", help="greedy generation with transformers, as JSON")
    ref_cmd.add_argument("model_dir", type=Path)
    ref_cmd.add_argument("--prompt", required=True)
    ref_cmd.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    with stdout_to_stderr():
        if args.command == "build":
            result = build(args.outdir)
        else:
            result = reference(args.model_dir, args.prompt, args.max_tokens)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
