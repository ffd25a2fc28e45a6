"""Coherence: the structure of the signed error, which a per-element bound cannot see.

The forward bound (``error_model.forward_bound``) judges each element on its own. Two
real bug classes keep every element inside it and still do damage, because their errors
all point the same way:

* **a row's scale rounded to the storage dtype** (fp32 statistics, but rstd cast to
  bf16/fp16 and then applied): every element of row i carries the same relative error
  ``delta_i = half(rstd_i)/rstd_i - 1`` on ``w*xhat``, up to u_out;
* **the wrong rounding mode for the output** (fp32 -> half conversion that truncates
  toward zero, or floors): every element is biased the same way, by half an ulp on average.

This module measures that structure from the outputs the suites already have, and says
how far a correct round-to-nearest kernel can go. The derivation is here; the error
model's docstring points to it.

coherence: the signed error's structure
---------------------------------------

Write ``e = y - y_ref`` (float64) on one row, ``a = w*xhat`` and ``w`` (ones without a
weight), all from the oracle. A correct kernel's error is the sum of

1. **Shared errors of the statistics.** The row's computed mean and rstd each carry one
   error shared by the whole row: rstd's relative error ``rho`` adds ``rho*a`` (along a:
   a *scale*), the mean's error ``dmu`` adds ``-dmu*rstd*w`` (along w: an *offset*). Their
   sizes are bounded by ``error_model.rstd_bound`` (relative) and ``error_model.mean_bound``.
2. **Per-element roundings,** each to nearest (ties to even), each bounded: the output's
   (``ulp_y/2``), a product ``w*xhat`` rounded to the storage dtype (``ulp(a)/2``), and
   the accumulation precision's own few roundings of ``x - mean``, ``*rstd``, ``*w``,
   ``+b`` (or the folded ``x*A + C``), ``m_acc = 2*u_acc*((|x| + |mean|)*rstd*|w| + |a| + |b|)``.
   Within a row, the operands of these roundings differ element by element (w and b are
   per-column, x is random), so their errors are modelled as independent and zero-mean,
   each in ``[-m, m]``.
3. **Rounding of a lattice.** Not every rounding is independent. x lies on its dtype's
   grid; when a kernel rounds ``xhat`` itself to the storage dtype before the affine (a
   legitimate order), ``xhat = (x - mean)*rstd`` takes values on a lattice of spacing
   ``spacing(x)*rstd``, and the rounding errors of a lattice are a shared function of
   xhat, not independent: on bf16 inputs at mean 3 the lattice spacing is about two bf16
   ulps of xhat, the errors drift slowly along the row, and their projection on ``a`` does
   not shrink with N (about as large as the rstd bug). Likewise, a row whose y_ref takes
   few distinct values (no weight, x on a coarse grid) rounds them all alike. And across
   rows, w and b are the same in a column: a kernel that rounds xhat, ``w*xhat`` and the sum
   with b each to the storage dtype (MLX's CPU LayerNorm does) adds the bf16 values ``w*xhat``
   and b, whose sum falls on a lattice set by the column's b, so its last rounding has a mean
   per column (-0.09 to +0.11 ulp over 65537 rows of N = 8 at mean 3), not over the elements.
   This part is deterministic, so it is *computed*, not modelled: ``p_xhat = w*(rn(xhat) - xhat)``,
   ``p_y = rn(y_ref) - y_ref`` and ``p_chain = rn(rn(w*rn(xhat)) + b) - y_ref``, with rn()
   round-to-nearest to the output dtype.

Every statistic below is linear in e, ``S = sum_j h_j*e_j`` for a weight vector h built
from the reference alone, so a correct kernel's S is bounded by

    |S| <= shared(S) + |h.p_xhat| + |h.p_y| + Z*sqrt(sum_j h_j^2*m_j^2)

(plus ``|h.p_chain|`` for the per-case rounding bias, the one statistic that sums over rows, where a
column's constant w and b repeat; within a row they differ element by element, and adding it to the
per-row statistics would cost them the rstd bug on some seeds)

with ``m_j^2 = (ulp_y/2)^2 + (ulp(a)/2)^2 + m_acc^2`` (Hoeffding's inequality for a sum of
independent zero-mean terms bounded by ``|h_j|*m_j``: ``P(|sum| > t) <= 2*exp(-t^2/(2*sum h^2 m^2))``),
and ``Z = sqrt(2*ln(2/p)) = 6.54`` for ``p = 1e-9`` per statistic. This is the *allowance*;
a statistic fails only beyond it. The lattice terms are taken at their computed value (plus
the independent term, which also covers the few elements that a correct kernel's own
fp32 value rounds across a tie the reference does not).

**Scale (per row, bf16 and fp16 outputs).** Least squares of e on ``[a, w]`` per row: the
coefficient on a, ``s = h_s.e`` with ``h_s`` orthogonal to w (the mean's shared error does
not enter) and ``h_s.a = 1`` (rstd's relative error enters exactly: ``shared(s) =
rstd_bound/rstd``). The rstd bug gives ``s = delta_i`` (predicted from the reference:
``rn(rstd)/rstd - 1``), up to ``u_out``. Reported in ulps: ``s/(2*u_out)``. Not applied on
fp32 and fp64 outputs: there the statistics' own storage (an fp32 rstd) legitimately
carries that relative error. A row with fewer than 16 elements, or with xhat ~ 0 (a
constant row), has no scale to test. A row whose allowance exceeds u_out has no power
(its largest rstd-rounding error would pass) and cannot fail.

**Scale across rows (bf16 and fp16).** Rows too short for the per-row test (1025 rows of 33)
still carry the bug in aggregate. The slope of the fitted scales on the prediction,
``beta = sum_i c_i*s_i`` with ``c_i = delta_i/sum(delta^2)``, is again linear in e (weights
``c_i*h_s``), so its allowance is ``sum|c_i|*rstd_bound_i/rstd_i`` + the computed lattice terms +
Z x Hoeffding. The bug gives beta = 1; a correct kernel's scales (lattice included) do not
follow the prediction. Applies when the allowance is below 0.5.

**Offset (per row).** The coefficient on w of the same fit, ``o = h_o.e``, ``h_o.w = 1``,
``h_o.a = 0``: a common shift of the row (the mean's direction); ``shared(o) =
2*mean_bound*rstd``: the forward bound allows the centering's shared error up to
``k(N)*u_acc*(|x| + mean|x|)*rstd``, twice the mean's own bound at ``|x| = mean|x|``, and this
test must not be stricter than the bound (a sequential fp32 Welford mean at 1e3 comes to 1.04x
of the mean's bound alone). Reported in ulps of the output at ``|w| = rms(w)``.

**Rounding bias (per case, every dtype).** The weighted mean of the signed error in units
of the output's ulp at y_ref, after each row's fitted scale and offset are removed (so the
statistics' shared errors, which are legitimately coherent, cannot enter: ``shared = 0``):
``B = sum_j g_j*e_j`` with ``g = (I - P_row) v``, ``v_j = omega_j*sign_j/ulp_j/sum(omega)``,
``omega_j = 1/m_j^2`` (in ulps: elements dominated by the output rounding weigh most), and
``sign_j = sign(y_ref_j)`` for the bias *toward zero* (truncation: about -0.5 ulp) or 1 for
the bias *downward* (floor: about -0.5 ulp). Round to nearest has mean 0 for operands whose
low bits are random, and the lattice part is computed as above. Rows with a non-finite
value, or fewer than 4 elements, are left out; the statistic applies when its allowance is
below 0.25 ulp (half of what truncation shows) and is skipped otherwise (too few elements).
On fp32 outputs the accumulation's own roundings are the same size as the output's, so the
bias of a correct fp32 kernel is a sum of many zero-mean roundings, and truncating an fp64
computation to fp32 still shows as -0.5 ulp where the case has enough rows.

A failure says which structure, its size in ulps, the allowance, and what typically causes
it; for a scale failure, whether the rows' fitted scales track the rstd-rounding prediction.

The backward's structure (dx, dweight and dbias) is :mod:`normbench.check.backward_coherence`'s, derived the same
way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from normbench.check import error_model, oracle
from normbench.check.worst import ConformanceError
from normbench.core.dtypes import SUBNORMAL_SPACING, UNIT_ROUNDOFF, accumulation_roundoff, host_dtype

#: Hoeffding's multiplier for a false-alarm probability of 1e-9 per statistic: sqrt(2*ln(2/p))
P_FALSE_ALARM = 1e-9
Z = float(np.sqrt(2.0 * np.log(2.0 / P_FALSE_ALARM)))
#: a row shorter than this has no scale or offset to test (two fitted coefficients)
MIN_ROW_FOR_SCALE = 16
#: the rounding bias applies only when its allowance is below this (ulps): half of truncation's 0.5
BIAS_POWER = 0.25
#: the slope across rows applies only when its allowance is below this (the bug's slope is 1)
SLOPE_POWER = 0.5
#: rows shorter than this take no part in the bias (the per-row fit would absorb it)
MIN_ROW_FOR_BIAS = 4
HALF = ("float16", "bfloat16")

CAUSES = {
    "scale": ("a row's scale rounded to the storage dtype before it is applied (rstd, or w*rstd, cast to "
              "bf16/fp16: fp32 statistics, half-precision multiplier)"),
    "offset": ("a row's shift rounded or reused coarsely (the mean, or mean*rstd, rounded to the storage dtype "
               "before centering)"),
    "toward-zero": ("the output converted by truncation (round toward zero) instead of round-to-nearest-even, "
                    "e.g. a bit mask of fp32 to bf16, or a conversion intrinsic with _rz"),
    "downward": ("the output converted by rounding down (floor, _rd) instead of round-to-nearest-even"),
}


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` at |values| (2*u*2**floor(log2|v|), never below the subnormal spacing)."""
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(np.asarray(values, dtype=np.float64)))
        return np.maximum(np.ldexp(UNIT_ROUNDOFF[dtype], e), SUBNORMAL_SPACING[dtype])


