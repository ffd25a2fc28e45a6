"""Run a backend on a case and judge it against the oracle under the error model.

Every check raises :class:`ConformanceError` with a diagnosis a kernel author
can act on: which output, the worst element (row, column), its value, the
reference, the bound, the case and seed. The pytest plugin adds the one-line
reproduction command.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.backend import Backend
from normbench.cases import Case, Inputs
from normbench.check import error_model, hypotheses, oracle
from normbench.check.worst import Worst, worst_violation
from normbench.dtypes import dtype_name, host_dtype


class ConformanceError(AssertionError):
    """A backend's output is wrong; the message says where and by how much."""


def skip_reason(backend: Backend, case: Case, *, backward: bool = False) -> str | None:
    """Why ``case`` does not apply to ``backend`` (None when it does)."""
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
    limit_problem = backend.limits.case_problem(len(case.shape), case.eps, case.layout, case.dy_broadcast)
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
                     f"eps {inputs.case.eps:g}, N {ref.x.shape[1]}, dtype {inputs.case.dtype}, "
                     f"params {inputs.case.params} ({inputs.case.affine})")
    lines += [f"  {note}" for note in notes]
    lines.append(f"  inputs: normbench.cases.make_inputs(<case {inputs.case.id}>, seed={inputs.seed})")
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
               exact_shape: bool = True) -> np.ndarray:
    """A backend's output ``got`` as a NumPy host array (in the dtype it holds), or
    :class:`ConformanceError` naming ``what`` and the backend when it is not what was asked.

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
    normbench.check.conformance.ConformanceError: numpy: y has shape (3,), expected (2, 3)
    """
    __tracebackhide__ = True
    if got is None:
        raise ConformanceError(f"{backend.name}: {what} is None, expected an array of shape {tuple(shape)}")
    try:
        host = np.asarray(backend.to_numpy(got))
    except Exception as exc:
        raise ConformanceError(f"{backend.name}: {what}: to_numpy failed on {type(got).__name__}: {exc}") from exc
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


@dataclass
class ForwardRun:
    """What a backend produced for one case, as host arrays."""

    y: np.ndarray
    statistics: tuple[np.ndarray, np.ndarray] | None  # float64 (M,) each
    native: tuple  # the native (x, weight, bias) handed to the backend
    originals: tuple  # copies of the host (x, weight, bias), taken before the call


def run_forward(backend: Backend, inputs: Inputs, *, statistics: bool = True) -> ForwardRun:
    """Convert inputs, run the forward once and bring results back: ``layer_norm_with_statistics``
    (y and the statistics from one call), or ``layer_norm`` alone with ``statistics`` False."""
    __tracebackhide__ = True
    case = inputs.case
    originals = tuple(None if a is None else a.copy() for a in (inputs.x, inputs.weight, inputs.bias))
    x, w, b = (None if a is None else backend.asarray(a) for a in (inputs.x, inputs.weight, inputs.bias))
    if statistics:
        y, stats = backend.layer_norm_with_statistics(x, case.normalized_shape, w, b, case.eps)
    else:
        y, stats = backend.layer_norm(x, case.normalized_shape, w, b, case.eps), None
    backend.synchronize()
    y_host = host_array("y", y, backend, case.shape, case.dtype)
    if stats is None:
        return ForwardRun(y_host, None, (x, w, b), originals)
    mean, rstd = (np.asarray(backend.to_numpy(s)) for s in stats)
    if mean.size != case.rows or rstd.size != case.rows:
        raise ConformanceError(f"{backend.name}: statistics have {mean.size} and {rstd.size} values, "
                               f"expected one per row ({case.rows})")
    as64 = (np.asarray(mean, dtype=np.float64).reshape(-1), np.asarray(rstd, dtype=np.float64).reshape(-1))
    return ForwardRun(y_host, as64, (x, w, b), originals)


def reference(inputs: Inputs) -> oracle.Forward:
    case = inputs.case
    return oracle.forward(inputs.x, case.normalized_shape, inputs.weight, inputs.bias, case.eps)


def check_forward_values(backend: Backend, inputs: Inputs, run: ForwardRun) -> None:
    """y, and the statistics if exposed, within the error model's bounds."""
    __tracebackhide__ = True
    ref = reference(inputs)
    case = inputs.case
    y = oracle.rows_view(run.y, case.normalized_shape)
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


def check_inputs_unmodified(backend: Backend, inputs: Inputs, run: ForwardRun) -> None:
    __tracebackhide__ = True
    for what, original, native in zip(("x", "weight", "bias"), run.originals, run.native):
        if original is not None and not same_bits(np.asarray(backend.to_numpy(native)), original):
            raise ConformanceError(f"{backend.name} {inputs.case.id}: layer_norm modified its input {what} in place")


