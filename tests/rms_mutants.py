"""RMSNorm kernels for the never-miss, never-cry-wolf proofs: a correct fp32 kernel, the rounding
conventions correct kernels in the wild use, and mutants with one real bug each.

``RmsKernel`` computes like a GPU kernel (sum of squares in fp32, rstd in fp32, y rounded once
to x's dtype; dweight reduced over rows in fp32). Each step is a method, so a correct variant
or a mutant overrides exactly one. The correct variants (``CORRECT_VARIANTS``) must pass the
RMSNorm suites on seeds 0..19; every mutant (``FORWARD_MUTANTS``, ``BACKWARD_MUTANTS``) must
fail them. ``tests/test_mutants.py`` runs both through the suites as plugins.
"""

from __future__ import annotations

import numpy as np

from normbench import Backend
from normbench.core.dtypes import default_rms_eps, dtype_name

F32 = np.float32


def _sequential_sum(terms: np.ndarray, dtype) -> np.ndarray:
    """Per row, the terms (M, N) added one by one, every partial sum rounded to ``dtype``."""
    total = np.zeros(terms.shape[0], dtype)
    for column in terms.T:
        total = (total.astype(F32) + column.astype(F32)).astype(dtype)
    return total


class RmsKernel(Backend):
    """The control: correct, fp32 accumulation, y rounded once to x's dtype."""

    name = "mutant-rms-control"
    description = "correct fp32 RMSNorm kernel in NumPy (the control for the RMSNorm mutants)"
    normalizations = ("rms_norm",)
    dtypes = ("float32", "float16", "bfloat16")
    strided = True

    def asarray(self, host):
        return host

    def to_numpy(self, native):
        return np.asarray(native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        raise NotImplementedError("an RMSNorm-only kernel")

    # the kernel, in small overridable steps ------------------------------------------
    def read(self, x, normalized_shape):
        return np.asarray(x, dtype=F32).reshape(-1, int(np.prod(normalized_shape, dtype=np.int64)))

    def centre(self, x32):
        """What is normalized: x itself (RMSNorm subtracts nothing)."""
        return x32

    def mean_square(self, x32, x):
        return (x32 * x32).sum(axis=1, dtype=F32) / F32(x32.shape[1])

    def rstd(self, ms, eps, x):
        return F32(1) / np.sqrt(ms + F32(eps))

    def scale(self, w):
        """The factor the weight contributes: the weight itself."""
        return w

    def output(self, c32, r, w, x):
        y = c32 * r[:, None]
        if w is not None:
            y = y * self.scale(w)
        return y.reshape(x.shape).astype(x.dtype)

    def weights(self, weight):
        return None if weight is None else np.asarray(weight, dtype=F32).reshape(-1)

    def statistics(self, x, normalized_shape, eps):
        eps = default_rms_eps(dtype_name(np.asarray(x).dtype)) if eps is None else eps
        c32 = self.centre(self.read(x, normalized_shape))
        return c32, self.rstd(self.mean_square(c32, x), eps, x)

    def rms_norm(self, x, normalized_shape, weight, eps):
        with np.errstate(all="ignore"):
            c32, r = self.statistics(x, normalized_shape, eps)
            return self.output(c32, r, self.weights(weight), x)

    # the backward ----------------------------------------------------------------------
    def projection(self, g, xhat):
        return (g * xhat).sum(axis=1, dtype=F32)[:, None] / F32(g.shape[1])

    def dx(self, g, xhat, r):
        return r[:, None] * (g - xhat * self.projection(g, xhat))

    def weight_grad(self, terms, x):
        return terms.sum(axis=0, dtype=F32)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        with np.errstate(all="ignore"):
            c32, r = self.statistics(x, normalized_shape, eps)
            xhat = c32 * r[:, None]
            dy32 = self.read(dy, normalized_shape)
            w = self.weights(weight)
            g = dy32 if w is None else dy32 * w
            dx = self.dx(g, xhat, r).reshape(x.shape).astype(x.dtype)
            dw = None if weight is None else self.weight_grad(dy32 * xhat, x).reshape(weight.shape).astype(weight.dtype)
            return dx, dw


# -- correct kernels that round differently: each must pass on seeds 0..19 ---------------------


class LlamaConvention(RmsKernel):
    """Hugging Face's LlamaRMSNorm: the normalized value rounded to x's dtype, then times the weight
    in the weight's dtype (two roundings), the result cast to x's dtype."""

    name = "variant-rms-llama"

    def output(self, c32, r, w, x):
        hidden = (c32 * r[:, None]).astype(x.dtype)
        if w is None:
            return hidden.reshape(x.shape)
        product = (hidden.astype(F32) * w).astype(self._weight_dtype)
        return product.reshape(x.shape).astype(x.dtype)

    def rms_norm(self, x, normalized_shape, weight, eps):
        self._weight_dtype = None if weight is None else np.asarray(weight).dtype
        return super().rms_norm(x, normalized_shape, weight, eps)


class GemmaConvention(RmsKernel):
    """Gemma's ``x*r*(1 + w')``, wrapped as the contract says: the backend passes ``w' = w - 1``,
    computed exactly at its boundary (float64: w - 1 of a float32 w is a float64), and the kernel
    adds the 1 back before it rounds the factor to fp32. (Computed in fp32 instead, ``w - 1`` of an
    fp32 weight loses ``u32*|w - 1|``, beyond the bound where |w| << 1: 54 of the fp32 RMSNorm
    tests fail on seed 0. For half weights fp32 is exact.)"""

    name = "variant-rms-gemma"

    def weights(self, weight):
        return None if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1) - 1.0

    def scale(self, w):
        return (1.0 + w).astype(F32)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        # the gradient with respect to the user's weight is Gemma's (1 + w') gradient, unchanged
        original = self.weights
        self.weights = lambda weight: None if weight is None else self.scale(original(weight))
        try:
            return super().rms_norm_backward(dy, x, normalized_shape, weight, eps)
        finally:
            del self.weights


