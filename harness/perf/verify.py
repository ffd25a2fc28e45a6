"""Verify a timed op's outputs against the oracle, before and after timing.

The same error model as the conformance suites (``normbench.check.error_model``: the
forward bound, and the backward bounds for the dtype the backend stores its
statistics in), the same dy (``normbench.core.cases.make_dy``) and the same
diagnoses, applied to what a throughput case produced. A :class:`Reference` holds one case's host inputs and oracle results
and is shared by its three directions, so a big GPU case pays for the float64
oracle once, not three times.

Example::

    >>> from normbench import get_registry
    >>> from normbench.core import cases
    >>> backend = get_registry().create("numpy")
    >>> ref = Reference(cases.Case("t", (4, 8), (8,), "float32"), seed=0)
    >>> x, w, b, dy = (backend.asarray(a.copy()) for a in ref.arrays)
    >>> verifier = Verifier(backend, ref, "forward", (x, w, b, dy))
    >>> verifier.check(backend.layer_norm(x, (8,), w, b, 1e-5))  # silent when right
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.check import conformance, error_model, oracle
from normbench.check.conformance import ConformanceError
from normbench.check.worst import worst_violation
from normbench.core.backend import Backend
from normbench.core.cases import Case, make_dy, make_inputs
from normbench.core.dtypes import host_dtype
from normbench.core.machine import check_case_bytes, check_fits

#: above this many elements a case is verified on :data:`SAMPLED_ROWS` rows spread over it, first and last included
#: (a GPU sweep case of 8192 x 65536 took the float64 oracle of every element: 1.5 to 2 hours and ~62 GB of host memory
#: for the sweep); y and dx are row-wise, so each sampled row is checked exactly as in full
SAMPLE_ABOVE = 1 << 24
SAMPLED_ROWS = 256


@dataclass
class Reference:
    """Host inputs (never handed to a backend: it gets copies) and the oracle's
    results for one case and seed, computed when first needed: on every row, or on :attr:`rows` alone for
    a case above :data:`SAMPLE_ABOVE` elements (then dweight and dbias, sums over every row, are not
    verified here: the conformance suites verify them at their sizes, and the row says so)."""

    case: Case
    seed: int
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        m, n = self.case.rows, self.case.hidden
        size = m * n
        #: the rows verified (None: every row)
        self.rows = None
        if size > SAMPLE_ABOVE and m > SAMPLED_ROWS:
            self.rows = np.unique(np.linspace(0, m - 1, SAMPLED_ROWS).round().astype(np.int64))
        checked = (size if self.rows is None else len(self.rows) * n)
        # before anything is made: x and dy, their copies for the backend, and the oracle's float64 work
        check_fits(4 * size * host_dtype(self.case.dtype).itemsize + check_case_bytes((checked,), "float64"),
                   f"verifying the {self.case.dtype} throughput case {self.case.id}",
                   "run a smaller --shape, or on a machine with more memory")
        self.inputs = make_inputs(self.case, self.seed)
        self.dy = make_dy(self.case, self.seed)
        #: what the oracle computes on: the inputs and dy, or their sampled rows
        self.checked_inputs, self.checked_dy = self.inputs, self.dy
        if self.rows is not None:
            sub = dataclasses.replace(self.case, shape=(len(self.rows), *self.case.normalized_shape))
            x = np.asarray(self.inputs.x).reshape(m, n)[self.rows].reshape(sub.shape)
            self.checked_inputs = dataclasses.replace(self.inputs, case=sub, x=x)
            self.checked_dy = np.asarray(self.dy).reshape(m, n)[self.rows].reshape(sub.shape)

    @property
    def sampled(self) -> str:
        """"" when every row is verified, else what was (for the row's message)."""
        if self.rows is None:
            return ""
        return (f"verified on {len(self.rows)} of {self.case.rows} rows spread over the case (y, dx); dweight and "
                f"dbias at the conformance suites' sizes")

    @property
    def arrays(self) -> tuple:
        """x, weight, bias, dy (host arrays; weight or bias may be None)."""
        return self.inputs.x, self.inputs.weight, self.inputs.bias, self.dy

    def _get(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def forward(self) -> oracle.Forward:
        return self._get("forward", lambda: conformance.reference(self.checked_inputs))

    @property
    def forward_bound(self) -> np.ndarray:
        return self._get("forward_bound", lambda: error_model.forward_bound(self.forward, self.case.dtype))

    @property
    def gradients(self) -> oracle.Backward:
        return self._get("gradients", lambda: oracle.backward(self.checked_dy, self.forward))

    @property
    def backward_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The backward error model's bounds (one bound for every backend)."""
        return self._get("backward_bounds", lambda: error_model.backward_bounds(
            self.checked_dy, self.forward, self.gradients, self.case.dtype, self.case.params))


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and conformance.same_bits(a, b))


@dataclass
class Verifier:
    """Checks a direction's outputs; an output bit-identical to one already
    verified needs no second comparison."""

    backend: Backend
    reference: Reference
    direction: str
    native: tuple  # the backend's x, weight, bias, dy (to check they are unmodified)
    verified: list[np.ndarray | None] | None = None

    def _host(self, outputs: Any) -> list[np.ndarray | None]:
        """Outputs as host arrays (y; dx, dweight, dbias), their shapes and dtypes checked."""
        case, backend = self.reference.case, self.backend
        check = conformance.host_array  # shape and dtype, with a readable message
        if self.direction == "forward":
            return [check("y", outputs, backend, case.shape, case.dtype)]
        y, grads = (None, outputs) if self.direction == "backward" else outputs
        host = [] if y is None else [check("y", y, backend, case.shape, case.dtype)]
        dx, dw, db = grads
        host.append(check("dx", dx, backend, case.shape, case.dtype))
        given = self.reference.inputs
        return host + [conformance.check_gradient(what, g, p, backend, case, case.normalized_shape, case.params)
                       for what, g, p in (("dweight", dw, given.weight), ("dbias", db, given.bias))]

    def _compare(self, what: str, got: np.ndarray | None, want: np.ndarray, bound: np.ndarray) -> None:
        if got is None:
            return
        ref = self.reference
        per_row = what in ("y", "dx")  # the row's mean and sigma explain y and dx, not column sums
        if ref.rows is not None and not per_row:
            return  # a sum over every row: the sampled reference has no such sum (Reference says why)
        rows = lambda a: np.reshape(np.asarray(a, dtype=np.float64), (-1, ref.case.hidden))
        got = rows(got) if ref.rows is None else rows(got)[ref.rows]
        worst = worst_violation(got, rows(want), rows(bound))
        if worst is not None:
            notes = () if what == "y" else conformance.gradient_notes(ref.checked_inputs)
            if ref.rows is not None:
                notes += (f"{ref.sampled}: row {worst.index[0]} here is row {ref.rows[worst.index[0]]} of the case",)
            raise ConformanceError(conformance.describe(what, worst, ref.checked_inputs, self.backend,
                                                        ref.forward if per_row else None, notes))

    def check(self, outputs: Any) -> None:
        """Raise :class:`ConformanceError` unless ``outputs`` are right."""
        host = self._host(outputs)
        if self.verified is not None and all(_same(a, b) for a, b in zip(host, self.verified)):
            return
        ref, rest = self.reference, list(host)
        if self.direction != "backward":
            self._compare("y", rest.pop(0), ref.forward.y, ref.forward_bound)
        if self.direction != "forward":
            grads, bounds = ref.gradients, ref.backward_bounds
            for what, got, want, bound in zip(("dx", "dweight", "dbias"), rest, (grads.dx, grads.dweight, grads.dbias),
                                              bounds):
                self._compare(what, got, want, bound)
        self.verified = host

    def check_inputs(self) -> None:
        """The backend's inputs still hold what it was given: the conformance checks' own test
        (:class:`normbench.check.conformance.Handover`), its words and its first changed element."""
        names = ("x", "weight", "bias", "dy")
        kept = tuple(None if n is None else a for a, n in zip(self.reference.arrays, self.native))
        conformance.Handover(self.backend, names, self.native, kept).check(
            f"the {self.direction}", f"{self.backend.name} {self.reference.case.id}: ")
