"""Quantized outputs judged code by code: a normalization whose output is quantized for the next matrix multiply
(``normbench.core.operations``' ``*_quant`` and ``*_dynamic_quant`` operations; docs/quantized.md).

**What is exact.** The quantization ``q = saturate(round_to_nearest_even(y / scale))`` is a deterministic function
of a real number, so the only freedom a correct kernel has is the error of its y, which the error model already
bounds: ``|y - y_exact| <= B`` componentwise (``normbench.check.error_model.forward_bound``: the accumulation and the
roundings, the rounding of y to x's dtype included, so a kernel that quantizes y rounded to its storage dtype and
one that quantizes its float32 y are both inside it). Dividing by the scale, or multiplying by its float32
reciprocal, adds at most ``2*u32*|v|`` (two roundings of the quotient ``v = y / scale``). So with
``b = B / |scale| + 2*u32*|v| + 4*u64*|v|`` (the last: this module's own float64 division), every real number a
correct kernel may quantize lies in ``[v - b, v + b]``, and since quantizing is monotone, every code a correct
kernel may return lies between ``Q(v - b)`` and ``Q(v + b)`` (:func:`allowed`): where ``v`` is farther than ``b``
from a rounding boundary that is one code, the exact one; within ``b`` of a boundary, either neighbour (more where
b spans several codes). Saturation is exact beyond the maximum plus b: there every correct kernel returns the
maximum. NaN: a NaN y is NaN in both float8 formats (e4m3fn has no infinity: an infinite y saturates to 448); int8
has no NaN, so a NaN y's int8 code is not judged.

**What this does not enforce.** b is never 0 (the accumulation term of B and the division's ``2*u32*|v|``), so at
an exact tie both neighbours are allowed: a kernel rounding half away from zero passes (the ``alternating`` cases
prove only that neither neighbour cries wolf). And B is the float error model's, whose output-rounding term grows
with ``|w*xhat| + |bias|``, not with ``|y|``: where y is small beside them (LayerNorm with a bias) or the scale is
small (dynamic scales), b spans many codes, and one extra rounding of ``y / scale`` in x's dtype fits inside it
(docs/quantized.md gives numbers). A bound of the quantized value itself is the next step.

**A fused residual add** (``add_*``): residual_out bit for bit, as ``normbench.check.fused`` does, and the codes
under either convention of the sum, each whole (the stored residual_out's normalization, or the unrounded sum's).

**Dynamic scales** (per row: ``scale = max(min(absmax, scale_ub) / qmax, 1 / (qmax * 512))``,
``normbench.core.quantized.dynamic_scale``): a kernel's absmax is that of its own y, within the row's largest B of
the exact absmax; min, max and the floor do not widen a difference, and the division by qmax (or the product by its
float32 reciprocal) adds ``2*u32*scale``. So each row's scale must lie within ``max_row(B) / qmax + 2*u32*scale`` of
the exact one. The floor is each library's own (vLLM's CUDA kernels 1 / (qmax * 512), its CPU kernel none: an all-zero
row's scale 0, its codes 0): a scale without the floor is correct too, and an all-zero row may have any finite scale
>= 0, its codes 0 (a NaN code or scale there is the bug). The codes are then judged against the kernel's *own* scale
(what the next matrix multiply dequantizes with); a code inside its window reconstructs y, ``q * scale``, within half
the format's step times the scale plus ``b * scale``, so that needs no check of its own.

A failure names the element, its returned and exact codes (value and bits), ``y / scale`` and the rounding boundary
it was near, and the window b.
"""

from __future__ import annotations

import numpy as np

from normbench.check import error_model, fused, oracle
from normbench.check.outcomes import codes_text, parse_codes
from normbench.check.worst import ConformanceError
from normbench.core import operations
from normbench.core.cases import Inputs
from normbench.core.dtypes import U64, UNIT_ROUNDOFF
from normbench.core.quantized import QFormat, dynamic_scale, qformat, qmax, scale_floor

U32 = UNIT_ROUNDOFF["float32"]