class BlockedSum(RmsKernel):
    """The sum of squares in blocks of 128 lanes, the block sums added pairwise (a GPU tree)."""

    name = "variant-rms-blocked"

    def mean_square(self, x32, x):
        m, n = x32.shape
        if m == 0:
            return np.zeros(0, F32)
        width = -(-n // 128) * 128
        squares = np.zeros((m, width), F32)
        squares[:, :n] = x32 * x32
        partial = squares.reshape(m, -1, 128).sum(axis=2, dtype=F32)
        while partial.shape[1] > 1:
            if partial.shape[1] % 2:
                partial = np.concatenate([partial, np.zeros((m, 1), F32)], axis=1)
            partial = partial[:, 0::2] + partial[:, 1::2]
        return partial[:, 0] * F32(1.0 / n)


class DivideBySqrt(RmsKernel):
    """y = x / sqrt(ms + eps) elementwise (a division per element) instead of x * rstd, and rstd
    correctly rounded (rsqrt in float64, rounded once) in the backward."""

    name = "variant-rms-divide"

    def rstd(self, ms, eps, x):
        return (1.0 / np.sqrt(ms.astype(np.float64) + eps)).astype(F32)

    def output(self, c32, r, w, x):
        denominator = (F32(1) / r).astype(F32)
        y = c32 / denominator[:, None]
        if w is not None:
            y = y * w
        return y.reshape(x.shape).astype(x.dtype)


CORRECT_VARIANTS: list[type[RmsKernel]] = [LlamaConvention, GemmaConvention, BlockedSum, DivideBySqrt]


# -- forward mutants: one real bug each ----------------------------------------------------------


class HalfSumOfSquares(RmsKernel):
    """The sum of squares accumulated in x's dtype (fp16 overflows past |x| ~ 256; bf16 loses the
    small terms), a reported bug at 10x the bf16 error."""

    name = "mutant-rms-half-sum-of-squares"

    def mean_square(self, x32, x):
        dtype = np.asarray(x).dtype
        squares = (x32 * x32).astype(dtype)
        return _sequential_sum(squares, dtype).astype(F32) / F32(x32.shape[1])


class EpsOutsideSqrt(RmsKernel):
    """r = 1/(sqrt(ms) + eps): eps outside the square root."""

    name = "mutant-rms-eps-outside-sqrt"

    def rstd(self, ms, eps, x):
        return F32(1) / (np.sqrt(ms) + F32(eps))


class MeanSubtracted(RmsKernel):
    """The row mean subtracted: LayerNorm without bias, shipped as RMSNorm."""

    name = "mutant-rms-mean-subtracted"

    def centre(self, x32):
        return x32 - x32.mean(axis=1, keepdims=True, dtype=F32)


class OnePlusWeight(RmsKernel):
    """Gemma's (1 + weight) applied where the backend declares the plain weight."""

    name = "mutant-rms-one-plus-weight"

    def scale(self, w):
        return F32(1) + w


class PaddedLanes(RmsKernel):
    """The mean of squares divided by the padded block width (the next power of two), not N."""

    name = "mutant-rms-padded-lanes"

    def mean_square(self, x32, x):
        n = x32.shape[1]
        return (x32 * x32).sum(axis=1, dtype=F32) / F32(1 << max(n - 1, 0).bit_length())


class RstdInInputDtype(RmsKernel):
    """1/rms rounded to x's dtype before the multiply (a reported bug): for half inputs one more
    rounding per element, within the per-element bound, but the same relative error along a
    whole row: the coherence checks' per-row scale must see it."""

    name = "mutant-rms-rstd-input-dtype"

    def rstd(self, ms, eps, x):
        return super().rstd(ms, eps, x).astype(np.asarray(x).dtype).astype(F32)


# -- Gemma's weight_offset: a correct kernel and its two field bugs ------------------------------------------


class OffsetKernel(RmsKernel):
    """The control for Gemma's ``weight_offset``: ``x*r*(offset + weight)``, the offset added to the weight in fp32
    (Gemma's ``1.0 + weight.float()``); correct on every RMSNorm case."""

    name = "mutant-rms-offset-control"

    def rms_norm(self, x, normalized_shape, weight, eps, weight_offset=0.0):
        self._offset = weight_offset
        return super().rms_norm(x, normalized_shape, weight, eps)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps, weight_offset=0.0):
        self._offset = weight_offset
        return super().rms_norm_backward(dy, x, normalized_shape, weight, eps)

    def weights(self, weight):
        return None if weight is None else self.offset_weight(np.asarray(weight), F32(self._offset))

    def offset_weight(self, weight, offset):
        return np.asarray(weight, dtype=F32).reshape(-1) + offset


