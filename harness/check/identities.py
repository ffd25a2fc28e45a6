"""Reference-free checks of a backward pass: identities every correct gradient obeys.

They never compare with the oracle's gradients; they use only the backend's own
output and the input's statistics (xhat, sigma_eps), so they cross-check the
closed form the value checks rely on. Per row, exactly:

* ``sum_j dx[i, j] = 0`` (LayerNorm is invariant to adding a constant to a row; not RMSNorm);
* with eps = 0, ``sum_j xhat[i, j]*dx[i, j] = 0`` (both normalizations ignore scaling a row);
* LayerNorm: dbias = sum_rows(dy) does not depend on x;
* RMSNorm, which has no bias: negating x leaves dx unchanged and negates dweight (xhat is odd
  in x, r even; ``error_model.sign_symmetry_bounds``). It holds for LayerNorm too, whose
  second backward call is the dbias check's instead.

Their bounds (derivations in ``normbench.check.error_model``: ``row_sum_bound``,
``xhat_projection_bound``, ``dbias_spread_bound``) come from the same error model
as the value checks, written in the kernel's computed values.
"""

from __future__ import annotations

import numpy as np

from normbench.check import error_model, hypotheses, oracle
from normbench.check.conformance import BackwardRun, ConformanceError, recent_backward, reference, run_backward
from normbench.check.worst import worst_violation
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Inputs, make_other_x


def _finite_rows(ref: oracle.Forward, dy: np.ndarray) -> np.ndarray:
    """Rows whose x and dy are finite (a NaN or Inf row has no identity to obey)."""
    dy2 = np.asarray(dy, dtype=np.float64).reshape(ref.x.shape)
    return np.isfinite(ref.x).all(axis=1) & np.isfinite(dy2).all(axis=1) & (ref.sigma_eps > 0)


def _explain_dx(backend: Backend, inputs: Inputs, dy: np.ndarray, ref: oracle.Forward, dx: np.ndarray) -> str:
    """The known bug hypotheses that reproduce the dx breaking an identity (under dx's own
    bound), one line each, indented as the failure's other lines."""
    case = inputs.case
    grads = oracle.backward(dy, ref)
    bound = lambda dtype: error_model.backward_bounds(dy, ref, grads, dtype, case.params)[0]
    failing = worst_violation(dx, grads.dx, bound(case.dtype))
    lines = hypotheses.explain("dx", dx, bound(case.dtype), inputs, dy=dy, bound_for=bound,
                               runtime_note=getattr(backend, "runtime_note", None),
                               failing_ratio=failing.ratio if failing else 0.0)
    return "".join(f"  {line}\n" for line in lines)


def _row_check(what: str, why: str, values: np.ndarray, bound: np.ndarray, rows: np.ndarray,
               backend: Backend, inputs: Inputs, ref: oracle.Forward, explanation=lambda: "") -> None:
    __tracebackhide__ = True
    worst = worst_violation(values, 0.0, bound, where=rows, match_nonfinite=False)
    if worst is None:
        return
    (row,) = worst.index
    case = inputs.case
    raise ConformanceError(
        f"{backend.name} {case.id} (seed {inputs.seed}): {what} = {worst.value:.6g} in row {row}, but it is exactly 0 "
        f"for a correct gradient ({why}); |value| > bound {worst.bound:.3g}; {worst.out_of_bound('rows')}\n"
        f"  row {row}: mean {ref.mean[row]:.6g}, sigma {np.sqrt(ref.var[row]):.3g}, eps {case.eps_value:g}, "
        f"N {ref.x.shape[1]}, dtype {case.dtype}\n"
        f"{explanation()}"
        f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed}); "
        f"dy: normbench.core.cases.make_dy(<case {case.id}>, seed={inputs.seed})")


