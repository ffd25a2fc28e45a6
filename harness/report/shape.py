"""From result sets to what the report shows: pandas in, plain lists and dicts out.

Nothing here formats HTML: the template escapes every string it is given.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from normbench.check.outcomes import FAILING, NOT_RUN, OUTCOMES
from normbench.core import operations
from normbench.perf.roofline import BYTE_MODELS, DIRECTIONS, formula
from normbench.report.sources import ResultSet

if TYPE_CHECKING:
    import pandas as pd

MAX_LISTED = 40


@dataclass(frozen=True)
class Line:
    """One chart line: a backend in a result set, points (hidden, GB/s, % of ceiling, tooltip)."""

    backend: str
    result_set: str
    points: list[tuple[int, float, float, str]]


@dataclass(frozen=True)
class Panel:
    """One direction x dtype: its lines, the ceilings per result set, and its table."""

    direction: str
    dtype: str
    byte_model: str
    lines: list[Line]
    ceilings: list[tuple[str, float]]
    table: dict[str, Any]


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.verdict == "ok"]


def _tooltip(r: Any, label: str) -> str:
    spread = ", wide spread" if r.wide_spread else ""
    return (f"{r.backend} [{label}] {r.direction} {r.dtype} {r.shape}: {r.gbps:.3g} GB/s, "
            f"{r.pct_of_ceiling:.1f}% of {r.ceiling_gbps:.3g} GB/s, median {r.median_s * 1e3:.3g} ms, "
            f"n={r.n}, IQR {100 * r.rel_spread:.0f}%{spread}")


def _line(part: pd.DataFrame, backend: str, label: str) -> Line:
    rows = part[part.backend == backend].sort_values(["hidden", "rows"]).drop_duplicates("hidden", keep="last")
    return Line(backend, label, [(int(r.hidden), float(r.gbps), float(r.pct_of_ceiling), _tooltip(r, label))
                                 for r in rows.itertuples()])


def _panel_table(part: pd.DataFrame, entries: list, families: dict[tuple[str, str], str]) -> dict[str, Any]:
    """Shapes as columns, (backend, result set) as rows, cells 'GB/s (pct%)' (a row that is not a speed:
    its verdict, class "xfail" when it is a declared known deviation, else "bad")."""
    shapes = [s for _, s in sorted({(int(h), s) for h, s in zip(part.hidden, part["shape"])})]
    body = []
    for (label, backend), group in part.groupby(["result_set", "backend"], sort=True):
        by_shape = {r.shape: r for r in group.itertuples()}
        cells = []
        for s in shapes:
            r = by_shape.get(s)
            if r is None:
                cells.append(("-", ""))
            elif r.verdict != "ok":
                cells.append((r.verdict, "xfail" if known_deviation(r, entries, families) else "bad"))
            else:
                cells.append((f"{r.gbps:.3g} ({r.pct_of_ceiling:.0f}%)", "wide" if r.wide_spread else ""))
        body.append({"backend": backend, "result_set": label, "cells": cells})
    return {"shapes": shapes, "rows": body}


def with_norm(text: str, normalization: str) -> str:
    """A label as LayerNorm's reports always wrote it, and RMSNorm's marked: ``float32`` and
    ``float32, RMSNorm``: the report's tables and charts are per normalization."""
    return text if normalization in ("", "layer_norm") else f"{text}, {operations.of(normalization).label}"


def throughput_panels(sets: list[ResultSet]) -> list[Panel]:
    """One panel per normalization x direction x dtype present in any set, lines per (backend, result set)."""
    import pandas as pd

    frames = [rs.throughput.assign(result_set=rs.label) for rs in sets if not rs.throughput.empty]
    if not frames:
        return []
    df = pd.concat(frames, ignore_index=True)
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    entries, families = _deviation_entries(), _family_lookup()
    panels = []
    norm_order = {n: i for i, n in enumerate(operations.NAMES)}
    keys = sorted(set(zip(df.normalization, df.direction, df.dtype)),
                  key=lambda k: (norm_order.get(k[0], 9), order.get(k[1], 9), k[1], k[2]))
    for normalization, direction, dtype in keys:
        part = df[(df.normalization == normalization) & (df.direction == direction) & (df.dtype == dtype)]
        ok = _ok(part)
        lines = [_line(ok[ok.result_set == rs.label], b, rs.label) for rs in sets
                 for b in sorted(set(ok[ok.result_set == rs.label].backend))]
        ceilings = [(label, float(g.ceiling_gbps.median())) for label, g in part.groupby("result_set", sort=False)
                    if g.ceiling_gbps.notna().any()]
        panels.append(Panel(direction, with_norm(dtype, normalization), BYTE_MODELS.get(direction, direction), lines,
                            ceilings,
                            _panel_table(part, entries, families)))
    return panels


