"""Mutant backends: a correct fp32 kernel, and copies of it with one real bug each.

``Fp32Kernel`` computes like a GPU kernel (fp32 statistics, two-pass, fp32
saved mean/rstd, one rounding of y to the input dtype) and must pass every
suite: it is the control that proves each mutant fails for its bug alone.
Each mutant names the bug class of NUMERICS.md it reproduces.

The arithmetic of every numerical bug lives once, in ``normbench.check.hypotheses``
(the hypotheses a failure is tested against): the kernel runs its ``model``'s steps in
fp32, and a mutant with a numerical bug is the kernel with that hypothesis as its model.
Mutants whose bug is not arithmetic (strides, shapes, dtypes, in-place writes, missing
gradients, nondeterminism) override the kernel's own steps.

``tests/test_mutants.py`` registers these through a throw-away ``dist-info``
entry point, exactly like a plugin, and runs ``pytest suites/ --impl=...``.
"""

from __future__ import annotations

import itertools

import numpy as np

from normbench import Backend
from normbench.check import hypotheses
from normbench.core.dtypes import dtype_name
from normbench.kit.layout import decompose

F32 = np.float32


class Fp32Kernel(Backend):
    """The control: correct, fp32 accumulation, saved statistics."""

    name = "mutant-control"
    description = "correct fp32-accumulating NumPy kernel (control for the mutants)"
    dtypes = ("float32", "float16", "bfloat16")
    strided = True
    #: the arithmetic, step by step (a mutant with a numerical bug replaces it with a hypothesis)
    model: hypotheses.Model = hypotheses.CORRECT

    def asarray(self, host):
        return host

    def to_numpy(self, native):
        return np.asarray(native)

    # the kernel, in small overridable steps ------------------------------------------
    def read(self, x, normalized_shape):
        return np.asarray(x, dtype=F32).reshape(-1, int(np.prod(normalized_shape)))

    def acc(self, x):
        """The precision of the statistics: fp32, or the narrower one the model's bug names."""
        precision = self.model.precision(dtype_name(np.asarray(x).dtype))
        return F32 if precision is np.float64 else precision

    def statistics(self, x32, eps, acc=F32):
        mean, rstd = self.model.statistics(x32.astype(acc), eps, acc)
        return mean.astype(F32), rstd.astype(F32)

    def statistics_of(self, x32, eps, x):
        """``statistics`` in the model's precision for x (fp32 unless the bug names another);
        subclasses that override ``statistics(x32, eps)`` (tests/invariance_mutants.py) keep working."""
        acc = self.acc(x)
        return self.statistics(x32, eps) if acc is F32 else self.statistics(x32, eps, acc)

    def rstd(self, var, eps):
        return self.model.rstd(var, eps, F32)

    def params(self, p, x):
        return None if p is None else np.asarray(p, dtype=F32).reshape(-1)

    def normalize(self, x32, mean, rstd, eps):
        return self.model.normalize(x32, mean, rstd)

    def write(self, y32, x):
        return y32.reshape(x.shape).astype(x.dtype)

    # the contract -----------------------------------------------------------------------
    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.statistics_of(x32, eps, x)
            y = self.normalize(x32, mean, rstd, eps)
            w, b = self.params(weight, x), self.params(bias, x)
            if w is not None:
                y = y * w
            if b is not None:
                y = y + b
            return self.write(y, x)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            return self.statistics_of(self.read(x, normalized_shape), eps, x)

    # the backward, in small overridable steps ------------------------------------------
    def backward_statistics(self, x32, eps, x):
        acc = self.acc(x)
        mean, rstd = self.model.backward_statistics(x32.astype(acc), eps, acc, dtype_name(np.asarray(x).dtype))
        return mean.astype(F32), rstd.astype(F32)

    def column_sum(self, terms, x):
        """The dweight/dbias reduction over rows, in fp32."""
        return terms.sum(axis=0, dtype=F32)

    def weight_grad(self, dy32, xhat, w, x):
        return self.column_sum(dy32 * xhat, x)

    def bias_grad(self, dy32, w, x):
        return self.column_sum(self.model.bias_terms(dy32, F32(1) if w is None else w), x)

    def param_out(self, grad32, p):
        return None if p is None else np.asarray(grad32).reshape(p.shape).astype(p.dtype)

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.backward_statistics(x32, eps, x)
            xhat = self.normalize(x32, mean, rstd, eps)
            dy32 = self.read(dy, normalized_shape)
            w = self.params(weight, x)
            g = dy32 * w if w is not None else dy32
            dx = self.write(self.model.dx(g, x32, mean, rstd, F32), x)
            dw = None if weight is None else self.param_out(self.weight_grad(dy32, xhat, w, x), weight)
            db = None if bias is None else self.param_out(self.bias_grad(dy32, w, x), bias)
            return dx, dw, db


# -- forward mutants: one bug each ------------------------------------------------------------


