"""Chart geometry: a panel's lines mapped to SVG coordinates (numbers only).

The SVG itself is written by the template (``templates/report.html.j2``, macro
``chart``), so every label and tooltip is escaped by Jinja2 like any other
string. x is the hidden size on a log2 axis. y is GB/s on a log10 axis fitted
to the measured points, so backends that differ by a factor stay apart however
far below the ceiling they all are (CPU rows at 0.1-0.3 GB/s under a 21.5 GB/s
ceiling would lie on the x axis of a 0-to-ceiling axis). Each result set's
measured ceiling is a dashed horizontal line when taking it into the axis
leaves the points at least half the height (:data:`CEILING_SHARE`); otherwise
it is marked off scale, an arrow with its value at the top (or bottom) of the
plot. The right axis shows % of the first set's ceiling on the same log scale.

:func:`ratio_chart` draws one measure of a traffic panel (unique or requested
bytes over the byte model) on a *linear* y axis fitted to the points and 1, with
one reference line at 1 (the byte model itself), no ceiling and no % axis: a
count is not a speed. Linear, because the unique ratios lie within a few percent
of 1, where a log axis wide enough for the requested ratios would flatten them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from normbench.report.shape import Panel

WIDTH, HEIGHT = 580, 280
LEFT, RIGHT, TOP, BOTTOM = 56, 56, 22, 40  # TOP: room for an off-scale ceiling's arrow
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
    ceilings: list[tuple[float, str]]  # (y, label): ceilings inside the y range, drawn as lines
    xticks: list[Tick]
    yticks: list[Tick]
    pct_ticks: list[Tick]
    title: str
    #: ceilings outside the y range: ("above" or "below", label with the value), drawn as arrows
    off_scale: list[tuple[str, str]] = field(default_factory=list)
    #: what the y axis shows, and its scale
    quantity: str = "GB/s"
    scale: str = "log scale"


#: a ceiling outside the measured points is taken into the y axis only while the points keep at
#: least this share of the plot's (log) height; further away it is marked off scale
CEILING_SHARE = 0.5
#: margin around the points (and an included ceiling), as a factor, and the narrowest y range
PAD, MIN_RANGE = 1.15, 2.0
#: tick mantissas, coarsest first: the first set giving at least MIN_TICKS ticks in the range is used
MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 8))
MIN_TICKS = 4


def _nice_step(span: float) -> float:
    raw = span / 5
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round values in [lo, hi] for a log axis: decades, else 1-2-5, else finer, else even steps.

    >>> log_ticks(0.08, 30)
    [0.1, 0.2, 0.5, 1, 2, 5, 10, 20]
    >>> log_ticks(0.083, 0.36)
    [0.1, 0.15, 0.2, 0.3]
    """
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for mantissas in MANTISSAS:
        found = [v for k in decades for m in mantissas if lo <= (v := _round(m * 10.0 ** k)) <= hi]
        if len(found) >= MIN_TICKS:
            return found
    step = _nice_step(hi - lo)
    return [v for i in range(math.ceil(lo / step), math.floor(hi / step) + 1) if (v := _round(i * step)) > 0]


def _round(v: float) -> float:
    out = float(f"{v:.12g}")
    return int(out) if out.is_integer() else out


