"""Correct kernels that round differently, and mutants with coherent errors (issue 15).

Each is the NumPy reference backend (``impls/numpy_ref.py``) with its forward replaced by a
kernel written step by step, as a GPU kernel computes: statistics in the accumulation
precision (fp32; fp64 for fp64 inputs, or fp64 where the variant says so), then the
normalization and the affine, then one conversion to the output dtype. The correct variants
must pass ``normbench.check.coherence`` on every case; the mutants must fail it.

* correct: two-pass (pairwise sums), Welford, fp64 statistics, chunked sequential sums,
  reversed order, xhat rounded to the storage dtype before the affine (and w*xhat rounded
  too), the folded affine ``x*A + C`` (A = w*rstd, C = b - mean*A), fused multiply-adds
  (fp64 product and sum, rounded once to fp32);
* mutants: rstd rounded to the storage dtype before it is applied (bf16, fp16); the
  output converted toward zero, or down (bf16, fp16, and fp32 from an fp64 computation).
"""

from __future__ import annotations

import numpy as np

from normbench.check.coherence import round_directed
from normbench.core.dtypes import dtype_name
from normbench.impls.numpy_ref import NumpyBackend

F32, F64 = np.float32, np.float64


def _pairwise_mean(a, acc):
    return a.sum(axis=1, dtype=acc) / acc(a.shape[1])


def _chunked_mean(a, acc, chunk=256):
    """Sequential within chunks of ``chunk`` columns (a thread's loop), then the chunks summed in order."""
    n = a.shape[1]
    parts = [np.add.accumulate(a[:, i:i + chunk], axis=1, dtype=acc)[:, -1] for i in range(0, n, chunk)]
    total = parts[0]
    for p in parts[1:]:
        total = (total + p).astype(acc)
    return total / acc(n)


def _reversed_mean(a, acc):
    return a[:, ::-1].sum(axis=1, dtype=acc) / acc(a.shape[1])


def _welford(a, acc):
    """Welford's update column by column (vectorized over rows), in ``acc``."""
    m, n = a.shape
    mean = np.zeros(m, acc)
    m2 = np.zeros(m, acc)
    for j in range(n):
        xj = a[:, j]
        delta = (xj - mean).astype(acc)
        mean = (mean + delta / acc(j + 1)).astype(acc)
        m2 = (m2 + delta * (xj - mean)).astype(acc)
    return mean, m2 / acc(n)


