"""The report's quantized outputs: code-level agreement, per backend, operation and format (docs/quantized.md).

A quantized output is judged code by code, not as a floating-point error: each forward test of a quantized operation
records (conformance schema version 4, column ``codes``) how many of its codes are the exact quantization of
``y_exact / scale`` (exact), how many another code a correct kernel may return because ``y / scale`` lies within the
error model's window of a rounding boundary (allowed), and how many neither (wrong). Here they are summed per backend,
operation and format; a run that recorded none gets no table.
"""

from __future__ import annotations

from typing import Any

from normbench.check.outcomes import parse_codes
from normbench.core.case_ids import qdtype_of
from normbench.core.operations import NAMES, of
from normbench.report.sources import ResultSet


def code_table(rs: ResultSet) -> dict[str, Any]:
    """Rows of (backend, operation, format): tests, codes exact / allowed / wrong and their shares; ``measured``:
    whether any test recorded codes."""
    df = rs.conformance
    if df.empty or "codes" not in df or not (df.codes != "").any():
        return {"measured": False, "rows": []}
    part = df[df.codes != ""]
    part = part.assign(norm=part.normalization, qformat=[qdtype_of(c) for c in part.case])
    order = {n: i for i, n in enumerate(NAMES)}
    rows = []
    for (backend, norm, qdtype), group in sorted(part.groupby(["backend", "norm", "qformat"]),
                                                 key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][2])):
        exact, allowed, wrong = (sum(v) for v in zip(*(parse_codes(t) for t in group.codes)))
        total = max(exact + allowed + wrong, 1)
        rows.append({"backend": backend, "operation": of(norm).label, "format": qdtype, "tests": len(group),
                     "failed": int((group.outcome == "failed").sum()), "exact": exact, "allowed": allowed,
                     "wrong": wrong, "exact_pct": f"{100 * exact / total:.2f}", "allowed_pct": f"{100 * allowed / total:.2f}",
                     "wrong_pct": f"{100 * wrong / total:.2f}", "kind": "fail" if wrong else "pass"})
    return {"measured": True, "rows": rows}