def window(y_bound: np.ndarray, v: np.ndarray, scale) -> np.ndarray:
    """b: how far from ``v = y / scale`` a correct kernel's quotient may be (the module doc)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return y_bound / np.abs(scale) + (2 * U32 + 4 * U64) * np.abs(v)


def allowed(fmt: QFormat, v: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest code values a correct kernel may return for ``v`` within ``b`` (float64); an infinite
    v's is its saturated code alone (its window, infinite too, would make ``v - b`` NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        infinite = np.isinf(v)
        b = np.where(infinite, 0.0, b)
        return fmt.values(fmt.quantize(v - b)), fmt.values(fmt.quantize(v + b))


def violations(fmt: QFormat, got: np.ndarray, v: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where the returned codes ``got`` (host codes) are not among the allowed ones (boolean, ``v``'s shape)."""
    value = fmt.values(got)
    lo, hi = allowed(fmt, v, b)
    nan_v = np.isnan(v)
    wrong = ~((value >= lo) & (value <= hi))
    if fmt.has_nan:
        wrong = np.where(nan_v, ~np.isnan(value), wrong)
    return wrong & fmt.judged(v)


def agreement(fmt: QFormat, got: np.ndarray, v: np.ndarray, b: np.ndarray, where: np.ndarray | None = None,
              outside: np.ndarray | None = None) -> str:
    """The ``codes`` column's text: how many judged codes are the exact quantization of v, how many another allowed
    code, how many wrong (``where``: the elements judged, besides the format's own rule; ``outside``: the caller's
    :func:`violations` of the same codes, computed here when not given)."""
    judged = fmt.judged(v) if where is None else fmt.judged(v) & where
    value, exact = fmt.values(got), fmt.values(fmt.quantize(v))
    same = (value == exact) | (np.isnan(value) & np.isnan(exact))
    wrong = (violations(fmt, got, v, b) if outside is None else outside) & judged
    n_exact = int((same & judged).sum())
    return codes_text(n_exact, int(judged.sum()) - n_exact - int((wrong & ~same).sum()), int((wrong & ~same).sum()))


def _bits(fmt: QFormat, code) -> str:
    raw = np.asarray(code).astype(fmt.host).reshape(1).view(np.uint8)[0]
    return f"0x{int(raw):02x}"


def _code(fmt: QFormat, value: float) -> str:
    return f"{value:.9g} ({_bits(fmt, value)})"


def describe_code(fmt: QFormat, what: str, got: np.ndarray, v: np.ndarray, b: np.ndarray, wrong: np.ndarray,
                  scale, head: str) -> str:
    """The worst wrong code of ``what``: where, returned and exact codes, y/scale, the boundary it was near."""
    value = fmt.values(got)
    exact = fmt.values(fmt.quantize(v))
    with np.errstate(invalid="ignore"):
        distance = np.where(wrong, np.abs(np.nan_to_num(value - exact, nan=np.inf)), -1.0)
    at = np.unravel_index(int(np.argmax(distance)), distance.shape)
    vi, bi = float(v[at]), float(b[at])
    lo, hi = (float(a[at]) for a in allowed(fmt, v, b))
    step = float(fmt.step(np.array([vi]))[0])
    boundary = (float(exact[at]) + np.copysign(step / 2, vi - float(exact[at]))) if np.isfinite(vi) else float("nan")
    where = ", ".join(map(str, at))
    scale = np.asarray(scale)  # one given scale, or each element's own (a computed scale spread over its group)
    scale_text = f"{float(scale[at] if scale.shape == v.shape else scale.reshape(-1)[0]):.9g}"
    return (f"{head}{what}[{where}] = {_code(fmt, float(value[at]))}, exact code {_code(fmt, float(exact[at]))} "
            f"of y/scale = {vi:.9g} (scale {scale_text}); allowed {fmt.name} codes {lo:.9g} to {hi:.9g} (window "
            f"b = {bi:.3g}; nearest rounding boundary {boundary:.9g}, {abs(vi - boundary):.3g} away); "
            f"{int(wrong.sum())} of {wrong.size} codes wrong")


