# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cache shape key and the choice of the peers a cold cache is seeded from."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_cache

CPUINFO = (Path(__file__).parent / "fixtures" / "cpuinfo" / "debian12-vm-x86_64.txt").read_text()
MODEL = "sha256:" + "4" * 64
SHAPE = {
    "vllm": "0a1b2c3d4e5f",
    "model": MODEL,
    "tensor_parallel_size": 8,
    "pipeline_parallel_size": 10,
    "rank": 3,
    "gpus": ["10de:2b85"] * 8,
}


def test_the_cpu_is_its_model_name_and_the_digest_of_its_flags():
    cpu = _vllm_cache.cpu_identity(CPUINFO)
    assert cpu.startswith("AMD EPYC; flags ") and len(cpu.split()[-1]) == 16
    # A hypervisor that hides one instruction set extension makes other hardware.
    hidden = CPUINFO.replace(" avx512f ", " ")
    assert _vllm_cache.cpu_identity(hidden) != cpu
    # The order of the flags is not part of the identity.
    assert _vllm_cache.cpu_identity("model name : AMD EPYC\nflags : b a\n") == _vllm_cache.cpu_identity(
        "model name : AMD EPYC\nflags : a b\n"
    )
    assert _vllm_cache.cpu_identity("").startswith("unknown; flags ")


def test_a_shape_keys_a_cache_by_every_field():
    key = _vllm_cache.key_of(SHAPE, "AMD EPYC; flags 0")
    assert key["schema"] == _vllm_cache.SCHEMA and key["cpu"] == "AMD EPYC; flags 0"
    digest = _vllm_cache.digest_of(key)
    assert digest.startswith("sha256:") and len(digest) == 71
    for field, other in (("rank", 4), ("tensor_parallel_size", 4), ("model", "sha256:" + "5" * 64), ("gpus", [])):
        assert _vllm_cache.digest_of(_vllm_cache.key_of(dict(SHAPE, **{field: other}), "AMD EPYC; flags 0")) != digest
    assert _vllm_cache.digest_of(_vllm_cache.key_of(SHAPE, "AMD EPYC; flags 1")) != digest
    # Ansible may hand the sizes over as strings; the key is the same.
    as_text = dict(SHAPE, rank="3", tensor_parallel_size="8", pipeline_parallel_size="10")
    assert _vllm_cache.digest_of(_vllm_cache.key_of(as_text, "AMD EPYC; flags 0")) == digest


@pytest.mark.parametrize("model", ["", "hub:org/model@main", "hub:org/model@", "sha256:abc"])
def test_a_model_without_a_digest_keys_no_cache(model):
    assert _vllm_cache.model_problem(model) == (
        f"the model {model!r} has no digest to key a vLLM cache by: set vllm_model_checksum (a hub model needs"
        " its revision pinned to a commit in vllm_args revision)"
    )
    # Not malformed: such a model's caches are simply neither recorded nor seeded.
    assert _vllm_cache.shape_problems(dict(SHAPE, model=model)) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"vllm": ""}, "the cache key has no vLLM lock"),
        ({"rank": -1}, "the cache key's rank must be a whole number, not -1"),
        ({"rank": True}, "the cache key's rank must be a whole number, not True"),
        ({"gpus": "10de:2b85"}, "the cache key's gpus must be a list, not '10de:2b85'"),
    ],
)
def test_a_shape_that_cannot_key_a_cache_says_why(change, problem):
    assert any(item.startswith(problem) for item in _vllm_cache.shape_problems(dict(SHAPE, **change)))


def test_a_pinned_hub_revision_and_a_whole_shape_pass():
    assert _vllm_cache.shape_problems(SHAPE) == [] and _vllm_cache.model_problem(SHAPE["model"]) is None
    assert _vllm_cache.model_problem("hub:org/model@" + "a" * 40) is None
    assert _vllm_cache.shape_problems({"vllm": "x"}) == [
        f"the cache key lacks {field}" for field in _vllm_cache.SHAPE_FIELDS if field != "vllm"
    ]


def node(host, digest, warm, replica="r0"):
    return {"host": host, "address": f"10.0.0.{host[-1]}", "replica": replica, "digest": digest, "warm": warm}


def test_a_cold_node_seeds_from_the_warm_peers_of_its_shape_only():
    plans = _vllm_cache.seed_sources(
        [
            node("gpu1", "A", True, "r0"),
            node("gpu2", "B", True, "r0"),
            node("gpu3", "A", True, "r1"),
            node("gpu4", "A", False, "r2"),
            node("gpu5", "C", False, "r2"),
            node("gpu6", "", False, "r2"),
        ]
    )
    # Warm nodes and nodes without a key fetch nothing; a key nobody holds has no source.
    assert set(plans) == {"gpu4", "gpu5"}
    assert plans["gpu4"] == [
        {"name": "gpu1", "host": "10.0.0.1", "path": "r0/vllm"},
        {"name": "gpu3", "host": "10.0.0.3", "path": "r1/vllm"},
    ]
    assert plans["gpu5"] == []


def test_several_cold_nodes_start_at_different_holders():
    plans = _vllm_cache.seed_sources(
        [node("gpu1", "A", True), node("gpu2", "A", True), node("gpu3", "A", False), node("gpu4", "A", False)]
    )
    assert [s["name"] for s in plans["gpu3"]] == ["gpu1", "gpu2"]
    assert [s["name"] for s in plans["gpu4"]] == ["gpu2", "gpu1"]