def check_row_sums(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """Per row, sum(dx) = 0 within ``error_model.row_sum_bound``. Catches a dropped or doubled
    mean term (tenstorrent/tt-metal#53204)."""
    __tracebackhide__ = True
    ref = reference(inputs)
    dx = oracle.rows_view(run.dx, inputs.case.normalized_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        sums = dx.sum(axis=1)
    bound = error_model.row_sum_bound(dy, ref, dx, inputs.case.dtype)
    _row_check("sum(dx)", "LayerNorm ignores a constant added to a row; is the mean term mean(dy*weight) "
               "subtracted exactly once?", sums, bound, _finite_rows(ref, dy), backend, inputs, ref,
               lambda: _explain_dx(backend, inputs, dy, ref, dx))


def check_xhat_projection(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """With eps = 0, per row sum(xhat*dx) = 0 within ``error_model.xhat_projection_bound``.
    Catches a dropped xhat*mean(g*xhat) projection."""
    __tracebackhide__ = True
    case = inputs.case
    if case.eps != 0:
        raise ValueError(f"sum(xhat*dx) = 0 holds only for eps = 0, but case {case.id} has eps {case.eps:g}")
    ref = reference(inputs)
    dx = oracle.rows_view(run.dx, case.normalized_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        sums = (ref.xhat * dx).sum(axis=1)
    bound = error_model.xhat_projection_bound(dy, ref, dx, case.dtype)
    label = operations.of(case.norm).label
    _row_check("sum(xhat*dx)", f"with eps = 0 {label} ignores scaling a row; is xhat*mean(dy*weight*xhat) subtracted?",
               sums, bound, _finite_rows(ref, dy), backend, inputs, ref,
               lambda: _explain_dx(backend, inputs, dy, ref, dx))


def check_dbias_independent_of_x(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """dbias with another x (``cases.make_other_x``), same dy, agrees within
    ``error_model.dbias_spread_bound``: dbias = sum_rows(dy) must not read x."""
    __tracebackhide__ = True
    case = inputs.case
    if run.dbias is None:
        raise ValueError(f"case {case.id} has no bias, so there is no dbias to check")
    other = Inputs(case, inputs.seed, make_other_x(case, inputs.seed), inputs.weight, inputs.bias)
    again = run_backward(backend, other, dy)
    a, b = (np.asarray(d, dtype=np.float64).reshape(-1) for d in (run.dbias, again.dbias))
    bound = error_model.dbias_spread_bound(dy, reference(inputs), a, b, case.dtype, case.params)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(a - b) <= bound) & np.isfinite(np.asarray(dy, dtype=np.float64)).reshape(-1, a.size).all(axis=0)
    if bad.any():
        j = int(np.flatnonzero(bad)[np.argmax(np.abs(a - b)[bad])])
        where = ", ".join(map(str, np.unravel_index(j, case.normalized_shape)))
        raise ConformanceError(
            f"{backend.name} {case.id} (seed {inputs.seed}): dbias depends on x: dbias[{where}] = {a[j]:.9g} with x, "
            f"{b[j]:.9g} with another x and the same dy (|difference| {abs(a[j] - b[j]):.3g} > bound {bound[j]:.3g}); "
            f"dbias must be sum_rows(dy) (was it computed from xhat, or swapped with dweight?)\n"
            f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed}); other x: "
            f"normbench.core.cases.make_other_x(<case {case.id}>, seed={inputs.seed})")


def check_sign_symmetry(backend: Backend, inputs: Inputs, dy: np.ndarray, run: BackwardRun) -> None:
    """The backward at -x, same dy: dx unchanged and dweight negated, within
    ``error_model.sign_symmetry_bounds``. Catches a kernel whose gradient depends on x's sign
    where the exact one does not (|x| for x, a sign lost in dweight's accumulation)."""
    __tracebackhide__ = True
    case = inputs.case
    mirrored = Inputs(case, inputs.seed, np.negative(inputs.x), inputs.weight, inputs.bias)
    again = run_backward(backend, mirrored, dy)
    ref = reference(inputs)
    ns = case.normalized_shape
    a, b = (oracle.rows_view(d, ns) for d in (run.dx, again.dx))
    bound_dx, bound_dw = error_model.sign_symmetry_bounds(dy, ref, a, b, run.dweight, again.dweight,
                                                          case.dtype, case.params)
    rows = _finite_rows(ref, dy)
    with np.errstate(invalid="ignore", over="ignore"):
        worst = worst_violation(a - b, 0.0, bound_dx, where=np.broadcast_to(rows[:, None], a.shape),
                                match_nonfinite=False)
    if worst is None and bound_dw is not None:
        wa, wb = (np.asarray(d, dtype=np.float64).reshape(-1) for d in (run.dweight, again.dweight))
        with np.errstate(invalid="ignore", over="ignore"):
            worst = worst_violation(wa + wb, 0.0, bound_dw, match_nonfinite=False)
        what = "dweight(x) + dweight(-x)"
    else:
        what = "dx(x) - dx(-x)"
    if worst is None:
        return
    raise ConformanceError(
        f"{backend.name} {case.id} (seed {inputs.seed}): {what} = {worst.value:.6g} at [{worst.where}], but it is "
        f"exactly 0 for a correct gradient (negating x negates xhat and keeps the rms, so dx is unchanged and "
        f"dweight negated); |value| > bound {worst.bound:.3g}\n"
        f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed}) and its x negated; "
        f"dy: normbench.core.cases.make_dy(<case {case.id}>, seed={inputs.seed})")


def check_identities(backend: Backend, inputs: Inputs, dy: np.ndarray) -> None:
    """Every reference-free identity that applies to the case: row sums (LayerNorm),
    the xhat projection when eps = 0, dbias independence when there is a bias, the sign
    symmetry for RMSNorm. They judge the
    backward ``conformance.check_backward`` ran on the same case just before, when there is one
    (``conformance.recent_backward``), so a case's first backward runs once for both tests."""
    __tracebackhide__ = True
    run = recent_backward(backend, inputs, dy)
    norm = operations.of(inputs.case.norm)
    if norm.centered:
        check_row_sums(backend, inputs, dy, run)
    if inputs.case.eps == 0:
        check_xhat_projection(backend, inputs, dy, run)
    if inputs.bias is not None:
        check_dbias_independent_of_x(backend, inputs, dy, run)
    if not norm.has_bias:
        check_sign_symmetry(backend, inputs, dy, run)