class OnePassVariance(Fp32Kernel):
    """#1: var = E[x^2] - E[x]^2 (clamped at 0): cancellation at large offsets."""

    name = "mutant-one-pass-variance"
    model = hypotheses.BY_KEY["one-pass-variance"]


class OnePassNegativeVariance(Fp32Kernel):
    """#2: one-pass variance without the clamp: negative values reach rsqrt -> NaN."""

    name = "mutant-negative-variance"
    model = hypotheses.BY_KEY["one-pass-negative-variance"]


class VarianceFloor(Fp32Kernel):
    """#3: the variance floored at 1e-5 'for safety'."""

    name = "mutant-variance-floor"
    model = hypotheses.BY_KEY["variance-floor"]


class HalfAccumulation(Fp32Kernel):
    """#4: statistics accumulated in the input dtype (fp16 overflows sum(x^2))."""

    name = "mutant-half-accumulation"
    model = hypotheses.BY_KEY["half-accumulation"]


class PaddedLanes(Fp32Kernel):
    """#5: the row padded with zeros to a power of two; padded lanes enter the variance."""

    name = "mutant-padded-lanes"
    model = hypotheses.BY_KEY["padded-lanes"]


class SequentialMean(Fp32Kernel):
    """#4: the mean summed sequentially in fp32 (a released library): O(N*u) error, caught by
    constant rows at N = 8192 and 65536."""

    name = "mutant-sequential-mean"
    model = hypotheses.BY_KEY["sequential-mean"]


class LanesSequential(Fp32Kernel):
    """#4: the sums in 4 fp32 lanes, each lane's elements added one after another (a SIMD loop): O(N/4*u) error,
    caught by the constant rows at N = 65536."""

    name = "mutant-lanes-sequential"
    model = hypotheses.BY_KEY["lanes-sequential-4"]


class IgnoresStrides(Fp32Kernel):
    """#9: reads the buffer as contiguous from its start (strides and offset ignored)."""

    name = "mutant-ignores-strides"

    def read(self, x, normalized_shape):
        flat, shape, _, _ = decompose(np.asarray(x))
        return flat[: int(np.prod(shape))].astype(F32).reshape(-1, int(np.prod(normalized_shape)))


class EpsOutsideSqrt(Fp32Kernel):
    """#11: 1/(sqrt(var) + eps) instead of 1/sqrt(var + eps)."""

    name = "mutant-eps-outside-sqrt"
    model = hypotheses.BY_KEY["eps-outside-sqrt"]


class BesselCorrection(Fp32Kernel):
    """#12: the unbiased variance, dividing by N - 1."""

    name = "mutant-bessel"
    model = hypotheses.BY_KEY["bessel"]


class EpsIgnored(Fp32Kernel):
    """#13: eps dropped: constant rows give NaN."""

    name = "mutant-eps-ignored"
    model = hypotheses.BY_KEY["eps-ignored"]


class EpsNotPropagated(Fp32Kernel):
    """#13: the caller's eps not propagated; a default 1e-5 used instead."""

    name = "mutant-eps-fixed"
    model = hypotheses.BY_KEY["eps-fixed"]


class SingleElementIdentity(Fp32Kernel):
    """#14: N = 1 special-cased as y = x*w + b."""

    name = "mutant-n1-identity"
    model = hypotheses.BY_KEY["n1-identity"]


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
    OnePassVariance, OnePassNegativeVariance, VarianceFloor, HalfAccumulation, SequentialMean, LanesSequential,
    PaddedLanes, IgnoresStrides,
    EpsOutsideSqrt, BesselCorrection, EpsIgnored, EpsNotPropagated, SingleElementIdentity,
    MixedParamsReinterpreted, LastDimOnly, StatisticsWithoutEps, EmptyInputWrongShape, BatchPrescale,
    NonDeterministic, InPlace, WrongOutputDtype,
]


# -- backward mutants: one bug each (NUMERICS.md classes 6-9, 14, 17, 18) ---------------------


class NoMeanTerm(Fp32Kernel):
    """#7: dx without the mean(dy*weight) term."""

    name = "mutant-dx-no-mean-term"
    model = hypotheses.BY_KEY["dx-no-mean-term"]


class MeanTermTwice(Fp32Kernel):
    """#7: the mean term subtracted twice (tenstorrent/tt-metal#53204)."""

    name = "mutant-dx-mean-twice"
    model = hypotheses.BY_KEY["dx-mean-twice"]


class NoProjection(Fp32Kernel):
    """#7: dx without the xhat*mean(dy*weight*xhat) projection."""

    name = "mutant-dx-no-projection"
    model = hypotheses.BY_KEY["dx-no-projection"]


class BackwardRstdWithoutEps(Fp32Kernel):
    """#17: the backward recomputes rstd as 1/sqrt(var), without eps (the forward is right)."""

    name = "mutant-backward-rstd-without-eps"
    model = hypotheses.BY_KEY["backward-rstd-without-eps"]


class ExpandedDx(Fp32Kernel):
    """#7: dx = rstd*g + c2*x + c3 from sums over x, not x - mean (a released CPU backward):
    cancels on constant rows at 1e3 and 1e4."""

    name = "mutant-dx-expanded"
    model = hypotheses.BY_KEY["dx-expanded"]


