# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_fabric.py: the pairing schedules, the judging of pairs and the reports."""

import itertools
from html.parser import HTMLParser

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _fabric as fabric
from ansible_collections.gpufleet.inference.plugins.module_utils._fabric import (
    circle_schedule,
    colour,
    evaluate,
    failing_summary,
    render_csv,
    render_html,
    render_json,
    ring_schedule,
)


def names(count):
    return [f"h{index:02d}" for index in range(count)]


def unordered(rounds):
    return [frozenset(pair) for pairs in rounds for pair in pairs]


def result(a, b, gbps, ok=True, jumbo_ok=True, error=None):
    return {"a": a, "b": b, "gbps": gbps, "ok": ok, "jumbo_ok": jumbo_ok, "error": error}


def all_pairs(hosts, gbps=94.0, slow=(), slow_gbps=28.2):
    """A result for every pair of the circle schedule; pairs with a host in slow run at slow_gbps."""
    return [
        result(a, b, slow_gbps if a in slow or b in slow else gbps)
        for pairs in circle_schedule(hosts)
        for a, b in pairs
    ]


# The circle schedule


@pytest.mark.parametrize("count", range(2, 13))
def test_circle_covers_every_pair_once_in_disjoint_rounds(count):
    hosts = names(count)
    rounds = circle_schedule(hosts)
    covered = unordered(rounds)
    expected = [frozenset(pair) for pair in itertools.combinations(hosts, 2)]
    assert sorted(covered, key=sorted) == sorted(expected, key=sorted)
    assert len(covered) == len(set(covered)) == count * (count - 1) // 2
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    for pairs in rounds:
        in_round = [host for pair in pairs for host in pair]
        assert len(in_round) == len(set(in_round)), pairs
        assert len(pairs) == count // 2
        for a, b in pairs:
            assert hosts.index(a) < hosts.index(b)


@pytest.mark.parametrize("count", range(3, 13, 2))
def test_circle_odd_host_count_idles_each_host_exactly_once(count):
    hosts = names(count)
    idle = []
    for pairs in circle_schedule(hosts):
        busy = {host for pair in pairs for host in pair}
        [sitting_out] = set(hosts) - busy
        idle.append(sitting_out)
    assert sorted(idle) == hosts


@pytest.mark.parametrize("hosts", [[], ["solo"]])
def test_circle_needs_two_hosts(hosts):
    assert circle_schedule(hosts) == []


def test_circle_exact_rounds_for_four_and_three_hosts():
    assert circle_schedule(["a", "b", "c", "d"]) == [
        [("a", "d"), ("b", "c")],
        [("a", "c"), ("b", "d")],
        [("a", "b"), ("c", "d")],
    ]
    assert circle_schedule(["a", "b", "c"]) == [[("b", "c")], [("a", "c")], [("a", "b")]]


def test_circle_is_deterministic_and_follows_host_order():
    hosts = ["gpu07", "gpu01", "gpu10", "gpu03", "gpu05"]
    assert circle_schedule(hosts) == circle_schedule(list(hosts))
    assert circle_schedule(hosts)[0] == [("gpu01", "gpu05"), ("gpu10", "gpu03")]
    # The input is not modified.
    assert hosts == ["gpu07", "gpu01", "gpu10", "gpu03", "gpu05"]


@pytest.mark.parametrize(
    "hosts, message",
    [
        ("gpu01,gpu02", "hosts must be a list of host names, got 'gpu01,gpu02'"),
        (["gpu01", "gpu02", "gpu01"], "hosts lists 'gpu01' twice; name each host once"),
        (["gpu01", ""], "hosts[1]='' is not a host name; give inventory hostnames as strings"),
        (["gpu01", 2], "hosts[1]=2 is not a host name; give inventory hostnames as strings"),
        (["gpu01", None], "hosts[1]=None is not a host name; give inventory hostnames as strings"),
    ],
)
@pytest.mark.parametrize("schedule", [circle_schedule, ring_schedule])
def test_schedules_reject_bad_hosts(schedule, hosts, message):
    with pytest.raises(ValueError) as exc:
        schedule(hosts)
    assert str(exc.value) == message


# The ring schedule


