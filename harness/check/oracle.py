"""The float64 oracle: LayerNorm and RMSNorm forward and backward, two-pass, on the rows.

RMSNorm is LayerNorm without the centring (``centered=False``: the mean taken as 0, so
``var`` is the mean square and ``xhat = x / sqrt(mean(x^2) + eps)``) and without a bias;
one code path computes both, so every check built on :class:`Forward` serves both.

Inputs are the *already rounded* arrays a backend receives (x, weight, bias in
the tested dtype); everything is computed in float64 on a (M, N) view where
M is the number of rows and N the number of normalized elements. The oracle is
checked against exact rational arithmetic in ``tests/test_oracle.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.core import operations


def rows_view(a: np.ndarray, normalized_shape: tuple[int, ...]) -> np.ndarray:
    """``a`` as a float64 (M, N) array: M rows of N = prod(normalized_shape)."""
    n = int(np.prod(normalized_shape, dtype=np.int64))
    return np.asarray(a, dtype=np.float64).reshape(-1, n)


def params_row(p: np.ndarray | None, n: int, fill: float) -> np.ndarray:
    """weight or bias as a float64 (N,) row, a copy; ``fill`` stands in for None."""
    if p is None:
        return np.full(n, fill)
    return np.array(p, dtype=np.float64).reshape(n)


def weight_rows(weight: np.ndarray | None, n: int, rows: int, fill: float = 1.0) -> np.ndarray:
    """The weight each of ``rows`` rows of N = ``n`` is scaled by, float64: one (N,) row for every row, or for
    per-head weights (``weight`` of G*N elements: ``Case.per_head``) an (M, N) array, row ``r`` taking weight row
    ``r % G`` (x is ``[..., heads, N]``, heads innermost among the rows)."""
    if weight is None or np.size(weight) == n:
        return params_row(weight, n, fill)
    groups = np.size(weight) // n
    if groups * n != np.size(weight) or rows % groups:
        raise ValueError(f"a weight of {np.size(weight)} elements fits neither one row of {n} nor {rows} rows of "
                         f"{n} in groups")
    return np.tile(np.array(weight, dtype=np.float64).reshape(groups, n), (rows // groups, 1))


def group_sums(a: np.ndarray, groups: int) -> np.ndarray:
    """Column sums of (M, N) ``a`` over the rows that share a weight: (N,) for one weight, else (G*N,), group
    ``g`` the rows ``r % G == g`` (:func:`weight_rows`)."""
    m, n = a.shape
    if groups == 1:
        return a.sum(axis=0)
    return a.reshape(m // groups, groups, n).sum(axis=0).reshape(-1)


@dataclass(frozen=True)
class Forward:
    """Oracle forward on (M, N) rows; ``y`` is reshaped to x's shape by callers."""

    x: np.ndarray          # (M, N) float64 input: a copy (the oracle shares no memory with its arguments)
    weight: np.ndarray     # (N,) float64 (ones when None); (M, N) for per-head weights (``groups`` > 1)
    bias: np.ndarray       # (N,) float64 (zeros when None; always for RMSNorm)
    mean: np.ndarray       # (M,) the mean subtracted: the row mean, or zeros for RMSNorm
    var: np.ndarray        # (M,) biased variance, or for RMSNorm the mean square mean(x^2)
    sigma_eps: np.ndarray  # (M,) sqrt(var + eps)
    xhat: np.ndarray       # (M, N)
    y: np.ndarray          # (M, N)
    centered: bool = True  # LayerNorm (True) or RMSNorm (False)
    groups: int = 1        # distinct weight rows: 1, or the heads of per-head weights (:func:`weight_rows`)

    @property
    def rstd(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 / self.sigma_eps


def forward(x: np.ndarray, normalized_shape: tuple[int, ...], weight: np.ndarray | None,
            bias: np.ndarray | None, eps: float, norm: str = "layer_norm", weight_offset: float = 0.0) -> Forward:
    """``y = (x - mean) / sqrt(var + eps) * weight + bias``, two-pass, in float64, for the normalization
    ``norm`` names (``normbench.core.operations``): one that is not ``centered`` (RMSNorm) takes the mean as 0,
    ``y = x / sqrt(mean(x^2) + eps) * weight``; one without a bias must get ``bias`` None. ``weight_offset``:
    Gemma's ``(weight_offset + weight)`` for the weight, added exactly (``Forward.weight`` holds the sum)."""
    op = operations.of(norm)
    subtract_mean = op.centered
    if not op.has_bias and bias is not None:
        raise ValueError(f"{op.label} has no bias")
    n = int(np.prod(normalized_shape, dtype=np.int64))
    # a copy, even of a float64 x: a reference must not change when the arrays it was computed from do (a
    # backend handed them that writes into its arguments; normbench.check.handover.Handover fails it)
    x2 = np.array(x, dtype=np.float64, order="C").reshape(-1, n)
    w = weight_rows(weight, n, x2.shape[0]) + (weight_offset if weight is not None else 0.0)
    groups = 1 if weight is None else np.size(weight) // n
    b = params_row(bias, n, 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean = x2.mean(axis=1) if x2.shape[0] and subtract_mean else np.zeros(x2.shape[0])
        centered = x2 - mean[:, None]
        var = (centered * centered).mean(axis=1) if x2.shape[0] else np.zeros(0)
        sigma_eps = np.sqrt(var + eps)
        xhat = centered / sigma_eps[:, None]
        y = xhat * w + b
    return Forward(x2, w, b, mean, var, sigma_eps, xhat, y, subtract_mean, groups)


@dataclass(frozen=True)
class Backward:
    """Oracle gradients: dx (M, N); dweight, dbias (N,) (per-head weights: dweight (G*N,), each head's sum)."""

    dx: np.ndarray
    dweight: np.ndarray
    dbias: np.ndarray
    g: np.ndarray  # dy * weight, (M, N)


def backward(dy: np.ndarray, fwd: Forward) -> Backward:
    """The closed form: ``dx = r*(g - mean(g) - xhat*mean(g*xhat))``, ``g = dy*weight``,
    ``dweight = sum_rows(dy*xhat)``, ``dbias = sum_rows(dy)``; for RMSNorm (nothing centred,
    so no ``mean(g)`` term) ``dx = r*(g - xhat*mean(g*xhat))``."""
    dy2 = np.asarray(dy, dtype=np.float64).reshape(fwd.x.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        g = dy2 * fwd.weight
        if dy2.shape[0]:
            mean_g = g.mean(axis=1, keepdims=True) if fwd.centered else np.zeros((dy2.shape[0], 1))
            mean_gx = (g * fwd.xhat).mean(axis=1, keepdims=True)
        else:
            mean_g = mean_gx = np.zeros((0, 1))
        dx = (g - mean_g - fwd.xhat * mean_gx) / fwd.sigma_eps[:, None]
        dweight = group_sums(dy2 * fwd.xhat, fwd.groups)
        dbias = dy2.sum(axis=0)
    return Backward(dx, dweight, dbias, g)
