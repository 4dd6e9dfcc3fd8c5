# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the serving_report module: the files it writes, the verdict, the baseline, bad input."""

import csv
import io
import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance as sa
from ansible_collections.gpufleet.inference.plugins.modules import serving_report
from ansible_collections.gpufleet.inference.tests.unit.plugins.module_utils.test__serving_acceptance import (
    measured,
    result,
    small_run,
)

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "serving"
ALL_FAILED = FIXTURES / "vllm-bench-serve-er0080-v0.25.1-all-requests-failed.json"
FILES = ["serving-acceptance.csv", "serving-acceptance.html", "serving-acceptance.json"]


def snapshot(directory):
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def report_args(dest, overrides=None, missing=(), **extra):
    """The module's arguments as the role passes them: the plan of a small lab (replicas pp and tp
    and the front door, swept at c1..c8 / c1..c16, TTFT 500 ms and TPOT 100 ms at p99) and the
    measurements of vllm_bench_serve, one dict per point run."""
    run = small_run()
    args = {
        "run": run,
        "results": measured(run, overrides, missing),
        "dest_dir": str(dest),
        "generated_at": "2026-12-01 10:00:00 UTC",
        "load_host": "lab-w9",
        "tool_version": "0.33.0",
    }
    args.update(extra)
    return args


def test_writes_the_three_reports_and_returns_the_verdict(run_module, tmp_path):
    dest = tmp_path / "reports" / "serving"
    report = run_module(serving_report, report_args(dest, title="Serving acceptance: chat"))
    assert report["changed"] is True
    assert report["passed"] is True
    assert report["failures"] == []
    assert report["baseline_saved"] is False
    assert report["msg"] == "passed: 3 targets, 0 failures"
    assert report["paths"] == {fmt: str(dest / ("serving-acceptance." + fmt)) for fmt in ("json", "csv", "html")}
    assert sorted(path.name for path in dest.iterdir()) == FILES
    assert isinstance(report["notes"], list)
    assert sorted(report["summary"]) == ["frontdoor", "pp", "tp"]
    assert report["summary"]["pp"]["best_output_tokens_per_s"] == 400.0
    assert report["summary"]["pp"]["best_at"] == "c8"
    assert report["summary"]["frontdoor"]["best_at"] == "c16"
    assert len(report["lines"]) == 3
    assert report["lines"][1].startswith("pp: passed; best 400.0 output tokens/s at c8; at c1 p99 TTFT 240.0 ms")

    document = json.loads((dest / "serving-acceptance.json").read_text())
    assert document["schema"] == sa.SCHEMA == "gpufleet.inference/serving-acceptance/v1"
    assert document["title"] == "Serving acceptance: chat"
    assert document["generated_at"] == "2026-12-01 10:00:00 UTC"
    assert document["tool"] == {"name": "vllm bench serve", "version": "0.33.0"}
    assert document["load_host"] == "lab-w9"
    assert [target["name"] for target in document["targets"]] == ["pp", "tp", "frontdoor"]
    assert [point["name"] for point in document["targets"][0]["points"]] == ["c1", "c2", "c4", "c8"]
    assert document["targets"][0]["points"][0]["load_cpu_s"] == 1.5
    assert document["verdict"] == {"passed": True, "failures": [], "notes": report["notes"]}
    assert document["baseline"] is None
    # The plan's arguments and paths stay out of the report.
    assert "args" not in document["targets"][0]["points"][0]

    rows = list(csv.DictReader(io.StringIO((dest / "serving-acceptance.csv").read_text())))
    assert len(rows) == 4 + 4 + 5
    assert (rows[0]["target"], rows[0]["point"], rows[0]["passed"]) == ("pp", "c1", "true")
    page = (dest / "serving-acceptance.html").read_text()
    assert "<title>Serving acceptance: chat</title>" in page
    assert "Generated 2026-12-01 10:00:00 UTC" in page


def test_a_second_identical_run_changes_nothing(run_module, tmp_path):
    args = report_args(tmp_path)
    assert run_module(serving_report, args)["changed"] is True
    before = snapshot(tmp_path)
    assert run_module(serving_report, args)["changed"] is False
    assert snapshot(tmp_path) == before
    # Other figures change the files.
    worse = report_args(tmp_path, {("tp", "c4"): result(ttft=3000.0)})
    assert run_module(serving_report, worse)["changed"] is True
    assert snapshot(tmp_path)["serving-acceptance.json"] != before["serving-acceptance.json"]


