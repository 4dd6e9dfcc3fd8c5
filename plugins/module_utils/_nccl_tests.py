# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse what the nccl-tests binaries (all_reduce_perf, all_gather_perf, ...) print.

Facts (NVIDIA/nccl-tests src/common.cu, and the captured outputs under
tests/unit/plugins/module_utils/fixtures/nccl-tests, see the README there):
- One run prints a header, a table and a summary. Newer releases start with
  '# nccl-tests version 2.17.8 nccl-headers=22606 nccl-library=22606' and
  '# Collective test starting: all_reduce_perf'; all print '# nThread ... nGpus ...',
  '# Using devices' and one '#  Rank  0 Group  0 Pid 123 on host device  0 [bus] name' line
  per rank (older releases have no Group). Only rank 0 of the job prints.
- Table rows: size count type redop root, then time algbw busbw #wrong twice (out-of-place,
  in-place). Older releases had no root column, printed an empty redop for all-to-all, and had
  an 'error' column (the largest deviation, like 5e-07) where newer ones count wrong elements.
  #wrong is N/A when that measurement was not checked.
- Summary: '# Out of bounds values : N OK|FAILED' (N counts measurements with wrong data) and
  '# Avg bus bandwidth    : X', the mean busbw of every printed measurement, followed by OK or
  FAILED when NCCL_TESTS_MIN_BW is set.
- Failures are lines '<host>: Test NCCL failure <file>:<line> ...', '<host>: Test CUDA failure
  ...', ' .. <host> pid <pid>: Test failure <file>:<line>' and '<host>: Test timeout (<n>s) ...';
  a failure during a measurement is printed on that row's line, after the size columns.
