"""§5.2 of the paper as gradient properties of a backend's ``layer_norm_backward`` (and,
for an RMSNorm case, ``rms_norm_backward``: which of them hold for RMSNorm is derived below).

On the layer model of ``normbench.paper.layer`` (``a = x @ W``, y = LN(a), a loss
``L = <dy, y>`` with a random dy of nonzero row mean):

* **Weight-matrix re-scaling.** ``W -> delta*W`` leaves y unchanged (Table 1) and
  scales ``dL/dW = x^T dL/da`` by 1/delta: the normalization scalar sigma
  implicitly lowers the learning rate of large weights. With eps the exact
  statement is ``delta*dW(delta*W, eps) = dW(W, eps/delta^2)``.
* **The gain's gradient.** ``dweight = sum_rows(dy*xhat)`` does not change when
  the input is re-scaled (``x -> delta*x``, eps/delta^2 again); dbias does not
  depend on the input at all.
* **Per-row identities** (NUMERICS.md). LN is invariant to shifting a row, so
  ``sum(dx) = 0``; re-scaling a row changes LN only through eps, so
  ``sum(xhat*dx) = eps*r^3*sum(g*xhat)`` (``g = dy*weight``, ``r = 1/sqrt(var + eps)``;
  0 when eps = 0): from ``sum(xhat*dx) = r*N*m*(1 - mean(xhat^2))``, ``m = mean(g*xhat)``,
  and ``mean(xhat^2) = var/(var + eps)``.

**RMSNorm** (``y = w*x*r``, ``r = 1/sqrt(mean(x^2) + eps)``, ``xhat = x*r``, no bias;
normbench's derivation, the paper has no RMSNorm). ``W -> delta*W`` scales a = x@W and
rms(a) together, so y is unchanged (with eps/delta^2) and ``dL/da`` scales by 1/delta:
the weight-matrix property holds as stated. ``dweight = sum_rows(dy*xhat)`` and xhat is
scale invariant: the gain's property holds (there is no dbias). RMSNorm is *not*
invariant to shifting a row, and ``sum(dx) = r*(sum(g) - m*sum(xhat))`` is not 0: the
shift identity does not hold and is not checked. Its dx is
``r*(g - xhat*m)``, ``m = mean(g*xhat)``, so ``sum(xhat*dx) = r*N*m*(1 - mean(xhat^2))``
with ``mean(xhat^2) = mean(x^2)/(mean(x^2) + eps)``: the scale identity
``sum(xhat*dx) = eps*r^3*sum(g*xhat)`` holds unchanged.

Bounds: each side's gradients deviate from the float64 closed form by at most
``normbench.check.error_model.backward_bounds``, plus, where the two sides' inputs are
rounded separately, the effect of that rounding (``normbench.check.sensitivity``).
Sums over a row or over rows of bounded terms are bounded by the sums of the
bounds; a float64 product ``x^T v`` of M terms errs by at most
``gamma_M*|x|^T|v|``, ``gamma_M = M*u/(1 - M*u)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.check import error_model, oracle, sensitivity
from normbench.check.handover import Handover, host_array
from normbench.check.worst import ConformanceError, worst_violation
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, rng_for
from normbench.core.dtypes import U64, host_dtype
from normbench.core.exceptions import InvalidInput
from normbench.paper.invariances import rescaling_factors
from normbench.paper.layer import Layer, make_layer


def make_dy(case: Case, seed: int) -> np.ndarray:
    """The upstream gradient: 0.5 + N(0, 1) (a nonzero row mean, never all ones), in the case's dtype."""
    rng = rng_for(case, seed, "dy")
    return (0.5 + rng.standard_normal(case.shape)).astype(host_dtype(case.dtype))


@dataclass(frozen=True)
class Gradients:
    """A backend's (dx, dweight, dbias) as float64 (M, N), (N,), (N,), with bounds on their
    distance from the exact gradients of the *exact* summed inputs (``bound_*``), and on
    their distance from the float64 closed form at the rounded inputs (``kernel_dx``)."""

    dx: np.ndarray
    dweight: np.ndarray
    dbias: np.ndarray
    bound_dx: np.ndarray
    bound_dweight: np.ndarray
    bound_dbias: np.ndarray
    kernel_dx: np.ndarray
    ref: oracle.Forward
    grads: oracle.Backward


