"""Verify a timed op's outputs against the oracle: the first call's, the last's, and timed calls' picked at random.

The same error model as the conformance suites (``normbench.check.error_model``: the
forward bound, and the backward bounds for the dtype the backend stores its
statistics in), the same dy (``normbench.core.cases.make_dy``) and the same
diagnoses, applied to what a throughput case produced. A :class:`Reference` holds one case's host inputs and oracle results
and is shared by its three directions, so a big GPU case pays for the float64
oracle once, not three times.

What a verifier trusts, nothing more (docs/throughput.md, "What a backend cannot fake, and what it still can"):
each output is a copy taken when the backend hands it over, of the array type the backend's own ``asarray``
makes (a lazy wrapper or a tensor subclass is refused), sharing no memory with the inputs, the harness's arrays or
the last judged call's outputs (:mod:`normbench.check.aliasing`); the inputs of a call may be its case's rows
in a secret order (:meth:`Reference.reordered`), and its outputs are judged against those rows.

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
    >>> verifier = Verifier(backend, ref, "forward")
    >>> verifier.check(backend.layer_norm(native["x"], (8,), native["weight"], native["bias"], 1e-5), native)  # silent when right
    >>> fused = Reference(cases.Case("t", (4, 8), (8,), "float32", norm="add_rms_norm"), seed=0)
    >>> list(fused.hosts)
    ['x', 'residual', 'weight', 'dy', 'dresidual_out']
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.check import conformance, error_model, fused, oracle
from normbench.check.aliasing import Extents, aliasing_message
from normbench.check.conformance import ConformanceError
from normbench.check.worst import worst_violation
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, Inputs, make_dresidual, make_dy, make_inputs
from normbench.core.dtypes import host_dtype
from normbench.core.machine import check_case_bytes, check_fits
from normbench.perf import timing

#: above this many elements a case's y and dx are verified against the oracle on :data:`SAMPLED_ROWS` rows drawn
#: at random (from the operating system's entropy, when the case is first verified: no backend can predict them),
#: every one of its rows by the chunked oracle on the call that ends the measurement (:meth:`Reference.every_row`),
#: and dweight and dbias, sums over every row, in full at every size (:attr:`Reference.column_sums`); the float64
#: oracle of every element held at once took 1.5 to 2 hours and ~62 GB of host memory for the GPU sweep (issue 29)
SAMPLE_ABOVE = 1 << 24
SAMPLED_ROWS = 256
#: rows the chunked oracle (every row of a large case, its column sums) takes at a time, per thread
CHUNK_ELEMENTS = 1 << 21
#: the coherence checks judge y on rows drawn at random, at most this many elements of them: the conformance
#: cases' sizes, for which their statistics are made (a coherent scale is in every row it touches; a case's
#: rounding bias is plain in half a million elements)
COHERENCE_ELEMENTS = 1 << 19


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
    a case above :data:`SAMPLE_ABOVE` elements, drawn at random (then dweight and dbias, sums over every row,
    come from the chunked oracle of every row, :attr:`column_sums`). A fused operation's case holds its residual
    and ``dresidual_out`` too, sampled with x and dy."""

    case: Case
    seed: int
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        case = self.case
        m, n = case.rows, case.hidden
        size = m * n
        #: the operation's entry: what the case hands over and what it returns
        self.operation = operations.of(case.norm)
        #: the rows verified against the oracle (None: every row), drawn from the OS's entropy
        self.rows = None
        if size > SAMPLE_ABOVE and m > SAMPLED_ROWS:
            self.rows = np.array(sorted(secrets.SystemRandom().sample(range(m), SAMPLED_ROWS)), dtype=np.int64)
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
        self.checked_inputs, self.checked_dy, self.checked_dresidual = self._on_rows(self.rows)
        #: a reordering keeps each row's weight: rows share weights in groups (per-head weights) of this many
        self.groups = 1 if self.inputs.weight is None else max(1, int(np.size(self.inputs.weight)) // n)

    def _on_rows(self, rows: np.ndarray | None) -> tuple[Inputs, np.ndarray, np.ndarray | None]:
        """The inputs, dy and dresidual_out of ``rows`` alone (all of them for None), as a case of that many rows."""
        if rows is None:
            return self.inputs, self.dy, self.dresidual
        case, m, n = self.case, self.case.rows, self.case.hidden
        sub = dataclasses.replace(case, shape=(len(rows), *case.normalized_shape))
        pick = lambda a: None if a is None else np.asarray(a).reshape(m, n)[rows].reshape(sub.shape)
        inputs = dataclasses.replace(self.inputs, case=sub, x=pick(self.inputs.x), residual=pick(self.inputs.residual))
        return inputs, pick(self.dy), pick(self.dresidual)

    @property
    def sampled(self) -> str:
        """"" when every row is verified, else what was (for the row's message)."""
        if self.rows is None:
            return ""
        first = "dsum" if self.operation.fuses else "dx"
        return (f"verified on {len(self.rows)} of {self.case.rows} rows drawn at random (y, {first}), every row by the "
                f"chunked oracle on the last call (y), dweight and dbias in full")

    @property
    def hosts(self) -> dict[str, np.ndarray | None]:
        """The host arrays by name (:func:`handed`: x, the residual, weight, bias, dy, dresidual_out, those the
        operation has; weight or bias may be None)."""
        return self.reordered(None)

    def reordered(self, order: np.ndarray | None) -> dict[str, np.ndarray | None]:
        """:attr:`hosts` with the rows of x, the residual, dy and dresidual_out in ``order`` (row ``r`` of the result
        is row ``order[r]`` of the case; weight and bias unchanged; None: the case's own order): a call's inputs that
        no cache keyed on the arrays, their shape or their contents has seen, judged against the oracle of the
        case's own rows (:meth:`restore`)."""
        every = {"x": self.inputs.x, "residual": self.inputs.residual, "weight": self.inputs.weight,
                 "bias": self.inputs.bias, "dy": self.dy, "dresidual_out": self.dresidual}
        hosts = {name: every[name] for name in handed(self.operation)}
        if order is None:
            return hosts
        return {name: a if a is None or name in ("weight", "bias") else self._take(a, order)
                for name, a in hosts.items()}

    def _take(self, a: np.ndarray, order: np.ndarray) -> np.ndarray:
        """``a``'s rows in ``order``, in ``a``'s own layout (a transposed case's x stays transposed)."""
        m, n = self.case.rows, self.case.hidden
        taken = np.ascontiguousarray(a).reshape(m, n)[order].reshape(a.shape)
        if a.flags.c_contiguous:
            return taken
        out = np.empty_like(a)  # the same strides as a (NumPy keeps a's memory order)
        out[...] = taken
        return out

    def restore(self, got: np.ndarray, order: np.ndarray | None) -> np.ndarray:
        """A row-wise output of inputs in ``order`` (:meth:`reordered`) in the case's own row order."""
        if order is None:
            return got
        m, n = self.case.rows, self.case.hidden
        restored = np.empty((m, n), dtype=np.asarray(got).dtype)
        restored[order] = np.reshape(got, (m, n))
        return restored.reshape(np.shape(got))

    def draw_order(self) -> np.ndarray | None:
        """An order of the case's rows no backend can predict (from 128 bits of the OS's entropy), keeping each row's
        weight: whole groups of per-head rows are moved (:attr:`groups`). None for a case with one group of rows,
        which has no other order: its inputs stay as they are."""
        blocks = self.case.rows // self.groups
        if blocks < 2:
            return None
        shuffled = np.random.default_rng(secrets.randbits(128)).permutation(blocks)
        return (shuffled[:, None] * self.groups + np.arange(self.groups)).reshape(-1)

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
        operation's dsum = dresidual_out + dx, under ``normbench.check.fused.dsum_bound``), dweight, dbias; for a
        sampled case, dx on the sampled rows and dweight and dbias of every row (:attr:`column_sums`)."""
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
        checks = tuple(zip(names, (first, grads.dweight, grads.dbias), bounds))
        if self.rows is None:
            return checks
        sums = self.column_sums
        return (checks[0], ("dweight", *sums["dweight"]), ("dbias", *sums["dbias"]))

    def chunks(self) -> list[np.ndarray]:
        """The case's rows in chunks of about :data:`CHUNK_ELEMENTS` elements (whole groups of per-head rows)."""
        step = max(self.groups, (CHUNK_ELEMENTS // max(self.case.hidden, 1)) // self.groups * self.groups)
        return [np.arange(start, min(start + step, self.case.rows)) for start in range(0, self.case.rows, step)]

    def map_chunks(self, work) -> list:
        """``work(rows)`` on every chunk, in threads (NumPy's loops release the GIL), in order."""
        with ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1))) as pool:
            return list(pool.map(work, self.chunks()))

    @property
    def column_sums(self) -> dict[str, tuple[np.ndarray | None, np.ndarray | None]]:
        """dweight and dbias of every row, ``{what: (float64 reference, bound)}`` (None where the case has no such
        parameter): the oracle's backward chunk by chunk, its sums and its accumulation terms added up over the
        chunks, the bound then :func:`normbench.check.error_model.column_sum_bound` of the case's M rows (computed
        once per case: every direction and backend of it shares them)."""
        return self._get("column_sums", self._column_sums)

    def _column_sums(self) -> dict:
        case, m = self.case, self.case.rows

        def work(rows):
            inputs, dy, _ = self._on_rows(rows)
            ref = conformance.reference(inputs)
            grads = oracle.backward(dy, ref)
            return (grads.dweight, grads.dbias, error_model.dweight_accumulation(dy, ref, case.dtype, rows=m),
                    error_model.dbias_accumulation(dy, ref, case.dtype, rows=m))

        parts = self.map_chunks(work)
        dweight, dbias, dw_acc, db_acc = (sum(part[i] for part in parts) for i in range(4))
        given = self.inputs
        return {"dweight": (None, None) if given.weight is None else
                (dweight, error_model.column_sum_bound(dweight, dw_acc, case.params)),
                "dbias": (None, None) if given.bias is None else
                (dbias, error_model.column_sum_bound(dbias, db_acc, case.params))}


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.shape(a) == np.shape(b)
                                         and conformance.same_bits(a, b))


