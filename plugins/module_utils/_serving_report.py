# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving acceptance report: a judged result document rendered as CSV and as one HTML page.

The document (SCHEMA) is computed and judged elsewhere; this module only draws it. The metrics are
the ones vLLM's serving benchmark reports per run (vllm/benchmarks/serve.py): TTFT, TPOT, ITL and
end-to-end latency as mean, median and percentiles, plus request, output and total token throughput.

The page is one file with inline CSS and inline SVG, no script and no external asset (not even the
SVG namespace URL, which inline SVG in HTML does not need), so it can be mailed, archived and read
offline. Series differ in colour (Okabe and Ito's colour-blind safe palette, https://jfly.uni-koeln.de/color/)
and in marker shape, so the charts also read in greyscale. Same document, same bytes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import html
import io
import math
import re

SCHEMA = "gpufleet.inference/serving-acceptance/v1"
DEFAULT_TITLE = "Serving acceptance"
METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
RUN_FIELDS = (
    "concurrency",
    "request_rate",
    "prompt_tokens",
    "output_tokens",
    "num_prompts",
    "completed",
    "failed",
    "duration_s",
)
RATE_FIELDS = ("request_throughput", "output_throughput", "total_token_throughput", "goodput_rps")
# Always in the CSV, so a sheet built on one run reads the next; other keys present join them.
BASE_STATS = ("mean", "p50", "p90", "p99")
FIRST_STATS = ("mean", "median", "std")
# Okabe-Ito less its yellow, which is too pale on white.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
SHAPES = ("circle", "square", "triangle", "diamond", "triangle-down", "plus")
_POLYGONS = {
    "square": ((-4.5, -4.5), (4.5, -4.5), (4.5, 4.5), (-4.5, 4.5)),
    "triangle": ((0, -6), (5.5, 4), (-5.5, 4)),
    "diamond": ((0, -6), (6, 0), (0, 6), (-6, 0)),
    "triangle-down": ((0, 6), (5.5, -4), (-5.5, -4)),
}
COLUMN_OF = {"failed_requests": "failed"}  # failure metrics named other than their column
FAIL_MARK = "\u2715"  # a cross, so failing cells do not depend on colour alone
DASH = "\u2014"
# Chart geometry, in SVG user units.
WIDTH, LEFT, RIGHT, TOP, PLOT_HEIGHT, LEGEND_ROW = 640, 76, 24, 20, 240, 20
_PERCENTILE = re.compile(r"^p([0-9]+(?:[.][0-9]+)?)\Z")
esc = html.escape


def _number(value):
    """The value as a finite float; None for null, text, booleans, NaN and infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _targets(document):
    """The document's targets; ValueError, saying what was expected, on a document of another shape."""
    if not isinstance(document, dict):
        raise ValueError(
            "document is a %s, not a dict; pass the serving acceptance result as parsed from its "
            "JSON" % type(document).__name__
        )
    if document.get("schema") != SCHEMA:
        raise ValueError(
            "document schema is %r, expected %r; render it with the collection release that wrote "
            "it" % (document.get("schema"), SCHEMA)
        )
    targets = document.get("targets")
    if not isinstance(targets, list):
        raise ValueError("document targets=%r is not a list; give one entry per target measured" % (targets,))
    for index, target in enumerate(targets):
        if not isinstance(target, dict) or not isinstance(target.get("points", []), list):
            raise ValueError("targets[%d] is not a dict with a list of points; found %r" % (index, target))
    return targets


def _points(target):
    return [point for point in target.get("points") or [] if isinstance(point, dict)]


def _stats(point, metric):
    stats = point.get(metric)
    return stats if isinstance(stats, dict) else {}


def percentile_key(document):
    """The stat key of the SLO percentile: 99 -> "p99", 99.9 -> "p99.9"; "p99" when it is unset."""
    value = _number((document.get("slo") or {}).get("percentile"))
    if value is None:
        return "p99"
    return "p%d" % value if value.is_integer() else "p%r" % value


def _stat(point, metric, key):
    """The metric at key, else at p99, else its mean; None when the one found is null."""
    stats = _stats(point, metric)
    for name in (key, "p99", "mean"):
        if name in stats:
            return _number(stats[name])
    return None


def _stat_order(key):
    if key in FIRST_STATS:
        return (0, FIRST_STATS.index(key), "")
    match = _PERCENTILE.match(key)
    if match:
        return (1, float(match.group(1)), key)
    return (2, 0.0, key)


def stat_keys(document):
    """The stat columns of the CSV: BASE_STATS and every other key present, mean first, then
    median, then percentiles in numeric order, then the rest by name."""
    points = [point for target in _targets(document) for point in _points(target)]
    keys = {str(key) for point in points for metric in METRICS for key in _stats(point, metric)}
    return sorted(keys | set(BASE_STATS), key=_stat_order)


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_csv(document):
    """One row per (target, point), in document order; empty cells for null."""
    stats = stat_keys(document)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = ["%s_%s" % (metric, key) for metric in METRICS for key in stats]
    writer.writerow(["target", "kind", "engine", "point", *RUN_FIELDS, *columns, *RATE_FIELDS, "passed"])
    for target in _targets(document):
        for point in _points(target):
            row = [target.get("name"), target.get("kind"), target.get("engine"), point.get("name")]
            row += [point.get(field) for field in RUN_FIELDS]
            row += [_stats(point, metric).get(key) for metric in METRICS for key in stats]
            row += [point.get(field) for field in RATE_FIELDS]
            row.append(point.get("passed"))
            writer.writerow([_csv_value(value) for value in row])
    return out.getvalue()


# ---------------------------------------------------------------- numbers and scales


def _fmt(value):
    """A figure for people: whole numbers as such, three significant digits below 100."""
    number = _number(value)
    if number is None:
        return DASH
    if number == int(number) and abs(number) < 1e15:
        return "%d" % number
    if abs(number) >= 100:
        return "%.0f" % number
    return "%.1f" % number if abs(number) >= 10 else "%.3g" % number


def nice_step(raw):
    """The smallest step of 1, 2 or 5 x 10^k at or above raw (raw > 0)."""
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5):
        if raw <= factor * power * (1 + 1e-9):
            return factor * power
    return 10 * power


