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

backward: dx, dweight and dbias (``check_backward_coherence``)
--------------------------------------------------------------

With ``g = dy*w``, ``r = rstd``, ``dx = r*(g - mean(g) - xhat*mean(g*xhat))`` (the oracle's closed form),
a correct kernel's dx error on a row is again the sum of

1. **Shared errors,** one per row: mean(g)'s and mean(g*xhat)'s accumulation (along 1 and along xhat),
   the mean's (xhat shifted along 1, mean(g*xhat) along xhat), an expanded form's sums over x (``b*x +
   c``: along x, in span{1, xhat}), and rstd's relative error ``rho`` (along dx_ref itself: a *scale*;
   ``|rho| <= rstd_bound/rstd``, as in the forward). The accumulation terms can be large (the dx bound's
   ``k(N)*u_acc*r*(|xhat| + c)*mean|g*xhat|``, above a half ulp at offset 1e3), but they lie in
   span{1, xhat}, which every dx statistic projects out; only the scale is bounded instead.
2. **Per-element roundings** in the accumulation precision: of ``g``, of ``x - mean`` and ``*r``, of the
   sums and the products of the closed form (or its folded, Triton or expanded orders), and of dx itself,
   ``m_acc = 3*u_acc*(r*(|g| + |mean g| + (|xhat| + c)*|mean(g*xhat)|) + |dx|)``, c as in the forward; and
   the output's ``ulp_dx/2``: ``m_j^2 = (ulp_dx/2)^2 + m_acc^2``, independent and zero-mean.
3. **The reference's own rounding,** ``p = rn(dx_ref) - dx_ref``, computed.

**dx's scale (per row, bf16 and fp16).** dx's coefficient on dx_ref once 1 and xhat are projected out,
``s = h.e``, ``h = d/|d|^2``, ``d = dx_ref - P_{1,xhat} dx_ref``: ``h.1 = h.xhat = 0``, ``h.dx_ref = 1``, so
``shared(s) = rstd_bound/rstd``; allowance ``shared + |h.p| + Z*sqrt(sum h^2 m^2)``. dx's multiplier rstd
rounded to the storage dtype gives ``s = rn(r)/r - 1``; reported in units of 2*u_out, powered where the
allowance is below u_out, with the same slope across rows as the forward.

**dx's rounding bias (per case, bf16 and fp16).** A generalized least squares: with ``W = 1/m^2`` and
``v = W*direction*ulp/sum(ulp^2*W)`` (direction: sign(dx_ref) toward zero, 1 downward), the weights
``g = v - W*B*(B'WB)^-1*B'v`` per row are plainly orthogonal to the basis B of shared directions, and
``g.e`` is the W-weighted mean of e/ulp with those directions fitted out (the plain projection of the
forward spreads the correction over every element and, on dx, whose magnitudes span many binades,
costs the bias most of its power). Two bases, each a valid statistic: B = [1, xhat] with the scale
bounded (``shared = sum_rows rstd_rel*|g.dx_ref|``), and B = [1, xhat, dx_ref] (shared = 0); per direction
the one whose *predicted* value (``g.(round_directed(dx_ref) - dx_ref)``, from the reference alone) is
largest against its allowance is used. Allowance ``shared + |g.p| + Z*sqrt(sum g^2*m^2)``; the statistic
applies where the prediction is at least ``BACKWARD_BIAS_POWER`` = 2 allowances. Rows with fewer than 8
elements or a non-finite value, and |dx_ref| below the smallest normal, are left out.

**dweight's and dbias's bias (per case, parameters in bf16 or fp16).** The same over the N columns, no
basis: dbias's per-element ``m_acc = k(M)*u_acc*sum_rows|dy|`` (its bound's accumulation; no shared
error); dweight's ``(k(M) + 2)*u_acc*sum_rows(|dy|*(|xhat| + c))``, and each row's statistics are
shared by its terms dy*xhat: ``shared(g) = sum_rows(rstd_rel*|sum_j g_j*dy_j*xhat_j| + mean_bound*r*|sum_j
g_j*dy_j|)``. In half dtypes the output rounding dominates (fp32 accumulation is 2**-13 to 2**-16 of an
ulp), so the bias has power from a few hundred columns.

