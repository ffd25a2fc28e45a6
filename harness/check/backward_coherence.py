"""Coherence of the backward: the structure of dx's, dweight's and dbias's signed error, which a per-element bound
cannot see (the forward's, the derivation's start and its constants: :mod:`normbench.check.coherence`).


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
from normbench.check.coherence import (
    CAUSES,
    HALF,
    HALF_ULP,
    MIN_ROW_FOR_SCALE,
    SLOPE_POWER,
    Finding,
    Z,
    finite_rows,
    round_directed,
    round_nearest,
    tracks,
    ulp,
)
from normbench.check.worst import ConformanceError
from normbench.core.dtypes import UNIT_ROUNDOFF, accumulation_roundoff

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
            powered = self.scale_allowed < 2 * HALF_ULP
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
    keep = np.flatnonzero(finite_rows(ref, dx) & np.isfinite(dy2).all(1) & np.isfinite(grads.dx).all(1))
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
        powered = stats.scale_allowed < 2 * HALF_ULP
        bad = powered & (np.abs(stats.scale_ulps) > stats.scale_allowed)
        if bad.any():
            i = int(np.argmax(np.where(bad, np.abs(stats.scale_ulps) / stats.scale_allowed, -1)))
            pred = stats.scale_predicted
            detail = (f" (rstd rounded to {dtype} predicts {pred[i]:+.3f} ulp for this row; over the "
                      f"{int(powered.sum())} rows with power the fitted scales "
                      f"{tracks(stats.scale_ulps[powered], pred[powered])})")
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
                hint = (f"; dx's fitted row scales {tracks(stats.scale_ulps, stats.scale_predicted)} rstd rounded to "
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