class Variant(NumpyBackend):
    """A step-by-step kernel; the class attributes pick the variant."""

    name = "coherence-two-pass"
    description = "correct: two-pass fp32 statistics (pairwise sums), one rounding of y"
    correct = True
    dtypes = ("float64", "float32", "float16", "bfloat16")
    #: "pairwise", "chunked", "reversed", "welford"
    statistics_order = "pairwise"
    #: accumulate in fp64 even for narrower inputs
    fp64_statistics = False
    #: "plain" ((x - mean)*rstd*w + b), "xhat-rounded", "folded", "fma"
    affine = "plain"
    #: compute everything in fp64 (then the output conversion is the only rounding)
    fp64_compute = False
    #: rstd rounded to the storage dtype before it is applied
    rstd_rounded = False
    #: the output conversion: "nearest", "toward-zero", "downward"
    rounding = "nearest"

    def acc(self, dtype: str):
        return F64 if dtype == "float64" or self.fp64_statistics or self.fp64_compute else F32

    def statistics(self, x, eps, acc):
        if x.shape[1] == 0 or x.shape[0] == 0:
            return np.zeros(x.shape[0], acc), np.zeros(x.shape[0], acc)
        if self.statistics_order == "welford":
            mean, var = _welford(x, acc)
        else:
            mean_of = {"pairwise": _pairwise_mean, "chunked": _chunked_mean, "reversed": _reversed_mean}[
                self.statistics_order]
            mean = mean_of(x, acc)
            centered = (x - mean[:, None]).astype(acc)
            var = mean_of(centered * centered, acc)
        rstd = (acc(1) / np.sqrt((var + acc(eps)).astype(acc))).astype(acc)
        return mean.astype(acc), rstd

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        x = np.asarray(x)
        dtype = dtype_name(x.dtype)
        n = int(np.prod(normalized_shape))
        acc = self.acc(dtype)
        work = F64 if self.fp64_compute or dtype == "float64" else F32
        with np.errstate(all="ignore"):
            xs = x.astype(acc).reshape(-1, n)
            mean, rstd = self.statistics(xs, eps, acc)
            mean, rstd = mean.astype(work)[:, None], rstd.astype(work)[:, None]
            if self.rstd_rounded:
                rstd = rstd.astype(x.dtype).astype(work)
            xw = xs.astype(work)
            w = np.ones(n, work) if weight is None else np.asarray(weight).astype(work).reshape(n)
            b = np.zeros(n, work) if bias is None else np.asarray(bias).astype(work).reshape(n)
            if self.affine == "folded":
                scale = (w * rstd).astype(work)
                shift = (b - (mean * scale).astype(work)).astype(work)
                y = (xw * scale).astype(work) + shift
            elif self.affine == "fma":
                scale = (w * rstd).astype(work)
                shift = (b - (mean * scale).astype(work)).astype(work)
                y = (xw.astype(F64) * scale.astype(F64) + shift.astype(F64)).astype(work)  # one rounding
            else:
                xhat = ((xw - mean).astype(work) * rstd).astype(work)
                if self.affine == "xhat-rounded":
                    xhat = xhat.astype(x.dtype).astype(work)
                    y = (xhat * w).astype(x.dtype).astype(work) + b
                else:
                    y = (xhat * w).astype(work) + b
            y = y.astype(work).reshape(x.shape)
            if self.rounding == "nearest":
                return y.astype(x.dtype)
            return round_directed(y.astype(F64), dtype, self.rounding).astype(x.dtype)


def _variant(cls_name: str, name: str, description: str, **attrs) -> type[Variant]:
    return type(cls_name, (Variant,), {"name": name, "description": description, **attrs})


TWO_PASS = Variant
WELFORD = _variant("Welford", "coherence-welford", "correct: Welford statistics in fp32", statistics_order="welford")
FP64_STATISTICS = _variant("Fp64Statistics", "coherence-fp64-statistics", "correct: statistics in fp64, the rest in fp32",
                           fp64_statistics=True)
CHUNKED = _variant("Chunked", "coherence-chunked", "correct: sums sequential in chunks of 256, then in order",
                   statistics_order="chunked")
REVERSED = _variant("Reversed", "coherence-reversed", "correct: pairwise sums over the reversed row",
                    statistics_order="reversed")
XHAT_ROUNDED = _variant("XhatRounded", "coherence-xhat-rounded",
                        "correct: xhat and w*xhat rounded to the storage dtype before the affine's next step",
                        affine="xhat-rounded")
FOLDED = _variant("Folded", "coherence-folded", "correct: the folded affine x*A + C in fp32", affine="folded")
FMA = _variant("Fma", "coherence-fma", "correct: the folded affine as one fused multiply-add (fp64, rounded once)",
               affine="fma")
WELFORD_FOLDED = _variant("WelfordFolded", "coherence-welford-folded", "correct: Welford and the folded affine",
                          statistics_order="welford", affine="folded")

CORRECT = [TWO_PASS, WELFORD, FP64_STATISTICS, CHUNKED, REVERSED, XHAT_ROUNDED, FOLDED, FMA, WELFORD_FOLDED]

RSTD_ROUNDED = _variant("RstdRounded", "coherence-mutant-rstd-rounded",
                        "bug: fp32 statistics, rstd cast to the storage dtype and then applied",
                        rstd_rounded=True, correct=False, dtypes=("float16", "bfloat16"))
TRUNCATED = _variant("Truncated", "coherence-mutant-truncated", "bug: the output converted toward zero",
                     rounding="toward-zero", correct=False, dtypes=("float16", "bfloat16"))
FLOORED = _variant("Floored", "coherence-mutant-floored", "bug: the output converted downward (floor)",
                   rounding="downward", correct=False, dtypes=("float16", "bfloat16"))
