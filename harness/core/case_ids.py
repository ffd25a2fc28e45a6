"""A case's id: one grammar, written and parsed here and nowhere else.

``[q-|dq-][add-][rms-]DTYPE[-paramsDTYPE][-residualDTYPE]-rowsLEAD-hiddenSHAPE-DIST[-epsNUM|-epsdefault]
[-weightonly|-biasonly|-noaffine][-LAYOUT][-dybroadcast][-residualKIND][-weightoffsetNUM][-perhead][-FORMAT]
[-scaleNUM][-ubNUM]``: the operation's prefix, x's dtype, the parameters' and the residual's where they differ
from x's, the leading (row) dims (``none`` for none) and the normalized ones, the distribution, then each value
that is not its default, in that order. Numbers are written with ``:g`` (``1e-05``: a ``-`` inside a part, which
is why the id is parsed by the grammar, never split on ``-``).

:func:`write` renders a case (a :class:`normbench.core.cases.Case`, or the :class:`CaseId` :func:`parse` returns);
:func:`parse` reads an id back into its values, so that ``write(parse(id)) == id`` for every case normbench makes.
An id this grammar does not parse (another normbench's) still names its operation by its prefix
(:func:`operation_of`).

>>> parsed = parse("q-add-rms-bfloat16-residualfloat32-rows5-hidden33-sigma1e-2-eps1e-06-e4m3-scale0.01")
>>> parsed.norm, parsed.dtype, parsed.residual_dtype, parsed.dist, parsed.eps, parsed.qdtype, parsed.scale
('add_rms_norm_quant', 'bfloat16', 'float32', 'sigma1e-2', 1e-06, 'float8_e4m3fn', 0.01)
>>> write(parsed)
'q-add-rms-bfloat16-residualfloat32-rows5-hidden33-sigma1e-2-eps1e-06-e4m3-scale0.01'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from normbench.core import operations
from normbench.core.case_values import DISTRIBUTIONS, LAYOUTS, RESIDUALS
from normbench.core.dtypes import DTYPES
from normbench.core.quantized import QDTYPES, qformat

#: the default eps a case id leaves unsaid
DEFAULT_EPS = 1e-5
#: the affine words of an id, for an affine that is not the operation's default (weight and bias; RMSNorm: weight)
AFFINE_WORDS = {"w": "weightonly", "b": "biasonly", "none": "noaffine"}


@dataclass(frozen=True)
class CaseId:
    """The values a case id says, by the names :class:`normbench.core.cases.Case` gives them (``residual_dtype`` and
    ``param_dtype`` None where the id leaves them x's, ``residual`` ``"same"`` for a fused operation's default)."""

    norm: str
    dtype: str
    shape: tuple[int, ...]
    normalized_shape: tuple[int, ...]
    dist: str
    eps: float | None = DEFAULT_EPS
    affine: str = "wb"
    param_dtype: str | None = None
    residual_dtype: str | None = None
    layout: str = "contiguous"
    dy_broadcast: bool = False
    residual: str | None = None
    weight_offset: float = 0.0
    per_head: bool = False
    qdtype: str | None = None
    scale: float | None = None
    scale_ub: float | None = None

    @property
    def id(self) -> str:
        return write(self)


def _dims(dims: tuple[int, ...]) -> str:
    return "x".join(map(str, dims))


def write(case: Any) -> str:
    """The id of ``case`` (anything with :class:`CaseId`'s attributes: a ``Case``, a ``CaseId``).

    >>> write(CaseId("rms_norm", "float16", (65, 1000), (1000,), "offset1e3", affine="w"))
    'rms-float16-rows65-hidden1000-offset1e3'
    """
    op = operations.of(case.norm)
    lead = case.shape[: len(case.shape) - len(case.normalized_shape)]
    parts = [op.id_prefix + case.dtype]
    if case.param_dtype and case.param_dtype != case.dtype:
        parts.append(f"params{case.param_dtype}")
    if case.residual_dtype and case.residual_dtype != case.dtype:
        parts.append(f"residual{case.residual_dtype}")
    parts.append("rows" + (_dims(lead) if lead else "none"))
    parts.append("hidden" + _dims(case.normalized_shape))
    parts.append(case.dist)
    if case.eps is None:
        parts.append("epsdefault")
    elif case.eps != DEFAULT_EPS:
        parts.append(f"eps{case.eps:g}")
    if case.affine != ("wb" if op.has_bias else "w"):
        parts.append(AFFINE_WORDS[case.affine])
    if case.layout != "contiguous":
        parts.append(case.layout)
    if case.dy_broadcast:
        parts.append("dybroadcast")
    if case.residual not in (None, "same"):
        parts.append(f"residual{case.residual}")
    if case.weight_offset:
        parts.append(f"weightoffset{case.weight_offset:g}")
    if case.per_head:
        parts.append("perhead")
    if case.qdtype is not None:
        parts.append(qformat(case.qdtype).short)
    if case.scale is not None:
        parts.append(f"scale{case.scale:g}")
    if case.scale_ub is not None:
        parts.append(f"ub{case.scale_ub:g}")
    return "-".join(parts)


def _either(words) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))  # the longest first: offset1e3 > offset3


_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|inf|-inf|nan"
_DIMS = r"\d+(?:x\d+)*"


@lru_cache(maxsize=1)
def _grammar() -> re.Pattern:
    dtype = _either(DTYPES)
    prefixes = _either(op.id_prefix for op in operations.OPERATIONS if op.id_prefix)
    return re.compile(
        rf"(?P<prefix>(?:{prefixes})?)(?P<dtype>{dtype})(?:-params(?P<param_dtype>{dtype}))?"
        rf"(?:-residual(?P<residual_dtype>{dtype}))?-rows(?P<lead>none|{_DIMS})-hidden(?P<hidden>{_DIMS})"
        rf"-(?P<dist>{_either(DISTRIBUTIONS)})(?:-eps(?P<eps>default|{_NUMBER}))?"
        rf"(?:-(?P<affine>{_either(AFFINE_WORDS.values())}))?"
        rf"(?:-(?P<layout>{_either(name for name in LAYOUTS if name != 'contiguous')}))?(?P<dyb>-dybroadcast)?"
        rf"(?:-residual(?P<residual>{_either(RESIDUALS)}))?(?:-weightoffset(?P<weight_offset>{_NUMBER}))?"
        rf"(?P<per_head>-perhead)?(?:-(?P<qformat>{_either(qformat(q).short for q in QDTYPES)}))?"
        rf"(?:-scale(?P<scale>{_NUMBER}))?(?:-ub(?P<scale_ub>{_NUMBER}))?")


@lru_cache(maxsize=1 << 16)  # a report reads each id of its rows: a few thousand distinct ones
def parse(case_id: str) -> CaseId | None:
    """The values ``case_id`` says (:class:`CaseId`), or None when the grammar does not parse it.

    >>> parse("float32-rowsnone-hidden8x16-normal-eps0-noaffine-step2").shape
    (8, 16)
    >>> parse("not a case") is None
    True
    """
    found = _grammar().fullmatch(str(case_id))
    if found is None:
        return None
    g = found.groupdict()
    op = next(o for o in operations.OPERATIONS if o.id_prefix == g["prefix"])
    lead = () if g["lead"] == "none" else tuple(int(d) for d in g["lead"].split("x"))
    hidden = tuple(int(d) for d in g["hidden"].split("x"))
    words = {word: affine for affine, word in AFFINE_WORDS.items()}
    number = lambda text: None if text is None else float(text)
    return CaseId(
        norm=op.name, dtype=g["dtype"], shape=lead + hidden, normalized_shape=hidden, dist=g["dist"],
        eps=None if g["eps"] == "default" else DEFAULT_EPS if g["eps"] is None else float(g["eps"]),
        affine=words[g["affine"]] if g["affine"] else ("wb" if op.has_bias else "w"),
        param_dtype=g["param_dtype"], residual_dtype=g["residual_dtype"], layout=g["layout"] or "contiguous",
        dy_broadcast=bool(g["dyb"]), residual=g["residual"] or ("same" if op.fuses else None),
        weight_offset=number(g["weight_offset"]) or 0.0, per_head=bool(g["per_head"]),
        qdtype=next(q for q in QDTYPES if qformat(q).short == g["qformat"]) if g["qformat"] else None,
        scale=number(g["scale"]), scale_ub=number(g["scale_ub"]))


def operation_of(case_id: str) -> operations.Operation:
    """The operation a case id names; one the grammar does not parse, by its longest operation prefix (an id
    without one is LayerNorm's, whose ids predate the others).

    >>> operation_of("rms-float16-rows5-hidden33-offset3").name, operation_of("float16-rows5-hidden33-offset3").name
    ('rms_norm', 'layer_norm')
    >>> operation_of("add-rms-float16-rows5-hidden33-offset3").name, operation_of("add-float16-a-newer-id").name
    ('add_rms_norm', 'add_layer_norm')
    """
    parsed = parse(case_id)
    if parsed is not None:
        return operations.of(parsed.norm)
    prefixed = [op for op in operations.OPERATIONS if op.id_prefix and str(case_id).startswith(op.id_prefix)]
    return max(prefixed, key=lambda op: len(op.id_prefix)) if prefixed else operations.of("layer_norm")


def dtype_of(case_id: str) -> str:
    """x's dtype in a case id, or "" when it names none (``rms-float32-rows65-...`` -> ``float32``)."""
    parsed = parse(case_id)
    if parsed is not None:
        return parsed.dtype
    head = str(case_id).removeprefix(operation_of(case_id).id_prefix).split("-", 1)[0]
    return head if head in DTYPES else ""


def qdtype_of(case_id: str) -> str:
    """The quantized format a case id names (``...-e4m3-scale0.01`` -> ``float8_e4m3fn``), or ""."""
    parsed = parse(case_id)
    return (parsed.qdtype or "") if parsed is not None else ""
