"""How far an exact LayerNorm's output and gradients move when its inputs move.

The invariance and geometry checks run a backend on two inputs that are equal
in exact arithmetic (``a`` and ``delta*a``, say) but are each rounded to the
tested dtype on their own. Besides each side's kernel error (``normbench.check.error_model``)
a comparison must allow for that rounding, which no kernel can undo. These are
first-order bounds for a componentwise input perturbation ``|dx_j| <= p_j``,
per row, with ``s = sqrt(var + eps)``, ``r = 1/s``, ``xhat = (x - mu)*r``:

* ``|d(x_i - mu)| <= p_i + mean(p)``.
* ``d var = 2*mean((x - mu)*dx)`` (``mean(x - mu) = 0``), so by Cauchy-Schwarz
  ``|d var| <= 2*sigma*rms(p)`` and ``|ds| = |d var|/(2s) <= rms(p)``.
* ``d xhat_i = d(x_i - mu)/s - xhat_i*ds/s``, so
  ``|d xhat_i| <= E_i = (p_i + mean(p) + |xhat_i|*rms(p))/s`` and ``|dy_i| <= |w_i|*E_i``.
* ``dx = r*(g - mean(g) - xhat*m)``, ``m = mean(g*xhat)``: ``|dr| <= r*rms(p)/s``,
  ``|dm| <= mean(|g|*E)``, so ``|d dx_i| <= rms(p)/s*|dx_i| + r*(E_i*|m| + |xhat_i|*mean(|g|*E))``.
* ``dweight = sum_rows(dy*xhat)``: ``|d dweight| <= sum_rows(|dy|*E)``; dbias does not depend on x.

RMSNorm (nothing centred, ``s = sqrt(mean(x^2) + eps)``): ``d ms = 2*mean(x*dx)``, ``|d ms| <=
2*rms(x)*rms(p) <= 2*s*rms(p)``, so ``|ds| <= rms(p)`` again and ``E_i = (p_i + |xhat_i|*rms(p))/s``
(no ``mean(p)``).

Second-order terms are smaller than these by a further factor ``max(rms(p)/s, E)``,
which is below 2**-6 in every use here; they are left out.
"""

from __future__ import annotations

import numpy as np

from normbench.check import oracle


def _rms_mean(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not p.shape[0]:
        return np.zeros((0, 1)), np.zeros((0, 1))
    return np.sqrt((p * p).mean(axis=1, keepdims=True)), p.mean(axis=1, keepdims=True)


def xhat_perturbation(ref: oracle.Forward, p: np.ndarray) -> np.ndarray:
    """E (M, N): the bound on ``|d xhat|`` for input perturbations ``p`` (M, N)."""
    p = np.asarray(p, np.float64).reshape(ref.x.shape)
    rms, mean = _rms_mean(p)
    if not ref.centered:  # RMSNorm subtracts no mean: d xhat_i = (dx_i - xhat_i*ds)/s, |ds| <= rms(p) as well
        mean = 0.0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return (p + mean + np.abs(ref.xhat) * rms) / ref.sigma_eps[:, None]


def output_perturbation(ref: oracle.Forward, p: np.ndarray) -> np.ndarray:
    """(M, N) bound on ``|d y|`` for input perturbations ``p``: ``|w|*E``."""
    return np.abs(ref.weight) * xhat_perturbation(ref, p)


def dx_perturbation(ref: oracle.Forward, grads: oracle.Backward, p: np.ndarray) -> np.ndarray:
    """(M, N) bound on ``|d dx|`` for input perturbations ``p`` (the upstream dy fixed)."""
    p = np.asarray(p, np.float64).reshape(ref.x.shape)
    e = xhat_perturbation(ref, p)
    rms, _ = _rms_mean(p)
    g = np.abs(grads.g)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if ref.x.shape[0]:
            m = np.abs((grads.g * ref.xhat).mean(axis=1, keepdims=True))
            mean_ge = (g * e).mean(axis=1, keepdims=True)
        else:
            m = mean_ge = np.zeros((0, 1))
        r = ref.rstd[:, None]
        return rms * r * np.abs(grads.dx) + r * (e * m + np.abs(ref.xhat) * mean_ge)


def dweight_perturbation(dy: np.ndarray, ref: oracle.Forward, p: np.ndarray) -> np.ndarray:
    """(N,) bound on ``|d dweight|`` for input perturbations ``p``: ``sum_rows(|dy|*E)``."""
    dy2 = np.abs(np.asarray(dy, np.float64).reshape(ref.x.shape))
    return (dy2 * xhat_perturbation(ref, p)).sum(axis=0)


def rounding_perturbation(exact: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """p = |rounded - exact| in float64: the rounding each input actually suffered.

    Exact whenever ``rounded`` is within a factor 2 of ``exact`` (Sterbenz), and
    otherwise off by at most one float64 rounding of an already tiny difference.
    """
    return np.abs(np.asarray(rounded, np.float64) - np.asarray(exact, np.float64))
