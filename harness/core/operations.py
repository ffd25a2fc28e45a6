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
report and the throughput sweep loop over :data:`OPERATIONS`. No entry is written by hand: each is
built by :func:`compose` from its parts (``normbench.core.parts``: a normalization, optionally the residual add
before it and a quantizer after it), which own their parameters, outputs, traffic, case values and the
judges of their outputs; adding a kind of operation means adding a part, or a value of one, and the code
that is truly new for it (its oracle step, its case families, its hypotheses).

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

from normbench.core.exceptions import InvalidInput
from normbench.core.parts import (
    EPILOGUES,
    LAYER_NORM_PART,
    NORMALIZATION_BACKWARD,
    NORMALIZATION_FORWARD,
    NORMALIZATIONS,
    PROLOGUES,
    RESIDUAL_ADD,
    RMS_NORM_PART,
    Families,
    Normalization,
    Quantize,
    ResidualAdd,
    Traffic,
)

#: what a backend's hooks and entry points receive as the operation: its name
OpName = str


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
    #: the terms of the error model's bounds that apply (``normbench.check.error_model``), in words
    error_terms: tuple[str, ...] = ()
    families: Families = field(default_factory=lambda: Families(NORMALIZATION_FORWARD, NORMALIZATION_BACKWARD))
    #: byte-model variant -> the tensors it moves (``normbench.perf.roofline``)
    traffic: Mapping[str, tuple[Traffic, ...]] = field(default_factory=dict)
    #: the keys of the ``normbench.check.hypotheses`` models that apply, in the order a failure lists ties
    hypotheses: tuple[str, ...] = ()
    #: the backward entry point's parameters after its cotangents, when they differ from :attr:`params` (a fused
    #: operation's backward takes ``residual_out``, what its forward wrote, in place of x and the residual)
    backward_params: tuple[str, ...] = ()
    #: keyword parameters of the forward and backward entry points that only some cases pass (RMSNorm's
    #: ``weight_offset``: Gemma's ``x*r*(weight_offset + weight)``); a backend whose entry points take one runs those
    #: cases, the others skip them, saying so (:meth:`option_problem`)
    options: tuple[str, ...] = ()
    #: what it is composed of (``normbench.core.parts``): its normalization, its prologue (the residual add) or None,
    #: its epilogue (quantize) or None; every other field follows from them (:func:`compose`)
    parts: tuple[Any, Any, Any] = (None, None, None)

    def __str__(self) -> str:
        return self.name

    # -- the parts -----------------------------------------------------------------------------------

    @property
    def normalization_part(self) -> Normalization:
        """The normalization it computes (``normbench.core.parts.Normalization``)."""
        return self.parts[0]

    @property
    def prologue(self) -> ResidualAdd | None:
        """What it computes before the normalization (the residual add), or None."""
        return self.parts[1]

    @property
    def epilogue(self) -> Quantize | None:
        """What it does with the normalization's y (quantize it), or None: y is its output."""
        return self.parts[2]

    @property
    def centered(self) -> bool:
        """Whether the mean is subtracted (LayerNorm) or not (RMSNorm)."""
        return self.normalization_part.centered

    @property
    def has_bias(self) -> bool:
        return self.normalization_part.has_bias

    @property
    def default_eps(self) -> Callable[[str], float] | None:
        """What ``eps=None`` means, or None when eps is required."""
        return self.normalization_part.default_eps

    @property
    def fuses(self) -> str | None:
        """The plain normalization a fused operation adds a residual into (``add_rms_norm`` fuses ``rms_norm``), or
        None: the name of its normalization where it has a prologue."""
        return self.normalization_part.name if self.prologue is not None else None

    @property
    def quant(self) -> str | None:
        """A quantized output's mode (docs/quantized.md): "static" (a float32 ``scale`` given) or "dynamic" (scales
        computed and returned); None for an operation whose y is its output."""
        return self.epilogue.mode if self.epilogue is not None else None

    @property
    def quantizes(self) -> str | None:
        """The operation whose output y it quantizes (``rms_norm_quant`` quantizes ``rms_norm``), or None."""
        if self.epilogue is None:
            return None
        return (self.prologue.name_prefix if self.prologue else "") + self.normalization_part.name

    def judge_of(self, output: str) -> str:
        """The kind of judge of one of its outputs or gradients: ``bounded`` (within the error model's bounds),
        ``exact`` (bit for bit), ``codes`` or ``scales`` (a quantized output's), from the part that adds it."""
        for part in reversed(self.parts):
            if part is not None and output in part.judges:
                return part.judges[output]
        return "bounded"

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

def compose(norm: Normalization, prologue: ResidualAdd | None = None, epilogue: Quantize | None = None) -> Operation:
    """The operation ``epilogue(prologue(norm))``: its name, contract, byte model and facts from its parts."""
    contract = norm.contract()
    for part in (prologue, epilogue):
        if part is not None:
            contract = part.apply(contract, norm)
    return Operation(**contract, parts=(norm, prologue, epilogue))


#: the normalizations, fused or not, quantized or not: every operation is generated from its parts
LAYER_NORM = compose(LAYER_NORM_PART)
RMS_NORM = compose(RMS_NORM_PART)
#: the residual add fused into the normalization, as every transformer layer computes it (docs/fused.md)
ADD_LAYER_NORM = compose(LAYER_NORM_PART, RESIDUAL_ADD)
ADD_RMS_NORM = compose(RMS_NORM_PART, RESIDUAL_ADD)
#: the normalization's output quantized for an fp8 or int8 matrix multiply, static and dynamic, plain and fused
QUANTIZED: tuple[Operation, ...] = tuple(compose(norm, prologue, epilogue) for epilogue in EPILOGUES
                                         for prologue in (None, *PROLOGUES) for norm in NORMALIZATIONS)

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
