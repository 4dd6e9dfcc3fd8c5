# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_nccl_tests.py, on real nccl-tests outputs (fixtures/nccl-tests/README.md)."""

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl_tests import (
    NcclTestsError,
    launcher_lines,
    parse,
    parse_runs,
    settings_problems,
    verdict,
)

FIXTURES = Path(__file__).parent / "fixtures" / "nccl-tests"


def fixture(name):
    return (FIXTURES / name).read_text()


def sides(result):
    return [side for row in result["rows"] for side in (row["out_of_place"], row["in_place"]) if side is not None]


def test_every_fixture_is_documented():
    readme = fixture("README.md")
    for path in FIXTURES.glob("*.txt"):
        assert f"`{path.name}`" in readme


def test_mpi_run_on_two_nodes():
    result = parse(fixture("all_reduce_perf-mpi-2nodes-16ranks.txt"))
    assert result["test"] is None
    assert result["nccl_tests_version"] is None
    assert result["parameters"] == {
        "nthreads": 1,
        "ngpus": 1,
        "min_bytes": 8,
        "max_bytes": 8589934592,
        "step_factor": 2,
        "warmup_iters": 5,
        "iters": 20,
        "agg_iters": 1,
        "validation": 1,
        "graph": 0,
    }
    assert result["nranks"] == 16
    assert result["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]
    assert result["devices"][8] == {
        "rank": 8,
        "group": 0,
        "pid": 6733,
        "host": "ztan-mig-gq73",
        "device": 0,
        "bus_id": "0000:04:00",
        "name": "NVIDIA H100 80GB HBM3",
    }
    rows = result["rows"]
    assert len(rows) == 31
    assert (rows[0]["size_bytes"], rows[-1]["size_bytes"]) == (8, 8589934592)
    assert rows[-1] == {
        "size_bytes": 8589934592,
        "count": 2147483648,
        "type": "float",
        "redop": "sum",
        "root": -1,
        "out_of_place": {"time_us": 47535.0, "algbw_gbps": 180.71, "busbw_gbps": 338.82, "wrong": 0, "error": None},
        "in_place": {"time_us": 47743.0, "algbw_gbps": 179.92, "busbw_gbps": 337.35, "wrong": 0, "error": None},
    }
    assert rows[24]["size_bytes"] == 134217728
    assert rows[24]["in_place"]["busbw_gbps"] == 153.76
    assert result["legacy_error_column"] is False
    assert result["avg_bus_bandwidth_gbps"] == 70.742
    assert result["avg_bus_bandwidth_ok"] is None
    assert (result["out_of_bounds"], result["out_of_bounds_ok"]) == (0, True)
    assert result["max_busbw_gbps"] == 338.82
    assert result["wrong_total"] == 0
    assert result["complete"] is True
    assert result["errors"] == []
    assert result["notes"] == []
    assert verdict(result) == (True, [])
    assert verdict(result, 70.0) == (True, [])
    passed, problems = verdict(result, 100.0)
    assert passed is False
    assert problems == ["average bus bandwidth 70.742 GB/s is below the expected 100.0 GB/s"]


@pytest.mark.parametrize(
    "name, nranks",
    [
        ("all_reduce_perf-mpi-2nodes-16ranks.txt", 16),
        ("all_reduce_perf-g4-single-process.txt", 4),
    ],
)
def test_all_reduce_busbw_is_algbw_times_2_n_minus_1_over_n(name, nranks):
    factor = 2.0 * (nranks - 1) / nranks
    measured = [side for side in sides(parse(fixture(name))) if side["algbw_gbps"] >= 1]
    assert measured
    for side in measured:
        # Both columns are rounded to 0.01 GB/s.
        assert side["busbw_gbps"] == pytest.approx(side["algbw_gbps"] * factor, abs=0.005 * factor + 0.006)


def test_several_gpus_in_one_process():
    result = parse(fixture("all_reduce_perf-g4-single-process.txt"))
    assert result["parameters"]["ngpus"] == 4
    assert result["nranks"] == 4
    assert result["hosts"] == ["GENOA-01"]
    assert {device["pid"] for device in result["devices"]} == {2168673}
    assert [device["bus_id"] for device in result["devices"]] == ["0x01", "0x21", "0x41", "0x61"]
    assert len(result["rows"]) == 25
    assert (result["rows"][0]["size_bytes"], result["rows"][-1]["size_bytes"]) == (8, 134217728)
    assert result["rows"][-1]["out_of_place"]["busbw_gbps"] == 27.26
    assert result["rows"][-1]["in_place"]["busbw_gbps"] == 27.28
    assert result["avg_bus_bandwidth_gbps"] == 9.09703
    assert result["max_busbw_gbps"] == 27.28
    assert result["out_of_bounds"] == 0
    assert verdict(result) == (True, [])


def test_single_gpu_has_no_bus_bandwidth():
    result = parse(fixture("all_reduce_perf-g1-single-gpu.txt"))
    assert result["nranks"] == 1
    assert len(result["rows"]) == 25
    assert {side["busbw_gbps"] for side in sides(result)} == {0.0}
    # With one rank the in-place all-reduce moves nothing: its algbw is meaningless.
    assert result["rows"][-1]["in_place"]["algbw_gbps"] == 1777718.25
    assert result["avg_bus_bandwidth_gbps"] == 0.0
    assert result["max_busbw_gbps"] == 0.0
    assert verdict(result) == (True, [])
    assert verdict(result, 1.0)[0] is False


def test_wrong_data_and_out_of_bounds():
    result = parse(fixture("all_reduce_perf-2.17.8-out-of-bounds.txt"))
    assert result["test"] == "all_reduce_perf"
    assert result["nccl_tests_version"] == "2.17.8"
    assert (result["nccl_headers"], result["nccl_library"]) == (22902, 22902)
    assert result["hosts"] == ["gpu-1-1", "gpu-1-7"]
    assert [device["pid"] for device in result["devices"]] == [662195, 2448661]
    assert len(result["rows"]) == 25
    bad = [row for row in result["rows"] if row["out_of_place"]["wrong"] or row["in_place"]["wrong"]]
    assert [(row["size_bytes"], row["out_of_place"]["wrong"], row["in_place"]["wrong"]) for row in bad] == [
        (1048576, 96, 32)
    ]
    assert result["wrong_total"] == 128
    assert (result["out_of_bounds"], result["out_of_bounds_ok"]) == (4, False)
    assert result["avg_bus_bandwidth_gbps"] == 4.79995
    assert result["max_busbw_gbps"] == 22.87
    assert result["complete"] is True
    # The binary exits with an error after the summary, from each process.
    assert result["errors"] == [
        ".. gpu-1-1 pid 662195: Test failure common.cu:1189",
        ".. gpu-1-7 pid 2448661: Test failure common.cu:1189",
    ]
    passed, problems = verdict(result)
    assert passed is False
    assert problems == [
        "nccl-tests reported 2 failure line(s): .. gpu-1-1 pid 662195: Test failure common.cu:1189",
        "4 measurement(s) had wrong data (Out of bounds values)",
        "128 wrong element(s) at size(s) 1048576 bytes",
    ]


def test_cuda_failure_before_the_table():
    text = fixture("all_reduce_perf-2.17.8-cuda-failure.txt")
    with pytest.raises(NcclTestsError) as exc:
        parse(text)
    assert isinstance(exc.value, ValueError)
    assert str(exc.value) == (
        "nccl-tests printed no result row and reported 12 failure line(s), the first: gpu-1-1: Test CUDA failure "
        "common.cu:1304 'CUDA-capable device(s) is/are busy or unavailable'"
    )
    assert len(exc.value.errors) == 12
    assert exc.value.errors[1] == ".. gpu-1-1 pid 3617715: Test failure common.cu:1189"
    [run] = parse_runs(text)
    assert run["test"] == "all_reduce_perf"
    assert run["nranks"] == 8
    assert run["hosts"] == ["gpu-1-1", "gpu-1-7"]
    assert run["rows"] == []
    assert run["complete"] is False


def test_nccl_failure_after_the_table_header():
    with pytest.raises(
        NcclTestsError, match=r"reported 6 failure line\(s\), the first: GENOA-06: Test NCCL failure"
    ) as exc:
        parse(fixture("all_reduce_perf-g2-nccl-failure.txt"))
    assert exc.value.errors[-1] == ".. GENOA-06 pid 5068: Test failure common.cu:891"


def test_failure_printed_on_the_row_line():
    text = fixture("alltoall_perf-2.17.6-illegal-memory-access.txt")
    with pytest.raises(NcclTestsError) as exc:
        parse(text)
    assert exc.value.errors[0] == (
        "2097152         32768     float    none      -1 node0: Test CUDA failure common.cu:389 "
        "'an illegal memory access was encountered'"
    )
    assert len(exc.value.errors) == 7
    [run] = parse_runs(text)
    assert run["test"] == "alltoall_perf"
    assert run["nccl_tests_version"] == "2.17.6"
    assert run["nccl_version"] == "2.28.7+cuda13.0"
    assert run["parameters"]["step_bytes"] == 0
    assert run["nranks"] == 16
    assert run["hosts"] == ["node0", "node1"]


def test_two_runs_in_one_output():
    text = fixture("alltoall-sendrecv_perf-2nodes-g2.txt")
    with pytest.raises(NcclTestsError, match=r"holds 2 nccl-tests runs \(alltoall_perf, sendrecv_perf\)"):
        parse(text)
    alltoall, sendrecv = parse_runs(text)
    assert (alltoall["test"], sendrecv["test"]) == ("alltoall_perf", "sendrecv_perf")
    for run in (alltoall, sendrecv):
        assert run["nranks"] == 4
        assert run["hosts"] == ["cnode4-005", "cnode4-007"]
        assert len(run["rows"]) == 10
        assert (run["rows"][0]["size_bytes"], run["rows"][-1]["size_bytes"]) == (33554432, 17179869184)
        assert {row["type"] for row in run["rows"]} == {"double"}
        # The in-place measurements were not checked: '#wrong' reads N/A.
        assert {row["in_place"]["wrong"] for row in run["rows"]} == {None}
        assert {row["out_of_place"]["wrong"] for row in run["rows"]} == {0}
        assert run["complete"] is True
    assert alltoall["rows"][0]["redop"] == "none"
    assert alltoall["rows"][-1]["out_of_place"]["busbw_gbps"] == 53.79
    assert alltoall["avg_bus_bandwidth_gbps"] == 52.6393
    assert sendrecv["rows"][0]["redop"] == "sum"
    assert all(row["out_of_place"]["busbw_gbps"] == row["out_of_place"]["algbw_gbps"] for row in sendrecv["rows"])
    assert sendrecv["avg_bus_bandwidth_gbps"] == 28.3875
    assert verdict(alltoall) == (True, [])


def test_legacy_table_with_open_mpi_tags_and_empty_redop():
    result = parse(fixture("alltoall_perf-legacy-mpirun-tag-output.txt"))
    assert result["legacy_error_column"] is True
    assert len(result["rows"]) == 13
    first = result["rows"][0]
    assert (first["size_bytes"], first["count"], first["type"], first["redop"], first["root"]) == (
        1048576,
        512,
        "float",
        None,
        None,
    )
    assert first["out_of_place"] == {
        "time_us": 2542.6,
        "algbw_gbps": 0.41,
        "busbw_gbps": 0.41,
        "wrong": None,
        "error": 0.0,
    }
    assert first["in_place"]["error"] == 1.0
    assert result["rows"][-1]["size_bytes"] == 4294967296
    assert result["max_busbw_gbps"] == 17.44
    assert (result["out_of_bounds"], result["avg_bus_bandwidth_gbps"]) == (0, 5.55608)
    assert result["wrong_total"] == 0
    assert verdict(result) == (True, [])


def test_legacy_rows_without_header_or_summary():
    result = parse(fixture("all_reduce_perf-legacy-rows-only.txt"))
    assert result["legacy_error_column"] is True
    assert len(result["rows"]) == 19
    assert (result["rows"][0]["size_bytes"], result["rows"][-1]["size_bytes"]) == (128, 33554432)
    assert {row["redop"] for row in result["rows"]} == {"sum"}
    assert result["rows"][-1]["out_of_place"]["busbw_gbps"] == 154.71
    assert result["rows"][1]["in_place"]["error"] == 6e-08
    assert result["complete"] is False
    assert result["out_of_bounds"] is None
    assert result["avg_bus_bandwidth_gbps"] is None
    passed, problems = verdict(result, 10.0)
    assert passed is False
    assert problems == [
        "the run has no summary ('# Out of bounds values' and '# Avg bus bandwidth'): it did not finish",
        "average bus bandwidth unknown GB/s is below the expected 10.0 GB/s",
    ]


def test_legacy_table_with_interleaved_nccl_log_lines():
    result = parse(fixture("all_reduce_perf-legacy-17ranks-out-of-bounds.txt"))
    assert result["legacy_error_column"] is True
    assert len(result["rows"]) == 22
    assert (result["rows"][0]["size_bytes"], result["rows"][-1]["size_bytes"]) == (1024, 2147483648)
    last = result["rows"][-1]
    assert (last["redop"], last["root"]) == ("sum", None)
    # An 8-digit time overflows its column and touches its neighbours' spacing.
    assert last["out_of_place"]["time_us"] == 19240553.0
    assert last["out_of_place"]["error"] == 3.0
    assert last["in_place"]["busbw_gbps"] == 15.89
    assert result["max_busbw_gbps"] == 16.46
    assert (result["out_of_bounds"], result["out_of_bounds_ok"]) == (374, False)
    assert result["avg_bus_bandwidth_gbps"] == 3.85778
    assert verdict(result)[1] == ["374 measurement(s) had wrong data (Out of bounds values)"]


def test_mpirun_of_a_build_without_mpi_lists_rank_0_twice():
    with pytest.raises(NcclTestsError) as exc:
        parse(fixture("all_reduce_perf-no-mpi-build-head.txt"))
    assert exc.value.errors == []
    assert len(exc.value.notes) == 1
    assert exc.value.notes[0].startswith("rank 0 is listed 2 times under '# Using devices'")
    assert "MPI=1" in str(exc.value)


def test_mpirun_of_a_build_without_mpi_prints_two_summaries():
    result = parse(fixture("all_reduce_perf-no-mpi-build-tail.txt"))
    assert [row["size_bytes"] for row in result["rows"]] == [4194304, 4194304]
    assert result["rows"][0]["in_place"]["algbw_gbps"] == 15033.35
    assert result["avg_bus_bandwidth_gbps"] == 0.0
    assert len(result["notes"]) == 1
    assert "without MPI=1" in result["notes"][0]
    passed, problems = verdict(result)
    assert passed is False
    assert problems == result["notes"]


@pytest.mark.parametrize("text", ["", "\n\n", "bash: all_reduce_perf: command not found\n"])
def test_no_table_is_a_value_error(text):
    with pytest.raises(ValueError, match="no nccl-tests result table found"):
        parse(text)


def test_srun_label_prefix_is_ignored():
    text = fixture("all_reduce_perf-g4-single-process.txt")
    labelled = "".join(f"0: {line}\n" for line in text.splitlines())
    assert parse(labelled) == parse(text)


def test_srun_label_padded_for_sixteen_tasks():
    # ' 0: ': srun pads the task number to the width of the largest (15).
    result = parse(fixture("all_reduce_perf-srun-label-16tasks.txt"))
    assert result["nranks"] == 16
    assert result["hosts"] == ["node005", "node007"]
    assert len(result["rows"]) == 11
    assert result["rows"][-1]["size_bytes"] == 8589934592
    assert result["rows"][-1]["in_place"]["busbw_gbps"] == 155.56
    assert result["rows"][0]["out_of_place"]["wrong"] is None  # N/A: validation off
    assert result["avg_bus_bandwidth_gbps"] == 142.735
    assert result["out_of_bounds"] == 0
    assert verdict(result) == (True, [])


@pytest.mark.parametrize("pad", ["  ", "   "])
def test_srun_label_padded_for_hundreds_of_tasks(pad):
    text = fixture("all_reduce_perf-srun-label-16tasks.txt")
    wider = "".join(pad + line.lstrip() + "\n" for line in text.splitlines())
    assert parse(wider) == parse(text)


def test_srun_label_is_only_a_line_start():
    # A row has no colon; a failure line's host is not a bare number and stays whole.
    text = "node0: Test NCCL failure common.cu:123 'unhandled system error'\n"
    with pytest.raises(NcclTestsError) as excinfo:
        parse(" 3: " + text)
    assert excinfo.value.errors == [text.strip()]


def test_hydra_rank_prefix_repeated_inside_rows():
    # Each row came in three chunks, each with its own '[0] ' (NVIDIA/nccl#1453).
    result = parse(fixture("all_reduce_perf-hydra-prepend-rank-split-rows.txt"))
    assert [row["size_bytes"] for row in result["rows"]] == [2**n for n in range(20, 30)]
    first = result["rows"][0]
    assert (first["out_of_place"]["time_us"], first["out_of_place"]["busbw_gbps"]) == (1626.5, 1.24)
    assert (first["in_place"]["time_us"], first["in_place"]["busbw_gbps"]) == (2302.3, 0.87)
    assert result["rows"][-1]["in_place"]["time_us"] == 192903
    assert result["wrong_total"] == 0
    # Only rows were kept from the thread: the summary is missing, and the verdict says so.
    passed, problems = verdict(result)
    assert not passed and "did not finish" in problems[0]


def test_hydra_prefix_removes_only_the_lines_own_tag():
    # Inside rank 0's line '[0] ' is a chunk boundary; '[3] ', a device index of rank 0's log, stays.
    line = "[0] h100clust-worker-1:227602:227760 [3] NCCL INFO Channel 04/0 : 0[0] -> 7[7] via P2P/CUMEM"
    assert launcher_lines(line) == [
        "h100clust-worker-1:227602:227760 [3] NCCL INFO Channel 04/0 : 0-> 7[7] via P2P/CUMEM"
    ]
    rows = fixture("all_reduce_perf-hydra-prepend-rank-split-rows.txt")
    assert parse(line + "\n" + rows)["rows"] == parse(rows)["rows"]


def _open_mpi_chunks(text, other="[1,1]<stderr>:"):
    """The fixture's rows as Open MPI forwards a row flushed in two chunks with another rank's
    chunk between them: the tag again before the in-place half, and rank 1's stderr line ending
    the printed line that holds rank 0's first chunk (open-mpi/ompi#6948). No capture of this
    with nccl-tests was found; the chunks are cut from the real rows of the fixture."""
    out = []
    for line in text.splitlines():
        tag, _sep, body = line.partition(">:")
        tokens = body.split()
        if len(tokens) == 11:  # a row: size count type time algbw busbw error, twice (no redop, no root)
            cut = body.index(tokens[7], body.index(tokens[6]) + len(tokens[6]))
            out.append(f"{tag}>:{body[:cut]}{other}NCCL WARN a line of rank 1")
            out.append(f"{tag}>:{body[cut:]}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_open_mpi_tag_repeated_inside_a_row():
    text = fixture("alltoall_perf-legacy-mpirun-tag-output.txt")
    chunked = _open_mpi_chunks(text)
    assert chunked.count("[1,1]<stderr>:") == len(parse(text)["rows"]) > 0
    lines = launcher_lines(chunked)
    assert lines.count("NCCL WARN a line of rank 1") == len(parse(text)["rows"])
    assert parse(chunked) == parse(text)


def test_open_mpi_chunk_without_its_end_is_kept():
    lines = launcher_lines("[1,0]<stdout>:     1048576   262144[1,1]<stdout>:rank 1 line\n")
    assert lines == ["rank 1 line", "     1048576   262144"]


def test_row_without_in_place_half():
    # The first row of a real table, cut after its out-of-place measurement.
    line = fixture("all_reduce_perf-mpi-2nodes-16ranks.txt").splitlines()[31]
    half = " ".join(line.split()[:9])
    assert half == "8 2 float sum -1 135.8 0.00 0.00 0"
    [row] = parse(half)["rows"]
    assert row["in_place"] is None
    assert row["out_of_place"]["time_us"] == 135.8


@pytest.mark.parametrize(
    "line, value, ok",
    [
        # src/common.cu prints '# Avg bus bandwidth    : %g %s', %s is OK/FAILED when NCCL_TESTS_MIN_BW is set.
        ("# Avg bus bandwidth    : 70.742 ", 70.742, None),
        ("# Avg bus bandwidth    : 70.742 FAILED", 70.742, False),
        ("# Avg bus bandwidth    : 70.742 OK", 70.742, True),
    ],
)
def test_avg_bus_bandwidth_line(line, value, ok):
    lines = fixture("all_reduce_perf-mpi-2nodes-16ranks.txt").splitlines()
    result = parse("\n".join([*lines[:-1], line]))
    assert (result["avg_bus_bandwidth_gbps"], result["avg_bus_bandwidth_ok"]) == (value, ok)


def test_timeout_line_is_a_failure():
    # No captured timeout was found; this is the line src/common.cu prints for -T:
    # printf("%s: Test timeout (%ds) %s:%d\n", hostname, timeout, __FILE__, __LINE__).
    line = "gpu-1-1: Test timeout (60s) common.cu:412"
    with pytest.raises(NcclTestsError) as exc:
        parse(fixture("all_reduce_perf-g2-nccl-failure.txt").split("GENOA-06: Test")[0] + line + "\n")
    assert exc.value.errors == [line]


def test_avg_bus_bandwidth_failed_by_nccl_tests_fails_the_verdict():
    # With NCCL_TESTS_MIN_BW set, nccl-tests itself marks a low average FAILED.
    lines = fixture("all_reduce_perf-mpi-2nodes-16ranks.txt").splitlines()
    result = parse("\n".join([*lines[:-1], "# Avg bus bandwidth    : 70.742 FAILED"]))
    assert verdict(result) == (
        False,
        ["nccl-tests marked the average bus bandwidth FAILED (below NCCL_TESTS_MIN_BW)"],
    )


# The nccl_tests role's settings (role_problems('nccl_tests')) ----------------------------------

SHA = "sha256:" + "ab" * 32
NVCC = {"changed": False, "stat": {"exists": True, "path": "/usr/local/cuda/bin/nvcc", "mode": "0755"}}


def nccl_tests_settings(**changes):
    settings = {
        "inventory_hostname": "gpu01",
        "nccl_tests_source": "https://mirror.example/nccl-tests-2.17.8.tar.gz",
        "nccl_tests_source_checksum": SHA,
        "nccl_tests_args": ["-b", "512M", "-e", "4G", "-f", "2", "-n", "20"],
        "nccl_tests_cuda_home": "/usr/local/cuda",
        "gpu_count": 8,
        "nvcc": NVCC,
    }
    settings.update(changes)
    return settings


def test_good_nccl_tests_settings_pass():
    assert settings_problems(nccl_tests_settings()) == []
    assert settings_problems(nccl_tests_settings(nccl_tests_args=[])) == []


def test_a_host_without_gpus_checks_nothing():
    skipped = {"changed": False, "skipped": True}
    assert settings_problems(nccl_tests_settings(gpu_count=0, nccl_tests_source="", nvcc=skipped)) == []


@pytest.mark.parametrize("source", ["", None])
def test_an_empty_source_is_refused(source):
    assert settings_problems(nccl_tests_settings(nccl_tests_source=source)) == [
        "nccl_tests_source is empty: set it to an nccl-tests release tarball "
        "(https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz), a mirror or a controller path."
    ]


@pytest.mark.parametrize(
    "checksum, shown",
    [
        ("md5:0123456789abcdef", '"md5:0123456789abcdef"'),
        ("", '""'),
        (SHA + "\n", f'"{SHA}\\n"'),
        ("ab" * 32, f'"{"ab" * 32}"'),
        (None, "null"),
    ],
)
def test_a_checksum_that_is_not_sha256_is_refused(checksum, shown):
    assert settings_problems(nccl_tests_settings(nccl_tests_source_checksum=checksum)) == [
        f"nccl_tests_source_checksum={shown} is not sha256:<64 hex>: set it to the sha256 of nccl_tests_source."
    ]


@pytest.mark.parametrize(
    "args, found",
    [
        (["-b", 8, "-g", "4"], "-g"),
        (["-g4"], "-g4"),
        (["--ngpus", "4"], "--ngpus"),
        (["--ngpus=4", "-g", "2"], "-g"),
    ],
)
def test_a_gpu_count_in_the_arguments_is_refused(args, found):
    assert settings_problems(nccl_tests_settings(nccl_tests_args=args)) == [
        f"nccl_tests_args={json.dumps(args)} has {found}: leave it out, the role sets -g to the GPU count of the host."
    ]


def test_arguments_that_are_not_a_list_are_refused():
    (problem,) = settings_problems(nccl_tests_settings(nccl_tests_args="-b 8 -e 128M"))
    assert problem == 'nccl_tests_args="-b 8 -e 128M" must be a list of the binary\'s arguments, e.g. [-b, 512M]'


def test_a_missing_nvcc_is_refused():
    missing = {"changed": False, "stat": {"exists": False}}
    assert settings_problems(nccl_tests_settings(nvcc=missing)) == [
        "/usr/local/cuda/bin/nvcc is missing on gpu01; install the CUDA toolkit or set nccl_tests_cuda_home"
    ]


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        nccl_tests_settings(nccl_tests_source="", nccl_tests_source_checksum="", nccl_tests_args=["-g", "8"], nvcc={})
    )
    assert [problem.split(" ")[0].split("=")[0] for problem in problems] == [
        "nccl_tests_source",
        "nccl_tests_source_checksum",
        "nccl_tests_args",
        "/usr/local/cuda/bin/nvcc",
    ]
