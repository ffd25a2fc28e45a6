"""The worst element of a comparison under a componentwise bound, and how to say it.

Every check that compares computed values with expected ones under a bound
(conformance, the backward identities, the paper's invariances, §3.1 and §5.2)
reports a failure the same way: the element with the largest ``|error|/bound``,
how many elements are out of bound, in words a kernel author can act on.

>>> import numpy as np
>>> worst = worst_violation(np.array([1.0, 2.5, 3.0]), np.array([1.0, 2.0, 3.0]), np.full(3, 0.1))
>>> worst.index, worst.ratio, worst.violations, worst.total
((1,), 5.0, 1, 3)
>>> f"x[{worst.where}] = {worst.value:g}: |error| {worst.error:.3g} {worst.excess()}; {worst.out_of_bound()}"
'x[1] = 2.5: |error| 0.5 > bound 0.1 (5x); 1 of 3 elements out of bound'
>>> worst_violation(np.array([1.0]), np.array([1.05]), np.array([0.1])) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class ConformanceError(AssertionError):
    """A backend's output is wrong; the message says where and by how much (every check of the check room
    raises it: ``normbench.check.conformance`` and the checks beside it)."""


def ratios(error, bound) -> np.ndarray:
    """``error / bound`` elementwise, as float64: 0 where both are 0, inf where the
    error is positive and the bound is not, inf where the error is not finite.

    >>> ratios(np.array([1.0, 0.0, 2.0, np.nan]), np.array([2.0, 0.0, 0.0, 1.0])).tolist()
    [0.5, 0.0, inf, inf]
    """
    error, bound = np.asarray(error, dtype=np.float64), np.asarray(bound, dtype=np.float64)
    positive = bound > 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = np.where(positive, error / np.where(positive, bound, 1.0), np.where(error > 0, np.inf, 0.0))
    return np.where(np.isfinite(error), r, np.inf)


def multiple(ratio: float) -> str:
    """A ratio to a bound as ``"5x"``, with enough digits that one just above 1 never
    reads as 1 (a failure at 1.002x the bound says 1.002x, not 1x).

    >>> multiple(5.0), multiple(1.002), multiple(1.0000004), multiple(2.5e6), multiple(0.4)
    ('5x', '1.002x', '1.0000004x', '2.5e+06x', '0.4x')
    """
    text = f"{ratio:.3g}"
    digits = 3
    while ratio > 1 and float(text) <= 1 and digits < 17:
        digits += 1
        text = f"{ratio:.{digits}g}"
    return f"{text}x"


@dataclass(frozen=True)
class Worst:
    """The worst element of a comparison: its index, value, reference and bound, and
    how many of the compared elements (``total``) are out of bound (``violations``)."""

    index: tuple[int, ...]
    value: float
    reference: float
    bound: float
    violations: int
    total: int

    @property
    def error(self) -> float:
        """``|value - reference|``."""
        return abs(self.value - self.reference)

    @property
    def ratio(self) -> float:
        """``|error| / bound`` (see :func:`ratios`): above 1 out of bound."""
        return float(ratios(self.error, self.bound))

    @property
    def where(self) -> str:
        """The index as a message writes it inside brackets: ``"3, 17"``."""
        return ", ".join(map(str, self.index))

    def excess(self) -> str:
        """``"> bound 0.1 (5x)"``: the bound and the error's multiple of it."""
        return f"> bound {self.bound:.3g} ({multiple(self.ratio)})"

    def out_of_bound(self, noun: str = "elements") -> str:
        """``"1 of 3 elements out of bound"``."""
        return f"{self.violations} of {self.total} {noun} out of bound"


def worst_violation(got, ref, bound, *, where=None, match_nonfinite: bool = True) -> Worst | None:
    """Compare ``got`` with ``ref`` componentwise under ``bound`` (all broadcast to
    one shape); the element with the largest ``|got - ref|/bound`` among those out of
    bound, or None when every element holds.

    An element holds when its error is finite and at most its bound (so a NaN or
    infinite error is out of bound whatever the bound; its ratio is inf), except,
    with ``match_nonfinite`` (conformance), where the reference is non-finite (a NaN
    or Inf input in that row): there the value must be non-finite too.
    ``where`` (a boolean mask): compare only those elements; ``total`` counts them.
    An offending element whose ratio is not a number (a non-finite error, a bound of 0
    or NaN) ranks as infinitely far out; ties go to the first in C order.
    """
    got = np.asarray(got, dtype=np.float64)
    got, ref, bound = np.broadcast_arrays(got, np.asarray(ref), np.asarray(bound))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got - ref)
        within = np.isfinite(err) & (err <= bound)
        ok = np.where(np.isfinite(ref), np.isfinite(got) & within, ~np.isfinite(got)) if match_nonfinite else within
    considered = np.broadcast_to(True if where is None else np.asarray(where, dtype=bool), ok.shape)
    bad = considered & ~ok
    if not bad.any():
        return None
    score = np.where(bad, ratios(err, bound), -1.0)
    score = np.where(bad & (score == 0), np.inf, score)  # out of bound at error 0: a bound below 0 or NaN
    idx = np.unravel_index(int(np.argmax(score)), got.shape)
    return Worst(tuple(int(i) for i in idx), float(got[idx]), float(ref[idx]), float(bound[idx]),
                 int(bad.sum()), int(considered.sum()))