def check_deterministic(backend: Backend, inputs: Inputs, run: ForwardRun) -> None:
    """``layer_norm`` on the same input gives the bits of ``run`` (``layer_norm_with_statistics``'s
    y: the same function, by the contract, or the same call twice)."""
    __tracebackhide__ = True
    again = run_forward(backend, inputs, statistics=False)
    if not same_bits(again.y, run.y):
        diff = np.flatnonzero(np.ascontiguousarray(again.y).view(np.uint8) != np.ascontiguousarray(run.y).view(np.uint8))
        overridden = type(backend).layer_norm_with_statistics is not Backend.layer_norm_with_statistics
        why = ("; a kernel must be deterministic for one input, and layer_norm_with_statistics must return "
               "layer_norm's y" if overridden else "; a kernel must be deterministic for one input")
        raise ConformanceError(f"{backend.name} {inputs.case.id}: the same input twice gave different outputs "
                               f"({diff.size} differing bytes){why}")


def check_forward(backend: Backend, inputs: Inputs) -> None:
    """Every forward property of one case: values, statistics, shape and dtype,
    inputs untouched, determinism."""
    __tracebackhide__ = True
    run = run_forward(backend, inputs)
    check_forward_values(backend, inputs, run)
    check_inputs_unmodified(backend, inputs, run)
    check_deterministic(backend, inputs, run)


