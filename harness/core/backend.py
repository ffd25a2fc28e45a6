"""The Backend contract: what every implementation of normbench's operations provides.

A backend is a class registered under the entry-point group ``normbench.backends``. It says what
it supports and whether it can run here, converts host NumPy arrays to its own arrays and back,
and computes the operations it declares (``normbench.core.operations``: ``layer_norm``,
``rms_norm``). Cases, tolerances, timing and reporting belong to the harness, so a backend stays a
page of code.

Required: ``name``, :meth:`asarray`, :meth:`to_numpy`, and for each operation it declares in
``operations`` (default ``("layer_norm",)``) that operation's **entry point**, a method named after
it: ``layer_norm(x, normalized_shape, weight, bias, eps) -> y``, ``rms_norm(x, normalized_shape,
weight, eps) -> y``; with ``has_backward`` (the default) also its vector-Jacobian product,
``layer_norm_backward(dy, x, normalized_shape, weight, bias, eps) -> (dx, dweight, dbias)``,
``rms_norm_backward(dy, x, normalized_shape, weight, eps) -> (dx, dweight)``. LayerNorm may also
expose the statistics its forward saves (:meth:`layer_norm_statistics`, or both from one call:
:meth:`layer_norm_with_statistics`).

Optional **hooks**, one each for every operation, taking the operation's name first, then its
arguments as one tuple (``args``, in the entry point's order) and its cotangents as another
(``cotangents``, ``(dy,)``): :meth:`warmup` (compile now, so that compilation never lands in a timed
region), :meth:`prepare_backward` (so that the throughput suite times a backward alone) and
:meth:`forward_backward` (a training step as exactly one forward and one backward). Then
:meth:`set_threads`, :meth:`synchronize`, :meth:`availability`, :meth:`library_version`, and the
attributes below (``device``, ``max_elements``, ``timing_note``, ``runtime_note``, the documented
``limits``, ``known_deviations``...). :func:`device_label` writes a ``device`` string in the form
normbench shows and records everywhere.

**Deprecated spellings** (normbench 0.2) keep working, each with a DeprecationWarning naming the
new spelling when the class is defined: ``normalizations = (...)`` (now ``operations``); LayerNorm's
hooks written with LayerNorm's own parameters, ``warmup(x, normalized_shape, weight, bias, eps)``,
``prepare_backward(dy, x, ...)``, ``forward_backward(dy, x, ...)``; and RMSNorm's
``warmup_rms_norm``, ``prepare_rms_norm_backward``, ``rms_norm_forward_backward``. :func:`hook` is
the one place that tells them apart.

Example, a complete backend (register it in your ``pyproject.toml`` under
``[project.entry-points."normbench.backends"]`` as ``mine = "my_pkg:Mine"``)::

    import numpy as np
    from normbench import Backend

    class Mine(Backend):
        name = "mine"
        dtypes = ("float64", "float32")
        has_backward = False

        def asarray(self, host):
            return np.array(host)

        def to_numpy(self, native):
            return np.asarray(native)

        def layer_norm(self, x, normalized_shape, weight, bias, eps):
            axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
            mu = x.mean(axis=axes, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (x - mu) / np.sqrt(var + eps)
            if weight is not None:
                y = y * weight
            if bias is not None:
                y = y + bias
            return y.astype(x.dtype)
"""

from __future__ import annotations

import abc
import functools
import importlib.metadata
import importlib.util
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from normbench.core import operations
from normbench.core.dtypes import DTYPES


