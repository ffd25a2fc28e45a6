"""Fused residual-add kernels for the never-miss, never-cry-wolf proofs: a correct kernel, the correct variants
libraries ship (the unrounded sum normalized, the weight multiplied after the normalized value is rounded, float64
statistics, a GPU's approximate rsqrt and division, a tree's summation order), and
mutants with one real bug each, every one a bug reported against a fused kernel in the field.

``FusedKernel`` computes like a GPU kernel: x + residual in fp32 registers, stored rounded once to the residual's
dtype; the statistics of the stored sum in fp32 (LayerNorm two-pass); y rounded once to x's dtype; the backward in
fp32, ``dsum = dresidual_out + dx`` rounded once. Each step is a method, so a variant or a mutant overrides exactly
one. It implements both fused operations; ``tests/test_fused.py`` and ``tests/test_mutants.py`` run them.
"""

from __future__ import annotations

import numpy as np

from normbench import Backend
from normbench.core.dtypes import default_rms_eps, dtype_name

F32 = np.float32


class FusedKernel(Backend):
    """The control: correct, fp32 registers, residual_out and y each rounded once."""

    name = "mutant-fused-control"
    description = "correct fused add + LayerNorm / RMSNorm kernel in NumPy (the control for the fused mutants)"
    operations = ("add_layer_norm", "add_rms_norm")
    dtypes = ("float32", "float16", "bfloat16")
    strided = True

    def asarray(self, host):
        return host

    def to_numpy(self, native):
        return np.asarray(native)

    # the forward, in small overridable steps ------------------------------------------------
    @staticmethod
    def rows(a, normalized_shape):
        return np.asarray(a, dtype=F32).reshape(-1, int(np.prod(normalized_shape, dtype=np.int64)))

    def add(self, x, residual):
        """The fp32 register sum (exact or rounded once: a sum of two half or fp32 values)."""
        return np.asarray(x, dtype=F32) + np.asarray(residual, dtype=F32)

    def store(self, total, residual):
        """residual_out: the register sum rounded once to the residual's dtype, laid out as x is read."""
        return total.astype(residual.dtype)

    def normalized_input(self, total, stored):
        """What is normalized: the stored sum (the unfused composition's)."""
        return np.asarray(stored, dtype=F32)

    def statistics(self, s, centered, eps):
        n = F32(s.shape[1])
        mean = s.sum(axis=1, dtype=F32) / n if centered else np.zeros(s.shape[0], F32)
        c = s - mean[:, None]
        return c, F32(1) / np.sqrt((c * c).sum(axis=1, dtype=F32) / n + F32(eps))

    def output(self, xhat, w, b, dtype):
        y = xhat if w is None else xhat * np.asarray(w, dtype=F32).reshape(-1)
        y = y if b is None else y + np.asarray(b, dtype=F32).reshape(-1)
        return y.astype(dtype)

    def finish(self, y, stored, x):
        """The two outputs in x's shape."""
        return y.reshape(x.shape), stored.reshape(x.shape)

    def _forward(self, x, residual, normalized_shape, weight, bias, eps, centered):
        eps = default_rms_eps(dtype_name(np.asarray(x).dtype)) if eps is None else eps
        with np.errstate(all="ignore"):
            total = self.add(self.rows(x, normalized_shape), self.rows(residual, normalized_shape))
            stored = self.store(total, np.asarray(residual))
            c, r = self.statistics(self.normalized_input(total, stored), centered, eps)
            y = self.output(c * r[:, None], weight, bias, np.asarray(x).dtype)
            return self.finish(y, stored, x)

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        return self._forward(x, residual, normalized_shape, weight, bias, eps, True)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        return self._forward(x, residual, normalized_shape, weight, None, eps, False)

    # the backward ----------------------------------------------------------------------------
    def upstream(self, dy32, dres32):
        """The cotangent the normalization's vector-Jacobian product takes: dy."""
        return dy32

    def combine(self, dx, dres32):
        """dsum = dresidual_out + dx."""
        return dx + dres32

    def _backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps, centered):
        eps = default_rms_eps(dtype_name(np.asarray(dy).dtype)) if eps is None else eps
        with np.errstate(all="ignore"):
            s = self.rows(residual_out, normalized_shape)
            c, r = self.statistics(s, centered, eps)
            xhat = c * r[:, None]
            dres32 = self.rows(dresidual_out, normalized_shape)
            dy32 = self.upstream(self.rows(dy, normalized_shape), dres32)
            g = dy32 if weight is None else dy32 * np.asarray(weight, dtype=F32).reshape(-1)
            n = F32(s.shape[1])
            mean_g = g.sum(axis=1, dtype=F32)[:, None] / n if centered else F32(0)
            dx = r[:, None] * (g - mean_g - xhat * ((g * xhat).sum(axis=1, dtype=F32)[:, None] / n))
            dsum = self.combine(dx, dres32).astype(np.asarray(residual_out).dtype).reshape(np.shape(residual_out))
            dw = None if weight is None else (dy32 * xhat).sum(axis=0, dtype=F32).reshape(weight.shape).astype(weight.dtype)
            db = None if bias is None else dy32.sum(axis=0, dtype=F32).reshape(bias.shape).astype(bias.dtype)
            return dsum, dw, db

    def add_layer_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps):
        return self._backward(dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps, True)

    def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps):
        return self._backward(dy, dresidual_out, residual_out, normalized_shape, weight, None, eps, False)[:2]