**Not on fp32 (or fp64) outputs.** There a correct kernel's own roundings are as large as the output's
and not independent: in ``g - mean(g)`` the fixed mean(g) is rounded to the grid of each g, so every
element in a binade of g carries the same error (measured: a correct fp32 kernel on constant rows at
N = 65536 reached 0.9 of an independent-rounding allowance in 3 seeds), and rstd's shared relative error
(hundreds of fp32 ulps) swamps a truncation, which on dx is nearly a scale. A truncated fp32 dx is not
detectable this way.
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
            powered = self.scale_allowed < 2 * _HALF_ULP  # u_out, in ulps: 0.5
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


_HALF_ULP = 0.25  # u_out in ulps is 0.5; a scale row is powered when its allowance is below u_out


def _finite_rows(ref: oracle.Forward, y: np.ndarray) -> np.ndarray:
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
    keep = np.flatnonzero(_finite_rows(ref, y))
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
            tracks = _tracks(stats.scale_ulps[powered], pred[powered])
            detail = (f" (rstd rounded to {dtype} predicts {pred[i]:+.3f} ulp for this row; over the "
                      f"{int(powered.sum())} rows with power the fitted scales {tracks})")
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


def _tracks(fitted: np.ndarray, predicted: np.ndarray) -> str:
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


# -- backward: dx, dweight, dbias ------------------------------------------------------------

#: rows shorter than this take no part in dx's bias (two shared directions are projected out per row)
MIN_ROW_FOR_BACKWARD_BIAS = 8
#: the backward's bias applies where the bug's predicted value is at least this many allowances
BACKWARD_BIAS_POWER = 2.0
#: the backward's structures, with the output each concerns: "dx-scale", "dx-toward-zero", ...
BACKWARD_CAUSES = {
    "scale": ("the row's multiplier rstd rounded to the storage dtype before dx = rstd*(...) is scaled by it "
              "(fp32 statistics, a half-precision rstd or rstd*w in the backward)"),
    "toward-zero": CAUSES["toward-zero"],
    "downward": CAUSES["downward"],
}


def _tiny(dtype: str) -> float:
    """The smallest normal number of ``dtype``: below it rounding is absolute, and no bias is measured."""
    return 2.0 ** -14 if dtype == "float16" else float(np.finfo(np.float64 if dtype == "float64" else np.float32).tiny)


def _bias(e: np.ndarray, exact: np.ndarray, dtype: str, m2: np.ndarray, options) -> dict:
    """The rounding bias (toward zero, downward) of ``e`` = computed - ``exact`` ((R, N) float64 rows; elements
    to leave out have m2 = inf). ``options``: pairs ``(basis, shared)``, each a valid statistic: ``basis`` a
    list of (R, N) directions of shared errors that are projected out, ``shared(g)`` a bound on ``g.e``'s part
    from the shared errors that are not. With ``W = 1/m2`` and ``v = W*direction*ulp/sum(ulp^2*W)``, the
    weights ``g = v - W*B*(B'WB)^-1*B'v`` per row (B: the basis), so ``B'g = 0``; ``B = g.e`` (in ulps: a
    weighted mean of e/ulp), its allowance ``shared(g) + |g.p| + Z*sqrt(sum g^2*m2)``, p the reference's own
    rounding to nearest, and the value the bug would show, ``g.(round_directed(exact) - exact)``. Per
    direction the option whose predicted value is largest against its allowance is used: a choice made from
    the reference alone, before the output is looked at."""
    out: dict = {}
    with np.errstate(all="ignore"):
        ulp_r = ulp(exact, dtype)
        used = (np.abs(exact) >= _tiny(dtype)) & np.isfinite(m2) & (m2 > 0)
        w = np.where(used, 1.0 / np.where(used, m2, 1.0), 0.0)
        total = float((ulp_r * ulp_r * w).sum())
        if not total > 0:
            return out
        m2z = np.where(used, m2, 0.0)
        ez = np.where(used, e, 0.0)
        p = np.where(used, round_nearest(exact, dtype) - exact, 0.0)
        for key, direction in (("toward-zero", np.sign(exact)), ("downward", 1.0)):
            toward = np.where(used, round_directed(exact, dtype, key) - exact, 0.0)
            v = w * direction * ulp_r / total
            best = None
            for basis, shared in options:
                g = _w_project(v, [np.where(used, d, 0.0) for d in basis], w)
                allowed = float(shared(g) + abs((g * p).sum()) + Z * np.sqrt((g * g * m2z).sum()))
                predicted = float((g * toward).sum())
                power = abs(predicted) / allowed if allowed > 0 else 0.0
                if best is None or power > best[0]:
                    best = (power, float((g * ez).sum()), allowed, predicted)
            out[key] = (*best[1:], int(np.count_nonzero(used)))
    return out