def nice_ticks(low, high, count=5):
    """About count steps of a nice size, from a multiple at or below low to one at or above high."""
    if high <= low:
        high = low + (abs(low) or 1.0)
    step = nice_step((high - low) / count)
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(index * step, 12) for index in range(first, last + 1)]


def _scale(ticks, start, length, upward=False):
    low, span, sign = ticks[0], ticks[-1] - ticks[0], -1 if upward else 1
    return lambda value: start + sign * (value - low) / span * length


# ---------------------------------------------------------------- charts


def _marker(shape, x, y, colour):
    if shape == "circle":
        return '<circle class="mk-circle" cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="#fff"/>' % (x, y, colour)
    if shape == "plus":
        return '<path class="mk-plus" d="M%.1f %.1fh12M%.1f %.1fv12" stroke="%s" stroke-width="3"/>' % (
            x - 6,
            y,
            x,
            y - 6,
            colour,
        )
    points = " ".join("%.1f,%.1f" % (x + dx, y + dy) for dx, dy in _POLYGONS[shape])
    return '<polygon class="mk-%s" points="%s" fill="%s" stroke="#fff"/>' % (shape, points, colour)


def _style(index):
    return PALETTE[index % len(PALETTE)], SHAPES[index % len(SHAPES)]


def _axes(x_ticks, y_ticks, px, py, x_title, y_title):
    right, bottom = WIDTH - RIGHT, TOP + PLOT_HEIGHT
    out = ['<path class="axis" d="M%d %dV%dH%d" fill="none"/>' % (LEFT, TOP, bottom, right)]
    for tick in y_ticks:
        out += [
            '<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>' % (LEFT, py(tick), right, py(tick)),
            '<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (LEFT - 6, py(tick) + 4, _fmt(tick)),
        ]
    for tick in x_ticks:
        out += [
            '<line class="axis" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>' % (px(tick), bottom, px(tick), bottom + 5),
            '<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (px(tick), bottom + 18, _fmt(tick)),
        ]
    return [
        *out,
        '<text class="title" x="%.1f" y="%d" text-anchor="middle">%s</text>'
        % ((LEFT + right) / 2, bottom + 38, esc(x_title)),
        '<text class="title" transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>'
        % (TOP + PLOT_HEIGHT / 2, esc(y_title)),
    ]