def speedups(rs: ResultSet, baseline: str) -> dict[str, Any]:
    """Per direction x dtype x shape: the baseline's median time over each backend's (ok rows only)."""
    ok = _ok(rs.throughput)
    backends = sorted(set(ok.backend) - {baseline})
    if ok.empty:
        return {"note": "no throughput case of this set was measured correctly", "backends": [], "rows": []}
    if baseline not in set(ok.backend):
        have = ", ".join(sorted(set(ok.backend))) or "none"
        return {"note": f"the baseline {baseline!r} has no correct throughput rows in this set (backends with rows: "
                        f"{have}); choose one with --baseline", "backends": [], "rows": []}
    rows = []
    keys = ["normalization", "direction", "dtype", "hidden", "shape"]
    for (normalization, direction, dtype, hidden, shape), group in ok.groupby(keys, sort=False):
        base = group[group.backend == baseline]
        if base.empty:
            continue
        t0 = float(base.median_s.iloc[0])
        by_backend = {r.backend: t0 / r.median_s for r in group.itertuples()}
        rows.append({"direction": direction, "dtype": with_norm(dtype, normalization), "shape": shape,
                     "hidden": int(hidden), "cells": [by_backend.get(b) for b in backends],
                     "order": operations.NAMES.index(normalization) if normalization in operations.NAMES else 9})
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    rows.sort(key=lambda r: (r.pop("order"), order.get(r["direction"], 9), r["dtype"], r["hidden"]))
    return {"note": "" if backends else f"only {baseline!r} has correct rows: nothing to compare",
            "backends": backends, "rows": rows}


def throughput_problems(rs: ResultSet) -> dict[str, Any]:
    """Rows that are not a speed (wrong, above ceiling, error) and backends with no correct row at all.

    A row whose failure is a declared known deviation says so: ``known`` is "known deviation: reason"
    (:func:`known_deviation`), else "".
    """
    df = rs.throughput
    bad = df[df.verdict != "ok"]
    only_errors = sorted(set(df.backend) - set(_ok(df).backend))
    entries, families = _deviation_entries(), _family_lookup()
    listed = [{"backend": r.backend, "case": f"{r.direction} {r.dtype} {r.shape}", "verdict": r.verdict,
               "message": r.message, "known": known_deviation(r, entries, families)}
              for r in bad.head(MAX_LISTED).itertuples()]
    return {"rows": listed, "more": max(len(bad) - MAX_LISTED, 0), "only_errors": only_errors}


def _deviation_entries() -> list:
    """The known deviations shipped with the suites (``suites/known_deviations.txt``)."""
    from normbench.core import deviations

    return deviations.load()


def known_deviation(row: Any, entries: list, families: dict[tuple[str, str], str] | None = None) -> str:
    """``known deviation: reason`` when a declared entry explains this not-a-speed throughput row, else "".

    The throughput suite fails such a test with "verdict: message" and the pytest plugin turns it into
    an xfailed known deviation when an entry matches the backend, device, test id
    (``test_throughput[backend-case-direction]``) and that message; the run's rows do not keep the
    outcome, so the same match is made here, with the entries of ``suites/known_deviations.txt``.
    Entries a backend declares in its class or a run gave with ``--normbench-deviations`` are not seen.
    """
    from normbench.core import deviations

    if row.verdict == "ok" or not entries:
        return ""
    family = (families if families is not None else _family_lookup()).get(("", row.case_id), "")
    subject = deviations.Subject(row.backend, row.device, f"test_throughput[{row.backend}-{row.case_id}-{row.direction}]",
                                 row.case_id, family)
    found = deviations.find(entries, subject, f"{row.verdict}: {row.message}", check_failure=False)
    return f"known deviation: {found.reason}" if found else ""


#: the case lists each suite draws from, preferred when a case id appears in several lists
SUITE_CASES: dict[str, tuple[str, ...]] = {
    "test_forward.py": ("FORWARD_CASES",), "test_backward.py": ("BACKWARD_CASES", "GRADCHECK_CASES"),
    "test_invariances.py": ("INVARIANCE_CASES", "GEOMETRY_CASES", "RNN_CASES", "LSTM_CASES"),
}