def check_rows_independent(backend: Backend, inputs: Inputs) -> None:
    """Each of a few rows computed alone agrees with the same row in the batch,
    within twice the bound (each may deviate from the reference by one bound)."""
    __tracebackhide__ = True
    case = inputs.case
    full = oracle.rows_view(run_forward(backend, inputs, statistics=False).y, case.normalized_shape)
    ref = reference(inputs)
    bound = error_model.forward_bound(ref, case.dtype)
    x_rows = inputs.x.reshape(-1, *case.normalized_shape)
    for row in sorted({0, case.rows // 2, case.rows - 1}):
        single = Inputs(Case(case.family, (1, *case.normalized_shape), case.normalized_shape, case.dtype,
                             case.dist, case.eps, case.affine, case.param_dtype),
                        inputs.seed, x_rows[row:row + 1].copy(), inputs.weight, inputs.bias)
        alone = oracle.rows_view(run_forward(backend, single, statistics=False).y, case.normalized_shape)[0]
        worst = worst_violation(alone, full[row], 2 * bound[row])
        if worst is not None:
            raise ConformanceError(
                f"{backend.name} {case.id} (seed {inputs.seed}): row {row} computed alone differs from the same "
                f"row in the batch at column {worst.index[0]}: {worst.value:.9g} vs {worst.reference:.9g}, "
                f"beyond twice the bound {worst.bound:.3g}; a row's result must not depend on other rows")


# -- backward ------------------------------------------------------------------------------


@dataclass
class BackwardRun:
    """What a backend's ``layer_norm_backward`` produced for one case, as host arrays."""

    dx: np.ndarray                 # x's shape and dtype
    dweight: np.ndarray | None     # normalized_shape, the parameters' dtype; None without weight
    dbias: np.ndarray | None
    native: tuple                  # the native (dy, x, weight, bias) handed to the backend
    originals: tuple               # copies of the host (dy, x, weight, bias), taken before the call


def check_gradient(what: str, got, given, backend: Backend, case: Case, shape, dtype: str) -> np.ndarray | None:
    """One returned gradient: None exactly when its argument was None, else the right shape and dtype."""
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
    return host_array(what, got, backend, shape, dtype)


def run_backward(backend: Backend, inputs: Inputs, dy: np.ndarray) -> BackwardRun:
    """Convert inputs and dy, call ``layer_norm_backward``, check what it returns (a
    ``(dx, dweight, dbias)`` tuple; shapes; dtypes; None exactly for absent parameters)."""
    __tracebackhide__ = True
    case = inputs.case
    hosts = (dy, inputs.x, inputs.weight, inputs.bias)
    originals = tuple(None if a is None else a.copy() for a in hosts)
    native = tuple(None if a is None else backend.asarray(a) for a in hosts)
    out = backend.layer_norm_backward(native[0], native[1], case.normalized_shape, native[2], native[3], case.eps)
    backend.synchronize()
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise ConformanceError(f"{backend.name} {case.id}: layer_norm_backward returned {got}; it must return "
                               f"the tuple (dx, dweight, dbias), None for an absent weight or bias")
    if out[0] is None:
        raise ConformanceError(f"{backend.name} {case.id}: dx is None; return d(loss)/d(x) of x's shape {case.shape}")
    dx = host_array("dx", out[0], backend, case.shape, case.dtype)
    dweight = check_gradient("dweight", out[1], inputs.weight, backend, case, case.normalized_shape, case.params)
    dbias = check_gradient("dbias", out[2], inputs.bias, backend, case, case.normalized_shape, case.params)
    return BackwardRun(dx, dweight, dbias, native, originals)


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
    return (f"dy: normbench.cases.make_dy(<case {inputs.case.id}>, seed={inputs.seed}) (nonzero row means)",)


def check_backward_values(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """dx, dweight and dbias within the backward error model's bounds of the oracle's closed
    form; with N = 1, dweight 0 up to one rounding per row (``error_model.n1_dweight_bound``)."""
    __tracebackhide__ = True
    case = inputs.case
    ref = reference(inputs)
    grads = oracle.backward(dy, ref)
    bound_dx, bound_dw, bound_db = error_model.backward_bounds(dy, ref, grads, case.dtype, case.params)
    notes = gradient_notes(inputs)
    bounds_in = lambda dtype, i: error_model.backward_bounds(dy, ref, grads, dtype, case.params)[i]
    _fail("dx", oracle.rows_view(run.dx, case.normalized_shape), grads.dx, bound_dx, inputs, backend, ref, notes,
          dy=dy, bound_for=lambda dtype: bounds_in(dtype, 0))
    column = (f"each element of dweight and dbias is a sum over the {case.rows} rows; bound = output rounding "
              f"+ k(M) accumulation of the sum of magnitudes",)
    for i, (what, got, exact, bound) in enumerate((("dweight", run.dweight, grads.dweight, bound_dw),
                                                   ("dbias", run.dbias, grads.dbias, bound_db)), start=1):
        if got is not None:
            ns = case.normalized_shape
            _fail(what, np.asarray(got, dtype=np.float64), exact.reshape(ns), bound.reshape(ns), inputs, backend,
                  None, column + notes, dy=dy, bound_for=lambda dtype, i=i, ns=ns: bounds_in(dtype, i).reshape(ns))
    if case.hidden == 1 and run.dweight is not None:
        bound = error_model.n1_dweight_bound(dy, ref, case.dtype, case.params)
        _fail("dweight", np.asarray(run.dweight, dtype=np.float64).reshape(1), np.zeros(1), bound, inputs, backend,
              None, ("N = 1: xhat = x - mean = 0 exactly, so dweight is 0 up to one rounding of mean*rstd per row "
                     "(normbench.check.error_model.n1_dweight_bound); the kernel mishandles N = 1 (pytorch/pytorch#188372)",)
              + notes, dy=dy)


def check_backward_inputs_unmodified(backend: Backend, inputs: Inputs, run: BackwardRun) -> None:
    __tracebackhide__ = True
    for what, original, native in zip(("dy", "x", "weight", "bias"), run.originals, run.native):
        if original is not None and not same_bits(np.asarray(backend.to_numpy(native)), original):
            raise ConformanceError(f"{backend.name} {inputs.case.id}: layer_norm_backward modified its input "
                                   f"{what} in place")


def check_backward_deterministic(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """The same input twice gives bit-identical dx, dweight and dbias."""
    __tracebackhide__ = True
    again = run_backward(backend, inputs, dy)
    for what, a, b in (("dx", run.dx, again.dx), ("dweight", run.dweight, again.dweight),
                       ("dbias", run.dbias, again.dbias)):
        if a is not None and not same_bits(a, b):
            raise ConformanceError(f"{backend.name} {inputs.case.id}: the same input twice gave a different {what}; "
                                   f"a backward must be deterministic for one input (no order-dependent atomics)")


def check_backward(backend: Backend, inputs: Inputs, dy: np.ndarray) -> None:
    """Every backward property of one case: what is returned (a tuple, shapes, dtypes,
    None exactly for absent parameters), values, inputs untouched, determinism."""
    __tracebackhide__ = True
    _last_backward.clear()
    run = run_backward(backend, inputs, dy)
    _last_backward.append((backend, inputs.case.id, inputs.seed, _layouts((dy, inputs.x, inputs.weight, inputs.bias)),
                           run))
    check_backward_values(backend, inputs, dy, run)
    check_backward_inputs_unmodified(backend, inputs, run)
    check_backward_deterministic(backend, inputs, dy, run)