def _series(index, name, points, px, py):
    colour, shape = _style(index)
    coords = " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in points)
    out = [
        '<g class="series" data-target="%s">' % esc(name),
        '<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (coords, colour),
    ]
    return out + [_marker(shape, px(x), py(y), colour) for x, y in points] + ["</g>"]


def _legend(drawn, top):
    out = ['<g class="legend">']
    for row, (index, name, _points) in enumerate(drawn):
        (colour, shape), y = _style(index), top + row * LEGEND_ROW
        out += [
            '<g class="legend-entry">',
            '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (LEFT, y, LEFT + 28, y, colour),
            _marker(shape, LEFT + 14, y, colour),
            '<text x="%d" y="%d">%s</text></g>' % (LEFT + 38, y + 4, esc(name)),
        ]
    return [*out, "</g>"]


def _slo_line(limit, py):
    y, right = py(limit), WIDTH - RIGHT
    return [
        '<line class="slo" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke-dasharray="6 4"/>' % (LEFT, y, right, y),
        '<text class="slo-label" x="%d" y="%.1f" text-anchor="end">SLO %s</text>' % (right - 4, y - 5, _fmt(limit)),
    ]


def svg_chart(chart_id, titles, series, limit=None):
    """One line chart as inline SVG, or a "no data" paragraph when no series has a point.

    titles: (chart title, x axis title, y axis title). series: [(style index, name, [(x, y)])].
    limit: the SLO on the y axis, drawn dashed and labelled "SLO", or None.
    """
    drawn = [entry for entry in series if entry[2]]
    if not drawn:
        return '<p class="nodata">No data: no point has a value to draw.</p>'
    xs = [x for _index, _name, points in drawn for x, _y in points]
    ys = [y for _index, _name, points in drawn for _x, y in points] + ([] if limit is None else [limit])
    x_ticks, y_ticks = nice_ticks(min(0.0, *xs), max(xs)), nice_ticks(min(0.0, *ys), max(ys))
    px = _scale(x_ticks, LEFT, WIDTH - LEFT - RIGHT)
    py = _scale(y_ticks, TOP + PLOT_HEIGHT, PLOT_HEIGHT, upward=True)
    legend_top = TOP + PLOT_HEIGHT + 62
    height = legend_top + LEGEND_ROW * len(drawn)
    out = [
        '<svg id="chart-%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-labelledby="title-%s">'
        % (chart_id, WIDTH, height, WIDTH, height, chart_id),
        '<title id="title-%s">%s</title>' % (chart_id, esc(titles[0])),
    ]
    out += _axes(x_ticks, y_ticks, px, py, *titles[1:])
    out += _slo_line(limit, py) if limit is not None else []
    for index, name, points in drawn:
        out += _series(index, name, points, px, py)
    return "\n".join(out + _legend(drawn, legend_top) + ["</svg>"])


def _pairs(target, x_of, y_of, sort=True):
    pairs = [(x_of(point), y_of(point)) for point in _points(target)]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    return sorted(pairs, key=lambda pair: pair[0]) if sort else pairs


def _field(name):
    return lambda point: _number(point.get(name))


def _load(document):
    """The load knob of the sweep: (point field, axis title, column title)."""
    if (document.get("profile") or {}).get("mode") == "rate":
        return "request_rate", "request rate (req/s)", "Req/s"
    return "concurrency", "concurrency (requests in flight)", "Concurrency"


