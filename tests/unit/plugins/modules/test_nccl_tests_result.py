# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the nccl_tests_result module, on the real outputs in module_utils/fixtures/nccl-tests."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import nccl_tests_result

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "nccl-tests"
MPI_RUN = FIXTURES / "all_reduce_perf-mpi-2nodes-16ranks.txt"


def test_path_option(run_module):
    result = run_module(nccl_tests_result, {"path": str(MPI_RUN)})
    assert result["changed"] is False
    assert result["passed"] is True
    assert result["problems"] == []
    assert len(result["rows"]) == 31
    assert result["rows"][-1]["out_of_place"]["busbw_gbps"] == 338.82
    assert result["avg_bus_bandwidth_gbps"] == 70.742
    assert result["out_of_bounds"] == 0
    assert result["nranks"] == 16
    assert result["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]


def test_output_option_gives_the_same_result(run_module):
    from_path = run_module(nccl_tests_result, {"path": str(MPI_RUN)})
    from_output = run_module(nccl_tests_result, {"output": MPI_RUN.read_text()})
    for key in ("invocation",):
        from_path.pop(key)
        from_output.pop(key)
    assert from_output == from_path


@pytest.mark.parametrize("minimum, passed", [(70.0, True), (70.742, True), (70.75, False), (300, False)])
def test_min_busbw_sets_passed_without_failing(run_module, minimum, passed):
    result = run_module(nccl_tests_result, {"path": str(MPI_RUN), "min_busbw_gbps": minimum})
    assert result.get("failed") is not True
    assert result["passed"] is passed
    if not passed:
        assert result["problems"] == [f"average bus bandwidth 70.742 GB/s is below the expected {float(minimum)} GB/s"]


def test_wrong_data_is_not_passed(run_module):
    result = run_module(nccl_tests_result, {"path": str(FIXTURES / "all_reduce_perf-2.17.8-out-of-bounds.txt")})
    assert result.get("failed") is not True
    assert result["passed"] is False
    assert result["out_of_bounds"] == 4
    assert result["wrong_total"] == 128
    assert "4 measurement(s) had wrong data (Out of bounds values)" in result["problems"]


def test_failure_output_fails_with_file_name_and_errors(run_module):
    path = FIXTURES / "all_reduce_perf-2.17.8-cuda-failure.txt"
    result = run_module(nccl_tests_result, {"path": str(path)}, failed=True)
    assert result["failed"] is True
    assert result["msg"].startswith(f"{path}: nccl-tests printed no result row and reported 12 failure line(s)")
    assert len(result["errors"]) == 12
    assert result["errors"][0].startswith("gpu-1-1: Test CUDA failure common.cu:1304")


def test_unparseable_output_option_fails(run_module):
    result = run_module(nccl_tests_result, {"output": "mpirun: command not found"}, failed=True)
    assert result["msg"].startswith("output: no nccl-tests result table found")
    assert result["errors"] == []


def test_two_runs_fail(run_module):
    result = run_module(
        nccl_tests_result, {"path": str(FIXTURES / "alltoall-sendrecv_perf-2nodes-g2.txt")}, failed=True
    )
    assert "holds 2 nccl-tests runs (alltoall_perf, sendrecv_perf)" in result["msg"]


def test_notes_become_warnings(run_module, monkeypatch):
    # Record module.warn() itself: where a warning ends up (the result, or the controller's
    # display) depends on what else the test process has imported.
    warned = []
    monkeypatch.setattr(nccl_tests_result.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    result = run_module(nccl_tests_result, {"path": str(FIXTURES / "all_reduce_perf-no-mpi-build-tail.txt")})
    assert result["passed"] is False
    assert len(result["notes"]) == 1
    assert warned == result["notes"]


def test_unreadable_path_fails(run_module, tmp_path):
    missing = tmp_path / "absent.log"
    result = run_module(nccl_tests_result, {"path": str(missing)}, failed=True)
    assert result["msg"].startswith(f"cannot read {missing}:")


def test_path_and_output_are_mutually_exclusive(run_module):
    result = run_module(nccl_tests_result, {"path": str(MPI_RUN), "output": "x"}, failed=True)
    assert "mutually exclusive" in result["msg"]


def test_path_or_output_is_required(run_module):
    result = run_module(nccl_tests_result, {"min_busbw_gbps": 1.0}, failed=True)
    assert "one of the following is required: path, output" in result["msg"]


def test_check_mode_reads_too(run_module):
    result = run_module(nccl_tests_result, {"path": str(MPI_RUN), "_ansible_check_mode": True})
    assert result["changed"] is False
    assert result["passed"] is True