def test_check_mode_writes_nothing(run_module, tmp_path):
    dest = tmp_path / "reports"
    predicted = run_module(serving_report, report_args(dest), check_mode=True)
    assert predicted["changed"] is True
    assert predicted["passed"] is True
    assert predicted["paths"]["html"] == str(dest / "serving-acceptance.html")
    assert not dest.exists()

    run_module(serving_report, report_args(dest))
    before = snapshot(dest)
    assert run_module(serving_report, report_args(dest), check_mode=True)["changed"] is False
    changed = report_args(dest, {("tp", "c4"): result(ttft=3000.0)})
    assert run_module(serving_report, changed, check_mode=True)["changed"] is True
    assert snapshot(dest) == before


def test_a_missed_ttft_target_fails_the_verdict_not_the_task(run_module, tmp_path):
    report = run_module(serving_report, report_args(tmp_path, {("tp", "c4"): result(ttft=3000.0)}))
    assert report["passed"] is False
    assert report.get("failed") is not True
    assert report["failures"] == [
        {
            "target": "tp",
            "point": "c4",
            "metric": "ttft_ms.p99",
            "measured": 3600.0,
            "limit": 500.0,
            "kind": "slo",
            "message": "replica tp: p99 TTFT at c4 is 3600.0 ms, over the target 500 ms",
        }
    ]
    assert report["msg"] == "FAILED: 3 targets, 1 failures"
    assert [line.split(";")[0] for line in report["lines"]] == ["frontdoor: passed", "pp: passed", "tp: FAILED"]
    assert report["summary"]["tp"]["passed"] is False
    document = json.loads((tmp_path / "serving-acceptance.json").read_text())
    assert document["verdict"]["passed"] is False
    assert document["verdict"]["failures"] == report["failures"]
    assert [target["passed"] for target in document["targets"]] == [True, False, True]


def test_points_without_a_result_fail_naming_their_error(run_module, tmp_path):
    args = report_args(tmp_path, missing={("tp", "c8")})
    args["results"].append(
        {
            "target": "tp",
            "point": "c8",
            "result": None,
            "error": "vllm bench serve exited 1 and wrote no result: ConnectionRefusedError",
            "load_cpu_s": 0.4,
        }
    )
    every_request_failed = sa.parse_result(json.loads(ALL_FAILED.read_text()))
    for entry in args["results"]:
        if (entry["target"], entry["point"]) == ("pp", "c1"):
            entry["result"] = every_request_failed
    report = run_module(serving_report, args)
    assert report["passed"] is False
    failures = {(f["target"], f["point"], f["metric"]): f for f in report["failures"]}
    lost = failures[("tp", "c8", "failed_requests")]
    assert lost["kind"] == "errors" and lost["measured"] == 32
    assert lost["message"] == (
        "replica tp: 32 of 32 requests failed at c8 "
        "(vllm bench serve exited 1 and wrote no result: ConnectionRefusedError)"
    )
    assert failures[("pp", "c1", "failed_requests")]["message"] == "replica pp: 8 of 8 requests failed at c1"


def test_a_passing_run_saves_the_baseline_and_a_slower_run_fails_against_it(run_module, tmp_path):
    baseline = tmp_path / "baselines" / "lab.json"
    saved = run_module(serving_report, report_args(tmp_path / "first", baseline=str(baseline), save_baseline=True))
    assert saved["passed"] is True
    assert saved["baseline_saved"] is True
    assert baseline.read_bytes() == (tmp_path / "first" / "serving-acceptance.json").read_bytes()
    assert json.loads(baseline.read_text())["schema"] == sa.SCHEMA

    # pp c8 gave 400 output tokens/s in the baseline; 300 is 25 % lower, the tolerance 10 %.
    later = report_args(
        tmp_path / "later",
        {("pp", "c8"): result(throughput=300.0)},
        baseline=str(baseline),
        generated_at="2026-12-08 10:00:00 UTC",
    )
    report = run_module(serving_report, later)
    assert report.get("failed") is not True
    assert report["passed"] is False
    assert report["baseline_saved"] is False
    [failure] = report["failures"]
    assert failure["kind"] == "baseline"
    assert (failure["target"], failure["point"], failure["metric"]) == ("pp", "c8", "output_throughput")
    assert failure["measured"] == 300.0 and failure["limit"] == 360.0
    assert "fell from 400.000 to 300.000 (25 % lower; the baseline allows 10 %)" in failure["message"]
    document = json.loads((tmp_path / "later" / "serving-acceptance.json").read_text())
    assert document["baseline"] == {"path": str(baseline), "tolerance": 0.1, "generated_at": "2026-12-01 10:00:00 UTC"}

    # Within the tolerance it passes.
    close = dict(later, results=report_args(tmp_path, {("pp", "c8"): result(throughput=380.0)})["results"])
    assert run_module(serving_report, close)["passed"] is True


