"""The report's error pictures: per backend and dtype, y's error in ulps and its coherence statistics.

Every forward conformance test of a float16, bfloat16 or float32 output records (conformance schema
version 2, ``normbench.check.properties.error_structure``) a histogram of its error signed toward
zero, ``(y - y_ref)*sign(y_ref)/ulp(y_ref)``, the same histogram for the reference rounded once to
nearest (what a correct round-to-nearest kernel gives at best), and the worst ratio of each coherence
statistic to its allowance. Here the histograms of a backend and dtype are summed and drawn, the
kernel's as bars, round-to-nearest's as an outline over them, with the means; beside them, each
statistic's worst ratio, the case where it occurred and in how many tests it applied. A correct
kernel's bars follow the outline; truncation moves them all to the left of 0 (mean -0.5 ulp). A run
that recorded none of this (conformance schema version 1, or no measured dtype) gets a one-line note.

Geometry only (numbers and escaped-by-the-template strings); the SVG is the template's ``histogram`` macro.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from normbench.check.outcomes import Histogram
from normbench.core.case_ids import dtype_of
from normbench.core.dtypes import DTYPES
from normbench.core.operations import NAMES, of
from normbench.report.sources import ResultSet
from normbench.report.svg import PALETTE, linear_ticks

#: (statistic, its column, what it measures)
STATISTICS: tuple[tuple[str, str, str], ...] = (
    ("scale", "coherence_scale", "per row, y's error along w*xhat (rstd rounded to the storage dtype); "
                                 "bfloat16 and float16 only, and the scales' slope across rows"),
    ("offset", "coherence_offset", "per row, a common shift of y's error along w (the mean rounded coarsely)"),
    ("bias toward zero", "coherence_toward_zero", "per case, the weighted mean error toward zero (truncation)"),
    ("bias downward", "coherence_downward", "per case, the weighted mean error downward (floor)"),
)

WIDTH, HEIGHT = 470, 230
LEFT, RIGHT, TOP, BOTTOM = 50, 12, 12, 72
#: x ticks, ulps
TICKS = (-1.5, -1, -0.5, 0, 0.5, 1, 1.5)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    tip: str


@dataclass(frozen=True)
class HistogramChart:
    width: int
    height: int
    plot: tuple[float, float, float, float]  # x0, y0 (top), x1, y1 (bottom)
    colour: str
    bars: list[Bar]              # the kernel's bins, then its under/over slots
    outline: str                 # round-to-nearest's bins as a step path (SVG path data)
    outline_ends: list[Bar]      # round-to-nearest's under/over slots, outlined
    xticks: list[tuple[float, str]]
    yticks: list[tuple[float, str]]
    means: list[tuple[float, str, str]]  # (x, css class, label) of the means, within the plot
    title: str
    label: str                   # the kernel's legend text


def mean_of(h: Histogram) -> float:
    """The mean of the values inside the bins, taking each at its bin's centre (NaN when there are none)."""
    n = sum(h.counts)
    if not n:
        return math.nan
    lo = h.edges()[0]
    return round(sum(c * (lo + (i + 0.5) * h.width) for i, c in enumerate(h.counts)) / n, 6) + 0.0  # no -0.000


def signed(value: float) -> str:
    """``value`` with its sign and 3 decimals, never ``-0.000``."""
    return f"{round(value, 3) + 0.0:+.3f}"


def within(h: Histogram, ulps: float) -> int:
    """Elements in the bins whose centre lies within +-``ulps``."""
    lo = h.edges()[0]
    return sum(c for i, c in enumerate(h.counts) if abs(lo + (i + 0.5) * h.width) <= ulps + 1e-12)


