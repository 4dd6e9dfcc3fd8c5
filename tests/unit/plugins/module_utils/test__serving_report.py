# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_serving_report.py: the CSV and the self-contained HTML page."""

import copy
import csv
import html
import io
import math
import re
from xml.etree import ElementTree

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_report

SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


def stats(value, **extra):
    return dict({"mean": value, "median": value, "p50": value, "p90": value, "p99": value}, **extra)


def point(name, concurrency, ttft, tpot, throughput, prompt_tokens=128, passed=True, **extra):
    entry = {
        "name": name,
        "concurrency": concurrency,
        "request_rate": None,
        "prompt_tokens": prompt_tokens,
        "output_tokens": 64,
        "num_prompts": 8,
        "completed": 8,
        "failed": 0,
        "duration_s": 3.2,
        "ttft_ms": stats(ttft),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(tpot),
        "e2el_ms": stats(ttft + 64 * tpot),
        "request_throughput": 2.5,
        "output_throughput": throughput,
        "total_token_throughput": throughput * 3,
        "goodput_rps": 2.5,
        "passed": passed,
        "failed_metrics": [] if passed else ["ttft_ms.p99"],
    }
    entry.update(extra)
    return entry


def target(name, points, engine="vllm", **extra):
    entry = {
        "name": name,
        "kind": "replica",
        "engine": engine,
        "url": "http://10.10.0.10:8000",
        "model": "tiny-llama",
        "plan_concurrency": 8,
        "saturation": {"concurrency": 4, "plan_concurrency": 8, "ratio": 0.5, "note": "throughput flat after c4"},
        "passed": all(entry["passed"] for entry in points),
        "points": points,
    }
    entry.update(extra)
    return entry


def document(**changes):
    doc = {
        "schema": _serving_report.SCHEMA,
        "title": "Serving acceptance: chat",
        "generated_at": "2026-12-05 01:30:00 UTC",
        "profile": {"name": "chat", "mode": "concurrency", "prompt_tokens": 128, "output_tokens": 64},
        "slo": {"percentile": 99, "ttft_ms": 2000.0, "tpot_ms": 200.0, "min_goodput_rps": 0.1},
        "tool": {"name": "vllm bench serve", "version": "0.32.0"},
        "load_host": "lab-w9",
        "baseline": {"path": "/x/baseline.json", "tolerance": 0.1, "generated_at": "2026-11-01 00:00:00 UTC"},
        "targets": [
            target("pp", [point("c1", 1, 100.0, 20.0, 50.0), point("c2", 2, 150.0, 25.0, 90.0)]),
            target(
                "tp",
                [
                    point("c1", 1, 120.0, 22.0, 45.0),
                    point("c4", 4, 2500.0, 30.0, 120.0, passed=False),
                    point("c8", 8, 1900.0, 60.0, 110.0),
                ],
                url="http://10.10.0.11:8000",
            ),
            target("front", [point("c1", 1, 130.0, 21.0, 48.0)], kind="frontdoor", engine="haproxy"),
        ],
        "verdict": {
            "passed": False,
            "failures": [
                {
                    "target": "tp",
                    "point": "c4",
                    "metric": "ttft_ms.p99",
                    "measured": 2500.0,
                    "limit": 2000.0,
                    "kind": "slo",
                    "message": "tp c4: TTFT p99 2500 ms is over the SLO of 2000 ms",
                }
            ],
            "notes": ["front measured through the front door"],
        },
    }
    doc.update(changes)
    return doc


def svgs(page):
    """Every inline SVG of the page, parsed: proves each is well-formed XML."""
    return {root.get("id"): root for root in (ElementTree.fromstring(block) for block in SVG.findall(page))}


def legend(svg):
    """{target name: marker shape class} from a chart's legend."""
    entries = {}
    for entry in svg.iter("g"):
        if entry.get("class") == "legend-entry":
            marker = next(child for child in entry if (child.get("class") or "").startswith("mk-"))
            entries[entry.find("text").text] = marker.get("class")
    return entries


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


# ---------------------------------------------------------------- CSV