@pytest.mark.parametrize("count", range(3, 13))
def test_ring_tests_each_neighbour_pair_once_in_disjoint_rounds(count):
    hosts = names(count)
    rounds = ring_schedule(hosts)
    covered = unordered(rounds)
    neighbours = [frozenset((hosts[i], hosts[(i + 1) % count])) for i in range(count)]
    assert sorted(covered, key=sorted) == sorted(neighbours, key=sorted)
    assert len(covered) == len(set(covered)) == count
    assert len(rounds) == (2 if count % 2 == 0 else 3)
    for pairs in rounds:
        in_round = [host for pair in pairs for host in pair]
        assert len(in_round) == len(set(in_round)), pairs


def test_ring_exact_rounds():
    assert ring_schedule([]) == []
    assert ring_schedule(["a"]) == []
    assert ring_schedule(["a", "b"]) == [[("a", "b")]]
    assert ring_schedule(["a", "b", "c"]) == [[("a", "b")], [("b", "c")], [("c", "a")]]
    assert ring_schedule(["a", "b", "c", "d"]) == [[("a", "b"), ("c", "d")], [("b", "c"), ("d", "a")]]
    assert ring_schedule(["a", "b", "c", "d", "e"]) == [
        [("a", "b"), ("c", "d")],
        [("b", "c"), ("d", "e")],
        [("e", "a")],
    ]
    assert ring_schedule(["a", "b", "c", "d", "e"]) == ring_schedule(["a", "b", "c", "d", "e"])


# Judging the pairs


def test_one_throttled_host_is_the_only_outlier():
    hosts = names(6)
    evaluation = evaluate(all_pairs(hosts, slow=["h03"]))
    assert evaluation["outliers"] == ["h03"]
    assert evaluation["passed"] is False
    assert [(pair["a"], pair["b"]) for pair in evaluation["failing"]] == [
        ("h00", "h03"),
        ("h01", "h03"),
        ("h02", "h03"),
        ("h03", "h04"),
        ("h03", "h05"),
    ]
    for pair in evaluation["failing"]:
        assert pair["status"] == "fail"
        assert pair["reasons"] == ["28.2 Gbit/s is below 93% of the best pair's 94.0 Gbit/s (87.42 Gbit/s)"]
    assert all(
        pair["status"] == "pass" and pair["reasons"] == [] for pair in evaluation["pairs"] if "h03" not in pair.values()
    )
    assert evaluation["summary"] == {
        "hosts": 6,
        "pairs": 15,
        "best_gbps": 94.0,
        "median_gbps": 94.0,
        "worst_gbps": 28.2,
        "failing_pairs": 5,
    }
    assert evaluation["thresholds"] == {
        "line_rate_gbps": None,
        "min_line_fraction": 0.85,
        "min_best_fraction": 0.93,
        "line_floor_gbps": None,
        "best_floor_gbps": 87.42,
    }


def test_throttled_host_fails_both_thresholds_when_the_line_rate_is_known():
    evaluation = evaluate(all_pairs(names(6), slow=["h05"]), line_rate_gbps=100)
    assert evaluation["outliers"] == ["h05"]
    assert failing_summary(evaluation)[0] == {
        "a": "h00",
        "b": "h05",
        "gbps": 28.2,
        "reasons": [
            "28.2 Gbit/s is below 85% of the 100 Gbit/s line rate (85.0 Gbit/s)",
            "28.2 Gbit/s is below 93% of the best pair's 94.0 Gbit/s (87.42 Gbit/s)",
        ],
    }
    assert evaluation["thresholds"]["line_floor_gbps"] == 85.0


def test_best_pair_threshold_alone():
    results = [result("a", "b", 100.0), result("a", "c", 99.0), result("b", "c", 90.0)]
    evaluation = evaluate(results, line_rate_gbps=100)
    assert failing_summary(evaluation) == [
        {
            "a": "b",
            "b": "c",
            "gbps": 90.0,
            "reasons": ["90.0 Gbit/s is below 93% of the best pair's 100.0 Gbit/s (93.0 Gbit/s)"],
        }
    ]
    # One failing pair between hosts whose other pairs pass is a link, not a host.
    assert evaluation["outliers"] == []


