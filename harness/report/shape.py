"""From result sets to what the report shows: pandas in, plain lists and dicts out.

Nothing here formats HTML: the template escapes every string it is given.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from normbench.perf.roofline import BYTE_MODEL_FORMULAS, BYTE_MODELS, DIRECTIONS
from normbench.report.sources import ResultSet

if TYPE_CHECKING:
    import pandas as pd

#: conformance outcomes, in the order the matrix shows them
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")
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


def _panel_table(part: pd.DataFrame) -> dict[str, Any]:
    """Shapes as columns, (backend, result set) as rows, cells 'GB/s (pct%)'."""
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
                cells.append((r.verdict, "bad"))
            else:
                cells.append((f"{r.gbps:.3g} ({r.pct_of_ceiling:.0f}%)", "wide" if r.wide_spread else ""))
        body.append({"backend": backend, "result_set": label, "cells": cells})
    return {"shapes": shapes, "rows": body}


def throughput_panels(sets: list[ResultSet]) -> list[Panel]:
    """One panel per direction x dtype present in any set, lines per (backend, result set)."""
    import pandas as pd

    frames = [rs.throughput.assign(result_set=rs.label) for rs in sets if not rs.throughput.empty]
    if not frames:
        return []
    df = pd.concat(frames, ignore_index=True)
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    panels = []
    keys = sorted(set(zip(df.direction, df.dtype)), key=lambda k: (order.get(k[0], 9), k[0], k[1]))
    for direction, dtype in keys:
        part = df[(df.direction == direction) & (df.dtype == dtype)]
        ok = _ok(part)
        lines = [_line(ok[ok.result_set == rs.label], b, rs.label) for rs in sets
                 for b in sorted(set(ok[ok.result_set == rs.label].backend))]
        ceilings = [(label, float(g.ceiling_gbps.median())) for label, g in part.groupby("result_set", sort=False)
                    if g.ceiling_gbps.notna().any()]
        panels.append(Panel(direction, dtype, BYTE_MODELS.get(direction, direction), lines, ceilings,
                            _panel_table(part)))
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
    for (direction, dtype, hidden, shape), group in ok.groupby(["direction", "dtype", "hidden", "shape"], sort=False):
        base = group[group.backend == baseline]
        if base.empty:
            continue
        t0 = float(base.median_s.iloc[0])
        by_backend = {r.backend: t0 / r.median_s for r in group.itertuples()}
        rows.append({"direction": direction, "dtype": dtype, "shape": shape, "hidden": int(hidden),
                     "cells": [by_backend.get(b) for b in backends]})
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    rows.sort(key=lambda r: (order.get(r["direction"], 9), r["dtype"], r["hidden"]))
    return {"note": "" if backends else f"only {baseline!r} has correct rows: nothing to compare",
            "backends": backends, "rows": rows}


def throughput_problems(rs: ResultSet) -> dict[str, Any]:
    """Rows that are not a speed (wrong, above ceiling, error) and backends with no correct row at all."""
    df = rs.throughput
    bad = df[df.verdict != "ok"]
    only_errors = sorted(set(df.backend) - set(_ok(df).backend))
    listed = [{"backend": r.backend, "case": f"{r.direction} {r.dtype} {r.shape}", "verdict": r.verdict,
               "message": r.message} for r in bad.head(MAX_LISTED).itertuples()]
    return {"rows": listed, "more": max(len(bad) - MAX_LISTED, 0), "only_errors": only_errors}


#: the case lists each suite draws from, preferred when a case id appears in several lists
SUITE_CASES: dict[str, tuple[str, ...]] = {
    "test_forward.py": ("FORWARD_CASES",), "test_backward.py": ("BACKWARD_CASES", "GRADCHECK_CASES"),
    "test_invariances.py": ("INVARIANCE_CASES", "GEOMETRY_CASES", "RNN_CASES", "LSTM_CASES"),
}


def _family_lookup() -> dict[tuple[str, str], str]:
    """(suite, case id) -> family from the case lists of :data:`normbench.cases.CASE_LISTS` (``""`` suite:
    any list).

    Ids from another normbench version that no list knows fall back to the test's name.
    """
    from normbench.cases import CASE_LISTS as lists

    found: dict[tuple[str, str], str] = {}
    for value in lists.values():
        found.update({("", c.id): c.family for c in value})
    for suite, names in SUITE_CASES.items():
        for name in reversed(names):
            found.update({(suite, c.id): c.family for c in lists.get(name, [])})
    return found


def conformance_matrix(rs: ResultSet) -> dict[str, Any]:
    """Backend x (suite, family): counts per outcome, and a cell class (pass, fail, xfail, skip, none)."""
    df = rs.conformance
    if df.empty:
        return {"columns": [], "rows": []}
    families = _family_lookup()
    df = df.assign(family=[families.get((s, c)) or families.get(("", c), t)
                            for s, c, t in zip(df.suite, df.case, df.test)])
    columns = sorted(set(zip(df.suite, df.family)))
    rows = []
    for backend, group in df.groupby("backend", sort=True):
        counts = {key: Counter(g.outcome) for key, g in group.groupby(["suite", "family"])}
        cells = [_cell(counts.get(key, Counter())) for key in columns]
        total = Counter(group.outcome)
        rows.append({"backend": backend, "cells": cells, "total": _cell(total)})
    return {"columns": columns, "rows": rows}


def _cell(c: Counter) -> dict[str, Any]:
    bad = c["failed"] + c["error"] + c["xpassed"]
    kind = "fail" if bad else "xfail" if c["xfailed"] else "pass" if c["passed"] else "skip" if c["skipped"] else "none"
    text = " ".join(f"{c[o]}{o[0] if o not in ('xfailed', 'xpassed', 'error') else o[:2]}" for o in OUTCOMES if c[o])
    return {"kind": kind, "text": text or "-", "title": ", ".join(f"{c[o]} {o}" for o in OUTCOMES if c[o]) or "none"}


def conformance_details(rs: ResultSet) -> dict[str, Any]:
    """Failures with their diagnosis, known deviations (xfail) and skips grouped by reason."""
    df = rs.conformance
    failing = df[df.outcome.isin(["failed", "error", "xpassed"])]
    known = df[df.outcome == "xfailed"]
    skips = df[df.outcome == "skipped"]
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
             ("backends", ", ".join(backends)), ("seed", ", ".join(map(str, seeds))),
             ("normbench", f"{env.get('normbench', '')} {env.get('git_commit', '')}".strip()),
             ("python", env.get("python", "")), ("platform", env.get("platform", "")), ("libraries", libraries),
             ("threads", ", ".join(f"{k}={v}" for k, v in env.get("threads", {}).items()))]
    return [(k, str(v)) for k, v in items if v]


def byte_models(sets: list[ResultSet]) -> list[tuple[str, str, str]]:
    """(direction, byte-model variant, formula) for the directions measured."""
    measured = {d for rs in sets for d in set(rs.throughput.direction)} or set(DIRECTIONS)
    return [(d, BYTE_MODELS[d], BYTE_MODEL_FORMULAS[BYTE_MODELS[d]]) for d in DIRECTIONS if d in measured]


def at_a_glance(rs: ResultSet) -> list[dict[str, Any]]:
    """Per direction x dtype: the fastest backend (median GB/s over shapes) and whether its conformance passed."""
    ok = _ok(rs.throughput)
    conf = rs.conformance
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    out = []
    for (direction, dtype), part in sorted(ok.groupby(["direction", "dtype"]), key=lambda k: (order.get(k[0][0], 9), k[0])):
        medians = part.groupby("backend").gbps.median().sort_values(ascending=False)
        best = str(medians.index[0])
        mine = conf[conf.backend == best]
        bad = int(mine.outcome.isin(["failed", "error", "xpassed"]).sum())
        trust = ("not checked in this set" if mine.empty else f"{bad} conformance failures" if bad else
                 f"conformance passed ({int((mine.outcome == 'passed').sum())} tests, "
                 f"{int((mine.outcome == 'xfailed').sum())} known deviations)")
        pct = part[part.backend == best].pct_of_ceiling.median()
        out.append({"direction": direction, "dtype": dtype, "best": best, "gbps": float(medians.iloc[0]),
                    "pct": float(pct), "runner_up": str(medians.index[1]) if len(medians) > 1 else "",
                    "ratio": float(medians.iloc[0] / medians.iloc[1]) if len(medians) > 1 else None,
                    "trust": trust, "trusted": not mine.empty and not bad})
    return out
