# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the fabric_report module: the files it writes, idempotence, check mode, bad input."""

import json

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import fabric_report

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def results(slow="gpu03"):
    """All six pairs of four hosts; the pairs of `slow` run at 30 % of the others."""
    out = []
    for index, a in enumerate(HOSTS):
        for b in HOSTS[index + 1 :]:
            gbps = 28.5 if slow in (a, b) else 95.0
            out.append({"a": a, "b": b, "gbps": gbps, "ok": True, "jumbo_ok": True, "error": None})
    return out


def snapshot(directory):
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_writes_the_three_reports_and_returns_the_verdict(run_module, tmp_path):
    dest = tmp_path / "reports" / "fabric"
    result = run_module(fabric_report, {"results": results(), "dest_dir": str(dest), "line_rate_gbps": 100})
    assert result["changed"] is True
    assert result.get("failed") is not True
    assert result["paths"] == {
        "json": str(dest / "fabric-report.json"),
        "csv": str(dest / "fabric-report.csv"),
        "html": str(dest / "fabric-report.html"),
    }
    assert sorted(path.name for path in dest.iterdir()) == [
        "fabric-report.csv",
        "fabric-report.html",
        "fabric-report.json",
    ]
    assert result["passed"] is False
    assert result["outliers"] == ["gpu03"]
    assert result["summary"] == {
        "hosts": 4,
        "pairs": 6,
        "best_gbps": 95.0,
        "median_gbps": 61.75,
        "worst_gbps": 28.5,
        "failing_pairs": 3,
    }
    reasons = [
        "28.5 Gbit/s is below 85% of the 100 Gbit/s line rate (85.0 Gbit/s)",
        "28.5 Gbit/s is below 93% of the best pair's 95.0 Gbit/s (88.35 Gbit/s)",
    ]
    assert result["failing"] == [
        {"a": "gpu01", "b": "gpu03", "gbps": 28.5, "reasons": reasons},
        {"a": "gpu02", "b": "gpu03", "gbps": 28.5, "reasons": reasons},
        {"a": "gpu03", "b": "gpu04", "gbps": 28.5, "reasons": reasons},
    ]
    assert result["msg"] == "4 hosts, 6 pairs, 3 failing; outliers: gpu03"

    report = json.loads((dest / "fabric-report.json").read_text())
    assert report["outliers"] == ["gpu03"]
    assert report["failing"] == result["failing"]
    assert report["title"] == "Fabric bandwidth acceptance"
    assert "generated_at" not in report
    csv_lines = (dest / "fabric-report.csv").read_text().splitlines()
    assert csv_lines[0] == "a,b,gbps,status,jumbo_ok,error,reasons"
    assert csv_lines[1] == "gpu01,gpu02,95.0,pass,true,,"
    assert csv_lines[2] == "gpu01,gpu03,28.5,fail,true,," + "; ".join(reasons)
    assert len(csv_lines) == 7
    page = (dest / "fabric-report.html").read_text()
    assert "<title>Fabric bandwidth acceptance</title>" in page
    assert page.count('<td class="cell fail"') == 6


def test_second_identical_run_changes_nothing(run_module, tmp_path):
    args = {"results": results(), "dest_dir": str(tmp_path), "title": "Rack A", "generated_at": ""}
    assert run_module(fabric_report, args)["changed"] is True
    before = snapshot(tmp_path)
    again = run_module(fabric_report, args)
    assert again["changed"] is False
    assert snapshot(tmp_path) == before
    # New results change the files.
    assert run_module(fabric_report, dict(args, results=results(slow="gpu01")))["changed"] is True
    assert snapshot(tmp_path)["fabric-report.csv"] != before["fabric-report.csv"]


def test_generated_at_goes_into_json_and_html(run_module, tmp_path):
    args = {"results": results(), "dest_dir": str(tmp_path), "generated_at": "2026-11-30T16:20:00Z"}
    run_module(fabric_report, args)
    assert json.loads((tmp_path / "fabric-report.json").read_text())["generated_at"] == "2026-11-30T16:20:00Z"
    assert ", generated 2026-11-30T16:20:00Z</p>" in (tmp_path / "fabric-report.html").read_text()


def test_check_mode_writes_nothing(run_module, tmp_path):
    dest = tmp_path / "reports"
    args = {"results": results(), "dest_dir": str(dest), "_ansible_check_mode": True}
    result = run_module(fabric_report, args)
    assert result["changed"] is True
    assert result["paths"]["html"] == str(dest / "fabric-report.html")
    assert result["outliers"] == ["gpu03"]
    assert not dest.exists()

    run_module(fabric_report, dict(args, _ansible_check_mode=False))
    before = snapshot(dest)
    assert run_module(fabric_report, args)["changed"] is False
    assert run_module(fabric_report, dict(args, results=results(slow="gpu02")))["changed"] is True
    assert snapshot(dest) == before