# -- correct kernels that compute differently: each must pass on seeds 0..19 --------------------------------


class UnroundedSum(FusedKernel):
    """Normalizes the fp32 register sum, not the stored one (QuACK's and several CUDA kernels' choice)."""

    name = "variant-fused-unrounded-sum"

    def normalized_input(self, total, stored):
        return total


class WeightAfterRounding(FusedKernel):
    """The normalized value rounded to x's dtype before the weight multiply, the product rounded again (the
    other weight order, Hugging Face's)."""

    name = "variant-fused-weight-after-rounding"

    def output(self, xhat, w, b, dtype):
        return super().output(xhat.astype(dtype).astype(F32), w, b, dtype)


class Float64Statistics(FusedKernel):
    """The statistics in float64, the sum kept in float64 before it is stored (a CPU reference's way)."""

    name = "variant-fused-float64"

    def add(self, x, residual):
        return np.asarray(x, dtype=np.float64) + np.asarray(residual, dtype=np.float64)

    def normalized_input(self, total, stored):
        return np.asarray(stored, dtype=np.float64)

    def statistics(self, s, centered, eps):
        mean = s.mean(axis=1) if centered else np.zeros(s.shape[0])
        c = s - mean[:, None]
        return c, 1.0 / np.sqrt((c * c).mean(axis=1) + eps)


def _row_signs(values: np.ndarray) -> np.ndarray:
    """+1 or -1 per value, from one bit of its fp32 pattern: an approximation's error, both ways, reproducibly."""
    return np.where((np.asarray(values, F32).view(np.uint32) >> 3) & 1, 1.0, -1.0)