TRUNCATED_FP32 = _variant("TruncatedFp32", "coherence-mutant-truncated-fp32",
                          "bug: an fp64 computation converted to fp32 toward zero", rounding="toward-zero",
                          fp64_compute=True, correct=False, dtypes=("float32",))
FLOORED_FP32 = _variant("FlooredFp32", "coherence-mutant-floored-fp32",
                        "bug: an fp64 computation converted to fp32 downward", rounding="downward",
                        fp64_compute=True, correct=False, dtypes=("float32",))

MUTANTS = [RSTD_ROUNDED, TRUNCATED, FLOORED, TRUNCATED_FP32, FLOORED_FP32]


# -- backward -------------------------------------------------------------------------------
#
# Built on ``tests/mutants.py``'s ``Fp32Kernel`` (fp32 two-pass statistics, xhat recomputed in
# fp32): ``BackwardVariant`` replaces its backward with dx = r*(g - mean(g) - xhat*mean(g*xhat))
# written in several correct ways, and the mutants change one step.

from tests.mutants import Fp32Kernel  # noqa: E402  (the backward half only needs it)


def _mean_in(a, acc, order):
    if a.shape[1] == 0:
        return np.zeros((a.shape[0], 1), acc)
    mean_of = {"pairwise": _pairwise_mean, "chunked": _chunked_mean, "reversed": _reversed_mean}[order]
    return mean_of(a, acc)[:, None].astype(acc)


def _convert(v, dtype_like, rounding):
    """``v`` (fp32 or fp64) converted to ``dtype_like``'s dtype: to nearest, toward zero, or down."""
    if rounding == "nearest":
        return np.asarray(v).astype(dtype_like)
    return round_directed(np.asarray(v, dtype=F64), dtype_name(np.dtype(dtype_like)), rounding).astype(dtype_like)


class BackwardVariant(Fp32Kernel):
    """A step-by-step backward; the class attributes pick the variant (the forward is Fp32Kernel's)."""

    name = "coherence-bwd-closed"
    description = "correct: dx = r*(g - mean(g) - xhat*mean(g*xhat)) in fp32, pairwise sums"
    correct = True
    #: the sums' order: "pairwise", "chunked", "reversed"
    sums = "pairwise"
    #: "closed" (as above), "triton" ((g - (xhat*c1 + c2))*r), "folded" (r*g - r*mean(g) - (r*mean(g*xhat))*xhat),
    #: "fma" (the closed form in fp64 from the fp32 means, rounded once to fp32), "fp64" (all in fp64, one rounding
    #: to the output dtype)
    form = "closed"
    #: the conversion of dx, and of dweight and dbias, to their dtypes
    dx_rounding = "nearest"
    param_rounding = "nearest"
    #: dx's final multiplier rstd rounded to x's dtype (xhat and the means from the fp32 rstd)
    rstd_multiplier_rounded = False

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.backward_statistics(x32, eps, x)
            work = F64 if self.form == "fp64" else F32
            r = rstd.astype(work)[:, None]
            xhat = ((x32.astype(work) - mean.astype(work)[:, None]) * r).astype(work)
            dy_w = self.read(dy, normalized_shape).astype(work)
            w = None if weight is None else np.asarray(weight).astype(work).reshape(-1)
            g = (dy_w * w).astype(work) if w is not None else dy_w
            mg = _mean_in(g, work, self.sums)
            mgx = _mean_in((g * xhat).astype(work), work, self.sums)
            if self.rstd_multiplier_rounded:
                r = r.astype(np.asarray(x).dtype).astype(work)
            if self.form == "triton":
                dx = ((g - (xhat * mgx + mg).astype(work)).astype(work) * r).astype(work)
            elif self.form == "folded":
                dx = ((r * g).astype(work) - (r * mg).astype(work) - ((r * mgx).astype(work) * xhat)).astype(work)
            elif self.form == "fma":
                dx = (r.astype(F64) * (g.astype(F64) - mg.astype(F64) - xhat.astype(F64) * mgx.astype(F64))).astype(F32)
            else:
                dx = (r * ((g - mg).astype(work) - (xhat * mgx).astype(work)).astype(work)).astype(work)
            dx = _convert(dx.reshape(np.shape(x)), np.asarray(x).dtype, self.dx_rounding)
            dw = db = None
            if weight is not None:
                dw = _convert((dy_w * xhat).sum(axis=0, dtype=work).reshape(np.shape(weight)), np.asarray(weight).dtype,
                              self.param_rounding)
            if bias is not None:
                db = _convert(dy_w.sum(axis=0, dtype=work).reshape(np.shape(bias)), np.asarray(bias).dtype,
                              self.param_rounding)
            return dx, dw, db