def test_line_rate_threshold_alone_names_every_host_when_all_are_slow():
    results = [result("a", "b", 100.0), result("a", "c", 99.0), result("b", "c", 98.0)]
    evaluation = evaluate(results, line_rate_gbps=200)
    assert [pair["reasons"] for pair in evaluation["pairs"]] == [
        ["100.0 Gbit/s is below 85% of the 200 Gbit/s line rate (170.0 Gbit/s)"],
        ["99.0 Gbit/s is below 85% of the 200 Gbit/s line rate (170.0 Gbit/s)"],
        ["98.0 Gbit/s is below 85% of the 200 Gbit/s line rate (170.0 Gbit/s)"],
    ]
    assert evaluation["outliers"] == ["a", "b", "c"]
    assert evaluate(results, line_rate_gbps=200, min_line_fraction=0.49)["passed"] is True
    assert evaluate(results)["passed"] is True


def test_thresholds_are_inclusive_despite_float_noise():
    # 0.93 * 95 is 88.35000000000001 in floating point; 88.35 must still pass.
    results = [result("a", "b", 95.0), result("a", "c", 88.35), result("b", "c", 88.34)]
    assert [pair["status"] for pair in evaluate(results)["pairs"]] == ["pass", "pass", "fail"]
    evaluation = evaluate(results, line_rate_gbps=95, min_line_fraction=0.93)
    assert [pair["status"] for pair in evaluation["pairs"]] == ["pass", "pass", "fail"]
    assert evaluation["pairs"][2]["reasons"] == [
        "88.34 Gbit/s is below 93% of the 95 Gbit/s line rate (88.35 Gbit/s)",
        "88.34 Gbit/s is below 93% of the best pair's 95.0 Gbit/s (88.35 Gbit/s)",
    ]


def test_failed_tests_fail_and_stay_out_of_the_figures():
    hosts = names(4)
    results = all_pairs(hosts)
    results[0] = result(
        "h00", "h03", None, ok=False, error="iperf3: error - unable to connect to server: Connection refused"
    )
    results[1] = result("h01", "h02", 12.0, ok=True, error="iperf3: interrupt - the server has terminated")
    results[2] = result("h00", "h02", None, ok=False)
    evaluation = evaluate(results)
    assert failing_summary(evaluation) == [
        {"a": "h00", "b": "h02", "gbps": None, "reasons": ["test failed: no error message"]},
        {
            "a": "h00",
            "b": "h03",
            "gbps": None,
            "reasons": ["test failed: iperf3: error - unable to connect to server: Connection refused"],
        },
        {
            "a": "h01",
            "b": "h02",
            "gbps": 12.0,
            "reasons": ["test failed: iperf3: interrupt - the server has terminated"],
        },
    ]
    assert [pair["ok"] for pair in evaluation["failing"]] == [False, False, False]
    assert evaluation["summary"]["best_gbps"] == 94.0
    assert evaluation["summary"]["worst_gbps"] == 94.0
    assert evaluation["summary"]["pairs"] == 6
    # h00 and h02 each have two failing pairs; h00-h02 is one of them, so both are named in one round.
    assert evaluation["outliers"] == ["h00", "h02"]


def test_every_test_failed():
    evaluation = evaluate([result("a", "b", None, ok=False, error="timeout"), result("a", "c", None, ok=False)])
    assert evaluation["summary"]["best_gbps"] is None
    assert evaluation["summary"]["median_gbps"] is None
    assert evaluation["summary"]["worst_gbps"] is None
    assert evaluation["thresholds"]["best_floor_gbps"] is None
    assert evaluation["outliers"] == ["a", "b", "c"]


def test_jumbo_failure_fails_a_fast_pair():
    results = all_pairs(names(4))
    results[3]["jumbo_ok"] = False
    results[4]["jumbo_ok"] = None
    evaluation = evaluate(results)
    [failing] = failing_summary(evaluation)
    assert (failing["a"], failing["b"]) == (results[3]["a"], results[3]["b"])
    assert failing["reasons"] == ["jumbo frames do not pass between the hosts"]
    assert evaluation["outliers"] == []


def test_zero_bandwidth_fails():
    evaluation = evaluate([result("a", "b", 0)])
    assert evaluation["pairs"][0]["reasons"] == ["no data moved (0 Gbit/s)"]
    assert evaluation["outliers"] == ["a", "b"]


def test_two_hosts():
    passing = evaluate([result("gpu01", "gpu02", 97.5)], line_rate_gbps=100)
    assert passing["passed"] is True
    assert passing["outliers"] == []
    failing = evaluate([result("gpu02", "gpu01", 45.0)], line_rate_gbps=100)
    assert failing["passed"] is False
    assert failing["outliers"] == ["gpu01", "gpu02"]
    assert failing["pairs"][0]["reasons"] == ["45.0 Gbit/s is below 85% of the 100 Gbit/s line rate (85.0 Gbit/s)"]
    # The pair keeps the direction it was measured in.
    assert (failing["pairs"][0]["a"], failing["pairs"][0]["b"]) == ("gpu02", "gpu01")


