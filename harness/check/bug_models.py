"""The known bug classes as models: LayerNorm (and RMSNorm) as each bug class of NUMERICS.md computes it, each a
:class:`Model` with one step wrong, written once (:mod:`normbench.check.hypotheses` matches a failing output
against them; ``tests/mutants.py`` builds its buggy kernels from them).

A :class:`Model` computes LayerNorm in small steps (statistics, rstd, normalization,
the statistics the backward reuses, dx); each hypothesis is a model with one step
wrong. A model computes RMSNorm too, on an RMSNorm case: the same steps
without the centring (``Model.centered``, from the case's operation). Each operation's
entry lists the hypotheses that apply to it (``normbench.core.operations``:
``Operation.hypotheses``).

A hypothesis computes in a correct kernel's accumulation precision (fp32; fp64 for fp64
inputs), as the buggy kernel would, unless its bug is about precision (half accumulation,
a float64 input computed in fp32): then in the precision the bug names. Hypotheses marked
``runtime`` describe a runtime (the Triton interpreter), not a kernel; they are tried
only for a backend whose ``runtime_note`` says it runs on one, and a match says that the
runtime, not the kernel, is at fault.
"""

from __future__ import annotations

import copy

import numpy as np

from normbench.check import oracle
from normbench.core import operations
from normbench.core.cases import Inputs
from normbench.core.dtypes import host_dtype

F64 = np.float64
F32 = np.float32


def row_mean(a: np.ndarray, acc) -> np.ndarray:
    """(M, 1) mean of each row of ``a`` accumulated in ``acc`` (zeros for no columns)."""
    if a.shape[1] == 0 or a.shape[0] == 0:
        return np.zeros((a.shape[0], 1), acc)
    return a.mean(axis=1, dtype=acc)[:, None]


def _heads_rows(terms: np.ndarray, groups: int) -> list[np.ndarray]:
    """(M, N) terms split by the weight row they sum into: all of them, or per head the rows ``r % G == g``
    (``oracle.group_sums``), in head order."""
    return [terms] if groups == 1 else [terms[g::groups] for g in range(groups)]


