"""The parts an operation is composed of: one normalization, an optional prologue, an optional epilogue.

Every operation normbench knows is ``epilogue(prologue(normalization))``
(:func:`normbench.core.operations.compose`):

* a :class:`Normalization` (LayerNorm, RMSNorm) owns its contract (parameters, statistics, gradients), its numerical
  facts (``centered``, ``has_bias``, ``default_eps``), its byte model, case families and hypotheses;
* a prologue, :class:`ResidualAdd`, adds a residual into x first (``residual_out = x + residual``, docs/fused.md);
* an epilogue, :class:`Quantize`, stores y as codes for the next matrix multiply (docs/quantized.md), with its scale
  as three values: who sets it (``given``: a static scale; ``computed``: the kernel's own), its granularity (one
  scale for the ``tensor``, one per ``row``) and its type (``float32``).

Each part owns everything about itself: the parameters and outputs it adds to the contract, its traffic terms, its
name, label and case-id prefix, the case values it adds (:attr:`ResidualAdd.case_values`: a
:class:`normbench.core.cases.Case` field each) and their validation (:meth:`ResidualAdd.settle`, and the message a
case of an operation without the part gets: :meth:`ResidualAdd.refuse`), the error terms its outputs add, and the
judges of its outputs, by output name (:attr:`ResidualAdd.judges`: the kind of judge ``normbench.check`` runs). The
rest of the harness reads an operation's parts instead of re-deciding what a kind of operation means.

**Adding a part, or a value of one** (docs/architecture.md, "Operations composed from parts"): a scale per block
of 32 elements is a :class:`Quantize` whose granularity is 32 (its scales' extent ``M*N/G``: :class:`Traffic`);
its name, id prefix, validation and judge follow from the values; :data:`EPILOGUES` lists the epilogues the
operations are generated with.

>>> DYNAMIC_QUANT.mode, DYNAMIC_QUANT.name_suffix, RESIDUAL_ADD.name_prefix + RMS_NORM_PART.name
('dynamic', '_dynamic_quant', 'add_rms_norm')
>>> DYNAMIC_QUANT.scales_per_row(4096), Quantize("computed", 128).scales_per_row(4096)
(1, 32)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.core.dtypes import default_rms_eps
from normbench.core.exceptions import InvalidInput
from normbench.core.quantized import QDTYPES

#: a tensor's element count: rows M times the normalized size N, N, M, or one per group of G elements of each row
#: (``M*N/G``: ``M * ceil(N / G)``, G the epilogue's granularity)
EXTENTS = ("M*N", "N", "M", "M*N/G")


@dataclass(frozen=True)
class Traffic:
    """One tensor a direction must move: ``tensor`` is ``read`` or ``written``; it holds ``extent`` elements
    (:data:`EXTENTS`) of ``element`` bytes: ``"x"`` (x's dtype), ``"residual"`` (the residual stream's dtype, a fused
    operation's), ``"weight"``/``"bias"`` (the parameters' dtype, 0 where the case has none), ``"fp32"`` (4, statistics
    and float32 scales) or ``"q"`` (1, a quantized output's code)."""

    tensor: str
    access: str
    extent: str
    element: str

    def __post_init__(self) -> None:
        assert self.access in ("read", "written") and self.extent in EXTENTS \
            and self.element in ("x", "residual", "weight", "bias", "fp32", "q"), self

    def elements(self, rows: int, hidden: int, group: int | None = None) -> int:
        """How many elements the tensor holds for M = ``rows``, N = ``hidden`` (``group``: G, for ``M*N/G``).

        >>> Traffic("scales", "written", "M*N/G", "fp32").elements(3, 100, 32)  # 4 groups per row, the last partial
        12
        """
        if self.extent == "M*N/G":
            if not group:
                raise ValueError(f"{self.tensor}'s extent M*N/G needs the group size G")
            return rows * math.ceil(hidden / group)
        return {"M*N": rows * hidden, "N": hidden, "M": rows}[self.extent]


def reads(*terms: tuple[str, str, str]) -> tuple[Traffic, ...]:
    return tuple(Traffic(t, "read", extent, element) for t, extent, element in terms)


def writes(*terms: tuple[str, str, str]) -> tuple[Traffic, ...]:
    return tuple(Traffic(t, "written", extent, element) for t, extent, element in terms)


@dataclass(frozen=True)
class Families:
    """The case families (``normbench.core.cases``'s names) each suite runs on an operation."""

    forward: tuple[str, ...]
    backward: tuple[str, ...]
    gradcheck: tuple[str, ...] = ("gradcheck",)
    #: the paper's Table 1 (§5.1) and gradient geometry (§5.2)
    invariance: tuple[str, ...] = ("invariance",)
    geometry: tuple[str, ...] = ("geometry",)
    #: the throughput sweeps of a GPU and of a CPU
    throughput_gpu: tuple[str, ...] = ("throughput_gpu",)
    throughput_cpu: tuple[str, ...] = ("throughput_cpu",)


#: the families every normalization's forward and backward suites run (``normbench.core.cases``)
NORMALIZATION_FORWARD = ("hidden", "multidim", "rows", "rank", "affine", "mixed", "eps", "dist", "constant",
                         "layout", "nonfinite", "sweep")
NORMALIZATION_BACKWARD = ("affine", "mixed", "hidden", "multidim", "rows", "rank", "eps", "dist", "constant",
                          "layout", "nonfinite", "sweep")


# -- the normalization ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Normalization:
    """A normalization: ``torch.nn.functional``'s semantics over the trailing ``normalized_shape`` dims, weight of
    that shape or None, y in x's dtype. Its fields are what an :class:`~normbench.core.operations.Operation` built
    from it alone says (``normbench.core.operations``' module doc)."""

    name: str
    label: str
    formula: str
    id_prefix: str
    params: tuple[str, ...]
    gradients: tuple[str, ...]
    differentiable: tuple[str, ...]
    statistics: tuple[str, ...]
    centered: bool
    has_bias: bool
    error_terms: tuple[str, ...]
    traffic: Mapping[str, tuple[Traffic, ...]]
    hypotheses: tuple[str, ...]
    default_eps: Callable[[str], float] | None = None
    families: Families = field(default_factory=lambda: Families(NORMALIZATION_FORWARD, NORMALIZATION_BACKWARD))
    options: tuple[str, ...] = ()
    kind = "normalization"
    #: its outputs' judges: y and the saved statistics within the error model's bounds
    judges = {"y": "bounded", "mean": "bounded", "rstd": "bounded"}

    @staticmethod
    def call_values(case: Any) -> dict[str, Any]:
        """Its parameters' values in ``case`` as a backend's entry point takes them (the arrays aside)."""
        return {"normalized_shape": case.normalized_shape, "eps": case.eps}

    def contract(self) -> dict[str, Any]:
        """The operation it is alone, as :class:`~normbench.core.operations.Operation`'s keyword arguments."""
        return dict(name=self.name, label=self.label, formula=self.formula, id_prefix=self.id_prefix,
                    params=self.params, outputs=("y",), cotangents=("dy",), gradients=self.gradients,
                    differentiable=self.differentiable, statistics=self.statistics, error_terms=self.error_terms,
                    families=self.families, traffic=dict(self.traffic), hypotheses=self.hypotheses,
                    options=self.options)


_NORM_ERROR_TERMS = ("output rounding: 3*u_out*(|w*xhat| + |b|) + eta_out/2 per rounding",
                     "accumulation: k(N)*u_acc*|w|*(|x| + mean|x|)/sigma_eps, k(N) = 16 + 2*sqrt(N)")

LAYER_NORM_PART = Normalization(
    "layer_norm", "LayerNorm", "y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias", "",
    params=("x", "normalized_shape", "weight", "bias", "eps"), gradients=("dx", "dweight", "dbias"),
    differentiable=("x", "weight", "bias"), statistics=("mean", "rstd"), centered=True, has_bias=True,
    error_terms=_NORM_ERROR_TERMS + ("statistics: mean and rstd within the accumulation term and one rounding "
                                     "to their storage dtype",),
    traffic={
        "forward-inference": reads(("x", "M*N", "x"), ("weight", "N", "weight"), ("bias", "N", "bias"))
        + writes(("y", "M*N", "x")),
        "forward-training": reads(("x", "M*N", "x"), ("weight", "N", "weight"), ("bias", "N", "bias"))
        + writes(("y", "M*N", "x"), ("mean", "M", "fp32"), ("rstd", "M", "fp32")),
        "backward": reads(("x", "M*N", "x"), ("dy", "M*N", "x"), ("weight", "N", "weight"), ("mean", "M", "fp32"),
                          ("rstd", "M", "fp32"))
        + writes(("dx", "M*N", "x"), ("dweight", "N", "weight"), ("dbias", "N", "bias")),
    },
    hypotheses=("eps-float32", "one-pass-variance", "one-pass-negative-variance", "variance-floor",
                "half-accumulation", "sequential-mean", "lanes-sequential-1", "lanes-sequential-4", "lanes-sequential-8",
                "lanes-sequential-32", "padded-lanes", "eps-outside-sqrt", "bessel", "eps-ignored",
                "eps-fixed", "n1-identity", "float64-in-float32", "saved-statistics-input-dtype",
                "backward-rstd-without-eps", "dx-expanded", "dx-no-mean-term", "dx-mean-twice", "dx-no-projection",
                "dbias-times-weight", "dbias-severed", "dweight-last-block", "dweight-half-accumulation",
                "interpreter-bf16-truncation"),
)
RMS_NORM_PART = Normalization(
    "rms_norm", "RMSNorm", "y = x / sqrt(mean(x^2) + eps) * weight", "rms-",
    params=("x", "normalized_shape", "weight", "eps"), gradients=("dx", "dweight"), differentiable=("x", "weight"),
    statistics=(), centered=False, has_bias=False, default_eps=default_rms_eps,
    families=Families(NORMALIZATION_FORWARD + ("heads", "gemma"), NORMALIZATION_BACKWARD + ("heads", "gemma")),
    error_terms=("output rounding: 3*u_out*|w*xhat| + eta_out/2 per rounding",
                 "accumulation: k(N)*u_acc*|w*xhat| (a sum of squares: no cancellation, no mean term)"),
    options=("weight_offset",),
    traffic={
        "forward-inference": reads(("x", "M*N", "x"), ("weight", "N", "weight")) + writes(("y", "M*N", "x")),
        "forward-training": reads(("x", "M*N", "x"), ("weight", "N", "weight"))
        + writes(("y", "M*N", "x"), ("rstd", "M", "fp32")),
        "backward": reads(("x", "M*N", "x"), ("dy", "M*N", "x"), ("weight", "N", "weight"), ("rstd", "M", "fp32"))
        + writes(("dx", "M*N", "x"), ("dweight", "N", "weight")),
    },
    hypotheses=("eps-float32", "variance-floor", "half-accumulation", "lanes-sequential-1", "lanes-sequential-4",
                "lanes-sequential-8", "lanes-sequential-32", "padded-lanes", "eps-outside-sqrt",
                "eps-ignored", "eps-fixed", "float64-in-float32", "saved-statistics-input-dtype",
                "backward-rstd-without-eps", "dx-no-projection", "dweight-last-block", "dweight-half-accumulation",
                "interpreter-bf16-truncation"),
)
NORMALIZATIONS: tuple[Normalization, ...] = (LAYER_NORM_PART, RMS_NORM_PART)


# -- the prologue: the residual add ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResidualAdd:
    """``residual_out = x + residual``, rounded once to the residual's dtype, and the normalization of residual_out
    in x's dtype (docs/fused.md); the backward takes ``residual_out`` in place of x and the residual and returns
    ``dsum``, the gradient of both."""

    kind = "prologue"
    name_prefix = "add_"
    label_prefix = "Add+"
    id_prefix = "add-"
    #: the case values it adds: the residual's distribution (default "same": another draw of x's) and dtype (None: x's)
    case_values = ("residual", "residual_dtype")
    judges = {"residual_out": "exact", "dsum": "bounded"}

    def apply(self, base: dict[str, Any], norm: Normalization) -> dict[str, Any]:
        """``base`` (a normalization's contract) with the residual added in first."""
        params = ("x", "residual") + base["params"][1:]
        bias = norm.has_bias
        parameters = (("weight", "N", "weight"),) + ((("bias", "N", "bias"),) if bias else ())
        statistics = tuple(("mean", "M", "fp32") for _ in range(norm.centered)) + (("rstd", "M", "fp32"),)
        inference = (reads(("x", "M*N", "x"), ("residual", "M*N", "residual"), *parameters)
                     + writes(("y", "M*N", "x"), ("residual_out", "M*N", "residual")))
        gradients = ("dweight", "N", "weight"), *((("dbias", "N", "bias"),) if bias else ())
        families = base["families"]
        return {**base, "name": self.name_prefix + base["name"], "label": self.label_prefix + base["label"],
                "formula": f"residual_out = x + residual; "
                           f"y = {base['formula'].removeprefix('y = ').replace('x', 'residual_out')}",
                "id_prefix": self.id_prefix + base["id_prefix"], "params": params,
                "outputs": ("y", "residual_out"), "cotangents": ("dy", "dresidual_out"),
                "gradients": ("dsum",) + base["gradients"][1:], "differentiable": ("x",) + base["differentiable"][1:],
                "statistics": (),
                "error_terms": ("residual_out: bit for bit, x + residual rounded once to the residual's dtype",
                                f"y: {base['label']}'s bound around the normalization of residual_out, or of the "
                                f"unrounded sum (either convention, each whole)",
                                "dsum: dx's bound on residual_out plus the add's roundings, 3*u*|dresidual_out| + "
                                "u*|dsum|"),
                "families": Families(families.forward + ("residual",), families.backward + ("residual",),
                                     gradcheck=(), invariance=(), geometry=()),
                "traffic": {
                    "forward-inference": inference,
                    "forward-training": inference + writes(*statistics),
                    "backward": reads(("dy", "M*N", "x"), ("dresidual_out", "M*N", "residual"),
                                      ("residual_out", "M*N", "residual"), ("weight", "N", "weight"), *statistics)
                    + writes(("dsum", "M*N", "residual"), *gradients)},
                "backward_params": ("residual_out",) + base["params"][1:]}

    @staticmethod
    def call_values(case: Any) -> dict[str, Any]:
        """Its parameters' values in ``case`` as an entry point takes them: none (the residual is an array)."""
        return {}

    def settle(self, values: Mapping[str, Any], label: str) -> dict[str, Any]:
        """A fused case's values, defaults filled in (residual "same"), or :class:`InvalidInput` saying what is wrong."""
        from normbench.core.case_values import RESIDUALS
        from normbench.core.dtypes import DTYPES

        residual = "same" if values["residual"] is None else values["residual"]
        if residual not in RESIDUALS:
            raise InvalidInput(f"unknown residual {residual!r}; expected one of {', '.join(RESIDUALS)}")
        if values["residual_dtype"] is not None and values["residual_dtype"] not in DTYPES:
            raise InvalidInput(f"unknown residual dtype {values['residual_dtype']!r}; expected one of "
                               f"{', '.join(DTYPES)}")
        return {"residual": residual}

    @staticmethod
    def refuse(values: Mapping[str, Any], label: str) -> None:
        """A case of an operation without a residual add sets none of its values."""
        if values["residual"] is not None or values["residual_dtype"] is not None:
            raise InvalidInput(f"{label} adds no residual; residual and residual_dtype must be None")


RESIDUAL_ADD = ResidualAdd()
PROLOGUES: tuple[ResidualAdd, ...] = (RESIDUAL_ADD,)


# -- the epilogue: quantize --------------------------------------------------------------------------------------

#: the largest finite float32 and the smallest positive one (a subnormal): a float32 scale is held as one
_FLOAT32_MAX, _FLOAT32_TINY = 3.4028234663852886e38, 1.401298464324817e-45


def float32_scale(value: object) -> bool:
    """Whether ``value`` is a number (not a bool or a string) that stays finite and > 0 in float32, as a kernel
    holds a scale: 1e39 becomes inf there and 1e-46 becomes 0, and either would pass with overflow warnings.

    >>> [float32_scale(v) for v in (1.0, 0.01, 1e39, 1e-46, 0.0, -1.0, float("nan"), "1", True)]
    [True, True, False, False, False, False, False, False, False]
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        return False
    if not (math.isfinite(value) and value > 0):
        return False
    with np.errstate(over="ignore", under="ignore"):
        held = np.float32(value)
    return bool(np.isfinite(held) and held > 0)


#: who sets a quantization's scale: the caller (static) or the kernel, from the absolute maximum (dynamic)
SCALE_SOURCES = ("given", "computed")
#: a scale's type: a float32 (a power of two, E8M0, and an e4m3 scale are the block-scaled issue's)
SCALE_TYPES = ("float32",)
#: the block sizes a computed scale may have besides one per row: one scale per G consecutive elements of a row, the
#: last block of a row partial where G does not divide it
BLOCK_SIZES = (16, 32, 64, 128)


@dataclass(frozen=True)
class Quantize:
    """y stored as codes for the next matrix multiply (docs/quantized.md): ``q = saturate(round_to_nearest_even(y /
    scale))`` in ``qdtype`` (``float8_e4m3fn``, ``float8_e5m2``, ``int8``). The scale is ``given`` (one float32 for the
    ``tensor``, the ``*_quant`` operations) or ``computed`` by the kernel, one per ``row`` (the ``*_dynamic_quant``
    ones: ``max(min(absmax(y_row), scale_ub) / qmax, 1 / (qmax * 512))``, returned with q), of ``scale_type``.
    Inference only: an operation with it has no backward. A fused base keeps its ``residual_out``."""

    scale: str
    granularity: str | int = "tensor"
    scale_type: str = "float32"
    kind = "epilogue"
    #: the case values it adds: the format, a given scale, and an upper bound on a computed scale's absmax
    case_values = ("qdtype", "scale", "scale_ub")
    judges = {"q": "codes", "scales": "scales"}

    def __post_init__(self) -> None:
        granularity_ok = self.granularity in (("tensor",) if self.given else ("row", *BLOCK_SIZES))
        if self.scale not in SCALE_SOURCES or self.scale_type not in SCALE_TYPES or not granularity_ok:
            raise ValueError(f"Quantize({self.scale!r}, {self.granularity!r}, {self.scale_type!r}): a given scale is "
                             f"one per tensor; a computed one is one per row or per block of "
                             f"{', '.join(map(str, BLOCK_SIZES))} elements; each float32")

    @property
    def given(self) -> bool:
        return self.scale == "given"

    @property
    def mode(self) -> str:
        """``static`` (the scale given) or ``dynamic`` (computed): what operations and results call it."""
        return "static" if self.given else "dynamic"

    @property
    def name_suffix(self) -> str:
        """What it adds to its base's name: ``_quant`` (given), ``_dynamic_quant`` (one per row), and for a block of G
        ``_block<G>_quant`` (no operation has one yet: the block-scaled issue names them)."""
        if self.granularity in ("tensor", "row"):
            return "_quant" if self.given else "_dynamic_quant"
        return f"_block{self.granularity}_quant"

    @property
    def id_prefix(self) -> str:
        """What it adds before its base's case-id prefix: ``q-``, ``dq-``, ``bq<G>-``."""
        if self.granularity in ("tensor", "row"):
            return "q-" if self.given else "dq-"
        return f"bq{self.granularity}-"

    def scales_per_row(self, hidden: int) -> int | None:
        """How many scales a computed quantization returns per row of ``hidden`` elements; None for a given scale."""
        if self.given:
            return None
        return 1 if self.granularity == "row" else math.ceil(hidden / int(self.granularity))

    def group(self, hidden: int) -> int | None:
        """The elements of a row that share one scale: the row's ``hidden`` for one per row; None for a given one."""
        if self.given:
            return None
        return hidden if self.granularity == "row" else int(self.granularity)

    def apply(self, base: dict[str, Any], norm: Normalization) -> dict[str, Any]:
        """``base`` (a normalization's contract, perhaps with a prologue) with its y quantized."""
        static = self.given
        extra = ("scale", "qdtype") if static else ("qdtype", "scale_ub")
        block = self.granularity not in ("tensor", "row")
        whose = f"block of {self.granularity}" if block else "row"
        formula = (f"{base['formula']}; q = Q(y / scale)" if static
                   else f"{base['formula']}; scales = max(min(absmax(y{'_block' if block else ''}), scale_ub) / qmax, "
                        f"1/(qmax*512)); q = Q(y / scales)")
        scales = () if static else (("scales", "M*N/G" if block else "M", "fp32"),)
        kind = f"block-{self.granularity}" if block else self.mode
        return {**base, "name": base["name"] + self.name_suffix, "label": f"{base['label']}+{kind} quant",
                "formula": formula, "id_prefix": self.id_prefix + base["id_prefix"],
                "params": base["params"] + extra, "outputs": ("q",) + (() if static else ("scales",))
                + base["outputs"][1:], "cotangents": (), "gradients": (), "differentiable": (), "statistics": (),
                "error_terms": (f"q: every code between Q(v - b) and Q(v + b), v = y_exact / scale, b = B / |scale| + "
                                f"2*u32*|v|, B {base['label']}'s bound on y", "saturation exact; NaN stays NaN in float8")
                + (() if static else (f"scales: within max_{whose.split()[0]}(B) / qmax + 2*u32*scale of the exact "
                                      f"{whose} scale, with the floor or without; an all-zero {whose} any finite "
                                      f"scale >= 0, codes 0; q judged against the kernel's own scales",))
                + (base["error_terms"][:1] if "residual_out" in base["outputs"] else ()),
                "families": Families(("quant",), (), gradcheck=(), invariance=(), geometry=(), throughput_gpu=(),
                                     throughput_cpu=()),
                "traffic": {"forward-inference": tuple(t for t in base["traffic"]["forward-inference"]
                                                       if t.tensor != "y")
                            + writes(("q", "M*N", "q"), *scales)},
                "hypotheses": (), "backward_params": (), "options": ()}

    def call_values(self, case: Any) -> dict[str, Any]:
        """Its parameters' values in ``case`` as an entry point takes them: the format, and a given scale as the
        float32 it is held in (a Python float) or a computed one's upper bound on the absmax."""
        if self.given:
            return {"qdtype": case.qdtype, "scale": float(np.float32(case.scale))}
        return {"qdtype": case.qdtype, "scale_ub": case.scale_ub}

    def settle(self, values: Mapping[str, Any], label: str) -> dict[str, Any]:
        """Validates a quantized case's values: a qdtype; a given scale, a number finite and > 0 in float32
        (:func:`float32_scale`), and no scale_ub; a computed one no scale, and scale_ub None or such a number."""
        qdtype, scale, scale_ub = values["qdtype"], values["scale"], values["scale_ub"]
        if qdtype not in QDTYPES:
            raise InvalidInput(f"{label} needs a qdtype, one of {', '.join(QDTYPES)}; got {qdtype!r}")
        float32_range = f"a number finite and > 0 in float32 ({_FLOAT32_TINY:.3g} to {_FLOAT32_MAX:.4g})"
        if self.given and (scale_ub is not None or not float32_scale(scale)):
            raise InvalidInput(f"{label} needs a scale, {float32_range}, and no scale_ub; got scale {scale!r}"
                               + ("" if scale_ub is None else f", scale_ub {scale_ub!r}"))
        if not self.given and (scale is not None or scale_ub is not None and not float32_scale(scale_ub)):
            raise InvalidInput(f"{label} returns its scales: scale must be None, and scale_ub None or "
                               f"{float32_range}; got scale {scale!r}, scale_ub {scale_ub!r}")
        return {}

    @staticmethod
    def refuse(values: Mapping[str, Any], label: str) -> None:
        """A case of an operation without a quantized output sets none of its values."""
        if (values["qdtype"], values["scale"], values["scale_ub"]) != (None, None, None):
            raise InvalidInput(f"{label} has no quantized output; qdtype, scale and scale_ub must be None")


STATIC_QUANT = Quantize("given", "tensor")
DYNAMIC_QUANT = Quantize("computed", "row")
#: the epilogues the operations are generated with, in the order of :data:`normbench.core.operations.OPERATIONS`
EPILOGUES: tuple[Quantize, ...] = (STATIC_QUANT, DYNAMIC_QUANT)
#: each kind of optional part, with the parts of that kind: a case sets a part's values only where its operation
#: has it (:func:`settle`)
OPTIONAL_KINDS: tuple[tuple[str, tuple[Any, ...]], ...] = (("prologue", PROLOGUES), ("epilogue", EPILOGUES))


def settle(op: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """A case's values for ``op``'s optional parts, validated by each (defaults filled in: what to set on the case);
    a value of a part ``op`` does not have refused, saying so (:class:`InvalidInput`)."""
    settled: dict[str, Any] = {}
    for kind, parts in OPTIONAL_KINDS:
        mine = getattr(op, kind)
        if mine is not None:
            settled.update(mine.settle(values, op.label))
        else:
            type(parts[0]).refuse(values, op.label)
    return settled