def _w_project(v: np.ndarray, basis: list, w: np.ndarray) -> np.ndarray:
    """``v - W*B*pinv(B'WB)*B'v`` per row: orthogonal (plainly) to every direction of ``basis``."""
    if not basis:
        return v
    B = np.stack(basis, axis=-1)                          # (R, N, k)
    gram = np.einsum("rnk,rn,rnl->rkl", B, w, B)
    scale = np.sqrt(np.maximum(np.einsum("rkk->rk", gram), 1e-300))
    gram_n = gram / scale[:, :, None] / scale[:, None, :]  # unit diagonal: pinv's cutoff is relative
    coef = np.einsum("rkl,rl->rk", np.linalg.pinv(gram_n, rcond=1e-10), np.einsum("rnk,rn->rk", B, v) / scale)
    return v - w * np.einsum("rnk,rk->rn", B, coef / scale)


def _backward_bias_applies(allowed: float, predicted: float) -> bool:
    """The backward's bias applies where the bug would show at least BACKWARD_BIAS_POWER allowances."""
    return allowed > 0 and abs(predicted) >= BACKWARD_BIAS_POWER * allowed


@dataclass
class BackwardStatistics:
    """The coherence statistics of one backward: dx's per-row scale (half dtypes), and the rounding bias of
    dx, dweight and dbias (``bias[(output, direction)] = (value, allowed, predicted, elements)``, in ulps)."""

    dtype: str
    params: str
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    scale_ulps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale_allowed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale_predicted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale_applies: bool = False
    scale_slope: tuple[float, float] | None = None
    bias: dict = field(default_factory=dict)

    def ratios(self) -> dict[str, float]:
        """The largest |statistic|/allowance per statistic that applies: "dx-scale", "dx-scale-slope",
        "dx-toward-zero", "dweight-downward", ..."""
        out = {}
        if self.scale_applies and self.rows.size:
            powered = self.scale_allowed < 2 * _HALF_ULP
            if powered.any():
                out["dx-scale"] = float(np.max(np.abs(self.scale_ulps[powered]) / self.scale_allowed[powered]))
        if self.scale_applies and self.scale_slope is not None and self.scale_slope[1] < SLOPE_POWER:
            out["dx-scale-slope"] = abs(self.scale_slope[0]) / self.scale_slope[1]
        for (what, key), (value, allowed, predicted, _) in self.bias.items():
            if _backward_bias_applies(allowed, predicted):
                out[f"{what}-{key}"] = abs(value) / allowed
        return out


