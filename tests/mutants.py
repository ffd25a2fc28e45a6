"""Mutant backends: a correct fp32 kernel, and copies of it with one real bug each.

``Fp32Kernel`` computes like a GPU kernel (fp32 statistics, two-pass, fp32
saved mean/rstd, one rounding of y to the input dtype) and must pass every
suite: it is the control that proves each mutant fails for its bug alone.
Each mutant names the bug class of NUMERICS.md it reproduces.

``tests/test_mutants.py`` registers these through a throw-away ``dist-info``
entry point, exactly like a plugin, and runs ``pytest suites/ --impl=...``.
"""

from __future__ import annotations

import itertools

import numpy as np

from normbench import Backend
from normbench.layout import decompose

F32 = np.float32


class Fp32Kernel(Backend):
    """The control: correct, fp32 accumulation, saved statistics."""

    name = "mutant-control"
    description = "correct fp32-accumulating NumPy kernel (control for the mutants)"
    dtypes = ("float32", "float16", "bfloat16")
    strided = True

    def asarray(self, host):
        return host

    def to_numpy(self, native):
        return np.asarray(native)

    # the kernel, in small overridable steps ------------------------------------------
    def read(self, x, normalized_shape):
        return np.asarray(x, dtype=F32).reshape(-1, int(np.prod(normalized_shape)))

    def statistics(self, x32, eps):
        mean = x32.mean(axis=1, dtype=F32)
        centered = x32 - mean[:, None]
        var = (centered * centered).mean(axis=1, dtype=F32)
        return mean, self.rstd(var, eps)

    def rstd(self, var, eps):
        return F32(1) / np.sqrt(var + F32(eps))

    def params(self, p, x):
        return None if p is None else np.asarray(p, dtype=F32).reshape(-1)

    def normalize(self, x32, mean, rstd, eps):
        return (x32 - mean[:, None]) * rstd[:, None]

    def write(self, y32, x):
        return y32.reshape(x.shape).astype(x.dtype)

    # the contract -----------------------------------------------------------------------
    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.statistics(x32, eps)
            y = self.normalize(x32, mean, rstd, eps)
            w, b = self.params(weight, x), self.params(bias, x)
            if w is not None:
                y = y * w
            if b is not None:
                y = y + b
            return self.write(y, x)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            return self.statistics(self.read(x, normalized_shape), eps)

    # the backward, in small overridable steps ------------------------------------------
    def backward_statistics(self, x32, eps):
        return self.statistics(x32, eps)

    def row_mean(self, a):
        return a.mean(axis=1, dtype=F32)[:, None] if a.size else np.zeros((a.shape[0], 1), F32)

    def input_grad(self, g, xhat, rstd):
        """dx = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dy*weight."""
        return rstd[:, None] * (g - self.row_mean(g) - xhat * self.row_mean(g * xhat))

    def column_sum(self, terms, x):
        """The dweight/dbias reduction over rows, in fp32."""
        return terms.sum(axis=0, dtype=F32)

    def weight_grad(self, dy32, xhat, w, x):
        return self.column_sum(dy32 * xhat, x)

    def bias_grad(self, dy32, w, x):
        return self.column_sum(dy32, x)

    def param_out(self, grad32, p):
        return None if p is None else grad32.reshape(p.shape).astype(p.dtype)

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.backward_statistics(x32, eps)
            xhat = (x32 - mean[:, None]) * rstd[:, None]
            dy32 = self.read(dy, normalized_shape)
            w = self.params(weight, x)
            g = dy32 * w if w is not None else dy32
            dx = self.write(self.input_grad(g, xhat, rstd), x)
            dw = None if weight is None else self.param_out(self.weight_grad(dy32, xhat, w, x), weight)
            db = None if bias is None else self.param_out(self.bias_grad(dy32, w, x), bias)
            return dx, dw, db


# -- forward mutants: one bug each ------------------------------------------------------------


class OnePassVariance(Fp32Kernel):
    """#1: var = E[x^2] - E[x]^2 (clamped at 0): cancellation at large offsets."""

    name = "mutant-one-pass-variance"

    def statistics(self, x32, eps):
        mean = x32.mean(axis=1, dtype=F32)
        var = np.maximum((x32 * x32).mean(axis=1, dtype=F32) - mean * mean, F32(0))
        return mean, self.rstd(var, eps)


class OnePassNegativeVariance(Fp32Kernel):
    """#2: one-pass variance without the clamp: negative values reach rsqrt -> NaN."""

    name = "mutant-negative-variance"

    def statistics(self, x32, eps):
        mean = x32.mean(axis=1, dtype=F32)
        return mean, self.rstd((x32 * x32).mean(axis=1, dtype=F32) - mean * mean, eps)