def test_all_equal_passes():
    evaluation = evaluate(all_pairs(names(7)), line_rate_gbps=100)
    assert evaluation["passed"] is True
    assert evaluation["failing"] == []
    assert evaluation["outliers"] == []
    assert {pair["status"] for pair in evaluation["pairs"]} == {"pass"}
    assert evaluation["summary"]["failing_pairs"] == 0


def test_two_throttled_hosts_are_both_named_and_their_partners_are_not():
    evaluation = evaluate(all_pairs(names(8), slow=["h02", "h06"]))
    assert evaluation["outliers"] == ["h02", "h06"]
    assert evaluation["summary"]["failing_pairs"] == 13


def test_a_bad_link_beside_a_throttled_host_names_only_the_host():
    results = all_pairs(names(10), slow=["h04"])
    for entry in results:
        if {entry["a"], entry["b"]} == {"h01", "h07"}:
            entry["gbps"] = 41.0
    evaluation = evaluate(results)
    assert evaluation["outliers"] == ["h04"]
    assert ("h01", "h07") in [(pair["a"], pair["b"]) for pair in evaluation["failing"]]


def test_a_triangle_of_bad_links_names_its_three_hosts():
    results = all_pairs(names(5))
    for entry in results:
        if {entry["a"], entry["b"]} <= {"h00", "h01", "h02"}:
            entry["gbps"] = 50.0
    assert evaluate(results)["outliers"] == ["h00", "h01", "h02"]


def test_hosts_in_natural_order_and_median():
    results = [result("node10", "node2", 90.0), result("node1", "node10", 96.0), result("node2", "node1", 94.0)]
    evaluation = evaluate(results, min_best_fraction=0.5)
    assert evaluation["hosts"] == ["node1", "node2", "node10"]
    assert [(pair["a"], pair["b"]) for pair in evaluation["pairs"]] == [
        ("node2", "node1"),
        ("node1", "node10"),
        ("node10", "node2"),
    ]
    assert evaluation["summary"]["median_gbps"] == 94.0
    even = evaluate([*results, result("node1", "node3", 91.0)], min_best_fraction=0.5)
    assert even["summary"]["median_gbps"] == 92.5


def test_numbers_given_as_text_and_defaults():
    evaluation = evaluate([{"a": "a", "b": "b", "gbps": "94.5"}])
    assert evaluation["pairs"] == [
        {"a": "a", "b": "b", "gbps": 94.5, "ok": True, "jumbo_ok": None, "error": None, "status": "pass", "reasons": []}
    ]


@pytest.mark.parametrize(
    "results, message",
    [
        ([], "results=[] is empty or not a list; pass one entry per measured pair"),
        ("a,b", "results='a,b' is empty or not a list; pass one entry per measured pair"),
        ([["a", "b", 9.0]], "results[0]=['a', 'b', 9.0] is not a dict with a, b, gbps, ok, jumbo_ok and error"),
        ([{"a": "a", "gbps": 9.0}], "results[0].b=None is not a host name; give the inventory hostname"),
        ([{"a": "a", "b": "a", "gbps": 9.0}], "results[0] pairs 'a' with itself; a and b must be two hosts"),
        (
            [result("a", "b", 9.0), result("b", "a", 9.5)],
            "results[1] repeats the pair b-a of results[0]; keep one result per pair (the latest retest)",
        ),
        ([result("a", "b", "fast")], "results[0].gbps='fast' is not a bandwidth; give Gbit/s as a number >= 0"),
        ([result("a", "b", -1)], "results[0].gbps=-1 is not a bandwidth; give Gbit/s as a number >= 0"),
        ([result("a", "b", True)], "results[0].gbps=True is not a bandwidth; give Gbit/s as a number >= 0"),
        ([result("a", "b", float("nan"))], "results[0].gbps=nan is not a bandwidth; give Gbit/s as a number >= 0"),
        ([result("a", "b", None)], "results[0] has no gbps; a pair that ran needs its bandwidth in Gbit/s"),
        ([result("a", "b", 9.0, ok="yes")], "results[0].ok='yes' is not a boolean; use true when the test ran"),
        ([result("a", "b", 9.0, jumbo_ok="no")], "results[0].jumbo_ok='no' is not a boolean or null"),
        ([result("a", "b", 9.0, error=1)], "results[0].error=1 is not a string or null"),
    ],
)
def test_bad_results_are_named(results, message):
    with pytest.raises(ValueError) as exc:
        evaluate(results)
    assert str(exc.value) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"line_rate_gbps": 0}, "line_rate_gbps=0 is not a line rate; give the link speed in Gbit/s, like 100"),
        (
            {"line_rate_gbps": "100G"},
            "line_rate_gbps='100G' is not a line rate; give the link speed in Gbit/s, like 100",
        ),
        (
            {"min_best_fraction": 93},
            "min_best_fraction=93 is not a fraction; use a number above 0 and at most 1, like 0.93",
        ),
        (
            {"min_line_fraction": 0},
            "min_line_fraction=0 is not a fraction; use a number above 0 and at most 1, like 0.93",
        ),
    ],
)
def test_bad_thresholds_are_named(kwargs, message):
    with pytest.raises(ValueError) as exc:
        evaluate([result("a", "b", 9.0)], **kwargs)
    assert str(exc.value) == message