def y_range(values: list[float], ceilings: list[float]) -> tuple[float, float]:
    """The log y axis's (low, high) GB/s: the points with a margin, widened to take in the ceilings
    when they cost the points no more than :data:`CEILING_SHARE` of the height."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    ceilings = [c for c in ceilings if c > 0 and math.isfinite(c)]
    if not values:
        top = max(ceilings, default=10.0)
        return top / 100, top * PAD
    lo, hi = min(values) / PAD, max(values) * PAD
    if hi / lo < MIN_RANGE:
        middle = math.sqrt(lo * hi)
        lo, hi = middle / math.sqrt(MIN_RANGE), middle * math.sqrt(MIN_RANGE)
    if ceilings:
        wide_lo, wide_hi = min(lo, min(ceilings) / PAD), max(hi, max(ceilings) * PAD)
        if math.log(hi / lo) >= CEILING_SHARE * math.log(wide_hi / wide_lo):
            lo, hi = wide_lo, wide_hi
    return lo, hi


def linear_range(values: list[float]) -> tuple[float, float]:
    """A linear y axis's (low, high) around ``values``, with a margin of 8 % of their span (at least 0.005).

    >>> linear_range([1.0, 1.04])
    (0.995, 1.045)
    >>> linear_range([1.0, 2.5])
    (0.88, 2.62)
    """
    lo, hi = min(values), max(values)
    pad = max(0.08 * (hi - lo), 0.005)
    return _round(lo - pad), _round(hi + pad)


def linear_ticks(lo: float, hi: float) -> list[float]:
    """Round values in [lo, hi], about five.

    >>> linear_ticks(0.995, 1.045)
    [1, 1.01, 1.02, 1.03, 1.04]
    """
    step = _nice_step(hi - lo)
    return [_round(i * step) for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def chart(panel: Panel, *, quantity: str = "GB/s", reference: str | None = None, linear: bool = False) -> Chart:
    """The geometry of one panel's chart: GB/s with the ceilings of ``panel.ceilings`` and a % axis; or,
    given ``reference`` (the label of ``panel.ceilings``'s one value), ``quantity`` with that line and no % axis
    (``linear``: on a linear axis taking in the points and that line)."""
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    hiddens = sorted({h for line in panel.lines for h, *_ in line.points})
    lo, hi = (math.log2(hiddens[0]), math.log2(hiddens[-1])) if hiddens else (8.0, 16.0)
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    values = [g for line in panel.lines for _, g, *_ in line.points if math.isfinite(g)]
    if linear:
        ylo, yhi = linear_range(values + [c for _, c in panel.ceilings] or [1.0])
    else:
        ylo, yhi = y_range(values, [c for _, c in panel.ceilings])

    def px(h: float) -> float:
        return round(x0 + (math.log2(h) - lo) / (hi - lo) * (x1 - x0), 1)

    def py(g: float) -> float:
        if linear:
            return round(y1 - (g - ylo) / (yhi - ylo) * (y1 - y0), 1)
        return round(y1 - math.log(g / ylo) / math.log(yhi / ylo) * (y1 - y0), 1)

    backends = list(dict.fromkeys(line.backend for line in panel.lines))
    sets = list(dict.fromkeys(line.result_set for line in panel.lines))
    multi = len({s for s, _ in panel.ceilings} | set(sets)) > 1
    series = []
    for line in panel.lines:
        colour = PALETTE[backends.index(line.backend) % len(PALETTE)]
        dash = DASHES[sets.index(line.result_set) % len(DASHES)]
        label = f"{line.backend} [{line.result_set}]" if multi else line.backend
        pts = [(px(h), py(g), tip) for h, g, _, tip in line.points if (linear or g > 0) and math.isfinite(g)]
        series.append(Series(label, colour, dash, " ".join(f"{x},{y}" for x, y, _ in pts), pts))
    ceilings, off_scale = [], []
    for label, c in panel.ceilings:
        text = reference if reference is not None else f"ceiling {c:.3g} GB/s" + (f" [{label}]" if multi else "")
        if ylo <= c <= yhi:
            ceilings.append((py(c), text))
        else:
            where = "above" if c > yhi else "below"
            factor = c / yhi if c > yhi else ylo / c
            off_scale.append((where, f"{text}: off scale, {factor:.3g}x {where} the axis"))
    yticks = [Tick(py(v), f"{v:g}") for v in (linear_ticks if linear else log_ticks)(ylo, yhi)]
    pct_ticks = []
    if panel.ceilings and reference is None:
        ceiling = panel.ceilings[0][1]
        pct_ticks = [Tick(py(p * ceiling / 100), f"{p:g}%") for p in log_ticks(100 * ylo / ceiling, 100 * yhi / ceiling)]
    return Chart(WIDTH, HEIGHT, (x0, y0, x1, y1), series, ceilings, [Tick(px(h), str(h)) for h in hiddens],
                 yticks, pct_ticks, f"{panel.direction} {panel.dtype}", off_scale, quantity,
                 "linear scale" if linear else "log scale")


def ratio_chart(panel: Panel, measure: str) -> Chart:
    """One measure (``unique`` or ``requested``) of a traffic panel (:func:`normbench.report.shape.traffic_panels`,
    whose line names end with the measure): bytes / byte model against hidden size, the byte model (1) as the
    reference line, on a linear axis."""
    lines = [line for line in panel.lines if line.backend.rsplit(" ", 1)[-1] == measure]
    return chart(replace(panel, lines=lines), quantity=f"{measure} bytes / byte model", reference="1 = the byte model",
                 linear=True)
