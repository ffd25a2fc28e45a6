"""§3.1 of the paper: layer-normalized recurrent networks, run on a LayerNorm.

Row vectors, one sequence per row, from a random state ``(h_0, c_0)``:

* RNN (eq. 4): ``a_t = h_{t-1} W_h + x_t W_x``, ``h_t = tanh(LN(a_t; g, b))``.
* LSTM (supplementary eq. 20-22): ``z_t = LN(h_{t-1} W_h; g1, b1) + LN(x_t W_x; g2, b2) + b``,
  ``(f, i, o, u) = (sigma, sigma, sigma, tanh)(z_t)``, ``c_t = f*c_{t-1} + i*u``,
  ``h_t = o*tanh(LN(c_t; g3, b3))``.

The claim: re-scaling all summed inputs (W_h and W_x together, by delta) leaves
the hidden states unchanged, while the same network without normalization
(``tanh(a_t + b)``; eq. 17-19) changes. With eps = 0 this is exact; with eps > 0
the network with ``delta*W`` and eps equals the one with W and ``eps/delta^2`` in
every LayerNorm whose input delta scales (the LSTM's first two, not ``LN(c_t)``).
Runs with the same eps go through the backend in lockstep, one call per
LayerNorm and step for all of them (rows: runs x sequences).

**The bound.** Each run's states deviate from the exact trajectory of its exact
network by at most E_t (componentwise, first order; ``normbench.paper.propagation``),
from each step's local error: every LayerNorm's bound (``normbench.paper.normalizations``:
the error model, the rounding of its input to the dtype, and the float64 matmul
error ``gamma_K*(|h||W_h| + |x||W_x|)``, ``gamma_K = K*u/(1 - K*u)``, plus one
rounding for delta) carried through the gates by their derivatives, and two
float64 roundings per gate. The exact trajectories coincide, so
``|h_t - h'_t| <= E_t + E'_t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.check.conformance import ConformanceError
from normbench.check.worst import ratios, worst_violation
from normbench.core.backend import Backend
from normbench.core.cases import Case, rng_for
from normbench.core.dtypes import U64, host_dtype
from normbench.paper.invariances import FAR
from normbench.paper.normalizations import BackendRowLayerNorm, RowLayerNorm
from normbench.paper.propagation import abs_times, checkpoints, ln_jacobian, ln_jacobian_times, propagated_bound

#: time steps, inputs per step, and the recurrent weights' scale (keeps the RNN contracting)
STEPS = 128
INPUTS = 16
RECURRENT_SCALE = 0.5
#: the gain of the LSTM's LN(h W_h), the recurrent gain 0.1 of Cooijmans et al. (paper §4). At
#: gain ~1 this LSTM amplifies a 1e-7 perturbation to ~1e-4 within 128 steps, in any
#: implementation: its trajectories could not be compared at the dtype's precision
RECURRENT_GAIN = 0.1
#: the networks, with the equations they follow
KINDS = {"rnn": "RNN (eq. 4)", "lstm": "LSTM (eq. 20-22)"}
#: the factors W_h and W_x are re-scaled by
RNN_SCALES = (0.1, 10.0)


@dataclass(frozen=True)
class Network:
    """Weights, inputs and initial state of an RNN (K = H) or LSTM (K = 4H); ``gains`` and
    ``biases`` are the LayerNorms' (param dtype): one for the RNN, three for the LSTM."""

    kind: str
    w_h: np.ndarray  # (H, K)
    w_x: np.ndarray  # (D, K)
    x: np.ndarray    # (T, B, D)
    h0: np.ndarray   # (B, H)
    c0: np.ndarray   # (B, H)
    gains: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    b: np.ndarray    # (K,) float64: the plain network's bias; the LSTM's gate bias

    @property
    def hidden(self) -> int:
        return self.w_h.shape[0]


