"""The backward checks: a backend's vector-Jacobian product (dx, dweight, dbias; a fused operation's dsum) run on
a case through :class:`normbench.check.handover.Handover` and judged against the float64 oracle's under the error
model's bounds, with its determinism (:mod:`normbench.check.properties`). ``normbench.check.conformance`` holds the
forward checks and names these too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.check import backward_coherence, error_model, fused, oracle
from normbench.check.aliasing import Extents
from normbench.check.handover import Handover, extents_to_avoid, host_array
from normbench.check.judging import context, fail_beyond, reference
from normbench.check.properties import DETERMINISTIC, Properties, bit_differences, same_bits
from normbench.check.worst import ConformanceError
from normbench.core import cases, operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, Inputs


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
        args = case.backward_arguments({name: handed[name] for name in ("residual_out", "weight", "bias")})
        cotangents = (handed["dy"], handed["dresidual_out"])
    else:
        handed = Handover.of(backend, dy=dy, x=inputs.x, weight=inputs.weight, bias=inputs.bias)
        args = case.arguments({name: handed[name] for name in ("x", "weight", "bias")})
        cotangents = (handed["dy"],)
    out = handed.call(norm.backward_entry, context(backend, inputs),
                      lambda a, c: norm.backward(backend, a, c, case.options), args, cotangents)
    backend.synchronize()
    handed.check(norm.backward_entry, context(backend, inputs))
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
    avoid = extents_to_avoid(handed, earlier)
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
        fail_beyond("dsum", oracle.rows_view(run.dx, case.normalized_shape), dsum, bound_dx, fused.normalized(inputs),
              backend, ref, notes, dy=dy, bound_for=lambda dtype: bounds_in(dtype, 0))
    else:
        bound_dx, bound_dw, bound_db = error_model.backward_bounds(dy, ref, grads, case.dtype, case.params)
        bounds_in = lambda dtype, i: error_model.backward_bounds(dy, ref, grads, dtype, case.params)[i]
        fail_beyond("dx", oracle.rows_view(run.dx, case.normalized_shape), grads.dx, bound_dx, inputs, backend, ref, notes,
              dy=dy, bound_for=lambda dtype: bounds_in(dtype, 0))
    column = (f"each element of dweight and dbias is a sum over the {case.rows} rows; bound = output rounding "
              f"+ k(M) accumulation of the sum of magnitudes",)
    for i, (what, got, exact, bound) in enumerate((("dweight", run.dweight, grads.dweight, bound_dw),
                                                   ("dbias", run.dbias, grads.dbias, bound_db)), start=1):
        if got is not None:
            ns = case.weight_shape if what == "dweight" else case.normalized_shape  # per head: (heads, head_dim)
            fail_beyond(what, np.asarray(got, dtype=np.float64), exact.reshape(ns), bound.reshape(ns), inputs, backend,
                  None, column + notes, dy=dy, bound_for=lambda dtype, i=i, ns=ns: bounds_in(dtype, i).reshape(ns))
    if case.hidden == 1 and run.dweight is not None and ref.centered:  # RMSNorm's N = 1 xhat is x/sqrt(x^2 + eps)
        bound = error_model.n1_dweight_bound(dy, ref, case.dtype, case.params)
        fail_beyond("dweight", np.asarray(run.dweight, dtype=np.float64).reshape(1), np.zeros(1), bound, inputs, backend,
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
        backward_coherence.check_backward_coherence(backend, inputs, dy, run, ref, grads)
