"""First-order propagation of rounding errors through a recurrence, and LayerNorm's Jacobian.

A recurrence ``s_t = F_t(s_{t-1})`` computed with a local error l_t per step
(componentwise bounds) deviates from its exact trajectory, to first order, by
``e_t = J_t e_{t-1} + l_t = sum_s J_t ... J_{s+1} l_s`` with J_t the step's
Jacobian at the computed point. Bounding each product's entries by their
absolute values *after* multiplying keeps the cancellations that make a
contracting recurrence's errors decay; bounding ``|J_t|`` step by step does not
(its entries' absolute values grow ~1.2x per step for a contracting RNN).
:func:`propagated_bound` multiplies exactly within blocks of BLOCK steps and
applies the triangle inequality only at block ends, so it costs one matrix
product per step.
"""

from __future__ import annotations

import numpy as np

from normbench.check import oracle

#: the bound propagates exactly within blocks of BLOCK steps, and is evaluated at their ends
BLOCK = 16


def ln_jacobian(ref: oracle.Forward) -> np.ndarray:
    """(M, N, N): ``d y_i / d x_j`` of each row, ``diag(w)*(I - 11^T/N - xhat xhat^T/N)/s``."""
    n = ref.xhat.shape[1]
    proj = np.eye(n) - 1.0 / n - ref.xhat[:, :, None] * ref.xhat[:, None, :] / n
    return ref.weight[None, :, None] * proj / ref.sigma_eps[:, None, None]


def ln_jacobian_times(ref: oracle.Forward, m: np.ndarray) -> np.ndarray:
    """``J @ m`` for each row's LayerNorm Jacobian J and m (N, k) or (M, N, k), in the
    rank-2 form ``w/s * (m - mean_i(m) - xhat (xhat^T m)/N)`` (no N x N product)."""
    n = ref.xhat.shape[1]
    m = np.broadcast_to(m, (ref.xhat.shape[0], *m.shape[-2:]))
    proj = np.einsum("bi,bik->bk", ref.xhat, m) / n
    centered = m - m.mean(axis=1, keepdims=True) - ref.xhat[:, :, None] * proj[:, None, :]
    return (ref.weight[None, :] / ref.sigma_eps[:, None])[:, :, None] * centered


def abs_times(jac: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``|J| e`` for a batch: J (B, S, S'), e (B, S') -> (B, S)."""
    return np.einsum("bij,bj->bi", np.abs(jac), e)


def checkpoints(steps: int) -> list[int]:
    """The steps at which the bound is evaluated: the end of every block, and the last step."""
    return sorted(set(range(BLOCK - 1, steps, BLOCK)) | {steps - 1})


def propagated_bound(jacobians: list[np.ndarray], local: list[np.ndarray], at: list[int]) -> np.ndarray:
    """(C, B, S): the bound on the state's deviation at each step in ``at`` (increasing).

    Within a block, ``E_t = |J_t ... J_{t0+1}| E_t0 + sum_{t0 < s <= t} |J_t ... J_{s+1}| l_s``
    with E_t0 the bound at the previous checkpoint t0 (0 before the first step).
    """
    out, e, start = [], np.zeros_like(local[0]), 0
    for t in at:
        phi = np.broadcast_to(np.eye(local[t].shape[1]), jacobians[t].shape)
        e_new = local[t].copy()
        for s in range(t - 1, start - 1, -1):
            phi = phi @ jacobians[s + 1]
            e_new += abs_times(phi, local[s])
        if start:
            e_new += abs_times(phi @ jacobians[start], e)
        out.append(e_new)
        e, start = e_new, t + 1
    return np.stack(out)
