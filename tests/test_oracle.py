"""The float64 oracle against exact arithmetic (NUMERICS.md, "The oracle").

Forward: the mean and the biased variance of the float64 inputs are computed
exactly with :class:`fractions.Fraction`; ``sqrt(var + eps)`` and ``y`` with
:class:`decimal.Decimal` at 60 significant digits, i.e. about 1e-60 relative,
far below a float64 ulp, so the references are exact for our purpose.

Backward: the vector-Jacobian product ``(dx, dweight, dbias)`` is checked
against central differences of ``L = sum(dy * y(x, weight, bias))`` evaluated
in Decimal at 60 digits with step 1e-25: the truncation error is
O(h^2) ~ 1e-50 and the cancellation error O(10^-60 / h) ~ 1e-35 (relative to
the scales below), both far below a float64 ulp.

Tolerances are a few float64 unit roundoffs ``U = 2**-53`` times the natural
scale of each quantity (sums of magnitudes, never the quantity itself, which
may cancel to ~0); the constants are derived next to each check.
"""

from __future__ import annotations

import itertools
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from normbench.check import oracle
from normbench.core.dtypes import U64 as U  # float64 unit roundoff, 2**-53

PREC = 60     # Decimal digits of the references
STEP = Decimal("1e-25")

# A forward error of a few U relative to the natural scale. numpy's pairwise
# summation for N <= 17 adds at most 5 roundings along any path (8 partial
# sums of <= 2 terms, a 3-level tree, the remainder), so the mean errs by
# <= 6U*mean|x| (with the division) and the variance by <= ~8U relative; the
# centering, division, sqrt, scaling and bias add one rounding each.
# C_FWD = 8 covers what the oracle can legitimately lose; a Bessel-corrected
# variance is off by a factor N/(N-1) (>= 1/16 relative for N <= 17), i.e.
# ~1e14 U, which the test below proves is caught. (Observed on these inputs:
# at most 2U of the scale for every quantity.)
C_FWD = 8.0


# -- exact references -----------------------------------------------------------


def _dec(f: Fraction) -> Decimal:
    """A Fraction as a Decimal rounded to the current context (PREC digits)."""
    return Decimal(f.numerator) / Decimal(f.denominator)


def exact_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float, *, ddof: int = 0) -> dict:
    """Exact mean, var, rstd and y of the (M, N) float64 rows ``x`` (as float64 arrays,
    rounded once from the exact values). ``ddof=1`` gives the deliberately wrong
    Bessel-corrected variant."""
    m, n = x.shape
    e = Fraction(float(eps))
    means, variances, rstds, ys = [], [], [], np.zeros((m, n))
    with localcontext() as ctx:
        ctx.prec = PREC
        for r in range(m):
            row = [Fraction(float(v)) for v in x[r]]
            mu = sum(row, Fraction(0)) / n
            var = sum(((v - mu) ** 2 for v in row), Fraction(0)) / (n - ddof) if n > ddof else Fraction(0)
            sigma = _dec(var + e).sqrt()
            means.append(float(mu))
            variances.append(float(var))
            rstds.append(float(1 / sigma) if sigma else np.inf)
            for j in range(n):
                xhat = _dec(row[j] - mu) / sigma if sigma else Decimal(0)
                ys[r, j] = float(xhat * Decimal(float(w[j])) + Decimal(float(b[j])))
    return {"mean": np.array(means), "var": np.array(variances), "rstd": np.array(rstds), "y": ys}


def forward_tolerances(fwd: oracle.Forward) -> dict[str, np.ndarray]:
    """The allowed |oracle - exact| per quantity, on the oracle's natural scales."""
    x, w, b = fwd.x, fwd.weight, fwd.bias
    mean_abs = np.abs(x).mean(axis=1)
    mean_err = C_FWD * U * mean_abs
    return {
        "mean": mean_err,
        # var = mean((x - mu)^2): relative roundings of the sum, plus the squared
        # error of the mean (sum(x - mu) = 0 makes the linear term vanish).
        "var": C_FWD * U * fwd.var + mean_err**2,
        # rstd = 1/sqrt(var + eps): half the relative error of var + eps, plus
        # the sqrt and the division.
        "rstd": C_FWD * U * fwd.rstd * (1.0 + (fwd.var + mean_err**2) / fwd.sigma_eps**2),
        # y = w*xhat + b: output roundings scale with |w*xhat| + |b|; the
        # centering x - mu errs by U*|x| plus the mean's error (~U*mean|x|),
        # amplified by |w|/sigma_eps -- the inherent conditioning term of
        # normbench.check.error_model.
        "y": C_FWD * U * (np.abs(w * fwd.xhat) + np.abs(b)
                          + np.abs(w) * (np.abs(x) + mean_abs[:, None]) / fwd.sigma_eps[:, None]),
    }