def _family_lookup() -> dict[tuple[str, str], str]:
    """(suite, case id) -> family from the case lists of :data:`normbench.core.cases.CASE_LISTS` (``""`` suite:
    any list).

    Ids from another normbench version that no list knows fall back to the test's name.
    """
    from normbench.core.cases import CASE_LISTS as lists

    found: dict[tuple[str, str], str] = {}
    for value in lists.values():
        found.update({("", c.id): c.family for c in value})
    for suite, names in SUITE_CASES.items():
        for name in reversed(names):
            found.update({(suite, c.id): c.family for c in lists.get(name, [])})
    return found


def conformance_matrix(rs: ResultSet) -> dict[str, Any]:
    """(suite, family) x backend: counts per outcome, and a cell class (pass, fail, xfail, skip, none).

    Families are the rows and backends the columns: a full run has some two dozen (suite, family)
    pairs and a handful of backends, so the table grows down the page and stays as wide as a few
    backends, on a screen and in print. ``rows`` are ``{"suite", "span", "family", "cells"}`` (``span``: rows of the suite,
    on its first row only, else 0); ``total`` is one cell per backend over every suite.
    """
    df = rs.conformance
    if df.empty:
        return {"backends": [], "total": [], "rows": []}
    families = _family_lookup()
    df = df.assign(family=[with_norm(families.get((s, c)) or families.get(("", c), t), n)
                            for s, c, t, n in zip(df.suite, df.case, df.test, df.normalization)])
    backends = sorted(set(df.backend))
    counts = {key: Counter(g.outcome) for key, g in df.groupby(["suite", "family", "backend"])}
    suite_order = {suite: i for i, suite in enumerate(SUITE_CASES)}  # forward, backward, invariances, others
    keys = sorted(set(zip(df.suite, df.family)), key=lambda k: (suite_order.get(k[0], len(suite_order)), k))
    rows = []
    for i, (suite, family) in enumerate(keys):
        first = i == 0 or keys[i - 1][0] != suite
        rows.append({"suite": suite.removeprefix("test_").removesuffix(".py"), "family": family,
                     "span": sum(1 for k in keys if k[0] == suite) if first else 0,
                     "cells": [_cell(counts.get((suite, family, b), Counter())) for b in backends]})
    total = [_cell(Counter(df[df.backend == b].outcome)) for b in backends]
    return {"backends": backends, "total": total, "rows": rows}


#: the matrix's short labels: 12p 1F 3x ... (title attributes spell them out)
_SHORT = {"passed": "p", "failed": "f", "error": "er", "crashed": "cr", "timeout": "to", "xfailed": "xf",
          "xpassed": "xp", "skipped": "s", "not run": "nr"}


def _cell(c: Counter) -> dict[str, Any]:
    bad = sum(c[o] for o in FAILING)
    kind = ("fail" if bad else "xfail" if c["xfailed"] else "pass" if c["passed"] and not c[NOT_RUN] else
            "skip" if c["skipped"] or c[NOT_RUN] else "none")
    text = " ".join(f"{c[o]}{_SHORT[o]}" for o in OUTCOMES if c[o])
    return {"kind": kind, "text": text or "-", "title": ", ".join(f"{c[o]} {o}" for o in OUTCOMES if c[o]) or "none"}


def conformance_details(rs: ResultSet) -> dict[str, Any]:
    """Failures with their diagnosis, known deviations (xfail) and skips grouped by reason."""
    df = rs.conformance
    failing = df[df.outcome.isin(FAILING)]
    known = df[df.outcome == "xfailed"]
    skips = df[df.outcome.isin(["skipped", NOT_RUN])]
    grouped = skips.groupby(["backend", "message"]).size().reset_index(name="count")
    return {
        "failures": [{"backend": r.backend, "nodeid": r.nodeid, "outcome": r.outcome, "message": r.message}
                     for r in failing.head(MAX_LISTED).itertuples()],
        "failures_more": max(len(failing) - MAX_LISTED, 0),
        "known": known.groupby(["backend", "message"]).size().reset_index(name="count").to_dict("records"),
        "skips": grouped.sort_values("count", ascending=False).head(MAX_LISTED).to_dict("records"),
    }


