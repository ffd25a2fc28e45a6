"""``normbench table1``: the paper's Table 1, measured, beside the paper's; and §3.1.

Every cell is measured: each row's normalization (``normbench.paper.normalizations``)
runs on the layer and on every instance of the column's transformation
(``normbench.paper.invariances``), and the cell's verdict ("Invariant", "No" or
"unclear") comes from the measured change against the error-model bound. The
paper's claims (:data:`normbench.paper.invariances.PAPER_TABLE1`) are only compared
with it. The §3.1 section runs the RNN and LSTM of ``normbench.paper.recurrent`` on the
same LayerNorm and prints the hidden-state norm over time.
"""

from __future__ import annotations

from dataclasses import dataclass

from normbench.check.worst import multiple
from normbench.core import cases
from normbench.core.backend import Limits
from normbench.paper import invariances, recurrent
from normbench.paper.invariances import ALL_METHODS, FAR, METHOD_TITLES, METHODS, TRANSFORMATIONS, Deviation
from normbench.paper.layer import INPUT_DIM, make_layer
from normbench.paper.normalizations import LayerNormalizer, Normalizer, RowLayerNorm

WIDTH = 18
NORM_STEPS = (1, 2, 5, 10, 20, 50, 100, 128)


@dataclass(frozen=True)
class Cell:
    """One measured cell: a method, a column and the deviations of its instances."""

    method: str
    key: str
    deviations: list[Deviation]
    #: why the cell was not measured (the backend's documented limits), or None
    skipped: str | None = None

    @property
    def verdict(self) -> str:
        return "skipped" if self.skipped else invariances.verdict(self.deviations)

    @property
    def paper(self) -> str:
        return invariances.expected(self.method, self.key)

    @property
    def agrees(self) -> bool:
        """Whether the measured verdict is the paper's (a skipped cell disagrees with nothing)."""
        return bool(self.skipped) or self.verdict == self.paper

    @property
    def max_change(self) -> float:
        return max((d.max_change for d in self.deviations), default=0.0)

    @property
    def ratio(self) -> float:
        """The evidence for the verdict: the worst instance's change/bound for "Invariant"
        (<= 1), the weakest instance's for "No" (>= FAR), the worst otherwise."""
        ratios = [d.ratio for d in self.deviations]
        if not ratios:
            return 0.0
        return min(ratios) if self.verdict == "No" else max(ratios)


@dataclass(frozen=True)
class Row:
    """A row of the table: the normalizer, and the dtype and eps it runs with."""

    normalizer: Normalizer
    dtype: str
    eps: float

    @property
    def limits(self) -> Limits:
        """The documented limits of the backend behind the row (none for an oracle)."""
        row_norm = getattr(self.normalizer, "row_norm", None)
        backend = getattr(row_norm, "backend", None)
        return backend.limits_for(row_norm.norm) if backend is not None else Limits()

    def scales(self) -> tuple[tuple[float, ...], str | None]:
        """The re-scaling factors this row runs (``invariances.rescaling_factors``), and why none."""
        return invariances.rescaling_factors(self.limits, self.eps)


def measure_table(rows: dict[str, Row], seed: int) -> dict[tuple[str, str], Cell]:
    """Every cell of the given rows (method -> Row), on the Table 1 layer of ``seed``."""
    cells = {}
    for method, row in rows.items():
        layer = make_layer(cases.table1_case(row.dtype, row.eps), seed)
        scales, reason = row.scales()
        outside = row.limits.eps_problem(row.eps)
        for key, t in TRANSFORMATIONS.items():
            why = outside or (reason if t.rescales else None)
            cells[method, key] = Cell(method, key, [], f"{row.normalizer.label} documents limits: {why}") if why else \
                Cell(method, key, invariances.measure(row.normalizer, layer, key, row.dtype, row.eps, scales))
    return cells


def compact(x: float) -> str:
    """3 significant digits, exponents without '+' and leading zeros: 4.97e3, 8.88e-16."""
    return f"{x:.3g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")


def _line(label: str, values: list[str]) -> str:
    return (f"  {label:<{WIDTH}}" + "".join(f"{v:<{WIDTH}}" for v in values)).rstrip()


def _header() -> list[str]:
    titles = [t.title.rsplit(" ", 1) for t in TRANSFORMATIONS.values()]
    return [_line("", [t[0] for t in titles]), _line("", [t[1] for t in titles])]


