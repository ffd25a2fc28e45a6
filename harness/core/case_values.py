"""The values a case's axes take beside its shape and dtypes: the affine parameters (``AFFINES``), the memory layouts
(``LAYOUTS``), x's distributions (``DISTRIBUTIONS``: a name and the generator that draws it) and a fused case's
residual (``RESIDUALS``). Below :mod:`normbench.core.cases` (which builds cases from them) and
:mod:`normbench.core.case_ids` (whose grammar names them), so neither imports the other's way round."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

AFFINES = ("wb", "w", "b", "none")
LAYOUTS = ("contiguous", "transposed", "step2", "colslice", "rowslice")


def _normal(rng, shape, eps):
    return rng.standard_normal(shape)


def _offset(mu):
    return lambda rng, shape, eps: mu + rng.standard_normal(shape)


def _scaled(sigma):
    return lambda rng, shape, eps: sigma * rng.standard_normal(shape)


def _sigma_sqrt_eps(rng, shape, eps):
    return math.sqrt(eps) * rng.standard_normal(shape)


def _outlier(rng, shape, eps):
    x = rng.standard_normal(shape)
    if x.size:
        x[np.arange(shape[0]), rng.integers(0, shape[1], shape[0])] = 1e3
    return x


def _constant(rng, shape, eps):
    return np.repeat(rng.uniform(-5, 5, (shape[0], 1)), shape[1], axis=1)


def _constant_at(offset):
    """Constant rows at a large offset: offset plus an integer in [-5, 5] per row. Exactly,
    xhat = 0 and dx = rstd*(g - mean(g)). Integers keep every fp32 partial sum of up to 2**24/|x|
    terms exact, so with a power-of-two row length (1024 in the suites) every correct kernel's
    mean is exact, whatever its summation order, and whether it divides by N or multiplies by
    1/N (or merges Welford partials): x - mean = 0 exactly, and a correct dx is within the
    bound. A backward that does not centre x first (dx = a*g + b*x + c, sums of g*x) cancels
    at these means and is off by O(rstd*|g|)."""
    return lambda rng, shape, eps: np.repeat(offset + rng.integers(-5, 6, (shape[0], 1)), shape[1], axis=1)


def _near_constant(rng, shape, eps):
    return 1.0 + 1e-6 * rng.standard_normal(shape)


def _poisoned(rng, shape, eps):
    """N(0,1) with a NaN in row 1 and an Inf in row 2 (with fewer rows, the last rows)."""
    x = rng.standard_normal(shape)
    if shape[0]:
        x[min(1, shape[0] - 1), 0] = np.nan
        x[min(2, shape[0] - 1), shape[1] // 2] = np.inf
    return x


def _alternating(rng, shape, eps):
    """Rows of +c, -c, +c, ... with c a power of two per row: mean 0 (N even) and rms c exactly, so at eps 0 a
    normalization's xhat is exactly +-1 and y is the weight itself (the quantized ties: :func:`tie_weights`)."""
    signs = np.where(np.arange(shape[1]) % 2 == 0, 1.0, -1.0)
    return signs[None, :] * 2.0 ** rng.integers(-3, 4, (shape[0], 1)).astype(np.float64)


def _decades(rng, shape, eps):
    """Magnitudes spread log-uniformly over 1e-4 to 1e1 with random signs: after normalization y spans five
    decades, through a float8 format's subnormal codes and past its maximum at a small scale."""
    return rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-4, 1, shape)


def _zero_rows(rng, shape, eps):
    """N(0, 1) with every fourth row all zero (row 0 among them): a dynamic scale's floor."""
    x = rng.standard_normal(shape)
    x[::4] = 0.0
    return x


#: name -> generator of float64 (M, N) values before rounding to the dtype
DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, tuple[int, int], float], np.ndarray]] = {
    "normal": _normal,
    "uniform9": lambda rng, shape, eps: rng.uniform(-9, 9, shape),
    "uniform0to10": lambda rng, shape, eps: rng.uniform(0, 10, shape),
    "offset3": _offset(3.0),
    "offset1e2": _offset(1e2),
    "offset1e3": _offset(1e3),
    "offset1e4": _offset(1e4),
    "sigma1e-2": _scaled(1e-2),
    "sigma1e-3": _scaled(1e-3),
    "sigmasqrteps": _sigma_sqrt_eps,
    "big300": _scaled(300.0),
    "outlier": _outlier,
    "constant": _constant,
    "constant1e3": _constant_at(1e3),
    "constant1e4": _constant_at(1e4),
    "zero": lambda rng, shape, eps: np.zeros(shape),
    "nearconstant": _near_constant,
    "poisoned": _poisoned,
    "alternating": _alternating,
    "decades": _decades,
    "zerorows": _zero_rows,
}


def _residual_same(rng, shape, eps, x, dist):
    """Another draw of x's distribution; for constant rows at a large offset (``_constant_at``), constant rows of
    small integers, so that the sum stays a constant row of integers near that offset, whose mean every correct
    kernel computes exactly (two draws would double the offset, and 1023 terms of 2e4 pass 2**24)."""
    if dist.startswith("constant1e"):
        return np.repeat(rng.integers(-5, 6, (shape[0], 1)), shape[1], axis=1).astype(np.float64)
    return DISTRIBUTIONS[dist](rng, shape, eps)


def _residual_cancel(rng, shape, eps, x, dist):
    """-x plus 1e-2 * N(0, 1): x + residual is near zero, about 1e-2, what is left of two cancelling terms."""
    return -x + 1e-2 * rng.standard_normal(shape)


#: name -> generator of a fused operation's residual, float64 (M, N) values before rounding to the residual's dtype,
#: from ``(rng, shape, eps, x, dist)``: x the rounded input as float64 values, dist x's distribution's name
RESIDUALS: dict[str, Callable[..., np.ndarray]] = {
    "same": _residual_same,          # another draw of x's own distribution: every family keeps its purpose
    "normal": lambda rng, shape, eps, x, dist: rng.standard_normal(shape),
    "zero": lambda rng, shape, eps, x, dist: np.zeros(shape),   # the first layer: residual_out is x
    "dominant": lambda rng, shape, eps, x, dist: 1e2 * rng.standard_normal(shape),  # x's bits mostly rounded away
    "cancel": _residual_cancel,
}