def make_network(case: Case, seed: int, kind: str) -> Network:
    """``case.rows`` sequences of STEPS steps; the LayerNorm over the summed inputs has
    ``case.hidden`` units (K: H for the RNN, 4H for the LSTM). x ~ N(0, 1), W_x ~ N(0, 1/D),
    W_h ~ N(0, RECURRENT_SCALE^2/H), h_0 = tanh(N(0, 1))/2, c_0 ~ N(0, 1)/2; gains
    uniform(0.5, 1.5) (times RECURRENT_GAIN for the LSTM's LN(h W_h)), biases 0.1*N(0, 1)."""
    rng = rng_for(case, seed, kind)
    k, rows = case.hidden, case.rows
    h = k if kind == "rnn" else k // 4
    sizes = (k,) if kind == "rnn" else (k, k, h)
    gains = [rng.uniform(0.5, 1.5, s) for s in sizes]
    if kind == "lstm":
        gains[0] = RECURRENT_GAIN * gains[0]
    pdt = host_dtype(case.params)
    return Network(kind, rng.standard_normal((h, k)) * RECURRENT_SCALE / np.sqrt(h),
                   rng.standard_normal((INPUTS, k)) / np.sqrt(INPUTS), rng.standard_normal((STEPS, rows, INPUTS)),
                   np.tanh(rng.standard_normal((rows, h))) / 2, rng.standard_normal((rows, h)) / 2,
                   tuple(g.astype(pdt) for g in gains),
                   tuple((0.1 * rng.standard_normal(s)).astype(pdt) for s in sizes), 0.1 * rng.standard_normal(k))


@dataclass(frozen=True)
class Runs:
    """R runs in lockstep, one per delta: hidden states (T, R, B, H) and, when normalized,
    the bound on their deviation from the exact trajectories (C, R, B, H) at steps ``at``."""

    deltas: tuple[float, ...]
    h: np.ndarray
    bound: np.ndarray | None
    at: list[int]


