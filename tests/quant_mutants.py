"""Quantized-output kernels for the never-miss, never-cry-wolf proofs (docs/quantized.md): a correct kernel, the
correct variants libraries ship, and mutants with one real bug each, every one a bug reported in the field
(FUSED.md, "Bugs the field shipped").

``QuantKernel`` computes like a GPU kernel: the statistics in fp32 (two-pass), y in fp32 rounded once to x's dtype,
then ``v = y / scale`` in fp32 and one conversion to the format, saturating (clamp, then round to nearest even:
float8 by ``ml_dtypes``' conversion from float32, one rounding; int8 by ``rint``); a dynamic scale per row from the
absmax of that y, ``max(min(absmax, scale_ub) / qmax, 1 / (qmax * 512))`` in fp32. A fused case adds x and the
residual in fp32, stores the sum rounded once and normalizes the stored sum. Each step is a method, so a variant or
a mutant overrides exactly one. ``tests/test_quantized.py`` and ``tests/test_mutants.py`` run them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from normbench import Backend
from normbench.core.dtypes import default_rms_eps, dtype_name

F32 = np.float32
QMAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "int8": 127.0}
HOST = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8}
OPERATIONS = ("layer_norm_quant", "rms_norm_quant", "add_layer_norm_quant", "add_rms_norm_quant",
              "layer_norm_dynamic_quant", "rms_norm_dynamic_quant", "add_layer_norm_dynamic_quant",
              "add_rms_norm_dynamic_quant")


class QuantKernel(Backend):
    """The control: correct, fp32 registers, y rounded to x's dtype, divided by the scale, converted once."""

    name = "mutant-quant-control"
    description = "correct normalization + fp8/int8 quantization kernel in NumPy (the control for the quant mutants)"
    operations = OPERATIONS
    dtypes = ("float32", "float16", "bfloat16")

    def asarray(self, host):
        return host

    def to_numpy(self, native):
        return np.asarray(native)

    # the steps ---------------------------------------------------------------------------------------------
    def normalize(self, x, normalized_shape, weight, bias, eps, centered):
        """fp32 y on (M, N) rows: two-pass statistics, (x - mean) * rstd * weight + bias."""
        n = int(np.prod(normalized_shape, dtype=np.int64))
        s = np.asarray(x, dtype=F32).reshape(-1, n)
        if eps is None:
            eps = default_rms_eps(dtype_name(np.asarray(x).dtype))
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            mean = s.sum(axis=1, dtype=F32) / F32(n) if centered else np.zeros(s.shape[0], F32)
            c = s - mean[:, None]
            rstd = F32(1) / np.sqrt((c * c).sum(axis=1, dtype=F32) / F32(n) + F32(eps))
            y = c * rstd[:, None]
            if weight is not None:
                y = y * np.asarray(weight, dtype=F32).reshape(n)
            if bias is not None:
                y = y + np.asarray(bias, dtype=F32).reshape(n)
        return y

    def store_y(self, y, dtype):
        """y as the kernel quantizes it: rounded once to x's dtype."""
        with np.errstate(over="ignore", invalid="ignore"):
            return y.astype(dtype).astype(F32)

    def divide(self, y, scale):
        """v = y / scale, fp32 (``scale``: a float, or an (M, 1) fp32 column)."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return y / F32(scale) if np.ndim(scale) == 0 else y / scale

    def clamp(self, v, qdtype):
        top = F32(QMAX[qdtype])
        return np.clip(v, F32(-128) if qdtype == "int8" else -top, top)

    def convert(self, v, qdtype):
        """One rounding to nearest even of the clamped v."""
        with np.errstate(invalid="ignore", over="ignore"):
            if qdtype == "int8":
                return np.rint(np.nan_to_num(v, nan=0.0)).astype(np.int8)
            return v.astype(HOST[qdtype])

    def absmax(self, y, x):
        """The row's absolute maximum of the y it quantizes (``x``: the normalized input, for a mutant)."""
        with np.errstate(invalid="ignore"):
            return np.abs(y).max(axis=1)

    def row_scale(self, absmax, qdtype, scale_ub):
        top = F32(QMAX[qdtype])
        if scale_ub is not None:
            absmax = np.minimum(absmax, F32(scale_ub))
        return self.floor(absmax / top, qdtype)

    def floor(self, scale, qdtype):
        return np.maximum(scale, F32(1.0 / (QMAX[qdtype] * 512.0)))

    # the entry points ---------------------------------------------------------------------------------------
    def _y(self, x, normalized_shape, weight, bias, eps, centered):
        return self.store_y(self.normalize(x, normalized_shape, weight, bias, eps, centered), np.asarray(x).dtype)

    def _quantize(self, v, qdtype, shape):
        return self.convert(self.clamp(v, qdtype), qdtype).reshape(shape)

    def _static(self, x, normalized_shape, weight, bias, eps, scale, qdtype, centered, dtype=None):
        y = self.store_y(self.normalize(x, normalized_shape, weight, bias, eps, centered), dtype or x.dtype)
        return self._quantize(self.divide(y, scale), qdtype, np.shape(x))

    def _dynamic(self, x, normalized_shape, weight, bias, eps, qdtype, scale_ub, centered, dtype=None):
        y = self.store_y(self.normalize(x, normalized_shape, weight, bias, eps, centered), dtype or x.dtype)
        n = y.shape[1]
        scales = self.row_scale(self.absmax(y, np.asarray(x, dtype=F32).reshape(-1, n)), qdtype, scale_ub)
        return self._quantize(self.divide(y, scales[:, None]), qdtype, np.shape(x)), scales.astype(F32)

    def add(self, x, residual):
        return (np.asarray(x, dtype=F32) + np.asarray(residual, dtype=F32)).astype(residual.dtype)

    def normalized_input(self, x, residual, stored):
        """What a fused kernel normalizes: the stored sum (the unfused composition's)."""
        return stored

    def layer_norm_quant(self, x, normalized_shape, weight, bias, eps, scale, qdtype):
        return self._static(x, normalized_shape, weight, bias, eps, scale, qdtype, True)

    def rms_norm_quant(self, x, normalized_shape, weight, eps, scale, qdtype):
        return self._static(x, normalized_shape, weight, None, eps, scale, qdtype, False)

    def add_layer_norm_quant(self, x, residual, normalized_shape, weight, bias, eps, scale, qdtype):
        out = self.add(x, residual)
        s = self.normalized_input(x, residual, out)
        return self._static(s, normalized_shape, weight, bias, eps, scale, qdtype, True, x.dtype), out

    def add_rms_norm_quant(self, x, residual, normalized_shape, weight, eps, scale, qdtype):
        out = self.add(x, residual)
        s = self.normalized_input(x, residual, out)
        return self._static(s, normalized_shape, weight, None, eps, scale, qdtype, False, x.dtype), out

    def layer_norm_dynamic_quant(self, x, normalized_shape, weight, bias, eps, qdtype, scale_ub):
        return self._dynamic(x, normalized_shape, weight, bias, eps, qdtype, scale_ub, True)

    def rms_norm_dynamic_quant(self, x, normalized_shape, weight, eps, qdtype, scale_ub):
        return self._dynamic(x, normalized_shape, weight, None, eps, qdtype, scale_ub, False)

    def add_layer_norm_dynamic_quant(self, x, residual, normalized_shape, weight, bias, eps, qdtype, scale_ub):
        out = self.add(x, residual)
        s = self.normalized_input(x, residual, out)
        return (*self._dynamic(s, normalized_shape, weight, bias, eps, qdtype, scale_ub, True, x.dtype), out)

    def add_rms_norm_dynamic_quant(self, x, residual, normalized_shape, weight, eps, qdtype, scale_ub):
        out = self.add(x, residual)
        s = self.normalized_input(x, residual, out)
        return (*self._dynamic(s, normalized_shape, weight, None, eps, qdtype, scale_ub, False, x.dtype), out)