class OffsetInWeightDtype(OffsetKernel):
    """``1 + weight`` computed in the weight's dtype (bfloat16), before the fp32 multiply: Gemma's reported bug."""

    name = "mutant-rms-offset-in-weight-dtype"

    def offset_weight(self, weight, offset):
        return super().offset_weight(weight, offset).astype(weight.dtype).astype(F32)


class OffsetTwice(OffsetKernel):
    """The offset added twice (a checkpoint already converted to ``1 + weight``, offset again by the kernel)."""

    name = "mutant-rms-offset-twice"

    def offset_weight(self, weight, offset):
        return super().offset_weight(weight, 2 * offset)


# -- one weight per head (qk-norm): a correct kernel and the field bug of indexing the wrong head ----------------


class PerHeadKernel(RmsKernel):
    """The control for one weight per head: x ``[..., heads, N]``, weight ``(heads, N)``, row ``r`` (heads
    innermost) scaled by weight row :meth:`head_of` ``r`` = ``r % heads``, dweight each head's sum; correct."""

    name = "mutant-rms-per-head-control"
    per_head_weights = True

    def rms_norm(self, x, normalized_shape, weight, eps):
        self._rows = int(np.prod(np.shape(x)[: np.ndim(x) - len(normalized_shape)], dtype=np.int64))
        return super().rms_norm(x, normalized_shape, weight, eps)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        self._rows = int(np.prod(np.shape(x)[: np.ndim(x) - len(normalized_shape)], dtype=np.int64))
        self._weight = weight  # dweight's sums need the head count (weight_grad)
        return super().rms_norm_backward(dy, x, normalized_shape, weight, eps)

    def head_of(self, rows: int, heads: int) -> np.ndarray:
        """The weight row each of ``rows`` rows takes."""
        return np.arange(rows) % heads

    def _heads(self, weight) -> tuple[np.ndarray, np.ndarray]:
        w = np.asarray(weight, dtype=F32)
        w = w.reshape(-1, w.shape[-1]) if w.ndim > 1 else w.reshape(1, -1)
        return w, self.head_of(self._rows, w.shape[0])

    def weights(self, weight):
        if weight is None:
            return None
        w, head = self._heads(weight)
        return w[head]

    def weight_grad(self, terms, x):
        w, head = self._heads(self._weight)
        return np.stack([terms[head == h].sum(axis=0, dtype=F32) for h in range(w.shape[0])])