def test_csv_has_one_row_per_point_in_document_order():
    table = rows(_serving_report.render_csv(document()))
    assert [(row["target"], row["point"]) for row in table] == [
        ("pp", "c1"),
        ("pp", "c2"),
        ("tp", "c1"),
        ("tp", "c4"),
        ("tp", "c8"),
        ("front", "c1"),
    ]
    assert table[3]["ttft_ms_p99"] == "2500.0"
    assert table[3]["passed"] == "false"
    assert table[5]["kind"] == "frontdoor"
    assert table[5]["engine"] == "haproxy"


def test_csv_columns_keep_the_base_stats_and_add_other_percentiles_in_numeric_order():
    doc = document()
    doc["targets"][0]["points"][0]["ttft_ms"]["p95"] = 3.0
    doc["targets"][0]["points"][0]["ttft_ms"]["p99.9"] = 4.0
    del doc["targets"][1]["points"][0]["tpot_ms"]["p90"]
    header = next(csv.reader(io.StringIO(_serving_report.render_csv(doc))))
    stats_of = [name[len("ttft_ms_") :] for name in header if name.startswith("ttft_ms_")]
    assert stats_of == ["mean", "median", "p50", "p90", "p95", "p99", "p99.9"]
    assert header[:12] == ["target", "kind", "engine", "point", *_serving_report.RUN_FIELDS]
    assert header[-5:] == [*_serving_report.RATE_FIELDS, "passed"]
    for metric in _serving_report.METRICS:
        assert f"{metric}_p95" in header
    table = rows(_serving_report.render_csv(doc))
    assert table[0]["ttft_ms_p95"] == "3.0"
    assert table[1]["ttft_ms_p95"] == ""
    assert table[2]["tpot_ms_p90"] == ""


def test_csv_writes_null_as_an_empty_cell():
    doc = document()
    doc["targets"][0]["points"][0].update(goodput_rps=None, request_rate=None, duration_s=None)
    doc["targets"][0]["points"][0]["ttft_ms"]["p99"] = None
    doc["targets"][0]["points"][1]["tpot_ms"] = None
    table = rows(_serving_report.render_csv(doc))
    assert table[0]["goodput_rps"] == ""
    assert table[0]["request_rate"] == ""
    assert table[0]["duration_s"] == ""
    assert table[0]["ttft_ms_p99"] == ""
    assert table[1]["tpot_ms_mean"] == ""
    assert table[0]["concurrency"] == "1"


def test_csv_quotes_names_with_commas():
    doc = document()
    doc["targets"][0]["name"] = 'a,"b"'
    assert rows(_serving_report.render_csv(doc))[0]["target"] == 'a,"b"'


# ---------------------------------------------------------------- HTML: self-contained and escaped


def test_html_loads_nothing_from_anywhere():
    page = _serving_report.render_html(document())
    for needle in ("src=", "<script", "<link", "@import", "url(", "<img", "<iframe", "<object", "href="):
        assert needle not in page.lower()
    # The only addresses are the targets' own URLs, printed as text.
    rest = page
    for entry in document()["targets"]:
        rest = rest.replace(entry["url"], "")
    assert "http://" not in rest
    assert "https://" not in rest


def test_every_svg_is_well_formed_xml():
    page = _serving_report.render_html(document())
    assert len(SVG.findall(page)) == 4  # one prompt length: that chart is not drawn
    charts = svgs(page)
    assert sorted(charts) == ["chart-latency-throughput", "chart-throughput", "chart-tpot", "chart-ttft"]


def test_strings_from_the_document_are_escaped():
    doc = document(title="<b>chat</b>", load_host="w9 & co")
    doc["targets"][0]["name"] = "<script>alert(1)</script>"
    doc["verdict"]["failures"][0]["message"] = "<img onerror=x>"
    doc["verdict"]["notes"] = ["<i>note</i>"]
    page = _serving_report.render_html(doc)
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>chat</b>" not in page
    assert "&lt;b&gt;chat&lt;/b&gt;" in page
    assert "<img" not in page
    assert "<i>note</i>" not in page
    assert "w9 &amp; co" in page
    assert legend(svgs(page)["chart-ttft"])["<script>alert(1)</script>"]


# ---------------------------------------------------------------- HTML: the charts