class ApproximateRsqrt(FusedKernel):
    """rstd as a GPU's fast path computes it: ``rsqrt.approx.f32`` (relative error up to 2^-22.9, here at its
    worst, either sign) of a variance divided by N with ``div.full.f32`` (``a * rcp.approx(N)``, the reciprocal
    within 1 ulp, exact for a power of two). The mean is divided correctly rounded: approximate there, a mean 1
    ulp off on an integer constant row at 2e4 leaves a variance of 4e-6 beside eps 1e-5 (rstd 15% off, xhat 0.5
    where it is 0), which fails the backward's bound: normbench's Triton kernels use div.rn for it."""

    name = "variant-fused-approx-rsqrt"

    @staticmethod
    def divide_full(a, n):
        reciprocal = (F32(1) / F32(n)).astype(F32)
        if np.frexp(F32(n))[0] != 0.5:  # not a power of two: rcp.approx may be 1 ulp off, here it is
            reciprocal = np.nextafter(reciprocal, F32(2) * reciprocal * F32(_row_signs(F32(n))))
        return (np.asarray(a, F32) * reciprocal).astype(F32)

    @staticmethod
    def rsqrt_approx(v):
        v = np.asarray(v, F32)
        return (1.0 / np.sqrt(v.astype(np.float64)) * (1 + _row_signs(v) * 2.0**-22.9)).astype(F32)

    def statistics(self, s, centered, eps):
        n = F32(s.shape[1])
        mean = s.sum(axis=1, dtype=F32) / n if centered else np.zeros(s.shape[0], F32)
        c = s - mean[:, None]
        return c, self.rsqrt_approx(self.divide_full((c * c).sum(axis=1, dtype=F32), n) + F32(eps))