def histogram_chart(h: Histogram, near: Histogram, colour: str, title: str, label: str) -> HistogramChart:
    """The bars of ``h`` and the outline of ``near`` (same bins), as shares of their elements, with the
    elements below and above the bins in slots of their own at either end."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    n = len(h.counts)
    slot = (x1 - x0) / (n + 4)  # under, gap, the bins, gap, over
    lo, hi = h.edges()
    total, total_near = max(h.total, 1), max(near.total, 1)
    shares = [c / total for c in (h.under, *h.counts, h.over)]
    shares_near = [c / total_near for c in (near.under, *near.counts, near.over)]
    top = max(shares + shares_near + [1e-9]) * 1.08
    ticks = linear_ticks(0.0, top)

    def px(slot_index: float) -> float:
        return round(x0 + slot_index * slot, 1)

    def py(share: float) -> float:
        return round(y1 - share / top * (y1 - y0), 1)

    slots = [0] + [i + 2 for i in range(n)] + [n + 3]
    names = ([f"below {lo:g} ulp"] + [f"[{lo + i * h.width:g}, {lo + (i + 1) * h.width:g}) ulp" for i in range(n)]
             + [f"at or above {hi:g} ulp"])
    counts = (h.under, *h.counts, h.over)
    counts_near = (near.under, *near.counts, near.over)
    bars = [Bar(px(s) + 0.5, py(share), round(slot - 1, 1), round(y1 - py(share), 1),
                f"{name}: {c} elements ({100 * share:.2f}%); rounded to nearest: {cn} ({100 * sn:.2f}%)")
            for s, share, name, c, cn, sn in zip(slots, shares, names, counts, counts_near, shares_near)]
    path = [f"M{px(2)},{y1}"]
    for i, share in enumerate(shares_near[1:-1]):
        path.append(f"V{py(share)}H{px(i + 3)}")
    path.append(f"V{y1}")
    ends = [Bar(px(s) + 0.5, py(share), round(slot - 1, 1), round(y1 - py(share), 1), "")
            for s, share in ((0, shares_near[0]), (n + 3, shares_near[-1]))]

    def at(ulps: float) -> float:
        return round(x0 + (2 + (ulps - lo) / h.width) * slot, 1)

    xticks = [(at(t), f"{t:g}") for t in TICKS if lo <= t <= hi]
    xticks += [(round(px(0) + slot / 2, 1), "below"), (round(px(n + 3) + slot / 2, 1), "above")]
    yticks = [(py(t), f"{100 * t:g}%") for t in ticks]
    means = []
    for hist, css, who in ((h, "mean", "mean"), (near, "mean-near", "nearest")):
        m = mean_of(hist)
        if math.isfinite(m):
            means.append((at(m), css, f"{who} {signed(m)}"))
    return HistogramChart(WIDTH, HEIGHT, (x0, y0, x1, y1), colour, bars, "".join(path), ends, xticks, yticks,
                          means, title, label)


def _statistic(part, column: str) -> dict[str, Any]:
    values = part[column]
    applied = values.notna()
    if not applied.any():
        return {"kind": "none", "text": "does not apply", "case": "", "applied": 0}
    worst = values[applied].idxmax()
    ratio = float(values[worst])
    return {"kind": "fail" if ratio > 1 else "pass", "text": f"{ratio:.3g}", "ratio": ratio,
            "case": str(part.loc[worst, "case"]), "applied": int(applied.sum())}


def error_pictures(rs: ResultSet) -> dict[str, Any]:
    """Per backend and dtype (``panels``): the summed histograms and their chart, their means, and each
    coherence statistic's worst ratio with its case. ``measured``: whether any forward test recorded any
    of it. ``skipped_bins``: tests whose histogram had other bins than the first of their panel (left out)."""
    df = rs.conformance
    if df.empty or "error_histogram" not in df:
        return {"measured": False, "panels": []}
    forward = df[(df.suite == "test_forward.py") & (df.test == "test_forward")]
    columns = [c for _, c, _ in STATISTICS]
    recorded = forward[(forward.error_histogram != "") | forward[columns].notna().any(axis=1)]
    if recorded.empty:
        return {"measured": False, "panels": []}
    recorded = recorded.assign(dtype=[dtype_of(c) for c in recorded.case], norm=recorded.normalization)
    order = {d: i for i, d in enumerate(DTYPES)}
    norm_order = {n: i for i, n in enumerate(NAMES)}
    backends = sorted(set(df.backend))
    panels = []
    groups = sorted(recorded.groupby(["backend", "norm", "dtype"]),
                    key=lambda kv: (kv[0][0], norm_order.get(kv[0][1], 9), order.get(kv[0][2], 9)))
    for (backend, norm, dtype), part in groups:
        same = np.array([dtype_of(c) == dtype and n == norm for c, n in zip(forward.case, forward.normalization)],
                        bool)
        all_forward = forward[(forward.backend == backend).to_numpy() & same]
        h = near = None
        skipped = 0
        for error_text, near_text in zip(part.error_histogram, part.nearest_histogram):
            if not error_text or not near_text:
                continue
            e, r = Histogram.parse(error_text), Histogram.parse(near_text)
            if h is None:
                h, near = e, r
            elif e.same_bins(h) and r.same_bins(h):
                h, near = h + e, near + r
            else:
                skipped += 1
        colour = PALETTE[backends.index(backend) % len(PALETTE)]
        panel: dict[str, Any] = {
            "backend": backend, "dtype": dtype or "other", "tests": len(part),
            # LayerNorm's panels keep their names; RMSNorm's say so
            "norm": "" if norm == "layer_norm" else of(norm).label, "forward_tests": len(all_forward),
            "skipped_bins": skipped,
            "statistics": [{"name": name, "doc": doc, **_statistic(part, column)} for name, column, doc in STATISTICS],
        }
        if h is not None and near is not None and h.total:
            inside = sum(h.counts)
            panel.update(
                elements=h.total, under=h.under, over=h.over, mean=signed(mean_of(h)), mean_near=signed(mean_of(near)),
                within_half=within(h, 0.5) / h.total, within_half_near=within(near, 0.5) / max(near.total, 1),
                inside=inside, width=h.width, edges=h.edges(),
                chart=histogram_chart(h, near, colour, f"{backend} {dtype}: y's error toward zero, ulps",
                                      f"{backend}, {h.total:,} elements"))
        panels.append(panel)
    return {"measured": True, "panels": panels}
