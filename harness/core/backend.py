"""The Backend contract: what every LayerNorm (and RMSNorm) implementation provides.

A backend is a class registered under the entry-point group
``normbench.backends``. It says what it supports, whether it can run here,
converts host NumPy arrays to its own arrays and back, and computes the
forward pass and its vector-Jacobian product. Cases, tolerances, timing and
reporting belong to the harness, so a backend stays a page of code.

Required: ``name``, :meth:`asarray`, :meth:`to_numpy`, :meth:`layer_norm`.
Optional: :meth:`layer_norm_backward` (set ``has_backward = False`` if absent),
:meth:`layer_norm_statistics` (and :meth:`layer_norm_with_statistics`, both from one call),
:meth:`synchronize`, :meth:`warmup`, :meth:`set_threads` (the library's CPU thread count),
:meth:`prepare_backward` and :meth:`forward_backward` (so that the throughput suite times
a backward alone, and a training step as exactly one forward and one backward; set
``backward_includes_forward`` when ``layer_norm_backward`` runs a forward itself),
:meth:`availability`, :meth:`library_version`, the ``device``, ``max_elements``
and ``timing_note`` attributes, the documented ``limits`` and the ``runtime_note``, and
``known_deviations`` (failures it is known to have, with the reasons). :func:`device_label` writes a
``device`` string in the form normbench shows and records everywhere.

RMSNorm (``normbench.core.norms``): a backend that also implements it declares
``normalizations = ("layer_norm", "rms_norm")`` and defines :meth:`rms_norm` and (with
``has_backward``) :meth:`rms_norm_backward`; optionally :meth:`prepare_rms_norm_backward`,
:meth:`rms_norm_forward_backward` and :meth:`warmup_rms_norm`, the counterparts of the
LayerNorm hooks. A backend may implement RMSNorm alone (``normalizations = ("rms_norm",)``;
it must still define :meth:`layer_norm`, which may raise). LayerNorm-only backends need nothing new.

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
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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
    and ``"dybroadcast"`` for a stride-0 dy), None for every one; ``source``: where the limits
    are documented, quoted in every skip.

    >>> Limits(eps=(0.0, 1e-3), source="its docs").eps_problem(0.1)
    'eps 0.1 is outside the documented range [0, 0.001] (its docs)'
    """

    eps: tuple[float, float] = (0.0, float("inf"))
    min_rank: int = 1
    layouts: tuple[str, ...] | None = None
    source: str = ""

    def _cite(self) -> str:
        return f" ({self.source})" if self.source else ""

    def eps_problem(self, eps: float) -> str | None:
        """Why ``eps`` is outside the documented range, or None."""
        low, high = self.eps
        if low <= eps <= high:
            return None
        return f"eps {eps:g} is outside the documented range [{low:g}, {high:g}]{self._cite()}"

    def case_problem(self, rank: int, eps: float, layout: str, dy_broadcast: bool = False) -> str | None:
        """Why a case of x's ``rank``, ``eps`` and ``layout`` is outside the limits, or None."""
        problem = self.eps_problem(eps)
        if problem:
            return problem
        if rank < self.min_rank:
            return f"x has rank {rank}, below the documented minimum {self.min_rank}{self._cite()}"
        for wanted in (layout, "dybroadcast") if dy_broadcast else (layout,):
            if self.layouts is not None and wanted not in self.layouts:
                return f"layout {wanted} is not among the documented ones, {', '.join(self.layouts)}{self._cite()}"
        return None


