# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric bandwidth test: who tests whom in which round, how the results are judged, and the report.

Facts (iperf3's documentation and behaviour, iperf3 3.12 on Debian 12):
- An iperf3 server runs one test at a time, and two tests that share a NIC measure contention,
  not the link. So hosts are paired into rounds in which no host is in two tests.
- The circle method (round-robin tournament) covers all N(N-1)/2 pairs in N-1 rounds of N/2
  disjoint pairs; with N odd one host sits out each round and there are N rounds. NVIDIA
  ClusterKit schedules the same way and calls a pair bad under 93 % of the best pair.
- TCP goodput tops out at 94 % (MTU 1500) to 99 % (MTU 9000) of line rate, and ESnet expects about
  90 Gbit/s from a 100G host with parallel streams. 85 % of line rate leaves a healthy host that
  margin, while a link negotiated down or a bond missing a member (50 % or less) still fails.

Everything here is pure, so the filter, the module and the unit tests share it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import html
import io
import math
import re
from statistics import median

from ansible_collections.gpufleet.inference.plugins.module_utils import _render

MIN_LINE_FRACTION = 0.85
MIN_BEST_FRACTION = 0.93
FORMATS = ("json", "csv", "html")
CSV_FIELDS = ("a", "b", "gbps", "status", "jumbo_ok", "error", "reasons")
DEFAULT_TITLE = "Fabric bandwidth acceptance"
OUTLIER_RULE = (
    "A host is an outlier when none of its measured pairs passed, or when it has at least two failing "
    "pairs that no other outlier explains. Hosts are named in rounds: each round names the hosts with "
    "the most failing pairs whose partner is not yet an outlier, if that count is two or more. "
    "A single failing pair between otherwise healthy hosts names no host: it points at the link "
    "(cable, port, switch path)."
)
# ColorBrewer RdYlGn, 5 classes: red at 0, green at the top of the scale.
SCALE = (
    (0.0, (215, 25, 28)),
    (0.25, (253, 174, 97)),
    (0.5, (255, 255, 191)),
    (0.75, (166, 217, 106)),
    (1.0, (26, 150, 65)),
)
FAIL_MARK = "\u2715"  # a cross, so failing cells do not depend on colour alone


def check_hosts(hosts):
    """The hosts as a list; ValueError unless they are distinct, non-empty strings."""
    if not isinstance(hosts, (list, tuple)):
        raise ValueError("hosts must be a list of host names, got %r" % (hosts,))
    seen = set()
    for index, host in enumerate(hosts):
        if not isinstance(host, str) or not host:
            raise ValueError("hosts[%d]=%r is not a host name; give inventory hostnames as strings" % (index, host))
        if host in seen:
            raise ValueError("hosts lists %r twice; name each host once" % (host,))
        seen.add(host)
    return list(hosts)


def circle_schedule(hosts):
    """Rounds of disjoint (a, b) pairs that cover every unordered pair of hosts exactly once.

    The circle method: the first host stays put and the others rotate one place per round. Even N
    gives N-1 rounds of N/2 pairs; odd N adds a bye, so N rounds in which one host sits out each.
    Fewer than two hosts give no rounds. In each pair, a comes before b in the given host order.
    """
    order = {host: index for index, host in enumerate(check_hosts(hosts))}
    slots = list(hosts)
    if len(slots) < 2:
        return []
    if len(slots) % 2:
        slots.append(None)  # the bye: whoever meets it sits the round out
    count = len(slots)
    rounds = []
    for _round in range(count - 1):
        pairs = []
        for index in range(count // 2):
            a, b = slots[index], slots[count - 1 - index]
            if a is None or b is None:
                continue
            pairs.append((a, b) if order[a] < order[b] else (b, a))
        rounds.append(pairs)
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def sequential_schedule(hosts):
    """Every pair of the circle schedule in a round of its own: the naive one-at-a-time test.

    It exists as the reference the circle schedule is measured against (benchmarks/), and for
    fabrics whose switch uplinks cannot carry N/2 tests at once.
    """
    return [[pair] for pairs in circle_schedule(hosts) for pair in pairs]


def ring_schedule(hosts):
    """Rounds that test each host against its ring neighbour, (host i, host i+1 mod N), once.

    For big clusters, where all pairs take too long: N pairs instead of N(N-1)/2. Even N gives two
    rounds (even then odd positions); an odd ring needs a third round for the pair that closes it.
    Two hosts give one round of one pair, fewer give no rounds.
    """
    hosts = check_hosts(hosts)
    count = len(hosts)
    if count < 2:
        return []
    if count == 2:
        return [[(hosts[0], hosts[1])]]
    edges = [(hosts[index], hosts[(index + 1) % count]) for index in range(count)]
    if count % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0 : count - 1 : 2], edges[1 : count - 1 : 2], [edges[-1]]]