# -- correct variants: each must pass on seeds 0..19 ------------------------------------------------------------


class ReciprocalMultiply(QuantKernel):
    """Correct: y times the scale's fp32 reciprocal (vLLM's ``y * (1 / scale)``), and a dynamic scale as absmax times
    the reciprocal of qmax."""

    name = "mutant-quant-reciprocal"

    def divide(self, y, scale):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return y * (F32(1) / (F32(scale) if np.ndim(scale) == 0 else scale))

    def row_scale(self, absmax, qdtype, scale_ub):
        if scale_ub is not None:
            absmax = np.minimum(absmax, F32(scale_ub))
        return self.floor(absmax * (F32(1) / F32(QMAX[qdtype])), qdtype)


class UnroundedY(QuantKernel):
    """Correct: y quantized from fp32 registers, never rounded to x's dtype (a fused kernel's natural order)."""

    name = "mutant-quant-unrounded-y"

    def store_y(self, y, dtype):
        return y


class UnroundedSum(QuantKernel):
    """Correct: a fused kernel normalizing the fp32 register sum, not the stored residual_out (vLLM's dynamic path)."""

    name = "mutant-quant-unrounded-sum"

    def normalized_input(self, x, residual, stored):
        return np.asarray(x, dtype=F32) + np.asarray(residual, dtype=F32)