def environment_items(rs: ResultSet) -> list[tuple[str, str]]:
    """The environment as (name, value) pairs: device, ceiling, versions, seed, command."""
    env = rs.environment
    df = rs.throughput
    devices = sorted(set(df.device_name) - {""}) if not df.empty else []
    seeds = sorted({int(s) for s in df.seed}) if not df.empty else []
    ceilings = [f"{k}: {c.get('gbps', float('nan')):.1f} GB/s ({c.get('method', '')}, "
                f"{c.get('buffer_bytes', 0) / (1 << 20):.0f} MiB buffer, median of {c.get('n', '?')})"
                for k, c in env.get("ceilings", {}).items()]
    if not ceilings and not df.empty:
        ceilings = [f"{d}: {g.ceiling_gbps.median():.1f} GB/s (from the rows)" for d, g in df.groupby("device")]
    gpus = "; ".join(f"{g.get('name', '')} (driver {g.get('driver_version', '?')})" for g in env.get("gpus", []))
    libraries = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items())
    backends = sorted({f"{b} {v}".strip() for b, v in zip(df.backend, df.backend_version)}) if not df.empty else []
    items = [("run", env.get("run_id", "")), ("host", env.get("host", "")), ("started", env.get("started", "")),
             ("command", env.get("command", "")), ("devices measured", ", ".join(devices)),
             ("CPU", env.get("cpu_model", "")), ("GPUs", gpus), ("ceiling (measured copy bandwidth)", "; ".join(ceilings)),
             ("backends", ", ".join(backends)),
             ("not timed", "; ".join(f"{k}: {v}" for k, v in (env.get("not_timed") or {}).items())),
             ("runtime notes", "; ".join(f"{k}: {v}" for k, v in (env.get("runtime_notes") or {}).items())),
             ("backends skipped", "; ".join(f"{k}: {v}" for k, v in (env.get("skipped_backends") or {}).items())),
             ("seed", ", ".join(map(str, seeds))),
             ("normbench", f"{env.get('normbench', '')} {env.get('git_commit', '')}".strip()),
             ("python", env.get("python", "")), ("platform", env.get("platform", "")), ("libraries", libraries),
             ("threads", ", ".join(f"{k}={v}" for k, v in env.get("threads", {}).items()))]
    return [(k, str(v)) for k, v in items if v]


def byte_models(sets: list[ResultSet]) -> list[tuple[str, str, str]]:
    """(direction, byte-model variant, formula) for the directions measured or counted."""
    measured = ({d for rs in sets for d in set(rs.throughput.direction)}
                | {d for rs in sets if rs.traffic is not None for d in set(rs.traffic.direction)}) or set(DIRECTIONS)
    shown = {n for rs in sets if not rs.throughput.empty for n in set(rs.throughput.normalization)}
    ops = [op for op in operations.OPERATIONS if op.name in shown or op is operations.LAYER_NORM]

    def formulas(variant: str) -> str:
        return "; ".join(("" if op is operations.LAYER_NORM else f"{op.label}: ") + formula(op, variant) for op in ops)

    return [(d, BYTE_MODELS[d], formulas(BYTE_MODELS[d])) for d in DIRECTIONS if d in measured]


def _apart(part: pd.DataFrame, fast: str, slow: str) -> tuple[int, int]:
    """(shapes where ``fast``'s interquartile range of times lies wholly below ``slow``'s, shapes both
    measured): apart means ``fast``'s q3 time is below ``slow``'s q1 time, the noise cannot swap them."""
    a = part[part.backend == fast].drop_duplicates("shape", keep="last").set_index("shape")
    b = part[part.backend == slow].drop_duplicates("shape", keep="last").set_index("shape")
    shared = a.index.intersection(b.index)
    return int((a.q3_s[shared] < b.q1_s[shared]).sum()), len(shared)


def _clearly_faster(part: pd.DataFrame, fast: str, slow: str) -> bool:
    """Apart on every shape both measured (and they share one)."""
    apart, shared = _apart(part, fast, slow)
    return shared > 0 and apart == shared


def _trust(conf: pd.DataFrame, backend: str) -> tuple[str, bool]:
    mine = conf[conf.backend == backend]
    bad = int(mine.outcome.isin(FAILING).sum())
    text = ("not checked in this set" if mine.empty else f"{bad} conformance failures" if bad else
            f"conformance passed ({int((mine.outcome == 'passed').sum())} tests, "
            f"{int((mine.outcome == 'xfailed').sum())} known deviations)")
    return text, not mine.empty and not bad