# ---------------------------------------------------------------- the role's settings

MODES = ("circle", "ring", "sequential")
BACKENDS = ("auto", "iperf3", "python")
DIRECTIONS = ("forward", "reverse", "bidir")
# Numbers are checked as they were written, so "10" passes and 10.5, "10s" and True do not.
_WHOLE = re.compile(r"^[0-9]+\Z")
_DECIMAL = re.compile(r"^[0-9]*[.]?[0-9]+\Z")


def _whole(value):
    """The value as a whole number when it is written as one (digits only), else None."""
    text = str(value)
    return int(text) if _WHOLE.match(text) else None


def _decimal(value):
    """The value as a number when it is written as digits with at most one point, else None."""
    text = str(value)
    return float(text) if _DECIMAL.match(text) else None


def _choice(problems, settings, name, choices):
    if settings[name] not in choices:
        words = ", ".join(choices[:-1]) + " or " + choices[-1]
        problems.append("%s=%s must be %s" % (name, settings[name], words))


def _empty(value):
    return value is None or (isinstance(value, (str, list, tuple, dict)) and len(value) == 0)


def settings_problems(settings):
    """One message per bad fabric_validate_* variable (the fabric_validate role's preflight, through
    the _role_problems filter), each naming it, its value and what is allowed."""
    address = settings["fabric_validate_address"]
    checks = [] if _empty(address) else [["ip", "fabric_validate_address", address]]
    checks += [
        ["port", "fabric_validate_port", settings["fabric_validate_port"]],
        ["file_name", "fabric_validate_report_name", settings["fabric_validate_report_name"]],
        ["text", "fabric_validate_report_dir", settings["fabric_validate_report_dir"]],
    ]
    problems = _render.input_problems(checks)
    if _empty(address):
        problems.append(
            "fabric_validate_address is empty: set gpufleet_fabric_address, the fabric address of the host, "
            "in the inventory"
        )
    _choice(problems, settings, "fabric_validate_mode", MODES)
    _choice(problems, settings, "fabric_validate_backend", BACKENDS)
    _choice(problems, settings, "fabric_validate_direction", DIRECTIONS)
    duration = _whole(settings["fabric_validate_duration"])
    if duration is None or duration <= 0:
        problems.append(
            "fabric_validate_duration=%s must be whole seconds > 0" % (settings["fabric_validate_duration"],)
        )
    streams = _whole(settings["fabric_validate_streams"])
    if streams is None or not 0 < streams <= 128:
        problems.append("fabric_validate_streams=%s must be 1..128" % (settings["fabric_validate_streams"],))
    line = _decimal(settings["fabric_validate_min_line_fraction"])
    if line is None or line > 1:
        problems.append(
            "fabric_validate_min_line_fraction=%s must be 0..1 (0 turns the line-rate check off)"
            % (settings["fabric_validate_min_line_fraction"],)
        )
    best = _decimal(settings["fabric_validate_min_best_fraction"])
    if best is None or not 0 < best <= 1:
        problems.append(
            "fabric_validate_min_best_fraction=%s must be above 0 and at most 1"
            % (settings["fabric_validate_min_best_fraction"],)
        )
    mtu = _whole(settings["fabric_validate_mtu"])
    if mtu is None or mtu < 576:
        problems.append("fabric_validate_mtu=%s must be a whole number >= 576" % (settings["fabric_validate_mtu"],))
    rate = settings["fabric_validate_line_rate_gbps"]
    if rate is not None and (_decimal(rate) or 0) <= 0:
        problems.append("fabric_validate_line_rate_gbps=%s must be null or the link speed in Gbit/s, above 0" % (rate,))
    return problems