def references(inputs: Inputs) -> list[oracle.Forward]:
    """The float64 normalizations a correct kernel may quantize: the case's, and for a fused case also the unrounded
    sum's (either convention, each whole)."""
    base = operations.of(operations.of(inputs.case.norm).quantizes)  # the operation whose y is quantized
    first = oracle.forward(fused.normalized(inputs).x, inputs.case.normalized_shape, inputs.weight, inputs.bias,
                           inputs.case.eps_value, base.normalization.name, inputs.case.weight_offset)
    if not base.fuses:
        return [first]
    return [first, fused.unrounded_reference(inputs)]


def check_static(inputs: Inputs, q: np.ndarray, head: str, record=lambda codes: None) -> None:
    """Static scale: the codes of ``q`` (host codes, x's shape) within the window of one convention (module doc);
    ``record(codes)`` gets the agreement (:func:`agreement`) of the convention that holds, or of the first."""
    __tracebackhide__ = True
    case, fmt = inputs.case, qformat(inputs.case.qdtype)
    scale = np.float64(np.float32(case.scale))
    first, first_codes = None, None
    for ref in references(inputs):
        codes = np.asarray(q).reshape(ref.y.shape)
        bound = error_model.forward_bound(ref, case.dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            v = ref.y / scale
        b = window(bound, v, scale)
        wrong = violations(fmt, codes, v, b)
        if not wrong.any():
            record(agreement(fmt, codes, v, b, outside=wrong))
            return
        first = first or describe_code(fmt, "q", codes, v, b, wrong, scale, head)
        first_codes = first_codes or agreement(fmt, codes, v, b, outside=wrong)
    record(first_codes)
    raise ConformanceError(first + ("\n  nor within the window of the unrounded sum's normalization (the other correct "
                                    "convention)" if operations.of(case.norm).fuses else ""))


def scale_bound(bound: np.ndarray, scale_exact: np.ndarray, qdtype: str, group: int | None = None) -> np.ndarray:
    """How far a correct kernel's scale of each group of ``group`` elements of a row (the whole row: None) may be
    from the exact one (module doc)."""
    with np.errstate(invalid="ignore"):
        finite = np.where(np.isfinite(bound), bound, 0.0)
        return np.nanmax(groups_of(finite, group or finite.shape[1]), axis=2) / qmax(qdtype) \
            + (2 * U32 + 4 * U64) * scale_exact


def groups_of(a: np.ndarray, group: int, fill: float = 0.0) -> np.ndarray:
    """``a`` (rows, n) as (rows, groups, group): each row's consecutive groups of ``group`` elements, the last one
    filled out with ``fill`` where ``group`` does not divide n (0: a reduction to an absmax or a finiteness is
    unchanged by it)."""
    m, n = a.shape
    count = -(-n // group)
    if count * group != n:
        a = np.concatenate([a, np.full((m, count * group - n), fill, dtype=a.dtype)], axis=1)
    return a.reshape(m, count, group)


def per_element(per_group: np.ndarray, group: int, n: int) -> np.ndarray:
    """A value per group of ``group`` elements (rows, groups) repeated over its elements: (rows, n)."""
    return np.repeat(per_group, group, axis=1)[:, :n]


def check_dynamic(inputs: Inputs, q: np.ndarray, scales: np.ndarray, head: str, record=lambda codes: None) -> None:
    """Dynamic scales, one per group of a row's elements (the operation's epilogue says how many: one per row
    today), within their bound of the exact ones, and the codes judged against the kernel's own scales, under one
    convention (module doc); ``record(codes)`` as :func:`check_static`'s (a group whose scale is wrong has its codes
    counted against the exact scale: exact or wrong). In a group with a NaN or Inf, the scale is not judged; a NaN
    y's float8 code must be NaN."""
    __tracebackhide__ = True
    case, fmt = inputs.case, qformat(inputs.case.qdtype)
    epilogue = operations.of(case.norm).epilogue
    problems, recorded = [], []
    for ref in references(inputs):
        m, n = ref.y.shape
        group, count = epilogue.group(n), epilogue.scales_per_row(n)
        spread = lambda per_group, group=group, n=n: per_element(per_group, group, n)  # noqa: E731
        codes = np.asarray(q).reshape(m, n)
        mine = np.asarray(scales, dtype=np.float64).reshape(m, count)
        bound = error_model.forward_bound(ref, case.dtype)
        finite_groups = groups_of(np.isfinite(ref.y), group, fill=True).all(axis=2)
        with np.errstate(invalid="ignore"):
            absmax = np.max(groups_of(np.abs(ref.y), group), axis=2)
            exact = dynamic_scale(absmax, case.qdtype, case.scale_ub)
            bare = dynamic_scale(absmax, case.qdtype, case.scale_ub, floor=0.0)
            allowance = scale_bound(bound, exact, case.qdtype, group)
            scale_ok = ((np.abs(mine - exact) <= allowance)
                        | (np.abs(mine - bare) <= scale_bound(bound, bare, case.qdtype, group))
                        | (absmax == 0) & np.isfinite(mine) & (mine >= 0))  # an all-zero group: any floor, even 0
        bad_scale = finite_groups & ~scale_ok
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            own, exact_each = spread(mine), spread(exact)
            v = np.where(ref.y == 0, 0.0, ref.y / own)  # a zero y is code 0 whatever the scale
            exact_v = np.where(ref.y == 0, 0.0, ref.y / exact_each)
            b = np.where(own == 0, 0.0, window(bound, v, own))  # a zero scale: an all-zero group
        good = spread(finite_groups & ~bad_scale)
        outside = violations(fmt, codes, v, b)
        codes_seen = _with_wrong_rows(agreement(fmt, codes, v, b, good, outside), fmt, codes, exact_v,
                                      spread(bad_scale))
        recorded.append(codes_seen)
        if bad_scale.any():
            r, j = np.unravel_index(int(np.argmax(np.where(bad_scale, np.abs(mine - exact) / np.maximum(allowance, 1e-300),
                                                           -1))), bad_scale.shape)
            at, whose, of = ((f"{r}", "row's", f"{m} row") if count == 1 else
                             (f"{r}, {j}", "group's", f"{m * count} group"))
            problems.append(f"{head}scales[{at}] = {mine[r, j]:.9g}, exact {exact[r, j]:.9g} (the {whose} absmax "
                            f"{absmax[r, j]:.9g}, scale_ub {case.scale_ub}, floor {scale_floor(case.qdtype):.9g}; "
                            f"{bare[r, j]:.9g} without a floor); |error| {abs(mine[r, j] - exact[r, j]):.3g} > bound "
                            f"{allowance[r, j]:.3g}; {int(bad_scale.sum())} of {of} scales wrong")
            continue
        wrong = outside & good
        if fmt.has_nan:  # groups with a NaN: its code must be NaN, whatever the scale
            wrong |= ~spread(finite_groups) & np.isnan(ref.y) & ~np.isnan(fmt.values(codes))
        if wrong.any():
            problems.append(describe_code(fmt, "q", codes, v, b, wrong, own, head))
            continue
        record(codes_seen)
        return
    record(recorded[0])
    raise ConformanceError(problems[0] + ("\n  nor under the unrounded sum's normalization (the other correct "
                                          "convention)" if len(problems) > 1 else ""))


def _with_wrong_rows(text: str, fmt: QFormat, codes: np.ndarray, exact_v: np.ndarray, bad: np.ndarray) -> str:
    """``text`` (the agreement of the other elements) plus the elements whose scale is wrong (``bad``, codes' shape),
    each judged code counted exact when it is the exact scale's exact code, else wrong."""
    exact, allowed_codes, wrong = parse_codes(text)
    if not bad.any():
        return text
    rows, want_v = codes[bad], exact_v[bad]
    judged = fmt.judged(want_v)
    value, want = fmt.values(rows), fmt.values(fmt.quantize(want_v))
    same = judged & ((value == want) | (np.isnan(value) & np.isnan(want)))
    return codes_text(exact + int(same.sum()), allowed_codes, wrong + int((judged & ~same).sum()))
