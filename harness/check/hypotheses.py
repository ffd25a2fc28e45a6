"""Known bug hypotheses: which of the known bug classes (:mod:`normbench.check.bug_models`, one model each)
reproduces a failing backend's output.

When a forward or backward check fails, :func:`explain` computes the failing output under every hypothesis that
applies to the case (``Operation.hypotheses``) and compares the backend's output with each, under the same bound
that failed (or, for a hypothesis about precision, the bound of the precision it names). A hypothesis whose output
the backend's is within that bound of *reproduces* it: "matches LayerNorm with eps rounded to float32: 0.05x the
bound". This runs only for failing checks: the passing path never computes a hypothesis. The same models build the
mutants of ``tests/mutants.py``, so each bug class is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from normbench.check.bug_models import BY_KEY as BY_KEY
from normbench.check.bug_models import CORRECT as CORRECT
from normbench.check.bug_models import F64 as F64
from normbench.check.bug_models import REGISTRY as REGISTRY
from normbench.check.bug_models import VARIANCE_ONLY as VARIANCE_ONLY
from normbench.check.bug_models import EpsFloat32 as EpsFloat32
from normbench.check.bug_models import Model as Model
from normbench.check.bug_models import SavedStatisticsInInputDtype as SavedStatisticsInInputDtype
from normbench.check.bug_models import truncate_to_bfloat16 as truncate_to_bfloat16
from normbench.check.worst import multiple, ratios
from normbench.core import operations
from normbench.core.cases import Inputs
from normbench.core.dtypes import SUBNORMAL_SPACING, UNIT_ROUNDOFF


@dataclass(frozen=True)
class Match:
    """How far a backend's output is from a hypothesis's, in multiples of the bound."""

    hypothesis: Model
    ratio: float           # the largest |got - predicted|/bound over the rows it matches
    rows: int = 0          # rows that match (0: not counted by rows)
    of: int = 0            # rows compared
    label: str = "LayerNorm"  # the operation's, for the words

    @property
    def matches(self) -> bool:
        return self.ratio <= 1

    def words(self) -> str:
        h = self.hypothesis
        tag = f" (bug class {h.bug_class})" if h.bug_class else ""
        where = f" in {self.rows} of {self.of} rows" if self.rows < self.of else ""
        return f"{h.says.replace('LayerNorm', self.label)}{tag}: {multiple(self.ratio)} the bound{where}"


def row_ratios(got: np.ndarray, predicted: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``|got - predicted|/bound`` elementwise; a non-finite value agrees only with a non-finite
    prediction (and then counts 0), as the conformance comparison does."""
    got, predicted, bound = np.broadcast_arrays(np.asarray(got, F64), np.asarray(predicted, F64),
                                                np.asarray(bound, F64))
    with np.errstate(invalid="ignore", over="ignore"):
        r = ratios(np.abs(got - predicted), bound)
    return np.where(~np.isfinite(got) & ~np.isfinite(predicted), 0.0, r)


#: a hypothesis matches a result of many rows (at least ``TIE_ROWS``) when it reproduces all but
#: ``TIE_FRACTION`` of them: its statistics, computed in another order, may round the other way
#: at an exact tie of the storage dtype (a row mean of exactly 2.8046875 stored in bfloat16)
TIE_ROWS, TIE_FRACTION = 100, 0.01


def _match(h: Model, r: np.ndarray, by_rows: bool, label: str = "LayerNorm") -> Match:
    if not r.size:
        return Match(h, 0.0, label=label)
    if not by_rows or r.shape[0] < TIE_ROWS:
        return Match(h, float(r.max()), label=label)
    per_row = r.reshape(r.shape[0], -1).max(axis=1)
    good = per_row <= 1
    if good.all() or (~good).sum() > TIE_FRACTION * r.shape[0]:
        return Match(h, float(per_row.max()), len(per_row), len(per_row), label)
    return Match(h, float(per_row[good].max()), int(good.sum()), len(per_row), label)


def _rounding(what: str, predicted: np.ndarray, case) -> np.ndarray:
    """The output-rounding term of the error model at the hypothesis's value: the bound that
    failed rounds at the correct value's magnitude, and a bug may make the value far larger
    (dx without its mean term), which a kernel then rounds to its output dtype (saved
    statistics: to at most the input dtype)."""
    dtype = case.params if what in ("dweight", "dbias") else case.dtype
    with np.errstate(invalid="ignore", over="ignore"):
        return 3 * (UNIT_ROUNDOFF[dtype] * np.abs(np.nan_to_num(predicted)) + SUBNORMAL_SPACING[dtype] / 2)


#: a hypothesis that misses the bound is still named as the closest when it is this many times
#: closer to the backend's output than a correct LayerNorm is
CLOSER = 10.0


def explain(what: str, got: np.ndarray, bound: np.ndarray, inputs: Inputs, *, dy: np.ndarray | None = None,
            bound_for: Callable[[str], np.ndarray] | None = None, runtime_note: str | None = None,
            failing_ratio: float = np.inf) -> tuple[str, ...]:
    """The lines a failure of ``what`` (y, mean, rstd, dx, dweight, dbias) adds: which known bug
    hypotheses reproduce ``got`` within ``bound`` (``bound_for(dtype)``: the bound in another
    dtype's precision, for hypotheses about precision), else the closest one if it is
    :data:`CLOSER` times closer than ``failing_ratio`` (the failure's own multiple of the bound).
    ``runtime_note``: the backend's ``runtime_note``; runtime hypotheses are tried only with one.

    >>> from normbench.core import cases
    >>> case = cases.Case("demo", (4, 8), (8,), "float64", dist="sigmasqrteps")
    >>> inputs = cases.make_inputs(case, 0)
    >>> y = EpsFloat32().outputs(inputs)["y"]
    >>> explain("y", y, np.full(y.shape, 1e-15), inputs)[0]
    'explained: y matches LayerNorm with eps rounded to float32 (bug class #13): 0x the bound'
    """
    case = inputs.case
    op = operations.of(case.norm)
    shape = np.shape(got)
    got = np.asarray(got, dtype=F64)
    matches = []
    for h in (BY_KEY[key] for key in op.hypotheses):
        if what not in h.changes or not h.applies(case.dtype, case.hidden) or (h.runtime and not runtime_note):
            continue
        try:
            predicted = h.outputs(inputs, dy)[what]
        except Exception:  # a hypothesis that cannot be computed on this case explains nothing
            continue
        hb = bound if h.bound_dtype(case.dtype) == case.dtype or bound_for is None else \
            bound_for(h.bound_dtype(case.dtype))
        predicted = np.reshape(predicted, shape)
        r = row_ratios(got, predicted, np.reshape(hb, shape) + _rounding(what, predicted, case))
        matches.append(_match(h, r, what in ("y", "dx", "mean", "rstd") and r.ndim == 2, op.label))
    if not matches:
        return ()
    matches.sort(key=lambda m: m.ratio)
    good = [m for m in matches if m.matches]
    lines = []
    for m in good:
        if m.hypothesis.runtime:
            lines.append(f"explained by the runtime, not the kernel: {runtime_note}; {what} matches {m.words()}")
        else:
            lines.append(f"explained: {what} matches {m.words()}")
    if good:
        return tuple(lines)
    best = matches[0]
    closest = f"; closest: {best.words()}" if np.isfinite(best.ratio) and best.ratio * CLOSER <= failing_ratio else ""
    return (f"no known bug hypothesis reproduces {what} within the bound (normbench.check.hypotheses, "
            f"{len(matches)} tried){closest}",)