def backward_statistics(ref: oracle.Forward, grads: oracle.Backward, dy: np.ndarray, dx: np.ndarray,
                        dweight: np.ndarray | None, dbias: np.ndarray | None, dtype: str,
                        params: str | None = None) -> BackwardStatistics:
    """The backward's coherence statistics: ``dx`` (M, N) float64 rows, ``dweight``/``dbias`` (N,) float64 or
    None, the backend's; ``dy`` the upstream gradient; ``dtype`` x's (and dx's) dtype, ``params`` the
    parameters' (dweight's, dbias's). Half dtypes only (see the docstring, "backward": on fp32 outputs a
    correct kernel's own roundings are as large as the output's, and not independent)."""
    params = params or dtype
    stats = BackwardStatistics(dtype, params)
    m_rows, n = ref.x.shape
    if m_rows == 0 or n == 0:
        return stats
    u_acc = accumulation_roundoff(dtype)
    dy2 = np.asarray(dy, dtype=np.float64).reshape(m_rows, n)
    with np.errstate(all="ignore"):
        r = ref.rstd[:, None]
        xhat = ref.xhat
        c = (np.abs(ref.x) + np.abs(ref.mean)[:, None]) * r
        rstd_rel = error_model.rstd_bound(ref, dtype) / ref.rstd
        if dtype in HALF:
            _dx_statistics(stats, ref, grads, dy2, np.asarray(dx, dtype=np.float64).reshape(m_rows, n), dtype,
                           u_acc, r, c, rstd_rel)
        if params not in HALF or ref.groups > 1:  # per-head weights: dweight's element bounds alone (each head's
            return stats                            # sum is checked; its shared-error model is one weight's)
        finite_rows = (np.isfinite(ref.x).all(1) & np.isfinite(dy2).all(1) & np.isfinite(ref.sigma_eps)
                       & (ref.sigma_eps > 0))
        fr = finite_rows[:, None]
        for what, got, exact in (("dweight", dweight, grads.dweight), ("dbias", dbias, grads.dbias)):
            if got is None:
                continue
            got = np.asarray(got, dtype=np.float64).reshape(n)
            if what == "dweight":
                terms = np.where(fr, np.abs(dy2) * (np.abs(xhat) + c), 0.0)
                m_acc = (error_model.k(m_rows) + 2) * u_acc * terms.sum(0)
                # each row's statistics are shared by its terms dy*xhat: rstd's relative error (along dy*xhat)
                # and the mean's (along dy*rstd), bounded row by row
                along_r = np.where(fr, dy2 * xhat, 0.0)
                along_mu = np.where(fr, dy2 * r, 0.0)
                mu_bound = np.where(finite_rows, error_model.mean_bound(ref, dtype), 0.0)
                rel = np.where(finite_rows, rstd_rel, 0.0)

                def shared(g, along_r=along_r, along_mu=along_mu, mu_bound=mu_bound, rel=rel):
                    return float((rel * np.abs(along_r @ g)).sum() + (mu_bound * np.abs(along_mu @ g)).sum())
            else:
                m_acc = error_model.k(m_rows) * u_acc * np.where(fr, np.abs(dy2), 0.0).sum(0)

                def shared(g):
                    return 0.0
            ulp_p = ulp(exact, params)
            m2 = (ulp_p / 2) ** 2 + m_acc ** 2
            ok = np.isfinite(got) & np.isfinite(exact) & finite_rows.all()
            m2 = np.where(ok, m2, np.inf)
            for key, value in _bias(np.where(ok, got - exact, 0.0)[None], np.where(ok, exact, 0.0)[None], params,
                                    m2[None], [([], lambda g: shared(g[0]))]).items():
                stats.bias[(what, key)] = value
    return stats