def test_a_failing_run_does_not_save_the_baseline(run_module, tmp_path):
    baseline = tmp_path / "baseline.json"
    slow = {("tp", "c4"): result(ttft=3000.0)}
    args = report_args(tmp_path / "out", slow, baseline=str(baseline), save_baseline=True)
    report = run_module(serving_report, args)
    assert report["passed"] is False
    assert report["baseline_saved"] is False
    assert not baseline.exists()
    # Nor does it replace the baseline of an earlier passing run.
    run_module(serving_report, report_args(tmp_path / "out", baseline=str(baseline), save_baseline=True))
    kept = baseline.read_bytes()
    assert run_module(serving_report, args)["baseline_saved"] is False
    assert baseline.read_bytes() == kept


def test_check_mode_saves_no_baseline(run_module, tmp_path):
    baseline = tmp_path / "baseline.json"
    args = report_args(tmp_path / "out", baseline=str(baseline), save_baseline=True)
    report = run_module(serving_report, args, check_mode=True)
    assert report["changed"] is True
    assert not baseline.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "cannot read the baseline {path}: "),
        ("", "cannot read the baseline {path}: "),
        (
            '{"schema": "gpufleet.inference/fabric-report/v1", "targets": []}',
            "the baseline {path} is not a serving acceptance result (schema gpufleet.inference/serving-acceptance/v1)",
        ),
        ("[1, 2]", "the baseline {path} is not a serving acceptance result"),
    ],
)
def test_a_baseline_that_is_no_result_fails_naming_the_file(run_module, tmp_path, content, message):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(content)
    report = run_module(serving_report, report_args(tmp_path / "out", baseline=str(baseline)), failed=True)
    assert report["msg"].startswith(message.format(path=baseline))
    assert not (tmp_path / "out").exists()
    assert baseline.read_text() == content


def test_a_missing_baseline_compares_with_nothing(run_module, tmp_path):
    baseline = tmp_path / "none-yet.json"
    report = run_module(serving_report, report_args(tmp_path / "out", baseline=str(baseline)))
    assert report["passed"] is True and report["baseline_saved"] is False
    assert json.loads((tmp_path / "out" / "serving-acceptance.json").read_text())["baseline"] is None
    assert not baseline.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"save_baseline": True},
            "save_baseline is true but baseline is empty; give the file to write the baseline to",
        ),
        (
            {"basename": "reports/serving"},
            "basename='reports/serving' is not a file name; give a name without '/', like serving-acceptance",
        ),
        ({"basename": ".."}, "basename='..' is not a file name; give a name without '/', like serving-acceptance"),
        ({"basename": ""}, "basename='' is not a file name; give a name without '/', like serving-acceptance"),
    ],
)
def test_bad_input_fails_naming_the_fix(run_module, tmp_path, extra, message):
    report = run_module(serving_report, report_args(tmp_path / "out", **extra), failed=True)
    assert report["msg"] == message
    assert not (tmp_path / "out").exists()


def test_a_run_that_is_not_a_plan_fails(run_module, tmp_path):
    args = report_args(tmp_path / "out")
    del args["run"]["load"]
    report = run_module(serving_report, args, failed=True)
    assert report["msg"].startswith("the run or its results are not what the serving_acceptance role gives")
    assert not (tmp_path / "out").exists()


def test_basename_names_the_files(run_module, tmp_path):
    report = run_module(serving_report, report_args(tmp_path, basename="lab-2026-12"))
    assert report["paths"]["csv"] == str(tmp_path / "lab-2026-12.csv")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lab-2026-12." + ext for ext in ("csv", "html", "json")]
