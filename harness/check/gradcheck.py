"""Directional finite-difference checks of a backward pass, in float64.

For a direction v in one argument (x, weight or bias) the backward's
``<J^T dy, v>`` (``<dx, v_x>``, ``<dweight, v_w>`` or ``<dbias, v_b>``) must equal
``<dy, J v>``, estimated by a central difference of the backend's *own* forward:
``F = sum(dy * (y(p + v) - y(p - v))) / 2``. It checks that forward and backward
agree, independently of the oracle's closed form (which is used for bounds only).

The step. Default steps (1e-6 absolute, torch.autograd.gradcheck's) false-alarm
on correct code when sigma <= 1e-2 (NUMERICS.md); the x direction here is scaled
to each row: its centered part has rms ``ALPHA*sigma_eps`` per row, and it has a
nonzero mean per row of the same size (so a gradient whose row sum is not 0
shows; xhat ignores the mean, so it costs no truncation).

Exact perturbations. Each row of x (and all of weight, of bias) and its direction
are rounded to a grid q = 2^(ceil(log2 E) - 52), E = max|p| + max|v|: every
multiple of q up to 2^53*q is a float64, so p, p + v and p - v are exact and the
check's only errors are the ones below.

The bound, ``|F - A| <= T + R + G + H``:

* T, truncation (x direction only; y is linear in weight and bias, so T = 0 for
  them and their steps are half their rms, not small). Along s, with c = x - mean,
  d the centered direction, S = var + eps, xhat(s) = (c + s*d)/sqrt(S) * q(s)^(-1/2),
  q(s) = 1 + 2*s*beta*alpha + s^2*alpha^2, alpha = rms(d)/sqrt(S),
  beta = mean(c*d)/sqrt(S*mean(d^2)), |beta| <= 1 (Cauchy-Schwarz). q^(-1/2) is the
  generating function of the Legendre polynomials: q(s)^(-1/2) = sum_k P_k(-beta)*(alpha*s)^k,
  with |P_k| <= 1 on [-1, 1]. So xhat_j(s) = sum_k phi_k s^k, phi_k = xhat_j*a_k + e_j*a_(k-1),
  a_k = P_k(-beta)*alpha^k, e = d/sqrt(S); the series converges at s = 1 (alpha < 1), and
  (f(1) - f(-1))/2 - f'(0) = sum over odd k >= 3 of f_k, f_k = sum dy*w*phi_k. The
  leading f_3 is computed exactly (its sign cancels across elements); the rest is
  bounded with |a_k| <= alpha^k:
  ``T = |f_3| + sum |dy*w| * (|xhat|*alpha^5 + |e|*alpha^4)/(1 - alpha^2)``.
  Computed in float64 and inflated by 1e-9 relative to cover that computation.
* R, the forward's rounding: each y(p +- v) is within ``error_model.forward_bound`` (float64)
  of the exact value, so R = sum |dy| * (bound(p + v) + bound(p - v)) / 2.
* G, the backward's rounding: sum |v| * (its ``error_model.backward_bounds``) at p.
* H, the host's float64 sums of n products: (n + 2)*u64 times their sums of magnitudes.

RMSNorm is the same with nothing centred (c = x, d = v, S = mean(x^2) + eps): the same
series, so the same T.

With ALPHA = 1e-4, T is ~1e-8 of the signal and R ~1e-11 * (|x| + mean|x|)/sigma of it,
while every bug class NUMERICS.md lists for the backward is off by O(1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.check import error_model, oracle
from normbench.check.conformance import ConformanceError, reference, run_backward, run_forward
from normbench.core.backend import Backend
from normbench.core.cases import Inputs, rng_for
from normbench.core.dtypes import U64

#: the x direction's centered rms per row, relative to sigma_eps (NUMERICS.md: <= 1e-3)
ALPHA = 1e-4
#: the weight and bias directions' rms relative to the parameter's (y is linear in them)
PARAM_STEP = 0.5


def _exact_grid(p: np.ndarray, v: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``p`` and ``v`` rounded to a power-of-two grid on which p, p + v and p - v are
    exact float64 numbers (per row when ``axis`` = 1, as a whole when None)."""
    keep = axis is not None
    extent = np.abs(p).max(axis=axis, keepdims=keep) + np.abs(v).max(axis=axis, keepdims=keep)
    with np.errstate(divide="ignore"):
        q = np.exp2(np.ceil(np.log2(np.where(extent > 0, extent, 1.0))) - 52)
    return np.round(p / q) * q, np.round(v / q) * q