def at_a_glance(rs: ResultSet) -> list[dict[str, Any]]:
    """Per direction x dtype: the fastest backend, when it is faster beyond the noise, and whether its
    conformance passed.

    Backends are ranked by their median GB/s over shapes. The best is named (``clear_winner``) only when, on
    every shape it shares with each other backend, its interquartile range of times lies wholly below
    the other's (:func:`_apart`); otherwise ``clear_winner`` is False and ``tied`` names the best and the
    backends it is not apart from: no clear winner. Medians with wide spreads (IQR above 10 %) make
    overlapping ranges, so a run's noise cannot name a winner that the next run would swap.
    """
    ok = _ok(rs.throughput)
    conf = rs.conformance
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    out = []
    norm_order = {n: i for i, n in enumerate(operations.NAMES)}
    groups = sorted(ok.groupby(["normalization", "direction", "dtype"]),
                    key=lambda k: (norm_order.get(k[0][0], 9), order.get(k[0][1], 9), k[0]))
    for (normalization, direction, dtype), part in groups:
        medians = part.groupby("backend").gbps.median().sort_values(ascending=False)
        best = str(medians.index[0])
        others = [str(b) for b in medians.index[1:]]
        tied = [b for b in others if not _clearly_faster(part, best, b)]
        named = [best, *tied]
        trusts = [_trust(conf, b) for b in named]
        trust = trusts[0][0] if len(named) == 1 else "; ".join(f"{b}: {t}" for b, (t, _) in zip(named, trusts))
        apart, shared = _apart(part, best, others[0]) if others else (0, 0)
        pct = part[part.backend == best].pct_of_ceiling.median()
        out.append({"direction": direction, "dtype": with_norm(dtype, normalization), "best": best,
                    "gbps": float(medians.iloc[0]),
                    "pct": float(pct), "runner_up": others[0] if others else "",
                    "ratio": float(medians.iloc[0] / medians.iloc[1]) if others else None,
                    "clear_winner": not tied, "tied": named if tied else [], "apart": apart, "shared": shared,
                    "trust": trust, "trusted": all(ok_ for _, ok_ in trusts)})
    return out


# -- traffic counts and static kernel estimates (normbench traffic, normbench kernel-stats) --------------

#: the traffic chart's lines: (measure, column)
TRAFFIC_MEASURES = (("unique", "ratio"), ("requested", "requested_ratio"))


def _traffic_tooltip(r: Any, label: str, measure: str) -> str:
    return (f"{r.backend} [{label}] {r.direction} {r.dtype} {r.rows}x{r.hidden}, {measure}: unique "
            f"{r.ratio:.4f}x the byte model ({r.unique_bytes / 1e6:.1f} of {r.model_bytes / 1e6:.1f} MB), requested "
            f"{r.requested_ratio:.3f}x; {r.launches} launch{'es' if r.launches != 1 else ''} ({r.kernels}) with the "
            f"launch configuration of {r.gpu}, {r.sm_count} SMs; {r.programs_run} of {r.programs_total} programs run")


def traffic_panels(sets: list[ResultSet]) -> list[Panel]:
    """One panel per direction x dtype of the sets' traffic rows: unique and requested bytes / byte model
    against hidden size, lines per (backend, measure, result set), the byte model (1) as the reference.

    Each panel's table has the shapes as columns and a row per (result set, backend, measure), cells the
    ratio (4 decimals for unique, 3 for requested)."""
    import pandas as pd

    frames = [rs.traffic.assign(result_set=rs.label) for rs in sets if rs.traffic is not None and not rs.traffic.empty]
    if not frames:
        return []
    df = pd.concat(frames, ignore_index=True)
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    labels = [rs.label for rs in sets if rs.label in set(df.result_set)]
    panels = []
    for direction, dtype in sorted(set(zip(df.direction, df.dtype)), key=lambda k: (order.get(k[0], 9), k)):
        part = df[(df.direction == direction) & (df.dtype == dtype)]
        several = part.backend.nunique() > 1
        lines, body = [], []
        shapes = [s for _, s in sorted({(int(r.hidden), f"{r.rows}x{r.hidden}") for r in part.itertuples()})]
        for label in labels:
            mine = part[part.result_set == label]
            for backend in sorted(set(mine.backend)):
                rows = mine[mine.backend == backend].sort_values(["hidden", "rows"])
                by_shape = {f"{r.rows}x{r.hidden}": r for r in rows.itertuples()}
                last = rows.drop_duplicates("hidden", keep="last")
                for measure, column in TRAFFIC_MEASURES:
                    name = f"{backend} {measure}" if several else measure
                    lines.append(Line(name, label, [(int(r.hidden), float(getattr(r, column)), 0.0,
                                                     _traffic_tooltip(r, label, measure)) for r in last.itertuples()]))
                    digits = 4 if measure == "unique" else 3
                    body.append({"backend": backend, "result_set": label, "measure": measure,
                                 "cells": [(f"{getattr(by_shape[s], column):.{digits}f}", "") if s in by_shape else
                                           ("-", "") for s in shapes]})
        panels.append(Panel(direction, dtype, BYTE_MODELS.get(direction, direction), lines, [(labels[0], 1.0)],
                            {"shapes": shapes, "rows": body}))
    return panels


