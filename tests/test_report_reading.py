
"""The report reads right (issue 18, item 7): the whole conformance matrix on the page, chart
lines of slow backends apart under a far ceiling, known deviations among the rows that are not
a speed, and no winner named from noise."""

from __future__ import annotations

import math
import re

import pytest

from normbench.check import outcomes
from normbench.core import deviations, storage
from normbench.core.case_ids import operation_of
from normbench.core.cases import CASE_LISTS
from normbench.perf.throughput import THROUGHPUT
from normbench.report import render_html, shape, svg
from normbench.report.shape import SUITE_CASES, Line, Panel
from normbench.report.sources import ResultSet

BACKENDS = ("flax-stable", "jax", "numpy", "torch", "triton")


def result_set(throughput: list[dict] = (), conformance: list[dict] = ()) -> ResultSet:
    return ResultSet("r", "test", storage.frame(list(throughput), THROUGHPUT),
                     storage.frame(list(conformance), outcomes.CONFORMANCE))


def section(html: str, start: str, end: str) -> str:
    return html[html.index(start):html.index(end, html.index(start))]


# a. the conformance matrix


def full_conformance() -> list[dict]:
    """One passing test per case family of every suite, for five backends: some two dozen (suite,
    family) pairs, a matrix of as many columns when backends were its rows."""
    families, rows = shape._family_lookup(), []
    for suite, lists in SUITE_CASES.items():
        cases = {families[(suite, c.id)]: c for name in lists for c in CASE_LISTS[name]}
        for case in cases.values():
            for backend in BACKENDS:
                test = suite.removesuffix(".py")
                rows.append(storage.new_row(outcomes.CONFORMANCE, run_id="r", backend=backend, suite=suite,
                                            test=test, case=case.id, outcome="passed",
                                            nodeid=f"suites/{suite}::{test}[{backend}-{case.id}]"))
    return rows


def test_the_whole_conformance_matrix_is_on_the_page():
    rows = full_conformance()
    # one row per suite and case family, RMSNorm's families apart ("affine, RMSNorm")
    pairs = sorted({(r["suite"], shape.with_norm(shape._family_lookup()[(r["suite"], r["case"])],
                                                 operation_of(r["case"]).name)) for r in rows})
    assert len(pairs) >= 20
    html = render_html([result_set(conformance=rows)])
    conformance = section(html, "<h2>Conformance", "<h2>Data")
    assert not re.search(r"overflow|scroll", conformance, re.IGNORECASE)  # nothing clipped in a scrolling box
    matrix = section(conformance, "<table", "</table>")
    header = re.findall(r"<th>(.*?)</th>", matrix.split("</tr>")[0])
    assert header == ["suite", "case family", *BACKENDS]  # columns: a few backends, not 24 families
    body = matrix.split("</tr>")[1:-1]
    assert len(body) == 1 + len(pairs)  # all suites, then one row per suite and family
    for tr in body:
        assert len(re.findall(r"<td class=\"pass\"", tr)) == len(BACKENDS), tr
    families = [re.findall(r"<td>(.*?)</td>", tr)[0] for tr in body[1:]]
    order = {suite: i for i, suite in enumerate(SUITE_CASES)}
    assert families == [family for _, family in sorted(pairs, key=lambda p: (order[p[0]], p))]
    for suite in ("forward", "backward", "invariances"):
        assert f'">{suite}</th>' in matrix


# b. the charts


def panel(levels: dict[str, float], ceiling: float = 21.5) -> Panel:
    lines = [Line(b, "r", [(h, g * (1 + 0.02 * i), 100 * g / ceiling, f"{b} {h}")
                           for i, h in enumerate((256, 2048, 16384))]) for b, g in levels.items()]
    return Panel("forward", "float32", "forward-inference", lines, [("r", ceiling)], {"shapes": [], "rows": []})


def value_at(chart: svg.Chart, y: float) -> float:
    """GB/s at height y, read off the left axis's ticks (log scale: the chart says so)."""
    (ya, a), (yb, b) = [(t.pos, float(t.text)) for t in chart.yticks[:1] + chart.yticks[-1:]]
    return math.exp(math.log(a) + (y - ya) / (yb - ya) * (math.log(b) - math.log(a)))


def test_cpu_lines_far_below_the_ceiling_are_apart_and_the_ceiling_is_shown():
    chart = svg.chart(panel({"numpy": 0.1, "jax": 0.2, "torch": 0.3}))
    x0, y0, x1, y1 = chart.plot
    heights = sorted(sum(y for _, y, _ in s.markers) / len(s.markers) for s in chart.series)
    assert all(y0 <= y <= y1 for s in chart.series for _, y, _ in s.markers)
    gaps = [b - a for a, b in zip(heights, heights[1:])]
    assert min(gaps) >= 0.1 * (y1 - y0), gaps
    shown = [label for _, label in chart.ceilings] + [label for _, label in chart.off_scale]
    assert any("ceiling 21.5 GB/s" in label for label in shown)
    html = render_html([result_set(throughput=[storage.new_row(THROUGHPUT,
        run_id="r", device="cpu", backend=b, direction="forward", dtype="float32", rows=m, hidden=h,
        shape=f"{m}x{h}", gbps=g, ceiling_gbps=21.5, pct_of_ceiling=100 * g / 21.5, median_s=1.0, q1_s=0.9,
        q3_s=1.1, verdict="ok") for b, g in (("numpy", 0.1), ("torch", 0.3)) for m, h in ((4096, 1024), (256, 16384))])])
    assert "ceiling 21.5 GB/s" in section(html, "<svg", "</svg>") and "GB/s (log scale)" in html


