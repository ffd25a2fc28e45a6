"""Run a backend on a case and judge it against the oracle under the error model.

Every check raises :class:`ConformanceError` with a diagnosis a kernel author
can act on: which output, the worst element (row, column), its value, the
reference, the bound, the case and seed. The pytest plugin adds the one-line
reproduction command.

Every call of a backend here (:func:`run_forward`, :func:`run_backward`) hands it its arrays through
:class:`Handover`, which keeps the harness's own copy of each and, right after the call, fails a backend
that wrote into one (``layer_norm modified its input x in place``) before anything is computed from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from normbench.check import coherence, error_model, fused, hypotheses, oracle, quantized
from normbench.check.aliasing import Extents, aliasing_message
from normbench.check.outcomes import HISTOGRAM_BINS, HISTOGRAM_WIDTH, Histogram
from normbench.check.worst import ConformanceError, Worst, worst_violation
from normbench.core import cases, operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, Inputs
from normbench.core.dtypes import dtype_name, host_dtype
from normbench.core.interrupts import pytest_outcome
from normbench.core.safe_text import safe


def skip_reason(backend: Backend, case: Case, *, backward: bool = False) -> str | None:
    """Why ``case`` does not apply to ``backend`` (None when it does)."""
    missing = operations.missing_reason(backend, case.norm)
    if missing:
        return missing
    for dtype in dict.fromkeys((case.dtype, case.params)):
        if dtype not in backend.dtypes:
            return f"backend {backend.name!r} does not support {dtype} (it declares {', '.join(backend.dtypes)})"
    if case.layout != "contiguous" and not backend.strided:
        return f"backend {backend.name!r} has no strided arrays (strided = False), so layout {case.layout} does not apply"
    if case.dy_broadcast and not backend.strided:
        return (f"backend {backend.name!r} has no strided arrays (strided = False), so a stride-0 (broadcast) dy "
                f"does not apply")
    if backward and not backend.has_backward:
        return f"backend {backend.name!r} has no backward (has_backward = False)"
    option_problem = operations.of(case.norm).option_problem(backend, case.options, backward)
    if option_problem:
        return option_problem
    if case.per_head and not backend.per_head_weights:
        return (f"backend {backend.name!r} takes a weight of normalized_shape only (per_head_weights = False), so one "
                f"weight per head, of shape {case.weight_shape}, does not apply")
    limit_problem = backend.limits_for(case.norm).case_problem(
        len(case.shape), case.eps_value, case.layout, case.dy_broadcast, case.hidden, dtype=case.dtype,
        residual_dtype=case.residual_type, param_dtype=case.params if case.affine != "none" else None,
        qdtype=case.qdtype, scale_ub=case.scale_ub, normalized_dims=len(case.normalized_shape))
    if limit_problem:
        return f"outside backend {backend.name!r}'s documented limits: {limit_problem}"
    limit = backend.max_elements
    if limit is not None and case.rows * case.hidden > limit:
        return (f"case has {case.rows * case.hidden:,} elements, more than backend {backend.name!r} affords on "
                f"{backend.device} (max_elements = {limit:,})")
    return None


def describe(what: str, worst: Worst, inputs: Inputs, backend: Backend, ref: oracle.Forward | None,
             notes: tuple[str, ...] = ()) -> str:
    """A diagnosis: the worst element of ``what``, the bound, the row's conditioning
    (when ``ref`` is given and the index is a row's), and ``notes``, one line each."""
    lines = [
        f"{backend.name} {inputs.case.id} (seed {inputs.seed}): {what}[{worst.where}] = {worst.value:.9g}, "
        f"float64 reference {worst.reference:.9g}, |error| {worst.error:.3g} {worst.excess()}; {worst.out_of_bound()}",
    ]
    if ref is not None and ref.x.shape[0] and len(worst.index) >= 1:
        row = worst.index[0]
        lines.append(f"  row {row}: mean {ref.mean[row]:.6g}, sigma {np.sqrt(ref.var[row]):.3g}, "
                     f"eps {inputs.case.eps_value:g}, N {ref.x.shape[1]}, dtype {inputs.case.dtype}, "
                     f"params {inputs.case.params} ({inputs.case.affine})")
    lines += [f"  {note}" for note in notes]
    lines.append(f"  inputs: normbench.core.cases.make_inputs(<case {inputs.case.id}>, seed={inputs.seed})")
    return "\n".join(lines)


def _fail(what: str, got, ref_values, bound, inputs, backend, ref, notes: tuple[str, ...] = (), *,
          dy: np.ndarray | None = None, bound_for=None) -> None:
    """Raise a :class:`ConformanceError` describing the worst element of ``what`` out of
    ``bound``, with the known bug hypotheses that explain it (computed only then: the
    passing path costs one comparison). ``bound_for(dtype)``: the same bound in another
    dtype's precision, for hypotheses about precision; ``dy``: for backward outputs."""
    __tracebackhide__ = True
    worst = worst_violation(got, ref_values, bound)
    if worst is not None:
        explanation = hypotheses.explain(what, got, bound, inputs, dy=dy, bound_for=bound_for,
                                         runtime_note=getattr(backend, "runtime_note", None),
                                         failing_ratio=worst.ratio)
        raise ConformanceError(describe(what, worst, inputs, backend, ref, explanation + tuple(notes)))


def host_array(what: str, got, backend: Backend, shape, dtype: str | None = None, *,
               exact_shape: bool = True, avoid: Extents | None = None) -> np.ndarray:
    """A backend's output ``got`` as a NumPy host array (in the dtype it holds): a copy, taken now, that nothing the
    backend does later can change; or :class:`ConformanceError` naming ``what`` and the backend when it is not what
    was asked. ``avoid``: what the output must not share memory with (:mod:`normbench.check.aliasing`: the inputs,
    the harness's arrays, an earlier call's outputs); the output is added to it, so that the call's next output
    must not share memory with this one either.

    How strict, explicitly: ``exact_shape`` True: its shape must be ``shape``; False:
    any shape of as many elements, reshaped to ``shape``. ``dtype`` (a normbench dtype
    name): its dtype must be that one; None: any. Finiteness is never checked here:
    the comparisons judge non-finite values.

    >>> from normbench import get_registry
    >>> numpy = get_registry().create("numpy")
    >>> host_array("y", numpy.asarray(np.zeros((2, 3), np.float32)), numpy, (2, 3), "float32").shape
    (2, 3)
    >>> host_array("y", numpy.asarray(np.zeros((2, 3))), numpy, (6,), exact_shape=False).shape
    (6,)
    >>> host_array("y", numpy.asarray(np.zeros(3)), numpy, (2, 3))
    Traceback (most recent call last):
    ...
    normbench.check.worst.ConformanceError: numpy: y has shape (3,), expected (2, 3)
    """
    __tracebackhide__ = True
    if got is None:
        raise ConformanceError(f"{backend.name}: {what} is None, expected an array of shape {tuple(shape)}")
    shared = avoid.overlapping(got) if avoid is not None else None
    if shared:
        raise ConformanceError(aliasing_message(backend.name, what, shared))
    try:
        view = np.asarray(backend.to_numpy(got))
    except Exception as exc:
        raise ConformanceError(f"{backend.name}: {what}: to_numpy failed on {type(got).__name__}: {exc}") from exc
    shared = avoid.overlapping(view) if avoid is not None else None
    if shared:
        raise ConformanceError(aliasing_message(backend.name, what, shared))
    if avoid is not None:
        avoid.add(f"its own output {what}", got)
    host = np.array(view, copy=True)  # the output as it is now: a buffer reused or written later changes no verdict
    if not exact_shape:
        if host.size != int(np.prod(shape, dtype=np.int64)):
            raise ConformanceError(f"{backend.name}: {what} has shape {tuple(host.shape)}, expected {tuple(shape)} "
                                   f"(or any shape of as many elements)")
        host = host.reshape(shape)
    elif tuple(host.shape) != tuple(shape):
        raise ConformanceError(f"{backend.name}: {what} has shape {tuple(host.shape)}, expected {tuple(shape)}")
    if dtype is not None and host.dtype != host_dtype(dtype):
        try:
            got_name = dtype_name(host.dtype)
        except ValueError:
            got_name = str(host.dtype)
        raise ConformanceError(f"{backend.name}: {what} has dtype {got_name}, expected {dtype}")
    return host


# -- what a backend is handed: its arrays, the harness's pristine copies, and the check ------------------


@dataclass
class Handover:
    """The arrays the harness hands a backend for one call: each converted with ``asarray``
    (:attr:`native`, what the backend gets) and, taken before that, the harness's own copy of it
    (:attr:`pristine`, contiguous, never handed to anyone). After the call, :meth:`check` converts each
    native array back with ``to_numpy`` and compares it with its copy, bitwise, a NaN equal to a NaN: a
    backend that wrote into an argument fails right there, naming the argument, before any reference is
    computed from it (a NumPy backend's ``asarray`` may return the host array itself, so a write into
    the argument is a write into the harness's inputs). The one place the check is written:
    :func:`run_forward` and :func:`run_backward`, and so every check built on them, hand their arrays over
    on one, as should anything else that calls a backend to judge it.

    >>> from normbench import get_registry
    >>> numpy = get_registry().create("numpy")
    >>> handed = Handover.of(numpy, x=np.zeros((2, 3), np.float32), weight=None)
    >>> handed["x"].flags.writeable  # a NumPy array is handed read-only: a write fails where it is made (call)
    False
    >>> handed["x"].base[1, :2] = np.nan  # what a backend must not do, through the memory underneath
    >>> handed.check("layer_norm")
    Traceback (most recent call last):
    ...
    normbench.check.worst.ConformanceError: layer_norm modified its input x in place (2 of 6 elements changed); \
a backend must not write into its arguments
      first at x[1, 0]: 0 before the call, nan after
    """

    backend: Backend
    #: the arguments' names, in the order given
    names: tuple[str, ...]
    #: the backend's arrays (None for an absent argument)
    native: tuple
    #: the harness's copies, taken before ``asarray`` (None for an absent argument)
    pristine: tuple

    @classmethod
    def of(cls, backend: Backend, **hosts: np.ndarray | None) -> Handover:
        """Copy each host array, then convert it with ``backend.asarray`` (None stays None); a native array that is
        a NumPy array (a NumPy backend's, which may be the host array itself) is handed read-only, so that a write
        into it fails where it is made (:meth:`call`), even one the backend would undo before returning."""
        pristine = tuple(None if a is None else a.copy() for a in hosts.values())
        native = tuple(None if a is None else read_only(backend.asarray(a)) for a in hosts.values())
        return cls(backend, tuple(hosts), native, pristine)

    def call(self, entry: str, context: str, function, *arguments: tuple):
        """``function(*arguments)``, the call of ``entry`` on this handover's arrays (each of ``arguments`` a tuple
        holding some of :attr:`native`). A write into a read-only input fails there (NumPy's ValueError): the call
        is then made once more on writable copies, to name the input it writes, and that is the failure (a backend
        that undid its write before returning is told so)."""
        __tracebackhide__ = True
        try:
            return function(*arguments)
        except ValueError as exc:
            if not wrote_read_only(exc):
                raise
            said = f"handed read-only, the write failed where it was made ({exc})"
        except BaseException as exc:
            decided = pytest_outcome(exc)
            if not decided:
                raise
            raise ConformanceError(f"{context}{entry} called {decided}() inside its call ({safe(str(exc), 500)}): a "
                                   f"backend says what it cannot run through its operations, dtypes and limits "
                                   f"(normbench.Limits, checked before the call), never by deciding the test's "
                                   f"outcome itself") from None
        writable = tuple(None if n is None or not isinstance(n, np.ndarray) else np.array(n, order="K")
                         for n in self.native)
        swap = {id(n): w for n, w in zip(self.native, writable) if w is not None}
        again = Handover(self.backend, self.names, tuple(w if w is not None else n
                                                          for n, w in zip(self.native, writable)), self.pristine)
        try:
            function(*(tuple(swap.get(id(a), a) for a in args) for args in arguments))
            self.backend.synchronize()
            again.check(entry, context)
        except ConformanceError as named:
            raise ConformanceError(f"{named}; {said}") from None
        except Exception:  # it fails otherwise on writable copies: the write is what it did first
            pass
        raise ConformanceError(f"{context}{entry} wrote into an input it was handed, and undid the write before "
                               f"returning; {said}. A backend must not write into its arguments") from None

    def __getitem__(self, name: str):
        """The backend's array of the argument ``name``."""
        return self.native[self.names.index(name)]

    def extents(self) -> Extents:
        """What the call's outputs must not share memory with: the arguments and the harness's copies of them."""
        held = Extents()
        for name, native, pristine in zip(self.names, self.native, self.pristine):
            held.add(f"the input {name}", native).add(f"the harness's copy of the input {name}", pristine)
        return held

    def check(self, entry: str, context: str = "") -> None:
        """After the call of ``entry``: each argument still holds the bits it was handed (a NaN equal to a
        NaN), or :class:`ConformanceError` ``<context>layer_norm modified its input x in place (12 of 1,600
        elements changed); a backend must not write into its arguments`` and the first changed element.
        Costs one ``to_numpy`` and one comparison per argument."""
        __tracebackhide__ = True
        for name, before, native in zip(self.names, self.pristine, self.native):
            if before is None:
                continue
            try:
                after = np.asarray(self.backend.to_numpy(native))
            except Exception as exc:
                raise ConformanceError(f"{context}{entry}'s input {name}: to_numpy failed after the call on "
                                       f"{type(native).__name__}: {exc}") from exc
            change = changed(before, after)
            if change is None:
                continue
            head = f"{context}{entry} modified its input {name} in place"
            tail = "a backend must not write into its arguments"
            if isinstance(change, str):
                raise ConformanceError(f"{head} ({change}); {tail}")
            count, at = int(change.sum()), np.unravel_index(int(np.argmax(change)), change.shape)
            where = ", ".join(map(str, at))
            raise ConformanceError(f"{head} ({count:,} of {before.size:,} elements changed); {tail}\n"
                                   f"  first at {name}[{where}]: {_value(before[at])} before the call, "
                                   f"{_value(np.ascontiguousarray(after)[at])} after")


def changed(before: np.ndarray, after: np.ndarray) -> np.ndarray | str | None:
    """Where ``after`` holds other bits than ``before``, a NaN equal to any NaN: None where nowhere, else a
    boolean mask of their shape (or, when their shapes or dtypes differ, that in words).

    >>> changed(np.float32([1, np.nan, 3]), np.float32([1, -np.nan, 3])) is None
    True
    >>> changed(np.float32([1, 0, 3]), np.float32([1, -0.0, 4])).tolist()
    [False, True, True]
    """
    if before.shape != after.shape or before.dtype != after.dtype:
        return (f"it was handed with shape {tuple(before.shape)}, dtype {before.dtype}, and has shape "
                f"{tuple(after.shape)}, dtype {after.dtype} after the call")
    before, after = np.ascontiguousarray(before), np.ascontiguousarray(after)
    if before.dtype.itemsize not in (1, 2, 4, 8):
        return None if before.tobytes() == after.tobytes() else np.ones(before.shape, dtype=bool)
    unsigned = np.dtype(f"u{before.dtype.itemsize}")
    differ = before.view(unsigned) != after.view(unsigned)
    if not differ.any():
        return None
    if before.dtype.kind in "fV":  # floats, and ml_dtypes' bfloat16
        with np.errstate(all="ignore"):
            differ &= ~(np.isnan(before.astype(np.float64)) & np.isnan(after.astype(np.float64)))
    return differ if differ.any() else None


def wrote_read_only(exc: BaseException) -> bool:
    """NumPy's error for a write into a read-only array: a backend wrote into an input handed to it read-only."""
    return isinstance(exc, ValueError) and "read-only" in str(exc)


def read_only(native):
    """``native`` as the backend gets it: a NumPy array as a read-only view of itself (the harness's own array, which
    a NumPy backend's ``asarray`` may return, keeps its flags); any other array type as it is."""
    if not isinstance(native, np.ndarray):
        return native
    view = native.view()
    view.flags.writeable = False
    return view


def _value(v) -> str:
    try:
        return f"{float(v):.9g}"
    except (TypeError, ValueError):
        return repr(v)


def _context(backend: Backend, inputs: Inputs) -> str:
    return f"{backend.name} {inputs.case.id} (seed {inputs.seed}): "


@dataclass
class ForwardRun:
    """What a backend produced for one case, as host arrays."""

    y: np.ndarray
    statistics: tuple[np.ndarray, np.ndarray] | None  # float64 (M,) each
    native: tuple  # the native (x, residual, weight, bias) handed to the backend (residual None: a plain one)
    originals: tuple  # copies of the host (x, residual, weight, bias), taken before the call (``Handover.pristine``)
    #: a fused operation's residual_out (the residual's dtype), else None
    residual_out: np.ndarray | None = None
    #: the backend's own output objects (y, a fused operation's residual_out), held so that a later call's outputs
    #: are checked not to share their memory (:mod:`normbench.check.aliasing`)
    outputs: tuple = ()


def forward_entry(backend: Backend, norm: operations.Operation, statistics: bool) -> str:
    """What :func:`run_forward` calls, for its messages: ``layer_norm``; with the statistics, the backend's own
    ``layer_norm_with_statistics`` where it defines one, else ``layer_norm`` and, where it defines them,
    ``layer_norm_statistics``."""
    if not statistics or not norm.statistics:
        return norm.entry
    both = f"{norm.name}_with_statistics"
    if getattr(type(backend), both, None) not in (None, getattr(Backend, both, None)):
        return both
    own = getattr(type(backend), norm.statistics_entry, None)
    return (norm.entry if own is None or own is getattr(Backend, norm.statistics_entry, None)
            else f"{norm.entry} or {norm.statistics_entry}")


def hand_over(backend: Backend, inputs: Inputs) -> tuple[Handover, tuple]:
    """The case's arrays handed over (:class:`Handover`) and the forward's ``args`` built on them: x (and a fused
    case's residual), normalized_shape, weight, bias, eps, and a quantized case's scale (its float32 value), qdtype and
    scale_ub; a parameter the operation does not take is left out."""
    case = inputs.case
    handed = Handover.of(backend, x=inputs.x, residual=inputs.residual, weight=inputs.weight, bias=inputs.bias)
    args = operations.of(case.norm).arguments(
        x=handed["x"], residual=handed["residual"], normalized_shape=case.normalized_shape, weight=handed["weight"],
        bias=handed["bias"], eps=case.eps, scale=None if case.scale is None else float(np.float32(case.scale)),
        qdtype=case.qdtype, scale_ub=case.scale_ub)
    return handed, args


def _avoid(handed: Handover, earlier) -> Extents:
    """What a call's outputs must not share memory with: its inputs, the harness's copies, ``earlier``'s outputs."""
    avoid = handed.extents()
    if earlier is not None:
        for name, output in earlier.outputs:
            avoid.add(f"the previous call's output {name}", output)
    return avoid


def run_forward(backend: Backend, inputs: Inputs, *, statistics: bool = True,
                earlier: ForwardRun | None = None) -> ForwardRun:
    """Convert inputs, run the forward once and bring results back: the operation's forward with its
    statistics (``Operation.forward_with_statistics``: LayerNorm's ``layer_norm_with_statistics``, y and the
    statistics from one call), or its entry point alone with ``statistics`` False (or an operation that
    saves none). The inputs are handed over on a :class:`Handover`: a backend that wrote into one fails
    here, before its outputs are read. Each output is a copy, and must not share memory with the inputs or
    with ``earlier``'s outputs (a run of the same case before this one)."""
    __tracebackhide__ = True
    case = inputs.case
    norm = operations.of(case.norm)
    handed, args = hand_over(backend, inputs)
    if statistics and not case.options:
        y, stats = handed.call(forward_entry(backend, norm, statistics), _context(backend, inputs),
                               lambda a: norm.forward_with_statistics(backend, a), args)
    else:
        y, stats = handed.call(norm.entry, _context(backend, inputs), lambda a: norm.forward(backend, a, case.options),
                               args), None
    backend.synchronize()
    handed.check(forward_entry(backend, norm, statistics), _context(backend, inputs))
    avoid = _avoid(handed, earlier)
    if norm.fuses:
        y, out = fused_outputs(backend, case, norm, y)
        return ForwardRun(host_array("y", y, backend, case.shape, case.dtype, avoid=avoid), None, handed.native,
                          handed.pristine,
                          host_array("residual_out", out, backend, case.shape, case.residual_type, avoid=avoid),
                          outputs=(("y", y), ("residual_out", out)))
    y_host = host_array("y", y, backend, case.shape, case.dtype, avoid=avoid)
    if stats is None:
        return ForwardRun(y_host, None, handed.native, handed.pristine, outputs=(("y", y),))
    mean, rstd = (np.asarray(backend.to_numpy(s)) for s in stats)
    if mean.size != case.rows or rstd.size != case.rows:
        raise ConformanceError(f"{backend.name}: statistics have {mean.size} and {rstd.size} values, "
                               f"expected one per row ({case.rows})")
    as64 = (np.asarray(mean, dtype=np.float64).reshape(-1), np.asarray(rstd, dtype=np.float64).reshape(-1))
    return ForwardRun(y_host, as64, handed.native, handed.pristine, outputs=(("y", y),))


def fused_outputs(backend: Backend, case: Case, norm: operations.Operation, out) -> tuple:
    """A fused forward's ``(y, residual_out)``, or :class:`ConformanceError` saying what it returned instead."""
    __tracebackhide__ = True
    if not isinstance(out, (tuple, list)) or len(out) != len(norm.outputs):
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise ConformanceError(f"{backend.name} {case.id}: {norm.entry} returned {got}; it must return the tuple "
                               f"({', '.join(norm.outputs)}) (an in-place library: copy x and the residual first, "
                               f"docs/fused.md)")
    return tuple(out)


def reference(inputs: Inputs) -> oracle.Forward:
    """The oracle's forward of ``inputs`` (a fused case's: of its ``residual_out``, :func:`normbench.check.fused.normalized`).
    The oracle copies what it reads, so the reference shares no memory with the arrays a backend is handed:
    :func:`check_forward` and :func:`check_backward` compute it before calling the backend, from the inputs as the
    harness made them."""
    case = inputs.case
    x = fused.normalized(inputs).x
    return oracle.forward(x, case.normalized_shape, inputs.weight, inputs.bias, case.eps_value, case.norm,
                          case.weight_offset)


def check_residual_out(backend: Backend, inputs: Inputs, got: np.ndarray) -> None:
    """A fused forward's ``residual_out`` bit for bit: ``x + residual`` rounded once to the residual's dtype
    (``normbench.check.fused``), a NaN equal to any NaN."""
    __tracebackhide__ = True
    want = fused.residual_out(inputs)
    change = changed(want, np.ascontiguousarray(got))
    if change is None:
        return
    count, at = int(change.sum()), np.unravel_index(int(np.argmax(change)), change.shape)
    exact = fused.exact_sum(inputs)[at]
    dtype = inputs.case.residual_type
    truncated = "" if changed(fused.truncated_sum(inputs), np.ascontiguousarray(got)) is not None else (
        f"; every element is the exact sum truncated (rounded toward zero) to {dtype}: a conversion that drops the "
        f"low bits instead of rounding to nearest")
    raise ConformanceError(
        f"{_context(backend, inputs)}residual_out[{', '.join(map(str, at))}] = {_value(got[at])}, expected "
        f"{_value(want[at])}: x + residual = {_value(inputs.x[at])} + {_value(inputs.residual[at])} = {exact:.17g} "
        f"rounded once to {dtype} ({count:,} of {want.size:,} elements differ); residual_out is checked bit for bit, "
        f"one rounding of an exact sum (a sum not written, written unrounded, rounded twice, or of other operands)"
        f"{truncated}\n"
        f"  inputs: normbench.core.cases.make_inputs(<case {inputs.case.id}>, seed={inputs.seed})")


def check_forward_values(backend: Backend, inputs: Inputs, run: ForwardRun, ref: oracle.Forward | None = None) -> None:
    """y, and the statistics if exposed, within the error model's bounds (``ref``: the oracle's
    forward of ``inputs``, computed when not given); a fused case's ``residual_out`` bit for bit, first, and its y
    within the bound of the normalization of ``residual_out`` or of the unrounded sum (either convention is correct:
    ``normbench.check.fused``)."""
    __tracebackhide__ = True
    ref = reference(inputs) if ref is None else ref
    case = inputs.case
    y = oracle.rows_view(run.y, case.normalized_shape)
    if operations.of(case.norm).fuses:
        check_residual_out(backend, inputs, run.residual_out)
        bound = error_model.forward_bound(ref, case.dtype)
        if worst_violation(y, ref.y, bound) is None:
            return
        exact = fused.unrounded_reference(inputs)
        other = worst_violation(y, exact.y, error_model.forward_bound(exact, case.dtype))
        if other is None:  # it normalizes the unrounded sum: the other correct convention
            return
        note = (f"nor within the bound of the unrounded sum's normalization (the other correct convention): "
                f"y[{other.where}] off by {other.error:.3g}, {other.ratio:.3g}x its bound",)
        _fail("y", y, ref.y, bound, fused.normalized(inputs), backend, ref, note,
              bound_for=lambda dtype: error_model.forward_bound(ref, dtype))
        return
    _fail("y", y, ref.y, error_model.forward_bound(ref, case.dtype), inputs, backend, ref,
          bound_for=lambda dtype: error_model.forward_bound(ref, dtype))
    if run.statistics is not None:
        mean, rstd = run.statistics
        for what, got, want, bound in (("mean", mean, ref.mean, error_model.mean_bound),
                                       ("rstd", rstd, ref.rstd, error_model.rstd_bound)):
            _fail(what, got[:, None], want[:, None], bound(ref, case.dtype)[:, None], inputs, backend, ref,
                  bound_for=lambda dtype, bound=bound: bound(ref, dtype)[:, None])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN payloads included), for determinism and untouched inputs."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# -- properties beyond tolerance: determinism and batch invariance --------------------------