def forward_violations(fwd: oracle.Forward, ref: dict) -> dict[str, np.ndarray]:
    """Per quantity, a boolean array: where the oracle and ``ref`` disagree
    beyond the tolerance (NaN counts as disagreeing)."""
    tol = forward_tolerances(fwd)
    with np.errstate(invalid="ignore"):
        return {q: ~(np.abs(getattr(fwd, q) - ref[q]) <= tol[q]) for q in ("mean", "var", "rstd", "y")}


# -- forward cases ----------------------------------------------------------------


def _rows(rng: np.random.Generator, m: int, n: int, kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal((m, n)) * rng.uniform(0.1, 10.0)
    if kind == "offset":  # a large mean with small noise: the ill-conditioned case
        return 1e4 + 1e-2 * rng.standard_normal((m, n))
    if kind == "tiny":  # sigma far below eps = 0.5 and close to 1e-5
        return 3.0 + 1e-3 * rng.standard_normal((m, n))
    raise AssertionError(kind)


FORWARD_CASES = [
    (n, m, kind, eps, affine)
    for n, m, kind, eps, affine in itertools.product(
        (1, 2, 3, 5, 8, 17), (1, 3), ("normal", "offset", "tiny"), (0.0, 1e-5, 0.5), (True, False))
    # eps = 0 needs a row with variance: N = 1 has none
    if not (eps == 0.0 and n == 1)
]


def _forward_inputs(n: int, m: int, kind: str, affine: bool, seed: int):
    rng = np.random.default_rng(seed)
    x = _rows(rng, m, n, kind)
    if affine:
        weight = rng.uniform(-2.0, 2.0, n)
        bias = rng.uniform(-1.0, 1.0, n)
    else:
        weight = bias = None
    return x, weight, bias


@pytest.mark.parametrize(("n", "m", "kind", "eps", "affine"), FORWARD_CASES)
def test_forward_matches_exact(n, m, kind, eps, affine):
    x, weight, bias = _forward_inputs(n, m, kind, affine, seed=1000 * n + 10 * m + len(kind))
    fwd = oracle.forward(x, (n,), weight, bias, eps)
    assert fwd.y.shape == (m, n) and fwd.mean.shape == fwd.var.shape == (m,)
    if not affine:
        np.testing.assert_array_equal(fwd.weight, np.ones(n))
        np.testing.assert_array_equal(fwd.bias, np.zeros(n))
    ref = exact_forward(fwd.x, fwd.weight, fwd.bias, eps)
    bad = forward_violations(fwd, ref)
    for quantity, mask in bad.items():
        assert not mask.any(), (
            f"oracle {quantity} disagrees with the exact value beyond {C_FWD} ulps of its scale: "
            f"oracle {getattr(fwd, quantity)[mask]}, exact {ref[quantity][mask]}")
    if n == 1:  # a single element normalizes to 0: y = bias exactly
        np.testing.assert_array_equal(fwd.y, np.broadcast_to(fwd.bias, (m, n)))


@pytest.mark.parametrize(("n", "m", "kind", "eps", "affine"), [c for c in FORWARD_CASES if c[0] >= 2])
def test_forward_tolerance_catches_bessel_correction(n, m, kind, eps, affine):
    """The same tolerance rejects an oracle that divides by N-1: the test above
    cannot pass trivially. The variance check catches it on every input; the
    y check on its own catches it wherever the variance is not swamped by eps."""
    x, weight, bias = _forward_inputs(n, m, kind, affine, seed=1000 * n + 10 * m + len(kind))
    fwd = oracle.forward(x, (n,), weight, bias, eps)
    wrong = exact_forward(fwd.x, fwd.weight, fwd.bias, eps, ddof=1)  # correctly rounded, wrong formula
    bad = forward_violations(fwd, wrong)
    assert bad["var"].all(), "a Bessel-corrected variance passed the variance tolerance"
    # Bessel's correction scales sigma_eps by about 1 + var/(2(N-1)(var + eps)),
    # so y moves by |w*xhat| times that: where this is 100x the y tolerance
    # (everywhere unless eps swamps the variance), the y check alone must fire.
    shift = fwd.var / (2 * (n - 1) * (fwd.var + eps))
    predicted = np.abs(fwd.weight * fwd.xhat) * shift[:, None]
    visible = (predicted > 100 * forward_tolerances(fwd)["y"]).any(axis=1)
    assert bad["y"][visible].any(axis=1).all(), "a Bessel-corrected y passed the y tolerance"
    if eps <= 1e-5:
        assert visible.all()  # the check above was not vacuous


# -- backward ---------------------------------------------------------------------


def _loss(x: list[list[Decimal]], w: list[Decimal], b: list[Decimal], dy: list[list[Decimal]], eps: Decimal) -> Decimal:
    """``sum(dy * y)`` with y the LayerNorm of the rows of x, in the current Decimal context."""
    n = len(w)
    total = Decimal(0)
    for row, drow in zip(x, dy, strict=True):
        mu = sum(row, Decimal(0)) / n
        var = sum(((v - mu) * (v - mu) for v in row), Decimal(0)) / n
        sigma = (var + eps).sqrt()
        for j in range(n):
            total += drow[j] * ((row[j] - mu) / sigma * w[j] + b[j])
    return total


def exact_vjp(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray, eps: float):
    """``(dx, dweight, dbias)`` by central differences of ``sum(dy*y)`` at 60 digits."""
    with localcontext() as ctx:
        ctx.prec = PREC
        xd = [[Decimal(float(v)) for v in row] for row in x]
        wd = [Decimal(float(v)) for v in w]
        bd = [Decimal(float(v)) for v in b]
        dyd = [[Decimal(float(v)) for v in row] for row in dy]
        e = Decimal(float(eps))

        def central(vec: list[Decimal], j: int, call) -> float:
            keep = vec[j]
            vec[j] = keep + STEP
            up = call()
            vec[j] = keep - STEP
            down = call()
            vec[j] = keep
            return float((up - down) / (2 * STEP))

        dx = np.zeros(x.shape)
        for r, row in enumerate(xd):  # rows are independent: differentiate one row's loss
            for j in range(len(row)):
                dx[r, j] = central(row, j, lambda r=r: _loss([xd[r]], wd, bd, [dyd[r]], e))
        loss = lambda: _loss(xd, wd, bd, dyd, e)
        dweight = np.array([central(wd, j, loss) for j in range(len(wd))])
        dbias = np.array([central(bd, j, loss) for j in range(len(bd))])
    return dx, dweight, dbias


# Backward tolerance: a few U times sums of magnitudes (NUMERICS.md's backward
# bound with float64 accumulation). dx = r*(g - mean(g) - xhat*mean(g*xhat))
# with g = dy*w: each term and each N <= 8 mean adds at most ~4 roundings
# relative to r*(|g| + mean|g| + |xhat|*mean|g*xhat|); the error of xhat itself
# (~U*c with c = (|x| + mean|x|)*r, the forward's conditioning) enters through
# xhat*mean(g*xhat) as (|xhat| + c)*mean|g*xhat|. dweight and dbias are sums over
# M <= 3 rows of dy*xhat and dy: bounded by sum(|dy|*(|xhat| + c)) and sum|dy|,
# never by their own size (random-sign terms cancel). C_BWD = 16 leaves room for
# the forward's ~8U inside xhat and r. (Observed on these inputs: at most 2U of
# the scale.) Formula errors (the mutants below) exceed it by many orders.
C_BWD = 16.0

BACKWARD_CASES = [
    (n, m, kind, eps, has_w, has_b)
    for (n, m), kind, eps, (has_w, has_b) in itertools.product(
        ((1, 2), (2, 1), (3, 3), (5, 2), (8, 3)), ("normal", "offset", "tiny"), (0.0, 1e-5, 0.5),
        ((True, True), (True, False), (False, True), (False, False)))
    if not (eps == 0.0 and n == 1)
    # keep the run short: every presence combination on the "normal" rows,
    # the affine one on the ill-conditioned rows
    and (kind == "normal" or (has_w and has_b))
]


def _backward_inputs(n, m, kind, has_w, has_b, seed):
    rng = np.random.default_rng(seed)
    x = _rows(rng, m, n, kind)
    weight = rng.uniform(0.5, 2.0, n) * rng.choice((-1.0, 1.0), n) if has_w else None
    bias = rng.uniform(-1.0, 1.0, n) if has_b else None
    # dy with a clearly nonzero row mean and random weight: never dy = 1 with
    # weight = 1, where dx = 0 and the check would be vacuous
    dy = 0.75 + rng.standard_normal((m, n))
    return x, weight, bias, dy


def _backward_scales(fwd: oracle.Forward, dy: np.ndarray):
    r = fwd.rstd[:, None]
    g = dy * fwd.weight
    c = (np.abs(fwd.x) + np.abs(fwd.x).mean(axis=1, keepdims=True)) * r
    mean_abs_g = np.abs(g).mean(axis=1, keepdims=True)
    mean_abs_gx = np.abs(g * fwd.xhat).mean(axis=1, keepdims=True)
    scale_dx = r * (np.abs(g) + mean_abs_g + (np.abs(fwd.xhat) + c) * mean_abs_gx)
    scale_dw = (np.abs(dy) * (np.abs(fwd.xhat) + c)).sum(axis=0)
    scale_db = np.abs(dy).sum(axis=0)
    return scale_dx, scale_dw, scale_db


@pytest.mark.parametrize(("n", "m", "kind", "eps", "has_w", "has_b"), BACKWARD_CASES)
def test_backward_matches_finite_differences(n, m, kind, eps, has_w, has_b):
    x, weight, bias, dy = _backward_inputs(n, m, kind, has_w, has_b, seed=7 + 100 * n + m + len(kind))
    fwd = oracle.forward(x, (n,), weight, bias, eps)
    bwd = oracle.backward(dy, fwd)
    assert bwd.dx.shape == (m, n) and bwd.dweight.shape == bwd.dbias.shape == (n,)
    dx, dweight, dbias = exact_vjp(fwd.x, fwd.weight, fwd.bias, dy, eps)
    scale_dx, scale_dw, scale_db = _backward_scales(fwd, dy)
    np.testing.assert_array_less(np.abs(bwd.dx - dx), C_BWD * U * scale_dx + 1e-300)
    np.testing.assert_array_less(np.abs(bwd.dweight - dweight), C_BWD * U * scale_dw + 1e-300)
    np.testing.assert_array_less(np.abs(bwd.dbias - dbias), C_BWD * U * scale_db + 1e-300)
    if n == 1:  # a single element: xhat = 0, so dx = 0 and dweight = 0 exactly
        np.testing.assert_array_equal(bwd.dx, 0.0)
        np.testing.assert_array_equal(bwd.dweight, 0.0)
    elif n >= 3:
        # Not vacuous (N = 2 is: y = +-sigma/sqrt(sigma^2 + eps) whatever x is,
        # so dx is ~0): the exact dx is large next to its conditioning-free
        # scale, and the tolerance rejects a backward that drops the
        # xhat*mean(g*xhat) term, or (with a weight) forgets it in g = dy*weight.
        g = dy * fwd.weight
        r = fwd.rstd[:, None]
        core = r * (np.abs(g) + np.abs(g).mean(axis=1, keepdims=True)
                    + np.abs(fwd.xhat) * np.abs(g * fwd.xhat).mean(axis=1, keepdims=True))
        assert np.abs(dx).max() > 1e-2 * core.max()
        no_proj = (g - g.mean(axis=1, keepdims=True)) * r
        assert (np.abs(no_proj - dx) > C_BWD * U * scale_dx).any()
        if has_w:
            unweighted = oracle.backward(dy, oracle.forward(x, (n,), None, bias, eps)).dx
            assert (np.abs(unweighted - dx) > C_BWD * U * scale_dx).any()


# -- empty input ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 4), (2, 0, 4), (0, 3, 4)])
@pytest.mark.parametrize("affine", [True, False])
def test_empty_input(shape, affine):
    n = shape[-1]
    x = np.zeros(shape)
    weight = np.arange(1.0, n + 1) if affine else None
    bias = np.full(n, 0.5) if affine else None
    fwd = oracle.forward(x, (n,), weight, bias, 1e-5)
    assert fwd.x.shape == fwd.xhat.shape == fwd.y.shape == (0, n)
    assert fwd.mean.shape == fwd.var.shape == fwd.sigma_eps.shape == fwd.rstd.shape == (0,)
    bwd = oracle.backward(np.zeros(shape), fwd)
    assert bwd.dx.shape == (0, n)
    assert bwd.dweight.shape == bwd.dbias.shape == (n,)
    np.testing.assert_array_equal(bwd.dweight, np.zeros(n))
    np.testing.assert_array_equal(bwd.dbias, np.zeros(n))