class VarianceFloor(Fp32Kernel):
    """#3: the variance floored at 1e-5 'for safety'."""

    name = "mutant-variance-floor"

    def rstd(self, var, eps):
        return super().rstd(np.maximum(var, F32(1e-5)), eps)


class HalfAccumulation(Fp32Kernel):
    """#4: statistics accumulated in the input dtype (fp16 overflows sum(x^2))."""

    name = "mutant-half-accumulation"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            xs = np.asarray(x).reshape(-1, int(np.prod(normalized_shape)))
            mean = xs.mean(axis=1, dtype=xs.dtype)
            centered = xs - mean[:, None]
            var = (centered * centered).mean(axis=1, dtype=xs.dtype).astype(F32)
            y = (xs.astype(F32) - mean[:, None].astype(F32)) * self.rstd(var, eps)[:, None]
            w, b = self.params(weight, x), self.params(bias, x)
            return self.write(y * (1 if w is None else w) + (0 if b is None else b), x)


class PaddedLanes(Fp32Kernel):
    """#5: the row padded with zeros to a power of two; padded lanes enter the variance."""

    name = "mutant-padded-lanes"

    def statistics(self, x32, eps):
        n = x32.shape[1]
        block = 1 << max(n - 1, 0).bit_length()
        padded = np.zeros((x32.shape[0], block), F32)
        padded[:, :n] = x32
        mean = padded.sum(axis=1, dtype=F32) / F32(n)
        centered = padded - mean[:, None]
        return mean, self.rstd((centered * centered).sum(axis=1, dtype=F32) / F32(n), eps)


class IgnoresStrides(Fp32Kernel):
    """#9: reads the buffer as contiguous from its start (strides and offset ignored)."""

    name = "mutant-ignores-strides"

    def read(self, x, normalized_shape):
        flat, shape, _, _ = decompose(np.asarray(x))
        return flat[: int(np.prod(shape))].astype(F32).reshape(-1, int(np.prod(normalized_shape)))


class EpsOutsideSqrt(Fp32Kernel):
    """#11: 1/(sqrt(var) + eps) instead of 1/sqrt(var + eps)."""

    name = "mutant-eps-outside-sqrt"

    def rstd(self, var, eps):
        return F32(1) / (np.sqrt(var) + F32(eps))


class BesselCorrection(Fp32Kernel):
    """#12: the unbiased variance, dividing by N - 1."""

    name = "mutant-bessel"

    def statistics(self, x32, eps):
        n = x32.shape[1]
        mean = x32.mean(axis=1, dtype=F32)
        centered = x32 - mean[:, None]
        return mean, self.rstd((centered * centered).sum(axis=1, dtype=F32) / F32(n - 1), eps)


class EpsIgnored(Fp32Kernel):
    """#13: eps dropped: constant rows give NaN."""

    name = "mutant-eps-ignored"

    def rstd(self, var, eps):
        return super().rstd(var, 0.0)


class EpsNotPropagated(Fp32Kernel):
    """#13: the caller's eps not propagated; a default 1e-5 used instead."""

    name = "mutant-eps-fixed"

    def rstd(self, var, eps):
        return super().rstd(var, 1e-5)


class SingleElementIdentity(Fp32Kernel):
    """#14: N = 1 special-cased as y = x*w + b."""

    name = "mutant-n1-identity"

    def normalize(self, x32, mean, rstd, eps):
        return x32 if x32.shape[1] == 1 else super().normalize(x32, mean, rstd, eps)


class MixedParamsReinterpreted(Fp32Kernel):
    """#15: fp32 weight/bias read as if they had x's dtype."""

    name = "mutant-mixed-params"

    def params(self, p, x):
        if p is None:
            return None
        p = np.asarray(p)
        if p.dtype != x.dtype:
            p = np.ascontiguousarray(p).reshape(-1).view(x.dtype)[: p.size]
        return p.astype(F32).reshape(-1)


class LastDimOnly(Fp32Kernel):
    """#16: a multi-dim normalized_shape normalized over its last dim only."""

    name = "mutant-last-dim-only"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return super().layer_norm(x, normalized_shape[-1:], weight, bias, eps)


class StatisticsWithoutEps(Fp32Kernel):
    """#17: the saved rstd is 1/sqrt(var), without eps (y itself is right)."""

    name = "mutant-rstd-without-eps"

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        return super().layer_norm_statistics(x, normalized_shape, weight, bias, 0.0)