# The reports


def test_csv():
    results = [
        result("gpu02", "gpu01", 94.25),
        result("gpu01", "gpu03", None, ok=False, error='iperf3: error - "busy", try later'),
        result("gpu02", "gpu03", 93.5, jumbo_ok=None),
    ]
    assert render_csv(evaluate(results, line_rate_gbps=100)) == (
        "a,b,gbps,status,jumbo_ok,error,reasons\n"
        "gpu02,gpu01,94.25,pass,true,,\n"
        'gpu01,gpu03,,fail,true,"iperf3: error - ""busy"", try later",'
        '"test failed: iperf3: error - ""busy"", try later"\n'
        "gpu02,gpu03,93.5,pass,,,\n"
    )


def test_csv_joins_reasons():
    results = [result("a", "b", 100.0), result("a", "c", 10.0, jumbo_ok=False)]
    lines = render_csv(evaluate(results)).splitlines()
    assert lines[2] == (
        "a,c,10.0,fail,false,,jumbo frames do not pass between the hosts; "
        "10.0 Gbit/s is below 93% of the best pair's 100.0 Gbit/s (93.0 Gbit/s)"
    )


def test_json_report():
    results = [result("b", "a", 94.0), result("a", "c", 30.0), result("b", "c", None, ok=False, error="refused")]
    evaluation = evaluate(results, line_rate_gbps=100)
    report = render_json(evaluation, "Rack A", "2026-11-30T16:20:00Z")
    assert report["title"] == "Rack A"
    assert report["generated_at"] == "2026-11-30T16:20:00Z"
    assert report["passed"] is False
    assert report["hosts"] == ["a", "b", "c"]
    assert report["matrix_gbps"] == [[None, 94.0, 30.0], [94.0, None, None], [30.0, None, None]]
    assert report["outliers"] == ["c"]
    assert report["failing"] == failing_summary(evaluation)
    assert report["summary"] == evaluation["summary"]
    assert "generated_at" not in render_json(evaluation, "Rack A", "")


