# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape key of a vLLM node's cache, and where a node without a warm cache seeds it from.

A node's cache (VLLM_CACHE_ROOT) holds what a start builds and the next start reuses: the
model-class inspection (``modelinfos/``) and the compiled graphs (``torch_compile_cache/``).
After a start of its replica answered, a node records the *shape* that built the cache beside
it: the vLLM lock, the model's digest, TP, PP, the node's rank, its GPUs and its CPU. A node
whose cache lacks its own shape's record (a new or reinstalled node) copies those two
directories from a peer whose record is the same shape, and from no other. vLLM keys its
compiled graphs by its own hash of the configuration as well, so a copied cache is never
misused; the shape key only decides which peer's cache is worth copying.

Private module_utils; Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

SCHEMA = "gpufleet.inference/vllm-cache-key/v1"
KEY_FILE = "gpufleet-cache-key.json"
# The parts of a cache a peer's start can use; the rest (logs, locks) stays where it was made.
SEEDED = ("modelinfos", "torch_compile_cache")
SHAPE_FIELDS = ("vllm", "model", "tensor_parallel_size", "pipeline_parallel_size", "rank", "gpus")


def cpu_identity(cpuinfo):
    """The CPU model and the digest of its feature flags, from the text of /proc/cpuinfo.

    Compiled CPU kernels depend on the instruction set, so two CPUs of the same name with other
    flags (a hypervisor hiding AVX-512) are other hardware."""
    model = flags = ""
    for line in cpuinfo.splitlines():
        name, _sep, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        if not model and name in ("model name", "cpu model", "hardware"):
            model = value
        elif not flags and name in ("flags", "features"):
            flags = " ".join(sorted(value.split()))
    return "%s; flags %s" % (model or "unknown", hashlib.sha256(flags.encode("utf-8")).hexdigest()[:16])


def model_problem(model):
    """Why a model cannot key a cache (it has no digest), or None. Not an error: such a model's
    caches are neither recorded nor seeded."""
    if re.match(r"^(sha256:[0-9a-f]{64}|hub:\S+@[0-9a-f]{40})$", str(model)):
        return None
    return (
        "the model %r has no digest to key a vLLM cache by: set vllm_model_checksum (a hub model needs its"
        " revision pinned to a commit in vllm_args revision)" % (model,)
    )


def shape_problems(shape):
    """Why a shape is malformed: every field set, the sizes whole numbers, the GPUs a list. The
    model's digest is model_problem's."""
    found = []
    for field in SHAPE_FIELDS:
        if field not in shape:
            found.append("the cache key lacks %s" % field)
    if found:
        return found
    if not str(shape["vllm"]):
        found.append("the cache key has no vLLM lock")
    for field in ("tensor_parallel_size", "pipeline_parallel_size", "rank"):
        if isinstance(shape[field], bool) or not re.match(r"^[0-9]+$", str(shape[field])):
            found.append("the cache key's %s must be a whole number, not %r" % (field, shape[field]))
    if not isinstance(shape["gpus"], list):
        found.append("the cache key's gpus must be a list, not %r" % (shape["gpus"],))
    return found


def key_of(shape, cpu):
    """The whole key: the shape the role knows and the CPU this node reads."""
    key = dict((field, shape[field]) for field in SHAPE_FIELDS)
    for field in ("tensor_parallel_size", "pipeline_parallel_size", "rank"):
        key[field] = int(key[field])
    key["vllm"] = str(key["vllm"])
    key["model"] = str(key["model"])
    key["gpus"] = sorted(str(gpu) for gpu in shape["gpus"])
    key["cpu"] = cpu
    key["schema"] = SCHEMA
    return key


def digest_of(key):
    """sha256:<hex> of the key's canonical JSON."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def seed_sources(nodes):
    """Which peers each node without a warm cache copies it from.

    nodes: [{host, address, replica, digest, warm}] in play order, digest being the node's own
    key (empty when it has none). Returns {host: [{name, host, path}]} for every node that is not
    warm and has a key: the warm nodes of the same key, other than itself, each fetching node
    starting at another one so that several new nodes spread over the holders. The path is
    relative to the holder's rrsync root, /var/cache/gpufleet-vllm.
    """
    holders = {}
    for node in nodes:
        if node["warm"] and node["digest"]:
            holders.setdefault(node["digest"], []).append(node)
    plans = {}
    turn = {}
    for node in nodes:
        if node["warm"] or not node["digest"]:
            continue
        peers = [peer for peer in holders.get(node["digest"], []) if peer["host"] != node["host"]]
        start = turn.get(node["digest"], 0)
        turn[node["digest"]] = start + 1
        if peers:
            start %= len(peers)
            peers = peers[start:] + peers[:start]
        plans[node["host"]] = [
            {"name": peer["host"], "host": peer["address"], "path": "%s/vllm" % peer["replica"]} for peer in peers
        ]
    return plans
