#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the captured output of an nccl-tests binary and say whether the run passed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nccl_tests_result
short_description: Parse the output of an nccl-tests run (all_reduce_perf and the other *_perf binaries)
version_added: 0.1.0
description:
  - Parses what rank 0 of an nccl-tests binary printed, from a file or from text, into the run's
    header facts, its result rows and its summary.
  - Understands the current table (with C(root) and C(#wrong) columns, C(N/A) for unchecked
    measurements), the legacy one (no C(root), an C(error) deviation column), NCCL and MPI log
    lines mixed into the output, Open MPI C(--tag-output) and srun C(--label) prefixes, and the
    C(Test NCCL failure), C(Test CUDA failure) and C(Test timeout) lines of a failed run.
  - Sets RV(passed) to false when the run reported failures, did not finish, found wrong data
    (C(Out of bounds values) or C(#wrong) above zero), looks like independent processes instead of
    one job, or when its average bus bandwidth is below O(min_busbw_gbps).
  - A low bandwidth never fails the task; the playbook decides with RV(passed) and RV(problems).
    The task fails only when the text holds no result row (the failure lines are returned in
    RV(errors)) or the results of several runs, or when O(path) cannot be read.
  - Runs on the controller or the target; it only reads.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  path:
    description:
      - File that holds the captured output of one run.
      - Mutually exclusive with O(output); one of them is required.
    type: path
  output:
    description:
      - The captured output itself, for example the C(stdout) of a registered C(command) task.
      - Mutually exclusive with O(path); one of them is required.
    type: str
  min_busbw_gbps:
    description:
      - The least acceptable C(# Avg bus bandwidth), in GB/s.
      - nccl-tests averages the bus bandwidth of every size it ran, small ones included, so the
        value depends on C(-b) and C(-e); set it from a run with the same size range.
      - Omit to judge the run on correctness only.
    type: float
notes:
  - Give the output of one binary per file. nccl-tests prints its results from rank 0 only; a
    run of several processes started by C(mpirun) must use nccl-tests built with C(MPI=1).
seealso:
  - name: nccl-tests performance guide
    description: What algbw and busbw mean for each collective.
    link: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md
"""

EXAMPLES = r"""
- name: Run all_reduce_perf across the nodes
  ansible.builtin.command:
    argv:
      - mpirun
      - -np
      - "16"
      - --hostfile
      - /etc/gpufleet/hostfile
      - /opt/nccl-tests/build/all_reduce_perf
      - -b
      - 1G
      - -e
      - 8G
      - -f
      - "2"
      - -g
      - "1"
  register: __nccl_tests_run
  changed_when: false
  failed_when: false
  check_mode: false

- name: Parse the all_reduce_perf output
  gpufleet.inference.nccl_tests_result:
    output: "{{ __nccl_tests_run.stdout }}"
    min_busbw_gbps: 300
  register: __nccl_tests_result

- name: Assert that all_reduce_perf passed
  ansible.builtin.assert:
    that: __nccl_tests_result.passed
    fail_msg: "{{ __nccl_tests_result.problems | join('; ') }}"

- name: Parse an output saved earlier
  gpufleet.inference.nccl_tests_result:
    path: /var/log/gpufleet/all_reduce_perf.log
"""

RETURN = r"""
passed:
  description: Whether the run finished without failures or wrong data, and met O(min_busbw_gbps) when given.
  returned: success
  type: bool
problems:
  description: Why RV(passed) is false, one sentence each; empty when it passed.
  returned: success
  type: list
  elements: str
test:
  description: The binary, from C(# Collective test starting); null for releases that do not print it.
  returned: success
  type: str
  sample: all_reduce_perf
nccl_tests_version:
  description: The nccl-tests release from C(# nccl-tests version); null for releases that do not print it.
  returned: success
  type: str
  sample: 2.17.8
nccl_headers:
  description: NCCL version code the binary was built against (C(22902) is 2.29.2).
  returned: success
  type: int
nccl_library:
  description: NCCL version code of the library the run loaded.
  returned: success
  type: int
nccl_version:
  description: NCCL version from a C(NCCL version ...) line, printed when C(NCCL_DEBUG) is set.
  returned: success
  type: str
  sample: 2.28.7+cuda13.0
parameters:
  description:
    - The C(# nThread) line, with the keys found among C(nthreads), C(ngpus), C(min_bytes),
      C(max_bytes), C(step_factor) or C(step_bytes), C(warmup_iters), C(iters), C(agg_iters),
      C(validation), C(graph) and C(unalign).
  returned: success
  type: dict
  sample: {"nthreads": 1, "ngpus": 1, "min_bytes": 8, "max_bytes": 134217728, "step_factor": 2, "iters": 20}
devices:
  description: The C(# Using devices) lines, one per rank.
  returned: success
  type: list
  elements: dict
  contains:
    rank:
      description: Global rank.
      type: int
    group:
      description: Rank group (C(NCCL_TESTS_SPLIT_MASK)); null for releases that do not print it.
      type: int
    host:
      description: Host name.
      type: str
    pid:
      description: Process id; ranks of one process share it (C(-g) above 1).
      type: int
    device:
      description: CUDA device index on the host.
      type: int
    bus_id:
      description: PCI bus id, as printed.
      type: str
    name:
      description: GPU name.
      type: str
nranks:
  description: Number of C(# Using devices) lines; 0 when the output has none.
  returned: success
  type: int
hosts:
  description: The distinct hosts of RV(devices), in rank order.
  returned: success
  type: list
  elements: str
legacy_error_column:
  description:
    - Whether the table is the legacy one, whose fourth measurement column is a deviation
      (C(error)), not a count (C(wrong)).
  returned: success
  type: bool
rows:
  description: One per size (and type and operation) measured.
  returned: success
  type: list
  elements: dict
  contains:
    size_bytes:
      description: Message size in bytes.
      type: int
    count:
      description: Element count.
      type: int
    type:
      description: Data type, such as C(float).
      type: str
    redop:
      description: Reduction (C(sum), C(none) for collectives without one); null when the column is empty or absent.
      type: str
    root:
      description: Root rank, C(-1) for rootless collectives; null for legacy tables.
      type: int
    out_of_place:
      description:
        - The out-of-place measurement, with C(time_us), C(algbw_gbps), C(busbw_gbps), C(wrong)
          (wrong elements; null when printed as C(N/A) or for legacy tables) and C(error)
          (legacy tables only, else null).
      type: dict
    in_place:
      description: The in-place measurement, with the same keys; null when the row has none.
      type: dict
out_of_bounds:
  description: The count from C(# Out of bounds values); null when the run did not print it.
  returned: success
  type: int
out_of_bounds_ok:
  description: Whether that line says OK; null when it is missing.
  returned: success
  type: bool
avg_bus_bandwidth_gbps:
  description: The C(# Avg bus bandwidth) in GB/s, the mean busbw of all printed measurements; null when missing.
  returned: success
  type: float
avg_bus_bandwidth_ok:
  description: The OK or FAILED nccl-tests appends when C(NCCL_TESTS_MIN_BW) is set; null otherwise.
  returned: success
  type: bool
max_busbw_gbps:
  description: The highest busbw of any measurement; null without rows.
  returned: success
  type: float
wrong_total:
  description: Sum of the C(#wrong) counts of all measurements.
  returned: success
  type: int
complete:
  description: Whether both summary lines were printed.
  returned: success
  type: bool
errors:
  description:
    - The failure lines nccl-tests printed (C(Test NCCL failure), C(Test CUDA failure),
      C(Test failure), C(Test timeout)).
  returned: always
  type: list
  elements: str
notes:
  description:
    - Signs that the output is not one job's run, such as a rank listed twice; each is also a
      warning and a problem.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl_tests import (
    NcclTestsError,
    parse,
    verdict,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            output=dict(type="str"),
            min_busbw_gbps=dict(type="float"),
        ),
        mutually_exclusive=[["path", "output"]],
        required_one_of=[["path", "output"]],
        supports_check_mode=True,
    )
    params = module.params

    source = params["path"] or "output"
    text = params["output"]
    if params["path"]:
        try:
            with open(params["path"], "r", errors="replace") as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot read %s: %s; check the path and its permissions" % (params["path"], exc))

    try:
        result = parse(text)
    except NcclTestsError as exc:
        module.fail_json(msg="%s: %s" % (source, exc), errors=exc.errors, notes=exc.notes)

    for note in result["notes"]:
        module.warn(note)
    passed, problems = verdict(result, params["min_busbw_gbps"])
    module.exit_json(changed=False, passed=passed, problems=problems, **result)


if __name__ == "__main__":
    main()
