#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge the pairs of a fabric bandwidth test and write the acceptance report (JSON, CSV, HTML)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: fabric_report
short_description: Judge a fabric bandwidth test and write its acceptance report
version_added: 0.1.0
description:
  - Takes the result of every host pair of a bandwidth test, judges each pair against the
    thresholds, names the outlier hosts, and writes the report as
    C(<dest_dir>/<basename>.json), C(.csv) and C(.html).
  - A pair fails when its test failed, when jumbo frames do not pass between the hosts, when it
    moved no data, when it is below O(min_line_fraction) of O(line_rate_gbps) (only when the line
    rate is given), or when it is below O(min_best_fraction) of the best pair (the NVIDIA
    ClusterKit rule).
  - A host is an outlier when none of its measured pairs passed (with two hosts a failing pair
    names both), or when it has at least two failing pairs that no other outlier explains. Hosts
    are named in rounds; each round names the hosts with the most failing pairs whose partner is
    not yet an outlier, as long as that count is at least two. One failing pair between two
    otherwise healthy hosts names no host; it points at the link.
  - Failing pairs do not fail the task; the playbook decides with RV(passed), RV(failing) and
    RV(outliers). The task fails only on bad input.
  - The HTML page is self-contained (inline CSS, no script, no external asset) with a heatmap of
    the host matrix; failing cells carry a cross and a thick border, not only a colour.
  - Changes a file only when its content differs, so the same results give C(changed=false).
    Leave O(generated_at) empty to keep the files identical across runs.
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
  results:
    description:
      - One dict per measured host pair, each pair at most once, with the keys C(a) and C(b) (host
        names), C(gbps) (the bandwidth in Gbit/s, a number; may be null when the test failed),
        C(ok) (false when the test itself failed; default true), C(jumbo_ok) (true, false, or
        null when not checked) and C(error) (the failure's message, or null).
      - Other keys are ignored.
    type: list
    elements: dict
    required: true
  expected_pairs:
    description:
      - The pairs the schedule planned, as C([a, b]) lists. A planned pair with no entry in O(results)
        (its host dropped out, or its test never reported) is added as a failing pair, C(not measured),
        so a missing host can never leave a passing report.
    type: list
    elements: list
    default: []
  dest_dir:
    description: Directory for the report files; created when missing.
    type: path
    required: true
  basename:
    description: File name of the reports, without the extension.
    type: str
    default: fabric-report
  title:
    description: Title of the HTML page and of the JSON report.
    type: str
    default: Fabric bandwidth acceptance
  generated_at:
    description:
      - Timestamp printed in the HTML page and stored in the JSON report.
      - Empty leaves it out, so identical results give identical files.
    type: str
    default: ""
  line_rate_gbps:
    description:
      - Line rate of one host's fabric link in Gbit/s, such as C(100). Omit to skip the line-rate
        threshold.
    type: float
  min_line_fraction:
    description:
      - A pair fails below this fraction of O(line_rate_gbps).
      - TCP goodput tops out at 94 to 99 percent of line rate and a 100G host with parallel
        streams reaches about 90 Gbit/s, so 0.85 leaves healthy hosts a margin while a link
        negotiated down or a bond missing a member still fails.
    type: float
    default: 0.85
  min_best_fraction:
    description: A pair fails below this fraction of the best pair; 0.93 is NVIDIA ClusterKit's default.
    type: float
    default: 0.93
  formats:
    description: Which report files to write.
    type: list
    elements: str
    choices: [json, csv, html]
    default: [json, csv, html]
notes:
  - Runs where the report goes, usually the controller with C(delegate_to=localhost) and
    C(run_once=true).
  - The gpufleet.inference.fabric_validate role schedules the rounds and calls it.
"""

EXAMPLES = r"""
- name: Write the fabric acceptance report
  gpufleet.inference.fabric_report:
    results: "{{ __fabric_results }}"
    dest_dir: "{{ playbook_dir }}/reports"
    line_rate_gbps: 100
  delegate_to: localhost
  run_once: true
  register: __fabric_report

- name: Fail when a pair is below the thresholds
  ansible.builtin.assert:
    that: __fabric_report.passed
    fail_msg: >-
      {{ __fabric_report.summary.failing_pairs }} failing pairs, outliers:
      {{ __fabric_report.outliers | join(', ') or 'none' }}; see {{ __fabric_report.paths.html }}
  run_once: true
"""

RETURN = r"""
paths:
  description: Path of each report written, by format.
  returned: success
  type: dict
  sample: {"json": "/srv/reports/fabric-report.json", "html": "/srv/reports/fabric-report.html"}
summary:
  description: The figures of the test.
  returned: success
  type: dict
  contains:
    hosts:
      description: Number of hosts in the results.
      type: int
    pairs:
      description: Number of pairs measured.
      type: int
    best_gbps:
      description: Bandwidth of the best pair whose test ran; null when none ran.
      type: float
    median_gbps:
      description: Median bandwidth of the pairs whose test ran; null when none ran.
      type: float
    worst_gbps:
      description: Bandwidth of the worst pair whose test ran; null when none ran.
      type: float
    failing_pairs:
      description: Number of failing pairs.
      type: int
failing:
  description: The failing pairs, in host order.
  returned: success
  type: list
  elements: dict
  contains:
    a:
      description: One host of the pair.
      type: str
    b:
      description: The other host.
      type: str
    gbps:
      description: Measured bandwidth, null when the test gave none.
      type: float
    reasons:
      description: Why the pair fails, one sentence each.
      type: list
      elements: str
outliers:
  description: The hosts to blame for the failing pairs, in host order.
  returned: success
  type: list
  elements: str
passed:
  description: True when no pair fails.
  returned: success
  type: bool
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric import (
    FORMATS,
    evaluate,
    failing_summary,
    render_csv,
    render_html,
    render_json,
)


def render(evaluation, params):
    contents = {
        "json": json.dumps(render_json(evaluation, params["title"], params["generated_at"]), indent=2, sort_keys=True)
        + "\n",
        "csv": render_csv(evaluation),
        "html": render_html(evaluation, params["title"], params["generated_at"]),
    }
    return [(fmt, to_bytes(contents[fmt])) for fmt in FORMATS if fmt in params["formats"]]


def current(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write(module, path, data):
    handle, temp = tempfile.mkstemp(prefix=".fabric-report-", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        module.atomic_move(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def main():
    module = AnsibleModule(
        argument_spec={
            "results": {"type": "list", "elements": "dict", "required": True},
            "expected_pairs": {"type": "list", "elements": "list", "default": []},
            "dest_dir": {"type": "path", "required": True},
            "basename": {"type": "str", "default": "fabric-report"},
            "title": {"type": "str", "default": "Fabric bandwidth acceptance"},
            "generated_at": {"type": "str", "default": ""},
            "line_rate_gbps": {"type": "float"},
            "min_line_fraction": {"type": "float", "default": 0.85},
            "min_best_fraction": {"type": "float", "default": 0.93},
            "formats": {
                "type": "list",
                "elements": "str",
                "choices": ["json", "csv", "html"],
                "default": ["json", "csv", "html"],
            },
        },
        supports_check_mode=True,
    )
    params = module.params
    basename = params["basename"]
    if not basename or "/" in basename or basename in (".", ".."):
        module.fail_json(msg="basename=%r is not a file name; give a name without '/', like fabric-report" % basename)
    if not params["formats"]:
        module.fail_json(msg="formats=[] writes nothing; choose one or more of %s" % ", ".join(FORMATS))
    dest_dir = params["dest_dir"]
    if os.path.exists(dest_dir) and not os.path.isdir(dest_dir):
        module.fail_json(msg="dest_dir=%s exists and is not a directory; give a directory for the reports" % dest_dir)
    results = list(params["results"])
    measured = {frozenset((entry.get("a"), entry.get("b"))) for entry in results if isinstance(entry, dict)}
    for pair in params["expected_pairs"]:
        if len(pair) != 2:
            module.fail_json(msg="expected_pairs entry %r is not a pair [a, b]" % (pair,))
        if frozenset(pair) not in measured:
            results.append(
                {"a": pair[0], "b": pair[1], "gbps": None, "ok": False, "jumbo_ok": None, "error": "not measured"}
            )
    try:
        evaluation = evaluate(
            results,
            line_rate_gbps=params["line_rate_gbps"],
            min_line_fraction=params["min_line_fraction"],
            min_best_fraction=params["min_best_fraction"],
        )
    except ValueError as exc:
        module.fail_json(msg=to_native(exc))

    paths = {}
    changed = False
    for fmt, data in render(evaluation, params):
        path = os.path.join(dest_dir, "%s.%s" % (basename, fmt))
        paths[fmt] = path
        try:
            if current(path) == data:
                continue
            changed = True
            if not module.check_mode:
                if not os.path.isdir(dest_dir):
                    os.makedirs(dest_dir)
                write(module, path, data)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (path, to_native(exc)))

    summary = evaluation["summary"]
    outliers = evaluation["outliers"]
    module.exit_json(
        changed=changed,
        msg="%d hosts, %d pairs, %d failing; outliers: %s"
        % (summary["hosts"], summary["pairs"], summary["failing_pairs"], ", ".join(outliers) or "none"),
        paths=paths,
        summary=summary,
        failing=failing_summary(evaluation),
        outliers=outliers,
        passed=evaluation["passed"],
    )


if __name__ == "__main__":
    main()