def render_table(cells: dict[tuple[str, str], Cell], rows: dict[str, Row], seed: int) -> str:
    """The paper's table, the measured one (verdict, max |h' - h|, ratio to the bound), and the legend."""
    methods = [m for m in ALL_METHODS if m in rows]
    out = ["Table 1 of the paper (§5.1): invariance under weights and data transformations", "", *_header(), "Paper"]
    out += [_line(METHOD_TITLES[m], [invariances.expected(m, k) for k in TRANSFORMATIONS]) for m in methods
            if m in METHODS]
    if "rms" in methods:
        out.append("normbench's derivation (* not in the paper: RMSNorm subtracts no mean; normbench.paper.invariances."
                   "RMS_TABLE1)")
        out.append(_line(METHOD_TITLES["rms"], [invariances.expected("rms", k) for k in TRANSFORMATIONS]))
    out.append("Measured (max |h' - h| over the layer, and its ratio to the bound: the worst instance's, the weakest "
               "for No; !! where it disagrees with the paper)")
    for m in methods:
        row = [cells[m, k] for k in TRANSFORMATIONS]
        out.append(_line(METHOD_TITLES[m], [c.verdict + ("  !!" if not c.agrees else "") for c in row]))
        out.append(_line("", ["" if c.skipped else f"{compact(c.max_change)} ({compact(float(f'{c.ratio:.2g}'))}x)"
                              for c in row]))
    layer = f"{cases.TABLE1_SHAPE[0]} training cases x {INPUT_DIM} inputs -> {cases.TABLE1_SHAPE[1]} units"
    out += ["", f"Invariant: every instance within the error-model bound everywhere; No: every instance at least "
                f"{FAR:g}x above it somewhere.",
            f"Layer (normbench.paper.layer): {layer}, seed {seed}, summed inputs exact in float64."]
    out += [f"  {METHOD_TITLES[m]}: {rows[m].normalizer.label}, {rows[m].dtype}, eps {rows[m].eps:g}" for m in methods]
    some = make_layer(cases.table1_case("float64"), seed)
    listed: dict[tuple[str, ...], list[str]] = {}
    for m in methods:
        scales = rows[m].scales()[0] or invariances.SCALES
        lines = tuple(f"  {t.title}: " + "; ".join(i.label for i in t.build(some, rows[m].dtype, scales))
                      for t in TRANSFORMATIONS.values())
        listed.setdefault(lines, []).append(f"{METHOD_TITLES[m]}, {rows[m].dtype}")
    for lines, where in listed.items():
        out += [f"Instances ({'; '.join(where)}):", *lines]
    out += [f"Skipped: {METHOD_TITLES[c.method]} / {TRANSFORMATIONS[c.key].title}: {c.skipped}"
            for c in cells.values() if c.skipped]
    bad = [c for c in cells.values() if not c.agrees]
    out.append("")
    if "rms" in methods:
        out.append("* RMSNorm's row is normbench's measurement against normbench's derivation, not the paper's.")
    derivation = " (and RMSNorm's with its derivation)" if "rms" in methods else ""
    out.append(f"All {len(cells)} cells agree with the paper{derivation}." if not bad else
               f"{len(bad)} of {len(cells)} cells DISAGREE with the paper{derivation.replace('and', 'or')}: " + "; ".join(
                   f"{METHOD_TITLES[c.method]} / {TRANSFORMATIONS[c.key].title}: "
                   f"{'paper' if c.method in METHODS else 'normbench derivation'} {c.paper}, measured {c.verdict} "
                   f"({multiple(c.ratio)} the bound)" for c in bad))
    return "\n".join(out)


def render_recurrent(results: list[recurrent.RecurrentResult], label: str, eps: float) -> tuple[str, bool]:
    """The §3.1 report: hidden-state norms over time, and whether the invariance held."""
    out = [f"§3.1 recurrent networks: mean hidden-state norm ||h_t|| over the sequences "
           f"(layer norm: {label}, eps {eps:g}; W_h and W_x re-scaled together)", ""]
    held = True
    for res in results:
        steps = [t for t in NORM_STEPS if t <= len(next(iter(res.norms.values())))]
        out.append(f"  {recurrent.KINDS[res.kind]:<20}" + "".join(f"{f't={t}':>8}" for t in steps))
        out += [f"  {name:<20}" + "".join(f"{v[t - 1]:>8.3f}" for t in steps) for name, v in res.norms.items()]
        for delta in recurrent.RNN_SCALES:
            ok = res.ratio(delta) <= 1
            held &= ok
            out.append(f"  {delta:g}*W: layer norm's hidden states {'unchanged' if ok else 'CHANGED'} within the "
                       f"propagated bound at steps {res.at[0] + 1}..{res.at[-1] + 1} (worst {res.ratio(delta):.2g}x it); "
                       f"without normalization they change by {res.plain_change[delta].max():.3g} "
                       f"({res.plain_ratio(delta):.2g}x that bound)")
        out.append("")
    return "\n".join(out).rstrip(), held


