# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _vllm_cache_sources filter: a thin wrapper over module_utils/_vllm_cache.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _vllm_cache_sources
short_description: Pair each vLLM node without a warm cache with the peers whose cache is of its shape
version_added: 0.1.0
description:
  - Private to the gpufleet.inference.vllm role. Reads the C(__vllm_node) fact and the registered
    C(__vllm_cache) result (M(gpufleet.inference.vllm_cache_seed) in check mode) of every host of
    the play, and returns, per host whose cache lacks its own key, the warm peers of the same key
    to seed it from, each fetching host starting at another peer.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The hosts of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Choose the peers each cold cache is seeded from
  ansible.builtin.set_fact:
    __vllm_cache_plan: "{{ hostvars | gpufleet.inference._vllm_cache_sources(ansible_play_hosts_all) }}"
"""

RETURN = r"""
_value:
  description:
    - Host name -> its sources, each with C(name), C(host) (the fabric address) and C(path)
      (below the rrsync root).
  type: dict
"""

from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_cache


def vllm_cache_sources(hostvars, hosts):
    nodes = []
    for host in hosts:
        node = hostvars[host].get("__vllm_node")
        cache = hostvars[host].get("__vllm_cache")
        if not node or not cache or cache.get("skipped") or cache.get("failed"):
            continue
        nodes.append(
            {
                "host": host,
                "address": node["address"],
                "replica": node["replica"],
                "digest": cache.get("digest", ""),
                "warm": bool(cache.get("warm")),
            }
        )
    return _vllm_cache.seed_sources(nodes)


class FilterModule:
    def filters(self):
        return {"_vllm_cache_sources": vllm_cache_sources}