def _summed(v: np.ndarray, w: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``delta*(v @ w)`` in float64 (delta per row) and the bound on its rounding error."""
    k = v.shape[1]
    a = delta * (v @ w)
    return a, delta * (k * U64 / (1 - k * U64)) * (np.abs(v) @ np.abs(w)) + U64 * np.abs(a)


def _lockstep(net: Network, deltas: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-row deltas (R*B, 1), the stacked initial state, and a function of t for the inputs."""
    rows = net.x.shape[1]
    d = np.repeat(np.asarray(deltas, np.float64), rows)[:, None]
    reps = (len(deltas), 1)
    return d, np.tile(net.h0, reps), np.tile(net.c0, reps), np.tile(net.x, (1, *reps))


def _runs(net: Network, deltas, states, jacobians, local) -> Runs:
    steps, rows = len(states), net.x.shape[1]
    h = np.stack(states).reshape(steps, len(deltas), rows, -1)
    if not jacobians:
        return Runs(tuple(deltas), h, None, [])
    at = checkpoints(steps)
    bound = propagated_bound(jacobians, local, at)[:, :, :net.hidden]
    return Runs(tuple(deltas), h, bound.reshape(len(at), len(deltas), rows, -1), at)


def run_rnn(net: Network, norm: RowLayerNorm | None, deltas: tuple[float, ...], eps: float) -> Runs:
    """Eq. 4 with ``delta*W_h``, ``delta*W_x`` for each delta; ``norm`` None: ``tanh(a_t + b)``."""
    d, h, _, xs = _lockstep(net, deltas)
    w = np.concatenate([net.w_h, net.w_x])
    states, jacobians, local = [], [], []
    for t in range(xs.shape[0]):
        a, p = _summed(np.concatenate([h, xs[t]], axis=1), w, d)
        if norm is None:
            h = np.tanh(a + net.b)
            states.append(h)
            continue
        out = norm.apply(a, (a.shape[1],), net.gains[0], net.biases[0], eps, perturbation=p)
        h = np.tanh(out.h)
        slope = 1.0 - h * h
        jacobians.append(slope[:, :, None] * ln_jacobian_times(out.ref, net.w_h.T) * d[:, :, None])
        local.append(slope * out.bound + 2 * U64 * np.abs(h))
        states.append(h)
    return _runs(net, deltas, states, jacobians, local)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _lstm_cell(z: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
    """Gates (f, i, o, u) of z (B, 4H) and the new cell state."""
    f, i, o, u = np.split(z, 4, axis=1)
    f, i, o, u = _sigmoid(f), _sigmoid(i), _sigmoid(o), np.tanh(u)
    return f, i, o, u, f * c + i * u


def _lstm_linearization(zh: np.ndarray, gates: tuple[np.ndarray, ...], c: np.ndarray, n3, h_new: np.ndarray,
                        lz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Jacobian (B, 2H, 2H) of the state (h, c) with respect to the previous one, and the
    local error (B, 2H), from ``zh = dz/dh`` (B, 4H, H), the gates, the previous c, LN(c_t)'s
    output and the local bound ``lz`` on z."""
    f, i, o, u, _ = gates
    zf, zi, zo, zu = np.split(zh, 4, axis=1)
    lf, li, lo, lu = np.split(lz, 4, axis=1)
    df, di, do, du = f * (1 - f), i * (1 - i), o * (1 - o), 1 - u * u
    dc_dh = (c * df)[:, :, None] * zf + (u * di)[:, :, None] * zi + (i * du)[:, :, None] * zu
    lc = np.abs(c * df) * lf + np.abs(u * di) * li + np.abs(i * du) * lu + 2 * U64 * (np.abs(f * c) + np.abs(i * u))
    j3 = ln_jacobian(n3.ref)
    tn = np.tanh(n3.h)
    out = o * (1 - tn * tn)
    dh_dh = (tn * do)[:, :, None] * zo + out[:, :, None] * ln_jacobian_times(n3.ref, dc_dh)
    dh_dc = out[:, :, None] * j3 * f[:, None, :]
    lh = np.abs(tn * do) * lo + out * (abs_times(j3, lc) + n3.bound) + 2 * U64 * np.abs(h_new)
    jac = np.concatenate([np.concatenate([dh_dh, dh_dc], axis=2),
                          np.concatenate([dc_dh, f[:, :, None] * np.eye(f.shape[1])], axis=2)], axis=1)
    return jac, np.concatenate([lh, lc], axis=1)


def run_lstm(net: Network, norm: RowLayerNorm | None, deltas: tuple[float, ...], eps: float,
             eps_cell: float) -> Runs:
    """Eq. 20-22 with ``delta*W_h``, ``delta*W_x`` for each delta: LN(h W_h) and LN(x W_x) with
    ``eps``, LN(c_t) with ``eps_cell``; ``norm`` None: the plain LSTM of eq. 17-19."""
    d, h, c, xs = _lockstep(net, deltas)
    states, jacobians, local = [], [], []
    for t in range(xs.shape[0]):
        (a1, p1), (a2, p2) = _summed(h, net.w_h, d), _summed(xs[t], net.w_x, d)
        if norm is None:
            *_, o, _, c = _lstm_cell(a1 + a2 + net.b, c)
            h = o * np.tanh(c)
            states.append(h)
            continue
        k = a1.shape[1]
        n1 = norm.apply(a1, (k,), net.gains[0], net.biases[0], eps, perturbation=p1)
        n2 = norm.apply(a2, (k,), net.gains[1], net.biases[1], eps, perturbation=p2)
        z = n1.h + n2.h + net.b
        gates = _lstm_cell(z, c)
        n3 = norm.apply(gates[4], (net.hidden,), net.gains[2], net.biases[2], eps_cell)
        h_new = gates[2] * np.tanh(n3.h)
        lz = n1.bound + n2.bound + 2 * U64 * (np.abs(n1.h) + np.abs(n2.h) + np.abs(z))
        zh = ln_jacobian_times(n1.ref, net.w_h.T) * d[:, :, None]
        jac, loc = _lstm_linearization(zh, gates, c, n3, h_new, lz)
        jacobians.append(jac)
        local.append(loc)
        h, c = h_new, gates[4]
        states.append(h)
    return _runs(net, deltas, states, jacobians, local)


def _run(net: Network, norm: RowLayerNorm | None, deltas: tuple[float, ...], eps: float, eps_cell: float) -> Runs:
    if net.kind == "rnn":
        return run_rnn(net, norm, deltas, eps)
    return run_lstm(net, norm, deltas, eps, eps_cell)


@dataclass(frozen=True)
class RecurrentResult:
    """One network, normalized and plain, run with W and with delta*W for each delta.

    ``norms[label]`` is the mean over sequences of ||h_t|| (T,); ``change[delta]`` and
    ``bound[delta]`` (C, B, H) compare the normalized runs at the steps ``at``;
    ``plain_change[delta]`` (T, B, H) the plain runs."""

    kind: str
    at: list[int]
    norms: dict[str, np.ndarray]
    change: dict[float, np.ndarray]
    bound: dict[float, np.ndarray]
    plain_change: dict[float, np.ndarray]

    def ratio(self, delta: float) -> float:
        """The normalized network's worst change relative to its bound (<= 1: invariant)."""
        return float(ratios(self.change[delta], self.bound[delta]).max())

    def plain_ratio(self, delta: float) -> float:
        """The plain network's largest change relative to the normalized one's largest bound."""
        return float(self.plain_change[delta].max() / self.bound[delta].max())


def measure(norm: RowLayerNorm, net: Network, eps: float) -> RecurrentResult:
    """Run ``net`` (RNN or LSTM) with W and delta*W, normalized by ``norm`` and plain.

    The normalized run with delta*W and eps is compared with the run with W and
    eps/delta^2 in the LayerNorms whose inputs delta scales (the run with W and eps
    itself when eps = 0)."""
    deltas = (1.0, *RNN_SCALES)
    runs, plain = _run(net, norm, deltas, eps, eps), _run(net, None, deltas, eps, eps)
    labels = ["W"] + [f"{delta:g}*W" for delta in RNN_SCALES]
    norms = {f"{kind}, {label}": np.linalg.norm(r.h[:, i], axis=2).mean(axis=1)
             for kind, r in (("layer norm", runs), ("no norm", plain)) for i, label in enumerate(labels)}
    change, bound, plain_change = {}, {}, {}
    for i, delta in enumerate(deltas[1:], start=1):
        ref = runs if eps == 0 else _run(net, norm, (1.0,), eps / delta**2, eps)
        with np.errstate(invalid="ignore"):
            change[delta] = np.nan_to_num(np.abs(runs.h[runs.at, i] - ref.h[ref.at, 0]), nan=np.inf)
        bound[delta] = runs.bound[:, i] + ref.bound[:, 0]
        plain_change[delta] = np.abs(plain.h[:, i] - plain.h[:, 0])
    return RecurrentResult(net.kind, runs.at, norms, change, bound, plain_change)


def check(backend: Backend, case: Case, seed: int, kind: str) -> RecurrentResult:
    """The layer-normalized ``kind`` network's hidden states do not change when W_h and W_x
    are re-scaled together (within the propagated bound, at every checkpoint), and the same
    network without normalization changes by at least FAR times that bound."""
    __tracebackhide__ = True
    result = measure(BackendRowLayerNorm(backend, case.dtype), make_network(case, seed, kind), case.eps)
    context = f"{backend.name} {case.id} (seed {seed}): the layer-normalized {KINDS[kind]}"
    for delta in RNN_SCALES:
        change, bound = result.change[delta], result.bound[delta]
        worst = worst_violation(change, 0.0, bound, match_nonfinite=False)
        if worst is not None:
            c, row, unit = worst.index
            raise ConformanceError(
                f"{context} with {delta:g}*W_h, {delta:g}*W_x and with W_h, W_x (eps {case.eps:g}, eps/delta^2 where "
                f"delta scales the input) must have the same hidden states (paper §3.1), but at step "
                f"{result.at[c] + 1} h[{row}, {unit}] differs by {worst.error:.3g} {worst.excess()}")
        if result.plain_ratio(delta) < FAR:
            raise ConformanceError(
                f"{context}: the same network without normalization changed by at most "
                f"{result.plain_change[delta].max():.3g} under {delta:g}*W, less than {FAR:g}x the normalized network's "
                f"bound {bound.max():.3g}: the bound is too loose to tell invariant from not (the backend's outputs "
                f"make the recurrence's Jacobians large)")
    return result