@dataclass
class Verifier:
    """Checks a direction's outputs: copies, of the backend's own array type, sharing no memory they must not
    (the module doc); an output bit-identical to one already verified (in the case's row order) needs no second
    comparison."""

    backend: Backend
    reference: Reference
    direction: str
    #: the case's outputs, in its row order, as last verified against the oracle
    verified: list[np.ndarray | None] | None = None
    #: the last judged call's outputs, held: no later output may share their memory
    _held: list = field(default_factory=list)
    #: seconds each check spent bringing the outputs to the host (``to_numpy`` and the copies)
    conversions: list[float] = field(default_factory=list)
    _cache: dict = field(default_factory=dict)

    def _forward_outputs(self, outputs: Any) -> list[tuple[str, Any, str | None]]:
        """The forward's outputs, (name, native, dtype): y; a fused operation's y and residual_out."""
        case, backend, op = self.reference.case, self.backend, self.reference.operation
        if not op.fuses:
            return [("y", outputs, case.dtype)]
        y, out = conformance.fused_outputs(backend, case, op, outputs)  # a tuple of (y, residual_out), or what it was
        return [("y", y, case.dtype), ("residual_out", out, case.residual_type)]

    def _outputs(self, outputs: Any) -> list[tuple[str, Any, str | None]]:
        """Every output, (name, native, dtype) (y, a fused operation's residual_out; dx or dsum, dweight, dbias)."""
        case = self.reference.case
        if self.direction == "forward":
            return self._forward_outputs(outputs)
        y, grads = (None, outputs) if self.direction == "backward" else outputs
        named = [] if y is None else self._forward_outputs(y)
        dx, dw, db = grads
        named.append((self.reference.operation.gradients[0], dx, case.residual_type or case.dtype))
        return named + [("dweight", dw, case.params), ("dbias", db, case.params)]

    def _host(self, named: list, native: Mapping[str, Any], written: Mapping[str, Any], order: np.ndarray | None,
              gather: bool) -> list[np.ndarray | None]:
        """Outputs as host copies in the case's row order, their type, memory, shapes and dtypes checked; with
        ``gather``, a sampled case's row-wise outputs (y, residual_out, dx, dsum) only on its sampled rows, taken
        from the backend's array before it is brought to the host (where its type can index: a GPU case's full
        outputs are gigabytes)."""
        case, backend = self.reference.case, self.backend
        avoid = Extents()
        for name, array in native.items():
            avoid.add(f"the input {name}", array)
        for name, array in {**self.reference.hosts, **written}.items():
            avoid.add(f"the harness's array {name}", array)
        for name, array in self._held:
            avoid.add(f"the output {name} of an earlier call", array)
        kinds = {type(a) for a in native.values() if a is not None}
        host = []
        started = timing._perf_counter()
        given = self.reference.inputs
        for name, got, dtype in named:
            if got is not None and kinds and type(got) not in kinds:
                made = " or ".join(sorted(f"{t.__module__}.{t.__qualname__}" for t in kinds))
                raise ConformanceError(f"{backend.name} {case.id}: {name} is a {type(got).__module__}."
                                       f"{type(got).__qualname__}, not the array type the backend's asarray makes "
                                       f"({made}): a lazy or deferred output (a subclass or wrapper whose work happens "
                                       f"when it is read, outside the timed call) is refused")
            if name in ("dweight", "dbias"):
                parameter = given.weight if name == "dweight" else given.bias
                shape = case.weight_shape if name == "dweight" else case.normalized_shape
                host.append(conformance.check_gradient(name, got, parameter, backend, case, shape, dtype, avoid))
                continue
            rows = self._gathered(got, order) if gather and got is not None and self.reference.rows is not None else None
            if rows is None:
                whole = conformance.host_array(name, got, backend, case.shape, dtype, avoid=avoid)
                host.append(self.reference.restore(whole, order))
                continue
            shared = avoid.overlapping(got)
            if shared:
                raise ConformanceError(aliasing_message(backend.name, name, shared))
            avoid.add(f"its own output {name}", got)
            host.append(conformance.host_array(name, rows, backend, self.reference.checked_inputs.case.shape, dtype,
                                               exact_shape=False))
        self.conversions.append(timing._perf_counter() - started)
        self._held = [(name, got) for name, got, _ in named if got is not None]
        return host

    def _gathered(self, got: Any, order: np.ndarray | None) -> Any:
        """The sampled rows of a row-wise output of inputs in ``order``, in the case's order, still the backend's own
        array (its type indexing on its device); None where its type cannot (then the whole output is brought to the
        host)."""
        ref = self.reference
        index = ref.rows if order is None else np.argsort(order)[ref.rows]
        try:
            picked = got.reshape(ref.case.rows, ref.case.hidden)[index]
        except Exception:
            return None
        return picked if np.shape(picked) == (len(index), ref.case.hidden) else None

    def _checked_rows(self, got: np.ndarray) -> np.ndarray:
        """``got`` as the oracle saw its inputs: every row, or the sampled ones (in the sampled case's shape; an
        output gathered on those rows already is as it is)."""
        ref = self.reference
        if ref.rows is None:
            return got
        shape = ref.checked_inputs.case.shape
        if np.size(got) == int(np.prod(shape)):
            return np.reshape(got, shape)
        return np.reshape(got, (-1, ref.case.hidden))[ref.rows].reshape(shape)

    def _compare(self, what: str, got: np.ndarray | None, want: np.ndarray | None, bound: np.ndarray | None) -> None:
        if got is None or want is None:
            return
        ref = self.reference
        per_row = what in ("y", "dx", "dsum")  # the row's mean and sigma explain y and dx, not column sums
        rows = lambda a: np.reshape(np.asarray(a, dtype=np.float64), (-1, ref.case.hidden))
        got = self._checked_rows(got) if per_row else got
        worst = worst_violation(rows(got), rows(want), rows(bound))
        if worst is not None:
            notes = () if what == "y" else conformance.gradient_notes(ref.checked_inputs)
            if ref.operation.fuses and what != "y":
                notes += (f"dresidual_out: normbench.core.cases.make_dresidual(<case {ref.case.id}>, seed={ref.seed}); "
                          f"dsum = dresidual_out + dx, the gradient of x and of the residual",)
            if ref.rows is not None and per_row:
                notes += (f"{ref.sampled}: row {worst.index[0]} here is row {ref.rows[worst.index[0]]} of the case",)
            elif ref.rows is not None:
                notes += ("the column sum of every row of the case, by the chunked float64 oracle",)
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
                                   f"case, drawn at random") from None

    def check(self, outputs: Any, native: Mapping[str, Any] | None = None, written: Mapping[str, Any] | None = None,
              order: np.ndarray | None = None, every_row: bool = False) -> None:
        """Raise :class:`ConformanceError` unless ``outputs`` are right: outputs of a call handed ``native`` (by
        name; ``written``: outputs of the backend's own it was handed back) on the case's rows in ``order``
        (:meth:`Reference.reordered`). ``every_row``: a sampled case's y is also checked on every row (the chunked
        oracle: :meth:`every_row`)."""
        named = self._outputs(outputs)
        host = self._host(named, native or {}, written or {}, order, gather=not every_row)
        # an output bit-identical to the one verified last (in the case's row order) is as right as it was: only
        # the others are compared (reordered rows change a column sum's bits, never a row's)
        fresh = [self.verified is None or not _same(a, b) for a, b in zip(host, self.verified or host)]
        ref, rest = self.reference, list(zip(host, fresh))
        if self.direction != "backward":
            if ref.operation.fuses:
                (y, new_y), (residual_out, new_out) = rest.pop(0), rest.pop(0)
                if new_y or new_out:
                    self._check_fused_forward(y, residual_out)
                if every_row:
                    self.every_row(y, residual_out)
            else:
                y, new_y = rest.pop(0)
                if new_y:
                    self._compare("y", y, ref.forward.y, ref.forward_bound)
                if every_row:
                    self.every_row(y)
            if new_y:  # the structure of the error no element's bound sees (a coherent scale, offset or rounding
                # bias), as the conformance suites judge it: a cheaper path taken only at these sizes is caught here
                self._coherence(self._checked_rows(y))
        if self.direction != "forward":
            for (what, want, bound), (got, new) in zip(ref.backward_checks, rest):
                if new:
                    self._compare(what, got, want, bound)
        self.verified = host

    def _coherence(self, checked_y: np.ndarray) -> None:
        """The coherence checks (``conformance.forward_coherence``) on y's rows among those the oracle holds, drawn at
        random once per verifier, at most :data:`COHERENCE_ELEMENTS` of them."""
        ref = self.reference
        checked = ref.checked_inputs.case.rows
        if "coherence" not in self._cache:
            count = min(checked, max(1, COHERENCE_ELEMENTS // max(ref.case.hidden, 1)))
            positions = np.array(sorted(secrets.SystemRandom().sample(range(checked), count)), dtype=np.int64)
            rows = positions if ref.rows is None else ref.rows[positions]
            inputs = ref._on_rows(rows)[0]
            self._cache["coherence"] = positions, inputs, conformance.reference(inputs)
        positions, inputs, forward = self._cache["coherence"]
        y = np.reshape(checked_y, (checked, ref.case.hidden))[positions].reshape(inputs.case.shape)
        conformance.forward_coherence(self.backend, inputs, y, forward)

    def every_row(self, y: np.ndarray, residual_out: np.ndarray | None = None) -> None:
        """A sampled case's y (and a fused one's residual_out) on every row: the oracle and its bound chunk by chunk,
        in threads, as the conformance suites judge them (nothing for a case verified in full already)."""
        ref = self.reference
        if ref.rows is None:
            return
        m, n = ref.case.rows, ref.case.hidden

        def work(rows):
            inputs = ref._on_rows(rows)[0]
            pick = lambda a: np.reshape(a, (m, n))[rows].reshape(inputs.case.shape)
            forward = conformance.reference(inputs)
            try:
                if residual_out is not None:
                    run = conformance.ForwardRun(pick(y), None, (), (), pick(residual_out))
                    conformance.check_forward_values(self.backend, inputs, run, forward)
                    return None
                worst = worst_violation(oracle.rows_view(pick(y), ref.case.normalized_shape), forward.y,
                                        error_model.forward_bound(forward, ref.case.dtype))
                return None if worst is None else conformance.describe("y", worst, inputs, self.backend, forward, ())
            except ConformanceError as exc:
                return str(exc)

        for rows, failure in zip(ref.chunks(), ref.map_chunks(work)):
            if failure:
                raise ConformanceError(f"{failure}\n  every row of the case, by the chunked oracle: the row numbers "
                                       f"here count from row {rows[0]} of the case (its rows {rows[0]}..{rows[-1]})")

    def check_inputs(self, native: Mapping[str, Any], written: Mapping[str, Any] | None = None,
                     order: np.ndarray | None = None) -> None:
        """The backend's inputs still hold what it was given: the conformance checks' own test
        (:class:`normbench.check.handover.Handover`), its words and its first changed element; the inputs are
        :meth:`Reference.reordered` (x, a fused operation's residual, weight, bias, dy, dresidual_out) and what the
        backend wrote and was handed back (``written``)."""
        kept = {**self.reference.reordered(order), **(written or {})}
        names = tuple(name for name in kept if name in native)
        arrays = tuple(native[name] for name in names)
        pristine = tuple(None if a is None else kept[name] for name, a in zip(names, arrays))
        conformance.Handover(self.backend, names, arrays, pristine).check(
            f"the {self.direction}", f"{self.backend.name} {self.reference.case.id}: ")