@dataclass(frozen=True)
class Point:
    """The base point p (rows of x, weight, bias as float64, None where absent) and
    one direction (vx, vw, vb: exactly one is not None)."""

    x: np.ndarray
    weight: np.ndarray | None
    bias: np.ndarray | None
    vx: np.ndarray | None = None
    vw: np.ndarray | None = None
    vb: np.ndarray | None = None


def directions(inputs: Inputs) -> list[tuple[str, Point]]:
    """One point and direction per gradient: ("dx", ...), ("dweight", ...), ("dbias", ...)."""
    case = inputs.case
    rng = rng_for(case, inputs.seed, "direction")
    x = oracle.rows_view(inputs.x, case.normalized_shape)
    m, n = x.shape
    ref = reference(inputs)
    z = rng.standard_normal((m, n))
    centered = z - z.mean(axis=1, keepdims=True)
    rms = np.sqrt((centered * centered).mean(axis=1, keepdims=True))
    offset = rng.choice([-1.0, 1.0], (m, 1))
    vx = ALPHA * ref.sigma_eps[:, None] * (z / rms + offset)
    w = None if inputs.weight is None else np.asarray(inputs.weight, np.float64).reshape(n)
    b = None if inputs.bias is None else np.asarray(inputs.bias, np.float64).reshape(n)
    x_on_grid, vx = _exact_grid(x, vx, axis=1)
    out = [("dx", Point(x_on_grid, w, b, vx=vx))]
    for what, p in (("dweight", w), ("dbias", b)):
        if p is not None:
            p_on_grid, v = _exact_grid(p, PARAM_STEP * np.sqrt(np.mean(p * p)) * rng.standard_normal(n), axis=None)
            point = Point(x_on_grid, p_on_grid if what == "dweight" else w, p_on_grid if what == "dbias" else b,
                          **{"vw" if what == "dweight" else "vb": v})
            out.append((what, point))
    return out


def _inputs_at(inputs: Inputs, x: np.ndarray, weight, bias) -> Inputs:
    ns = inputs.case.normalized_shape
    return Inputs(inputs.case, inputs.seed, x.reshape(inputs.case.shape),
                  None if weight is None else weight.reshape(ns), None if bias is None else bias.reshape(ns))


def truncation(dy: np.ndarray, ref: oracle.Forward, vx: np.ndarray) -> float:
    """T: the central difference's truncation error along vx (see the module doc)."""
    c = ref.x - ref.mean[:, None]  # RMSNorm's mean is 0: nothing is centred, and the same series holds
    d = vx - vx.mean(axis=1, keepdims=True) if ref.centered else vx
    s = ref.sigma_eps**2
    mean_dd = (d * d).mean(axis=1)
    alpha = np.sqrt(mean_dd / s)
    if not np.all(alpha < 0.5):
        raise ValueError(f"the step is too large for the truncation bound: alpha up to {alpha.max():.3g}")
    beta = np.clip((c * d).mean(axis=1) / np.sqrt(s * mean_dd), -1.0, 1.0)
    p2, p3 = (3 * beta**2 - 1) / 2, -(5 * beta**3 - 3 * beta) / 2  # P_2(-beta), P_3(-beta)
    e = d / ref.sigma_eps[:, None]
    gw = dy * ref.weight
    f3 = float((gw * (ref.xhat * (p3 * alpha**3)[:, None] + e * (p2 * alpha**2)[:, None])).sum())
    tail = (np.abs(gw) * (np.abs(ref.xhat) * (alpha**5)[:, None] + np.abs(e) * (alpha**4)[:, None])
            / (1 - alpha**2)[:, None]).sum()
    return (abs(f3) + float(tail)) * (1 + 1e-9)