#: properties beyond the error model's tolerance that the suites measure on every backend: ``deterministic``
#: (the same input twice gives the same bits: forward y, backward dx, dweight and dbias) and ``batch-invariant``
#: (a row's output has the same bits whatever the batch size and its position in the batch)
DETERMINISTIC, BATCH_INVARIANT = "deterministic", "batch-invariant"
PROPERTIES: tuple[str, ...] = (DETERMINISTIC, BATCH_INVARIANT)
#: what is required unless ``--normbench-require`` says otherwise: determinism, which every check of
#: normbench has always required (a nondeterministic output fails); batch invariance is reported only
DEFAULT_REQUIRED: tuple[str, ...] = (DETERMINISTIC,)
#: what typically breaks each property, said when a required one is violated
CAUSES: dict[str, str] = {
    DETERMINISTIC: "atomics, or a split reduction whose partial sums are combined in an order that depends on "
                   "thread or block scheduling (float addition is not associative)",
    BATCH_INVARIANT: "a kernel, tiling, block size or split of the reduction chosen by the batch size (the number "
                     "of rows) or by a row's position, so the same row is summed in another order; or "
                     "nondeterminism (see the property deterministic)",
}


def user_property_key(name: str) -> str:
    """The key a property's verdict has in a pytest item's ``user_properties``: ``normbench_batch_invariant``."""
    return "normbench_" + name.replace("-", "_")