def test_formats_and_basename(run_module, tmp_path):
    result = run_module(
        fabric_report, {"results": results(), "dest_dir": str(tmp_path), "basename": "rack-a", "formats": ["csv"]}
    )
    assert result["paths"] == {"csv": str(tmp_path / "rack-a.csv")}
    assert [path.name for path in tmp_path.iterdir()] == ["rack-a.csv"]


def test_failing_pairs_do_not_fail_the_task_and_passing_ones_pass(run_module, tmp_path):
    result = run_module(fabric_report, {"results": results(slow="none"), "dest_dir": str(tmp_path)})
    assert result["passed"] is True
    assert result["failing"] == []
    assert result["outliers"] == []
    assert result["msg"] == "4 hosts, 6 pairs, 0 failing; outliers: none"


@pytest.mark.parametrize(
    "override, message",
    [
        ({"results": []}, "results=[] is empty or not a list; pass one entry per measured pair"),
        (
            {"results": [{"a": "gpu01", "b": "gpu02", "gbps": "fast"}]},
            "results[0].gbps='fast' is not a bandwidth; give Gbit/s as a number >= 0",
        ),
        (
            {"min_best_fraction": 93.0},
            "min_best_fraction=93.0 is not a fraction; use a number above 0 and at most 1, like 0.93",
        ),
        ({"line_rate_gbps": -100}, "line_rate_gbps=-100.0 is not a line rate; give the link speed in Gbit/s, like 100"),
        (
            {"basename": "../report"},
            "basename='../report' is not a file name; give a name without '/', like fabric-report",
        ),
        ({"basename": ""}, "basename='' is not a file name; give a name without '/', like fabric-report"),
        ({"formats": []}, "formats=[] writes nothing; choose one or more of json, csv, html"),
    ],
)
def test_bad_input_fails_naming_the_option(run_module, tmp_path, override, message):
    args = dict({"results": results(), "dest_dir": str(tmp_path / "out")}, **override)
    result = run_module(fabric_report, args, failed=True)
    assert result["failed"] is True
    assert result["msg"] == message
    assert not (tmp_path / "out").exists()


def test_unknown_format_is_refused(run_module, tmp_path):
    result = run_module(
        fabric_report, {"results": results(), "dest_dir": str(tmp_path), "formats": ["pdf"]}, failed=True
    )
    assert result["msg"].startswith("value of formats must be one or more of: json, csv, html. Got no match for: pdf")


def test_dest_dir_that_is_a_file_fails(run_module, tmp_path):
    blocker = tmp_path / "reports"
    blocker.write_text("not a directory\n")
    result = run_module(fabric_report, {"results": results(), "dest_dir": str(blocker)}, failed=True)
    assert result["msg"] == f"dest_dir={blocker} exists and is not a directory; give a directory for the reports"


def test_a_planned_pair_without_a_result_fails_as_not_measured(run_module, tmp_path):
    # gpu04 dropped out: its three pairs have no results, but the schedule planned them.
    measured = [entry for entry in results(slow="none") if "gpu04" not in (entry["a"], entry["b"])]
    planned = [[a, b] for index, a in enumerate(HOSTS) for b in HOSTS[index + 1 :]]
    result = run_module(fabric_report, {"results": measured, "expected_pairs": planned, "dest_dir": str(tmp_path)})
    assert result["passed"] is False
    assert result["summary"]["pairs"] == 6
    assert result["summary"]["failing_pairs"] == 3
    assert sorted((pair["a"], pair["b"]) for pair in result["failing"]) == [
        ("gpu01", "gpu04"),
        ("gpu02", "gpu04"),
        ("gpu03", "gpu04"),
    ]
    assert result["outliers"] == ["gpu04"]
    assert all("not measured" in " ".join(pair["reasons"]) for pair in result["failing"])


def test_expected_pairs_already_measured_change_nothing(run_module, tmp_path):
    planned = [[b, a] for index, a in enumerate(HOSTS) for b in HOSTS[index + 1 :]]  # either order
    result = run_module(
        fabric_report, {"results": results(slow="none"), "expected_pairs": planned, "dest_dir": str(tmp_path)}
    )
    assert result["passed"] is True
    assert result["summary"]["pairs"] == 6
