#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one ``vllm bench serve`` measurement and return its figures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_bench_serve
short_description: Run one vllm bench serve measurement against an OpenAI-compatible endpoint
version_added: 0.1.0
description:
  - Runs C(vllm bench serve) (vLLM's own serving benchmark) with the arguments given, waits for it,
    reads the result file its C(--save-result) wrote and returns the figures in one shape -
    requests completed and failed, the mean, median and percentiles of time to first token (TTFT),
    time per output token (TPOT), inter-token latency (ITL) and end-to-end latency (E2EL) in
    milliseconds, the request, output and total token throughput, goodput, and the CPU seconds the
    benchmark itself used (to show that the load generator was not the bottleneck).
  - The API key reaches the benchmark in its environment (C(OPENAI_API_KEY), which vLLM's
    OpenAI backends send as a bearer token); it is never on a command line and never in the output.
  - A run that fails or writes no result does not fail the task; RV(measurement) then holds the
    error, and the caller judges it. The task fails on bad input only.
  - Sends no load in check mode.
author:
  - gpufleet.inference developers (@gpufleet)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
options:
  executable:
    description: The C(vllm) program of a virtual environment that holds vLLM.
    type: path
    required: true
  args:
    description: The arguments after C(vllm bench serve); they must include C(--save-result) and write O(result_path).
    type: list
    elements: str
    required: true
  result_path:
    description: The result file the arguments name (C(--result-dir) and C(--result-filename)); removed before the run.
    type: path
    required: true
  api_key:
    description: The endpoint's API key; empty sends none.
    type: str
    default: ""
  environment:
    description: Further environment of the benchmark (C(HF_HUB_OFFLINE), C(SSL_CERT_FILE), ...).
    type: dict
    default: {}
  percentiles:
    description: The percentiles to return, as C(--metric-percentiles) gave them.
    type: list
    elements: float
    default: [50, 90, 99]
  timeout:
    description: Seconds the run may take before it is stopped and reported as failed.
    type: int
    default: 1800
  target:
    description: The name of the endpoint measured, copied into RV(measurement).
    type: str
    default: ""
  point:
    description: The name of the point measured, copied into RV(measurement).
    type: str
    default: ""
seealso:
  - name: vllm bench serve
    description: vLLM's serving benchmark.
    link: https://docs.vllm.ai/en/latest/cli/bench/serve.html
"""

EXAMPLES = r"""
- name: Measure replica pp at concurrency 4
  gpufleet.inference.vllm_bench_serve:
    executable: /opt/gpufleet/vllm/0.33.0-cuda-0123456789ab/bin/vllm
    args: [--backend, openai, --base-url, "http://10.10.0.10:8000", --model, kimi, --tokenizer, /srv/tokenizer,
           --dataset-name, random, --random-input-len, "1024", --random-output-len, "256", --num-prompts, "16",
           --max-concurrency, "4", --save-result, --result-dir, /srv/results, --result-filename, pp-c4.json]
    result_path: /srv/results/pp-c4.json
    api_key: "{{ vllm_api_key }}"
    environment: {HF_HUB_OFFLINE: "1"}
    target: pp
    point: c4
"""

RETURN = r"""
measurement:
  description: What the run gave.
  returned: success
  type: dict
  contains:
    target:
      description: O(target).
      type: str
    point:
      description: O(point).
      type: str
    rc:
      description: The benchmark's exit status; null when it was not run (check mode) or timed out.
      type: int
    result:
      description:
        - The figures (C(completed), C(failed), C(duration_s), C(ttft_ms), C(tpot_ms), C(itl_ms),
          C(e2el_ms), C(request_throughput), C(output_throughput), C(total_token_throughput),
          C(goodput_rps), C(errors)); null when the run wrote no result.
      type: dict
    error:
      description: Why there is no result (the end of the benchmark's error output); null with a result.
      type: str
    load_cpu_s:
      description: CPU seconds (user and system) the benchmark used.
      type: float
    wall_s:
      description: Seconds the run took.
      type: float
"""

import json
import os
import resource
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tail(text, lines=12):
    return "\n".join(to_native(text or "").strip().splitlines()[-lines:])


def main():
    module = AnsibleModule(
        argument_spec={
            "executable": {"type": "path", "required": True},
            "args": {"type": "list", "elements": "str", "required": True},
            "result_path": {"type": "path", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "environment": {"type": "dict", "default": {}},
            "percentiles": {"type": "list", "elements": "float", "default": [50, 90, 99]},
            "timeout": {"type": "int", "default": 1800},
            "target": {"type": "str", "default": ""},
            "point": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    if "--save-result" not in params["args"]:
        module.fail_json(msg="args must include --save-result, or the run writes no result to read")
    if params["timeout"] < 1:
        module.fail_json(msg="timeout=%d must be 1 or more seconds" % params["timeout"])
    if not os.access(params["executable"], os.X_OK):
        module.fail_json(msg="%s is not an executable vllm; install the client first" % params["executable"])
    out = {"target": params["target"], "point": params["point"], "rc": None, "result": None, "error": None}
    out.update({"load_cpu_s": None, "wall_s": None})
    if module.check_mode:
        out["error"] = "check mode: no load sent"
        module.exit_json(changed=False, measurement=out)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in params["environment"].items()})
    env["OPENAI_API_KEY"] = params["api_key"]
    try:
        os.unlink(params["result_path"])
    except FileNotFoundError:
        pass
    before, started = children_cpu(), time.monotonic()
    try:
        proc = subprocess.run(
            [params["executable"], "bench", "serve"] + params["args"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=params["timeout"],
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out["error"] = "stopped after %d s (timeout): %s" % (params["timeout"], tail(exc.stderr, 4))
        module.exit_json(changed=False, measurement=out)
    out["wall_s"] = round(time.monotonic() - started, 3)
    out["load_cpu_s"] = round(children_cpu() - before, 3)
    out["rc"] = proc.returncode
    try:
        with open(params["result_path"], "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
        out["result"] = _serving_acceptance.parse_result(data, params["percentiles"])
    except FileNotFoundError:
        out["error"] = "vllm bench serve exited %d and wrote no result: %s" % (
            proc.returncode,
            tail(proc.stderr) or tail(proc.stdout),
        )
    except (TypeError, ValueError) as exc:
        out["error"] = "%s holds no vllm bench serve result: %s" % (params["result_path"], to_native(exc))
    module.exit_json(changed=False, measurement=out)


if __name__ == "__main__":
    main()