def run_recurrent(norm: RowLayerNorm, dtype: str, seed: int) -> list[recurrent.RecurrentResult]:
    """The RNN and LSTM of the §3.1 cases, with eps 0, on ``norm``."""
    rnn = cases.Case("recurrent", cases.RNN_CASES[0].shape, cases.RNN_CASES[0].normalized_shape, dtype, eps=0.0)
    lstm = cases.Case("recurrent", cases.LSTM_CASES[0].shape, cases.LSTM_CASES[0].normalized_shape, dtype, eps=0.0)
    return [recurrent.measure(norm, recurrent.make_network(c, seed, kind), 0.0) for c, kind in ((rnn, "rnn"), (lstm, "lstm"))]


def oracle_rows() -> dict[str, Row]:
    """The three rows as float64 oracles with eps = 0 (the paper's definitions), and RMSNorm's."""
    from normbench.paper.normalizations import oracle_normalizers

    return {m: Row(n, "float64", 0.0) for m, n in oracle_normalizers().items()}


#: the rows a backend can measure: method -> the normalization it calls (``normbench.core.operations``)
BACKEND_ROWS: dict[str, str] = {"layer": "layer_norm", "rms": "rms_norm"}


def layer_norm_row(row_norm: RowLayerNorm, eps: float) -> Row:
    """The layer-norm row (or, for a ``row_norm`` of RMSNorm, the RMSNorm row) on ``row_norm``."""
    return Row(LayerNormalizer(row_norm), row_norm.dtype, eps)


# -- saved as JSON, for the report -----------------------------------------------------------

TABLE1_SCHEMA = "normbench.table1"
#: 2: normbench's RMSNorm row (method "rms", ``source`` "normbench"; top-level ``rms_norm``)
TABLE1_VERSION = 2
#: the documented fields of a saved cell (``table1.json``, schema ``normbench.table1``, versions 1 and 2)
CELL_FIELDS: dict[str, str] = {
    "key": "the column (a normbench.paper.invariances.TRANSFORMATIONS key)",
    "measured": "Invariant, No or unclear: the verdict from the measured change against the error-model bound; "
                "skipped where the backend's documented limits leave no way to measure it",
    "paper": "the paper's claim for this cell (Invariant or No); for RMSNorm's row (source normbench), "
             "normbench's derivation",
    "agrees": "whether the measured verdict is the paper's",
    "max_change": "max |h' - h| over the layer and the column's instances",
    "ratio": "the evidence: the worst instance's change/bound (the weakest for No)",
    "skipped": "present only on a skipped cell: why (the backend's documented limits)",
}


def to_document(cells: dict[tuple[str, str], Cell], rows: dict[str, Row], seed: int, command: str,
                recurrent_held: bool | None) -> dict:
    """The measured table as a JSON-ready document (``normbench table1 --save DIR`` writes it as DIR/table1.json).

    Top level: ``schema``, ``schema_version``, ``seed``, ``command``, ``layer_norm`` (what the layer-norm row
    ran on), ``recurrent_held`` (§3.1; null when skipped), ``transformations`` (key, title), ``fields`` (the
    cell fields' meanings) and ``methods``: title, description (normalizer, dtype, eps) and one cell per column.
    """
    methods = [m for m in ALL_METHODS if m in rows]
    describe = lambda m: f"{rows[m].normalizer.label}, {rows[m].dtype}, eps {rows[m].eps:g}"
    return {
        "schema": TABLE1_SCHEMA, "schema_version": TABLE1_VERSION, "seed": seed, "command": command,
        "layer_norm": f"{rows['layer'].normalizer.label}, {rows['layer'].dtype}, eps {rows['layer'].eps:g}"
        if "layer" in rows else "", "rms_norm": describe("rms") if "rms" in rows else "",
        "recurrent_held": recurrent_held,
        "transformations": [{"key": k, "title": t.title} for k, t in TRANSFORMATIONS.items()],
        "fields": CELL_FIELDS,
        "methods": [{"method": m, "title": METHOD_TITLES[m], "source": "paper" if m in METHODS else "normbench",
                     "description": describe(m),
                     "cells": [{"key": k, "measured": cells[m, k].verdict, "paper": cells[m, k].paper,
                                "agrees": cells[m, k].agrees, "max_change": float(cells[m, k].max_change),
                                "ratio": float(cells[m, k].ratio)}
                               | ({"skipped": cells[m, k].skipped} if cells[m, k].skipped else {})
                               for k in TRANSFORMATIONS]}
                    for m in methods],
    }