class TreeSums(FusedKernel):
    """The statistics' row sums in blocks of 128 lanes, the block sums added pairwise (a GPU's tree), in the
    forward and where the backward recomputes them: another summation order."""

    name = "variant-fused-tree-sums"

    @staticmethod
    def tree_sum(a):
        m, n = a.shape
        if m == 0 or n == 0:
            return np.zeros(m, F32)
        padded = np.zeros((m, -(-n // 128) * 128), F32)
        padded[:, :n] = a
        partial = padded.reshape(m, -1, 128).sum(axis=2, dtype=F32)
        while partial.shape[1] > 1:
            if partial.shape[1] % 2:
                partial = np.concatenate([partial, np.zeros((m, 1), F32)], axis=1)
            partial = partial[:, 0::2] + partial[:, 1::2]
        return partial[:, 0]

    def statistics(self, s, centered, eps):
        n = F32(s.shape[1])
        mean = self.tree_sum(s) / n if centered else np.zeros(s.shape[0], F32)
        c = s - mean[:, None]
        return c, F32(1) / np.sqrt(self.tree_sum(c * c) / n + F32(eps))


CORRECT_VARIANTS: list[type[FusedKernel]] = [FusedKernel, UnroundedSum, WeightAfterRounding, Float64Statistics,
                                             ApproximateRsqrt, TreeSums]


# -- forward mutants: one real bug each -------------------------------------------------------------------


class ResidualOutNotWritten(FusedKernel):
    """The sum normalized, but residual_out not written: the residual buffer handed back as it came."""

    name = "mutant-fused-residual-not-written"

    def store(self, total, residual):
        return np.array(residual, dtype=residual.dtype).reshape(total.shape)


class ResidualOutTruncated(FusedKernel):
    """residual_out rounded toward zero (a conversion by truncation) instead of to nearest."""

    name = "mutant-fused-residual-truncated"

    def store(self, total, residual):
        if residual.dtype.name == "bfloat16":
            return _bf16_toward_zero(total)
        rounded = total.astype(residual.dtype)
        if residual.dtype != np.float16:
            return rounded
        return np.where(np.abs(rounded.astype(F32)) > np.abs(total),
                        np.nextafter(rounded, np.float16(0)), rounded).astype(np.float16)


def _bf16_toward_zero(values):
    """fp32 to bfloat16 by dropping the low 16 bits (round toward zero)."""
    import ml_dtypes

    bits = np.ascontiguousarray(values, dtype=F32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(F32).astype(ml_dtypes.bfloat16)


class StaleResidual(FusedKernel):
    """The residual read from a workspace left over from the call before (an uninitialized or stale buffer fed
    as the residual, where this call's was meant; 1e4 garbage on the first call of a shape)."""

    name = "mutant-fused-stale-residual"

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        return super().add_layer_norm(x, self._stale(residual), normalized_shape, weight, bias, eps)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        return super().add_rms_norm(x, self._stale(residual), normalized_shape, weight, eps)

    def _stale(self, residual):
        workspaces = self.__dict__.setdefault("workspaces", {})
        key = (np.shape(residual), np.asarray(residual).dtype)
        stale = workspaces.get(key)
        if stale is None:
            stale = np.full(np.shape(residual), 1e4, dtype=np.asarray(residual).dtype)
        workspaces[key] = np.array(residual)
        return stale


class TailIntoNextRow(FusedKernel):
    """A vector tail at a hidden size no multiple of 8 written past the row's end, into the next row's first
    elements (the odd-hidden-size bug of a fused kernel, hidden 769)."""

    name = "mutant-fused-tail-into-next-row"

    def finish(self, y, stored, x):
        n = y.shape[1]
        tail = n % 8
        if tail and n > 8 and y.shape[0] > 1:
            flat = y.reshape(-1)
            for row in range(y.shape[0] - 1):
                start = (row + 1) * n
                flat[start:start + 8 - tail] = flat[start - (8 - tail):start][::-1]
        return super().finish(y, stored, x)


class NormalizesX(FusedKernel):
    """Writes the sum but normalizes x, the input before the add (a fusion that forgot its own sum)."""

    name = "mutant-fused-normalizes-x"

    def add(self, x, residual):
        self._x = x
        return super().add(x, residual)

    def normalized_input(self, total, stored):
        return self._x


class InPlaceResidual(FusedKernel):
    """vLLM's ``fused_add_rms_norm`` semantics wrapped without the copies (docs/fused.md): the sum written into the
    residual buffer it was handed, and that buffer returned as residual_out. Right on the first call; every call after
    adds x to the last sum."""

    name = "mutant-fused-in-place-residual"

    def finish(self, y, stored, x):
        y, stored = super().finish(y, stored, x)
        self._residual[...] = stored.reshape(self._residual.shape)
        return y, self._residual

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        self._residual = residual
        return super().add_layer_norm(x, residual, normalized_shape, weight, bias, eps)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        self._residual = residual
        return super().add_rms_norm(x, residual, normalized_shape, weight, eps)


# -- backward mutants ---------------------------------------------------------------------------------------


class PrenormBackward(FusedKernel):
    """``(dres + dout) * dnorm`` instead of ``dres + dout * dnorm``: the residual's gradient sent through the
    normalization's vector-Jacobian product too (a reported prenorm backward)."""

    name = "mutant-fused-prenorm-backward"

    def upstream(self, dy32, dres32):
        return dy32 + dres32

    def combine(self, dx, dres32):
        return dx


class DropsResidualGradient(FusedKernel):
    """dsum is the normalization's dx alone: the gradient arriving along the residual stream dropped."""

    name = "mutant-fused-drops-dresidual"

    def combine(self, dx, dres32):
        return dx


class BackwardIntoDy(FusedKernel):
    """The backward writes dsum into the dy buffer (in place, to save memory) although a norm -> residual -> norm
    pattern still needs dy (training did not converge)."""

    name = "mutant-fused-backward-into-dy"

    def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps):
        out = super().add_rms_norm_backward(dy, dresidual_out, residual_out, normalized_shape, weight, eps)
        return self._into(dy, out)

    def add_layer_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps):
        out = super().add_layer_norm_backward(dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps)
        return self._into(dy, out)

    @staticmethod
    def _into(dy, out):
        if dy.dtype == out[0].dtype:
            dy[...] = out[0]  # handed read-only (the throughput judge), this write fails at once
            return (dy, *out[1:])
        return out


FORWARD_MUTANTS: list[type[FusedKernel]] = [ResidualOutNotWritten, ResidualOutTruncated, StaleResidual,
                                             TailIntoNextRow, NormalizesX, InPlaceResidual]
BACKWARD_MUTANTS: list[type[FusedKernel]] = [PrenormBackward, DropsResidualGradient, BackwardIntoDy]