def gradients(backend: Backend, dtype: str, a: np.ndarray, layer: Layer, dy: np.ndarray, eps: float,
              norm: str = "layer_norm") -> Gradients:
    """The backend's backward of ``norm`` at the summed inputs ``a`` (exact float64) rounded to ``dtype``
    (RMSNorm: no bias; ``dbias`` is zeros, and nothing checks it)."""
    ns, norm = layer.normalized_shape, operations.of(norm)
    bias = layer.bias if norm.has_bias else None
    rounded = np.asarray(a, np.float64).astype(host_dtype(dtype))
    p = sensitivity.rounding_perturbation(a, rounded)
    m, n = rounded.shape
    handed = Handover.of(backend, dy=dy, x=rounded.reshape(m, *ns), weight=layer.gain, bias=bias)
    args = norm.arguments(x=handed["x"], normalized_shape=ns, weight=handed["weight"], bias=handed["bias"], eps=eps)
    dx, dw, db = norm.gradient_tuple(handed.call(norm.backward_entry, f"{backend.name}: ",
                                                 lambda a, c: norm.backward(backend, a, c), args, (handed["dy"],)))
    backend.synchronize()
    handed.check(norm.backward_entry, f"{backend.name}: ")
    if dw is None or (db is None and norm.has_bias):
        raise ConformanceError(f"{backend.name}: {norm.backward_entry} returned None for a gradient whose parameter "
                               f"was given; return dweight{' and dbias' if norm.has_bias else ''} when "
                               f"{'weight and bias are' if norm.has_bias else 'weight is'} not None")
    dx, dw, db = (np.zeros(n) if g is None else
                  np.asarray(host_array(f"{norm.backward_entry}'s {what}", g, backend, shape, exact_shape=False), np.float64)
                  for what, g, shape in (("dx", dx, (m, n)), ("dweight", dw, (n,)), ("dbias", db, (n,))))
    ref = oracle.forward(rounded, ns, layer.gain, bias, eps, norm.name)
    grads = oracle.backward(dy, ref)
    bdx, bdw, bdb = error_model.backward_bounds(dy, ref, grads, dtype)
    return Gradients(dx, dw, db, bdx + sensitivity.dx_perturbation(ref, grads, p),
                     bdw + sensitivity.dweight_perturbation(dy, ref, p), bdb, bdx, ref, grads)


def _fail_if(what: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray, context: str) -> None:
    __tracebackhide__ = True
    worst = worst_violation(got, want, bound, match_nonfinite=False)
    if worst is not None:
        raise ConformanceError(f"{context}: {what}[{worst.where}] = {worst.value:.9g}, expected {worst.reference:.9g}: "
                               f"|error| {worst.error:.3g} {worst.excess()}; {worst.out_of_bound()}")


def _context(backend: Backend, case: Case, seed: int) -> str:
    return f"{backend.name} {case.id} (seed {seed})"


def skip_reason(backend: Backend, case: Case) -> str | None:
    """Why the re-scaling checks cannot run within ``backend``'s documented eps range, or None."""
    _, reason = rescaling_factors(backend.limits_for(case.norm), case.eps)
    return f"{backend.name} documents limits {reason}" if reason else None


def _scales(backend: Backend, case: Case) -> tuple[float, ...]:
    scales, reason = rescaling_factors(backend.limits_for(case.norm), case.eps)
    if reason:
        raise InvalidInput(f"{case.id}: {backend.name} documents limits {reason}; skip it (geometry.skip_reason)")
    return scales