def round_nearest(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 ``values`` rounded to nearest (ties to even) in ``dtype``, back as float64."""
    with np.errstate(all="ignore"):
        v = np.asarray(values, dtype=np.float64)
        if dtype == "bfloat16":  # via fp32 with round-to-odd would be exact; fp32 first errs only at 2**-24 ties
            v = v.astype(np.float32)
        return v.astype(host_dtype(dtype)).astype(np.float64)


@dataclass
class Finding:
    """One statistic outside its allowance."""

    structure: str        # "scale", "offset", "toward-zero", "downward"
    value_ulps: float     # the statistic, in ulps
    allowed_ulps: float   # its allowance, in ulps
    where: str            # "row 3" or "7950 elements of 8 rows"
    detail: str = ""

    @property
    def ratio(self) -> float:
        return abs(self.value_ulps) / self.allowed_ulps if self.allowed_ulps > 0 else float("inf")

    def words(self) -> str:
        return (f"{self.structure} error of {self.value_ulps:+.3f} ulp at {self.where} (a correct round-to-nearest "
                f"kernel stays within +-{self.allowed_ulps:.3f} ulp: {self.ratio:.1f}x){self.detail}; typically "
                f"{CAUSES[self.structure]}")


@dataclass
class Statistics:
    """Every coherence statistic of one forward output, with its allowance (ulps)."""

    dtype: str
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, int))   # rows the per-row fit applies to
    scale_ulps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale_allowed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale_predicted: np.ndarray = field(default_factory=lambda: np.zeros(0))  # rstd rounded to the dtype
    offset_ulps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    offset_allowed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bias: dict = field(default_factory=dict)  # "toward-zero"/"downward" -> (value, allowed, predicted, elements)
    scale_applies: bool = False
    #: (slope, allowance): the fitted scales regressed on the prediction across rows (1 for the bug)
    scale_slope: tuple[float, float] | None = None

    def ratios(self) -> dict[str, float]:
        """The largest |statistic|/allowance per structure (statistics that apply only)."""
        out = {}
        if self.scale_applies and self.rows.size:
            powered = self.scale_allowed < 2 * HALF_ULP  # u_out, in ulps: 0.5
            if powered.any():
                out["scale"] = float(np.max(np.abs(self.scale_ulps[powered]) / self.scale_allowed[powered]))
        if self.scale_applies and self.scale_slope is not None and self.scale_slope[1] < SLOPE_POWER:
            out["scale-slope"] = abs(self.scale_slope[0]) / self.scale_slope[1]
        if self.rows.size:
            out["offset"] = float(np.max(np.abs(self.offset_ulps) / self.offset_allowed))
        for key, (value, allowed, _, _) in self.bias.items():
            if allowed < BIAS_POWER:
                out[key] = abs(value) / allowed
        return out


HALF_ULP = 0.25  # u_out in ulps is 0.5; a scale row is powered when its allowance is below u_out


def finite_rows(ref: oracle.Forward, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (np.isfinite(ref.x).all(axis=1) & np.isfinite(ref.y).all(axis=1) & np.isfinite(y).all(axis=1)
                & np.isfinite(ref.sigma_eps) & (ref.sigma_eps > 0))


def forward_statistics(ref: oracle.Forward, y: np.ndarray, dtype: str) -> Statistics:
    """The coherence statistics of ``y`` ((M, N) float64, the backend's output on rows) for a
    case of output dtype ``dtype``, against the oracle's ``ref``."""
    stats = Statistics(dtype)
    m_rows, n = ref.x.shape
    if m_rows == 0 or n < MIN_ROW_FOR_BIAS:
        return stats
    keep = np.flatnonzero(finite_rows(ref, y))
    if keep.size == 0:
        return stats
    u_out, u_acc = UNIT_ROUNDOFF[dtype], accumulation_roundoff(dtype)
    with np.errstate(all="ignore"):
        x, xhat, yr = ref.x[keep], ref.xhat[keep], ref.y[keep]
        w, b = (ref.weight[keep] if ref.weight.ndim == 2 else ref.weight[None, :]), ref.bias[None, :]  # (M, N): per head
        rstd, mean = ref.rstd[keep][:, None], ref.mean[keep][:, None]
        a = w * xhat
        e = y[keep] - yr
        ulp_y = ulp(yr, dtype)
        m_acc = 2 * u_acc * ((np.abs(x) + np.abs(mean)) * rstd * np.abs(w) + np.abs(a) + np.abs(b))
        m2 = (ulp_y / 2) ** 2 + (ulp(a, dtype) / 2) ** 2 + m_acc ** 2
        p_xhat = w * (round_nearest(xhat, dtype) - xhat)
        p_y = round_nearest(yr, dtype) - yr
        # the affine's three roundings, for the per-case bias (it sums over rows: w and b repeat down a column)
        p_chain = round_nearest(round_nearest(w * round_nearest(xhat, dtype), dtype) + b, dtype) - yr
        # the per-row least squares on [a, w]
        wb = np.broadcast_to(w, a.shape)
        saa, saw, sww = (a * a).sum(1), (a * wb).sum(1), (wb * wb).sum(1)
        det = saa * sww - saw * saw
        full = (det > 1e-9 * saa * sww) & (saa > 0)

        def project(v):
            """v minus its projection on span{a, w} per row (on w alone where a is degenerate)."""
            va, vw = (v * a).sum(1), (v * wb).sum(1)
            ca = np.where(full, (sww * va - saw * vw) / np.where(full, det, 1), 0.0)
            cw = np.where(full, (saa * vw - saw * va) / np.where(full, det, 1), vw / np.where(sww > 0, sww, 1))
            return v - ca[:, None] * a - cw[:, None] * wb

        def allowance(h, shared=0.0, rows=slice(None)):
            """Per row (h: (R, N) over ``rows``): shared + computed lattice terms + Z x Hoeffding."""
            return (shared + np.abs((h * p_xhat[rows]).sum(-1)) + np.abs((h * p_y[rows]).sum(-1))
                    + Z * np.sqrt((h * h * m2[rows]).sum(-1)))

        # -- per row: scale and offset
        fit = full & (n >= MIN_ROW_FOR_SCALE)
        rows = np.flatnonzero(fit)
        if rows.size:
            d = det[rows][:, None]
            h_s = (sww[rows][:, None] * a[rows] - saw[rows][:, None] * wb[rows]) / d
            h_o = (saa[rows][:, None] * wb[rows] - saw[rows][:, None] * a[rows]) / d
            er = e[rows]
            two_u = 2 * u_out
            r0 = ref.rstd[keep][rows]
            rstd_rel = error_model.rstd_bound(ref, dtype)[keep][rows] / r0
            stats.rows = keep[rows]
            stats.scale_ulps = (h_s * er).sum(1) / two_u
            stats.scale_allowed = allowance(h_s, rstd_rel, rows) / two_u
            stats.scale_predicted = (round_nearest(r0, dtype) / r0 - 1) / two_u
            rms_w = np.sqrt(sww[rows] / n)
            unit = ulp(rms_w, dtype)
            shared_o = 2 * error_model.mean_bound(ref, dtype)[keep][rows] * r0  # the mean's shared error (see Offset)
            stats.offset_ulps = (h_o * er).sum(1) * rms_w / unit
            stats.offset_allowed = allowance(h_o, shared_o, rows) * rms_w / unit
            stats.scale_applies = dtype in HALF
            # across rows: the slope of the fitted scales on the rstd-rounding prediction
            delta = stats.scale_predicted * two_u
            energy = float((delta * delta).sum())
            if energy > 0 and rows.size >= 2:
                c = (delta / energy)[:, None]
                hc = c * h_s
                slope = float((hc * er).sum())
                allowed = (float((np.abs(c[:, 0]) * rstd_rel).sum()) + abs(float((hc * p_xhat[rows]).sum()))
                           + abs(float((hc * p_y[rows]).sum())) + Z * float(np.sqrt((hc * hc * m2[rows]).sum())))
                stats.scale_slope = (slope, allowed)
        # -- per case: rounding bias, on the residual of the per-row fit
        tiny = 2.0 ** -14 if dtype == "float16" else float(np.finfo(np.float32 if dtype != "float64" else np.float64).tiny)
        omega = np.where(np.abs(yr) >= tiny, ulp_y * ulp_y / m2, 0.0)
        total = omega.sum()
        if total > 0:
            sgn = np.sign(yr)
            for key, direction in (("toward-zero", sgn), ("downward", 1.0)):
                g = project(omega * direction / ulp_y / total)
                value = float((g * e).sum())
                allowed = float(np.abs((g * p_xhat).sum()) + np.abs((g * p_y).sum()) + np.abs((g * p_chain).sum())
                                + Z * np.sqrt((g * g * m2).sum()))
                toward = round_directed(yr, dtype, key) - yr  # what the bug would show
                predicted = float((g * toward).sum())
                stats.bias[key] = (value, allowed, predicted, int(np.count_nonzero(omega > 0)))
    return stats


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def round_directed(values: np.ndarray, dtype: str, mode: str) -> np.ndarray:
    """float64 ``values`` rounded in ``dtype`` toward zero (``mode`` "toward-zero") or down
    ("downward"), back as float64: round to nearest, then one step back where it went past.
    (bfloat16 passes through fp32 first, which can matter only within 2**-24 of a tie.)"""
    host = host_dtype(dtype)
    with np.errstate(all="ignore"):
        v = np.asarray(values, dtype=np.float64)
        rn = (v.astype(np.float32) if dtype == "bfloat16" else v).astype(host)
        back = rn.astype(np.float64)
        bits = np.ascontiguousarray(rn).view(_UINT[host.itemsize]).copy()
        one = _UINT[host.itemsize](1)
        sign = _UINT[host.itemsize](1 << (8 * host.itemsize - 1))
        finite = np.isfinite(back)
        if mode == "toward-zero":
            past = finite & (np.abs(back) > np.abs(v))
            bits[past] -= one  # sign-magnitude: one step smaller in magnitude
        else:
            past = finite & (back > v)
            positive = past & (back > 0)
            zero = past & (back == 0)
            negative = past & (back < 0)
            bits[positive] -= one
            bits[negative] += one
            bits[zero] = sign | one  # the negative subnormal next to zero
        return bits.view(host).astype(np.float64)


def forward_findings(ref: oracle.Forward, y: np.ndarray, dtype: str) -> list[Finding]:
    """The statistics of ``forward_statistics`` that fall outside their allowance."""
    stats = forward_statistics(ref, y, dtype)
    found: list[Finding] = []
    if stats.scale_applies and stats.rows.size:
        powered = stats.scale_allowed < 0.5
        bad = powered & (np.abs(stats.scale_ulps) > stats.scale_allowed)
        if bad.any():
            i = int(np.argmax(np.where(bad, np.abs(stats.scale_ulps) / stats.scale_allowed, -1)))
            pred = stats.scale_predicted
            tracking = tracks(stats.scale_ulps[powered], pred[powered])
            detail = (f" (rstd rounded to {dtype} predicts {pred[i]:+.3f} ulp for this row; over the "
                      f"{int(powered.sum())} rows with power the fitted scales {tracking})")
            found.append(Finding("scale", float(stats.scale_ulps[i]), float(stats.scale_allowed[i]),
                                 f"row {int(stats.rows[i])}, {bad.sum()} of {int(powered.sum())} rows out", detail))
    if stats.scale_applies and stats.scale_slope is not None and not any(f.structure == "scale" for f in found):
        slope, allowed = stats.scale_slope
        if allowed < SLOPE_POWER and abs(slope) > allowed:
            rms = float(np.sqrt(np.mean(stats.scale_predicted ** 2)))
            found.append(Finding("scale", slope * rms, allowed * rms,
                                 f"{stats.rows.size} rows, regressed on the prediction",
                                 f" (the rows' fitted scales follow rstd rounded to {dtype} with slope {slope:.2f}, "
                                 f"allowance {allowed:.2f}; the prediction's rms is {rms:.3f} ulp; rstd rounded to "
                                 f"{dtype} predicts it: they track it)"))
    if stats.rows.size:
        bad = np.abs(stats.offset_ulps) > stats.offset_allowed
        if bad.any():
            i = int(np.argmax(np.where(bad, np.abs(stats.offset_ulps) / stats.offset_allowed, -1)))
            found.append(Finding("offset", float(stats.offset_ulps[i]), float(stats.offset_allowed[i]),
                                 f"row {int(stats.rows[i])}, {bad.sum()} rows out"))
    for key, (value, allowed, predicted, count) in stats.bias.items():
        if allowed < BIAS_POWER and abs(value) > allowed:
            found.append(Finding(key, value, allowed, f"the weighted mean over {count} elements",
                                 f" ({'truncation' if key == 'toward-zero' else 'floor'} of the reference predicts "
                                 f"{predicted:+.3f} ulp)"))
    return found


def tracks(fitted: np.ndarray, predicted: np.ndarray) -> str:
    """Words for the regression of the fitted per-row scales on the prediction."""
    denom = float((predicted * predicted).sum())
    if fitted.size < 2 or denom == 0:
        return "cannot be compared with it"
    beta = float((fitted * predicted).sum()) / denom
    resid = fitted - beta * predicted
    r2 = 1 - float((resid * resid).sum()) / max(float((fitted * fitted).sum()), 1e-300)
    verdict = "track it" if abs(beta - 1) < 0.25 and r2 > 0.8 else "do not track it closely"
    return f"{verdict} (slope {beta:.2f}, R^2 {r2:.2f})"


def check_forward_coherence(backend, inputs, y_host: np.ndarray, ref: oracle.Forward) -> None:
    """Raise ``conformance.ConformanceError`` when ``y_host`` (the backend's y as a host array of
    x's shape, ``conformance.run_forward(...).y``) has a coherent error structure no correct
    round-to-nearest kernel produces. ``ref`` is the oracle's forward of ``inputs``
    (``conformance.reference(inputs)``)."""
    __tracebackhide__ = True

    case = inputs.case
    y = oracle.rows_view(y_host, case.normalized_shape)
    found = forward_findings(ref, y, case.dtype)
    if found:
        lines = [f"{backend.name} {case.id} (seed {inputs.seed}): y's signed error has a coherent structure that "
                 f"every element's bound misses:"]
        lines += [f"  {f.words()}" for f in found]
        lines.append(f"  (normbench.check.coherence: statistics linear in the error, allowance = shared statistics' "
                     f"error + computed lattice rounding + {Z:.2f} x Hoeffding's bound on independent roundings)")
        lines.append(f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed})")
        raise ConformanceError("\n".join(lines))