class EmptyInputWrongShape(Fp32Kernel):
    """#18: an empty input returns an array of the wrong shape."""

    name = "mutant-empty-input"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if np.asarray(x).size == 0:
            return np.zeros((0,), dtype=np.asarray(x).dtype)
        return super().layer_norm(x, normalized_shape, weight, bias, eps)


class BatchPrescale(Fp32Kernel):
    """#19: x divided by the batch's max |x| first (harmless in exact math): a NaN or
    Inf in one row poisons every row."""

    name = "mutant-batch-prescale"

    def read(self, x, normalized_shape):
        x32 = super().read(x, normalized_shape)
        scale = np.max(np.abs(x32)) if x32.size else F32(1)
        return x32 / scale if scale > 0 else x32


class NonDeterministic(Fp32Kernel):
    """Atomics-style accumulation: the order of the row sum changes from call to call."""

    name = "mutant-nondeterministic"
    _calls = itertools.count()

    def statistics(self, x32, eps):
        order = np.random.default_rng(next(self._calls)).permutation(x32.shape[1])
        shuffled = x32[:, order]
        mean = np.add.accumulate(shuffled, axis=1, dtype=F32)[:, -1] / F32(x32.shape[1]) if x32.size else \
            np.zeros(x32.shape[0], F32)
        centered = x32 - mean[:, None]
        return mean, self.rstd((centered * centered).mean(axis=1, dtype=F32), eps)


class InPlace(Fp32Kernel):
    """Writes its output into its input x (in place)."""

    name = "mutant-in-place"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = super().layer_norm(x, normalized_shape, weight, bias, eps)
        if np.asarray(x).size:
            x[...] = y
        return y


class WrongOutputDtype(Fp32Kernel):
    """Returns fp32 for half inputs."""

    name = "mutant-output-dtype"

    def write(self, y32, x):
        return y32.reshape(x.shape)


FORWARD_MUTANTS: list[type[Fp32Kernel]] = [
    OnePassVariance, OnePassNegativeVariance, VarianceFloor, HalfAccumulation, PaddedLanes, IgnoresStrides,
    EpsOutsideSqrt, BesselCorrection, EpsIgnored, EpsNotPropagated, SingleElementIdentity,
    MixedParamsReinterpreted, LastDimOnly, StatisticsWithoutEps, EmptyInputWrongShape, BatchPrescale,
    NonDeterministic, InPlace, WrongOutputDtype,
]


# -- backward mutants: one bug each (NUMERICS.md classes 6-9, 14, 17, 18) ---------------------


class NoMeanTerm(Fp32Kernel):
    """#7: dx without the mean(dy*weight) term."""

    name = "mutant-dx-no-mean-term"

    def input_grad(self, g, xhat, rstd):
        return rstd[:, None] * (g - xhat * self.row_mean(g * xhat))


class MeanTermTwice(Fp32Kernel):
    """#7: the mean term subtracted twice (tenstorrent/tt-metal#53204)."""

    name = "mutant-dx-mean-twice"

    def input_grad(self, g, xhat, rstd):
        return super().input_grad(g, xhat, rstd) - rstd[:, None] * self.row_mean(g)


class NoProjection(Fp32Kernel):
    """#7: dx without the xhat*mean(dy*weight*xhat) projection."""

    name = "mutant-dx-no-projection"

    def input_grad(self, g, xhat, rstd):
        return rstd[:, None] * (g - self.row_mean(g))


class BackwardRstdWithoutEps(Fp32Kernel):
    """#17: the backward recomputes rstd as 1/sqrt(var), without eps (the forward is right)."""

    name = "mutant-backward-rstd-without-eps"

    def backward_statistics(self, x32, eps):
        return self.statistics(x32, 0.0)


