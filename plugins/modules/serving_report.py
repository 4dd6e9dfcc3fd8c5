#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge a serving acceptance run and write its report (JSON, CSV, HTML)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: serving_report
short_description: Judge a serving acceptance run against its targets and baseline, and write the report
version_added: 0.1.0
description:
  - Takes the plan of a serving acceptance run (the workload, the targets and their points, as the
    serving_acceptance role computes it) and the figures measured at each point
    (M(gpufleet.inference.vllm_bench_serve)), judges every point against the time to first token
    and time per output token targets at the chosen percentile, every target's best goodput
    against the minimum, and, given a baseline, the goodput and output throughput of every point
    against it.
  - Finds each target's saturation point (the least concurrency whose output throughput reaches
    90 % of the sweep's best) and sets it beside the concurrency the capacity plan admits; a large
    disagreement is a note, not a failure.
  - Writes C(<dest_dir>/<basename>.json) (the result in the versioned shape
    C(gpufleet.inference/serving-acceptance/v1), docs/serving-acceptance.md), C(.csv) (one row per
    target and point) and C(.html) (one page with inline SVG charts, no script and no external asset).
  - With O(save_baseline), also writes the result to O(baseline) when it passed, for later runs to compare with.
  - Missed targets do not fail the task; the playbook decides with RV(passed) and RV(failures).
    The task fails on bad input and on a baseline it cannot read.
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
  run:
    description: The run's plan, C(load) and C(targets), from the C(_serving_plan) filter.
    type: dict
    required: true
  results:
    description:
      - The measurement of each point, as M(gpufleet.inference.vllm_bench_serve) returns it
        (C(target), C(point), C(result), C(error), C(load_cpu_s)); a point without figures fails as not measured.
    type: list
    elements: dict
    required: true
  dest_dir:
    description: Directory for the report files; created when missing.
    type: path
    required: true
  basename:
    description: File name of the reports, without the extension.
    type: str
    default: serving-acceptance
  title:
    description: Title of the HTML page and of the JSON result.
    type: str
    default: Serving acceptance
  generated_at:
    description: Timestamp written into the report; empty leaves it out.
    type: str
    default: ""
  load_host:
    description: The host that ran the load.
    type: str
    default: ""
  tool_version:
    description: The version of vLLM whose C(vllm bench serve) measured.
    type: str
    default: ""
  baseline:
    description: A result file of an earlier run to compare with; empty compares with nothing.
    type: path
  save_baseline:
    description: Write this run's result to O(baseline) when it passed.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Write the serving acceptance report
  gpufleet.inference.serving_report:
    run: "{{ __serving_acceptance_run }}"
    results: "{{ __serving_acceptance_results }}"
    dest_dir: "{{ playbook_dir }}/serving-acceptance"
    baseline: "{{ playbook_dir }}/serving-acceptance/baseline.json"
  delegate_to: localhost
  run_once: true
  register: __serving_acceptance_report
"""

RETURN = r"""
passed:
  description: True when every target met every target and none regressed against the baseline.
  returned: success
  type: bool
failures:
  description:
    - Each missed target - C(target), C(point), C(metric), C(measured), C(limit), C(kind) (slo,
      baseline or errors) and C(message).
  returned: success
  type: list
  elements: dict
notes:
  description:
    - What the operator should know that is no failure (saturation against the plan, points
      missing from the baseline).
  returned: success
  type: list
  elements: str
summary:
  description:
    - The headline figures of each target (best output throughput, best goodput, the first point's
      latencies, saturation).
  returned: success
  type: dict
lines:
  description: One line per target with its verdict and headline figures, for the play's output.
  returned: success
  type: list
  elements: str
paths:
  description: The files written, by format (C(json), C(csv), C(html)).
  returned: success
  type: dict
baseline_saved:
  description: Whether this run's result was written to O(baseline).
  returned: success
  type: bool
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance, _serving_report


def current(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write(module, path, data):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    handle, temp = tempfile.mkstemp(prefix=".serving-report-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        module.atomic_move(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def read_baseline(module, path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError) as exc:
        module.fail_json(msg="cannot read the baseline %s: %s; remove it or give another" % (path, to_native(exc)))
    if not isinstance(data, dict) or data.get("schema") != _serving_acceptance.SCHEMA:
        module.fail_json(
            msg="the baseline %s is not a serving acceptance result (schema %s); give a .json this module wrote"
            % (path, _serving_acceptance.SCHEMA)
        )
    return data


def main():
    module = AnsibleModule(
        argument_spec={
            "run": {"type": "dict", "required": True},
            "results": {"type": "list", "elements": "dict", "required": True},
            "dest_dir": {"type": "path", "required": True},
            "basename": {"type": "str", "default": "serving-acceptance"},
            "title": {"type": "str", "default": "Serving acceptance"},
            "generated_at": {"type": "str", "default": ""},
            "load_host": {"type": "str", "default": ""},
            "tool_version": {"type": "str", "default": ""},
            "baseline": {"type": "path"},
            "save_baseline": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    basename = params["basename"]
    if not basename or "/" in basename or basename in (".", ".."):
        module.fail_json(
            msg="basename=%r is not a file name; give a name without '/', like serving-acceptance" % basename
        )
    if params["save_baseline"] and not params["baseline"]:
        module.fail_json(msg="save_baseline is true but baseline is empty; give the file to write the baseline to")
    baseline = read_baseline(module, params["baseline"])
    try:
        document = _serving_acceptance.evaluate(params["run"], params["results"], baseline, params["baseline"] or "")
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(
            msg="the run or its results are not what the serving_acceptance role gives: %s" % to_native(exc)
        )
    head = {
        "schema": document.pop("schema"),
        "title": params["title"],
        "generated_at": params["generated_at"],
        "tool": {"name": "vllm bench serve", "version": params["tool_version"]},
        "load_host": params["load_host"],
    }
    head.update(document)
    document = head
    contents = {
        "json": json.dumps(document, indent=2, sort_keys=True) + "\n",
        "csv": _serving_report.render_csv(document),
        "html": _serving_report.render_html(document),
    }
    paths, changed = {}, False
    files = [(fmt, os.path.join(params["dest_dir"], "%s.%s" % (basename, fmt))) for fmt in ("json", "csv", "html")]
    saved = bool(params["save_baseline"] and document["verdict"]["passed"])
    if saved:
        files.append(("baseline", params["baseline"]))
    for fmt, path in files:
        data = to_bytes(contents["json" if fmt == "baseline" else fmt])
        if fmt != "baseline":
            paths[fmt] = path
        try:
            if current(path) == data:
                continue
            changed = True
            if not module.check_mode:
                write(module, path, data)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, to_native(exc)))
    verdict = document["verdict"]
    module.exit_json(
        changed=changed,
        msg="%s: %d targets, %d failures"
        % ("passed" if verdict["passed"] else "FAILED", len(document["targets"]), len(verdict["failures"])),
        passed=verdict["passed"],
        failures=verdict["failures"],
        notes=verdict["notes"],
        summary=_serving_acceptance.summary(document),
        lines=_serving_acceptance.lines(document),
        paths=paths,
        baseline_saved=saved,
    )


if __name__ == "__main__":
    main()
