#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only view of a running vLLM engine through its /metrics endpoint."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_engine_info
short_description: Read a running vLLM engine's KV cache and request queue from its metrics
version_added: 0.1.0
description:
  - Fetches C(<url>/metrics) of a vLLM OpenAI-compatible server and returns the KV cache the
    engine allocated (C(vllm:cache_config_info)) and its running and waiting requests
    (C(vllm:num_requests_running), C(vllm:num_requests_waiting)).
  - RV(kv_cache_tokens) is the figure vLLM logs at start as C(KV cache size) in tokens, so a
    capacity plan (M(gpufleet.inference.capacity_plan)) can be compared with what the engine got.
  - It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  url:
    description: Base URL of the server, for example V(http://10.20.0.11:8000); C(/metrics) is appended.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the answer.
    type: int
    default: 10
notes:
  - vLLM serves C(/metrics) without the API key (the key guards the C(/v1) routes only).
seealso:
  - module: gpufleet.inference.capacity_plan
"""

EXAMPLES = r"""
- name: Read the engine's KV cache
  gpufleet.inference.vllm_engine_info:
    url: http://10.20.0.11:8000
  register: engine

- name: Show it
  ansible.builtin.debug:
    msg: "{{ engine.kv_cache_tokens }} tokens of KV cache, {{ engine.requests_running }} requests running"
"""

RETURN = r"""
engines:
  description: Engines (data-parallel ranks) that reported a cache configuration.
  returned: success
  type: int
  sample: 1
block_size:
  description: Tokens per KV block.
  returned: success
  type: int
  sample: 16
num_gpu_blocks:
  description: KV blocks the engine allocated (on CPU backends too, under this name).
  returned: success
  type: int
  sample: 4096
kv_cache_tokens:
  description: RV(num_gpu_blocks) x RV(block_size).
  returned: success
  type: int
  sample: 65536
cache_dtype:
  description: The KV cache dtype the engine runs with.
  returned: success
  type: str
  sample: auto
requests_running:
  description: Requests being processed, summed over engines; null when the engine does not report it.
  returned: success
  type: int
  sample: 0
requests_waiting:
  description: Requests queued, summed over engines; null when the engine does not report it.
  returned: success
  type: int
  sample: 0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import fetch_url
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_metrics import MetricsError, engine_state


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    url = module.params["url"].rstrip("/") + "/metrics"
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if info.get("status") != 200 or response is None:
        module.fail_json(
            msg="GET %s answered %s (%s); is the vLLM server up at that address?"
            % (url, info.get("status"), info.get("msg")),
            status=info.get("status"),
        )
    try:
        state = engine_state(to_native(response.read()))
    except MetricsError as exc:
        module.fail_json(msg="%s: %s" % (url, exc))
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()
