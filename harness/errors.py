"""The error model: how far a *correct* kernel may deviate from the oracle.

Componentwise and scale-aware, never a flat rtol/atol. Derivation (forward),
for an output element ``y = w*xhat + b`` with xhat, mu, sigma_eps from the oracle:

* Output rounding. A kernel rounds ``xhat``, ``w*xhat`` and the final sum to at
  worst the output dtype: each rounding costs u_out times the magnitude it
  rounds, so ``3*u_out*(|w*xhat| + |b|)`` covers kernels that round ``xhat`` or
  ``w*xhat`` before adding b (flat fp16/bf16 tolerances reject those).
  Below the smallest normal number rounding is absolute, half the subnormal
  spacing eta_out, so each rounding may cost ``u_out*|v| + eta_out/2``
  (NUMERICS.md omits this; fp16 outputs near 1e-6 need it).
* Accumulation. The mean and variance are sums of N terms in the accumulation
  precision u_acc (fp32 for every half or single dtype, fp64 for fp64). A
  blocked or pairwise sum errs by about ``(c + 2*sqrt(N))*u_acc`` relative to
  the sum of magnitudes; c = 16 absorbs the few extra roundings of the
  centering, the rsqrt and the scaling. Relative to the row, the perturbed
  quantity is ``x - mu``, whose rounding scales with ``|x|`` and the mean's
  own error, ``k(N)*u_acc*mean|x|`` (a sum of magnitudes), not with sigma:
  the error in xhat is ``k(N)*u_acc*(|x| + mean|x|)/sigma_eps``, times
  ``|w|`` in y. This term is inherent: with a large mean, x itself carries
  that much information and no kernel can do better. NUMERICS.md writes
  ``|mu|`` for ``mean|x|``; the two agree on offset rows, but on zero-mean
  rows with large |x| the mean's error is set by ``mean|x|``, and fp64
  kernels measurably exceed the ``|mu|`` form (torch, uniform(-9, 9)).

So ``|y - y_ref| <= 3*u_out*(|w*xhat| + |b|) + 1.5*eta_out + k(N)*u_acc*|w|*(|x| + mean|x|)/sigma_eps``
with ``k(N) = 16 + 2*sqrt(N)``. Correct kernels use well under it (NUMERICS.md
reports <= 0.63 of it); every bug class in NUMERICS.md exceeds it on its
targeted input, which ``tests/test_mutants.py`` proves with one mutant each.

Statistics (when a backend exposes them): the mean errs by the accumulation
term ``k(N)*u_acc*mean|x|`` plus the rounding to the dtype it is stored in,
and rstd relatively by ``k(N)*u_acc*(max|x| + |mu|)/sigma_eps`` (the variance's
error relative to var + eps) plus its own storage rounding. The storage dtype
is the backend's choice: fp32 on GPUs, but PyTorch's CPU kernels store half
inputs' statistics in the input dtype.

The backward bounds follow NUMERICS.md's closed form; dweight and dbias are
bounded by sums of magnitudes over rows, never by their own size, because
they are sums of random-sign terms.
"""

from __future__ import annotations

import numpy as np

from harness import oracle
from harness.dtypes import SUBNORMAL_SPACING, UNIT_ROUNDOFF, accumulation_roundoff


def k(n: int) -> float:
    """The accumulation growth factor for a sum of n terms: 16 + 2*sqrt(n)."""
    return 16.0 + 2.0 * float(np.sqrt(max(n, 0)))


def _mean_abs(ref: oracle.Forward) -> np.ndarray:
    """(M,) mean of |x| per row: the scale of the mean's rounding error."""
    return np.abs(ref.x).mean(axis=1) if ref.x.shape[0] else np.zeros(0)