def check_weight_matrix_gradient(backend: Backend, case: Case, seed: int) -> None:
    """``delta*dW(delta*W, eps)`` equals ``dW(W, eps/delta^2)`` for every delta of
    ``invariances.rescaling_factors`` (``SCALES``, or factors inside the backend's eps range);
    for either normalization."""
    __tracebackhide__ = True
    layer, dy = make_layer(case, seed), make_dy(case, seed)
    x = layer.x
    gamma = x.shape[0] * U64 / (1 - x.shape[0] * U64)
    for delta in _scales(backend, case):
        scaled = gradients(backend, case.dtype, layer.with_(w=delta * layer.w).summed_inputs(), layer, dy, case.eps,
                           case.norm)
        plain = gradients(backend, case.dtype, layer.summed_inputs(), layer, dy, case.eps / delta**2, case.norm)
        dw_scaled, dw_plain = delta * (x.T @ scaled.dx), x.T @ plain.dx
        bound = np.abs(x.T) @ (delta * scaled.bound_dx + plain.bound_dx)
        bound += (gamma + U64) * (np.abs(x.T) @ (delta * np.abs(scaled.dx) + np.abs(plain.dx)))
        _fail_if("delta*dW", dw_scaled, dw_plain, bound,
                 f"{_context(backend, case, seed)}: W -> {delta:g}*W must scale dL/dW by 1/{delta:g} (paper §5.2: "
                 f"delta*dW(delta*W, eps) = dW(W, eps/delta^2)), but")


def check_gain_gradient(backend: Backend, case: Case, seed: int) -> None:
    """dweight and dbias (RMSNorm: dweight; it has no bias) at ``x -> delta*x`` (eps) equal those at x (eps/delta^2)."""
    __tracebackhide__ = True
    layer, dy = make_layer(case, seed), make_dy(case, seed)
    for delta in _scales(backend, case):
        scaled = gradients(backend, case.dtype, layer.with_(x=delta * layer.x).summed_inputs(), layer, dy, case.eps,
                           case.norm)
        plain = gradients(backend, case.dtype, layer.summed_inputs(), layer, dy, case.eps / delta**2, case.norm)
        context = (f"{_context(backend, case, seed)}: x -> {delta:g}*x must not change the gain's gradient "
                   f"(paper §5.2; with eps/delta^2 on the unscaled side), but")
        _fail_if("dweight", scaled.dweight, plain.dweight, scaled.bound_dweight + plain.bound_dweight, context)
        if operations.of(case.norm).has_bias:
            _fail_if("dbias", scaled.dbias, plain.dbias, scaled.bound_dbias + plain.bound_dbias, context)


def check_gradient_identities(backend: Backend, case: Case, seed: int) -> None:
    """Per row: ``sum(dx) = 0`` (LayerNorm only: RMSNorm is not invariant to a shift) and
    ``sum(xhat*dx) = eps*r^3*sum(g*xhat)`` (both)."""
    __tracebackhide__ = True
    layer, dy = make_layer(case, seed), make_dy(case, seed)
    run = gradients(backend, case.dtype, layer.summed_inputs(), layer, dy, case.eps, case.norm)
    ref, n = run.ref, run.dx.shape[1]
    context = _context(backend, case, seed)
    name = "layer norm" if ref.centered else operations.of(case.norm).label
    if ref.centered:
        shift_bound = run.kernel_dx.sum(axis=1, keepdims=True) + \
            error_model.k(n) * U64 * np.abs(run.dx).sum(axis=1, keepdims=True)
        _fail_if("sum(dx)", run.dx.sum(axis=1, keepdims=True), np.zeros((run.dx.shape[0], 1)), shift_bound,
                 f"{context}: layer norm is invariant to shifting a row, so each row of dx must sum to 0, but")
    r = ref.rstd[:, None]
    gx = run.grads.g * ref.xhat
    want = case.eps * r**3 * gx.sum(axis=1, keepdims=True)
    scale_bound = (np.abs(ref.xhat) * run.kernel_dx).sum(axis=1, keepdims=True)
    scale_bound += error_model.k(n) * U64 * ((np.abs(ref.xhat * run.dx)).sum(axis=1, keepdims=True) + np.abs(want))
    _fail_if("sum(xhat*dx)", (ref.xhat * run.dx).sum(axis=1, keepdims=True), want, scale_bound,
             f"{context}: re-scaling a row changes {name} only through eps, so sum(xhat*dx) must equal "
             f"eps*r^3*sum(dy*weight*xhat), but")