def _host_key(host):
    """Natural order, so node2 comes before node10 and 10.0.0.9 before 10.0.0.10."""
    parts = re.split(r"(\d+)", host)
    return [int(part) if index % 2 else part.lower() for index, part in enumerate(parts)], host


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_fraction(name, value):
    if not _is_number(value) or not 0 < value <= 1:
        raise ValueError("%s=%r is not a fraction; use a number above 0 and at most 1, like 0.93" % (name, value))


def _bandwidth(where, value):
    # Numbers that went through a template as text ("94.1") are accepted.
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if not _is_number(number) or number < 0:
        raise ValueError("%s.gbps=%r is not a bandwidth; give Gbit/s as a number >= 0" % (where, value))
    return float(number)


def _normalise(results):
    if not isinstance(results, (list, tuple)) or not results:
        raise ValueError("results=%r is empty or not a list; pass one entry per measured pair" % (results,))
    pairs = []
    seen = {}
    for index, entry in enumerate(results):
        where = "results[%d]" % index
        if not isinstance(entry, dict):
            raise ValueError("%s=%r is not a dict with a, b, gbps, ok, jumbo_ok and error" % (where, entry))
        for key in ("a", "b"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise ValueError(
                    "%s.%s=%r is not a host name; give the inventory hostname" % (where, key, entry.get(key))
                )
        a, b = entry["a"], entry["b"]
        if a == b:
            raise ValueError("%s pairs %r with itself; a and b must be two hosts" % (where, a))
        key = frozenset((a, b))
        if key in seen:
            raise ValueError(
                "%s repeats the pair %s-%s of results[%d]; keep one result per pair (the latest retest)"
                % (where, a, b, seen[key])
            )
        seen[key] = index
        ok = entry.get("ok", True)
        jumbo_ok = entry.get("jumbo_ok")
        error = entry.get("error")
        gbps = entry.get("gbps")
        if not isinstance(ok, bool):
            raise ValueError("%s.ok=%r is not a boolean; use true when the test ran" % (where, ok))
        if jumbo_ok is not None and not isinstance(jumbo_ok, bool):
            raise ValueError("%s.jumbo_ok=%r is not a boolean or null" % (where, jumbo_ok))
        if error is not None and not isinstance(error, str):
            raise ValueError("%s.error=%r is not a string or null" % (where, error))
        errored = not ok or bool(error)
        if gbps is None and not errored:
            raise ValueError("%s has no gbps; a pair that ran needs its bandwidth in Gbit/s" % where)
        if gbps is not None:
            gbps = _bandwidth(where, gbps)
        pairs.append(
            {
                "a": a,
                "b": b,
                "gbps": gbps,
                "ok": not errored,
                "jumbo_ok": jumbo_ok,
                "error": error or None,
            }
        )
    return pairs


def _number(value):
    """Two decimals, but one trailing zero dropped: 94.0, 94.25, 92.99."""
    text = "%.2f" % value
    return text[:-1] if text.endswith("0") else text


def _gbit(value):
    return "%s Gbit/s" % _number(value)


def _rate(value):
    return "%g Gbit/s" % value


def _percent(fraction):
    return "%g%%" % round(fraction * 100, 2)


def _below(value, floor):
    # Tolerate float noise: 0.93 * 100 is 93.00000000000001.
    return value < floor - 1e-9


def find_outliers(hosts, pairs):
    """The hosts to blame for the failing pairs, in host order; see OUTLIER_RULE."""
    tested = dict.fromkeys(hosts, 0)
    failed = dict.fromkeys(hosts, 0)
    failing = []
    for pair in pairs:
        for host in (pair["a"], pair["b"]):
            tested[host] += 1
            failed[host] += pair["status"] == "fail"
        if pair["status"] == "fail":
            failing.append((pair["a"], pair["b"]))
    outliers = {host for host in hosts if tested[host] and failed[host] == tested[host]}
    named = set()
    while True:
        unexplained = dict.fromkeys(hosts, 0)
        for a, b in failing:
            if a not in named and b not in named:
                unexplained[a] += 1
                unexplained[b] += 1
        top = max(unexplained.values())
        if top < 2:
            break
        named.update(host for host, count in unexplained.items() if count == top)
    return [host for host in hosts if host in outliers or host in named]


def evaluate(results, line_rate_gbps=None, min_line_fraction=MIN_LINE_FRACTION, min_best_fraction=MIN_BEST_FRACTION):
    """Judge each pair and name the outlier hosts.

    results: [{a, b, gbps, ok, jumbo_ok, error}], one per unordered pair. ok (default true) is false
    when the test itself failed; error is its message. A pair fails when it errored, when jumbo_ok
    is false, when it moved no data, when it is under min_line_fraction of line_rate_gbps (only
    when the line rate is given), or under min_best_fraction of the best pair that ran. Raises
    ValueError, naming the entry and field, on bad input.
    """
    if line_rate_gbps is not None and (not _is_number(line_rate_gbps) or line_rate_gbps <= 0):
        raise ValueError(
            "line_rate_gbps=%r is not a line rate; give the link speed in Gbit/s, like 100" % (line_rate_gbps,)
        )
    _check_fraction("min_line_fraction", min_line_fraction)
    _check_fraction("min_best_fraction", min_best_fraction)
    pairs = _normalise(results)
    hosts = sorted({pair[key] for pair in pairs for key in ("a", "b")}, key=_host_key)
    position = {host: index for index, host in enumerate(hosts)}
    pairs.sort(key=lambda pair: sorted((position[pair["a"]], position[pair["b"]])))

    measured = [pair["gbps"] for pair in pairs if pair["ok"]]
    best = max(measured) if measured else None
    best_floor = min_best_fraction * best if best else None
    line_floor = min_line_fraction * line_rate_gbps if line_rate_gbps else None
    for pair in pairs:
        reasons = []
        gbps = pair["gbps"]
        if not pair["ok"]:
            reasons.append("test failed: %s" % (pair["error"] or "no error message"))
        if pair["jumbo_ok"] is False:
            reasons.append("jumbo frames do not pass between the hosts")
        if pair["ok"]:
            if gbps == 0:
                reasons.append("no data moved (0 Gbit/s)")
            elif line_floor is not None and _below(gbps, line_floor):
                reasons.append(
                    "%s is below %s of the %s line rate (%s)"
                    % (_gbit(gbps), _percent(min_line_fraction), _rate(line_rate_gbps), _gbit(line_floor))
                )
            if gbps and best_floor is not None and _below(gbps, best_floor):
                reasons.append(
                    "%s is below %s of the best pair's %s (%s)"
                    % (_gbit(gbps), _percent(min_best_fraction), _gbit(best), _gbit(best_floor))
                )
        pair["status"] = "fail" if reasons else "pass"
        pair["reasons"] = reasons

    failing = [pair for pair in pairs if pair["status"] == "fail"]
    return {
        "hosts": hosts,
        "pairs": pairs,
        "failing": failing,
        "outliers": find_outliers(hosts, pairs),
        "passed": not failing,
        "best_gbps": best,
        "median_gbps": median(measured) if measured else None,
        "worst_gbps": min(measured) if measured else None,
        "thresholds": {
            "line_rate_gbps": None if line_rate_gbps is None else float(line_rate_gbps),
            "min_line_fraction": float(min_line_fraction),
            "min_best_fraction": float(min_best_fraction),
            "line_floor_gbps": None if line_floor is None else round(line_floor, 3),
            "best_floor_gbps": None if best_floor is None else round(best_floor, 3),
        },
        "summary": {
            "hosts": len(hosts),
            "pairs": len(pairs),
            "best_gbps": best,
            "median_gbps": median(measured) if measured else None,
            "worst_gbps": min(measured) if measured else None,
            "failing_pairs": len(failing),
        },
    }


def failing_summary(evaluation):
    """The failing pairs as the module returns them: [{a, b, gbps, reasons}]."""
    return [
        {"a": pair["a"], "b": pair["b"], "gbps": pair["gbps"], "reasons": list(pair["reasons"])}
        for pair in evaluation["failing"]
    ]


def matrix(evaluation):
    """Gbit/s by host order, symmetric; None on the diagonal and for pairs not measured."""
    position = {host: index for index, host in enumerate(evaluation["hosts"])}
    size = len(position)
    cells = [[None] * size for _row in range(size)]
    for pair in evaluation["pairs"]:
        row, col = position[pair["a"]], position[pair["b"]]
        cells[row][col] = cells[col][row] = pair
    return cells


def render_json(evaluation, title=DEFAULT_TITLE, generated_at=""):
    """The report as a JSON-able dict; generated_at is left out when empty."""
    report = {
        "title": title,
        "passed": evaluation["passed"],
        "summary": dict(evaluation["summary"]),
        "thresholds": dict(evaluation["thresholds"]),
        "outliers": list(evaluation["outliers"]),
        "outlier_rule": OUTLIER_RULE,
        "hosts": list(evaluation["hosts"]),
        "matrix_gbps": [[None if cell is None else cell["gbps"] for cell in row] for row in matrix(evaluation)],
        "pairs": [dict(pair, reasons=list(pair["reasons"])) for pair in evaluation["pairs"]],
        "failing": failing_summary(evaluation),
    }
    if generated_at:
        report["generated_at"] = generated_at
    return report


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_csv(evaluation):
    """One row per pair: a, b, gbps, status, jumbo_ok, error, reasons (joined with '; ')."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for pair in evaluation["pairs"]:
        writer.writerow(
            [
                pair["a"],
                pair["b"],
                _csv_value(pair["gbps"]),
                pair["status"],
                _csv_value(pair["jumbo_ok"]),
                _csv_value(pair["error"]),
                "; ".join(pair["reasons"]),
            ]
        )
    return out.getvalue()


def colour(fraction):
    """The heatmap colour of a cell at this fraction of the scale, as #rrggbb."""
    fraction = min(max(fraction, 0.0), 1.0)
    for (low, low_rgb), (high, high_rgb) in zip(SCALE, SCALE[1:]):
        if fraction <= high:
            step = (fraction - low) / (high - low)
            return "#%02x%02x%02x" % tuple(round(lo + (hi - lo) * step) for lo, hi in zip(low_rgb, high_rgb))
    return "#%02x%02x%02x" % SCALE[-1][1]


def _ink(background):
    """Dark or white text, whichever reads better on the background (WCAG relative luminance)."""
    channels = [int(background[i : i + 2], 16) / 255.0 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "#111827" if luminance > 0.22 else "#ffffff"


def _fmt(value, unit=" Gbit/s"):
    return "\u2014" if value is None else _number(value) + unit


CSS = """
:root { --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --bad: #b91c1c; --bad-bg: #fef2f2;
  --good: #15803d; --good-bg: #f0fdf4; --panel: #ffffff; --page: #f3f4f6; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
header.top { display: flex; justify-content: space-between; align-items: center; gap: 16px;
  background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 20px 24px; }
h1 { margin: 0; font-size: 22px; }
h2 { margin: 0 0 12px; font-size: 16px; }
.sub { margin: 4px 0 0; color: var(--muted); }
.verdict { font-weight: 700; font-size: 20px; letter-spacing: .06em; padding: 8px 18px; border-radius: 8px;
  border: 2px solid; white-space: nowrap; }
.verdict.pass { color: var(--good); background: var(--good-bg); }
.verdict.fail { color: var(--bad); background: var(--bad-bg); }
section { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 20px 24px;
  margin-top: 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 12px;
  background: none; border: 0; padding: 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .05em; }
.card .value { font-size: 22px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .unit { font-size: 13px; font-weight: 500; color: var(--muted); margin-left: 4px; }
.card.bad .value { color: var(--bad); }
.sub.thresholds { margin-top: 2px; }
.outliers.bad { border: 2px solid var(--bad); background: var(--bad-bg); }
.outliers.bad h2 { color: var(--bad); }
.outliers.good { border-left: 6px solid var(--good); }
.outliers ul { margin: 0 0 8px; padding: 0; list-style: none; display: flex; flex-wrap: wrap; gap: 8px; }
.outliers li { font: 600 16px/1.2 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #fff;
  background: var(--bad); border-radius: 6px; padding: 6px 12px; }
.rule { color: var(--muted); margin: 0; font-size: 13px; }
.scroll { overflow-x: auto; }
table.heatmap { border-collapse: separate; border-spacing: 2px; margin: 0 auto; }
table.heatmap th { font: 600 12px/1.2 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  color: var(--ink); padding: 4px 6px; white-space: nowrap; }
table.heatmap thead th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
  vertical-align: bottom; }
table.heatmap tbody th { text-align: right; }
table.heatmap th.outlier { color: var(--bad); }
table.heatmap td { width: 58px; min-width: 58px; height: 40px; text-align: center; border-radius: 4px;
  font-size: 12px; font-weight: 600; font-variant-numeric: tabular-nums; }
td.diag { background: repeating-linear-gradient(45deg, #f9fafb, #f9fafb 4px, #e5e7eb 4px, #e5e7eb 5px); }
td.untested { background: #f3f4f6; color: #9ca3af; }
td.fail { box-shadow: inset 0 0 0 3px #111827; }
.legend { display: flex; flex-wrap: wrap; align-items: center; gap: 20px; margin-top: 16px; color: var(--muted);
  font-size: 12px; justify-content: center; }
.bar { width: 260px; height: 14px; border-radius: 3px; border: 1px solid var(--line);
  background: linear-gradient(to right, %(gradient)s); }
.ticks { display: flex; justify-content: space-between; width: 260px; }
.swatch { display: inline-block; width: 26px; height: 18px; border-radius: 3px; vertical-align: middle;
  margin-right: 6px; text-align: center; font-size: 11px; font-weight: 700; line-height: 18px; }
.swatch.fail { box-shadow: inset 0 0 0 3px #111827; background: #fdae61; }
.swatch.untested { background: #f3f4f6; }
table.list { border-collapse: collapse; width: 100%%; }
table.list th, table.list td { text-align: left; padding: 8px 10px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
table.list th { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .05em; }
table.list td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.list td.host { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: nowrap; }
table.list td.outlier { color: var(--bad); font-weight: 700; }
table.list ul { margin: 0; padding-left: 18px; }
.none { color: var(--good); margin: 0; }
footer { color: var(--muted); font-size: 12px; text-align: center; margin: 20px 0 8px; }
@media print { body { background: #fff; } section, header.top, .card { break-inside: avoid; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; } }
"""


def _cell(pair, row_host, col_host, scale_max):
    if pair is None:
        label = "%s \u2194 %s: not measured" % (row_host, col_host)
        return '<td class="untested" title="%s">\u00b7</td>' % html.escape(label)
    gbps = pair["gbps"]
    text = "err" if not pair["ok"] else ("%.1f" % gbps)
    detail = "%s \u2194 %s: %s" % (row_host, col_host, _fmt(gbps) if pair["ok"] else "test failed")
    if pair["ok"]:
        background = colour(gbps / scale_max)
    else:
        background = colour(0.0)
    classes = "cell"
    if pair["status"] == "fail":
        classes += " fail"
        text = "%s %s" % (FAIL_MARK, text)
        detail += " \u2014 FAIL: " + "; ".join(pair["reasons"])
    return '<td class="%s" style="background:%s;color:%s" title="%s">%s</td>' % (
        classes,
        background,
        _ink(background),
        html.escape(detail),
        html.escape(text),
    )


def _host_th(host, outliers, scope):
    if host in outliers:
        return '<th scope="%s" class="outlier" title="outlier host">\u26a0\ufe0e %s</th>' % (scope, html.escape(host))
    return '<th scope="%s">%s</th>' % (scope, html.escape(host))


def _threshold_text(thresholds):
    text = "%s of the best pair (%s)" % (_percent(thresholds["min_best_fraction"]), _fmt(thresholds["best_floor_gbps"]))
    if thresholds["line_rate_gbps"]:
        text += ", %s of the %s line rate (%s)" % (
            _percent(thresholds["min_line_fraction"]),
            _rate(thresholds["line_rate_gbps"]),
            _fmt(thresholds["line_floor_gbps"]),
        )
    else:
        text += "; no line rate given"
    return text


def _host_td(host, outliers):
    if host in outliers:
        return '<td class="host outlier" title="outlier host">\u26a0\ufe0e %s</td>' % html.escape(host)
    return '<td class="host">%s</td>' % html.escape(host)


def render_html(evaluation, title=DEFAULT_TITLE, generated_at=""):
    """A self-contained HTML page: verdict, summary, outliers, the heatmap, failing pairs, the rules.

    Inline CSS only: no script, no external asset, so it can be mailed or archived as one file.
    """
    esc = html.escape
    hosts = evaluation["hosts"]
    outliers = set(evaluation["outliers"])
    summary = evaluation["summary"]
    thresholds = evaluation["thresholds"]
    line_rate = thresholds["line_rate_gbps"]
    scale_max = line_rate or evaluation["best_gbps"] or 1.0
    scale_name = "line rate" if line_rate else "best pair"
    possible = len(hosts) * (len(hosts) - 1) // 2
    passed = evaluation["passed"]

    gradient = ", ".join("%s %g%%" % (colour(stop), stop * 100) for stop, _rgb in SCALE)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>%s</title>" % esc(title),
        "<style>%s</style>" % (CSS % {"gradient": gradient}),
        "</head>",
        "<body>",
        "<main>",
        '<header class="top">',
        "<div><h1>%s</h1>" % esc(title),
        '<p class="sub">%d hosts, %d of %d pairs measured%s</p>'
        % (len(hosts), summary["pairs"], possible, (", generated " + esc(generated_at)) if generated_at else ""),
        '<p class="sub thresholds">Thresholds: %s</p></div>' % esc(_threshold_text(thresholds)),
        '<div class="verdict %s">%s</div>' % ("pass" if passed else "fail", "PASS" if passed else "FAIL"),
        "</header>",
        '<section class="cards">',
    ]
    unit = '<span class="unit">Gbit/s</span>'
    cards = (
        ("Hosts", str(summary["hosts"]), False),
        ("Pairs", str(summary["pairs"]), False),
        ("Best", _fmt(summary["best_gbps"], unit), False),
        ("Median", _fmt(summary["median_gbps"], unit), False),
        ("Worst", _fmt(summary["worst_gbps"], unit), False),
        ("Failing pairs", str(summary["failing_pairs"]), summary["failing_pairs"] > 0),
    )
    for label, value, bad in cards:
        out.append(
            '<div class="card%s"><div class="label">%s</div><div class="value">%s</div></div>'
            % (" bad" if bad else "", label, value)
        )
    out.append("</section>")

    if outliers:
        out += [
            '<section class="outliers bad">',
            "<h2>\u26a0\ufe0e Outlier hosts (%d)</h2>" % len(outliers),
            "<ul>%s</ul>" % "".join("<li>%s</li>" % esc(host) for host in evaluation["outliers"]),
            '<p class="rule">%s</p>' % esc(OUTLIER_RULE),
            "</section>",
        ]
    else:
        out += [
            '<section class="outliers good">',
            "<h2>Outlier hosts</h2>",
            '<p class="none">None: no host stands out.</p>',
            '<p class="rule">%s</p>' % esc(OUTLIER_RULE),
            "</section>",
        ]

    out += [
        "<section>",
        "<h2>Bandwidth matrix (Gbit/s)</h2>",
        '<div class="scroll"><table class="heatmap">',
        "<thead><tr><td></td>%s</tr></thead>" % "".join(_host_th(host, outliers, "col") for host in hosts),
        "<tbody>",
    ]
    cells = matrix(evaluation)
    for row, row_host in enumerate(hosts):
        line = [_host_th(row_host, outliers, "row")]
        for col, col_host in enumerate(hosts):
            if row == col:
                line.append('<td class="diag"></td>')
            else:
                line.append(_cell(cells[row][col], row_host, col_host, scale_max))
        out.append("<tr>%s</tr>" % "".join(line))
    out += [
        "</tbody></table></div>",
        '<div class="legend">',
        '<div><div class="bar"></div><div class="ticks"><span>0</span><span>%s</span><span>%s (%s)</span></div></div>'
        % (esc("%.0f" % (scale_max / 2)), esc("%.0f" % scale_max), scale_name),
        '<div><span class="swatch fail">%s</span>failing pair</div>' % FAIL_MARK,
        '<div><span class="swatch untested"></span>not measured</div>',
        "<div>err: the test did not run</div>",
        "</div>",
        "</section>",
    ]

    failing = sorted(
        evaluation["failing"], key=lambda pair: (pair["ok"], pair["gbps"] if pair["gbps"] is not None else -1.0)
    )
    out += ["<section>", "<h2>Failing pairs (%d)</h2>" % len(failing)]
    if failing:
        best = evaluation["best_gbps"]
        out.append(
            '<table class="list"><thead><tr><th>Host A</th><th>Host B</th><th>Gbit/s</th><th>Of best</th>'
            "<th>Reasons</th></tr></thead><tbody>"
        )
        for pair in failing:
            of_best = "\u2014"
            if pair["ok"] and best:
                of_best = "%.0f%%" % (100.0 * pair["gbps"] / best)
            out.append(
                '<tr>%s%s<td class="num">%s</td><td class="num">%s</td><td><ul>%s</ul></td></tr>'
                % (
                    _host_td(pair["a"], outliers),
                    _host_td(pair["b"], outliers),
                    esc(_fmt(pair["gbps"], "") if pair["ok"] else "err"),
                    of_best,
                    "".join("<li>%s</li>" % esc(reason) for reason in pair["reasons"]),
                )
            )
        out.append("</tbody></table>")
    else:
        out.append('<p class="none">None: every pair met the thresholds.</p>')
    out.append("</section>")

    rules = [
        "below %s of the best pair (under %s)"
        % (_percent(thresholds["min_best_fraction"]), _fmt(thresholds["best_floor_gbps"])),
    ]
    if line_rate:
        rules.append(
            "below %s of the %s line rate (under %s)"
            % (_percent(thresholds["min_line_fraction"]), _rate(line_rate), _fmt(thresholds["line_floor_gbps"]))
        )
    rules += ["the test itself failed", "jumbo frames did not pass", "no data moved"]
    out += [
        "<section>",
        "<h2>How a pair is judged</h2>",
        "<p>A pair fails when any of these holds:</p>",
        "<ul>%s</ul>" % "".join("<li>%s</li>" % esc(rule) for rule in rules),
        "" if line_rate else '<p class="rule">No line rate was given, so there is no line-rate threshold.</p>',
        '<p class="rule">The heatmap colours run from red at 0 to green at the %s (%s).</p>'
        % (scale_name, esc(_rate(line_rate) if line_rate else _fmt(scale_max))),
        "</section>",
        "<footer>gpufleet.inference.fabric_report</footer>",
        "</main>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(out)