def traffic_summary(rs: ResultSet) -> dict[str, Any]:
    """What a set's traffic rows were counted with (GPUs, programs run) and, per direction, the range of
    unique and requested ratios and the worst case."""
    df = rs.traffic
    if df is None or df.empty:
        return {"gpus": [], "directions": [], "programs_run": 0, "programs_total": 0, "rows": 0}
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    directions = []
    for direction, part in sorted(df.groupby("direction"), key=lambda k: order.get(k[0], 9)):
        worst = part.loc[part.ratio.idxmax()]
        directions.append({
            "direction": direction, "byte_model": BYTE_MODELS.get(direction, direction), "cases": len(part),
            "unique": (float(part.ratio.min()), float(part.ratio.max())),
            "requested": (float(part.requested_ratio.min()), float(part.requested_ratio.max())),
            "worst": f"{worst['dtype']} {worst['rows']}x{worst['hidden']} ({worst['kernels']})"})
    return {"gpus": sorted({f"{g} ({n} SMs)" for g, n in zip(df.gpu, df.sm_count)}), "directions": directions,
            "programs_run": int(df.programs_run.sum()), "programs_total": int(df.programs_total.sum()),
            "rows": len(df), "backends": sorted(set(df.backend))}


def kernel_table(rs: ResultSet) -> dict[str, Any]:
    """A set's kernel statistics: one row per launch (dtype, shape, kernel), one group of cells per compile
    target (sm_90 first), and per target a summary: spills, resident warps, access widths, registers."""
    df = rs.kernel_stats
    if df is None or df.empty:
        return {"archs": [], "rows": [], "summary": []}
    archs = sorted(set(df.arch), key=lambda a: (-int(a[3:]) if a[3:].isdigit() else 0, a))
    by_arch = {a: {(r.dtype, r.rows, r.hidden, r.kernel): r for r in df[df.arch == a].itertuples()} for a in archs}
    keys = list(dict.fromkeys((r.dtype, r.rows, r.hidden, r.kernel) for r in df.itertuples()))
    rows = []
    for key in keys:
        cells = []
        for a in archs:
            r = by_arch[a].get(key)
            if r is None:
                cells.append(None)
                continue
            cells.append({"registers": int(r.registers), "spills": int(r.spill_bytes), "shared": int(r.shared_bytes),
                          "ctas": f"{r.ctas_per_sm} x {r.num_warps}", "warps": int(r.resident_warps),
                          "capacity": int(r.capacity_warps), "limited_by": r.limited_by,
                          "widest": f"{r.widest_load}/{r.widest_store}",
                          "widths": f"loads {r.load_widths or 'none'}; stores {r.store_widths or 'none'}",
                          "label": r.label, "programs": int(r.programs)})
        dtype, m, n, kernel = key
        rows.append({"dtype": dtype, "shape": f"{m}x{n}", "kernel": kernel, "cells": cells})
    summary = []
    for a in archs:
        part = df[df.arch == a]
        fed = part[part.limited_by != "grid"]
        summary.append({
            "arch": a, "gpu": ", ".join(sorted(set(part.gpu))), "launches": len(part),
            "spilling": int((part.spill_bytes > 0).sum()),
            "registers": (int(part.registers.min()), int(part.registers.max())),
            "resident": (int(fed.resident_warps.min()), int(fed.resident_warps.max())) if len(fed) else None,
            "grid_limited": len(part) - len(fed),
            "wide": int(((part.widest_load == 16) & (part.widest_store == 16)).sum())})
    return {"archs": [(a, ", ".join(sorted(set(df[df.arch == a].gpu)))) for a in archs], "rows": rows,
            "summary": summary}
