"""The NumPy reference backend: float64 math, one rounding to the input dtype.

Supports all four dtypes, LayerNorm and RMSNorm and both with the residual add fused in (``add_layer_norm``,
``add_rms_norm``: the sum rounded once to the residual's dtype, y the normalization of that stored sum), RMSNorm's
``weight_offset`` (Gemma's ``offset + weight``, in float64), one RMSNorm weight per head (a weight that
broadcasts over x's leading dims; dweight summed over those alone), forward and backward, and exposes LayerNorm's
statistics.
It is written independently of ``normbench.check.oracle`` (on the original shape,
reducing over the trailing axes) so that the two check each other.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from normbench import Backend
from normbench.kit import default_rms_eps, dtype_name
from normbench.kit.composed import QuantizedFromParts


def _axes(x: np.ndarray, normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


class NumpyBackend(QuantizedFromParts, Backend):
    name = "numpy"
    description = "NumPy reference: float64 math, one rounding to the input dtype"
    operations = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
                  "layer_norm_quant", "rms_norm_quant", "add_layer_norm_quant", "add_rms_norm_quant",
                  "layer_norm_dynamic_quant", "rms_norm_dynamic_quant", "add_layer_norm_dynamic_quant",
                  "add_rms_norm_dynamic_quant")
    strided = True
    per_head_weights = True
    requires = ("numpy",)

    def asarray(self, host):
        return host  # NumPy arrays are already native; the harness keeps its own copies

    def to_numpy(self, native):
        return np.asarray(native)

    @staticmethod
    def _statistics64(x, normalized_shape, eps, subtract_mean=True):
        x64 = np.asarray(x, dtype=np.float64)
        axes = _axes(x64, normalized_shape)
        if eps is None:  # RMSNorm's default
            eps = default_rms_eps(dtype_name(np.asarray(x).dtype))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            # N >= 1, so empty batches reduce cleanly; RMSNorm subtracts nothing
            mean = (x64.mean(axis=axes, keepdims=True) if subtract_mean
                    else np.zeros(x64.shape[: x64.ndim - len(axes)] + (1,) * len(axes)))
            centered = x64 - mean
            var = (centered * centered).mean(axis=axes, keepdims=True)
            rstd = 1.0 / np.sqrt(var + eps)
        return x64, centered, mean, rstd

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self._normalize(x, normalized_shape, weight, bias, eps)

    def _normalize(self, x, normalized_shape, weight, bias, eps, centered=True, dtype=None, offset=0.0):
        _, centered, _, rstd = self._statistics64(x, normalized_shape, eps, centered)
        with np.errstate(invalid="ignore", over="ignore"):
            y = centered * rstd
            if weight is not None:
                y = y * (np.asarray(weight, dtype=np.float64) + offset)
            if bias is not None:
                y = y + np.asarray(bias, dtype=np.float64)
            return y.astype(dtype or x.dtype)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        _, _, mean, rstd = self._statistics64(x, normalized_shape, eps)
        return mean, rstd

    def rms_norm(self, x, normalized_shape, weight, eps, weight_offset=0.0):
        return self._normalize(x, normalized_shape, weight, None, eps, centered=False, offset=weight_offset)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps, weight_offset=0.0):
        dx, dweight, _ = self._gradients(dy, x, normalized_shape, weight, None, eps, centered=False,
                                         offset=weight_offset)
        return dx, dweight

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self._gradients(dy, x, normalized_shape, weight, bias, eps)

    # -- the residual add fused in: residual_out = x + residual rounded once, y = norm(residual_out) in x's dtype --

    @staticmethod
    def _add(x, residual):
        with np.errstate(invalid="ignore", over="ignore"):
            return (np.asarray(x, dtype=np.float64) + np.asarray(residual, dtype=np.float64)).astype(residual.dtype)

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        out = self._add(x, residual)
        return self._normalize(out, normalized_shape, weight, bias, eps, dtype=x.dtype), out

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps, weight_offset=0.0):
        out = self._add(x, residual)
        return self._normalize(out, normalized_shape, weight, None, eps, centered=False, dtype=x.dtype,
                               offset=weight_offset), out

    def add_layer_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps):
        return self._gradients(dy, residual_out, normalized_shape, weight, bias, eps, plus=dresidual_out)

    def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps, weight_offset=0.0):
        dsum, dweight, _ = self._gradients(dy, residual_out, normalized_shape, weight, None, eps, centered=False,
                                           offset=weight_offset,
                                           plus=dresidual_out)
        return dsum, dweight

    # -- the output quantized (docs/quantized.md): y in float64, quantized once, exactly; the entry points composed by
    # normbench.kit.composed from the base operation's y (in float64 here) and these two quantizers --

    def quantizable(self, base, args):
        values = dict(zip(base.params, args))
        x = values["x"] if base.prologue is None else self._add(values["x"], values["residual"])
        y = self._normalize(x, values["normalized_shape"], values["weight"], values.get("bias"), values["eps"],
                            centered=base.centered, dtype=np.float64)
        return y, (() if base.prologue is None else (x,))

    def quantize_given(self, y, scale, qdtype):
        return _static(y, scale, qdtype)

    def quantize_computed(self, y, normalized_shape, qdtype, scale_ub):
        return _dynamic(y, normalized_shape, qdtype, scale_ub)

    def _gradients(self, dy, x, normalized_shape, weight, bias, eps, centered=True, plus=None, offset=0.0):
        """``(dx, dweight, dbias)``; with ``plus`` (a fused operation's dresidual_out), dx + plus, rounded once;
        ``offset``: Gemma's weight_offset (dx sees offset + weight; dweight, the gradient of weight, is unchanged)."""
        _, centered_x, _, rstd = self._statistics64(x, normalized_shape, eps, centered)
        axes = _axes(centered_x, normalized_shape)
        lead = tuple(range(centered_x.ndim - len(axes)))
        dy64 = np.asarray(dy, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            xhat = centered_x * rstd
            g = dy64 * (np.asarray(weight, dtype=np.float64) + offset if weight is not None else 1.0)
            mean_g = g.mean(axis=axes, keepdims=True) if centered else 0.0
            mean_gx = (g * xhat).mean(axis=axes, keepdims=True)
            dx = rstd * (g - mean_g - xhat * mean_gx)
            dx = (dx if plus is None else dx + np.asarray(plus, dtype=np.float64)).astype(x.dtype)
            # summed over every dim the weight broadcasts over (per-head weights keep their heads dim)
            dweight = None if weight is None else (dy64 * xhat).sum(
                axis=tuple(range(xhat.ndim - np.ndim(weight)))).astype(weight.dtype)
            dbias = None if bias is None else dy64.sum(axis=lead).astype(bias.dtype)
        return dx, dweight, dbias


# -- quantization, written independently of normbench.core.quantized (whose table the oracle uses): float8 codes as
# a quantum per binade, 2^(exponent - mantissa bits), one round-half-even of v / quantum --

#: format -> (host type, max, mantissa bits, smallest normal exponent)
_FORMATS = {"float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 448.0, 3, -6),
            "float8_e5m2": (ml_dtypes.float8_e5m2, 57344.0, 2, -14),
            "int8": (np.int8, 127.0, None, None)}


def _quantize(v: np.ndarray, qdtype: str) -> np.ndarray:
    """saturate(round_to_nearest_even(v)) of float64 v in ``qdtype``."""
    host, top, mantissa, emin = _FORMATS[qdtype]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if mantissa is None:
            return np.rint(np.clip(np.nan_to_num(v, nan=0.0), -128.0, top)).astype(np.int8)
        clipped = np.clip(v, -top, top)
        exponent = np.maximum(np.floor(np.log2(np.abs(clipped))), emin)
        exponent = np.where(np.isfinite(exponent), exponent, emin)
        quantum = np.exp2(exponent - mantissa)
        rounded = np.clip(np.rint(clipped / quantum) * quantum, -top, top)
        return rounded.astype(host)  # every value is the format's: exact


def _static(y: np.ndarray, scale: float, qdtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return _quantize(y / np.float64(np.float32(scale)), qdtype)


def _dynamic(y: np.ndarray, normalized_shape, qdtype: str, scale_ub: float | None):
    """``(q, scales)``: per row, ``max(min(absmax, scale_ub) / qmax, 1 / (qmax * 512))`` rounded to float32."""
    top = _FORMATS[qdtype][1]
    axes = _axes(y, normalized_shape)
    with np.errstate(invalid="ignore"):
        absmax = np.abs(y).max(axis=axes, keepdims=True)
        if scale_ub is not None:
            absmax = np.minimum(absmax, scale_ub)
        scales = np.maximum(absmax / top, 1.0 / (top * 512.0)).astype(np.float32)
        q = _quantize(y / scales.astype(np.float64), qdtype)
    return q, scales.reshape(y.shape[: y.ndim - len(axes)])