class Model:
    """A correct LayerNorm, in the steps a hypothesis may get wrong. ``acc`` is the numpy
    scalar type every step computes in; ``x`` arrives as (M, N) in ``acc``."""

    #: short key, unique in :data:`REGISTRY`
    key = "correct"
    #: NUMERICS.md's bug class(es), "#1", or "" for a bug outside its table
    bug_class = ""
    #: what it computes, completing "matches ..."
    says = "a correct LayerNorm"
    #: a runtime's behaviour, not a kernel's (tried only where ``Backend.runtime_note`` is set)
    runtime = False
    #: which outputs it changes (hypotheses are tried only for a failure of one of them)
    changes: frozenset[str] = frozenset({"y", "mean", "rstd", "dx", "dweight", "dbias"})
    #: whether the mean is subtracted: LayerNorm; :meth:`outputs` computes an RMSNorm case with it False
    centered = True

    def applies(self, dtype: str, hidden: int) -> bool:
        """Whether the bug can show on a case of ``dtype`` and row length ``hidden``."""
        return True

    def precision(self, dtype: str):
        """The numpy type the hypothesis computes in for inputs of ``dtype``: the accumulation
        precision of a correct kernel (fp32, fp64 for fp64 inputs), so that a bug whose damage
        depends on rounding (a cancellation, a NaN from a variance that should be 0) shows as it
        does in a kernel; a hypothesis about precision names its own."""
        return F64 if dtype == "float64" else F32

    def bound_dtype(self, dtype: str) -> str:
        """The dtype whose bound judges a match (the case's, unless the hypothesis is a precision)."""
        return dtype

    # -- the steps ------------------------------------------------------------------------
    def statistics(self, x, eps, acc):
        mean = x.mean(axis=1, dtype=acc) if x.shape[1] and self.centered else np.zeros(x.shape[0], acc)
        centered = x - mean[:, None]
        var = (centered * centered).mean(axis=1, dtype=acc)
        return mean, self.rstd(var, eps, acc)

    def rstd(self, var, eps, acc):
        return acc(1) / np.sqrt(var + acc(eps))

    def normalize(self, x, mean, rstd):
        return (x - mean[:, None]) * rstd[:, None]

    def saved(self, mean, rstd, dtype: str):
        """The statistics the backward reuses, as the forward stored them."""
        return mean, rstd

    def backward_statistics(self, x, eps, acc, dtype: str):
        return self.saved(*self.statistics(x, eps, acc), dtype)

    def mean_term(self, g, acc):
        """dx's mean(g) term: LayerNorm's; RMSNorm centres nothing, so it has none."""
        return row_mean(g, acc) if self.centered else acc(0)

    def input_grad(self, g, xhat, rstd, acc):
        """dx = rstd*(g - mean(g) - xhat*mean(g*xhat)), g = dy*weight (RMSNorm: no mean(g))."""
        return rstd[:, None] * (g - self.mean_term(g, acc) - xhat * row_mean(g * xhat, acc))

    def dx(self, g, x, mean, rstd, acc):
        return self.input_grad(g, self.normalize(x, mean, rstd), rstd, acc)

    def weight_grad(self, terms, dtype: str):
        """dweight from its (M, N) terms dy*xhat: the column sums (in the terms' precision)."""
        return terms.sum(axis=0)

    def bias_terms(self, dy, w):
        """The (M, N) terms whose column sums are dbias."""
        return dy

    # -- the whole computation, for explanations ------------------------------------------
    def outputs(self, inputs: Inputs, dy: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """y, mean, rstd (and with ``dy``: dx, dweight, dbias) as float64, rows (M, N), for the case's operation
        (an RMSNorm case: this model without the centring)."""
        model = self
        if operations.of(inputs.case.norm).centered != self.centered:
            model = copy.copy(self)
            model.centered = not self.centered
        return model.computed(inputs, dy)

    def computed(self, inputs: Inputs, dy: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """:meth:`outputs` with this model's own ``centered``."""
        case = inputs.case
        eps = case.eps_value
        acc = self.precision(case.dtype)
        n = case.hidden
        x = np.asarray(inputs.x, dtype=F64).reshape(-1, n)
        # (N,), or per head (M, N): oracle.weight_rows
        w = None if inputs.weight is None else oracle.weight_rows(inputs.weight, n, x.shape[0])
        groups = 1 if inputs.weight is None else np.size(inputs.weight) // n
        b = None if inputs.bias is None else np.asarray(inputs.bias, dtype=F64).reshape(-1)
        with np.errstate(all="ignore"):
            xa = x.astype(acc)
            mean, rstd = self.statistics(xa, eps, acc)
            y = np.asarray(self.normalize(xa, mean, rstd), dtype=F64)
            y = y * (1.0 if w is None else w) + (0.0 if b is None else b)
            smean, srstd = self.saved(mean, rstd, case.dtype)
            out = {"y": y, "mean": np.asarray(smean, F64)[:, None], "rstd": np.asarray(srstd, F64)[:, None]}
            if dy is None:
                return out
            dy64 = np.asarray(dy, dtype=F64).reshape(-1, n)
            bmean, brstd = self.backward_statistics(xa, eps, acc, case.dtype)
            g = dy64 * (1.0 if w is None else w)
            dx = self.dx(g.astype(acc), xa, np.asarray(bmean, acc), np.asarray(brstd, acc), acc)
            xhat = np.asarray(self.normalize(x, np.asarray(bmean, F64), np.asarray(brstd, F64)), dtype=F64)
            out.update(dx=np.asarray(dx, dtype=F64),
                       dweight=np.concatenate([np.asarray(self.weight_grad(terms, case.dtype), dtype=F64)
                                               for terms in _heads_rows(dy64 * xhat, groups)]),
                       dbias=self.bias_terms(dy64, np.ones(n) if w is None else w).sum(axis=0))
        return out


# -- the hypotheses: one bug each ----------------------------------------------------------------


#: what a bug in the variance or in eps's use changes: never the mean (nor dbias, a sum of dy alone), so such a
#: hypothesis is not tried on a failing mean, where it would "match" as well as a correct kernel does
VARIANCE_ONLY = frozenset({"y", "rstd", "dx", "dweight"})


class EpsFloat32(Model):
    key, bug_class, says = "eps-float32", "#13", "LayerNorm with eps rounded to float32"
    changes = VARIANCE_ONLY

    def applies(self, dtype, hidden):
        return dtype == "float64"

    def rstd(self, var, eps, acc):
        return acc(1) / np.sqrt(var + acc(F32(eps)))


class OnePassVariance(Model):
    key, bug_class = "one-pass-variance", "#1"
    says = "a one-pass variance E[x^2] - E[x]^2 (clamped at 0)"
    changes = VARIANCE_ONLY

    def statistics(self, x, eps, acc):
        mean = x.mean(axis=1, dtype=acc)
        var = np.maximum((x * x).mean(axis=1, dtype=acc) - mean * mean, acc(0))
        return mean, self.rstd(var, eps, acc)


class OnePassNegativeVariance(OnePassVariance):
    key, bug_class = "one-pass-negative-variance", "#2"
    says = "a one-pass variance E[x^2] - E[x]^2 without a clamp (a negative variance reaches rsqrt: NaN)"

    def statistics(self, x, eps, acc):
        mean = x.mean(axis=1, dtype=acc)
        return mean, self.rstd((x * x).mean(axis=1, dtype=acc) - mean * mean, eps, acc)


class VarianceFloor(Model):
    key, bug_class, says = "variance-floor", "#3", "LayerNorm with the variance floored at 1e-5"
    changes = VARIANCE_ONLY

    def rstd(self, var, eps, acc):
        return super().rstd(np.maximum(var, acc(1e-5)), eps, acc)


class HalfAccumulation(Model):
    key, bug_class = "half-accumulation", "#4"
    says = "statistics accumulated in the input dtype (half precision), not fp32"

    def applies(self, dtype, hidden):
        return dtype in ("float16", "bfloat16")

    def precision(self, dtype):
        return host_dtype(dtype).type

    def statistics(self, x, eps, acc):
        mean, rstd = super().statistics(x, eps, acc)
        return mean.astype(F32), rstd.astype(F32)

    def rstd(self, var, eps, acc):
        return F32(1) / np.sqrt(var.astype(F32) + F32(eps))


class SequentialMean(Model):
    key, bug_class = "sequential-mean", "#4"
    says = "a mean summed sequentially in fp32 (error growing as N, not sqrt(N))"

    def applies(self, dtype, hidden):
        return dtype != "float64" and hidden > 64

    def precision(self, dtype):
        return F32

    def statistics(self, x, eps, acc):
        n = x.shape[1]
        mean = (np.cumsum(x, axis=1, dtype=acc)[:, -1] / acc(n)).astype(acc) if n else np.zeros(x.shape[0], acc)
        centered = x - mean[:, None]
        return mean, self.rstd((centered * centered).mean(axis=1, dtype=acc), eps, acc)


class LanesSequential(Model):
    """Sums (the mean's, and the variance's or mean square's) accumulated in ``lanes`` fp32 lanes, each lane adding
    its elements one after another (lane j: x[j], x[j + lanes], ...), the lanes then combined: a vectorized CPU
    loop, or a warp whose threads each stride over the row. Its error grows as N/lanes, not sqrt(N): at a few
    lanes it fails large rows outright; at many it sits near the bound, where a failure of 1.1-1.5x is this
    summation order rather than a wrong formula."""

    bug_class = "#4"
    lanes = 8

    def __init__(self, lanes: int = 8) -> None:
        self.lanes = lanes
        self.key = f"lanes-sequential-{lanes}"
        self.says = (f"sums accumulated in {lanes} fp32 lanes, each lane's elements one after another (error "
                     f"growing as N/{lanes}, not sqrt(N))" if lanes > 1 else
                     "sums accumulated in one fp32 accumulator, element after element (a plain loop: error growing as "
                     "N, not sqrt(N))")

    def applies(self, dtype, hidden):
        return dtype != "float64" and hidden > 16 * self.lanes

    def precision(self, dtype):
        return F32

    def lane_sum(self, a, acc):
        """Each row's sum: ``lanes`` sequential partial sums (zeros pad the last round), then their sum."""
        m, n = a.shape
        if m == 0:
            return np.zeros(0, acc)
        padded = np.zeros((m, -(-n // self.lanes) * self.lanes), acc)
        padded[:, :n] = a
        partial = np.cumsum(padded.reshape(m, -1, self.lanes), axis=1, dtype=acc)[:, -1, :]
        return partial.sum(axis=1, dtype=acc)

    def statistics(self, x, eps, acc):
        n = x.shape[1]
        if n == 0:
            return super().statistics(x, eps, acc)
        mean = (self.lane_sum(x, acc) / acc(n)).astype(acc) if self.centered else np.zeros(x.shape[0], acc)
        centered = x - mean[:, None]
        return mean, self.rstd((self.lane_sum(centered * centered, acc) / acc(n)).astype(acc), eps, acc)


class PaddedLanes(Model):
    key, bug_class = "padded-lanes", "#5"
    says = "padded lanes counted: the row padded with zeros to a power of two enters the variance"
    changes = VARIANCE_ONLY

    def applies(self, dtype, hidden):
        return hidden & (hidden - 1) != 0

    def statistics(self, x, eps, acc):
        n = x.shape[1]
        block = 1 << max(n - 1, 0).bit_length()
        padded = np.zeros((x.shape[0], block), acc)
        padded[:, :n] = x
        mean = padded.sum(axis=1, dtype=acc) / acc(n) if self.centered else np.zeros(x.shape[0], acc)
        centered = padded - mean[:, None]
        return mean, self.rstd((centered * centered).sum(axis=1, dtype=acc) / acc(n), eps, acc)


class EpsOutsideSqrt(Model):
    key, bug_class, says = "eps-outside-sqrt", "#11", "eps outside the square root, 1/(sqrt(var) + eps)"
    changes = VARIANCE_ONLY

    def rstd(self, var, eps, acc):
        return acc(1) / (np.sqrt(var) + acc(eps))


class BesselCorrection(Model):
    key, bug_class, says = "bessel", "#12", "Bessel's correction, the variance divided by N - 1"
    changes = VARIANCE_ONLY

    def applies(self, dtype, hidden):
        return hidden > 1

    def statistics(self, x, eps, acc):
        n = x.shape[1]
        mean = x.mean(axis=1, dtype=acc)
        centered = x - mean[:, None]
        return mean, self.rstd((centered * centered).sum(axis=1, dtype=acc) / acc(n - 1), eps, acc)


class EpsIgnored(Model):
    key, bug_class, says = "eps-ignored", "#13", "eps ignored (eps = 0)"
    changes = VARIANCE_ONLY

    def rstd(self, var, eps, acc):
        return super().rstd(var, 0.0, acc)


class EpsFixed(Model):
    key, bug_class, says = "eps-fixed", "#13", "the caller's eps not propagated (a default eps = 1e-5 used)"
    changes = VARIANCE_ONLY

    def rstd(self, var, eps, acc):
        return super().rstd(var, 1e-5, acc)


class SingleElementIdentity(Model):
    key, bug_class, says = "n1-identity", "#14", "N = 1 special-cased as y = x*weight + bias"

    def applies(self, dtype, hidden):
        return hidden == 1

    def normalize(self, x, mean, rstd):
        return x if x.shape[1] == 1 else super().normalize(x, mean, rstd)


class Float64InFloat32(Model):
    key, bug_class, says = "float64-in-float32", "#15", "float64 data computed in float32"
    changes = frozenset({"y", "mean", "rstd", "dx", "dweight"})

    def applies(self, dtype, hidden):
        return dtype == "float64"

    def precision(self, dtype):
        return F32

    def bound_dtype(self, dtype):
        return "float32"


class SavedStatisticsInInputDtype(Model):
    key, bug_class = "saved-statistics-input-dtype", "#17"
    says = "mean and rstd stored in the input dtype (half precision), not fp32, and reused by the backward"
    changes = frozenset({"mean", "rstd", "dx", "dweight"})

    def applies(self, dtype, hidden):
        return dtype in ("float16", "bfloat16")

    def saved(self, mean, rstd, dtype):
        half = host_dtype(dtype)
        return mean.astype(half).astype(mean.dtype), rstd.astype(half).astype(rstd.dtype)


class BackwardRstdWithoutEps(Model):
    key, bug_class, says = "backward-rstd-without-eps", "#17", "a backward that recomputes rstd without eps"
    changes = frozenset({"dx", "dweight"})

    def backward_statistics(self, x, eps, acc, dtype):
        return self.saved(*self.statistics(x, 0.0, acc), dtype)


class ExpandedDx(Model):
    key, bug_class = "dx-expanded", "#7"
    says = ("dx in the expanded form rstd*g + c2*x + c3 in fp32 (sums over x, not x - mean: "
            "cancels at large row means)")
    changes = frozenset({"dx"})

    def dx(self, g, x, mean, rstd, acc):
        n = acc(x.shape[1])
        ds = (g * x).sum(axis=1, dtype=acc)
        db = g.sum(axis=1, dtype=acc)
        c2 = (db * mean - ds) * rstd * rstd * rstd / n
        c3 = -c2 * mean - db * rstd / n
        return rstd[:, None] * g + c2[:, None] * x + c3[:, None]


class NoMeanTerm(Model):
    key, bug_class, says = "dx-no-mean-term", "#7", "dx without the mean(dy*weight) term"
    changes = frozenset({"dx"})

    def input_grad(self, g, xhat, rstd, acc):
        return rstd[:, None] * (g - xhat * row_mean(g * xhat, acc))


class MeanTermTwice(Model):
    key, bug_class, says = "dx-mean-twice", "#7", "dx with the mean(dy*weight) term subtracted twice"
    changes = frozenset({"dx"})

    def input_grad(self, g, xhat, rstd, acc):
        return super().input_grad(g, xhat, rstd, acc) - rstd[:, None] * row_mean(g, acc)


class NoProjection(Model):
    key, bug_class, says = "dx-no-projection", "#7", "dx without the xhat*mean(dy*weight*xhat) projection"
    changes = frozenset({"dx"})

    def input_grad(self, g, xhat, rstd, acc):
        return rstd[:, None] * (g - self.mean_term(g, acc))


class DbiasTimesWeight(Model):
    key, bug_class, says = "dbias-times-weight", "#8", "dbias computed as sum(dy*weight)"
    changes = frozenset({"dbias"})

    def bias_terms(self, dy, w):
        return dy * w


class DbiasSevered(Model):
    key, bug_class, says = "dbias-severed", "#8", "the bias gradient severed (zeros, not sum(dy))"
    changes = frozenset({"dbias"})

    def bias_terms(self, dy, w):
        return np.zeros_like(dy)


class DweightLastBlockDropped(Model):
    key, bug_class = "dweight-last-block", "#6"
    says = "dweight reduced over blocks of 256 rows with the last partial block dropped"
    changes = frozenset({"dweight"})
    BLOCK = 256

    def weight_grad(self, terms, dtype):
        return terms[: (terms.shape[0] // self.BLOCK) * self.BLOCK].sum(axis=0)


class DweightHalfAccumulation(Model):
    key, bug_class = "dweight-half-accumulation", "#4, #6"
    says = "dweight accumulated row by row in the input dtype (half precision)"
    changes = frozenset({"dweight"})

    def applies(self, dtype, hidden):
        return dtype in ("float16", "bfloat16")

    def weight_grad(self, terms, dtype):
        half = host_dtype(dtype)
        rounded = terms.astype(half)
        total = np.zeros(terms.shape[1], half)
        for row in rounded:
            total = (total + row).astype(half)
        return total.astype(F32)


class InterpreterBf16Truncation(Model):
    key, bug_class, runtime = "interpreter-bf16-truncation", "", True
    says = ("a correct LayerNorm whose bfloat16 steps (xhat, weight*xhat, + bias, and dx) are converted from fp32 "
            "by truncation, as the Triton interpreter converts (0.57 -> 0.56640625, where a GPU rounds to nearest "
            "even, 0.5703125)")
    changes = frozenset({"y", "dx"})

    def applies(self, dtype, hidden):
        return dtype == "bfloat16"

    def computed(self, inputs, dy=None):
        out = super().computed(inputs, dy)
        case, n = inputs.case, inputs.case.hidden
        x = np.asarray(inputs.x, dtype=F32).reshape(-1, n)
        with np.errstate(all="ignore"):
            mean, rstd = self.statistics(x, case.eps_value, F32)
            y = truncate_to_bfloat16(self.normalize(x, mean, rstd))
            if inputs.weight is not None:
                y = truncate_to_bfloat16(y * oracle.weight_rows(inputs.weight, n, x.shape[0]))
            if inputs.bias is not None:
                y = truncate_to_bfloat16(y + np.asarray(inputs.bias, F64).reshape(-1))
        out["y"] = y
        if "dx" in out:
            out["dx"] = truncate_to_bfloat16(out["dx"])
        return out


def truncate_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float64 values through fp32, then to bfloat16 by truncating the low 16 bits (toward 0).

    >>> float(truncate_to_bfloat16(np.array([0.57]))[0])  # rounding to nearest even gives 0.5703125
    0.56640625
    """
    bits = np.asarray(values, dtype=F64).astype(F32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(F32).astype(F64)


#: every hypothesis, in the order a failure lists ties
#: the lane counts tried for :class:`LanesSequential`: a plain loop (1), a SIMD register of fp32 (4, 8), a warp (32)
LANE_COUNTS = (1, 4, 8, 32)
REGISTRY: tuple[Model, ...] = tuple(cls() for cls in (
    EpsFloat32, OnePassVariance, OnePassNegativeVariance, VarianceFloor, HalfAccumulation, SequentialMean)) + tuple(
    LanesSequential(k) for k in LANE_COUNTS) + tuple(cls() for cls in (
    PaddedLanes, EpsOutsideSqrt, BesselCorrection, EpsIgnored, EpsFixed, SingleElementIdentity,
    Float64InFloat32, SavedStatisticsInInputDtype, BackwardRstdWithoutEps, ExpandedDx, NoMeanTerm,
    MeanTermTwice, NoProjection, DbiasTimesWeight, DbiasSevered, DweightLastBlockDropped, DweightHalfAccumulation,
    InterpreterBf16Truncation))
CORRECT = Model()
BY_KEY: dict[str, Model] = {h.key: h for h in REGISTRY}
assert len(BY_KEY) == len(REGISTRY), "hypothesis keys must be unique"
assert all(key in BY_KEY for op in operations.OPERATIONS for key in op.hypotheses), "an operation names an unknown hypothesis"