@dataclass
class Properties:
    """Where the checks report the properties they measure, and which of them are required.

    :meth:`report` records a verdict, ``"yes"`` or ``"no: what differed"``, in :attr:`measured` (a test
    measuring a property twice keeps the first violation) and, when given, in ``sink`` (a pytest item's
    ``user_properties``: the plugin hands the suites one, and ``normbench.front.runner`` reads it back); a
    violated property that is ``required`` raises :class:`ConformanceError` saying which property,
    what differed and what typically causes it. Without one, the checks use ``Properties()``: the
    default requirements, recorded nowhere.

    >>> props = Properties(required=())
    >>> props.report(BATCH_INVARIANT, False, "row 0 computed alone differs", None, None)
    >>> props.measured
    {'batch-invariant': 'no: row 0 computed alone differs'}
    """

    required: tuple[str, ...] = DEFAULT_REQUIRED
    sink: list | None = None
    measured: dict[str, str] = field(default_factory=dict)
    #: measurements that are no verdicts (:func:`error_structure`'s columns), by conformance column name
    values: dict[str, str | float] = field(default_factory=dict)
    #: where :meth:`record` also keeps them (the plugin gives the item's ``user_properties``, as for ``sink``)
    values_sink: list | None = None

    def record(self, values: dict[str, str | float]) -> None:
        """Keep ``values`` (conformance column -> value) in :attr:`values` and, when given, in ``values_sink``
        under :func:`user_property_key` of each name (``normbench_error_histogram``), replacing earlier ones."""
        self.values.update(values)
        if self.values_sink is not None and values:
            keys = {user_property_key(name) for name in values}
            self.values_sink[:] = [p for p in self.values_sink if p[0] not in keys] + [
                (user_property_key(k), v) for k, v in values.items()]

    def report(self, name: str, holds: bool, detail: str, backend: Backend | None, inputs: Inputs | None) -> None:
        __tracebackhide__ = True
        if name not in PROPERTIES:
            raise ValueError(f"unknown property {name!r}; properties: {', '.join(PROPERTIES)}")
        verdict = "yes" if holds else f"no: {detail}"
        if self.measured.get(name, "yes") == "yes":
            self.measured[name] = verdict
            if self.sink is not None:
                key = user_property_key(name)
                self.sink[:] = [p for p in self.sink if p[0] != key] + [(key, verdict)]
        if not holds and name in self.required:
            who = "" if backend is None or inputs is None else \
                f"{backend.name} {inputs.case.id} (seed {inputs.seed}): "
            raise ConformanceError(
                f"{who}required property {name} violated: {detail}\n"
                f"  typical cause: {CAUSES[name]}\n"
                f"  required by --normbench-require (default: {','.join(DEFAULT_REQUIRED)}); "
                f"--normbench-require=none records it as a property instead of failing")