class DeclaredHalfStatistics(Fp32Kernel):
    """#17: mean and rstd stored in the half input dtype, reused by the backward, and declared
    through ``layer_norm_statistics`` (which once bought a larger backward bound)."""

    name = "mutant-declared-half-statistics"
    model = hypotheses.BY_KEY["saved-statistics-input-dtype"]

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        mean, rstd = super().layer_norm_statistics(x, normalized_shape, weight, bias, eps)
        dtype = np.asarray(x).dtype
        return (mean, rstd) if dtype == F32 else (mean.astype(dtype), rstd.astype(dtype))


class DweightLastBlockDropped(Fp32Kernel):
    """#6: dweight reduced over blocks of 256 rows, ceil forgotten: the last partial block is dropped."""

    name = "mutant-dweight-last-block"
    model = hypotheses.BY_KEY["dweight-last-block"]

    def weight_grad(self, dy32, xhat, w, x):
        return self.model.weight_grad(dy32 * xhat, dtype_name(x.dtype))


class DweightHalfAccumulation(Fp32Kernel):
    """#4/#6: dweight accumulated row by row in the input dtype (fp16/bf16 inputs)."""

    name = "mutant-dweight-half-accumulation"
    model = hypotheses.BY_KEY["dweight-half-accumulation"]

    def weight_grad(self, dy32, xhat, w, x):
        return self.model.weight_grad(dy32 * xhat, dtype_name(x.dtype))


class DbiasTimesWeight(Fp32Kernel):
    """#8: dbias computed as sum(dy*weight), the gradient of the wrong product."""

    name = "mutant-dbias-times-weight"
    model = hypotheses.BY_KEY["dbias-times-weight"]


class MissingWeightGrad(Fp32Kernel):
    """#8: the weight gradient is not returned (None) although weight was given."""

    name = "mutant-missing-dweight"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, _, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        return dx, None, db


class SeveredBiasGrad(Fp32Kernel):
    """#8: the bias gradient severed: zeros instead of sum(dy) (unslothai/unsloth#4533)."""

    name = "mutant-severed-dbias"
    model = hypotheses.BY_KEY["dbias-severed"]


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
    NoMeanTerm, MeanTermTwice, NoProjection, ExpandedDx, DeclaredHalfStatistics, BackwardRstdWithoutEps,
    DweightLastBlockDropped,
    DweightHalfAccumulation, DbiasTimesWeight, MissingWeightGrad, SeveredBiasGrad, SwappedParamGrads,
    DyIgnoresStrides, ParamGradsOverLastDim, SingleElementBackward, EmptyGradGarbage, WrongGradShape,
    WrongGradDtype, InPlaceDy, NonDeterministicBackward,
]


# -- mutants that write into their arguments (tests/test_input_mutation.py): right outputs, inputs written over --


def _writable(a) -> bool:
    """Whether a kernel would write ``a`` in place: a non-empty array that is not a broadcast view (a stride-0 dy,
    which no kernel writes). Its read-only flag is not asked: the harness hands inputs read-only, and the write that
    then fails is what these mutants are for."""
    return isinstance(a, np.ndarray) and a.size > 0 and 0 not in a.strides


class NormalizesInputInPlace(Fp32Kernel):
    """Normalizes x in its own buffer to save one (x <- (x - mean)*rstd, y = x*weight + bias): y right, x lost."""

    name = "mutant-normalizes-x-in-place"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = super().layer_norm(x, normalized_shape, weight, bias, eps)
        if _writable(x):
            with np.errstate(all="ignore"):
                x32 = self.read(x, normalized_shape)
                mean, rstd = self.statistics_of(x32, eps, x)
                x[...] = ((x32 - mean[:, None]) * rstd[:, None]).reshape(x.shape).astype(x.dtype)
        return y


class PoisonsInput(Fp32Kernel):
    """Marks x as consumed after computing y, writing NaN into it (a buffer recycled as a workspace)."""

    name = "mutant-poisons-x"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = super().layer_norm(x, normalized_shape, weight, bias, eps)
        if _writable(x):
            x[...] = np.nan
        return y


class ZeroesDy(Fp32Kernel):
    """Zeroes dy once its gradients are computed (a gradient buffer reset for the next accumulation)."""

    name = "mutant-zeroes-dy"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        out = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        if _writable(dy):
            dy[...] = 0
        return out


class BackwardNormalizesInput(Fp32Kernel):
    """The backward recomputes xhat into x's buffer (the saved input overwritten): gradients right, x lost."""

    name = "mutant-backward-normalizes-x"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        out = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        if _writable(x):
            with np.errstate(all="ignore"):
                x32 = self.read(x, normalized_shape)
                mean, rstd = self.backward_statistics(x32, eps, x)
                x[...] = ((x32 - mean[:, None]) * rstd[:, None]).reshape(x.shape).astype(x.dtype)
        return out
