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
term ``k(N)*u_acc*mean|x|`` plus one rounding to the accumulation dtype it is
stored in, and rstd relatively by ``k(N)*u_acc*(max|x| + |mu|)/sigma_eps`` (the
variance's error relative to var + eps) plus its own storage rounding. CUDA
kernels, PyTorch's included, store them in fp32 (fp64 for fp64 inputs); storing
them coarser (PyTorch's CPU kernels store half inputs' statistics in the input
dtype) is a defect: it fails, and is declared as that library's known deviation.

One bound for every backend: no bound depends on the optional
``layer_norm_statistics`` hook or on anything else a backend says about its
internals (``tests/test_one_bound.py`` runs every built-in backend and mutant with
and without the hook and requires identical verdicts). A backward that reuses
statistics rounded to a half dtype is off by ``u_s*|mean|/sigma`` in every xhat; it
fails, and ``normbench.check.hypotheses`` names the cause.

The backward bounds follow NUMERICS.md's closed form; dweight and dbias are
bounded by sums of magnitudes over rows, never by their own size, because
they are sums of random-sign terms. The reference-free identities of the
backward suite (sum(dx) = 0 per row, sum(xhat*dx) = 0 with eps = 0, dbias
independent of x) get bounds derived from the same model, written in the
kernel's own computed values (see "bounds for the reference-free identities").

RMSNorm (``ref.centered`` False): ``y = w*x*r`` with ``r = 1/sqrt(ms + eps)``, ``ms = mean(x^2)``.
The same bound, with the mean's terms gone (``mean|x|`` is 0: nothing is subtracted, so no
cancellation and no conditioning beyond ``|x|*r = |xhat|``):

* Accumulation. ms is a sum of N non-negative terms, so its computed value errs by
  ``k(N)*u_acc`` relative to itself (not to a larger sum of magnitudes); r's relative error is
  half of that times ``ms/(ms + eps) <= 1``, plus the rsqrt's rounding (inside c = 16). The
  bound's ``k(N)*u_acc*|w|*|x|/sigma_eps = k(N)*u_acc*|w*xhat|`` covers it with a factor 2 to
  spare. Tiny rms (ms near eps, or below) needs nothing more: eps enters once, exactly, and
  nothing cancels. x^2 overflowing fp16 (|x| > 256) is no term: a correct kernel squares in the
  accumulation dtype; one that squares in fp16 returns 0 or NaN, off by |y|.