# -- the structure of the forward error, recorded for the report (never a verdict) -----------------

#: the conformance columns a forward test records about y's error (:func:`error_structure`), in
#: ``user_properties`` under ``normbench_<column>``, read back by ``normbench.front.runner``
ERROR_STRUCTURE: tuple[str, ...] = ("error_histogram", "nearest_histogram", "coherence_scale", "coherence_offset",
                                    "coherence_toward_zero", "coherence_downward")
#: every conformance column a test records as a measurement: the error structure, and a quantized output's codes
#: (``check_quantized_forward``: exact, allowed and wrong)
RECORDED: tuple[str, ...] = ERROR_STRUCTURE + ("codes",)
#: the output dtypes whose error is measured: not float64, whose oracle is itself float64 (its error in float64
#: ulps would be the oracle's own rounding as much as the kernel's)
MEASURED_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
#: coherence.Statistics.ratios() keys -> column (the scale's slope across rows counts as the scale)
_RATIO_COLUMNS = {"scale": "coherence_scale", "scale-slope": "coherence_scale", "offset": "coherence_offset",
                  "toward-zero": "coherence_toward_zero", "downward": "coherence_downward"}


def histogram(values: np.ndarray, bins: int = HISTOGRAM_BINS, width: float = HISTOGRAM_WIDTH) -> Histogram:
    """``values`` (finite, in ulps) counted in ``bins`` bins of ``width`` centred on 0, the rest below or above.

    >>> str(histogram(np.array([0.0, 0.05, -0.3, 0.5, 9.0]), bins=5, width=0.25))
    'b=5x0.25;u=0;o=1;c=0,1,2,0,1'
    """
    half = bins * width / 2
    index = np.floor((np.asarray(values, dtype=np.float64) + half) / width)
    inside = (index >= 0) & (index < bins)
    counts = np.bincount(index[inside].astype(np.int64), minlength=bins)
    return Histogram(width, int(np.count_nonzero(index < 0)), int(np.count_nonzero(index >= bins)),
                     tuple(int(c) for c in counts))