class Backend(abc.ABC):
    """A LayerNorm implementation under test. Subclass it; see the module doc.

    Semantics are ``torch.nn.functional.layer_norm``'s: normalize over the
    trailing ``normalized_shape`` dims with the biased variance and eps inside
    the square root; ``weight`` and ``bias`` (shape ``normalized_shape``) may be
    None; the output has x's shape and dtype.
    """

    #: the name ``--impl`` selects; must equal the entry-point name
    name: ClassVar[str]
    #: one line for ``normbench list``
    description: ClassVar[str] = ""
    #: the normalizations it implements, of ``normbench.core.norms.NAMES``; the suites skip the others,
    #: saying so, and ``normbench list`` shows them
    normalizations: ClassVar[Sequence[str]] = ("layer_norm",)
    #: the dtype names it supports, of "float64", "float32", "float16", "bfloat16"
    dtypes: ClassVar[Sequence[str]] = DTYPES
    #: whether :meth:`layer_norm_backward` is implemented
    has_backward: ClassVar[bool] = True
    #: whether its arrays have strides: then :meth:`asarray` must keep the host
    #: array's layout (strides, offset, stride-0 broadcasts) so layout bugs show
    strided: ClassVar[bool] = False
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
    #: whether :meth:`layer_norm_backward` runs a forward pass itself (an autograd backend builds the
    #: graph first). Without :meth:`prepare_backward` such a backward cannot be timed alone: its
    #: throughput rows are measured and modelled as forward-training+backward, and say so.
    backward_includes_forward: ClassVar[bool] = False
    #: the documented limits of the library (eps range, minimum rank, layouts): cases outside them
    #: are skipped with the reason, and the paper's invariance checks choose re-scaling factors
    #: whose eps/delta^2 stays inside the eps range (or skip, saying so). Default: none.
    limits: ClassVar[Limits] = Limits()
    #: failures this backend is known to have, each with the reason: ``{"test pattern": "reason"}``
    #: or ``{"test pattern | message regex": "reason"}``; a test pattern is a glob over the test id
    #: (with or without the backend's name), the case id or the case family. They are reported as
    #: "known deviation" (xfailed), never as passed; see ``harness/core/deviations.py``. Example::
    #:
    #:     known_deviations = {"*-offset1e4": "one-pass variance: E[x^2] - E[x]^2 cancels at mean 1e4 sigma"}
    known_deviations: ClassVar[Mapping[str, str]] = {}

    # -- metadata ---------------------------------------------------------------

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
        """The version of the library it wraps (its first requirement), read
        from package metadata without importing it; "" when unknown."""
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

    # -- computation (timed) ----------------------------------------------------

    @abc.abstractmethod
    def layer_norm(self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float) -> Any:
        """y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims."""

    def layer_norm_backward(
        self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, Any, Any]:
        """The vector-Jacobian product: ``(dx, dweight, dbias)``, None where
        weight or bias is None. Implement it, or set ``has_backward = False``."""
        raise NotImplementedError(f"backend {self.name!r} has no backward (has_backward = False)")

    def prepare_backward(
        self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> Callable[[], tuple[Any, Any, Any]] | None:
        """Optional, for timing: run now whatever the backward needs (the forward, an autograd
        graph, saved residuals) and return a callable that runs only the backward and returns
        ``(dx, dweight, dbias)`` as :meth:`layer_norm_backward` does, the same on every call. The
        throughput suite times that callable, so a backward's GB/s counts backward traffic only.
        None (the default): the suite times :meth:`layer_norm_backward` (see ``backward_includes_forward``)."""
        return None

    def forward_backward(
        self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, tuple[Any, Any, Any]]:
        """One training step, exactly one forward and one backward: ``(y, (dx, dweight, dbias))``.
        The default calls :meth:`layer_norm` then :meth:`layer_norm_backward`, right unless the
        backward runs a forward itself (``backward_includes_forward``): such a backend overrides it."""
        return (self.layer_norm(x, normalized_shape, weight, bias, eps),
                self.layer_norm_backward(dy, x, normalized_shape, weight, bias, eps))

    def separates_backward(self, norm: str = "layer_norm") -> bool:
        """Whether a backward of ``norm`` can be timed alone: it runs no forward, or :meth:`prepare_backward`
        (:meth:`prepare_rms_norm_backward`) prepares one."""
        hook = "prepare_rms_norm_backward" if norm == "rms_norm" else "prepare_backward"
        return not self.backward_includes_forward or getattr(type(self), hook) is not getattr(Backend, hook)

    def layer_norm_statistics(
        self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, Any] | None:
        """Optional: the statistics the forward saves, ``(mean, rstd)``, one value
        per row (any shape with that many elements; fp32 or wider), with
        ``rstd = 1/sqrt(var + eps)``. Return None (the default) if not exposed."""
        return None

    def layer_norm_with_statistics(
        self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float
    ) -> tuple[Any, tuple[Any, Any] | None]:
        """``(y, statistics)``: what :meth:`layer_norm` returns, and what :meth:`layer_norm_statistics`
        returns for the same call. The forward suite checks both from this one call. The default
        calls the two; override it where one launch gives both (an autograd function's forward
        saves them), so a case costs one forward, not two. Its ``y`` must be bit-identical to
        :meth:`layer_norm`'s: the suite compares them (a subclass that overrides
        :meth:`layer_norm` must override this too)."""
        return (self.layer_norm(x, normalized_shape, weight, bias, eps),
                self.layer_norm_statistics(x, normalized_shape, weight, bias, eps))

    def set_threads(self, threads: int | None) -> int | None:
        """Optional: set the CPU threads the backend's library computes with to ``threads`` (None:
        the library's own default, as it was when the backend was created) and return the count
        now in effect; None (the default) when the library has no such setting. The conformance
        suites run every backend with one thread (``--normbench-threads``), so that a CPU kernel's
        reduction order, and with it which cases pass, does not depend on the machine's cores."""
        return None

    # -- RMSNorm (declare "rms_norm" in ``normalizations``) ---------------------------------

    def rms_norm(self, x: Any, normalized_shape: tuple[int, ...], weight: Any, eps: float | None) -> Any:
        """``y = x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims, y in x's dtype and shape;
        ``weight`` may be None; ``eps=None`` means :func:`normbench.core.dtypes.default_rms_eps` of x's dtype
        (``torch.nn.functional.rms_norm``'s semantics). A library with another parameterization
        converts at this boundary and says so in ``description`` (Gemma's ``1 + weight``: pass
        ``weight - 1``; docs/writing-a-backend.md lists the conventions)."""
        raise NotImplementedError(f"backend {self.name!r} has no rms_norm (normalizations = "
                                  f"{tuple(self.normalizations)!r})")

    def rms_norm_backward(self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                          eps: float | None) -> tuple[Any, Any]:
        """The vector-Jacobian product of :meth:`rms_norm`: ``(dx, dweight)``, dweight None when weight is."""
        raise NotImplementedError(f"backend {self.name!r} has no rms_norm_backward")

    def prepare_rms_norm_backward(self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                                  eps: float | None) -> Callable[[], tuple[Any, Any]] | None:
        """:meth:`prepare_backward` for RMSNorm: a callable running only the backward, or None."""
        return None

    def rms_norm_forward_backward(self, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                                  eps: float | None) -> tuple[Any, tuple[Any, Any]]:
        """:meth:`forward_backward` for RMSNorm: ``(y, (dx, dweight))`` from exactly one forward and one backward."""
        return (self.rms_norm(x, normalized_shape, weight, eps),
                self.rms_norm_backward(dy, x, normalized_shape, weight, eps))

    def warmup_rms_norm(self, x: Any, normalized_shape: tuple[int, ...], weight: Any, eps: float | None) -> None:
        """:meth:`warmup` for RMSNorm: compile whatever :meth:`rms_norm` and its backward would compile."""

    def synchronize(self) -> None:
        """Block until queued device work is done. Default: nothing to wait for."""

    def warmup(self, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any, eps: float) -> None:
        """Optional: do, now, whatever the first call on arrays like these would do
        besides computing -- JIT compilation, autotuning, handle or workspace
        creation -- for :meth:`layer_norm` and (with ``has_backward``)
        :meth:`layer_norm_backward` with a dy like x, and wait for it to finish.

        The throughput harness calls it with a case's native arrays (from
        :meth:`asarray`) before timing that case, so that none of it lands in a
        timed region: afterwards, calls with the same shapes, dtypes, weight/bias
        presence and normalized_shape (and any eps) must not compile. Default:
        nothing to prepare (an eager backend). Example, a JIT backend::

            def warmup(self, x, normalized_shape, weight, bias, eps):
                dy = self.zeros_like(x)
                self.layer_norm(x, normalized_shape, weight, bias, eps)
                self.layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
                self.synchronize()
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"