class Heatmap(HTMLParser):
    """The cells of the heatmap table: rows of (tag, class, text)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows = []
        self.inside = False
        self.cell = None
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "table" and attrs.get("class") == "heatmap":
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = [tag, attrs.get("class") or "", ""]

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell:
            self.rows[-1].append(tuple(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[2] += data


def heatmap(page):
    parser = Heatmap()
    parser.feed(page)
    return parser.rows


HOSTS = ["gpu01", "<script>", "a&b", "gpu04", "gpu05"]


@pytest.fixture
def page_and_evaluation():
    results = all_pairs(HOSTS, slow=["gpu04"])
    results[0]["jumbo_ok"] = False
    evaluation = evaluate(results, line_rate_gbps=100)
    return render_html(evaluation, "Rack <A> & B", "2026-11-30 16:20 UTC"), evaluation


def test_html_heatmap_is_n_by_n_with_marks_in_exactly_the_failing_cells(page_and_evaluation):
    page, evaluation = page_and_evaluation
    rows = heatmap(page)
    hosts = evaluation["hosts"]
    assert hosts == ["<script>", "a&b", "gpu01", "gpu04", "gpu05"]
    assert [cell[2] for cell in rows[0][1:]] == ["<script>", "a&b", "gpu01", "\u26a0\ufe0e gpu04", "gpu05"]
    assert len(rows) == len(hosts) + 1
    failing = {frozenset((pair["a"], pair["b"])) for pair in evaluation["failing"]}
    assert len(failing) == 5
    for row, host in zip(rows[1:], hosts):
        assert row[0][0] == "th"
        assert row[0][2].endswith(host)
        cells = row[1:]
        assert len(cells) == len(hosts)
        for other, (tag, classes, text) in zip(hosts, cells):
            assert tag == "td"
            if other == host:
                assert (classes, text) == ("diag", "")
            elif frozenset((host, other)) in failing:
                assert classes == "cell fail"
                assert text.startswith("\u2715 ")
            else:
                assert classes == "cell"
                assert "\u2715" not in text
                assert float(text) == 94.0
    marked = sum(1 for row in rows[1:] for cell in row[1:] if "fail" in cell[1].split())
    assert marked == 2 * len(failing)


def test_html_escapes_every_host_and_the_title(page_and_evaluation):
    page, _evaluation = page_and_evaluation
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert "a&amp;b" in page
    assert "a&b" not in page
    assert "<title>Rack &lt;A&gt; &amp; B</title>" in page
    assert "2026-11-30 16:20 UTC" in page


def test_html_names_outliers_and_lists_failing_pairs(page_and_evaluation):
    page, _evaluation = page_and_evaluation
    assert '<section class="outliers bad">' in page
    assert "<ul><li>gpu04</li></ul>" in page
    assert '<div class="verdict fail">FAIL</div>' in page
    assert "<h2>Failing pairs (5)</h2>" in page
    assert "<li>jumbo frames do not pass between the hosts</li>" in page
    assert "<li>28.2 Gbit/s is below 85% of the 100 Gbit/s line rate (85.0 Gbit/s)</li>" in page
    assert "Thresholds: 93% of the best pair (87.42 Gbit/s), 85% of the 100 Gbit/s line rate (85.0 Gbit/s)" in page
    assert page.count('<td class="host outlier" title="outlier host">\u26a0\ufe0e gpu04</td>') == 4


def test_html_is_self_contained(page_and_evaluation):
    page, _evaluation = page_and_evaluation
    assert page.startswith("<!DOCTYPE html>\n")
    assert page.endswith("</html>\n")
    for external in ("http://", "https://", "<script", "src=", "<link", "@import", "url("):
        assert external not in page


def test_html_when_everything_passes():
    page = render_html(evaluate(all_pairs(names(3))))
    assert '<div class="verdict pass">PASS</div>' in page
    assert "None: no host stands out." in page
    assert "None: every pair met the thresholds." in page
    assert "<title>Fabric bandwidth acceptance</title>" in page
    assert "generated" not in page
    assert "no line rate given" in page
    assert "\u2715 " not in page.split('<table class="heatmap">')[1].split("</table>")[0]


def test_html_ring_leaves_untested_cells_grey():
    hosts = names(6)
    results = [result(a, b, 90.0) for pairs in ring_schedule(hosts) for a, b in pairs]
    rows = heatmap(render_html(evaluate(results, line_rate_gbps=100)))
    classes = [cell[1] for row in rows[1:] for cell in row[1:]]
    assert classes.count("untested") == 36 - 6 - 2 * 6
    assert classes.count("cell") == 12


def test_colour_scale():
    assert colour(0) == "#d7191c"
    assert colour(0.5) == "#ffffbf"
    assert colour(1) == "#1a9641"
    assert colour(1.7) == "#1a9641"
    assert colour(-1) == "#d7191c"
    assert colour(0.125) == "#ea643e"


# --- the role's settings (the fabric_validate preflight) -----------------------------------------------


def fv_settings(**overrides):
    """The fabric_validate role's defaults, on a host with a fabric address."""
    base = {
        "fabric_validate_address": "10.10.0.11",
        "fabric_validate_port": 5201,
        "fabric_validate_report_name": "fabric-report",
        "fabric_validate_report_dir": "/home/ops/fabric-report",
        "fabric_validate_mode": "circle",
        "fabric_validate_backend": "auto",
        "fabric_validate_direction": "bidir",
        "fabric_validate_duration": 10,
        "fabric_validate_streams": 4,
        "fabric_validate_min_line_fraction": 0.85,
        "fabric_validate_min_best_fraction": 0.93,
        "fabric_validate_mtu": 9000,
        "fabric_validate_line_rate_gbps": None,
    }
    base.update({"fabric_validate_" + name: value for name, value in overrides.items()})
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"address": "fd00:10::11", "port": "5301", "mode": "ring", "backend": "python", "direction": "reverse"},
        # Inventory numbers as text, as a template gives them.
        {"duration": "30", "streams": "128", "mtu": "576", "min_line_fraction": "0", "min_best_fraction": "1"},
        {"min_line_fraction": 0, "min_best_fraction": ".5", "line_rate_gbps": 100},
        {"line_rate_gbps": "25.5"},
    ],
)
def test_good_fabric_validate_settings_have_no_problems(overrides):
    assert fabric.settings_problems(fv_settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"address": "fabric-host-1"}, "fabric_validate_address='fabric-host-1' is not an IP address"),
        (
            {"address": ""},
            "fabric_validate_address is empty: set gpufleet_fabric_address, the fabric address of the host, in "
            "the inventory",
        ),
        (
            {"address": None},
            "fabric_validate_address is empty: set gpufleet_fabric_address, the fabric address of the host, in "
            "the inventory",
        ),
        ({"port": 0}, "fabric_validate_port=0 is not a TCP port: use 1..65535"),
        ({"port": 70000}, "fabric_validate_port=70000 is not a TCP port: use 1..65535"),
        (
            {"report_name": "../etc/report"},
            "fabric_validate_report_name='../etc/report' is not a file name: no '/', no control characters, not "
            "empty, '.' or '..'",
        ),
        (
            {"report_dir": "/srv/r\nx"},
            "fabric_validate_report_dir='/srv/r\\nx' contains a control character (a newline starts a new line in "
            "the file)",
        ),
        ({"mode": "mesh"}, "fabric_validate_mode=mesh must be circle, ring or sequential"),
        ({"backend": "netperf"}, "fabric_validate_backend=netperf must be auto, iperf3 or python"),
        ({"direction": "both"}, "fabric_validate_direction=both must be forward, reverse or bidir"),
        ({"duration": "10s"}, "fabric_validate_duration=10s must be whole seconds > 0"),
        ({"duration": 0}, "fabric_validate_duration=0 must be whole seconds > 0"),
        ({"duration": 10.5}, "fabric_validate_duration=10.5 must be whole seconds > 0"),
        ({"streams": 500}, "fabric_validate_streams=500 must be 1..128"),
        ({"streams": True}, "fabric_validate_streams=True must be 1..128"),
        (
            {"min_line_fraction": 1.5},
            "fabric_validate_min_line_fraction=1.5 must be 0..1 (0 turns the line-rate check off)",
        ),
        (
            {"min_line_fraction": -0.1},
            "fabric_validate_min_line_fraction=-0.1 must be 0..1 (0 turns the line-rate check off)",
        ),
        ({"min_best_fraction": 0}, "fabric_validate_min_best_fraction=0 must be above 0 and at most 1"),
        ({"min_best_fraction": "93%"}, "fabric_validate_min_best_fraction=93% must be above 0 and at most 1"),
        ({"mtu": 500}, "fabric_validate_mtu=500 must be a whole number >= 576"),
        ({"mtu": "jumbo"}, "fabric_validate_mtu=jumbo must be a whole number >= 576"),
        (
            {"line_rate_gbps": "100G"},
            "fabric_validate_line_rate_gbps=100G must be null or the link speed in Gbit/s, above 0",
        ),
        ({"line_rate_gbps": 0}, "fabric_validate_line_rate_gbps=0 must be null or the link speed in Gbit/s, above 0"),
    ],
)
def test_a_bad_fabric_validate_setting_is_named_with_its_value_and_the_fix(overrides, message):
    assert fabric.settings_problems(fv_settings(**overrides)) == [message]


def test_every_fabric_validate_problem_comes_back_at_once_in_a_fixed_order():
    problems = fabric.settings_problems(fv_settings(address="", port=0, mode="mesh", streams=0, mtu=1))
    assert [problem.split(" ")[0].split("=")[0] for problem in problems] == [
        "fabric_validate_port",
        "fabric_validate_address",
        "fabric_validate_mode",
        "fabric_validate_streams",
        "fabric_validate_mtu",
    ]
