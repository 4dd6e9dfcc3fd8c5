# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model staging plans: the manifest, the files each pipeline stage loads, and who copies from whom.

- The manifest lists every file of a model directory with its size and sha256, and carries the
  tree digest of _vllm_model (``vllm_model_checksum``), which it computes from those lines
  without reading the files again. It is kept beside the directory, as ``<dir>.manifest.json``,
  so that it never joins the digest it records.
- A pipeline-parallel stage loads only its own layers. vLLM splits ``num_hidden_layers`` as
  ``get_pp_indices`` in vllm/distributed/utils.py does: ``VLLM_PP_LAYER_PARTITION`` when set,
  else an even split whose remainder goes to the stages before the last, starting from the
  second to last. A stage needs the shards (``model.safetensors.index.json``'s weight_map) that
  hold a tensor of its layers; the first stage also the input embedding, the last the final
  norm and the output head, and the input embedding too when the head is tied to it (vLLM's
  Llama builds ``embed_tokens`` on the last rank then). A tensor of no known kind goes to every
  stage.
- vLLM refuses a directory whose index names a shard that is not there (weight_utils
  ``filter_duplicate_safetensors_files``: "Weight files referenced in index but missing"), so a
  stage directory carries its own index, limited to its shards. A stage missing a shard of its
  own index still fails to start with that message, never with wrong output.
- The fan-out: every file has a chain, the staging source first and then every host that needs
  that file, in one host order. A host fetches from the host before it in the chain, which
  fetches from the one before, so that files flow down the chain one after another while the
  source sends each file once; the earlier holders and the source are the fallbacks.

Private module_utils; Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_model

SCHEMA = "gpufleet.inference/model-manifest/v1"
INDEX_NAME = "model.safetensors.index.json"
HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
# Files vLLM loads weights from; only the indexed safetensors shards are split by stage and the
# other weight formats stay at the source, since vLLM loads safetensors first when a directory
# has them (default_loader: the first allow pattern with a match wins).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")
LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
EMBEDDING = re.compile(r"(?:^|\.)(?:embed_tokens|wte|word_embeddings|tok_embeddings|embed_in)\.")
HEAD = re.compile(r"(?:^|\.)(?:lm_head|embed_out)\.")
FINAL_NORM = re.compile(r"(?:^|\.)(?:norm|ln_f|final_layernorm|final_layer_norm|final_norm)\.(?:weight|bias)\Z")


# A host tries at most this many earlier holders, its chain predecessor first, and then the source.
FALLBACKS = 3


class StagingError(Exception):
    """A manifest, an index or a layout that cannot be staged."""


def _path_problem(path):
    if not isinstance(path, str) or not path:
        return "a file path must be a non-empty string, not %r" % (path,)
    if path.startswith("/") or "\\" in path or any(ch in path for ch in "\n\r\0"):
        return "the path %r must be relative, with no backslash, newline or NUL" % (path,)
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "the path %r has an empty, '.' or '..' component" % (path,)
    return None


def digest_of(entries):
    """The tree digest (sha256:<hex>) of manifest entries, as _vllm_model.tree_digest computes it from the files."""
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda item: item["path"].encode("utf-8")):
        digest.update(_vllm_model.sha256sum_line(entry["sha256"], entry["path"]))
    return "sha256:" + digest.hexdigest()


def build(root, source=""):
    """Read every file under root once and return its manifest (a dict)."""
    entries = []
    for rel, full, size in _vllm_model.model_files(root):
        entries.append({"path": rel, "size": size, "sha256": _vllm_model.file_sha256(full)})
    return {
        "schema": SCHEMA,
        "source": source,
        "digest": digest_of(entries),
        "files": len(entries),
        "size_bytes": sum(entry["size"] for entry in entries),
        "entries": entries,
    }


def dumps(manifest):
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def entry_problems(entries, origin="the manifest"):
    """Every reason why a list of file entries (path, size, sha256) is not one a manifest holds."""
    found = []
    seen = set()
    for entry in entries:
        if not isinstance(entry, dict):
            found.append("%s has an entry that is not an object: %r" % (origin, entry))
            continue
        path = entry.get("path")
        problem = _path_problem(path)
        if problem:
            found.append("%s: %s" % (origin, problem))
            continue
        if path in seen:
            found.append("%s lists %s twice" % (origin, path))
        seen.add(path)
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            found.append("%s: %s has size %r, not a byte count" % (origin, path, size))
        if not isinstance(entry.get("sha256"), str) or not HEX64.match(entry["sha256"]):
            found.append("%s: %s has sha256 %r, not 64 lowercase hex digits" % (origin, path, entry.get("sha256")))
    return found


