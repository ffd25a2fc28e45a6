"""The NumPy reference backend: float64 math, one rounding to the input dtype.

Supports all four dtypes, forward and backward, and exposes its statistics.
It is written independently of ``normbench.check.oracle`` (on the original shape,
reducing over the trailing axes) so that the two check each other.
"""

from __future__ import annotations

import numpy as np

from normbench import Backend


def _axes(x: np.ndarray, normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


class NumpyBackend(Backend):
    name = "numpy"
    description = "NumPy reference: float64 math, one rounding to the input dtype"
    strided = True
    requires = ("numpy",)

    def asarray(self, host):
        return host  # NumPy arrays are already native; the harness keeps its own copies

    def to_numpy(self, native):
        return np.asarray(native)

    @staticmethod
    def _statistics64(x, normalized_shape, eps):
        x64 = np.asarray(x, dtype=np.float64)
        axes = _axes(x64, normalized_shape)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            mean = x64.mean(axis=axes, keepdims=True)  # N >= 1, so empty batches reduce cleanly
            centered = x64 - mean
            var = (centered * centered).mean(axis=axes, keepdims=True)
            rstd = 1.0 / np.sqrt(var + eps)
        return x64, centered, mean, rstd

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        _, centered, _, rstd = self._statistics64(x, normalized_shape, eps)
        with np.errstate(invalid="ignore", over="ignore"):
            y = centered * rstd
            if weight is not None:
                y = y * np.asarray(weight, dtype=np.float64)
            if bias is not None:
                y = y + np.asarray(bias, dtype=np.float64)
            return y.astype(x.dtype)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        _, _, mean, rstd = self._statistics64(x, normalized_shape, eps)
        return mean, rstd

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        _, centered, _, rstd = self._statistics64(x, normalized_shape, eps)
        axes = _axes(centered, normalized_shape)
        lead = tuple(range(centered.ndim - len(axes)))
        dy64 = np.asarray(dy, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            xhat = centered * rstd
            g = dy64 * (np.asarray(weight, dtype=np.float64) if weight is not None else 1.0)
            mean_g = g.mean(axis=axes, keepdims=True)
            mean_gx = (g * xhat).mean(axis=axes, keepdims=True)
            dx = (rstd * (g - mean_g - xhat * mean_gx)).astype(x.dtype)
            dweight = None if weight is None else (dy64 * xhat).sum(axis=lead).astype(weight.dtype)
            dbias = None if bias is None else dy64.sum(axis=lead).astype(bias.dtype)
        return dx, dweight, dbias