def forward_bound(ref: oracle.Forward, dtype: str) -> np.ndarray:
    """The (M, N) componentwise bound on ``|y - y_ref|`` for output dtype ``dtype``."""
    u_out = UNIT_ROUNDOFF[dtype]
    u_acc = accumulation_roundoff(dtype)
    n = ref.x.shape[1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rounding = 3.0 * (u_out * (np.abs(ref.weight * ref.xhat) + np.abs(ref.bias)) + SUBNORMAL_SPACING[dtype] / 2)
        conditioning = (np.abs(ref.x) + _mean_abs(ref)[:, None]) / ref.sigma_eps[:, None]
        accumulation = k(n) * u_acc * np.abs(ref.weight) * conditioning
    return rounding + accumulation


def mean_bound(ref: oracle.Forward, dtype: str, stats_dtype: str = "float32") -> np.ndarray:
    """(M,) bound on the saved mean's absolute error; ``stats_dtype`` is the dtype it is stored in."""
    n = ref.x.shape[1]
    mean_abs = _mean_abs(ref)
    storage = UNIT_ROUNDOFF[stats_dtype] * np.abs(ref.mean) + SUBNORMAL_SPACING[stats_dtype] / 2
    return k(n) * accumulation_roundoff(dtype) * mean_abs + storage


def rstd_bound(ref: oracle.Forward, dtype: str, stats_dtype: str = "float32") -> np.ndarray:
    """(M,) bound on the saved rstd's absolute error; ``stats_dtype`` is the dtype it is stored in."""
    n = ref.x.shape[1]
    max_abs = np.abs(ref.x).max(axis=1) if ref.x.shape[0] else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        relative = k(n) * accumulation_roundoff(dtype) * (max_abs + np.abs(ref.mean)) / ref.sigma_eps
        return (relative + 2 * UNIT_ROUNDOFF[stats_dtype]) * ref.rstd


def backward_bounds(dy: np.ndarray, ref: oracle.Forward, grads: oracle.Backward,
                    dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds on ``|dx - dx_ref|`` (M, N), ``|dweight - ref|`` and ``|dbias - ref|`` (N,).

    With r = 1/sigma_eps and c = (|x| + mean|x|)*r (NUMERICS.md, with mean|x| for |mu| as above):
    ``bound_dx = 3*(u_out*|dx_ref| + eta_out/2) + k(N)*u_acc*r*(|g| + mean|g| + (|xhat| + c)*mean|g*xhat|)``,
    ``bound_dw = 3*(u_out*|dw_ref| + eta_out/2) + (k(N) + k(M))*u_acc*sum_rows(|dy|*(|xhat| + c))``,
    ``bound_db = 3*(u_out*|db_ref| + eta_out/2) + k(M)*u_acc*sum_rows(|dy|)``.
    """
    u_out = UNIT_ROUNDOFF[dtype]
    half_eta = SUBNORMAL_SPACING[dtype] / 2
    u_acc = accumulation_roundoff(dtype)
    m, n = ref.x.shape
    dy2 = np.abs(np.asarray(dy, dtype=np.float64).reshape(m, n))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = ref.rstd[:, None]
        c = (np.abs(ref.x) + _mean_abs(ref)[:, None]) * r
        g = np.abs(grads.g)
        if m:
            mean_g = g.mean(axis=1, keepdims=True)
            mean_gx = (g * np.abs(ref.xhat)).mean(axis=1, keepdims=True)
        else:
            mean_g = mean_gx = np.zeros((0, 1))
        dx = 3 * (u_out * np.abs(grads.dx) + half_eta) + k(n) * u_acc * r * (g + mean_g + (np.abs(ref.xhat) + c) * mean_gx)
        dw = 3 * (u_out * np.abs(grads.dweight) + half_eta) + (k(n) + k(m)) * u_acc * (dy2 * (np.abs(ref.xhat) + c)).sum(axis=0)
        db = 3 * (u_out * np.abs(grads.dbias) + half_eta) + k(m) * u_acc * dy2.sum(axis=0)
    return dx, dw, db
