"""Chart geometry: a panel's lines mapped to SVG coordinates (numbers only).

The SVG itself is written by the template (``templates/report.html.j2``, macro
``chart``), so every label and tooltip is escaped by Jinja2 like any other
string. x is the hidden size on a log2 axis, y is GB/s from 0; each result
set's measured ceiling is a dashed horizontal line, and the right axis shows
% of the first set's ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normbench.report.shape import Panel

WIDTH, HEIGHT = 580, 280
LEFT, RIGHT, TOP, BOTTOM = 56, 56, 16, 40
#: line colours by backend (by first appearance), and dash patterns by result set
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
DASHES = ("", "6 3", "2 3", "8 3 2 3")


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    dash: str
    points: str  # "x,y x,y ..." for <polyline points>
    markers: list[tuple[float, float, str]]  # (x, y, tooltip)


@dataclass(frozen=True)
class Tick:
    pos: float
    text: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot: tuple[float, float, float, float]  # x0, y0 (top), x1, y1 (bottom)
    series: list[Series]
    ceilings: list[tuple[float, str]]  # (y, label)
    xticks: list[Tick]
    yticks: list[Tick]
    pct_ticks: list[Tick]
    title: str


def _nice_step(span: float) -> float:
    raw = span / 5
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def chart(panel: Panel) -> Chart:
    """The geometry of one panel's chart."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    hiddens = sorted({h for line in panel.lines for h, *_ in line.points})
    lo, hi = (math.log2(hiddens[0]), math.log2(hiddens[-1])) if hiddens else (8.0, 16.0)
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    top = max([g for line in panel.lines for _, g, *_ in line.points] + [c for _, c in panel.ceilings] + [1e-9])
    step = _nice_step(top * 1.08)
    ymax = step * math.ceil(top * 1.08 / step)

    def px(h: float) -> float:
        return round(x0 + (math.log2(h) - lo) / (hi - lo) * (x1 - x0), 1)

    def py(g: float) -> float:
        return round(y1 - g / ymax * (y1 - y0), 1)

    backends = list(dict.fromkeys(line.backend for line in panel.lines))
    sets = list(dict.fromkeys(line.result_set for line in panel.lines))
    multi = len({s for s, _ in panel.ceilings} | set(sets)) > 1
    series = []
    for line in panel.lines:
        colour = PALETTE[backends.index(line.backend) % len(PALETTE)]
        dash = DASHES[sets.index(line.result_set) % len(DASHES)]
        label = f"{line.backend} [{line.result_set}]" if multi else line.backend
        pts = [(px(h), py(g), tip) for h, g, _, tip in line.points]
        series.append(Series(label, colour, dash, " ".join(f"{x},{y}" for x, y, _ in pts), pts))
    ceilings = [(py(c), f"ceiling {c:.3g} GB/s" + (f" [{label}]" if multi else "")) for label, c in panel.ceilings]
    yticks = [Tick(py(v), f"{v:g}") for v in (step * i for i in range(int(round(ymax / step)) + 1))]
    pct_ticks = []
    if panel.ceilings:
        ceiling = panel.ceilings[0][1]
        pct_step = _nice_step(100 * ymax / ceiling)
        pct_ticks = [Tick(py(p * ceiling / 100), f"{p:g}%")
                     for p in (pct_step * i for i in range(int(100 * ymax / ceiling / pct_step) + 1))]
    return Chart(WIDTH, HEIGHT, (x0, y0, x1, y1), series, ceilings, [Tick(px(h), str(h)) for h in hiddens],
                 yticks, pct_ticks, f"{panel.direction} {panel.dtype}")