- Launchers prefix what they forward:
  - Open MPI --tag-output puts '[1,0]<stdout>:' before every chunk it forwards, not only at the
    start of a line: a line the process flushed in pieces carries the tag again inside it, and a
    chunk of another rank can sit between the pieces (open-mpi/ompi#6948).
  - MPICH and Intel MPI (Hydra) -prepend-rank put '[0] ' before every chunk, so a row printed in
    three pieces reads '[0]  size ... -1[0]  time ...  0[0]  time ...' (NVIDIA/nccl#1453).
  - Slurm srun --label puts 'N: ' before every line, the task number padded to the width of the
    largest: ' 0: ' with 10 to 99 tasks (NVIDIA/nccl-tests#290), '  0: ' with 100 or more.

Everything here is pure, so the module and the unit tests share it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

_OMPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err|diag)>:")
_HYDRA_TAG = re.compile(r"^\[\d+\] ")
_SRUN_LABEL = re.compile(r"^ *\d+:(?: |$)")
_ERROR = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\bTest timeout\b")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_PARAMS = re.compile(r"^#\s*nThread\s+\d+")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus_id>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)\b")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)(?:\s+(OK|FAILED)\b)?")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+\S*)")
_INT = re.compile(r"^-?\d+$")
_WORD = re.compile(r"^[A-Za-z_][\w.]*$")
_PARAM_FIELDS = (
    ("nthreads", r"\bnThread\s+(\d+)"),
    ("ngpus", r"\bnGpus\s+(\d+)"),
    ("min_bytes", r"\bminBytes\s+(\d+)"),
    ("max_bytes", r"\bmaxBytes\s+(\d+)"),
    ("warmup_iters", r"\bwarmup iters:\s*(\d+)"),
    ("iters", r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"),
    ("agg_iters", r"\bagg iters:\s*(\d+)"),
    ("validation", r"\bvalidation:\s*(\d+)"),
    ("graph", r"\bgraph:\s*(\d+)"),
    ("unalign", r"\bunalign:\s*(\d+)"),
)


class NcclTestsError(ValueError):
    """The text holds no usable result table; errors are the failure lines nccl-tests printed."""

    def __init__(self, msg, errors=None, notes=None):
        super(NcclTestsError, self).__init__(msg)
        self.errors = list(errors or [])
        self.notes = list(notes or [])


def _float(token):
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _parameters(line):
    params = {}
    for key, pattern in _PARAM_FIELDS:
        match = re.search(pattern, line)
        if match:
            params[key] = int(match.group(1))
    step = re.search(r"\bstep:\s*(\d+)\((factor|bytes)\)", line)
    if step:
        params["step_" + step.group(2)] = int(step.group(1))
    return params


def _measurement(tokens, legacy):
    """One half of a row: time algbw busbw #wrong (or error), or None when it is not numbers."""
    numbers = [_float(token) for token in tokens[:3]]
    if any(number is None for number in numbers):
        return None
    mark = tokens[3].rstrip("*")
    wrong = error = None
    if mark != "N/A":
        value = _float(mark)
        if value is None:
            return None
        # The legacy column is a deviation printed as 1e-07; the current one a count printed with
        # %g, so a large count can read 1.04858e+06.
        if legacy:
            error = value
        else:
            wrong = round(value)
    return {"time_us": numbers[0], "algbw_gbps": numbers[1], "busbw_gbps": numbers[2], "wrong": wrong, "error": error}


def _row(line, legacy):
    """(row dict, legacy) for a table row, or None when the line is not one.

    legacy is None until a table header or a first row said which fourth column the table has.
    """
    tokens = line.split()
    for lead in (5, 4, 3):
        halves = len(tokens) - lead
        if halves in (8, 4):
            break
    else:
        return None
    if not (_INT.match(tokens[0]) and _INT.match(tokens[1]) and _WORD.match(tokens[2])):
        return None
    redop = root = None
    extra = tokens[3:lead]
    if lead == 5:
        if not (_WORD.match(extra[0]) and _INT.match(extra[1])):
            return None
        redop, root = extra[0], int(extra[1])
    elif lead == 4:
        if _INT.match(extra[0]):
            root = int(extra[0])
        elif _WORD.match(extra[0]):
            redop = extra[0]
        else:
            return None
    if legacy is None:
        # No table header seen: a legacy error column always has an exponent (0e+00).
        legacy = "e" in tokens[lead + 3].lower()
    out_of_place = _measurement(tokens[lead : lead + 4], legacy)
    in_place = _measurement(tokens[lead + 4 :], legacy) if halves == 8 else None
    if out_of_place is None or (halves == 8 and in_place is None):
        return None
    row = {
        "size_bytes": int(tokens[0]),
        "count": int(tokens[1]),
        "type": tokens[2],
        "redop": redop,
        "root": root,
        "out_of_place": out_of_place,
        "in_place": in_place,
    }
    return row, legacy


def _new_run():
    return {
        "test": None,
        "nccl_tests_version": None,
        "nccl_headers": None,
        "nccl_library": None,
        "nccl_version": None,
        "parameters": {},
        "devices": [],
        "legacy_error_column": None,
        "rows": [],
        "out_of_bounds": None,
        "out_of_bounds_ok": None,
        "avg_bus_bandwidth_gbps": None,
        "avg_bus_bandwidth_ok": None,
        "errors": [],
        "notes": [],
        "_closed": False,
    }


def _finish(run):
    run.pop("_closed", None)
    devices = run["devices"]
    run["nranks"] = len(devices)
    run["hosts"] = []
    for device in devices:
        if device["host"] not in run["hosts"]:
            run["hosts"].append(device["host"])
    ranks = [device["rank"] for device in devices]
    for rank in sorted(set(ranks)):
        if ranks.count(rank) > 1:
            run["notes"].append(
                "rank %d is listed %d times under '# Using devices': the processes did not join one job. "
                "nccl-tests was probably built without MPI=1, so each mpirun process ran its own test; "
                "rebuild with 'make MPI=1 MPI_HOME=...'" % (rank, ranks.count(rank))
            )
    busbw = [
        side["busbw_gbps"] for row in run["rows"] for side in (row["out_of_place"], row["in_place"]) if side is not None
    ]
    run["max_busbw_gbps"] = max(busbw) if busbw else None
    run["wrong_total"] = sum(
        side["wrong"] or 0 for row in run["rows"] for side in (row["out_of_place"], row["in_place"]) if side is not None
    )
    run["legacy_error_column"] = bool(run["legacy_error_column"])
    run["complete"] = run["out_of_bounds"] is not None and run["avg_bus_bandwidth_gbps"] is not None
    return run


def _pieces(line):
    """(tag, text) for each chunk a launcher forwarded on this printed line; tag None when untagged."""
    tags = list(_OMPI_TAG.finditer(line))
    if tags:
        pieces = [(None, line[: tags[0].start()])] if tags[0].start() else []
        ends = [tag.start() for tag in tags[1:]] + [len(line)]
        return pieces + [(tag.group(0), line[tag.end() : end]) for tag, end in zip(tags, ends)]
    hydra = _HYDRA_TAG.match(line)
    if hydra:
        # Only the line's own tag counts inside it: '[0] NCCL INFO' in a log line is a device index.
        return [(hydra.group(0), line[hydra.end() :].replace(hydra.group(0), ""))]
    return [(None, _SRUN_LABEL.sub("", line, count=1))]


def launcher_lines(text):
    """The lines each process printed, without the launcher's tags and labels.

    A printed line ends the chunk of its last tag; the chunks before it that another tag
    interrupted wait for the rest of their line (the launchers' formats are in the module docstring).
    """
    pending = {}
    lines = []
    for raw in (text or "").splitlines():
        pieces = _pieces(raw)
        for tag, piece in pieces[:-1]:
            pending[tag] = pending.get(tag, "") + piece
        tag, piece = pieces[-1]
        lines.append(pending.pop(tag, "") + piece)
    lines.extend(pending.values())
    return lines


def parse_runs(text):
    """Every run in the text, in order, as parse() describes them; runs without rows included."""
    runs = [_new_run()]
    for printed in launcher_lines(text):
        line = printed.rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        run = runs[-1]
        if _ERROR.search(line):
            run["errors"].append(stripped)
            continue
        starts = _VERSION.match(stripped) or _STARTING.match(stripped) or _PARAMS.match(stripped)
        if starts and (run["rows"] or run["_closed"] or run["out_of_bounds"] is not None):
            run = _new_run()
            runs.append(run)
        if _parse_header_line(run, stripped):
            continue
        if stripped.startswith("#"):
            _parse_comment(run, stripped)
            continue
        nccl_version = _NCCL_VERSION.search(line)
        if nccl_version:
            run["nccl_version"] = run["nccl_version"] or nccl_version.group(1)
            continue
        parsed = _row(line, run["legacy_error_column"])
        if parsed:
            row, run["legacy_error_column"] = parsed
            run["rows"].append(row)
    return [_finish(run) for run in runs if run["rows"] or run["errors"] or run["devices"] or run["parameters"]]


def _parse_header_line(run, line):
    match = _VERSION.match(line)
    if match:
        run["nccl_tests_version"] = match.group(1)
        run["nccl_headers"] = int(match.group(2)) if match.group(2) else None
        run["nccl_library"] = int(match.group(3)) if match.group(3) else None
        return True
    match = _STARTING.match(line)
    if match:
        run["test"] = match.group(1)
        return True
    match = _CONCLUDED.match(line)
    if match:
        run["test"] = run["test"] or match.group(1)
        run["_closed"] = True
        return True
    if _PARAMS.match(line):
        run["parameters"] = _parameters(line)
        return True
    match = _RANK.match(line)
    if match:
        device = match.groupdict()
        for key in ("rank", "group", "pid", "device"):
            device[key] = int(device[key]) if device[key] is not None else None
        run["devices"].append(device)
        return True
    return False


def _parse_comment(run, line):
    tokens = line.lstrip("#").split()
    if "size" in tokens and "busbw" in tokens:
        if run["rows"]:
            return
        run["legacy_error_column"] = "error" in tokens and "#wrong" not in tokens
        return
    match = _OUT_OF_BOUNDS.match(line)
    if match:
        if run["out_of_bounds"] is not None:
            run["notes"].append(
                "a second '# Out of bounds values' line follows the first without a new run header: several "
                "processes printed their own results, as when mpirun starts an nccl-tests built without MPI=1; "
                "kept the first"
            )
            return
        run["out_of_bounds"] = int(match.group(1))
        run["out_of_bounds_ok"] = match.group(2) == "OK"
        return
    match = _AVG_BUSBW.match(line)
    if match and run["avg_bus_bandwidth_gbps"] is None:
        run["avg_bus_bandwidth_gbps"] = _float(match.group(1))
        run["avg_bus_bandwidth_ok"] = None if match.group(2) is None else match.group(2) == "OK"


def parse(text):
    """One nccl-tests run: header facts, rows and summary.

    Raises NcclTestsError (a ValueError) when the text holds no result row, with the failure
    lines nccl-tests printed, or when it holds the tables of several runs.
    """
    runs = parse_runs(text)
    with_rows = [run for run in runs if run["rows"]]
    errors = [line for run in runs for line in run["errors"]]
    notes = [note for run in runs for note in run["notes"]]
    if not with_rows:
        if errors:
            msg = "nccl-tests printed no result row and reported %d failure line(s), the first: %s" % (
                len(errors),
                errors[0],
            )
        else:
            msg = (
                "no nccl-tests result table found: expected rows like '1048576  262144  float  sum  -1  "
                "<time> <algbw> <busbw> <#wrong> ...' after the '#  size  count  type' header. "
                "Pass the stdout of all_reduce_perf (or another *_perf binary) from rank 0"
            )
        if notes:
            msg += ". Note: " + "; ".join(notes)
        raise NcclTestsError(msg, errors=errors, notes=notes)
    if len(with_rows) > 1:
        names = ", ".join(run["test"] or "unnamed" for run in with_rows)
        raise NcclTestsError(
            "the output holds %d nccl-tests runs (%s); capture each run's output separately" % (len(with_rows), names),
            errors=errors,
            notes=notes,
        )
    result = with_rows[0]
    # A run that failed before its table (a retry in the same log) still counts against the output.
    result["errors"] = errors
    result["notes"] = notes
    return result


def verdict(result, min_busbw_gbps=None):
    """(passed, problems) for a parse() result: failures, wrong data, an unfinished or mixed run, low busbw."""
    problems = []
    if result["errors"]:
        problems.append("nccl-tests reported %d failure line(s): %s" % (len(result["errors"]), result["errors"][0]))
    if not result["complete"]:
        problems.append(
            "the run has no summary ('# Out of bounds values' and '# Avg bus bandwidth'): it did not finish"
        )
    if result["out_of_bounds"]:
        problems.append("%d measurement(s) had wrong data (Out of bounds values)" % result["out_of_bounds"])
    if result["wrong_total"]:
        sizes = sorted(
            {
                row["size_bytes"]
                for row in result["rows"]
                for side in (row["out_of_place"], row["in_place"])
                if side is not None and side["wrong"]
            }
        )
        problems.append(
            "%d wrong element(s) at size(s) %s bytes" % (result["wrong_total"], ", ".join(str(s) for s in sizes))
        )
    problems.extend(result["notes"])
    if result.get("avg_bus_bandwidth_ok") is False:
        problems.append("nccl-tests marked the average bus bandwidth FAILED (below NCCL_TESTS_MIN_BW)")
    avg = result["avg_bus_bandwidth_gbps"]
    if min_busbw_gbps is not None and (avg is None or avg < min_busbw_gbps):
        problems.append(
            "average bus bandwidth %s GB/s is below the expected %s GB/s"
            % ("unknown" if avg is None else avg, min_busbw_gbps)
        )
    return not problems, problems


# The nccl_tests role's settings ----------------------------------------------------------------

SOURCE_EXAMPLE = "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz"
_CHECKSUM = re.compile(r"^sha256:[0-9a-fA-F]{64}\Z")
# nccl-tests reads the GPU count with getopt_long (src/common.cu: "g:" and "ngpus"), so -g 4,
# -g4, --ngpus 4 and --ngpus=4 all set it.
_GPU_COUNT_ARG = re.compile(r"^(-g.*|--ngpus(=.*)?)\Z")


def _json(value):
    return json.dumps(value, default=str)


def settings_problems(settings):
    """Every problem of the nccl_tests role's settings on a GPU host (_role_problems('nccl_tests')),
    one message each; none on a host without GPUs, which skips nccl-tests.

    settings: nccl_tests_source, nccl_tests_source_checksum, nccl_tests_args, nccl_tests_cuda_home,
    gpu_count (the NVIDIA GPUs on the host's PCI bus), nvcc (the registered stat of
    <nccl_tests_cuda_home>/bin/nvcc) and inventory_hostname."""
    count = settings.get("gpu_count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return []
    problems = []
    if settings.get("nccl_tests_source") in (None, "", [], {}):
        problems.append(
            "nccl_tests_source is empty: set it to an nccl-tests release tarball (%s), a mirror or a controller path."
            % SOURCE_EXAMPLE
        )
    checksum = settings.get("nccl_tests_source_checksum")
    if not _CHECKSUM.match(str(checksum)):
        problems.append(
            "nccl_tests_source_checksum=%s is not sha256:<64 hex>: set it to the sha256 of nccl_tests_source."
            % _json(checksum)
        )
    args = settings.get("nccl_tests_args")
    if not isinstance(args, list):
        problems.append("nccl_tests_args=%s must be a list of the binary's arguments, e.g. [-b, 512M]" % _json(args))
    else:
        count_args = [str(arg) for arg in args if _GPU_COUNT_ARG.match(str(arg))]
        if count_args:
            problems.append(
                "nccl_tests_args=%s has %s: leave it out, the role sets -g to the GPU count of the host."
                % (_json(args), "-g" if "-g" in count_args else count_args[0])
            )
    nvcc = settings.get("nvcc") or {}
    if not (isinstance(nvcc, dict) and (nvcc.get("stat") or {}).get("exists")):
        problems.append(
            "%s/bin/nvcc is missing on %s; install the CUDA toolkit or set nccl_tests_cuda_home"
            % (settings.get("nccl_tests_cuda_home"), settings.get("inventory_hostname"))
        )
    return problems