def _fallback_note(targets, key):
    """Say so when a point lacks the SLO percentile, since it is then drawn at p99 or its mean."""
    for point in (point for target in targets for point in _points(target)):
        if any(_stats(point, metric) and key not in _stats(point, metric) for metric in ("ttft_ms", "tpot_ms")):
            return '<p class="note">Some points have no %s; they are drawn at p99, else at their mean.</p>' % key
    return ""


def _prompt_lengths_vary(targets):
    return any(
        len({_number(point.get("prompt_tokens")) for point in _points(target)} - {None}) > 1 for target in targets
    )


def _chart_specs(document, key):
    """(id, title, (x title, x of a point), (y title, y of a point, SLO limit)) for each chart."""
    slo = document.get("slo") or {}
    field, load_title, _column = _load(document)
    load, by = (load_title, _field(field)), load_title.split(" (", maxsplit=1)[0]
    ttft = ("TTFT %s (ms)" % key, lambda point: _stat(point, "ttft_ms", key), _number(slo.get("ttft_ms")))
    tpot = ("TPOT %s (ms)" % key, lambda point: _stat(point, "tpot_ms", key), _number(slo.get("tpot_ms")))
    tok_s = ("output throughput (tok/s)", _field("output_throughput"), None)
    prompt = ("prompt length (tokens)", _field("prompt_tokens"))
    return [
        ("ttft", "Time to first token (%s) by %s" % (key, by), load, ttft),
        ("tpot", "Time per output token (%s) by %s" % (key, by), load, tpot),
        ("throughput", "Output token throughput by %s" % by, load, tok_s),
        ("latency-throughput", "Latency against throughput, in sweep order", tok_s[:2], tpot),
        ("prompt-length", "Time to first token (%s) by prompt length" % key, prompt, ttft),
    ]


def _charts(document, targets, key):
    out = ['<section class="charts">', "<h2>Charts</h2>"]
    for chart_id, title, (x_title, x_of), (y_title, y_of, limit) in _chart_specs(document, key):
        out.append('<figure id="figure-%s"><figcaption>%s</figcaption>' % (chart_id, esc(title)))
        if chart_id == "prompt-length" and not _prompt_lengths_vary(targets):
            out.append('<p class="nodata">Not measured in this run: every target ran one prompt length.</p></figure>')
            continue
        sort = chart_id != "latency-throughput"
        series = [
            (index, str(target.get("name")), _pairs(target, x_of, y_of, sort)) for index, target in enumerate(targets)
        ]
        out += [svg_chart(chart_id, (title, x_title, y_title), series, limit), "</figure>"]
    return [*out, _fallback_note(targets, key), "</section>"]


# ---------------------------------------------------------------- the page


def _limit(value, unit, symbol="\u2264"):
    number = _number(value)
    return "no target" if number is None else "%s %s %s" % (symbol, _fmt(number), unit)


def _baseline(baseline):
    if not isinstance(baseline, dict):
        return "none: no comparison with an earlier run"
    tolerance = _number(baseline.get("tolerance"))
    tolerance = DASH if tolerance is None else "%g %%" % (tolerance * 100)
    text = "%s, tolerance %s" % (baseline.get("path") or DASH, tolerance)
    return text + (", generated %s" % baseline["generated_at"] if baseline.get("generated_at") else "")


def _facts(document, key):
    profile, slo, tool = document.get("profile") or {}, document.get("slo") or {}, document.get("tool") or {}
    rows = [
        (
            "Profile",
            "%s, mode %s, prompt %s tokens, output %s tokens"
            % (
                profile.get("name") or DASH,
                profile.get("mode") or DASH,
                _fmt(profile.get("prompt_tokens")),
                _fmt(profile.get("output_tokens")),
            ),
        ),
        (
            "Load",
            "from %s with %s %s"
            % (document.get("load_host") or DASH, tool.get("name") or DASH, tool.get("version") or ""),
        ),
        (
            "SLO",
            "%s TTFT %s; %s TPOT %s; goodput %s"
            % (
                key,
                _limit(slo.get("ttft_ms"), "ms"),
                key,
                _limit(slo.get("tpot_ms"), "ms"),
                _limit(slo.get("min_goodput_rps"), "req/s", "\u2265"),
            ),
        ),
        ("Baseline", _baseline(document.get("baseline"))),
    ]
    items = "".join("<dt>%s</dt><dd>%s</dd>" % (name, esc(str(value).strip())) for name, value in rows)
    return ['<section class="facts"><dl>%s</dl></section>' % items]