def problems(manifest, origin="the manifest"):
    """Every reason why manifest is not one this module wrote; [] when it is."""
    if not isinstance(manifest, dict):
        return ["%s is a JSON %s, not an object" % (origin, type(manifest).__name__)]
    found = []
    if manifest.get("schema") != SCHEMA:
        found.append("%s has schema %r, not %r" % (origin, manifest.get("schema"), SCHEMA))
    entries = manifest.get("entries")
    if not isinstance(entries, list) or not entries:
        return [*found, "%s has no entries" % origin]
    found += entry_problems(entries, origin)
    if not found and manifest.get("digest") != digest_of(entries):
        found.append(
            "%s records the digest %s but its entries make %s; it was edited by hand, build it again"
            % (origin, manifest.get("digest"), digest_of(entries))
        )
    return found


def layer_partition(num_layers, pp_size, override=""):
    """Layers per stage, as vLLM's get_pp_indices splits them."""
    if override:
        parts = [int(part) for part in str(override).split(",")]
        if len(parts) != pp_size or sum(parts) != num_layers:
            raise StagingError(
                "the layer partition %r must have %d stages summing to num_hidden_layers=%d"
                % (override, pp_size, num_layers)
            )
        return parts
    parts = [num_layers // pp_size] * pp_size
    for offset in range(2, num_layers % pp_size + 2):
        parts[-offset] += 1
    return parts


def tensor_stages(name, bounds, tied):
    """The stages (indices into bounds, a list of (start, end) layer ranges) that load tensor name."""
    last = len(bounds) - 1
    match = LAYER.search(name)
    if match:
        layer = int(match.group(1))
        for stage, (start, end) in enumerate(bounds):
            if start <= layer < end:
                return {stage}
        # Past the last layer: multi-token prediction layers, which the last stage may load.
        return {last}
    if EMBEDDING.search(name):
        return {0, last} if tied else {0}
    if HEAD.search(name) or FINAL_NORM.search(name):
        return {last}
    return set(range(len(bounds)))


def stage_index_text(index, shards):
    """The model.safetensors.index.json of a stage: the source's, limited to the stage's shards."""
    weight_map = dict((name, shard) for name, shard in index["weight_map"].items() if shard in shards)
    text = {"metadata": index.get("metadata") or {}, "weight_map": weight_map}
    return json.dumps(text, indent=2, sort_keys=True) + "\n"


def stages(manifest, index, config, pp_size, override=""):
    """What each pipeline stage holds: a list, one dict per stage, of its files, bytes and own index.

    index is the parsed model.safetensors.index.json (None when the model has none: every stage
    then holds the whole model, and the result says why). config is _vllm_model.model_config().
    """
    entries = dict((entry["path"], entry) for entry in manifest["entries"])
    whole = [dict(path=path, size=entry["size"], sha256=entry["sha256"]) for path, entry in sorted(entries.items())]
    total = sum(entry["size"] for entry in whole)
    if pp_size <= 1 or index is None:
        reason = "" if pp_size <= 1 else "the model has no %s, so its shards cannot be told apart" % INDEX_NAME
        return [
            {
                "stage": stage,
                "layers": None,
                "files": whole,
                "generated": {},
                "bytes": total,
                "whole": True,
                "reason": reason,
            }
            for stage in range(max(pp_size, 1))
        ]
    num_layers = config.get("num_hidden_layers")
    if not isinstance(num_layers, int) or num_layers < pp_size:
        raise StagingError("config.json has num_hidden_layers=%r, which %d stages cannot split" % (num_layers, pp_size))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise StagingError("%s has no weight_map" % INDEX_NAME)
    missing = sorted(set(weight_map.values()) - set(entries))
    if missing:
        raise StagingError("%s names shard(s) the manifest lacks: %s" % (INDEX_NAME, ", ".join(missing)))
    parts = layer_partition(num_layers, pp_size, override)
    bounds = []
    for stage in range(pp_size):
        start = sum(parts[:stage])
        bounds.append((start, start + parts[stage]))
    tied = bool(config.get("tie_word_embeddings"))
    shard_stages = {}
    for name, shard in weight_map.items():
        shard_stages.setdefault(shard, set()).update(tensor_stages(name, bounds, tied))
    shared = [path for path in entries if path != INDEX_NAME and not path.endswith(WEIGHT_SUFFIXES)]
    result = []
    for stage in range(pp_size):
        shards = sorted(shard for shard, owners in shard_stages.items() if stage in owners)
        text = stage_index_text(index, set(shards))
        files = [dict(path=p, size=entries[p]["size"], sha256=entries[p]["sha256"]) for p in sorted(shared + shards)]
        generated = {
            INDEX_NAME: {
                "content": text,
                "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "size": len(text.encode("utf-8")),
            }
        }
        result.append(
            {
                "stage": stage,
                "layers": list(bounds[stage]),
                "files": files,
                "generated": generated,
                "bytes": sum(f["size"] for f in files) + generated[INDEX_NAME]["size"],
                "whole": False,
                "reason": "",
            }
        )
    return result


def stage_digest(stage):
    """The tree digest a stage's directory will have: its fetched files and its generated index."""
    entries = [dict(path=f["path"], sha256=f["sha256"]) for f in stage["files"]]
    entries += [dict(path=path, sha256=item["sha256"]) for path, item in stage["generated"].items()]
    return digest_of(entries)


def fanout(source, order, needs):
    """Who each host copies each file from.

    source: the staging host, which holds every file. order: the hosts, in chain order (the
    source may be among them). needs: {host: [file dicts with path and sha256]}. Returns
    {host: {path: [hosts to copy from, the chain predecessor first, the source last]}}.
    """
    holders = {}
    plan = {}
    for host in order:
        plan[host] = {}
        for item in needs.get(host, []):
            if host == source:
                plan[host][item["path"]] = [source]
                continue
            earlier = holders.setdefault((item["path"], item["sha256"]), [])
            plan[host][item["path"]] = [*list(reversed(earlier))[:FALLBACKS], source]
            earlier.append(host)
    return plan


def _stage_of(node):
    """The pipeline stage a node loads, or None when it loads the whole model."""
    pp, nnodes, rank = node["pp_size"], node["nnodes"], node["rank"]
    if pp <= 1 or nnodes % pp:
        return None
    return rank // (nnodes // pp)


def host_plans(nodes, stage_host, manifest, layouts, stage_only=True):
    """What each host fetches and from whom: {host: {stage, whole, files, generated, bytes, digest, sources}}.

    nodes: [{host, address, model_path, pp_size, nnodes, rank, partition}] in chain order.
    manifest: the staging host's manifest; layouts: model_manifest's layouts (pp_size, partition,
    stages). The staging host holds the whole model in <model_path>.source and copies its own
    files from there; every other host reads its peers' directories through their rrsync root,
    the parent of their model directory.
    """
    by_host = dict((node["host"], node) for node in nodes)
    if stage_host not in by_host:
        raise StagingError("the staging host %s is not one of the play's vLLM hosts" % stage_host)
    whole = [dict(path=e["path"], size=e["size"], sha256=e["sha256"]) for e in manifest["entries"]]
    plans = {}
    for node in nodes:
        stage = _stage_of(node) if stage_only else None
        layout = None
        if stage is not None:
            key = (node["pp_size"], node.get("partition") or "")
            layout = next((item for item in layouts if (item["pp_size"], item.get("partition") or "") == key), None)
            if layout is None:
                raise StagingError("no stage plan for PP %d with partition %r" % key)
        chosen = layout["stages"][stage] if layout else None
        if chosen is None or chosen["whole"]:
            plan = {
                "stage": stage,
                "whole": True,
                "files": whole,
                "generated": {},
                "bytes": sum(item["size"] for item in whole),
                "digest": manifest["digest"],
                "reason": chosen["reason"] if chosen else "",
            }
        else:
            plan = {
                "stage": stage,
                "whole": False,
                "files": chosen["files"],
                "generated": chosen["generated"],
                "bytes": chosen["bytes"],
                "digest": stage_digest(chosen),
                "reason": "",
            }
        plans[node["host"]] = plan
    needs = dict((host, plan["files"]) for host, plan in plans.items())
    order = [stage_host] + [node["host"] for node in nodes if node["host"] != stage_host]
    chains = fanout(stage_host, order, needs)
    for host, plan in plans.items():
        plan["sources"] = dict(
            (path, [_source(by_host[up], stage_host, local=(up == host)) for up in ups])
            for path, ups in chains[host].items()
        )
        plan["upstreams"] = sorted(set(up for ups in chains[host].values() for up in ups if up != host))
    return plans


def _source(node, stage_host, local):
    directory = node["model_path"].rstrip("/") + (".source" if node["host"] == stage_host else "")
    if local:
        return {"name": node["host"], "host": "", "path": directory}
    return {"name": node["host"], "host": node["address"], "path": directory.rsplit("/", 1)[-1]}