def _dx_statistics(stats: BackwardStatistics, ref, grads, dy2, dx, dtype, u_acc, r, c, rstd_rel) -> None:
    """dx's per-row scale and its rounding bias (see the docstring: "backward")."""
    m_rows, n = ref.x.shape
    u_out = UNIT_ROUNDOFF[dtype]
    keep = np.flatnonzero(_finite_rows(ref, dx) & np.isfinite(dy2).all(1) & np.isfinite(grads.dx).all(1))
    if keep.size == 0 or n < MIN_ROW_FOR_BACKWARD_BIAS:
        return
    xhat, dxr, g = ref.xhat[keep], grads.dx[keep], grads.g[keep]
    rk, ck = r[keep], c[keep]
    e = dx[keep] - dxr
    mean_g = np.abs(g.mean(1, keepdims=True))
    mean_gx = np.abs((g * xhat).mean(1, keepdims=True))
    m_acc = 3 * u_acc * (rk * (np.abs(g) + mean_g + (np.abs(xhat) + ck) * mean_gx) + np.abs(dxr))
    ulp_dx = ulp(dxr, dtype)
    m2 = (ulp_dx / 2) ** 2 + m_acc ** 2
    p_dx = round_nearest(dxr, dtype) - dxr
    # the directions of the shared errors of mean(g), mean(g*xhat) and the mean (and of an expanded form's
    # sums over x): 1 and xhat, projected out
    ones = np.ones_like(xhat)
    q1 = np.full((1, n), 1 / np.sqrt(n))
    xc = xhat - xhat.mean(1, keepdims=True)
    norm = np.sqrt((xc * xc).sum(1, keepdims=True))
    q2 = np.where(norm > 1e-6 * np.sqrt(n), xc / np.where(norm > 0, norm, 1), 0.0)

    def project(v):
        v = v - (v @ q1[0])[:, None] * q1
        return v - (v * q2).sum(1, keepdims=True) * q2

    rel = rstd_rel[keep]
    # -- per row: the scale, dx's coefficient on dx_ref once 1 and xhat are projected out
    d = project(dxr)
    dd = (d * d).sum(1)
    fit = (dd > 1e-12 * (dxr * dxr).sum(1)) & (dd > 0) & (n >= MIN_ROW_FOR_SCALE)
    rows = np.flatnonzero(fit)
    if rows.size:
        h = d[rows] / dd[rows][:, None]
        two_u = 2 * u_out
        r0 = ref.rstd[keep][rows]
        stats.rows = keep[rows]
        stats.scale_ulps = (h * e[rows]).sum(1) / two_u
        stats.scale_allowed = (rel[rows] + np.abs((h * p_dx[rows]).sum(1))
                               + Z * np.sqrt((h * h * m2[rows]).sum(1))) / two_u
        stats.scale_predicted = (round_nearest(r0, dtype) / r0 - 1) / two_u
        stats.scale_applies = dtype in HALF
        delta = stats.scale_predicted * two_u
        energy = float((delta * delta).sum())
        if energy > 0 and rows.size >= 2:
            cc = (delta / energy)[:, None]
            hc = cc * h
            slope = float((hc * e[rows]).sum())
            allowed = (float((np.abs(cc[:, 0]) * rel[rows]).sum()) + abs(float((hc * p_dx[rows]).sum()))
                       + Z * float(np.sqrt((hc * hc * m2[rows]).sum())))
            stats.scale_slope = (slope, allowed)

    # -- per case: the rounding bias; rstd's relative error (along dx_ref) bounded, or projected out too
    def shared(gv):
        return float((rel * np.abs((gv * dxr).sum(1))).sum())

    options = [([ones, xhat], shared), ([ones, xhat, dxr], lambda gv: 0.0)]
    for key, value in _bias(e, dxr, dtype, m2, options).items():
        stats.bias[("dx", key)] = value