def test_every_target_is_in_every_legend_with_its_own_marker_shape():
    doc = document()
    doc["targets"] += [target(f"t{index}", [point("c1", 1, 100.0, 20.0, 50.0)]) for index in range(3)]
    charts = svgs(_serving_report.render_html(doc))
    names = [entry["name"] for entry in doc["targets"]]
    for chart in charts.values():
        shapes = legend(chart)
        assert sorted(shapes) == sorted(names)
        assert len(set(shapes.values())) == len(names)  # six targets, six shapes
    assert legend(charts["chart-ttft"]) == legend(charts["chart-throughput"])  # a target keeps its look


def test_each_series_draws_a_line_and_one_marker_per_point():
    chart = svgs(_serving_report.render_html(document()))["chart-ttft"]
    series = [group for group in chart.iter("g") if group.get("class") == "series"]
    assert [group.get("data-target") for group in series] == ["pp", "tp", "front"]
    assert [len(group.findall("polyline")) for group in series] == [1, 1, 1]
    assert [len(group) - 1 for group in series] == [2, 3, 1]
    colours = [group.find("polyline").get("stroke") for group in series]
    assert len(set(colours)) == 3


def slo_lines(chart):
    return [line for line in chart.iter("line") if line.get("class") == "slo"]


def test_the_ttft_slo_is_a_dashed_line_labelled_slo():
    charts = svgs(_serving_report.render_html(document()))
    (line,) = slo_lines(charts["chart-ttft"])
    assert line.get("stroke-dasharray")
    labels = [text.text for text in charts["chart-ttft"].iter("text") if text.get("class") == "slo-label"]
    assert labels == ["SLO 2000"]
    assert slo_lines(charts["chart-tpot"])
    assert slo_lines(charts["chart-latency-throughput"])
    assert not slo_lines(charts["chart-throughput"])


def test_no_slo_line_where_the_slo_sets_no_limit():
    doc = document()
    doc["slo"]["ttft_ms"] = None
    charts = svgs(_serving_report.render_html(doc))
    assert not slo_lines(charts["chart-ttft"])
    assert "stroke-dasharray" not in ElementTree.tostring(charts["chart-ttft"], encoding="unicode")
    assert slo_lines(charts["chart-tpot"])
    assert "TTFT no target" in _serving_report.render_html(doc)


def test_the_slo_limit_is_inside_the_y_axis():
    doc = document()
    for entry in doc["targets"]:
        for item in entry["points"]:
            item["ttft_ms"] = stats(10.0)
    chart = svgs(_serving_report.render_html(doc))["chart-ttft"]
    (line,) = slo_lines(chart)
    assert _serving_report.TOP <= float(line.get("y1")) <= _serving_report.TOP + _serving_report.PLOT_HEIGHT


def axis_titles(chart):
    return [text.text for text in chart.iter("text") if text.get("class") == "title"]


def test_concurrency_mode_puts_concurrency_on_the_x_axis():
    charts = svgs(_serving_report.render_html(document()))
    assert axis_titles(charts["chart-ttft"]) == ["concurrency (requests in flight)", "TTFT p99 (ms)"]
    assert axis_titles(charts["chart-latency-throughput"]) == ["output throughput (tok/s)", "TPOT p99 (ms)"]


def test_rate_mode_puts_the_request_rate_on_the_x_axis():
    doc = document()
    doc["profile"]["mode"] = "rate"
    for entry in doc["targets"]:
        for index, item in enumerate(entry["points"]):
            item.update(concurrency=None, request_rate=0.5 * (index + 1))
    charts = svgs(_serving_report.render_html(doc))
    for name in ("chart-ttft", "chart-tpot", "chart-throughput"):
        assert axis_titles(charts[name])[0] == "request rate (req/s)"
    assert [len(group) - 1 for group in charts["chart-ttft"].iter("g") if group.get("class") == "series"] == [2, 3, 1]


def test_the_prompt_length_chart_needs_more_than_one_prompt_length():
    page = _serving_report.render_html(document())
    assert "chart-prompt-length" not in svgs(page)
    assert "Not measured in this run" in page

    doc = document()
    doc["targets"][0]["points"][1]["prompt_tokens"] = 1024
    page = _serving_report.render_html(doc)
    chart = svgs(page)["chart-prompt-length"]
    assert axis_titles(chart) == ["prompt length (tokens)", "TTFT p99 (ms)"]
    assert "Not measured in this run" not in page


