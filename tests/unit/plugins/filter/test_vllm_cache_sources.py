# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _vllm_cache_sources filter reads the play's hostvars as the vllm role leaves them."""

from ansible_collections.gpufleet.inference.plugins.filter._vllm_cache_sources import vllm_cache_sources


def host(address, replica, cache):
    return {"__vllm_node": {"address": address, "replica": replica, "rank": 0}, "__vllm_cache": cache}


def test_cold_nodes_get_the_warm_peers_of_their_key():
    hostvars = {
        "gpu1": host("10.0.0.1", "r0", {"digest": "sha256:a", "warm": True, "changed": False}),
        "gpu2": host("10.0.0.2", "r1", {"digest": "sha256:a", "warm": False, "changed": False}),
        # A node whose model has no digest skipped its read; a node outside the vllm role has no node.
        "gpu3": host("10.0.0.3", "r2", {"skipped": True, "changed": False}),
        "head": {},
    }
    plans = vllm_cache_sources(hostvars, ["gpu1", "gpu2", "gpu3", "head"])
    assert plans == {"gpu2": [{"name": "gpu1", "host": "10.0.0.1", "path": "r0/vllm"}]}