def error_structure(ref: oracle.Forward, y: np.ndarray, dtype: str) -> dict[str, str | float]:
    """What the report draws of ``y``'s error ((M, N) rows, the backend's output) against ``ref``, for an output
    dtype of :data:`MEASURED_DTYPES` (else nothing), as conformance columns:

    * ``error_histogram``: over the elements where y and y_ref are finite, ``(y - y_ref)*sign(y_ref)/ulp(y_ref)``
      (``coherence.ulp``: the output dtype's spacing at the reference; y_ref = 0 counts as positive), in
      :func:`histogram`'s bins (33 of 1/8 ulp centred on 0, the rest below or above). Signed toward zero, not
      downward: a truncating kernel's plain signed error is symmetric (positive outputs err down, negative ones
      up), its error toward zero is all on one side (-0.5 ulp on average);
    * ``nearest_histogram``: the same for ``coherence.round_nearest(y_ref, dtype)``, the reference rounded once
      to nearest: what a correct round-to-nearest kernel gives at best;
    * ``coherence_scale``, ``coherence_offset``, ``coherence_toward_zero``, ``coherence_downward``: each
      statistic's worst |value|/allowance (``coherence.forward_statistics(...).ratios()``), absent where it
      does not apply.

    Costs a pass over y for the histograms and one ``coherence.forward_statistics`` (which the coherence check
    computes again: it takes no precomputed statistics)."""
    if dtype not in MEASURED_DTYPES:
        return {}
    y64 = np.asarray(y, dtype=np.float64)
    out: dict[str, str | float] = {}
    with np.errstate(all="ignore"):
        finite = np.isfinite(y64) & np.isfinite(ref.y)
        if finite.any():
            exact = ref.y[finite]
            toward = np.where(exact < 0, -1.0, 1.0) / coherence.ulp(exact, dtype)
            out["error_histogram"] = str(histogram((y64[finite] - exact) * toward))
            out["nearest_histogram"] = str(histogram((coherence.round_nearest(exact, dtype) - exact) * toward))
    for key, ratio in coherence.forward_statistics(ref, y64, dtype).ratios().items():
        column = _RATIO_COLUMNS.get(key)
        if column is not None and np.isfinite(ratio):
            out[column] = max(float(f"{ratio:.4g}"), float(out.get(column, 0.0)))  # 4 digits: a ratio, not a datum
    return out