def test_points_with_null_metrics_are_skipped():
    doc = document()
    doc["targets"][0]["points"][0]["ttft_ms"] = None
    doc["targets"][0]["points"][1]["ttft_ms"]["p99"] = None
    doc["targets"][1]["points"][0]["tpot_ms"] = {}
    doc["targets"][1]["points"][1]["output_throughput"] = None
    doc["targets"][2]["points"][0]["concurrency"] = None
    charts = svgs(_serving_report.render_html(doc))

    def markers(name):
        groups = [group for group in charts[name].iter("g") if group.get("class") == "series"]
        return {group.get("data-target"): len(group) - 1 for group in groups}

    assert markers("chart-ttft") == {"tp": 3}  # pp has no TTFT left, front has no concurrency
    assert markers("chart-tpot") == {"pp": 2, "tp": 2}
    assert markers("chart-throughput") == {"pp": 2, "tp": 2}
    assert markers("chart-latency-throughput") == {"pp": 2, "tp": 1, "front": 1}
    assert sorted(legend(charts["chart-ttft"])) == ["tp"]


def test_a_chart_without_data_says_so_instead_of_drawing_axes():
    doc = document()
    for entry in doc["targets"]:
        for item in entry["points"]:
            item["ttft_ms"] = {"mean": None, "p99": None}
    page = _serving_report.render_html(doc)
    assert "chart-ttft" not in svgs(page)
    figure = page[page.index('id="figure-ttft"') : page.index('id="figure-tpot"')]
    assert "No data" in figure


def test_the_latency_throughput_curve_keeps_the_sweep_order():
    doc = document()
    # Past saturation throughput falls back: sorted by x the curve would fold over itself.
    chart = svgs(_serving_report.render_html(doc))["chart-latency-throughput"]
    series = {group.get("data-target"): group for group in chart.iter("g") if group.get("class") == "series"}
    xs = [float(pair.split(",")[0]) for pair in series["tp"].find("polyline").get("points").split()]
    assert xs[2] < xs[1]
    assert xs[0] < xs[1]


def test_the_slo_percentile_picks_the_stat_and_falls_back_to_p99_then_the_mean():
    assert _serving_report.percentile_key({"slo": {"percentile": 99}}) == "p99"
    assert _serving_report.percentile_key({"slo": {"percentile": 99.9}}) == "p99.9"
    assert _serving_report.percentile_key({"slo": {"percentile": 90.0}}) == "p90"
    assert _serving_report.percentile_key({"slo": {"percentile": 99.95}}) == "p99.95"
    assert _serving_report.percentile_key({"slo": {"percentile": None}}) == "p99"
    doc = document()
    doc["slo"]["percentile"] = 99.9
    doc["targets"][0]["points"][0]["ttft_ms"] = {"mean": 5.0, "p99.9": 7.0}
    doc["targets"][0]["points"][1]["ttft_ms"] = {"mean": 5.0}
    page = _serving_report.render_html(doc)
    chart = svgs(page)["chart-ttft"]
    assert axis_titles(chart)[1] == "TTFT p99.9 (ms)"
    series = [group for group in chart.iter("g") if group.get("class") == "series"]
    assert [len(group) - 1 for group in series] == [2, 3, 1]
    assert "Some points have no p99.9" in page


def test_ticks_are_nice_steps_that_cover_the_data():
    for low, high in [(0, 1), (0, 7.3), (0, 2500), (0, 0.043), (0, 137), (0, 0), (5, 5), (0, 123456)]:
        ticks = _serving_report.nice_ticks(low, high)
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1
        (step,) = steps
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1, 2, 5)
        assert ticks[0] <= low
        assert ticks[-1] >= high
        assert 2 <= len(ticks) <= 12
    assert _serving_report.nice_ticks(0, 2500) == [0, 500, 1000, 1500, 2000, 2500]
    assert _serving_report.nice_ticks(0, 0.9) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]


# ---------------------------------------------------------------- HTML: verdict, facts and tables


