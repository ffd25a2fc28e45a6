"""The quantized formats a normalization's output is stored in for the next matrix multiply, and the exact
quantization of a real number into each (docs/quantized.md).

Three formats, by name: ``float8_e4m3fn`` (max 448, no infinity, NaN kept), ``float8_e5m2`` (max 57344, NaN kept),
``int8`` (-128..127, no NaN). Quantizing ``v`` (float64, the exact ``y / scale``) is
``saturate(round_to_nearest_even(v))``: clamp to the format's range, then round once to the nearest code, ties to
the even code. Done here in float64 exactly, one rounding: ``ml_dtypes``' own conversion from float64 goes through
float32 first, a double rounding (1 + 2^-4 + 2^-30 becomes 1.0, not 1.125, in e4m3fn), so it is not used for the
oracle. Host arrays of codes use ``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2`` and ``numpy.int8``.

>>> E4M3.quantize(np.array([464.0, 500.0, -1e9, 1 + 2**-4 + 2**-30])).astype(np.float64).tolist()
[448.0, 448.0, -448.0, 1.125]
>>> INT8.quantize(np.array([127.6, -128.5, 2.5, -2.5, 3.5])).tolist()
[127, -128, 2, -2, 4]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

QDTYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "int8")


@dataclass(frozen=True)
class QFormat:
    """One quantized format: its name, short name (case ids), host dtype, range and whether it has NaN."""

    name: str
    short: str
    host: np.dtype
    max: float
    min: float
    has_nan: bool
    #: every finite non-negative value of the format, ascending, and whether its code is even (ties go there)
    _positive: np.ndarray = field(repr=False, compare=False, default=None)
    _even: np.ndarray = field(repr=False, compare=False, default=None)

    @property
    def integer(self) -> bool:
        return self.host.kind == "i"

    def quantize(self, v: np.ndarray) -> np.ndarray:
        """``saturate(round_to_nearest_even(v))`` of float64 ``v``, as host codes; NaN stays NaN in a float8 format
        (in int8, which has no NaN, a NaN becomes 0 here and is never judged: :func:`judged`)."""
        v = np.asarray(v, dtype=np.float64)
        clamped = np.clip(v, self.min, self.max)
        if self.integer:
            return np.where(np.isnan(clamped), 0.0, np.rint(clamped)).astype(self.host)
        magnitude = np.abs(clamped)
        upper = np.searchsorted(self._positive, magnitude, side="left").clip(0, len(self._positive) - 1)
        lower = np.maximum(upper - 1, 0)
        below, above = self._positive[lower], self._positive[upper]
        pick_above = (above - magnitude < magnitude - below) | (
            (above - magnitude == magnitude - below) & self._even[upper] & ~self._even[lower])
        chosen = np.where(magnitude >= above, above, np.where(pick_above, above, below))
        out = np.copysign(chosen, clamped)
        out = np.where(np.isnan(clamped), np.nan, out)
        return out.astype(self.host)  # exact: every value is the format's

    def values(self, q: np.ndarray) -> np.ndarray:
        """Codes as float64 values."""
        return np.asarray(q).astype(np.float64)

    def judged(self, reference: np.ndarray) -> np.ndarray:
        """Where a code is judged: everywhere in float8 (NaN must stay NaN), where the reference is not NaN in int8."""
        return np.ones(np.shape(reference), bool) if not self.integer else ~np.isnan(reference)

    def step(self, v: np.ndarray) -> np.ndarray:
        """The distance from ``|v|``'s code to the next larger one (the format's step there; the last step at and
        beyond the maximum)."""
        if self.integer:
            return np.ones(np.shape(v))
        magnitude = np.clip(np.abs(np.asarray(v, dtype=np.float64)), 0, self.max)
        i = np.searchsorted(self._positive, magnitude, side="right").clip(1, len(self._positive) - 1)
        return self._positive[i] - self._positive[i - 1]


def _float8(name: str, short: str, host) -> QFormat:
    codes = np.arange(256, dtype=np.uint8).view(host)
    values = codes.astype(np.float64)
    keep = np.isfinite(values) & (values >= 0) & ~np.signbit(values)
    positive, bits = values[keep], np.arange(256)[keep]
    order = np.argsort(positive, kind="stable")
    positive, bits = positive[order], bits[order]
    info = ml_dtypes.finfo(host)
    return QFormat(name, short, np.dtype(host), float(info.max), -float(info.max), True, positive, (bits & 1) == 0)


E4M3 = _float8("float8_e4m3fn", "e4m3", ml_dtypes.float8_e4m3fn)
E5M2 = _float8("float8_e5m2", "e5m2", ml_dtypes.float8_e5m2)
INT8 = QFormat("int8", "int8", np.dtype(np.int8), 127.0, -128.0, False)
FORMATS: dict[str, QFormat] = {f.name: f for f in (E4M3, E5M2, INT8)}
assert tuple(FORMATS) == QDTYPES


def qformat(name: str) -> QFormat:
    """The format called ``name`` (a :data:`QDTYPES` entry)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown quantized dtype {name!r}; expected one of {', '.join(QDTYPES)}") from None


def qmax(name: str) -> float:
    """The largest magnitude a dynamic scale maps the row's absolute maximum to: 448, 57344, 127."""
    return qformat(name).max


def dynamic_scale(absmax: np.ndarray, qdtype: str, scale_ub: float | None = None,
                  floor: float | None = None) -> np.ndarray:
    """The per-row scale of dynamic quantization, exactly (float64): ``max(min(absmax, scale_ub) / qmax, floor)``,
    the floor by default vLLM's CUDA kernels' ``1 / (qmax * 512)``, so that an all-zero row divides by a positive
    number (docs/quantized.md; ``floor=0.0``: none, as vLLM's CPU kernel)."""
    top = qmax(qdtype)
    bounded = np.asarray(absmax, dtype=np.float64) if scale_ub is None else np.minimum(absmax, scale_ub)
    return np.maximum(bounded / top, scale_floor(qdtype) if floor is None else floor)


def scale_floor(qdtype: str) -> float:
    """The smallest dynamic scale: ``1 / (qmax * 512)`` (vLLM's ``min_scaling_factor``)."""
    return 1.0 / (qmax(qdtype) * 512.0)