def test_the_percent_axis_is_percent_of_the_ceiling():
    for levels, ceiling in (({"numpy": 0.1, "torch": 0.3}, 21.5), ({"a": 900.0, "b": 2500.0}, 3000.0)):
        chart = svg.chart(panel(levels, ceiling))
        assert chart.pct_ticks
        for tick in chart.pct_ticks:
            assert value_at(chart, tick.pos) == pytest.approx(float(tick.text.rstrip("%")) * ceiling / 100, rel=0.01)


def test_a_ceiling_the_lines_come_near_is_drawn_as_a_line():
    chart = svg.chart(panel({"a": 900.0, "b": 2500.0}, 3000.0))
    x0, y0, x1, y1 = chart.plot
    (y, label), = chart.ceilings
    assert y0 <= y <= y1 and label == "ceiling 3e+03 GB/s" and chart.off_scale == []


# c. known deviations among the rows that are not a speed


def test_a_not_a_speed_row_that_is_a_known_deviation_says_so(monkeypatch):
    entries = deviations.parse(r"torch | cpu | test_throughput[torch-bfloat16-*] | \): (dweight|dbias)\[ | "
                               "dbias accumulated in bfloat16", "k.txt")
    monkeypatch.setattr(shape, "_deviation_entries", lambda: entries, raising=False)
    case = "bfloat16-rows16384-hidden256-normal"

    def row(backend, what):
        return storage.new_row(THROUGHPUT, run_id="r", device="cpu", backend=backend, direction="backward", dtype="bfloat16",
                               rows=16384, hidden=256, shape="16384x256", case_id=case, verdict="wrong-before",
                               message=f"{backend} {case} (seed 0): {what}[3] = 1.5, float64 reference 1.6")

    rows = [row("torch", "dbias"), row("torch", "dx"), row("numpy", "dbias")]
    html = render_html([result_set(throughput=rows)])
    table = section(html, "<h3>Not a speed", "</table>")
    assert table.count("known deviation: dbias accumulated in bfloat16") == 1
    assert table.count('<td class="xfail">wrong-before</td>') == 1 and table.count('<td class="bad">') == 2
    problems = shape.throughput_problems(result_set(throughput=rows))
    assert [r["known"] for r in problems["rows"]] == ["known deviation: dbias accumulated in bfloat16", "", ""]


def test_the_shipped_deviations_are_the_ones_matched():
    assert [e.source for e in shape._deviation_entries()] == [e.source for e in deviations.load()]


# d. no winner named from noise


def timed(backend: str, median: float, q1: float, q3: float, hiddens=(256, 2048, 16384)) -> list[dict]:
    """Rows moving 1 GB per call in ``median`` seconds, with these quartiles, on three shapes."""
    return [storage.new_row(THROUGHPUT, run_id="r", device="cpu", backend=backend, direction="forward", dtype="float32",
                            rows=(1 << 22) // h, hidden=h, shape=f"{(1 << 22) // h}x{h}", bytes=10**9,
                            median_s=median, q1_s=q1, q3_s=q3, rel_spread=(q3 - q1) / median,
                            wide_spread=(q3 - q1) / median > 0.1, gbps=1 / median, ceiling_gbps=20.0,
                            pct_of_ceiling=5 / median, verdict="ok") for h in hiddens]


def test_overlapping_spreads_name_no_winner():
    rs = result_set(throughput=timed("torch", 1.0, 0.8, 1.3) + timed("triton", 1.05, 0.85, 1.4))
    html = section(render_html([rs]), "<h2>At a glance", "<h2>Environment")
    assert "no clear winner: torch, triton" in html and "<b>torch</b>" not in html
    (glance,) = shape.at_a_glance(rs)
    assert glance["clear_winner"] is False and glance["tied"] == ["torch", "triton"]
    assert (glance["apart"], glance["shared"]) == (0, 3)


def test_separated_spreads_name_the_winner():
    rs = result_set(throughput=timed("torch", 1.0, 0.8, 1.3) + timed("numpy", 4.0, 3.5, 5.0))
    (glance,) = shape.at_a_glance(rs)
    assert glance["clear_winner"] is True and glance["best"] == "torch" and glance["tied"] == []
    html = section(render_html([rs]), "<h2>At a glance", "<h2>Environment")
    assert "<b>torch</b>" in html and "no clear winner:" not in html and "IQRs apart on 3 of 3 shapes" in html


def test_the_winner_must_be_apart_from_every_backend_on_every_shape():
    # clear of numpy, but within triton's noise on one shape of three: the best and triton are named
    rs = result_set(throughput=timed("torch", 1.0, 0.9, 1.1) + timed("numpy", 4.0, 3.5, 5.0)
                    + timed("triton", 1.3, 1.2, 1.4, (256, 2048)) + timed("triton", 1.3, 1.05, 1.4, (16384,)))
    (glance,) = shape.at_a_glance(rs)
    assert glance["tied"] == ["torch", "triton"] and glance["runner_up"] == "triton"
    assert (glance["apart"], glance["shared"]) == (2, 3)