def test_a_failed_verdict_says_failed_and_lists_every_failure():
    doc = document()
    doc["verdict"]["failures"].append(
        {
            "target": "pp",
            "point": "c2",
            "metric": "output_throughput",
            "measured": 90.0,
            "limit": 100.0,
            "kind": "baseline",
            "message": "pp c2: output throughput 90 tok/s is 10 % under the baseline",
        }
    )
    page = _serving_report.render_html(doc)
    assert '<div class="banner fail">FAILED</div>' in page
    assert "PASSED</div>" not in page
    for failure in doc["verdict"]["failures"]:
        assert html.escape(failure["message"]) in page
    assert "<li>front measured through the front door</li>" in page
    assert "No failures" not in page


def test_a_passed_verdict_says_passed_and_that_nothing_failed():
    doc = document()
    doc["verdict"] = {"passed": True, "failures": [], "notes": []}
    page = _serving_report.render_html(doc)
    assert '<div class="banner pass">PASSED</div>' in page
    assert "No failures" in page
    assert 'class="notes"' not in page


def test_failing_cells_carry_a_cross_and_the_fail_class():
    page = _serving_report.render_html(document())
    failing = re.findall(r'<td class="num fail"[^>]*>([^<]*)</td>', page)
    # tp c4: its TTFT cell and its result cell.
    assert failing == ["\u2715 2500", "\u2715 FAIL"]
    assert "td.fail { border: 3px solid" in page


def test_a_verdict_failure_marks_its_cell_even_without_failed_metrics():
    doc = document()
    doc["verdict"]["failures"][0].update(point="c8", metric="tpot_ms.p99")
    page = _serving_report.render_html(doc)
    assert '<td class="num fail" title="fails: tpot_ms.p99">\u2715 60</td>' in page


def test_failed_requests_mark_the_failed_column():
    doc = document()
    doc["targets"][0]["points"][1].update(failed=3, passed=False, failed_metrics=["failed_requests"])
    page = _serving_report.render_html(doc)
    assert '<td class="num fail" title="fails: failed_requests">\u2715 3</td>' in page


def test_facts_show_profile_load_slo_baseline_and_saturation():
    page = _serving_report.render_html(document())
    assert "Generated 2026-12-05 01:30:00 UTC" in page
    assert "chat, mode concurrency, prompt 128 tokens, output 64 tokens" in page
    assert "from lab-w9 with vllm bench serve 0.32.0" in page
    assert "p99 TTFT \u2264 2000 ms; p99 TPOT \u2264 200 ms; goodput \u2265 0.1 req/s" in page
    assert "/x/baseline.json, tolerance 10 %" in page
    assert "Saturation: concurrency 4, plan concurrency 8, ratio 0.50. throughput flat after c4" in page


def test_missing_pieces_are_said_not_guessed():
    doc = document(generated_at="", baseline=None)
    doc["targets"][0]["saturation"] = None
    page = _serving_report.render_html(doc)
    assert "Generated" not in page
    assert "Baseline</dt><dd>none" in page
    assert "Saturation: not assessed." in page


def test_output_is_deterministic_and_leaves_the_document_alone():
    doc = document()
    before = copy.deepcopy(doc)
    assert _serving_report.render_html(doc) == _serving_report.render_html(copy.deepcopy(doc))
    assert _serving_report.render_csv(doc) == _serving_report.render_csv(copy.deepcopy(doc))
    assert doc == before


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "not a dict"),
        ({"schema": "other/v9", "targets": []}, "expected 'gpufleet.inference/serving-acceptance/v1'"),
        ({"schema": _serving_report.SCHEMA, "targets": None}, "targets=None is not a list"),
        ({"schema": _serving_report.SCHEMA, "targets": [{"points": "c1"}]}, r"targets\[0\] is not a dict"),
    ],
)
def test_documents_of_another_shape_are_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        _serving_report.render_html(doc)
    with pytest.raises(ValueError, match=message):
        _serving_report.render_csv(doc)


def test_no_targets_still_renders_a_page():
    doc = document(targets=[])
    doc["verdict"] = {"passed": False, "failures": [], "notes": ["no target answered"]}
    page = _serving_report.render_html(doc)
    assert "FAILED" in page
    assert page.count("No data") == 4
    assert _serving_report.render_csv(doc).count("\n") == 1