def device_label(kind: str, index: int | None = None, name: str = "") -> str:
    """A backend's ``device`` in the one form normbench shows and records: ``"cpu"`` for the
    host CPU (one ceiling and one sweep, however the framework numbers it), and kind, index
    and model for an accelerator, ``"cuda:0 (NVIDIA H100 80GB HBM3)"``.

    >>> device_label("cpu", 0, "cpu"), device_label("cuda", 1, "NVIDIA H200"), device_label("cuda")
    ('cpu', 'cuda:1 (NVIDIA H200)', 'cuda')
    """
    kind = kind.strip().lower()
    if kind == "cpu":
        return "cpu"
    where = kind if index is None else f"{kind}:{index}"
    return f"{where} ({name})" if name else where


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; ``reason`` says why not (and how to fix it).

    Truthy when available: ``if not Backend.availability(): print(...reason)``.
    """

    available: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.available

    @classmethod
    def yes(cls) -> Availability:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@dataclass(frozen=True)
class Limits:
    """The documented limits of the library a backend wraps: cases outside them are skipped,
    saying so, never failed. ``eps``: the closed range of eps it accepts; ``min_rank``: the
    fewest dims x may have; ``layouts``: the layouts it accepts (of ``normbench.core.cases.LAYOUTS``,
    and ``"dybroadcast"`` for a stride-0 dy), None for every one; ``hidden_multiple``: the normalized
    size (the product of ``normalized_shape``) must be a multiple of it (a vectorized kernel's rule,
    e.g. 8); ``residual_in_x_dtype``, ``params_in_x_dtype``: a fused operation's residual, or the weight and
    bias, must have x's dtype (a kernel that stores the sum in x's dtype, or takes one dtype for every tensor);
    ``qdtypes``: the quantized formats a quantized operation stores (of ``normbench.core.quantized.QDTYPES``), None
    for every one; ``scale_ub``: whether a dynamic quantization takes an upper bound on the row's scale (a case with
    one is skipped where it does not); ``dtypes``: the dtypes of x it takes (None: every one the backend declares);
    ``normalized_dims``: the most trailing dims it normalizes (1: the last dim only; None: any number);
    ``source``: where the limits are documented, quoted in every skip. A backend's limits may differ per operation
    (:attr:`Backend.operation_limits`).

    >>> Limits(eps=(0.0, 1e-3), source="its docs").eps_problem(0.1)
    'eps 0.1 is outside the documented range [0, 0.001] (its docs)'
    >>> Limits(hidden_multiple=8).case_problem(2, 1e-5, "contiguous", hidden=100)
    'the normalized size 100 is not a multiple of 8, which the library requires'
    >>> Limits(residual_in_x_dtype=True).case_problem(2, 1e-5, "contiguous", residual_dtype="float32", dtype="bfloat16")
    "a float32 residual with bfloat16 x: the library takes the residual in x's dtype"
    >>> Limits(qdtypes=("int8",)).case_problem(2, 1e-5, "contiguous", qdtype="float8_e4m3fn")
    'the library stores no float8_e4m3fn codes (it stores int8)'
    >>> Limits(dtypes=("float32", "float16")).case_problem(2, 1e-5, "contiguous", dtype="bfloat16")
    'bfloat16 x is not among the dtypes it takes, float32, float16'
    >>> Limits(normalized_dims=1).case_problem(3, 1e-5, "contiguous", normalized_dims=2)
    'it normalizes the last dim only, not 2 trailing dims'
    """

    eps: tuple[float, float] = (0.0, float("inf"))
    min_rank: int = 1
    layouts: tuple[str, ...] | None = None
    hidden_multiple: int = 1
    residual_in_x_dtype: bool = False
    params_in_x_dtype: bool = False
    qdtypes: tuple[str, ...] | None = None
    scale_ub: bool = True
    dtypes: tuple[str, ...] | None = None
    normalized_dims: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not (isinstance(self.hidden_multiple, int) and self.hidden_multiple >= 1):
            raise ValueError(f"Limits(hidden_multiple={self.hidden_multiple!r}): give a whole number >= 1, e.g. 8")
        if self.qdtypes is not None:
            from normbench.core.quantized import QDTYPES

            if not (isinstance(self.qdtypes, tuple) and self.qdtypes and set(self.qdtypes) <= set(QDTYPES)):
                raise ValueError(f"Limits(qdtypes={self.qdtypes!r}): give a tuple of some of {', '.join(QDTYPES)}, "
                                 f"e.g. ('int8',)")
        if self.dtypes is not None and not (isinstance(self.dtypes, tuple) and self.dtypes
                                            and set(self.dtypes) <= set(DTYPES)):
            raise ValueError(f"Limits(dtypes={self.dtypes!r}): give a tuple of some of {', '.join(DTYPES)}, "
                             f"e.g. ('float32', 'float16')")
        if self.normalized_dims is not None and not (isinstance(self.normalized_dims, int)
                                                     and self.normalized_dims >= 1):
            raise ValueError(f"Limits(normalized_dims={self.normalized_dims!r}): give a whole number >= 1 (1: the "
                             f"last dim only), or None")

    def _cite(self) -> str:
        return f" ({self.source})" if self.source else ""

    def eps_problem(self, eps: float) -> str | None:
        """Why ``eps`` is outside the documented range, or None."""
        low, high = self.eps
        if low <= eps <= high:
            return None
        return f"eps {eps:g} is outside the documented range [{low:g}, {high:g}]{self._cite()}"

    def case_problem(self, rank: int, eps: float, layout: str, dy_broadcast: bool = False,
                     hidden: int | None = None, *, dtype: str | None = None, residual_dtype: str | None = None,
                     param_dtype: str | None = None, qdtype: str | None = None,
                     scale_ub: float | None = None, normalized_dims: int | None = None) -> str | None:
        """Why a case of x's ``rank``, ``eps``, ``layout``, normalized size ``hidden``, its ``normalized_dims`` and x's
        ``dtype`` (with a fused operation's ``residual_dtype``, the parameters' ``param_dtype``, a quantized one's
        ``qdtype`` and dynamic ``scale_ub``) is outside the limits, or None."""
        problem = self.eps_problem(eps)
        if problem:
            return problem
        if dtype is not None and self.dtypes is not None and dtype not in self.dtypes:
            return f"{dtype} x is not among the dtypes it takes, {', '.join(self.dtypes)}{self._cite()}"
        if normalized_dims is not None and self.normalized_dims is not None and normalized_dims > self.normalized_dims:
            most = "the last dim only" if self.normalized_dims == 1 else f"at most {self.normalized_dims} trailing dims"
            return f"it normalizes {most}, not {normalized_dims} trailing dims{self._cite()}"
        if rank < self.min_rank:
            return f"x has rank {rank}, below the documented minimum {self.min_rank}{self._cite()}"
        if hidden is not None and hidden % self.hidden_multiple:
            return (f"the normalized size {hidden} is not a multiple of {self.hidden_multiple}, which the library "
                    f"requires{self._cite()}")
        for wanted in (layout, "dybroadcast") if dy_broadcast else (layout,):
            if self.layouts is not None and wanted not in self.layouts:
                return f"layout {wanted} is not among the documented ones, {', '.join(self.layouts)}{self._cite()}"
        for what, rule, given in (("residual", self.residual_in_x_dtype, residual_dtype),
                                  ("weight and bias", self.params_in_x_dtype, param_dtype)):
            if rule and given not in (None, dtype):
                return f"a {given} {what} with {dtype} x: the library takes the {what} in x's dtype{self._cite()}"
        if qdtype is not None and self.qdtypes is not None and qdtype not in self.qdtypes:
            return f"the library stores no {qdtype} codes (it stores {', '.join(self.qdtypes)}){self._cite()}"
        if scale_ub is not None and not self.scale_ub:
            return f"the library takes no upper bound on a dynamic scale (scale_ub {scale_ub:g}){self._cite()}"
        return None


class Backend(abc.ABC):
    """An implementation under test of one or more of normbench's operations. Subclass it; see the module doc.

    Semantics are ``torch.nn.functional``'s (``normbench.core.operations``): normalize over the trailing
    ``normalized_shape`` dims; ``weight`` (and LayerNorm's ``bias``), of shape ``normalized_shape``, may be
    None; the output has x's shape and dtype.
    """

    #: the name ``--impl`` selects; must equal the entry-point name
    name: ClassVar[str]
    #: one line for ``normbench list``: what it wraps and how it computes (e.g. "torch.nn.functional.layer_norm,
    #: CUDA if available else CPU; backward via autograd"); the list and the run's header show it
    description: ClassVar[str] = ""
    #: the operations it implements, of ``normbench.core.operations.NAMES``: it defines each one's entry point
    #: (and with ``has_backward`` its ``<name>_backward``); the suites skip the others, saying so
    operations: ClassVar[Sequence[str]] = ("layer_norm",)
    #: the dtype names it supports, of "float64", "float32", "float16", "bfloat16"
    dtypes: ClassVar[Sequence[str]] = DTYPES
    #: whether it defines the backward entry point of every operation it declares
    has_backward: ClassVar[bool] = True
    #: whether its arrays have strides: then :meth:`asarray` must keep the host
    #: array's layout (strides, offset, stride-0 broadcasts) so layout bugs show
    strided: ClassVar[bool] = False
    #: whether its RMSNorm takes one weight per head (qk-norm): for x of shape ``[..., heads, *normalized_shape]``
    #: a weight of shape ``(heads, *normalized_shape)``, row ``r`` scaled by head ``r % heads``'s row, and dweight of
    #: that shape, each head's sum (``normbench.core.cases.Case.per_head``); the suites skip such cases otherwise
    per_head_weights: ClassVar[bool] = False
    #: top-level modules it needs; :meth:`availability` checks them without importing
    requires: ClassVar[Sequence[str]] = ()
    #: the fix for a missing requirement, e.g. ``pip install 'normbench[torch]'``
    install_hint: ClassVar[str] = ""
    #: where it can compute, for ``normbench list`` before it is created (e.g. "cuda or cpu")
    devices: ClassVar[str] = "cpu"
    #: where this instance computes; set in ``__init__`` once known, with :func:`device_label`
    #: (``"cpu"``, ``"cuda:0 (NVIDIA H100)"``): ``normbench list --probe``, the run's header and the
    #: results all show this string
    device: str = "cpu"
    #: the most elements (rows x hidden) of one case this instance can afford where it runs;
    #: larger cases are skipped with a reason naming this attribute. None: no limit. Set it in
    #: ``__init__`` when it depends on the device (the Triton backend caps its CPU interpreter).
    max_elements: int | None = None
    #: why this instance's timings would mean nothing where it runs, or None (they mean something).
    #: Set it in ``__init__`` when it depends on the device, e.g. the Triton backend under its CPU
    #: interpreter: "Triton interpreter on CPU: timings are meaningless". The conformance suites
    #: run as usual; the throughput suite skips every case of this backend with this reason, and
    #: ``normbench run`` names it, with the reason, in its header, its summary and the report.
    timing_note: str | None = None
    #: when this instance runs on a runtime that computes differently from the device the kernel
    #: is written for, what that runtime does, or None. Set it in ``__init__`` when it depends on the
    #: device, e.g. the Triton backend under its CPU interpreter (bf16 arithmetic on raw bit
    #: patterns, fp32 -> bf16 conversion by truncation). A failure that such a runtime explains
    #: says so (``normbench.check.hypotheses``); ``normbench run`` shows it in its header and report.
    runtime_note: str | None = None
    #: whether a backward entry point runs a forward pass itself (an autograd backend builds the
    #: graph first). Without :meth:`prepare_backward` such a backward cannot be timed alone: its
    #: throughput rows are measured and modelled as forward-training+backward, and say so.
    backward_includes_forward: ClassVar[bool] = False
    #: whether its CUDA work is queued on torch's current stream (torch, Triton kernels launched through torch), so
    #: that CUDA events recorded there time it; otherwise (JAX/XLA, ONNX Runtime: streams of their own) the host
    #: clock times it on a CUDA device, around its :meth:`synchronize`, as on a CPU. Default: False (the timer
    #: that sees any backend's work); ``normbench.kit.torch.AutogradBackend`` sets True
    timed_by_cuda_events: ClassVar[bool] = False
    #: the documented limits of the library (eps range, minimum rank, layouts): cases outside them
    #: are skipped with the reason, and the paper's invariance checks choose re-scaling factors
    #: whose eps/delta^2 stays inside the eps range (or skip, saying so). Default: none.
    limits: ClassVar[Limits] = Limits()
    #: limits of single operations, each replacing :attr:`limits` for its operation (``{"rms_norm":
    #: Limits(dtypes=("float32",), source=...)}``): what the library documents per operation (:meth:`limits_for`)
    operation_limits: ClassVar[Mapping[str, Limits]] = {}
    #: failures this backend is known to have, each with the reason: ``{"test pattern": "reason"}``
    #: or ``{"test pattern | message regex": "reason"}``; a test pattern is a glob over the test id
    #: (with or without the backend's name), the case id or the case family. They are reported as
    #: "known deviation" (xfailed), never as passed; see ``harness/core/deviations.py``. Example::
    #:
    #:     known_deviations = {"*-offset1e4": "one-pass variance: E[x^2] - E[x]^2 cancels at mean 1e4 sigma"}
    known_deviations: ClassVar[Mapping[str, str]] = {}
    #: the attribute the class declared its operations in: ``operations``, or normbench 0.2's ``normalizations``
    operations_attribute: ClassVar[str] = "operations"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "normalizations" in vars(cls) and "operations" not in vars(cls):
            cls.operations = cls.normalizations
            cls.operations_attribute = "normalizations"
            _deprecated(cls, "normalizations = (...)", f"operations = {cls.normalizations!r}")
        for attribute, function in vars(cls).items():
            legacy = _legacy_spelling(attribute, function)
            if legacy is not None:
                op, new = legacy
                _deprecated(cls, f"{attribute}({', '.join(_parameters(function))})",
                            f"{new}(self, op, {_HOOK_PARAMETERS[new]}), called for every operation (op == {op!r}: "
                            f"args = ({', '.join(operations.of(op).params)}))")

    # -- metadata ---------------------------------------------------------------

    def limits_for(self, operation: str) -> Limits:
        """The documented limits of ``operation`` (a name of ``normbench.core.operations.NAMES``): its own
        :attr:`operation_limits` where given, else :attr:`limits`."""
        return self.operation_limits.get(operation, self.limits)

    @classmethod
    def availability(cls) -> Availability:
        """Whether this backend can run here, without importing heavy modules.

        The default checks ``requires`` with :func:`importlib.util.find_spec`.
        Override to add checks (a GPU, a driver); keep it cheap. An import
        that fails later in ``__init__`` is reported by the registry as well.
        """
        for module in cls.requires:
            if importlib.util.find_spec(module) is None:
                hint = f"; {cls.install_hint}" if cls.install_hint else ""
                return Availability.no(f"{module} is not installed{hint}")
        return Availability.yes()

    @classmethod
    def library_version(cls) -> str:
        """The version of the library it wraps, for ``normbench list``, the run's header and the results: by
        default its first requirement's (``requires[0]``) distribution version, read from package metadata
        without importing it; "" when unknown. Override it when the library is not the first requirement."""
        for module in cls.requires[:1]:
            try:
                return importlib.metadata.version(module)
            except importlib.metadata.PackageNotFoundError:
                return ""
        return ""

    # -- arrays (untimed) -------------------------------------------------------

    @abc.abstractmethod
    def asarray(self, host: Any) -> Any:
        """A host ``numpy.ndarray`` (bfloat16 as ``ml_dtypes.bfloat16``) as this
        backend's array on its device, same dtype. Strided backends keep the layout."""

    @abc.abstractmethod
    def to_numpy(self, native: Any) -> Any:
        """This backend's array back as a ``numpy.ndarray`` (bfloat16 as ``ml_dtypes.bfloat16``)."""

    # -- LayerNorm's optional statistics (its entry points, beside layer_norm) -----------------

    def layer_norm_statistics(
        self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, Any] | None:
        """Optional: the statistics LayerNorm's forward saves, ``(mean, rstd)``, one value
        per row (any shape with that many elements; fp32 or wider), with
        ``rstd = 1/sqrt(var + eps)``. Return None (the default) if not exposed."""
        return None

    def layer_norm_with_statistics(
        self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, tuple[Any, Any] | None]:
        """``(y, statistics)``: what ``layer_norm`` returns, and what :meth:`layer_norm_statistics`
        returns for the same call. The forward suite checks both from this one call. The default
        calls the two; override it where one launch gives both (an autograd function's forward
        saves them), so a case costs one forward, not two. Its ``y`` must be bit-identical to
        ``layer_norm``'s: the suite compares them (a subclass that overrides ``layer_norm`` must
        override this too)."""
        return (self.layer_norm(x, normalized_shape, weight, bias, eps),  # type: ignore[attr-defined]
                self.layer_norm_statistics(x, normalized_shape, weight, bias, eps))

    # -- hooks: one each, for every operation ----------------------------------------------

    def warmup(self, op: str, args: tuple) -> None:
        """Optional: do, now, whatever the first call of operation ``op`` on arguments like ``args``
        would do besides computing -- JIT compilation, autotuning, handle or workspace creation --
        for its entry point and (with ``has_backward``) its backward with a dy like x, and wait for
        it to finish.

        The throughput harness calls it with a case's native arrays (from :meth:`asarray`) before
        timing that case, so that none of it lands in a timed region: afterwards, calls with the
        same shapes, dtypes, parameter presence and normalized_shape (and any eps) must not compile.
        Default: nothing to prepare (an eager backend). Example, a JIT backend::

            def warmup(self, op, args):
                x = args[0]
                getattr(self, op)(*args)
                getattr(self, f"{op}_backward")(self.zeros_like(x), *args)
                self.synchronize()
        """

    def prepare_backward(self, op: str, args: tuple, cotangents: tuple) -> Callable[[], Any] | None:
        """Optional, for timing: run now whatever the backward of ``op`` at ``args`` needs (the forward,
        an autograd graph, saved residuals) and return a callable that runs only the backward with
        ``cotangents`` (``(dy,)``) and returns what ``<op>_backward`` returns, the same on every call.
        The throughput suite times that callable, so a backward's GB/s counts backward traffic only.
        None (the default): the suite times ``<op>_backward`` (see ``backward_includes_forward``)."""
        return None

    def forward_backward(self, op: str, args: tuple, cotangents: tuple) -> tuple[Any, Any]:
        """One training step of ``op``, exactly one forward and one backward: ``(outputs, gradients)``,
        as the entry point and ``<op>_backward`` return them. The default calls the two, right unless
        the backward runs a forward itself (``backward_includes_forward``): such a backend overrides it."""
        operation = operations.of(op)
        outputs = operation.forward(self, args)
        return outputs, operation.backward(self, operation.backward_args_from(args, outputs), cotangents)

    def separates_backward(self, op: str = "layer_norm") -> bool:
        """Whether a backward of ``op`` can be timed alone: it runs no forward, or :meth:`prepare_backward`
        prepares one."""
        return operations.of(op).separates_backward(self)

    @classmethod
    def hook_for(cls, name: str, op: str) -> Hook:
        """This class's hook ``name`` for operation ``op``, in the current convention (:func:`hook`)."""
        return hook(cls, name, op)

    def set_threads(self, threads: int | None) -> int | None:
        """Optional: set the CPU threads the backend's library computes with to ``threads`` (None:
        the library's own default, as it was when the backend was created) and return the count
        now in effect; None (the default) when the library has no such setting. The conformance
        suites run every backend with one thread (``--normbench-threads``), so that a CPU kernel's
        reduction order, and with it which cases pass, does not depend on the machine's cores."""
        return None

    def synchronize(self) -> None:
        """Block until queued device work is done. Default: nothing to wait for."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"


#: each hook's parameters after ``op``, for messages
_HOOK_PARAMETERS = {"warmup": "args", "prepare_backward": "args, cotangents", "forward_backward": "args, cotangents"}


def _parameters(function: Any) -> list[str]:
    """The names of ``function``'s parameters after ``self`` (``*args`` spelled so); [] if unreadable."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return []
    return [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
            for p in params[1:]]


def _legacy_spelling(attribute: str, function: Any) -> tuple[str, str] | None:
    """``(operation, new hook)`` when a class attribute is a hook in normbench 0.2's per-normalization
    spelling: RMSNorm's own names, or ``warmup``/``prepare_backward``/``forward_backward`` written with
    LayerNorm's parameters (``normalized_shape`` among them; the new hooks take ``op, args[, cotangents]``)."""
    if not callable(function):
        return None
    if attribute in operations.LEGACY_HOOKS:
        return operations.LEGACY_HOOKS[attribute]
    if attribute in _HOOK_PARAMETERS and "normalized_shape" in _parameters(function):
        return "layer_norm", attribute
    return None


def _deprecated(cls: type, old: str, new: str) -> None:
    warnings.warn(f"{cls.__module__}.{cls.__qualname__}: {old} is normbench 0.2's spelling, deprecated; write {new} "
                  f"(docs/writing-a-backend.md). It keeps working, with this warning, through the 0.x releases",
                  DeprecationWarning, stacklevel=4)


@dataclass(frozen=True)
class Hook:
    """One hook of one backend class for one operation, called in the current convention:
    ``hook(backend, args)`` (``warmup``) or ``hook(backend, args, cotangents)``."""

    name: str
    op: str
    function: Callable[..., Any]
    #: the class whose definition this is (``Backend``: the default)
    defined_by: type
    #: written in normbench 0.2's per-normalization spelling (the operation's own parameters, dy first)
    legacy: bool

    @property
    def is_default(self) -> bool:
        """Whether this is :class:`Backend`'s own default (the backend does not define the hook for ``op``)."""
        return self.defined_by is Backend

    def __call__(self, backend: Any, args: tuple, *cotangents: tuple) -> Any:
        if not self.legacy:
            return self.function(backend, self.op, args, *cotangents)
        return self.function(backend, *(cotangents[0] if cotangents else ()), *args)


@functools.cache
def hook(cls: type, name: str, op: str) -> Hook:
    """The :class:`Hook` ``cls`` provides for hook ``name`` (``warmup``, ``prepare_backward``,
    ``forward_backward``) of operation ``op``: the most derived class that defines the hook for
    ``op`` wins, whether in the current spelling (called with the operation's name) or in normbench
    0.2's per-normalization one (adapted here, the one place that knows it).

    >>> class Old(Backend):
    ...     name = "old"
    ...     def asarray(self, host): return host
    ...     def to_numpy(self, native): return native
    ...     def warmup(self, x, normalized_shape, weight, bias, eps): print("LayerNorm warmup", normalized_shape)
    >>> hook(Old, "warmup", "layer_norm")(Old(), ("x", (4,), None, None, 1e-5))
    LayerNorm warmup (4,)
    >>> hook(Old, "warmup", "rms_norm").defined_by is Backend  # Old's warmup is LayerNorm's only
    True
    """
    legacy_names = [old for old, (for_op, new) in operations.LEGACY_HOOKS.items() if for_op == op and new == name]
    for klass in cls.__mro__:
        own = vars(klass)
        for old in legacy_names:
            if callable(own.get(old)):
                return Hook(name, op, own[old], klass, legacy=True)
        function = own.get(name)
        if callable(function):
            legacy = _legacy_spelling(name, function)
            if legacy is None:
                return Hook(name, op, function, klass, legacy=False)
            if legacy[0] == op:
                return Hook(name, op, function, klass, legacy=True)
    raise AssertionError(f"{cls.__name__} has no {name}")  # Backend defines every hook