def _verdict(verdict, failures):
    passed = verdict.get("passed") is True
    out = [
        '<section class="verdict-section">',
        '<div class="banner %s">%s</div>' % ("pass" if passed else "fail", "PASSED" if passed else "FAILED"),
    ]
    if failures:
        out.append(
            '<table class="list"><thead><tr>%s</tr></thead><tbody>'
            % "".join("<th>%s</th>" % name for name in ("Target", "Point", "Metric", "Measured", "Limit", "Message"))
        )
        for entry in failures:
            cells = ["<td>%s</td>" % esc(str(entry.get(name) or DASH)) for name in ("target", "point", "metric")]
            cells += ['<td class="num">%s</td>' % _fmt(entry.get(name)) for name in ("measured", "limit")]
            out.append("<tr>%s<td>%s</td></tr>" % ("".join(cells), esc(str(entry.get("message") or ""))))
        out.append("</tbody></table>")
    else:
        out.append('<p class="none">No failures: every point met its limits.</p>')
    notes = verdict.get("notes") or []
    if notes:
        out.append('<ul class="notes">%s</ul>' % "".join("<li>%s</li>" % esc(str(note)) for note in notes))
    return [*out, "</section>"]


def _failing_columns(target, point, failures):
    """The table columns a point fails on ("ttft_ms.p99" marks the TTFT column), and why."""
    metrics = [str(metric) for metric in point.get("failed_metrics") or []]
    metrics += [
        str(entry.get("metric"))
        for entry in failures
        if entry.get("target") == target.get("name") and entry.get("point") == point.get("name")
    ]
    return {COLUMN_OF.get(metric, metric.split(".")[0]) for metric in metrics}, ", ".join(metrics)


def _cell(text, failing=False, why=""):
    if failing:
        return '<td class="num fail" title="fails: %s">%s %s</td>' % (esc(why), FAIL_MARK, esc(text))
    return '<td class="num">%s</td>' % esc(text)


def _saturation(saturation):
    if not isinstance(saturation, dict):
        return "Saturation: not assessed."
    ratio = _number(saturation.get("ratio"))
    text = "Saturation: concurrency %s, plan concurrency %s, ratio %s." % (
        _fmt(saturation.get("concurrency")),
        _fmt(saturation.get("plan_concurrency")),
        DASH if ratio is None else "%.2f" % ratio,
    )
    return text + (" %s" % saturation["note"] if saturation.get("note") else "")


def _columns(document, key):
    field, _title, column = _load(document)
    columns = [
        (field, column),
        ("prompt_tokens", "Prompt tok"),
        ("output_tokens", "Output tok"),
        ("completed", "Completed"),
        ("failed", "Failed"),
    ]
    columns += [(metric, "%s %s ms" % (metric.split("_", maxsplit=1)[0].upper(), key)) for metric in METRICS]
    return [*columns, ("output_throughput", "Output tok/s"), ("goodput_rps", "Goodput req/s")]