def backward_findings(stats: BackwardStatistics) -> list[Finding]:
    """The statistics of ``backward_statistics`` that fall outside their allowance (``Finding.structure``
    is the structure, ``Finding.where`` names the output)."""
    found: list[Finding] = []
    dtype = stats.dtype
    if stats.scale_applies and stats.rows.size:
        powered = stats.scale_allowed < 2 * _HALF_ULP
        bad = powered & (np.abs(stats.scale_ulps) > stats.scale_allowed)
        if bad.any():
            i = int(np.argmax(np.where(bad, np.abs(stats.scale_ulps) / stats.scale_allowed, -1)))
            pred = stats.scale_predicted
            detail = (f" (rstd rounded to {dtype} predicts {pred[i]:+.3f} ulp for this row; over the "
                      f"{int(powered.sum())} rows with power the fitted scales "
                      f"{_tracks(stats.scale_ulps[powered], pred[powered])})")
            found.append(Finding("scale", float(stats.scale_ulps[i]), float(stats.scale_allowed[i]),
                                 f"dx row {int(stats.rows[i])}, {bad.sum()} of {int(powered.sum())} rows out", detail))
    if stats.scale_applies and stats.scale_slope is not None and not found:
        slope, allowed = stats.scale_slope
        if allowed < SLOPE_POWER and abs(slope) > allowed:
            rms = float(np.sqrt(np.mean(stats.scale_predicted ** 2)))
            found.append(Finding("scale", slope * rms, allowed * rms,
                                 f"dx's {stats.rows.size} rows, regressed on the prediction",
                                 f" (the rows' fitted scales follow rstd rounded to {dtype} with slope {slope:.2f}, "
                                 f"allowance {allowed:.2f}; the prediction's rms is {rms:.3f} ulp: they track it)"))
    for (what, key), (value, allowed, predicted, count) in stats.bias.items():
        if _backward_bias_applies(allowed, predicted) and abs(value) > allowed:
            hint = ""
            if what == "dx" and stats.rows.size:  # a half-precision rstd's scale shows in the bias too
                hint = (f"; dx's fitted row scales {_tracks(stats.scale_ulps, stats.scale_predicted)} rstd rounded to "
                        f"{dtype}: where they track it, {BACKWARD_CAUSES['scale']} is the likelier cause")
            found.append(Finding(key, value, allowed, f"{what}, the weighted mean over {count} elements",
                                 f" ({'truncation' if key == 'toward-zero' else 'floor'} of the reference {what} "
                                 f"predicts {predicted:+.3f} ulp{hint})"))
    return found


def check_backward_coherence(backend, inputs, dy: np.ndarray, run, ref: oracle.Forward,
                             grads: oracle.Backward) -> None:
    """Raise ``conformance.ConformanceError`` when the backward's outputs (``run``, a
    ``conformance.BackwardRun``) have a coherent error structure no correct round-to-nearest kernel
    produces: dx's rows scaled alike (rstd rounded to the storage dtype), or dx, dweight or dbias
    biased (truncated or floored to the storage dtype). ``ref``: ``conformance.reference(inputs)``;
    ``grads``: ``oracle.backward(dy, ref)``."""
    __tracebackhide__ = True

    case = inputs.case
    ns = case.normalized_shape
    stats = backward_statistics(ref, grads, dy, oracle.rows_view(run.dx, ns),
                                None if run.dweight is None else np.asarray(run.dweight, dtype=np.float64),
                                None if run.dbias is None else np.asarray(run.dbias, dtype=np.float64),
                                case.dtype, case.params)
    found = backward_findings(stats)
    if found:
        lines = [f"{backend.name} {case.id} (seed {inputs.seed}): the backward's signed error has a coherent "
                 f"structure that every element's bound misses:"]
        for f in found:
            words = f.words()
            if f.structure == "scale":  # the forward's words name the forward's cause
                words = words.rsplit("; typically ", 1)[0] + f"; typically {BACKWARD_CAUSES['scale']}"
            lines.append(f"  {words}")
        lines.append(f"  (normbench.check.coherence, backward: statistics linear in the error, allowance = shared "
                     f"statistics' error + the reference's own rounding + {Z:.2f} x Hoeffding's bound on "
                     f"independent roundings)")
        lines.append(f"  inputs: normbench.core.cases.make_inputs(<case {case.id}>, seed={inputs.seed}); "
                     f"dy: normbench.core.cases.make_dy(<case {case.id}>, seed={inputs.seed})")
        raise ConformanceError("\n".join(lines))