@dataclass(frozen=True)
class Comparison:
    """One directional check: the central difference F, the backward's A, and the bound's parts."""

    central: float
    backward: float
    truncation: float
    forward_rounding: float
    backward_rounding: float
    host: float

    @property
    def bound(self) -> float:
        return self.truncation + self.forward_rounding + self.backward_rounding + self.host

    @property
    def ok(self) -> bool:
        return bool(abs(self.central - self.backward) <= self.bound)


def compare(backend: Backend, inputs: Inputs, dy: np.ndarray, what: str, point: Point) -> Comparison:
    """Run the backend's forward at p +- v and its backward at p; return F, A and the bound."""
    __tracebackhide__ = True
    case = inputs.case
    ns = case.normalized_shape
    dy2 = oracle.rows_view(dy, ns)
    v = {"dx": point.vx, "dweight": point.vw, "dbias": point.vb}[what]
    ys, forward_bounds = [], []
    for sign in (1.0, -1.0):
        shifted = [p if dv is None else p + sign * dv for p, dv in
                   ((point.x, point.vx), (point.weight, point.vw), (point.bias, point.vb))]
        at = _inputs_at(inputs, *shifted)
        ys.append(oracle.rows_view(run_forward(backend, at, statistics=False).y, ns))
        forward_bounds.append(error_model.forward_bound(reference(at), case.dtype))
    difference = (ys[0] - ys[1]) / 2
    central = float((dy2 * difference).sum())
    base = _inputs_at(inputs, point.x, point.weight, point.bias)
    run = run_backward(backend, base, dy)
    grad = {"dx": run.dx, "dweight": run.dweight, "dbias": run.dbias}[what]
    grad = np.asarray(grad, dtype=np.float64).reshape(v.shape)
    products = grad * v
    ref = reference(base)
    bounds = dict(zip(("dx", "dweight", "dbias"), error_model.backward_bounds(dy, ref, oracle.backward(dy, ref), case.dtype)))
    return Comparison(
        central=central,
        backward=float(products.sum()),
        truncation=truncation(dy2, ref, point.vx) if what == "dx" else 0.0,
        forward_rounding=float((np.abs(dy2) * (forward_bounds[0] + forward_bounds[1]) / 2).sum()),
        backward_rounding=float((np.abs(v) * bounds[what]).sum()),
        host=(dy2.size + 2) * U64 * float(np.abs(dy2 * difference).sum())
        + (v.size + 2) * U64 * float(np.abs(products).sum()),
    )


def check_directional_derivatives(backend: Backend, inputs: Inputs, dy: np.ndarray) -> None:
    """For x, weight and bias in turn, the backward's <gradient, v> equals the central
    difference of the backend's forward along v, within the derived bound. float64 only."""
    __tracebackhide__ = True
    case = inputs.case
    if case.dtype != "float64" or case.params != "float64" or case.layout != "contiguous":
        raise ValueError(f"finite differences need contiguous float64 inputs and parameters, got case {case.id}")
    for what, point in directions(inputs):
        c = compare(backend, inputs, dy, what, point)
        if not c.ok:
            v = {"dx": "v_x", "dweight": "v_w", "dbias": "v_b"}[what]
            raise ConformanceError(
                f"{backend.name} {case.id} (seed {inputs.seed}): {what} disagrees with the backend's own forward: "
                f"<{what}, {v}> = {c.backward:.12g}, but the central difference <dy, (y(p + {v}) - y(p - {v}))/2> = "
                f"{c.central:.12g}; |difference| {abs(c.central - c.backward):.3g} > bound {c.bound:.3g} "
                f"(truncation {c.truncation:.2g}, forward rounding {c.forward_rounding:.2g}, backward rounding "
                f"{c.backward_rounding:.2g}, host sums {c.host:.2g}; step {ALPHA:g}*sigma_eps per row for x)\n"
                f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed}) on an exact grid; "
                f"directions: normbench.check.gradcheck.directions(inputs); "
                f"dy: normbench.core.cases.make_dy(<case>, seed={inputs.seed})")