def _target_table(target, columns, key, failures):
    passed = target.get("passed") is True
    heading = "%s (%s, %s)" % (target.get("name"), target.get("kind") or DASH, target.get("engine") or DASH)
    about = "model %s at %s, plan concurrency %s" % (
        target.get("model") or DASH,
        target.get("url") or DASH,
        _fmt(target.get("plan_concurrency")),
    )
    out = [
        '<section class="target">',
        '<h2>%s <span class="tag %s">%s</span></h2>'
        % (esc(heading), "pass" if passed else "fail", "PASSED" if passed else FAIL_MARK + " FAILED"),
        '<p class="sub">%s<br>%s</p>' % (esc(about), esc(_saturation(target.get("saturation")))),
        '<div class="scroll"><table class="list"><thead><tr><th>Point</th>%s<th>Result</th></tr></thead><tbody>'
        % "".join("<th>%s</th>" % esc(title) for _name, title in columns),
    ]
    for point in _points(target):
        failing, why = _failing_columns(target, point, failures)
        cells = ["<td>%s</td>" % esc(str(point.get("name") or DASH))]
        for name, _title in columns:
            value = _stat(point, name, key) if name in METRICS else point.get(name)
            cells.append(_cell(_fmt(value), name in failing, why))
        ok = point.get("passed")
        cells.append(_cell("FAIL", True, why) if ok is False else _cell("PASS" if ok else DASH))
        out.append("<tr>%s</tr>" % "".join(cells))
    return [*out, "</tbody></table></div>", "</section>"]


CSS = """
:root { --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --bad: #b91c1c; --bad-bg: #fef2f2;
  --good: #15803d; --good-bg: #f0fdf4; --panel: #ffffff; --page: #f3f4f6; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { margin: 0; font-size: 22px; } h2 { margin: 0 0 12px; font-size: 16px; }
.sub, .note { margin: 4px 0 0; color: var(--muted); } dt { color: var(--muted); font-weight: 600; } dd { margin: 0; }
section, header { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 20px 24px;
  margin-top: 16px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }
.banner { display: inline-block; font-weight: 700; font-size: 20px; letter-spacing: .06em; padding: 8px 18px;
  border-radius: 8px; border: 2px solid; margin-bottom: 12px; }
.tag { font-size: 12px; padding: 2px 8px; border-radius: 4px; border: 1px solid; margin-left: 8px; }
.pass { color: var(--good); background: var(--good-bg); } .fail { color: var(--bad); background: var(--bad-bg); }
.none { color: var(--good); margin: 0; } .nodata { color: var(--muted); font-style: italic; }
figure { margin: 16px 0 24px; } figcaption { font-weight: 600; margin-bottom: 6px; } .scroll { overflow-x: auto; }
svg { max-width: 100%; height: auto; } svg text { font: 12px system-ui, sans-serif; fill: #374151; }
svg text.title, svg .slo-label { font-weight: 700; } svg .grid { stroke: var(--line); }
svg .axis { stroke: var(--muted); } svg .slo { stroke: var(--ink); stroke-width: 1.5; }
table.list { border-collapse: collapse; width: 100%; }
table.list th, table.list td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); }
table.list th { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .05em; }
table.list td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.list td.fail { border: 3px solid var(--ink); font-weight: 700; }
footer { color: var(--muted); font-size: 12px; text-align: center; margin: 20px 0 8px; }
@media print { body { background: #fff; } section, figure { break-inside: avoid; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; } }
"""


def render_html(document):
    """The report as one self-contained page: facts, verdict, charts, one table per target."""
    targets = _targets(document)
    key = percentile_key(document)
    title = str(document.get("title") or DEFAULT_TITLE)
    verdict = document.get("verdict") or {}
    failures = [entry for entry in verdict.get("failures") or [] if isinstance(entry, dict)]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>%s</title>" % esc(title),
        "<style>%s</style>" % CSS,
        "</head>",
        "<body>",
        "<main>",
        "<header><h1>%s</h1>" % esc(title),
    ]
    if document.get("generated_at"):
        out.append('<p class="sub">Generated %s</p>' % esc(str(document["generated_at"])))
    out += ["</header>", *_facts(document, key), *_verdict(verdict, failures), *_charts(document, targets, key)]
    columns = _columns(document, key)
    for target in targets:
        out += _target_table(target, columns, key, failures)
    out += ["<footer>gpufleet.inference serving acceptance</footer>", "</main>", "</body>", "</html>", ""]
    return "\n".join(out)