def bit_differences(a: np.ndarray, b: np.ndarray, nan_equal: bool = False) -> str:
    """How ``b``'s bits differ from ``a``'s, in words ("" when they do not): the elements and bits that
    differ and the largest difference in value. ``nan_equal``: a NaN equals a NaN, whatever its payload.

    >>> bit_differences(np.float32([1, 2, 3]), np.float32([1, np.nextafter(np.float32(2), np.float32(3)), 3]))
    '1 of 3 elements differ (1 bit), by at most 2.38e-07 (at [1])'
    """
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape {a.shape} dtype {a.dtype} vs shape {b.shape} dtype {b.dtype}"
    if not a.size or a.tobytes() == b.tobytes():
        return ""
    unsigned = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if unsigned is None:
        return "their bytes differ"
    xor = a.view(unsigned) ^ b.view(unsigned)
    differ = xor != 0
    if nan_equal and a.dtype.kind in "fcV":
        with np.errstate(all="ignore"):
            differ &= ~(np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    count = int(differ.sum())
    if not count:
        return ""
    bits = int(np.unpackbits(xor[differ].view(np.uint8)).sum())
    text = f"{count} of {a.size} elements differ ({bits} bit{'s' if bits != 1 else ''})"
    try:
        with np.errstate(all="ignore"):
            gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
        gap = np.where(differ & np.isfinite(gap), gap, -1.0)
        at = np.unravel_index(int(np.argmax(gap)), a.shape)
        if gap[at] >= 0:
            text += f", by at most {gap[at]:.3g} (at [{', '.join(map(str, at))}])"
    except (TypeError, ValueError):
        pass
    return text


def check_deterministic(backend: Backend, inputs: Inputs, run: ForwardRun, properties: Properties | None = None) -> None:
    """``layer_norm`` on the same input gives the bits of ``run`` (``layer_norm_with_statistics``'s
    y: the same function, by the contract, or the same call twice): the property ``deterministic``,
    reported to ``properties`` (a failure when it is required, as it is by default)."""
    __tracebackhide__ = True
    properties = properties if properties is not None else Properties()
    again = run_forward(backend, inputs, statistics=False, earlier=run)  # copies, and not the first run's memory
    differs = bit_differences(run.y, again.y)
    if not differs and run.residual_out is not None:
        differs = bit_differences(run.residual_out, again.residual_out)
        differs = differs and f"{differs} (in residual_out)"
    detail = ""
    if differs:
        overridden = (inputs.case.norm == "layer_norm"
                      and type(backend).layer_norm_with_statistics is not Backend.layer_norm_with_statistics)
        detail = (f"the same input twice gave a different y: {differs}"
                  + ("; layer_norm_with_statistics must return layer_norm's y" if overridden else ""))
    properties.report(DETERMINISTIC, not differs, detail, backend, inputs)


def check_forward(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Every forward check of one case: inputs untouched (:class:`Handover`, right after the call, before
    anything is judged; the reference is computed before the call), values, statistics, shape and dtype; the property
    ``deterministic`` (reported to ``properties``; by default required); then, last,
    the structure of y's signed error (a common scale or offset per row, a rounding bias per case:
    :mod:`normbench.check.coherence`), so that a known deviation of that structure (the Triton
    interpreter's truncation to bfloat16) hides no other check. Given ``properties``, y's error structure
    (:func:`error_structure`) is recorded there first, before any check can fail."""
    __tracebackhide__ = True
    if operations.of(inputs.case.norm).quant:  # a quantized output: judged code by code
        check_quantized_forward(backend, inputs, properties)
        return
    ref = reference(inputs)
    run = run_forward(backend, inputs)
    if properties is not None:
        properties.record(error_structure(ref, oracle.rows_view(run.y, inputs.case.normalized_shape),
                                          inputs.case.dtype))
    check_forward_values(backend, inputs, run, ref)
    check_deterministic(backend, inputs, run, properties)
    forward_coherence(backend, inputs, run.y, ref)


def forward_coherence(backend: Backend, inputs: Inputs, y: np.ndarray, ref: oracle.Forward) -> None:
    """y's signed error has no coherent structure (:func:`normbench.check.coherence.check_forward_coherence`); a
    fused operation's judged against the normalization of its stored sum, or of the unrounded one (either
    rounding of the sum is correct: docs/fused.md). The conformance suites and the throughput verifier both call
    this."""
    __tracebackhide__ = True
    if not operations.of(inputs.case.norm).fuses:
        coherence.check_forward_coherence(backend, inputs, y, ref)
        return
    try:
        coherence.check_forward_coherence(backend, fused.normalized(inputs), y, ref)
    except ConformanceError:  # a kernel that normalizes the unrounded sum is judged against that sum's normalization
        coherence.check_forward_coherence(backend, dataclasses.replace(inputs, x=fused.exact_sum(inputs)), y,
                                          fused.unrounded_reference(inputs))


# -- a quantized output (docs/quantized.md): run here, judged code by code by normbench.check.quantized ---------


def run_quantized(backend: Backend, inputs: Inputs) -> dict[str, np.ndarray]:
    """The backend's outputs of a quantized case as host arrays: ``q`` (x's shape, the format's host dtype),
    ``scales`` (dynamic: one float32 per row) and ``residual_out`` (fused), its inputs handed over and checked
    untouched (:class:`Handover`)."""
    __tracebackhide__ = True
    case = inputs.case
    op = operations.of(case.norm)
    handed, args = hand_over(backend, inputs)
    out = handed.call(op.entry, _context(backend, inputs), lambda a: op.forward(backend, a), args)
    backend.synchronize()
    handed.check(op.entry, _context(backend, inputs))
    outputs = fused_outputs(backend, case, op, out) if len(op.outputs) > 1 else (out,)
    got = dict(zip(op.outputs, outputs))
    fmt = quantized.qformat(case.qdtype)
    avoid = handed.extents()
    host = {"q": host_array("q", got["q"], backend, case.shape, avoid=avoid)}
    if host["q"].dtype != fmt.host:
        raise ConformanceError(f"{backend.name}: q has dtype {host['q'].dtype}, expected {fmt.name}")
    if "scales" in got:
        host["scales"] = host_array("scales", got["scales"], backend, (case.rows,), "float32", exact_shape=False,
                                    avoid=avoid)
    if "residual_out" in got:
        host["residual_out"] = host_array("residual_out", got["residual_out"], backend, case.shape, case.residual_type,
                                          avoid=avoid)
    return host


def check_quantized_forward(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Every check of a quantized case: inputs untouched, residual_out bit for bit (fused), the codes (and the dynamic
    scales) as the module doc derives; then the property ``deterministic`` (q, scales and residual_out the same bits
    twice)."""
    __tracebackhide__ = True
    first = run_quantized(backend, inputs)
    if "residual_out" in first:
        check_residual_out(backend, inputs, first["residual_out"])
    head = _context(backend, inputs)
    properties = properties if properties is not None else Properties()
    record = lambda codes: properties.record({"codes": codes})  # noqa: E731
    if operations.of(inputs.case.norm).quant == "static":
        quantized.check_static(inputs, first["q"], head, record)
    else:
        quantized.check_dynamic(inputs, first["q"], first["scales"], head, record)
    again = run_quantized(backend, inputs)
    differs = next((f"{bit_differences(first[k], again[k])} (in {k})" for k in first
                    if bit_differences(first[k], again[k])), "")
    properties.report(DETERMINISTIC, not differs, differs and f"the same input twice gave different outputs: {differs}",
                      backend, inputs)


def check_rows_independent(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Each of a few rows (the first, the middle, the last) computed alone agrees with the same row
    in the batch within twice the bound (each may deviate from the reference by one bound): a
    failure otherwise, always. The same runs, and one more (those rows in reverse order, a smaller
    batch in which each sits at another position), measure the property ``batch-invariant``: each
    row bit-identical to the batch's (NaN equal to NaN, whatever its payload), reported to
    ``properties`` (not required by default)."""
    __tracebackhide__ = True
    properties = properties if properties is not None else Properties()
    case = inputs.case
    if case.rows == 0:
        return
    ns = case.normalized_shape
    full = oracle.rows_view(run_forward(backend, inputs, statistics=False).y, ns)
    ref = reference(inputs)
    bound = error_model.forward_bound(ref, case.dtype)
    x_rows = inputs.x.reshape(-1, *ns)
    picked = sorted({0, case.rows // 2, case.rows - 1})

    def rows_of(order: list[int]) -> np.ndarray:
        sub = Inputs(Case(case.family, (len(order), *ns), ns, case.dtype, case.dist, case.eps, case.affine,
                          case.param_dtype, norm=case.norm), inputs.seed, x_rows[order].copy(), inputs.weight, inputs.bias)
        return oracle.rows_view(run_forward(backend, sub, statistics=False).y, ns)

    variants = []  # (how the row was computed, row, its result)
    for row in picked:
        variants.append((f"row {row} computed alone", row, rows_of([row])[0]))
    if len(picked) > 1:
        order = picked[::-1]
        batch = rows_of(order)
        variants += [(f"row {row} at position {pos} of a batch of {len(order)} (rows {order})", row, batch[pos])
                     for pos, row in enumerate(order)]
    differing = []
    for how, row, got in variants:
        worst = worst_violation(got, full[row], 2 * bound[row])
        if worst is not None:
            raise ConformanceError(
                f"{backend.name} {case.id} (seed {inputs.seed}): {how} differs from the same row in the batch "
                f"at column {worst.index[0]}: {worst.value:.9g} vs {worst.reference:.9g}, beyond twice the bound "
                f"{worst.bound:.3g}; a row's result must not depend on other rows")
        differs = bit_differences(full[row], got, nan_equal=True)
        if differs:
            differing.append(f"{how} differs from the batch's row {row}: {differs}")
    properties.report(BATCH_INVARIANT, not differing, "; ".join(differing), backend, inputs)


# -- backward ------------------------------------------------------------------------------


@dataclass
class BackwardRun:
    """What a backend's ``layer_norm_backward`` produced for one case, as host arrays."""

    dx: np.ndarray                 # x's shape and dtype (a fused operation's dsum: the residual's dtype)
    dweight: np.ndarray | None     # normalized_shape, the parameters' dtype; None without weight
    dbias: np.ndarray | None
    native: tuple                  # the native arrays handed to the backend (``Handover.native``)
    originals: tuple               # copies of the host (dy, x, weight, bias), taken before the call (``Handover.pristine``)
    #: the backend's own gradient objects by name, held so that a later call's are checked not to share their memory
    outputs: tuple = ()


def check_gradient(what: str, got, given, backend: Backend, case: Case, shape, dtype: str,
                   avoid: Extents | None = None) -> np.ndarray | None:
    """One returned gradient: None exactly when its argument was None, else the right shape and dtype (a copy,
    sharing no memory with ``avoid``: :func:`host_array`)."""
    __tracebackhide__ = True
    argument = what[1:]
    if given is None:
        if got is not None:
            raise ConformanceError(f"{backend.name} {case.id}: {what} is a {type(got).__name__}, but {argument} was "
                                   f"None; return None as the gradient of an absent {argument}")
        return None
    if got is None:
        raise ConformanceError(f"{backend.name} {case.id}: {what} is None, but {argument} was given: a missing "
                               f"gradient (unslothai/unsloth#4533); return d(loss)/d({argument}) of shape {shape}")
    return host_array(what, got, backend, shape, dtype, avoid=avoid)


def run_backward(backend: Backend, inputs: Inputs, dy: np.ndarray, earlier: BackwardRun | None = None) -> BackwardRun:
    """Convert inputs and dy, call the operation's backward entry point (``layer_norm_backward``,
    ``rms_norm_backward``), check what it returns (the tuple of the operation's gradients: ``(dx, dweight,
    dbias)``, ``(dx, dweight)`` for RMSNorm; shapes; dtypes; None exactly for absent parameters). dy and the
    inputs are handed over on a :class:`Handover`: a backend that wrote into one fails here, first."""
    __tracebackhide__ = True
    case = inputs.case
    norm = operations.of(case.norm)
    if norm.fuses:
        handed = Handover.of(backend, dy=dy, dresidual_out=cases.make_dresidual(case, inputs.seed),
                             residual_out=fused.residual_out(inputs), weight=inputs.weight, bias=inputs.bias)
        args = norm.backward_arguments(residual_out=handed["residual_out"], normalized_shape=case.normalized_shape,
                                       weight=handed["weight"], bias=handed["bias"], eps=case.eps)
        cotangents = (handed["dy"], handed["dresidual_out"])
    else:
        handed = Handover.of(backend, dy=dy, x=inputs.x, weight=inputs.weight, bias=inputs.bias)
        args = norm.arguments(x=handed["x"], normalized_shape=case.normalized_shape, weight=handed["weight"],
                              bias=handed["bias"], eps=case.eps)
        cotangents = (handed["dy"],)
    out = handed.call(norm.backward_entry, _context(backend, inputs),
                      lambda a, c: norm.backward(backend, a, c, case.options), args, cotangents)
    backend.synchronize()
    handed.check(norm.backward_entry, _context(backend, inputs))
    arity = len(norm.gradients)
    if not isinstance(out, (tuple, list)) or len(out) != arity:
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        absent = " and ".join(g.removeprefix("d") for g in norm.gradients[1:])
        wanted = f"the tuple ({', '.join(norm.gradients)}), None for an absent {absent.replace(' and ', ' or ')}"
        raise ConformanceError(f"{backend.name} {case.id}: {norm.backward_entry} returned {got}; it must return {wanted}")
    out = tuple(out) + (None,) * (3 - arity)
    first = norm.gradients[0]
    if out[0] is None:
        raise ConformanceError(f"{backend.name} {case.id}: {first} is None; return d(loss)/d(x) of x's shape "
                               f"{case.shape}")
    avoid = _avoid(handed, earlier)
    dx = host_array(first, out[0], backend, case.shape, case.residual_type or case.dtype, avoid=avoid)
    dweight = check_gradient("dweight", out[1], inputs.weight, backend, case, case.weight_shape, case.params, avoid)
    dbias = check_gradient("dbias", out[2], inputs.bias, backend, case, case.normalized_shape, case.params, avoid)
    return BackwardRun(dx, dweight, dbias, handed.native, handed.pristine,
                       outputs=tuple((n, g) for n, g in zip((first, "dweight", "dbias"), out[:3]) if g is not None))


#: the last backward :func:`check_backward` ran in this process: ``(backend, case id, seed, run)``
_last_backward: list = []


def recent_backward(backend: Backend, inputs: Inputs, dy: np.ndarray) -> BackwardRun:
    """The backward of ``inputs`` and ``dy`` on ``backend``: the run :func:`check_backward` made last in
    this process when it was of this backend, case and seed, and of the same bits and layouts of dy, x,
    weight and bias; otherwise a new :func:`run_backward`. The suites run a case's identities right after
    its value checks (``suites/conftest.py`` orders them), so the identities judge the same run without
    calling the backend again."""
    __tracebackhide__ = True
    hosts = (dy, inputs.x, inputs.weight, inputs.bias)
    if _last_backward:
        held, case_id, seed, layouts, run = _last_backward[0]
        if (held is backend and case_id == inputs.case.id and seed == inputs.seed and layouts == _layouts(hosts)
                and all(a is None or same_bits(a, b) for a, b in zip(hosts, run.originals))):
            return run
    return run_backward(backend, inputs, dy)


def _layouts(hosts) -> tuple:
    """Each host array's shape, strides and dtype (the copies in ``BackwardRun.originals`` are contiguous)."""
    return tuple(None if a is None else (a.shape, a.strides, a.dtype) for a in hosts)


def gradient_notes(inputs: Inputs) -> tuple[str, ...]:
    """The lines a gradient diagnosis adds: how to rebuild dy."""
    return (f"dy: normbench.core.cases.make_dy(<case {inputs.case.id}>, seed={inputs.seed}) (nonzero row means)",)


def check_backward_values(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun,
                          ref: oracle.Forward | None = None, grads: oracle.Backward | None = None) -> None:
    """dx, dweight and dbias within the backward error model's bounds of the oracle's closed
    form; with N = 1, LayerNorm's dweight 0 up to one rounding per row (``error_model.n1_dweight_bound``).
    ``ref`` and ``grads``: the oracle's forward and backward of these inputs, computed when not given."""
    __tracebackhide__ = True
    case = inputs.case
    ref = reference(inputs) if ref is None else ref
    grads = oracle.backward(dy, ref) if grads is None else grads
    notes = gradient_notes(inputs)
    if operations.of(case.norm).fuses:
        dresidual = oracle.rows_view(cases.make_dresidual(case, inputs.seed), case.normalized_shape)
        with np.errstate(invalid="ignore", over="ignore"):
            dsum = dresidual + grads.dx
        bounds_in = lambda dtype, i: fused.dsum_bound(dy, ref, grads, dresidual, dsum, dtype, case.params)[i]
        bound_dx, bound_dw, bound_db = fused.dsum_bound(dy, ref, grads, dresidual, dsum, case.residual_type, case.params)
        notes += (f"dresidual_out: normbench.core.cases.make_dresidual(<case {case.id}>, seed={inputs.seed}); "
                  f"dsum = dresidual_out + dx, the gradient of x and of the residual",)
        _fail("dsum", oracle.rows_view(run.dx, case.normalized_shape), dsum, bound_dx, fused.normalized(inputs),
              backend, ref, notes, dy=dy, bound_for=lambda dtype: bounds_in(dtype, 0))
    else:
        bound_dx, bound_dw, bound_db = error_model.backward_bounds(dy, ref, grads, case.dtype, case.params)
        bounds_in = lambda dtype, i: error_model.backward_bounds(dy, ref, grads, dtype, case.params)[i]
        _fail("dx", oracle.rows_view(run.dx, case.normalized_shape), grads.dx, bound_dx, inputs, backend, ref, notes,
              dy=dy, bound_for=lambda dtype: bounds_in(dtype, 0))
    column = (f"each element of dweight and dbias is a sum over the {case.rows} rows; bound = output rounding "
              f"+ k(M) accumulation of the sum of magnitudes",)
    for i, (what, got, exact, bound) in enumerate((("dweight", run.dweight, grads.dweight, bound_dw),
                                                   ("dbias", run.dbias, grads.dbias, bound_db)), start=1):
        if got is not None:
            ns = case.weight_shape if what == "dweight" else case.normalized_shape  # per head: (heads, head_dim)
            _fail(what, np.asarray(got, dtype=np.float64), exact.reshape(ns), bound.reshape(ns), inputs, backend,
                  None, column + notes, dy=dy, bound_for=lambda dtype, i=i, ns=ns: bounds_in(dtype, i).reshape(ns))
    if case.hidden == 1 and run.dweight is not None and ref.centered:  # RMSNorm's N = 1 xhat is x/sqrt(x^2 + eps)
        bound = error_model.n1_dweight_bound(dy, ref, case.dtype, case.params)
        _fail("dweight", np.asarray(run.dweight, dtype=np.float64).reshape(1), np.zeros(1), bound, inputs, backend,
              None, ("N = 1: xhat = x - mean = 0 exactly, so dweight is 0 up to one rounding of mean*rstd per row "
                     "(normbench.check.error_model.n1_dweight_bound); the kernel mishandles N = 1 (pytorch/pytorch#188372)",)
              + notes, dy=dy)


def check_backward_deterministic(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun,
                                 properties: Properties | None = None) -> None:
    """The same input twice gives bit-identical dx, dweight and dbias: the property ``deterministic``,
    reported to ``properties`` (a failure when it is required, as it is by default)."""
    __tracebackhide__ = True
    properties = properties if properties is not None else Properties()
    again = run_backward(backend, inputs, dy, earlier=run)  # copies, and not the first run's memory
    differing = []
    first = operations.of(inputs.case.norm).gradients[0]
    for what, a, b in ((first, run.dx, again.dx), ("dweight", run.dweight, again.dweight),
                       ("dbias", run.dbias, again.dbias)):
        differs = "" if a is None else bit_differences(a, b)
        if differs:
            differing.append(f"the same input twice gave a different {what}: {differs}")
    properties.report(DETERMINISTIC, not differing, "; ".join(differing), backend, inputs)


def check_backward(backend: Backend, inputs: Inputs, dy: np.ndarray, properties: Properties | None = None) -> None:
    """Every backward check of one case: dy and the inputs untouched (:class:`Handover`, first), what is
    returned (a tuple, shapes, dtypes, None exactly for absent parameters), values; the property
    ``deterministic`` (reported to ``properties``; by default required); then, last, the structure of the
    gradients' signed error (dx's row scale, the rounding bias of dx, dweight and dbias in half dtypes:
    :mod:`normbench.check.coherence`), so that a known deviation of that structure hides no other check."""
    __tracebackhide__ = True
    _last_backward.clear()
    ref = reference(inputs)
    grads = oracle.backward(dy, ref)
    run = run_backward(backend, inputs, dy)
    _last_backward.append((backend, inputs.case.id, inputs.seed, _layouts((dy, inputs.x, inputs.weight, inputs.bias)),
                           run))
    check_backward_values(backend, inputs, dy, run, ref, grads)
    check_backward_deterministic(backend, inputs, dy, run, properties)
    if not operations.of(inputs.case.norm).fuses:  # dsum's error is dx's plus the add's; the plain cases judge dx's
        coherence.check_backward_coherence(backend, inputs, dy, run, ref, grads)
