# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generate plugins/module_utils/_vllm_flags_<version>.py from vLLM's own `vllm serve` parser.

Run it with the Python of a virtual environment where vLLM is installed (no GPU needed: the
parser is argparse). It builds the parser exactly as `vllm serve` does
(vllm/entrypoints/cli/serve.py: ServeSubcommand.subparser_init, which calls make_arg_parser on
a FlexibleArgumentParser) and walks its actions. Every long option becomes one catalogue entry:
its type as a `vllm serve --config` YAML value must have it, its choices, its short aliases and
whether argparse.BooleanOptionalAction gave it a --no-X form.

    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_TARGET_DEVICE=cpu \\
        /path/to/vllm-venv/bin/python scripts/vllm_catalogue.py \\
        --source vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl --ruff .venv/bin/ruff

docs/vllm-flags.md has the exact commands used for the shipped catalogues.
"""

import argparse
import json
import os
import re
import subprocess
import sys

# Names vLLM does not have that operators copy from blog posts and old releases. Each entry says
# why it is gone (a clause appended to "vLLM <version> has no 'X'") and what to use instead.
# A name that the version's parser does have is dropped from that version's table, and every
# --flag a fix names must exist in that version's parser (checked at generation time).
REMOVED = {
    # V0's CacheConfig.swap_space went with the V0 engine; V1 (vllm/v1/core/sched/scheduler.py)
    # recomputes preempted requests. Host-RAM KV lives in vllm/config/cache.py: kv_offloading_*.
    "swap-space": (
        " (the V0 engine's CPU swap space went with V0; V1 recomputes preempted requests)",
        "drop it; to keep KV cache in host RAM use --kv-offloading-size (GiB) with --kv-offloading-backend native",
    ),
    # Ray became an executor backend (vllm/config/parallel.py: distributed_executor_backend);
    # --worker-use-ray was deprecated in 0.4 and removed.
    "worker-use-ray": (
        " (removed after vLLM 0.4)",
        "use --distributed-executor-backend ray (or mp, the default, which needs no Ray)",
    ),
    # Tokenizer pools were a V0 feature (vllm/transformers_utils/tokenizer_group), removed with V0.
    "tokenizer-pool-size": (
        " (tokenizer pools were removed with the V0 engine)",
        "drop it; V1 tokenizes in the API server process, scale with --api-server-count",
    ),
    "tokenizer-pool-type": (
        " (tokenizer pools were removed with the V0 engine)",
        "drop it; V1 tokenizes in the API server process, scale with --api-server-count",
    ),
    "tokenizer-pool-extra-config": (
        " (tokenizer pools were removed with the V0 engine)",
        "drop it; V1 tokenizes in the API server process, scale with --api-server-count",
    ),
    # Never in vLLM (vllm/engine/arg_utils.py, any release).
    "tokenizer-cache-size": (
        " (it never had a tokenizer cache flag)",
        "drop it; the tokenizer is loaded once per API server process; prefix reuse is --enable-prefix-caching",
    ),
    "tokenizer-cache-ttl": (
        " (it never had a tokenizer cache flag)",
        "drop it; the tokenizer is loaded once per API server process; prefix reuse is --enable-prefix-caching",
    ),
    # Expert parallelism is a switch: the EP group is the TP x DP group (vllm/config/parallel.py,
    # enable_expert_parallel).
    "expert-parallel-size": (
        " (it never had one)",
        "use --enable-expert-parallel; the expert-parallel size is tensor-parallel-size x data-parallel-size",
    ),
    "moe-expert-parallel-size": (
        " (it never had one)",
        "use --enable-expert-parallel; the expert-parallel size is tensor-parallel-size x data-parallel-size",
    ),
    "moe-enable-expert-parallelism": (
        " (it never had one)",
        "use --enable-expert-parallel",
    ),
    # The router's top-k and the expert count are model architecture, read from config.json.
    "moe-top-k": (
        " (it never had one)",
        "drop it; experts per token come from the model's config.json (num_experts_per_tok); "
        "override only with --hf-overrides",
    ),
    "moe-num-experts-per-token": (
        " (it never had one)",
        "drop it; experts per token come from the model's config.json (num_experts_per_tok); "
        "override only with --hf-overrides",
    ),
    "moe-num-experts": (
        " (it never had one)",
        "drop it; the expert count comes from the model's config.json",
    ),
    "moe-router-type": (
        " (it never had one)",
        "drop it; the router is part of the model implementation; kernels are chosen with --moe-backend",
    ),
    "moe-enable-expert-caching": (
        " (it never had an expert cache)",
        "drop it; all experts stay resident; balance hot experts with --enable-eplb",
    ),
    "moe-expert-cache-size": (
        " (it never had an expert cache)",
        "drop it; all experts stay resident; balance hot experts with --enable-eplb",
    ),
    "moe-cache-type": (
        " (it never had an expert cache)",
        "drop it; all experts stay resident; balance hot experts with --enable-eplb",
    ),
    # Never in vLLM; weights may be offloaded to host RAM, not pinned by size.
    "pinned-weight-memory-gb": (
        " (it never had one)",
        "drop it; to put part of the weights in host RAM use --cpu-offload-gb",
    ),
    # The scheduler's chunk size is the token budget per step (vllm/config/scheduler.py).
    "chunked-prefill-size": (
        " (that is SGLang's flag)",
        "use --max-num-batched-tokens (the per-step token budget that chunked prefill splits prompts to)",
    ),
    # Profiling is configured, not switched on with a bare flag (vllm/config/profiler.py).
    "profile": (
        " (serve has no bare profiling switch)",
        "use --profiler-config (e.g. {profiler: torch, torch_profiler_dir: /tmp/trace}) "
        "and the /start_profile and /stop_profile endpoints",
    ),
    "numa-node": (
        " (it never had one)",
        "use --numa-bind with --numa-bind-nodes",
    ),
    # Request logging became opt-in (--enable-log-requests); 0.33's EnableDisableAction accepts
    # --disable-log-requests again as its inverse, so this entry drops out of 0.33's table.
    "disable-log-requests": (
        " (request logging is off by default; the flag was removed)",
        "drop it (turn logging on with --enable-log-requests)",
    ),
    # EngineArgs keywords from blog posts that EngineArgs never had.
    "enable-cuda-graph": (
        " (CUDA graphs are on by default)",
        "drop it; --enforce-eager turns them off, --compilation-config tunes them",
    ),
    "cuda-graph-max-seq-len": (
        " (it never had one)",
        "use --compilation-config with max_cudagraph_capture_size (tokens per step)",
    ),
    "max-seq-len-to-capture": (
        " (removed in favour of the compilation config)",
        "use --compilation-config with max_cudagraph_capture_size",
    ),
    "scheduler-max-num-batched-tokens": (
        " (it never had one)",
        "use --max-num-batched-tokens",
    ),
    "all-reduce-implementation": (
        " (it never had one)",
        "drop it; all-reduce is NCCL with vLLM's custom kernels inside a node; "
        "--disable-custom-all-reduce forces plain NCCL",
    ),
    "nccl-comm-timeout": (
        " (it never had one)",
        "drop it; set the NCCL/torch.distributed environment instead",
    ),
}

# Flags vLLM reads in a form that folds case and dashes before comparing with its choices
# (e.g. --moe-backend uses type=lambda s: s.lower().replace("-", "_")).
_FOLD_PROBE = "Ab-C"


def _inner_type(func):
    """Unwrap vllm.engine.arg_utils.optional_type/parse_type closures to the callable they wrap."""
    while getattr(func, "__name__", "") in ("_optional_type", "_parse_type") and func.__closure__:
        cells = dict(zip(func.__code__.co_freevars, func.__closure__))
        if "return_type" not in cells:
            break
        func = cells["return_type"].cell_contents
    return func


# vllm.engine.arg_utils and vllm.utils.argparse_utils parse functions, by __name__.
_SCALARS = {
    "human_readable_int": {"type": "int", "suffix": True},
    "human_readable_int_or_auto": {"type": "int", "suffix": True, "auto": True},
    "loads": {"type": "json"},
    "parse_dataclass": {"type": "json"},
    "union_dict_and_str": {"type": "json", "str": True},
}


def _scalar_type(func):
    if func is int:
        return {"type": "int"}
    if func is float:
        return {"type": "float"}
    return dict(_SCALARS.get(getattr(func, "__name__", ""), {"type": "str"}))


def describe(action):
    """Catalogue entry for one argparse action, as a `vllm serve --config` value."""
    kind = type(action).__name__
    entry = {}
    if isinstance(action, argparse.BooleanOptionalAction):
        entry["type"] = "bool"
    elif kind in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction"):
        entry["type"] = "bool"
    else:
        func = _inner_type(action.type)
        scalar = _scalar_type(func)
        if kind == "_AppendAction":
            # load_config_file turns a YAML list into one --flag with several values, which an
            # append action refuses: the config file can give such a flag one value only.
            entry = dict(scalar, append=True)
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int):
            entry = {"type": "list", "elem": scalar["type"]}
        else:
            entry = scalar
        if action.nargs == "?" and action.const is True:
            entry["bare"] = True
        if isinstance(action.metavar, (list, tuple)):
            # Literal[...] | str: vLLM lists the values it knows in the metavar but accepts any string.
            entry["known"] = sorted(str(m) for m in action.metavar if m is not None)
        if action.choices is not None:
            # An optional Literal adds None to its choices: a YAML null, which the validator drops.
            choices = [c for c in action.choices if c is not None]
            entry["choices"] = sorted(choices, key=lambda c: (str(type(c)), c))
            if callable(action.type) and getattr(action.type, "__name__", "") == "<lambda>":
                try:
                    folded = action.type(_FOLD_PROBE)
                except Exception:  # a probe: any failure means no folding
                    folded = None
                if folded == "ab_c":
                    entry["fold"] = True
    return entry


def spellings(parser, action):
    """All option strings that reach the action, hidden ones included.

    vLLM 0.33's EnableDisableAction pairs --enable-X with --disable-X and hides --no-enable-X from
    action.option_strings, but the parser still accepts it: the parser's own index is the truth.
    """
    return sorted(s for s, a in parser._option_string_actions.items() if a is action)


def negatives_of(action, strings):
    negative = getattr(action, "negative_option_strings", None)
    if negative is None:
        if not isinstance(action, argparse.BooleanOptionalAction):
            return set()
        negative = {s for s in strings if s.startswith("--no-")}
    return set(negative) & set(strings)


def long_name(action, negatives):
    # argparse's own order: the first long option string given to add_argument is the name.
    longs = [s for s in action.option_strings if s.startswith("--") and s not in negatives]
    return longs[0][2:] if longs else None


def build_parser(device_type=None):
    if device_type:
        # A CUDA wheel cannot load its CUDA platform without libcuda. With VLLM_TARGET_DEVICE=cpu it
        # loads the CPU platform instead; the parser only asks that platform for its device type
        # (the --mm-processor-device choices), so that is all that is overridden.
        from vllm.platforms import current_platform  # noqa: PLC0415 - vLLM exists only in its venv

        current_platform.device_type = device_type

    from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers()
    return ServeSubcommand().subparser_init(subparsers)


def walk(parser):
    flags = {}
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
                continue
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            strings = spellings(current, action)
            negatives = negatives_of(action, strings)
            name = long_name(action, negatives)
            if name is None:
                continue
            entry = describe(action)
            aliases = [s for s in strings if s != "--" + name and s not in negatives]
            if aliases:
                entry["aliases"] = aliases
            if negatives:
                entry["negatives"] = sorted(s[2:] for s in negatives)
            flags[name] = entry
    return flags


def check_removed(flags, version):
    removed = {}
    spelled = set(flags)
    for entry in flags.values():
        spelled.update(alias.lstrip("-") for alias in entry.get("aliases", ()))
        spelled.update(entry.get("negatives", ()))
    for name, (reason, fix) in sorted(REMOVED.items()):
        if name in spelled:  # e.g. 0.33 accepts --disable-log-requests again, as --enable-log-requests' inverse
            continue
        for named in re.findall(r"--([a-z0-9][a-z0-9-]*)", fix):
            if named not in flags:
                raise SystemExit(f"REMOVED[{name!r}] names --{named}, which vLLM {version} does not have")
        removed[name] = {"reason": reason, "fix": fix}
    return removed


def render(version, source, flags, removed, device_type=None):
    lines = [
        "# -*- coding: utf-8 -*-",
        "# Copyright: gpufleet.inference contributors",
        "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)",
        "# GENERATED by scripts/vllm_catalogue.py: do not edit. Regenerate it (docs/vllm-flags.md).",
        f"# Source: {source}",
    ]
    if device_type:
        lines.append(f"# Parser built on vLLM's CPU platform with its device_type set to {device_type!r}: the wheel's")
        lines.append(
            "# own platform needs libcuda, absent where this was generated; only --mm-processor-device reads it."
        )
    lines += [
        f'"""vLLM {version} `vllm serve` flags, from its own argument parser (docs/vllm-flags.md)."""',
        "",
        "from __future__ import absolute_import, division, print_function",
        "",
        "__metaclass__ = type",
        "",
        "CATALOGUE = {",
        f'    "version": {json.dumps(version)},',
        f'    "source": {json.dumps(source)},',
        '    "flags": {',
    ]
    for name in sorted(flags):
        lines.append(f"        {json.dumps(name)}: {_py(flags[name])},")
    lines.append("    },")
    lines.append('    "removed": {')
    for name in sorted(removed):
        lines.append(f"        {json.dumps(name)}: {_py(removed[name])},")
    lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _py(value):
    """A Python literal with double-quoted strings, sorted keys, one line."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)}: {_py(value[key])}" for key in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py(item) for item in value) + "]"
    if isinstance(value, str):
        # Long strings become implicit concatenations that ruff format wraps within 120 columns.
        chunks, line = [], ""
        for word in re.split(r"(?<= )", value):
            if line and len(line) + len(word) > 80:
                chunks.append(line)
                line = ""
            line += word
        chunks.append(line)
        if len(chunks) == 1:
            return json.dumps(value)
        return "(" + " ".join(json.dumps(chunk) for chunk in chunks) + ")"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise TypeError(f"cannot render {value!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="the wheel the installed vLLM came from, for the header")
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "plugins", "module_utils"))
    parser.add_argument("--ruff", help="ruff binary: format the result with the repository's ruff.toml")
    parser.add_argument("--device-type", help="the platform's device type where it cannot be loaded here (cuda)")
    args = parser.parse_args()

    import vllm  # noqa: PLC0415

    version = vllm.__version__.split("+")[0]
    flags = walk(build_parser(args.device_type))
    removed = check_removed(flags, version)
    path = os.path.join(args.out_dir, "_vllm_flags_{}.py".format(version.replace(".", "_")))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render(version, args.source, flags, removed, args.device_type))
    if args.ruff:
        subprocess.run([args.ruff, "format", "--quiet", path], check=True)
    print(f"{path}: {len(flags)} flags, {len(removed)} removed/never-existed names", file=sys.stderr)


if __name__ == "__main__":
    main()