def _backward_variant(cls_name: str, name: str, description: str, **attrs) -> type[BackwardVariant]:
    return type(cls_name, (BackwardVariant,), {"name": name, "description": description, **attrs})


BWD_CLOSED = BackwardVariant
BWD_REVERSED = _backward_variant("BwdReversed", "coherence-bwd-reversed", "correct: the closed form, sums reversed",
                                 sums="reversed")
BWD_CHUNKED = _backward_variant("BwdChunked", "coherence-bwd-chunked",
                                "correct: the closed form, sums sequential in chunks of 256", sums="chunked")
BWD_TRITON = _backward_variant("BwdTriton", "coherence-bwd-triton",
                               "correct: dx = (g - (xhat*mean(g*xhat) + mean(g)))*r (the Triton tutorial's order)",
                               form="triton")
BWD_FOLDED = _backward_variant("BwdFolded", "coherence-bwd-folded",
                               "correct: dx = r*g - r*mean(g) - (r*mean(g*xhat))*xhat", form="folded")
BWD_FMA = _backward_variant("BwdFma", "coherence-bwd-fma",
                            "correct: the closed form in fp64 from fp32 terms, rounded once to fp32", form="fma")
BWD_FP64 = _backward_variant("BwdFp64", "coherence-bwd-fp64",
                             "correct: the backward in fp64 from fp32 statistics, one rounding to the output dtype",
                             form="fp64")


class BwdControl(Fp32Kernel):
    """tests/mutants.py's control kernel, unchanged: its backward must pass too."""

    name = "coherence-bwd-control"
    correct = True


BACKWARD_CORRECT = [BwdControl, BWD_CLOSED, BWD_REVERSED, BWD_CHUNKED, BWD_TRITON, BWD_FOLDED, BWD_FMA, BWD_FP64]

_HALVES = ("float16", "bfloat16")
BWD_RSTD_ROUNDED = _backward_variant("BwdRstdRounded", "coherence-mutant-bwd-rstd-rounded",
                                     "bug: dx's multiplier rstd cast to the storage dtype (fp32 statistics)",
                                     rstd_multiplier_rounded=True, correct=False, dtypes=_HALVES)
BWD_DX_TRUNCATED = _backward_variant("BwdDxTruncated", "coherence-mutant-dx-truncated",
                                     "bug: dx converted toward zero", dx_rounding="toward-zero", correct=False,
                                     dtypes=_HALVES)
BWD_DX_FLOORED = _backward_variant("BwdDxFloored", "coherence-mutant-dx-floored", "bug: dx converted downward",
                                   dx_rounding="downward", correct=False, dtypes=_HALVES)
BWD_PARAMS_TRUNCATED = _backward_variant("BwdParamsTruncated", "coherence-mutant-dparams-truncated",
                                         "bug: dweight and dbias converted toward zero",
                                         param_rounding="toward-zero", correct=False, dtypes=_HALVES)
BWD_PARAMS_FLOORED = _backward_variant("BwdParamsFloored", "coherence-mutant-dparams-floored",
                                       "bug: dweight and dbias converted downward", param_rounding="downward",
                                       correct=False, dtypes=_HALVES)
BACKWARD_MUTANTS = [BWD_RSTD_ROUNDED, BWD_DX_TRUNCATED, BWD_DX_FLOORED, BWD_PARAMS_TRUNCATED, BWD_PARAMS_FLOORED]
