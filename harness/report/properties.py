"""The report's properties section: determinism and batch invariance per backend and dtype.

Properties beyond the error model's tolerance (``normbench.check.properties.PROPERTIES``)
are recorded per conformance test (columns ``deterministic``, ``batch_invariant`` and
``property_notes`` of the conformance schema, version 2): ``yes``, ``no`` or empty (not
measured). The table says, per backend and dtype, in how many of the tests that measured a
property it held, and for a violation the first thing that differed. A run of conformance
schema version 1 measured none: the section says so instead of showing an empty table.
"""

from __future__ import annotations

from typing import Any

from normbench.core.case_ids import dtype_of
from normbench.core.dtypes import DTYPES
from normbench.core.operations import NAMES, of
from normbench.report.sources import ResultSet

#: the table's columns: (title, the conformance column, the suite files whose tests count, what it covers)
COLUMNS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("deterministic: forward", "deterministic", ("test_forward.py",), "y of the same input twice, bit for bit"),
    ("deterministic: backward", "deterministic", ("test_backward.py",),
     "dx, dweight and dbias of the same input twice, bit for bit"),
    ("batch-invariant", "batch_invariant", ("test_forward.py",),
     "a few rows computed alone and at other positions of a smaller batch, bit for bit with the batch's"),
)


def _cell(verdicts: list[str], notes: list[str], cases: list[str], column: str) -> dict[str, Any]:
    measured = [i for i, v in enumerate(verdicts) if v]
    if not measured:
        return {"kind": "none", "text": "not measured", "title": "no test of this backend and dtype measured it"}
    violated = [i for i in measured if verdicts[i] == "no"]
    if not violated:
        return {"kind": "pass", "text": f"yes in {len(measured)} of {len(measured)} tests",
                "title": "every test measuring it found the same bits"}
    prefix = column.replace("_", "-") + ": "
    first = next((part.removeprefix(prefix) for part in notes[violated[0]].split(" | ") if part.startswith(prefix)),
                 "")
    return {"kind": "violated", "text": f"no in {len(violated)} of {len(measured)} tests",
            "detail": f"{cases[violated[0]]}: {first.split('; ')[0]}" if first else cases[violated[0]],
            "title": f"{len(violated)} of {len(measured)} tests measuring it found different bits"}


def properties_table(rs: ResultSet) -> dict[str, Any]:
    """Per backend, normalization and dtype, each property's cell (``kind`` pass, fail or none; ``text``; for a violation
    ``detail``, the first case and what differed). ``measured``: whether any row measured any property
    (a conformance schema version 1 run measured none)."""
    df = rs.conformance
    columns = [{"title": t, "doc": doc} for t, _, _, doc in COLUMNS]
    if df.empty:
        return {"measured": False, "columns": columns, "rows": []}
    measured = bool((df.deterministic != "").any() or (df.batch_invariant != "").any())
    df = df.assign(dtype=[dtype_of(c) for c in df.case], norm=df.normalization)
    order = {d: i for i, d in enumerate(DTYPES)}
    norm_order = {n: i for i, n in enumerate(NAMES)}
    rows = []
    groups = sorted(df.groupby(["backend", "norm", "dtype"]),
                    key=lambda kv: (kv[0][0], norm_order.get(kv[0][1], 9), order.get(kv[0][2], 9)))
    for (backend, norm, dtype), part in groups:
        cells = []
        for _, column, suites, _doc in COLUMNS:
            sub = part[part.suite.isin(suites)]
            cells.append(_cell(list(sub[column]), list(sub.property_notes), list(sub.case), column))
        if any(c["kind"] != "none" for c in cells):
            # LayerNorm's rows keep their names; RMSNorm's say so
            label = backend if norm == "layer_norm" else f"{backend} {of(norm).label}"
            rows.append({"backend": label, "dtype": dtype or "other", "cells": cells})
    return {"measured": measured, "columns": columns, "rows": rows}
