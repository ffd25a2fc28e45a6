"""The residual add fused into the normalization: what a fused operation adds to the plain one's checks.

``add_rms_norm(x, residual, ...) -> (y, residual_out)`` and ``add_layer_norm`` (``normbench.core.operations``)
compute ``residual_out = x + residual``, rounded once to the residual's dtype, and ``y``, the plain
normalization of ``residual_out`` in x's dtype. Derivation of what is checked (docs/fused.md says it in words):

* **residual_out, bit for bit.** x and the residual are floating-point numbers of at most 53 bits, so their
  sum in float64 is exact for every dtype narrower than float64 (the exponents of the cases are within 2^29 of
  each other) and one rounding of it to the residual's dtype is the only correct value: a kernel that adds in
  float32 registers and stores rounds the same exact sum once (a float32 sum of two half or float32 values
  is that sum rounded once, or exact). For float64 inputs the float64 sum is the one rounding. So
  :func:`residual_out` is compared bitwise (a NaN equal to any NaN): no tolerance could be derived that a
  missing or doubled rounding, a sum written unrounded or not written at all would not slip through.
* **y, either rounding of the sum.** Libraries disagree whether y normalizes the stored ``residual_out`` (r: what
  the unfused composition does) or the unrounded sum s held in registers; both are correct, and the two
  conventions disagree by ``|N(s) - N(r)|`` (N the float64 normalization), up to 257 times the plain bound on
  seed 0 of the suites' cases (bfloat16 rows at an offset of 100, where the sum's rounding is comparable with the
  row's spread). Widening the bound by that distance would let such bugs through, so y is judged against each
  convention under its own plain bound B: within ``B(r)`` of ``N(r)`` in every element, or within ``B(s)`` of
  ``N(s)`` in every element (:func:`unrounded_reference`; a float32 register sum of two half or float32 values is s
  rounded at most once in float32, which the accumulation term of B covers). A kernel passes if it follows one
  convention; the failure is reported against N(r), saying how far the unrounded one is. With a float32 residual
  the two references differ by float32's rounding, under 0.2 % of the bound.
* **Both weight orders.** Rounding the normalized value to x's dtype before the weight multiply or after it
  is within the plain bound's ``3*u_out*(|w*xhat| + |b|)`` (``normbench.check.error_model``, conventions (a) and
  (b)): nothing is added for it.
* **dsum.** The backward ``add_*_backward(dy, dresidual_out, residual_out, ...)`` returns
  ``dsum = dresidual_out + dx``, the gradient of both x and the residual, in the residual's dtype, where dx
  is the plain normalization's at ``residual_out`` (given, so there is no choice of sum). A fused kernel adds
  dresidual_out to its dx once (one rounding, ``u_res*|dsum|``); autograd through the unfused composition
  accumulates dresidual_out into dx's own terms as they arrive (torch: dresidual_out + r*g, then the projection
  term), each partial sum rounded once, at most ``u_res*(|dresidual_out| + the terms' magnitudes)``, the terms'
  part already inside dx's accumulation term. So the bound is the plain dx bound in the residual's dtype plus
  ``3*u_res*|dresidual_out| + u_res*|dsum| + 1.5*eta_res`` (three partial sums that hold dresidual_out, and the
  last rounding; torch's composition measured at up to 0.9 ulp of dsum where a single rounding allows 0.5);
  dweight and dbias are the plain ones' (``error_model.backward_bounds``). Every bug of the backward's algebra
  (a dresidual_out dropped, sent through the normalization's VJP, written into dy) errs by ``|dresidual_out|``
  or ``r*|dresidual_out|``, some ``1/u`` times the allowance.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from normbench.check import error_model, oracle
from normbench.core import operations
from normbench.core.cases import Inputs
from normbench.core.dtypes import SUBNORMAL_SPACING, UNIT_ROUNDOFF, host_dtype


def exact_sum(inputs: Inputs) -> np.ndarray:
    """x + residual in float64, x's shape (exact for every dtype narrower than float64)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(inputs.x, dtype=np.float64) + np.asarray(inputs.residual, dtype=np.float64)


def residual_out(inputs: Inputs) -> np.ndarray:
    """The one correct ``residual_out``: the exact sum rounded once to the residual's dtype, contiguous."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.ascontiguousarray(exact_sum(inputs).astype(host_dtype(inputs.case.residual_type)))


def truncated_sum(inputs: Inputs) -> np.ndarray:
    """The exact sum rounded toward zero in the residual's dtype: what a conversion that drops the low bits stores
    (the Triton interpreter's fp32 -> bfloat16, vLLM's CPU bfloat16 stores without AVX512-BF16). A diagnosis, never
    correct: :func:`residual_out` is the one correct value.

    >>> from normbench.core.cases import Case, make_inputs
    >>> ins = make_inputs(Case("residual", (1, 8), (8,), "bfloat16", norm="add_rms_norm"), 0)
    >>> bool(np.all(np.abs(truncated_sum(ins).astype(np.float64)) <= np.abs(exact_sum(ins))))
    True
    """
    exact = exact_sum(inputs)
    nearest = residual_out(inputs)
    bits = nearest.view(np.dtype(f"u{nearest.dtype.itemsize}"))
    with np.errstate(invalid="ignore"):
        away = (np.abs(nearest.astype(np.float64)) > np.abs(exact)) & (bits & ~np.array(1 << (8 * bits.itemsize - 1),
                                                                                         bits.dtype) != 0)
    return np.where(away, bits - np.array(1, bits.dtype), bits).astype(bits.dtype).view(nearest.dtype)


def normalized(inputs: Inputs) -> Inputs:
    """What the normalization of a fused case normalizes: its inputs with x replaced by :func:`residual_out` (the case
    and everything else kept, so the oracle, the error model, the hypotheses and the coherence checks judge y as
    they judge a plain normalization's); a plain case's inputs as they are."""
    if not operations.of(inputs.case.norm).fuses:
        return inputs
    return dataclasses.replace(inputs, x=residual_out(inputs))


def unrounded_reference(inputs: Inputs) -> oracle.Forward:
    """The float64 normalization of the exact, unrounded sum (what a kernel that keeps the sum in registers normalizes)."""
    case = inputs.case
    return oracle.forward(exact_sum(inputs), case.normalized_shape, inputs.weight, inputs.bias, case.eps_value,
                          case.norm, case.weight_offset)


def dsum_bound(dy: np.ndarray, ref: oracle.Forward, grads: oracle.Backward, dresidual: np.ndarray, dsum: np.ndarray,
               dtype: str, param_dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds on ``|dsum - dsum_ref|`` (M, N), dweight and dbias (N,): the plain backward's bounds with dx in the residual's
    dtype ``dtype``, plus the add's roundings, ``3*u*|dresidual_out| + u*|dsum| + 1.5*eta`` (the module doc; ``dresidual``
    and ``dsum``, the exact one, as (M, N) float64 rows)."""
    dx, dw, db = error_model.backward_bounds(dy, ref, grads, dtype, param_dtype)
    u = UNIT_ROUNDOFF[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        return dx + 3 * u * np.abs(dresidual) + u * np.abs(dsum) + 1.5 * SUBNORMAL_SPACING[dtype], dw, db