class WeightOfTheWrongHead(PerHeadKernel):
    """Head-major indexing of a token-major layout: weight row ``r // tokens`` (as if x were ``[heads, tokens,
    N]``) where it is ``r % heads``: every row but the first token's first head scaled by another head's weight."""

    name = "mutant-rms-per-head-wrong-head"

    def head_of(self, rows: int, heads: int) -> np.ndarray:
        return np.arange(rows) // (rows // heads)


FORWARD_MUTANTS: list[type[RmsKernel]] = [HalfSumOfSquares, EpsOutsideSqrt, MeanSubtracted, OnePlusWeight,
                                          PaddedLanes, RstdInInputDtype, OffsetInWeightDtype, OffsetTwice]


# -- backward mutants -------------------------------------------------------------------------------


class DweightHalfAccumulation(RmsKernel):
    """dweight accumulated row by row in x's dtype."""

    name = "mutant-rms-dweight-half"

    def weight_grad(self, terms, x):
        dtype = np.asarray(x).dtype
        return _sequential_sum(terms.T.astype(dtype), dtype).astype(F32)


class NoProjection(RmsKernel):
    """dx = r*g: the projection term xhat*mean(g*xhat) missing."""

    name = "mutant-rms-dx-no-projection"

    def projection(self, g, xhat):
        return F32(0)


class BackwardMeanTerm(RmsKernel):
    """dx with LayerNorm's mean(g) term subtracted as well (a LayerNorm backward reused)."""

    name = "mutant-rms-dx-mean-term"

    def dx(self, g, xhat, r):
        return super().dx(g, xhat, r) - r[:, None] * g.mean(axis=1, keepdims=True, dtype=F32)


BACKWARD_MUTANTS: list[type[RmsKernel]] = [DweightHalfAccumulation, NoProjection, BackwardMeanTerm,
                                           HalfSumOfSquares, EpsOutsideSqrt, OffsetTwice]


# -- mutants that write into their arguments (tests/test_input_mutation.py): right outputs, inputs written over --


def _writable(a) -> bool:
    """Whether ``a`` can be written in place: a non-empty array that is not a read-only view (a stride-0 dy)."""
    return isinstance(a, np.ndarray) and a.size > 0 and 0 not in a.strides  # the read-only flag: as tests/mutants.py


class ScalesInputInPlace(RmsKernel):
    """Scales x by its rstd in its own buffer to save one (x <- x*rstd, y = x*weight): y right, x lost."""

    name = "mutant-rms-scales-x-in-place"

    def rms_norm(self, x, normalized_shape, weight, eps):
        y = super().rms_norm(x, normalized_shape, weight, eps)
        if _writable(x):
            with np.errstate(all="ignore"):
                c32, r = self.statistics(x, normalized_shape, eps)
                x[...] = (c32 * r[:, None]).reshape(x.shape).astype(x.dtype)
        return y


class ScalesDyInPlace(RmsKernel):
    """Multiplies dy by weight in place (g = dy*weight, a buffer saved): gradients right, dy written over."""

    name = "mutant-rms-scales-dy-in-place"

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        out = super().rms_norm_backward(dy, x, normalized_shape, weight, eps)
        if weight is not None and _writable(dy):
            with np.errstate(all="ignore"):
                dy[...] = (np.asarray(dy, dtype=F32) * self.weights(weight).reshape(weight.shape)).astype(dy.dtype)
        return out