* Rounding conventions a correct kernel may use, each within ``3*u_out*|w*xhat| + 1.5*eta_out``:
  (a) everything in fp32, y rounded once (torch, our Triton kernels): ``u_out*|y|``;
  (b) Hugging Face's Llama: ``xhat`` rounded to x's dtype, then multiplied by the weight and
  rounded again: ``u_out*|w*xhat| + u_out*|w*xhat|``, two roundings (its output takes the weight's
  dtype; a backend wrapping it with a wider weight returns y in x's dtype, a third rounding);
  (c) T5/Gemma-style ``(x*r).to(dtype) * (1 + w)``: the ``weight_offset`` cases give the checkpoint's w and
  ``weight_offset = 1`` (the oracle adds the 1 exactly, and every term below reads ``|w|`` as ``|1 + w|``);
  elsewhere, as (b) once the backend passes ``w - 1``
  computed in fp32 (in a half dtype, ``w - 1`` loses ``u_par*|w - 1|``, which for |w| << 1 is
  beyond any bound: such a backend must convert in fp32). Rounding ``r`` itself to a half dtype
  before the multiply is one more rounding, ``u_out*|y|``, within the bound per element, but it is
  the same relative error in every element of the row: the coherence checks' per-row scale
  (``normbench.check.coherence``) fails it.
* Backward: ``dx = r*(g - xhat*mean(g*xhat))`` (no ``mean(g)`` term), so ``dx_accumulation`` drops
  ``mean|g|``; dweight is LayerNorm's ``sum_rows(dy*xhat)``; there is no dbias. The bounds above
  apply with ``mean|x| = 0`` (c = |xhat|).
* Statistics: RMSNorm backends expose none (no hook); the coherence checks judge rstd's rounding
  through y.

Coherence: the signed error's structure (a common scale per row, a common offset, a
rounding-mode bias per case), which no per-element bound sees, is derived and tested in
``normbench.check.coherence`` (its docstring, "coherence: the signed error's structure"), and
for the backward (dx's per-row scale, the rounding bias of dx, dweight and dbias in half dtypes)
from the backward bounds above (its docstring, "backward").
"""

from __future__ import annotations

import numpy as np

from normbench.check import oracle
from normbench.core.dtypes import SUBNORMAL_SPACING, UNIT_ROUNDOFF, accumulation_roundoff


def k(n: int) -> float:
    """The accumulation growth factor for a sum of n terms: 16 + 2*sqrt(n)."""
    return 16.0 + 2.0 * float(np.sqrt(max(n, 0)))


def _mean_abs(ref: oracle.Forward) -> np.ndarray:
    """(M,) mean of |x| per row: the scale of the mean's rounding error; 0 for RMSNorm, which
    subtracts no mean (see "RMSNorm" in the module doc)."""
    if not ref.centered:
        return np.zeros(ref.x.shape[0])
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


def mean_bound(ref: oracle.Forward, dtype: str) -> np.ndarray:
    """(M,) bound on the saved mean's absolute error: its accumulation, and one rounding to
    the accumulation dtype it is stored in (fp32, fp64 for fp64 inputs; see "Statistics")."""
    n = ref.x.shape[1]
    stored = "float64" if dtype == "float64" else "float32"  # the accumulation dtype
    storage = UNIT_ROUNDOFF[stored] * np.abs(ref.mean) + SUBNORMAL_SPACING[stored] / 2
    return k(n) * accumulation_roundoff(dtype) * _mean_abs(ref) + storage


def rstd_bound(ref: oracle.Forward, dtype: str) -> np.ndarray:
    """(M,) bound on the saved rstd's absolute error: the variance's accumulation, relative to
    var + eps, and its storage in the accumulation dtype."""
    n = ref.x.shape[1]
    max_abs = np.abs(ref.x).max(axis=1) if ref.x.shape[0] else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        relative = k(n) * accumulation_roundoff(dtype) * (max_abs + np.abs(ref.mean)) / ref.sigma_eps
        return (relative + 2 * accumulation_roundoff(dtype)) * ref.rstd


def _rows_abs(dy: np.ndarray, ref: oracle.Forward) -> np.ndarray:
    return np.abs(np.asarray(dy, dtype=np.float64).reshape(ref.x.shape))


def dx_accumulation(dy: np.ndarray, ref: oracle.Forward, dtype: str) -> np.ndarray:
    """(M, N): the accumulation part of the dx bound,
    ``k(N)*u_acc*r*(|g| + mean|g| + (|xhat| + c)*mean|g*xhat|)`` with ``g = dy*weight``.

    dx = r*(g - mean(g) - xhat*mean(g*xhat)): the two means are sums of N terms
    (k(N)*u_acc relative to their sums of magnitudes); xhat carries the forward's
    error ``k(N)*u_acc*c`` (c = (|x| + mean|x|)*r, the conditioning term), which
    multiplies mean(g*xhat); r's own relative error multiplies everything.
    """
    m, n = ref.x.shape
    g = _rows_abs(dy, ref) * np.abs(ref.weight)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = ref.rstd[:, None]
        c = (np.abs(ref.x) + _mean_abs(ref)[:, None]) * r
        xhat = np.abs(ref.xhat)
        means = (lambda a: a.mean(axis=1, keepdims=True)) if m else (lambda a: np.zeros((0, 1)))
        mean_g = means(g) if ref.centered else 0.0  # RMSNorm's dx has no mean(g) term
        return k(n) * accumulation_roundoff(dtype) * r * (g + mean_g + (xhat + c) * means(g * xhat))


def dweight_accumulation(dy: np.ndarray, ref: oracle.Forward, dtype: str, rows: int | None = None) -> np.ndarray:
    """(N,): ``(k(N) + k(M))*u_acc*sum_rows(|dy|*(|xhat| + c))``: a sum over M rows of
    dy*xhat, each xhat off by the forward's error. Bounded by the sum of magnitudes,
    never by |dweight|, which cancels (random-sign terms). ``rows``: M, where ``ref`` holds a part of the rows
    (a chunk of a case too large to hold whole: the chunks' terms add up to the case's)."""
    m, n = ref.x.shape
    m = rows or m
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c = (np.abs(ref.x) + _mean_abs(ref)[:, None]) * ref.rstd[:, None]
        terms = _rows_abs(dy, ref) * (np.abs(ref.xhat) + c)
        # per-head weights: each head's dweight sums M/G rows (oracle.group_sums)
        return (k(n) + k(m // ref.groups)) * accumulation_roundoff(dtype) * oracle.group_sums(terms, ref.groups)


def dbias_accumulation(dy: np.ndarray, ref: oracle.Forward, dtype: str, rows: int | None = None) -> np.ndarray:
    """(N,): ``k(M)*u_acc*sum_rows(|dy|)``, a sum of M terms of dy alone (no statistics); ``rows`` as above."""
    m = rows or ref.x.shape[0]
    return k(m) * accumulation_roundoff(dtype) * _rows_abs(dy, ref).sum(axis=0)


def _rounded(value_abs: np.ndarray, dtype: str) -> np.ndarray:
    """The output-rounding part for a value of magnitude ``value_abs`` stored in ``dtype``:
    three roundings (of the value and the terms it is made of), subnormals included."""
    return 3 * (UNIT_ROUNDOFF[dtype] * value_abs + SUBNORMAL_SPACING[dtype] / 2)


def column_sum_bound(value: np.ndarray, accumulation: np.ndarray, dtype: str) -> np.ndarray:
    """The bound on a column sum (dweight, dbias) stored in ``dtype``: its output rounding plus its accumulation
    term (:func:`dweight_accumulation`, :func:`dbias_accumulation`), as :func:`backward_bounds` has it."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _rounded(np.abs(value), dtype) + accumulation


def backward_bounds(dy: np.ndarray, ref: oracle.Forward, grads: oracle.Backward, dtype: str,
                    param_dtype: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds on ``|dx - dx_ref|`` (M, N), ``|dweight - ref|`` and ``|dbias - ref|`` (N,).

    With r = 1/sigma_eps and c = (|x| + mean|x|)*r (NUMERICS.md, with mean|x| for |mu| as above):
    ``bound_dx = 3*(u_out*|dx_ref| + eta_out/2) + k(N)*u_acc*r*(|g| + mean|g| + (|xhat| + c)*mean|g*xhat|)``,
    ``bound_dw = 3*(u_par*|dw_ref| + eta_par/2) + (k(N) + k(M))*u_acc*sum_rows(|dy|*(|xhat| + c))``,
    ``bound_db = 3*(u_par*|db_ref| + eta_par/2) + k(M)*u_acc*sum_rows(|dy|)``.

    dx has x's dtype (``dtype``); dweight and dbias have the parameters' dtype
    (``param_dtype``, default ``dtype``), so their output rounding is that dtype's,
    while the accumulation is fp32 (or fp64) whatever the storage.

    One bound for every backend: it depends on the case and the dtypes, never on what
    a backend exposes (``layer_norm_statistics``) or says about its internals. Saved
    statistics stored coarser than the accumulation and reused by the backward are a
    defect, judged as one (a known deviation where a library has it; the hypothesis
    ``saved statistics rounded to the input dtype`` names it in the failure).
    """
    params = param_dtype or dtype
    with np.errstate(invalid="ignore", over="ignore"):
        dx = _rounded(np.abs(grads.dx), dtype) + dx_accumulation(dy, ref, dtype)
        dw = column_sum_bound(grads.dweight, dweight_accumulation(dy, ref, dtype), params)
        db = column_sum_bound(grads.dbias, dbias_accumulation(dy, ref, dtype), params)
    return dx, dw, db


def n1_dweight_bound(dy: np.ndarray, ref: oracle.Forward, dtype: str, param_dtype: str | None = None) -> np.ndarray:
    """(1,) bound on |dweight| when N = 1, where the exact value is 0.

    With N = 1 the row's mean is x itself, exactly (a sum of one term), so a
    two-pass kernel's xhat = (x - mean)*rstd is exactly 0, and so is dweight. A
    kernel that computes xhat as fma(x, rstd, -(mean*rstd)) (PyTorch's CPU kernels)
    is off by the one rounding of mean*rstd: |xhat'| <= u_acc*|x|*r', where the
    computed r' <= r*(1 + k(1)*u_acc + u_acc) (its accumulation, and its storage in
    the accumulation dtype). dweight = sum_rows(dy*xhat'), accumulated with
    (k(M) + 1)*u_acc, then stored in the parameters' dtype (3*u_par, eta_par):
    ``|dweight| <= u_acc*(1 + (k(1) + 1)*u_acc)*(1 + (k(M) + 1)*u_acc)*(1 + 3*u_par)
    * sum_rows(|dy|*|x|*r) + 1.5*eta_par``, some 40x tighter than the general
    dweight bound at N = 1. Any other N = 1 mishandling (x*w + b, a Bessel NaN) is off
    by O(|dy|*|x|*r), ~1/u_acc times more.
    """
    m = ref.x.shape[0]
    u_acc = accumulation_roundoff(dtype)
    params = param_dtype or dtype
    factor = u_acc * (1 + (k(1) + 1) * u_acc) * (1 + (k(m) + 1) * u_acc) * (1 + 3 * UNIT_ROUNDOFF[params])
    with np.errstate(invalid="ignore", over="ignore"):
        scale = (_rows_abs(dy, ref) * np.abs(ref.x) * ref.rstd[:, None]).sum(axis=0)
    return factor * scale + 1.5 * SUBNORMAL_SPACING[params]


# -- bounds for the reference-free identities ------------------------------------------------
#
# A correct kernel's value v of a quantity whose exact value is v* obeys
# |v - v*| <= 3*u*|v*| + rest (the bounds above). The identities below never
# use v*, so write the bound in the computed value: |v*| <= |v| + |v - v*| gives
# |v - v*| <= (3*u*|v| + rest) / (1 - 3*u) -- the *allowance* of v, computable
# from the kernel's own output and the input's statistics alone.


def _allowance(value: np.ndarray, dtype: str, rest: np.ndarray) -> np.ndarray:
    u3 = 3 * UNIT_ROUNDOFF[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        return (u3 * np.abs(np.asarray(value, dtype=np.float64)) + 1.5 * SUBNORMAL_SPACING[dtype] + rest) / (1 - u3)


def row_sum_bound(dy: np.ndarray, ref: oracle.Forward, dx: np.ndarray, dtype: str) -> np.ndarray:
    """(M,) bound on ``|sum_j dx[i, j]|`` for a correct kernel, from its own dx.

    Exactly, sum_j dx_j = r*(sum(g) - N*mean(g) - mean(g*xhat)*sum(xhat)) = 0, since
    sum(xhat) = 0. Each computed dx_j is within its allowance of the exact value
    (the dx bound, in the computed value), so the row sum is within the sum of the
    allowances, plus the float64 summation of N values on the host, (N-1)*u64*sum|dx|.
    """
    m, n = ref.x.shape
    dx2 = np.asarray(dx, dtype=np.float64).reshape(m, n)
    allowance = _allowance(dx2, dtype, dx_accumulation(dy, ref, dtype))
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite dx makes the bound NaN: out of bound
        return allowance.sum(axis=1) + max(n - 1, 0) * UNIT_ROUNDOFF["float64"] * np.abs(dx2).sum(axis=1)


def xhat_projection_bound(dy: np.ndarray, ref: oracle.Forward, dx: np.ndarray, dtype: str) -> np.ndarray:
    """(M,) bound on ``|sum_j xhat[i, j]*dx[i, j]|`` for a correct kernel when eps = 0.

    Exactly, sum_j xhat_j*dx_j = r*(N*mean(g*xhat) - mean(g)*sum(xhat) - mean(g*xhat)*sum(xhat^2)),
    and with eps = 0, sum(xhat^2) = N*var/(var + eps) = N, so it is 0. (With eps > 0 it is
    r*N*mean(g*xhat)*eps/(var + eps), not 0: the identity is for eps = 0 only.)
    Error terms: each dx_j within its allowance, weighted by |xhat_j|; xhat is the
    float64 oracle's, off by at most k(N)*u64*(c_j + |xhat_j|) (its forward bound
    with w = 1, b = 0), weighted by |dx_j|; the host's float64 sum, N*u64*sum|xhat*dx|.
    """
    m, n = ref.x.shape
    dx2 = np.asarray(dx, dtype=np.float64).reshape(m, n)
    u64 = UNIT_ROUNDOFF["float64"]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c = (np.abs(ref.x) + _mean_abs(ref)[:, None]) * ref.rstd[:, None]
        xhat_error = k(n) * u64 * (c + np.abs(ref.xhat))
        allowance = _allowance(dx2, dtype, dx_accumulation(dy, ref, dtype))
        return ((np.abs(ref.xhat) * allowance).sum(axis=1) + (np.abs(dx2) * xhat_error).sum(axis=1)
                + n * u64 * np.abs(ref.xhat * dx2).sum(axis=1))


def dbias_spread_bound(dy: np.ndarray, ref: oracle.Forward, dbias_a: np.ndarray, dbias_b: np.ndarray,
                       dtype: str, param_dtype: str | None = None) -> np.ndarray:
    """(N,) bound on ``|dbias(x_a) - dbias(x_b)|`` for one dy and two inputs x_a, x_b.

    dbias = sum_rows(dy) does not depend on x; each computed dbias is within its
    allowance of that one exact value (from ``k(M)*u_acc*sum_rows(|dy|)`` and the
    storage rounding in the parameters' dtype), so the two differ by at most the
    sum of their allowances.
    """
    params = param_dtype or dtype
    rest = dbias_accumulation(dy, ref, dtype)
    return _allowance(dbias_a, params, rest) + _allowance(dbias_b, params, rest)


def sign_symmetry_bounds(dy: np.ndarray, ref: oracle.Forward, dx_a: np.ndarray, dx_b: np.ndarray,
                         dweight_a: np.ndarray | None, dweight_b: np.ndarray | None, dtype: str,
                         param_dtype: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Bounds on ``|dx(x) - dx(-x)|`` (M, N) and ``|dweight(x) + dweight(-x)|`` (N,), same dy.

    Negating x negates xhat and leaves r (LayerNorm's sigma, RMSNorm's rms) unchanged, so exactly
    dx(-x) = dx(x) (dx = r*(g [- mean(g)] - xhat*mean(g*xhat)) is even in xhat) and dweight(-x) =
    -dweight(x) (dweight = sum_rows(dy*xhat) is odd). Each computed value is within its allowance of
    its exact value, and the two exact values agree (up to sign), so they differ by at most the sum
    of the two allowances. (dweight does not depend on x's sign only up to that sign: it is odd.)
    """
    params = param_dtype or dtype
    m, n = ref.x.shape
    a, b = (np.asarray(d, dtype=np.float64).reshape(m, n) for d in (dx_a, dx_b))
    rest = dx_accumulation(dy, ref, dtype)
    dx = _allowance(a, dtype, rest) + _allowance(b, dtype, rest)
    if dweight_a is None or dweight_b is None:
        return dx, None
    rest_w = dweight_accumulation(dy, ref, dtype)
    wa, wb = (np.asarray(d, dtype=np.float64).reshape(-1) for d in (dweight_a, dweight_b))
    return dx, _allowance(wa, params, rest_w) + _allowance(wb, params, rest_w)