class NoFloorGuarded(QuantKernel):
    """Correct: no floor on the dynamic scale, an all-zero row's scale 0 and its codes 0 (its division guarded), as
    vLLM's CPU kernel does (``dynamic_scaled_int8_quant``: scale 0.0, codes 0 on a zero row)."""

    name = "mutant-quant-no-floor-guarded"

    def floor(self, scale, qdtype):
        return scale

    def divide(self, y, scale):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return np.where(scale == 0, F32(0), super().divide(y, scale)).astype(F32)


VARIANTS = [ReciprocalMultiply, UnroundedY, UnroundedSum, NoFloorGuarded]


# -- mutants: one real bug each ----------------------------------------------------------------------------------


class E4m3ClampForE5m2(QuantKernel):
    """The float8 clamp hard-coded to +-448, e5m2's too (flashinfer#4053)."""

    name = "mutant-quant-e4m3-clamp"

    def clamp(self, v, qdtype):
        if qdtype == "int8":
            return super().clamp(v, qdtype)
        return np.clip(v, F32(-448), F32(448))


class Truncation(QuantKernel):
    """Truncation toward zero instead of round to nearest even (ROCm/aiter PR #4637)."""

    name = "mutant-quant-truncate"

    def convert(self, v, qdtype):
        with np.errstate(invalid="ignore", over="ignore"):
            if qdtype == "int8":
                return np.trunc(np.nan_to_num(v, nan=0.0)).astype(np.int8)
            mantissa, emin = (3, -6) if qdtype == "float8_e4m3fn" else (2, -14)
            magnitude = np.abs(v.astype(np.float64))
            exponent = np.maximum(np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0))), emin)
            quantum = np.exp2(exponent - mantissa)
            return (np.copysign(np.floor(magnitude / quantum) * quantum, v)).astype(HOST[qdtype])


class Int8Wraparound(QuantKernel):
    """int8 without saturation: the rounded value cast modulo 256, 127.6 -> -128 (ROCm/aiter PR #4637)."""

    name = "mutant-quant-int8-wrap"

    def clamp(self, v, qdtype):
        return v if qdtype == "int8" else super().clamp(v, qdtype)

    def convert(self, v, qdtype):
        if qdtype != "int8":
            return super().convert(v, qdtype)
        with np.errstate(invalid="ignore", over="ignore"):
            wide = np.rint(np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)).astype(np.int64)
        return ((wide + 128) % 256 - 128).astype(np.int8)


class ScaleMultiplied(QuantKernel):
    """The scale applied as a multiply where a divide is meant (y * scale)."""

    name = "mutant-quant-scale-multiplied"

    def divide(self, y, scale):
        with np.errstate(over="ignore", invalid="ignore"):
            return y * (F32(scale) if np.ndim(scale) == 0 else scale)


class ReciprocalTwice(QuantKernel):
    """The reciprocal taken twice: the kernel inverts a scale it was given already inverted, so it divides by
    1/scale."""

    name = "mutant-quant-reciprocal-twice"

    def divide(self, y, scale):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            inverse = F32(1) / (F32(scale) if np.ndim(scale) == 0 else scale)
            return y / inverse


class NoScaleFloor(QuantKernel):
    """A per-row scale without a floor and an unguarded division: an all-zero row divides 0 by 0 (NaN codes). (No
    floor alone is correct: ``NoFloorGuarded``.)"""

    name = "mutant-quant-no-floor"

    def floor(self, scale, qdtype):
        return scale


class ScaleBoundIgnored(QuantKernel):
    """scale_ub ignored: the row's absmax used unbounded."""

    name = "mutant-quant-ub-ignored"

    def row_scale(self, absmax, qdtype, scale_ub):
        return super().row_scale(absmax, qdtype, None)


class PreNormAbsmax(QuantKernel):
    """The dynamic scale from the absmax of the normalization's input, not of its output y."""

    name = "mutant-quant-prenorm-absmax"

    def absmax(self, y, x):
        with np.errstate(invalid="ignore"):
            return np.abs(x).max(axis=1)


class NoSaturation(QuantKernel):
    """float8 without saturation: a value past the maximum converted as it is (NaN in e4m3fn, Inf in e5m2)."""

    name = "mutant-quant-no-saturation"

    def clamp(self, v, qdtype):
        return v if qdtype != "int8" else super().clamp(v, qdtype)


MUTANTS = [E4m3ClampForE5m2, Truncation, Int8Wraparound, ScaleMultiplied, ReciprocalTwice, NoScaleFloor,
           ScaleBoundIgnored, PreNormAbsmax, NoSaturation]