class DweightLastBlockDropped(Fp32Kernel):
    """#6: dweight reduced over blocks of 256 rows, ceil forgotten: the last partial block is dropped."""

    name = "mutant-dweight-last-block"
    BLOCK = 256

    def weight_grad(self, dy32, xhat, w, x):
        full = (dy32.shape[0] // self.BLOCK) * self.BLOCK
        return self.column_sum((dy32 * xhat)[:full], x)


class DweightHalfAccumulation(Fp32Kernel):
    """#4/#6: dweight accumulated row by row in the input dtype (fp16/bf16 inputs)."""

    name = "mutant-dweight-half-accumulation"

    def weight_grad(self, dy32, xhat, w, x):
        terms = (dy32 * xhat).astype(x.dtype)
        total = np.zeros(terms.shape[1], x.dtype)
        for row in terms:
            total = (total + row).astype(x.dtype)
        return total.astype(F32)


class DbiasTimesWeight(Fp32Kernel):
    """#8: dbias computed as sum(dy*weight), the gradient of the wrong product."""

    name = "mutant-dbias-times-weight"

    def bias_grad(self, dy32, w, x):
        return self.column_sum(dy32 * w if w is not None else dy32, x)


class MissingWeightGrad(Fp32Kernel):
    """#8: the weight gradient is not returned (None) although weight was given."""

    name = "mutant-missing-dweight"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, _, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        return dx, None, db


class SeveredBiasGrad(Fp32Kernel):
    """#8: the bias gradient severed: zeros instead of sum(dy) (unslothai/unsloth#4533)."""

    name = "mutant-severed-dbias"

    def bias_grad(self, dy32, w, x):
        return np.zeros(dy32.shape[1], F32)


class SwappedParamGrads(Fp32Kernel):
    """#8: dweight and dbias returned in each other's place."""

    name = "mutant-swapped-param-grads"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        if dw is None or db is None:
            return dx, dw, db
        return dx, db, dw


class DyIgnoresStrides(Fp32Kernel):
    """#9: dy read as contiguous from its buffer's start (stride-0 and strided dy broken)."""

    name = "mutant-dy-ignores-strides"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        flat, shape, _, _ = decompose(np.asarray(dy))
        size = int(np.prod(shape))
        padded = np.resize(flat, size) if flat.size < size else flat[:size]  # reads past a short buffer
        return super().layer_norm_backward(padded.reshape(shape), x, normalized_shape, weight, bias, eps)


class ParamGradsOverLastDim(Fp32Kernel):
    """#6: with a multi-dim normalized_shape, dweight/dbias also summed over its leading dims
    (a buffer sized by the last dim, tiled back)."""

    name = "mutant-param-grads-last-dim"

    def param_out(self, grad32, p):
        if p is None or np.ndim(p) < 2:
            return super().param_out(grad32, p)
        last = p.shape[-1]
        folded = grad32.reshape(-1, last).sum(axis=0, dtype=F32)
        return np.broadcast_to(folded, p.shape).astype(p.dtype)


class SingleElementBackward(Fp32Kernel):
    """#14: N = 1 special-cased as y = x*w + b in the backward too: dx = dy*w, dweight = sum(dy*x)."""

    name = "mutant-n1-backward"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        if int(np.prod(normalized_shape)) != 1:
            return super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        x32, dy32 = self.read(x, normalized_shape), self.read(dy, normalized_shape)
        w = self.params(weight, x)
        dx = self.write(dy32 * (w if w is not None else F32(1)), x)
        return dx, self.param_out(self.column_sum(dy32 * x32, x), weight), self.param_out(self.column_sum(dy32, x), bias)


class EmptyGradGarbage(Fp32Kernel):
    """#18: with no rows, dweight/dbias come back uninitialized (NaN here), not zero."""

    name = "mutant-empty-grads"

    def column_sum(self, terms, x):
        return np.full(terms.shape[1], np.nan, F32) if terms.shape[0] == 0 else super().column_sum(terms, x)


class WrongGradShape(Fp32Kernel):
    """dweight returned flat, (N,), instead of normalized_shape (multi-dim shapes)."""

    name = "mutant-grad-shape"

    def param_out(self, grad32, p):
        return None if p is None else grad32.reshape(-1).astype(p.dtype)


class WrongGradDtype(Fp32Kernel):
    """dx returned in fp32 for half inputs."""

    name = "mutant-grad-dtype"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        return np.asarray(dx).astype(F32), dw, db


class InPlaceDy(Fp32Kernel):
    """Scales dy by weight in place (its caller's dy is overwritten)."""

    name = "mutant-in-place-dy"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        out = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        if weight is not None and np.asarray(dy).size:
            dy *= np.asarray(weight).astype(dy.dtype)
        return out


class NonDeterministicBackward(Fp32Kernel):
    """Atomics-style dweight: rows added in a different order on every call."""

    name = "mutant-nondeterministic-backward"
    _calls = itertools.count()

    def column_sum(self, terms, x):
        order = np.random.default_rng(next(self._calls)).permutation(terms.shape[0])
        total = np.zeros(terms.shape[1], F32)
        for row in terms[order]:
            total += row
        return total


BACKWARD_MUTANTS: list[type[Fp32Kernel]] = [
    NoMeanTerm, MeanTermTwice, NoProjection, BackwardRstdWithoutEps, DweightLastBlockDropped,
    DweightHalfAccumulation, DbiasTimesWeight, MissingWeightGrad, SeveredBiasGrad, SwappedParamGrads,
    DyIgnoresStrides, ParamGradsOverLastDim, SingleElementBackward, EmptyGradGarbage, WrongGradShape,
    WrongGradDtype, InPlaceDy, NonDeterministicBackward,
]
