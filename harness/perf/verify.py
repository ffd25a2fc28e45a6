"""Verify a timed op's outputs against the oracle, before and after timing.

The same error model as the conformance suites (``normbench.check.error_model``: the
forward bound, and the backward bounds for the dtype the backend stores its
statistics in), the same dy (``normbench.core.cases.make_dy``) and the same
diagnoses, applied to what a throughput case produced. A :class:`Reference` holds one case's host inputs and oracle results
and is shared by its three directions, so a big GPU case pays for the float64
oracle once, not three times.

Every operation goes through the same code, its entry (``normbench.core.operations``) saying what differs: a fused
operation's (``add_rms_norm``: docs/fused.md) inputs include the residual and its cotangents ``dresidual_out``;
its forward's ``residual_out`` is checked bit for bit and its y for either rounding of the sum, by the conformance
suites' own check (``normbench.check.conformance.check_forward_values``); its backward's dsum under
``normbench.check.fused.dsum_bound``.

Example::

    >>> from normbench import get_registry
    >>> from normbench.core import cases
    >>> backend = get_registry().create("numpy")
    >>> ref = Reference(cases.Case("t", (4, 8), (8,), "float32"), seed=0)
    >>> native = {name: backend.asarray(a.copy()) for name, a in ref.hosts.items()}
    >>> verifier = Verifier(backend, ref, "forward", native)
    >>> verifier.check(backend.layer_norm(native["x"], (8,), native["weight"], native["bias"], 1e-5))  # silent when right
    >>> fused = Reference(cases.Case("t", (4, 8), (8,), "float32", norm="add_rms_norm"), seed=0)
    >>> list(fused.hosts)
    ['x', 'residual', 'weight', 'dy', 'dresidual_out']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.check import conformance, error_model, fused, oracle
from normbench.check.conformance import ConformanceError
from normbench.check.worst import worst_violation
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, make_dresidual, make_dy, make_inputs
from normbench.core.dtypes import host_dtype
from normbench.core.machine import check_case_bytes, check_fits

#: above this many elements a case is verified on :data:`SAMPLED_ROWS` rows spread over it, first and last included
#: (a GPU sweep case of 8192 x 65536 took the float64 oracle of every element: 1.5 to 2 hours and ~62 GB of host memory
#: for the sweep); y and dx are row-wise, so each sampled row is checked exactly as in full
SAMPLE_ABOVE = 1 << 24
SAMPLED_ROWS = 256


#: what a case hands a backend besides its sizes and eps: the operation's array parameters, then its cotangents
_NOT_ARRAYS = ("normalized_shape", "eps")


def handed(op: operations.Operation) -> tuple[str, ...]:
    """The names of the host arrays a case of ``op`` hands a backend: its array parameters and its cotangents.

    >>> handed(operations.LAYER_NORM), handed(operations.ADD_RMS_NORM)
    (('x', 'weight', 'bias', 'dy'), ('x', 'residual', 'weight', 'dy', 'dresidual_out'))
    """
    return tuple(p for p in op.params if p not in _NOT_ARRAYS) + op.cotangents


@dataclass
class Reference:
    """Host inputs (never handed to a backend: it gets copies) and the oracle's
    results for one case and seed, computed when first needed: on every row, or on :attr:`rows` alone for
    a case above :data:`SAMPLE_ABOVE` elements (then dweight and dbias, sums over every row, are not
    verified here: the conformance suites verify them at their sizes, and the row says so). A fused operation's
    case holds its residual and ``dresidual_out`` too, sampled with x and dy."""

    case: Case
    seed: int
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        case = self.case
        m, n = case.rows, case.hidden
        size = m * n
        #: the operation's entry: what the case hands over and what it returns
        self.operation = operations.of(case.norm)
        #: the rows verified (None: every row)
        self.rows = None
        if size > SAMPLE_ABOVE and m > SAMPLED_ROWS:
            self.rows = np.unique(np.linspace(0, m - 1, SAMPLED_ROWS).round().astype(np.int64))
        checked = (size if self.rows is None else len(self.rows) * n)
        # before anything is made: x and dy (and a fused case's residual and dresidual_out), their copies for the
        # backend, and the oracle's float64 work
        element = 2 * host_dtype(case.dtype).itemsize + (2 * host_dtype(case.residual_type).itemsize
                                                         if case.residual_type else 0)
        check_fits(2 * size * element + check_case_bytes((checked,), "float64"),
                   f"verifying the {case.dtype} throughput case {case.id}",
                   "run a smaller --shape, or on a machine with more memory")
        self.inputs = make_inputs(case, self.seed)
        self.dy = make_dy(case, self.seed)
        #: a fused operation's second cotangent (the residual's dtype), else None
        self.dresidual = make_dresidual(case, self.seed) if self.operation.fuses else None
        #: what the oracle computes on: the inputs and cotangents, or their sampled rows
        self.checked_inputs, self.checked_dy, self.checked_dresidual = self.inputs, self.dy, self.dresidual
        if self.rows is not None:
            sub = dataclasses.replace(case, shape=(len(self.rows), *case.normalized_shape))
            pick = lambda a: None if a is None else np.asarray(a).reshape(m, n)[self.rows].reshape(sub.shape)
            self.checked_inputs = dataclasses.replace(self.inputs, case=sub, x=pick(self.inputs.x),
                                                      residual=pick(self.inputs.residual))
            self.checked_dy, self.checked_dresidual = pick(self.dy), pick(self.dresidual)

    @property
    def sampled(self) -> str:
        """"" when every row is verified, else what was (for the row's message)."""
        if self.rows is None:
            return ""
        first = "dsum" if self.operation.fuses else "dx"
        return (f"verified on {len(self.rows)} of {self.case.rows} rows spread over the case (y, {first}); dweight and "
                f"dbias at the conformance suites' sizes")

    @property
    def hosts(self) -> dict[str, np.ndarray | None]:
        """The host arrays by name (:func:`handed`: x, the residual, weight, bias, dy, dresidual_out, those the
        operation has; weight or bias may be None)."""
        every = {"x": self.inputs.x, "residual": self.inputs.residual, "weight": self.inputs.weight,
                 "bias": self.inputs.bias, "dy": self.dy, "dresidual_out": self.dresidual}
        return {name: every[name] for name in handed(self.operation)}

    def _get(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def forward(self) -> oracle.Forward:
        """The oracle's forward (a fused case's: of its ``residual_out``, ``conformance.reference``)."""
        return self._get("forward", lambda: conformance.reference(self.checked_inputs))

    @property
    def forward_bound(self) -> np.ndarray:
        return self._get("forward_bound", lambda: error_model.forward_bound(self.forward, self.case.dtype))

    @property
    def gradients(self) -> oracle.Backward:
        return self._get("gradients", lambda: oracle.backward(self.checked_dy, self.forward))

    @property
    def backward_checks(self) -> tuple[tuple[str, np.ndarray | None, np.ndarray], ...]:
        """``(what, float64 reference, bound)`` of each gradient, in the order of ``gradient_tuple``: dx (a fused
        operation's dsum = dresidual_out + dx, under ``normbench.check.fused.dsum_bound``), dweight, dbias."""
        return self._get("backward_checks", self._backward_checks)

    def _backward_checks(self) -> tuple:
        case, grads, dy = self.case, self.gradients, self.checked_dy
        if self.operation.fuses:
            dresidual = oracle.rows_view(self.checked_dresidual, case.normalized_shape)
            with np.errstate(invalid="ignore", over="ignore"):
                first = dresidual + grads.dx
            bounds = fused.dsum_bound(dy, self.forward, grads, dresidual, first, case.residual_type, case.params)
        else:
            first = grads.dx
            bounds = error_model.backward_bounds(dy, self.forward, grads, case.dtype, case.params)
        names = (self.operation.gradients[0], "dweight", "dbias")
        return tuple(zip(names, (first, grads.dweight, grads.dbias), bounds))


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and conformance.same_bits(a, b))


@dataclass
class Verifier:
    """Checks a direction's outputs; an output bit-identical to one already
    verified needs no second comparison."""

    backend: Backend
    reference: Reference
    direction: str
    #: the backend's arrays by name (:attr:`Reference.hosts`' names, None for one not handed over in this direction),
    #: and any output of the backend's it is handed back (a fused backward's ``residual_out``): to check they are
    #: unmodified
    native: Mapping[str, Any]
    verified: list[np.ndarray | None] | None = None
    #: the harness's copies of the outputs in :attr:`native` (taken when the backend wrote them), by name
    written: Mapping[str, np.ndarray] = field(default_factory=dict)

    def _forward_host(self, outputs: Any) -> list[np.ndarray]:
        """The forward's outputs as host arrays: y; a fused operation's y and residual_out."""
        case, backend, op = self.reference.case, self.backend, self.reference.operation
        if not op.fuses:
            return [conformance.host_array("y", outputs, backend, case.shape, case.dtype)]
        y, out = conformance.fused_outputs(backend, case, op, outputs)  # a tuple of (y, residual_out), or what it was
        return [conformance.host_array("y", y, backend, case.shape, case.dtype),
                conformance.host_array("residual_out", out, backend, case.shape, case.residual_type)]

    def _host(self, outputs: Any) -> list[np.ndarray | None]:
        """Outputs as host arrays (y, and a fused operation's residual_out; dx or dsum, dweight, dbias), their
        shapes and dtypes checked."""
        case, backend = self.reference.case, self.backend
        if self.direction == "forward":
            return self._forward_host(outputs)
        y, grads = (None, outputs) if self.direction == "backward" else outputs
        host = [] if y is None else self._forward_host(y)
        dx, dw, db = grads
        first = self.reference.operation.gradients[0]
        host.append(conformance.host_array(first, dx, backend, case.shape, case.residual_type or case.dtype))
        given = self.reference.inputs
        return host + [conformance.check_gradient(what, g, p, backend, case,
                                                  case.weight_shape if what == "dweight" else case.normalized_shape,
                                                  case.params)
                       for what, g, p in (("dweight", dw, given.weight), ("dbias", db, given.bias))]

    def _checked_rows(self, got: np.ndarray) -> np.ndarray:
        """``got`` as the oracle saw its inputs: every row, or the sampled ones (in the sampled case's shape)."""
        ref = self.reference
        if ref.rows is None:
            return got
        return np.reshape(got, (-1, ref.case.hidden))[ref.rows].reshape(ref.checked_inputs.case.shape)

    def _compare(self, what: str, got: np.ndarray | None, want: np.ndarray, bound: np.ndarray) -> None:
        if got is None:
            return
        ref = self.reference
        per_row = what in ("y", "dx", "dsum")  # the row's mean and sigma explain y and dx, not column sums
        if ref.rows is not None and not per_row:
            return  # a sum over every row: the sampled reference has no such sum (Reference says why)
        rows = lambda a: np.reshape(np.asarray(a, dtype=np.float64), (-1, ref.case.hidden))
        worst = worst_violation(rows(self._checked_rows(got)), rows(want), rows(bound))
        if worst is not None:
            notes = () if what == "y" else conformance.gradient_notes(ref.checked_inputs)
            if ref.operation.fuses and what != "y":
                notes += (f"dresidual_out: normbench.core.cases.make_dresidual(<case {ref.case.id}>, seed={ref.seed}); "
                          f"dsum = dresidual_out + dx, the gradient of x and of the residual",)
            if ref.rows is not None:
                notes += (f"{ref.sampled}: row {worst.index[0]} here is row {ref.rows[worst.index[0]]} of the case",)
            raise ConformanceError(conformance.describe(what, worst, ref.checked_inputs, self.backend,
                                                        ref.forward if per_row else None, notes))

    def _check_fused_forward(self, y: np.ndarray, residual_out: np.ndarray) -> None:
        """residual_out bit for bit and y for either rounding of the sum: the conformance suites' own check
        (``conformance.check_forward_values``), on the rows the reference holds."""
        ref = self.reference
        run = conformance.ForwardRun(self._checked_rows(y), None, (), (), self._checked_rows(residual_out))
        try:
            conformance.check_forward_values(self.backend, ref.checked_inputs, run, ref.forward)
        except ConformanceError as exc:
            if ref.rows is None:
                raise
            rows = ", ".join(map(str, ref.rows[:3]))
            raise ConformanceError(f"{exc}\n  {ref.sampled}: its rows here are rows {rows}, ..., {ref.rows[-1]} of the "
                                   f"case (numpy.linspace(0, {ref.case.rows - 1}, {SAMPLED_ROWS}), rounded)") from None

    def check(self, outputs: Any) -> None:
        """Raise :class:`ConformanceError` unless ``outputs`` are right."""
        host = self._host(outputs)
        if self.verified is not None and all(_same(a, b) for a, b in zip(host, self.verified)):
            return
        ref, rest = self.reference, list(host)
        if self.direction != "backward":
            if ref.operation.fuses:
                y, residual_out = rest.pop(0), rest.pop(0)
                self._check_fused_forward(y, residual_out)
            else:
                self._compare("y", rest.pop(0), ref.forward.y, ref.forward_bound)
        if self.direction != "forward":
            for (what, want, bound), got in zip(ref.backward_checks, rest):
                self._compare(what, got, want, bound)
        self.verified = host

    def check_inputs(self) -> None:
        """The backend's inputs still hold what it was given: the conformance checks' own test
        (:class:`normbench.check.conformance.Handover`), its words and its first changed element; the inputs are
        :attr:`Reference.hosts` (x, a fused operation's residual, weight, bias, dy, dresidual_out) and what the
        backend wrote and was handed back (:attr:`written`)."""
        kept = {**self.reference.hosts, **self.written}
        names = tuple(name for name in kept if name in self.native)
        native = tuple(self.native[name] for name in names)
        pristine = tuple(None if n is None else kept[name] for name, n in zip(names, native))
        conformance.Handover(self.backend, names, native, pristine).check(
            f"the {self.direction}", f"{self.backend.name} {self.reference.case.id}: ")
