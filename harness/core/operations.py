"""The operations normbench knows, each a unit: one entry says everything specific to it.

An operation is what a backend computes and normbench checks and times. Two normalizations, with
``torch.nn.functional``'s semantics (normalize over the trailing ``normalized_shape`` dims,
weight of that shape or None, y in x's dtype):

* ``layer_norm``: ``y = (x - mean) / sqrt(var + eps) * weight + bias``, biased variance;
* ``rms_norm``: ``y = x / sqrt(mean(x^2) + eps) * weight``: no mean, no bias; ``eps=None``
  means :func:`normbench.core.dtypes.default_rms_eps` (what torch does);

the same two with the residual add fused in (``add_layer_norm``, ``add_rms_norm``: docs/fused.md), and those
four with their output quantized for an fp8 or int8 matrix multiply (``*_quant`` with a static scale,
``*_dynamic_quant`` with per-row scales: docs/quantized.md).

Each :class:`Operation` entry in :data:`OPERATIONS` holds, for its operation:

* **signature and semantics**: the entry points a backend defines for it, named after it
  (``layer_norm``, its vector-Jacobian product ``layer_norm_backward``, optionally the saved
  statistics ``layer_norm_statistics``), their parameters, outputs, cotangents and gradients,
  and the facts the numerics read (``centered``, ``has_bias``, ``default_eps``);
* **the oracle's forward and VJP**: ``normbench.check.oracle`` computes every normalization on
  one code path from these facts (RMSNorm centres nothing and has no bias);
* **error-model terms**: ``normbench.check.error_model`` derives every bound from the oracle's
  forward, whose ``centered`` fact removes the mean's terms (:attr:`Operation.error_terms` says which);
* **case families**: the families each suite runs on it (:attr:`Operation.families`), built by
  ``normbench.core.cases``, which reads the same facts (an operation with a default eps gets cases
  with ``eps=None``);
* **byte model**: the tensors each direction must read and write (:attr:`Operation.traffic`),
  which ``normbench.perf.roofline`` counts and writes as formulas;
* **bug hypotheses**: the keys of ``normbench.check.hypotheses``'s models that apply to it.

Every room reads the entry and nothing else about an operation: the suites, the runner, the
report and the throughput sweep loop over :data:`OPERATIONS`. Adding an operation means adding its
entry and the code that is truly new for it (its oracle, if it is not a normalization of this kind;
its case families, its hypotheses).

**Calling a backend.** The harness calls every backend through the entry's methods
(:meth:`Operation.forward`, :meth:`~Operation.backward`, :meth:`~Operation.prepare_backward`,
:meth:`~Operation.forward_backward`, :meth:`~Operation.warmup`), which take the operation's own
arguments as one tuple (``args``: for LayerNorm ``(x, normalized_shape, weight, bias, eps)``) and its
cotangents as another (``(dy,)``). The backend's optional hooks take the operation's name first:
``warmup(op, args)``, ``prepare_backward(op, args, cotangents)``, ``forward_backward(op, args,
cotangents)`` (``normbench.core.backend``); the per-normalization hooks of normbench 0.2 still work,
deprecated (:data:`LEGACY_HOOKS`).

>>> RMS_NORM.backward_entry, RMS_NORM.gradients
('rms_norm_backward', ('dx', 'dweight'))
>>> of("rms_norm").label, [op.name for op in OPERATIONS][:5]
('RMSNorm', ['layer_norm', 'rms_norm', 'add_layer_norm', 'add_rms_norm', 'layer_norm_quant'])
>>> of("add_rms_norm_dynamic_quant").signature()
'add_rms_norm_dynamic_quant(x, residual, normalized_shape, weight, eps, qdtype, scale_ub) -> (q, scales, residual_out)'
>>> ADD_RMS_NORM.signature(), ADD_RMS_NORM.signature(backward=True)
('add_rms_norm(x, residual, normalized_shape, weight, eps) -> (y, residual_out)', \
'add_rms_norm_backward(dy, dresidual_out, residual_out, normalized_shape, weight, eps) -> (dsum, dweight)')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from normbench.core.dtypes import default_rms_eps
from normbench.core.exceptions import InvalidInput

#: what a backend's hooks and entry points receive as the operation: its name
OpName = str


@dataclass(frozen=True)
class Traffic:
    """One tensor a direction must move: ``tensor`` is ``read`` or ``written``; it holds ``extent``
    elements (``"M*N"``, ``"N"`` or ``"M"``: rows M, normalized size N) of ``element`` bytes: ``"x"``
    (x's dtype), ``"residual"`` (the residual stream's dtype, a fused operation's), ``"weight"``/``"bias"``
    (the parameters' dtype, 0 where the case has none),
    ``"fp32"`` (4, statistics and dynamic scales) or ``"q"`` (1, a quantized output's code)."""

    tensor: str
    access: str
    extent: str
    element: str

    def __post_init__(self) -> None:
        assert self.access in ("read", "written") and self.extent in ("M*N", "N", "M") \
            and self.element in ("x", "residual", "weight", "bias", "fp32", "q"), self


def _reads(*terms: tuple[str, str, str]) -> tuple[Traffic, ...]:
    return tuple(Traffic(t, "read", extent, element) for t, extent, element in terms)


def _writes(*terms: tuple[str, str, str]) -> tuple[Traffic, ...]:
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


@dataclass(frozen=True, eq=False)
class Operation:
    """One operation: its contract, its facts, and what each room needs of it (see the module doc)."""

    #: the name a backend declares (``Backend.operations``), its entry point's name, what results record
    name: str
    #: how people write it: "LayerNorm"
    label: str
    #: the formula, for docs and reports
    formula: str
    #: the prefix of its case ids ("" for LayerNorm, whose ids predate every other operation)
    id_prefix: str
    #: the forward entry point's parameters, in order (``args`` holds their values)
    params: tuple[str, ...]
    #: what the forward returns: one output is returned as it is, several as a tuple
    outputs: tuple[str, ...]
    #: the backward's cotangents, one per output, in order
    cotangents: tuple[str, ...]
    #: what the backward entry point returns, in order (None for an absent parameter)
    gradients: tuple[str, ...]
    #: the array parameters the gradients are of, in the gradients' order
    differentiable: tuple[str, ...]
    #: what the optional ``<name>_statistics`` entry point returns, one value per row each; () if none
    statistics: tuple[str, ...] = ()
    #: whether the mean is subtracted (LayerNorm) or not (RMSNorm)
    centered: bool = True
    #: whether it has a bias
    has_bias: bool = True
    #: what ``eps=None`` means, or None when eps is required
    default_eps: Callable[[str], float] | None = None
    #: the terms of the error model's bounds that apply (``normbench.check.error_model``), in words
    error_terms: tuple[str, ...] = ()
    families: Families = field(default_factory=lambda: Families(NORMALIZATION_FORWARD, NORMALIZATION_BACKWARD))
    #: byte-model variant -> the tensors it moves (``normbench.perf.roofline``)
    traffic: Mapping[str, tuple[Traffic, ...]] = field(default_factory=dict)
    #: the keys of the ``normbench.check.hypotheses`` models that apply, in the order a failure lists ties
    hypotheses: tuple[str, ...] = ()
    #: the plain normalization a fused operation adds a residual into (``add_rms_norm`` fuses ``rms_norm``), or None
    fuses: str | None = None
    #: the backward entry point's parameters after its cotangents, when they differ from :attr:`params` (a fused
    #: operation's backward takes ``residual_out``, what its forward wrote, in place of x and the residual)
    backward_params: tuple[str, ...] = ()
    #: keyword parameters of the forward and backward entry points that only some cases pass (RMSNorm's
    #: ``weight_offset``: Gemma's ``x*r*(weight_offset + weight)``); a backend whose entry points take one runs those
    #: cases, the others skip them, saying so (:meth:`option_problem`)
    options: tuple[str, ...] = ()
    #: a quantized output (docs/quantized.md): "static" (a float32 ``scale`` given, ``q = Q(y / scale)``) or "dynamic"
    #: (one scale per row returned, from the row's absolute maximum); None for an operation whose y is its output
    quant: str | None = None
    #: the operation whose output y it quantizes (``rms_norm_quant`` quantizes ``rms_norm``'s y), or None
    quantizes: str | None = None

    def __str__(self) -> str:
        return self.name

    # -- the contract ------------------------------------------------------------------------------

    @property
    def normalization(self) -> Operation:
        """The normalization it computes: itself, or for a fused operation the plain one it fuses."""
        return of(self.fuses) if self.fuses else self

    @property
    def backward_parameters(self) -> tuple[str, ...]:
        """The backward entry point's parameters after its cotangents: :attr:`backward_params`, else :attr:`params`."""
        return self.backward_params or self.params

    @property
    def entry(self) -> str:
        """The forward entry point a backend defines: the operation's name."""
        return self.name

    @property
    def backward_entry(self) -> str:
        """The vector-Jacobian product's entry point: ``<name>_backward``."""
        return f"{self.name}_backward"

    @property
    def statistics_entry(self) -> str | None:
        """The optional saved statistics' entry point, ``<name>_statistics``, or None for an operation without."""
        return f"{self.name}_statistics" if self.statistics else None

    def signature(self, backward: bool = False) -> str:
        """``layer_norm(x, normalized_shape, weight, bias, eps) -> y`` (or the backward's), for messages and docs."""
        if backward:
            return (f"{self.backward_entry}({', '.join(self.cotangents + self.backward_parameters)}) -> "
                    f"({', '.join(self.gradients)})")
        out = self.outputs[0] if len(self.outputs) == 1 else f"({', '.join(self.outputs)})"
        return f"{self.entry}({', '.join(self.params)}) -> {out}"

    def arguments(self, values: Mapping[str, Any] | None = None, **named: Any) -> tuple:
        """The forward's ``args`` from parameter values by name (``values`` and/or keywords; one not given is
        None). A value for a parameter the operation does not have must be None: RMSNorm takes no bias.

        >>> RMS_NORM.arguments(x="x", normalized_shape=(4,), weight=None, bias=None, eps=1e-6)
        ('x', (4,), None, 1e-06)
        """
        values = {**(values or {}), **named}
        for name, value in values.items():
            if name not in self.params and value is not None:
                raise InvalidInput(f"{self.label} has no {name}; got one. Fix: pass {name}=None")
        return tuple(values.get(p) for p in self.params)

    def argument(self, args: tuple, param: str) -> Any:
        """The value of ``param`` in ``args``."""
        return args[self.params.index(param)]

    def backward_arguments(self, values: Mapping[str, Any] | None = None, **named: Any) -> tuple:
        """The backward's arguments after its cotangents, from values by name (as :meth:`arguments`): for a
        plain normalization the forward's, for a fused one ``(residual_out, normalized_shape, weight, [bias,] eps)``.

        >>> ADD_RMS_NORM.backward_arguments(residual_out="r", normalized_shape=(4,), weight=None, eps=None)
        ('r', (4,), None, None)
        """
        values = {**(values or {}), **named}
        return tuple(values.get(p) for p in self.backward_parameters)

    def backward_args_from(self, args: tuple, outputs: Any) -> tuple:
        """The backward's arguments for a forward called on ``args`` that returned ``outputs``: ``args`` for a plain
        normalization; for a fused one, ``args`` with x and the residual replaced by the ``residual_out`` it wrote."""
        if not self.backward_params:
            return args
        values = dict(zip(self.params, args))
        values.update(zip(self.outputs, outputs))
        return self.backward_arguments(values)

    def oracle_eps(self, eps: float | None, dtype: str) -> float:
        """The eps the exact function uses: ``eps``, or for None the operation's default."""
        if eps is None:
            if self.default_eps is None:
                raise InvalidInput(f"{self.label} needs an eps (a number >= 0); it has no default")
            return self.default_eps(dtype)
        return float(eps)

    # -- calling a backend: the one way the harness does -------------------------------------------

    def forward(self, backend: Any, args: tuple, options: Mapping[str, Any] | None = None) -> Any:
        """The forward entry point on ``args`` (and the case's keyword ``options``, passed only when given)."""
        return getattr(backend, self.entry)(*args, **(options or {}))

    def forward_with_statistics(self, backend: Any, args: tuple) -> tuple[Any, Any]:
        """``(outputs, statistics)``: ``<name>_with_statistics`` where the backend defines it (one call), else
        the forward and ``<name>_statistics`` (None where it has none, or the operation saves nothing)."""
        if not self.statistics:
            return self.forward(backend, args), None
        both = getattr(backend, f"{self.name}_with_statistics", None)
        if both is not None:
            return both(*args)
        stats = getattr(backend, self.statistics_entry, None)
        return self.forward(backend, args), None if stats is None else stats(*args)

    def backward(self, backend: Any, args: tuple, cotangents: tuple, options: Mapping[str, Any] | None = None) -> Any:
        """The backward entry point: ``<name>_backward(*cotangents, *args, **options)``, returned as the backend gives
        it; ``args`` are the backward's (:meth:`backward_arguments`: the forward's, except for a fused operation);
        ``options``: the case's keyword options (:attr:`options`), passed only when given."""
        method = getattr(backend, self.backward_entry, None)
        if method is None:
            raise NotImplementedError(f"backend {backend.name!r} defines no {self.backward_entry}; define it, or set "
                                      f"has_backward = False")
        return method(*cotangents, *args, **(options or {}))

    def option_problem(self, backend: Any, options: Mapping[str, Any], backward: bool = False) -> str | None:
        """Why ``backend`` cannot run a case with these keyword ``options`` (its entry points take none of that name),
        or None."""
        entries = (self.entry, self.backward_entry) if backward else (self.entry,)
        for name in options:
            for entry in entries:
                method = getattr(backend, entry, None)
                if method is not None and not _takes(method, name):
                    return (f"{getattr(backend, 'name', backend)!s}'s {entry} takes no {name}; define "
                            f"{entry}(..., {name}=0.0) to run these cases (docs/writing-a-backend.md)")
        return None

    def prepare_backward(self, backend: Any, args: tuple, cotangents: tuple) -> Callable[[], Any] | None:
        """The backend's ``prepare_backward`` hook for this operation: a callable running the backward alone, or None."""
        return type(backend).hook_for("prepare_backward", self.name)(backend, args, cotangents)

    def forward_backward(self, backend: Any, args: tuple, cotangents: tuple) -> tuple[Any, Any]:
        """One training step, ``(outputs, gradients)``, through the backend's ``forward_backward`` hook."""
        return type(backend).hook_for("forward_backward", self.name)(backend, args, cotangents)

    def warmup(self, backend: Any, args: tuple) -> None:
        """The backend's ``warmup`` hook for this operation."""
        type(backend).hook_for("warmup", self.name)(backend, args)

    def separates_backward(self, backend: Any) -> bool:
        """Whether the backend's backward of this operation can be timed alone: it runs no forward, or its
        ``prepare_backward`` hook prepares one."""
        prepared = type(backend).hook_for("prepare_backward", self.name)
        return not backend.backward_includes_forward or not prepared.is_default

    def gradient_tuple(self, grads: Any) -> Any:
        """A normalization's gradients as ``(dx, dweight, dbias)``, dbias None for one without a bias, so that
        the checks and timing have one code path; a wrong return value is handed on as it is, for the checks
        to report."""
        if self.has_bias or not isinstance(grads, (tuple, list)) or len(grads) != len(self.gradients):
            return grads
        return (*grads, None)


def _takes(method: Callable, name: str) -> bool:
    """Whether ``method`` accepts the keyword ``name`` (by name, or through ``**kwargs``)."""
    import inspect

    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin or a C extension: let the call say
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


#: the LayerNorm-only hooks of normbench 0.2 and their RMSNorm twins: old name -> (operation, new hook).
#: A backend defining one keeps working (``normbench.core.backend.hook`` adapts it) with a DeprecationWarning
#: naming the new spelling; ``warmup``, ``prepare_backward`` and ``forward_backward`` are the new hooks' own
#: names, and are LayerNorm's old ones only when written with LayerNorm's own parameters
LEGACY_HOOKS: dict[str, tuple[str, str]] = {
    "warmup_rms_norm": ("rms_norm", "warmup"),
    "prepare_rms_norm_backward": ("rms_norm", "prepare_backward"),
    "rms_norm_forward_backward": ("rms_norm", "forward_backward"),
}

_NORM_ERROR_TERMS = ("output rounding: 3*u_out*(|w*xhat| + |b|) + eta_out/2 per rounding",
                     "accumulation: k(N)*u_acc*|w|*(|x| + mean|x|)/sigma_eps, k(N) = 16 + 2*sqrt(N)")

LAYER_NORM = Operation(
    "layer_norm", "LayerNorm", "y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias", "",
    params=("x", "normalized_shape", "weight", "bias", "eps"), outputs=("y",), cotangents=("dy",),
    gradients=("dx", "dweight", "dbias"), differentiable=("x", "weight", "bias"), statistics=("mean", "rstd"),
    centered=True, has_bias=True,
    error_terms=_NORM_ERROR_TERMS + ("statistics: mean and rstd within the accumulation term and one rounding "
                                     "to their storage dtype",),
    traffic={
        "forward-inference": _reads(("x", "M*N", "x"), ("weight", "N", "weight"), ("bias", "N", "bias"))
        + _writes(("y", "M*N", "x")),
        "forward-training": _reads(("x", "M*N", "x"), ("weight", "N", "weight"), ("bias", "N", "bias"))
        + _writes(("y", "M*N", "x"), ("mean", "M", "fp32"), ("rstd", "M", "fp32")),
        "backward": _reads(("x", "M*N", "x"), ("dy", "M*N", "x"), ("weight", "N", "weight"), ("mean", "M", "fp32"),
                           ("rstd", "M", "fp32"))
        + _writes(("dx", "M*N", "x"), ("dweight", "N", "weight"), ("dbias", "N", "bias")),
    },
    hypotheses=("eps-float32", "one-pass-variance", "one-pass-negative-variance", "variance-floor",
                "half-accumulation", "sequential-mean", "lanes-sequential-1", "lanes-sequential-4", "lanes-sequential-8",
                "lanes-sequential-32", "padded-lanes", "eps-outside-sqrt", "bessel", "eps-ignored",
                "eps-fixed", "n1-identity", "float64-in-float32", "saved-statistics-input-dtype",
                "backward-rstd-without-eps", "dx-expanded", "dx-no-mean-term", "dx-mean-twice", "dx-no-projection",
                "dbias-times-weight", "dbias-severed", "dweight-last-block", "dweight-half-accumulation",
                "interpreter-bf16-truncation"),
)
RMS_NORM = Operation(
    "rms_norm", "RMSNorm", "y = x / sqrt(mean(x^2) + eps) * weight", "rms-",
    params=("x", "normalized_shape", "weight", "eps"), outputs=("y",), cotangents=("dy",),
    gradients=("dx", "dweight"), differentiable=("x", "weight"), statistics=(),
    centered=False, has_bias=False, default_eps=default_rms_eps,
    families=Families(NORMALIZATION_FORWARD + ("heads", "gemma"), NORMALIZATION_BACKWARD + ("heads", "gemma")),
    error_terms=("output rounding: 3*u_out*|w*xhat| + eta_out/2 per rounding",
                 "accumulation: k(N)*u_acc*|w*xhat| (a sum of squares: no cancellation, no mean term)"),
    options=("weight_offset",),
    traffic={
        "forward-inference": _reads(("x", "M*N", "x"), ("weight", "N", "weight")) + _writes(("y", "M*N", "x")),
        "forward-training": _reads(("x", "M*N", "x"), ("weight", "N", "weight"))
        + _writes(("y", "M*N", "x"), ("rstd", "M", "fp32")),
        "backward": _reads(("x", "M*N", "x"), ("dy", "M*N", "x"), ("weight", "N", "weight"), ("rstd", "M", "fp32"))
        + _writes(("dx", "M*N", "x"), ("dweight", "N", "weight")),
    },
    hypotheses=("eps-float32", "variance-floor", "half-accumulation", "lanes-sequential-1", "lanes-sequential-4",
                "lanes-sequential-8",
                "lanes-sequential-32", "padded-lanes", "eps-outside-sqrt",
                "eps-ignored", "eps-fixed", "float64-in-float32", "saved-statistics-input-dtype",
                "backward-rstd-without-eps", "dx-no-projection", "dweight-last-block", "dweight-half-accumulation",
                "interpreter-bf16-truncation"),
)



def _fused(plain: Operation, name: str, label: str, id_prefix: str) -> Operation:
    """The operation that adds a residual into ``plain``'s input first: ``residual_out = x + residual``, rounded once
    to the residual's dtype, and ``y = plain(residual_out)`` in x's dtype (docs/fused.md)."""
    params = ("x", "residual") + plain.params[1:]
    backward_params = ("residual_out",) + plain.params[1:]
    bias = plain.has_bias
    parameters = (("weight", "N", "weight"),) + ((("bias", "N", "bias"),) if bias else ())
    statistics = tuple(("mean", "M", "fp32") for _ in range(plain.centered)) + (("rstd", "M", "fp32"),)
    inference = (_reads(("x", "M*N", "x"), ("residual", "M*N", "residual"), *parameters)
                 + _writes(("y", "M*N", "x"), ("residual_out", "M*N", "residual")))
    gradients = ("dweight", "N", "weight"), *((("dbias", "N", "bias"),) if bias else ())
    return Operation(
        name, label, f"residual_out = x + residual; y = {plain.formula.removeprefix('y = ').replace('x', 'residual_out')}",
        id_prefix, params=params, outputs=("y", "residual_out"), cotangents=("dy", "dresidual_out"),
        gradients=("dsum",) + plain.gradients[1:], differentiable=("x",) + plain.differentiable[1:],
        statistics=(), centered=plain.centered, has_bias=bias, default_eps=plain.default_eps,
        error_terms=("residual_out: bit for bit, x + residual rounded once to the residual's dtype",
                     f"y: {plain.label}'s bound around the normalization of residual_out, or of the unrounded sum "
                     f"(either convention, each whole)",
                     "dsum: dx's bound on residual_out plus the add's roundings, 3*u*|dresidual_out| + u*|dsum|"),
        families=Families(plain.families.forward + ("residual",), plain.families.backward + ("residual",),
                          gradcheck=(), invariance=(), geometry=()),
        traffic={
            "forward-inference": inference,
            "forward-training": inference + _writes(*statistics),
            "backward": _reads(("dy", "M*N", "x"), ("dresidual_out", "M*N", "residual"),
                               ("residual_out", "M*N", "residual"), ("weight", "N", "weight"), *statistics)
            + _writes(("dsum", "M*N", "residual"), *gradients),
        },
        hypotheses=plain.hypotheses, fuses=plain.name, backward_params=backward_params, options=plain.options)


#: the residual add fused into the normalization, as every transformer layer computes it (docs/fused.md)
ADD_LAYER_NORM = _fused(LAYER_NORM, "add_layer_norm", "Add+LayerNorm", "add-")
ADD_RMS_NORM = _fused(RMS_NORM, "add_rms_norm", "Add+RMSNorm", "add-rms-")


def _quantized(base: Operation, mode: str) -> Operation:
    """``base`` with its output y quantized for the next matrix multiply (docs/quantized.md): ``static``, a float32
    ``scale`` given, ``q = saturate(round_to_nearest_even(y / scale))`` in ``qdtype`` (``float8_e4m3fn``,
    ``float8_e5m2``, ``int8``); ``dynamic``, one float32 scale per row returned with q, ``max(min(absmax(y_row),
    scale_ub) / qmax, 1 / (qmax * 512))``. A fused base keeps its ``residual_out``. Inference only: no backward."""
    static = mode == "static"
    extra = ("scale", "qdtype") if static else ("qdtype", "scale_ub")
    outputs = ("q",) + (() if static else ("scales",)) + base.outputs[1:]
    label = f"{base.label}+{'static' if static else 'dynamic'} quant"
    formula = (f"{base.formula}; q = Q(y / scale)" if static
               else f"{base.formula}; scales = max(min(absmax(y), scale_ub) / qmax, 1/(qmax*512)); q = Q(y / scales)")
    return Operation(
        f"{base.name}_quant" if static else f"{base.name}_dynamic_quant", label, formula,
        ("q-" if static else "dq-") + base.id_prefix, params=base.params + extra, outputs=outputs, cotangents=(),
        gradients=(), differentiable=(), statistics=(), centered=base.centered, has_bias=base.has_bias,
        default_eps=base.default_eps,
        error_terms=(f"q: every code between Q(v - b) and Q(v + b), v = y_exact / scale, b = B / |scale| + 2*u32*|v|, "
                     f"B {base.label}'s bound on y", "saturation exact; NaN stays NaN in float8")
        + (() if static else ("scales: within max_row(B) / qmax + 2*u32*scale of the exact row scale, with the floor "
                              "or without; an all-zero row any finite scale >= 0, codes 0; q judged against the "
                              "kernel's own scales",))
        + (base.error_terms[:1] if base.fuses else ()),
        families=Families(("quant",), (), gradcheck=(), invariance=(), geometry=(), throughput_gpu=(),
                          throughput_cpu=()),
        traffic={"forward-inference": tuple(t for t in base.traffic["forward-inference"] if t.tensor != "y")
                 + _writes(("q", "M*N", "q"), *(() if static else (("scales", "M", "fp32"),)))},
        hypotheses=(), fuses=base.fuses, quant=mode, quantizes=base.name)


#: the normalization's output quantized for an fp8 or int8 matrix multiply, static and dynamic, plain and fused
QUANTIZED: tuple[Operation, ...] = tuple(_quantized(base, mode) for mode in ("static", "dynamic")
                                         for base in (LAYER_NORM, RMS_NORM, ADD_LAYER_NORM, ADD_RMS_NORM))

#: every operation, in the order suites, tables and reports show them
OPERATIONS: tuple[Operation, ...] = (LAYER_NORM, RMS_NORM, ADD_LAYER_NORM, ADD_RMS_NORM, *QUANTIZED)
NAMES: tuple[str, ...] = tuple(op.name for op in OPERATIONS)
assert len(set(NAMES)) == len(NAMES) and len({op.id_prefix for op in OPERATIONS}) == len(OPERATIONS)


def of(name: str | Operation) -> Operation:
    """The :class:`Operation` called ``name`` (an Operation is returned as it is)."""
    if isinstance(name, Operation):
        return name
    for op in OPERATIONS:
        if op.name == name:
            return op
    raise InvalidInput(f"unknown operation {name!r}; expected one of {', '.join(NAMES)}")


def implemented(backend: Any) -> tuple[str, ...]:
    """The operations a backend (class or instance) declares: ``operations``, or normbench 0.2's
    ``normalizations`` (deprecated; an instance that narrows it in ``__init__`` is honoured), default LayerNorm."""
    own = {} if isinstance(backend, type) else vars(backend)
    for attribute in ("operations", "normalizations"):
        if attribute in own:
            return tuple(own[attribute])
    declared = getattr(backend, "operations", None)
    if declared is None:
        declared = getattr(backend, "normalizations", ("layer_norm",))
    return tuple(declared)


def missing_reason(backend: Any, op: str | Operation) -> str | None:
    """Why ``backend`` cannot run ``op`` (it does not declare it), or None."""
    op = of(op)
    have = implemented(backend)
    if op.name in have:
        return None
    return (f"{getattr(backend, 'name', backend)!s} implements {', '.join(have)} only, not {op.name} "
            f"(declare operations = {(*have, op.name)!r} and define {op.signature()} to add it)")
