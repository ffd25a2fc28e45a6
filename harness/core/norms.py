"""The normalizations normbench checks, and how the harness calls each on a backend.

Two today, with ``torch.nn.functional``'s semantics (normalize over the trailing
``normalized_shape`` dims, weight of that shape or None, y in x's dtype):

* ``layer_norm``: ``y = (x - mean) / sqrt(var + eps) * weight + bias``, biased variance;
* ``rms_norm``: ``y = x / sqrt(mean(x^2) + eps) * weight``: no mean, no bias; ``eps=None``
  means :func:`normbench.core.dtypes.default_rms_eps` (what torch does).

A backend declares the ones it implements (``Backend.normalizations``) and provides each
one's methods (:class:`Norm` names them). Everything in the harness that is the same for
both (cases, the oracle's shape, error model, checks, timing, reports) takes a :class:`Norm`
or its name and calls the backend through it, so there is one piece of code, not two stacks.
RMSNorm is LayerNorm without centring and without bias: ``centered`` and ``has_bias`` are
the two facts the rest of the harness asks.

>>> RMS_NORM.call_forward  # the Backend method the harness times for the forward
'rms_norm'
>>> of("rms_norm").label, [n.name for n in NORMS]
('RMSNorm', ['layer_norm', 'rms_norm'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from normbench.core.dtypes import default_rms_eps
from normbench.core.exceptions import InvalidInput


@dataclass(frozen=True)
class Norm:
    """One normalization: its facts, and the names of the backend methods that compute it."""

    #: the name a backend declares and results record: "layer_norm", "rms_norm"
    name: str
    #: how people write it: "LayerNorm", "RMSNorm"
    label: str
    #: the prefix of its case ids ("" for LayerNorm, whose ids predate RMSNorm and stay as they were)
    id_prefix: str
    #: whether the mean is subtracted (LayerNorm) or not (RMSNorm)
    centered: bool
    #: whether it has a bias (LayerNorm) or not (RMSNorm)
    has_bias: bool
    #: the formula, for docs and reports
    formula: str
    call_forward: str
    call_backward: str
    call_prepare_backward: str
    call_forward_backward: str
    call_warmup: str

    def __str__(self) -> str:
        return self.name

    # -- calling a backend ---------------------------------------------------------------
    #
    # LayerNorm's methods take (weight, bias); RMSNorm's take weight alone and return
    # (dx, dweight). Here every call takes (weight, bias) and every backward returns
    # (dx, dweight, dbias), dbias None for RMSNorm, so the harness has one code path.

    def _params(self, weight: Any, bias: Any) -> tuple:
        if self.has_bias:
            return (weight, bias)
        if bias is not None:
            raise InvalidInput(f"{self.label} has no bias; got one. Fix: pass bias=None")
        return (weight,)

    def _three(self, grads: Any) -> Any:
        if self.has_bias or not isinstance(grads, (tuple, list)) or len(grads) != 2:
            return grads  # the checks report a wrong return value as it is
        return (*grads, None)

    def forward(self, backend: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any,
                eps: float | None) -> Any:
        return getattr(backend, self.call_forward)(x, normalized_shape, *self._params(weight, bias), eps)

    def forward_with_statistics(self, backend: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                                bias: Any, eps: float | None) -> tuple[Any, Any]:
        """``(y, statistics)``; only LayerNorm has a statistics hook, so RMSNorm's are None."""
        if self.name == "layer_norm":
            return backend.layer_norm_with_statistics(x, normalized_shape, weight, bias, eps)
        return self.forward(backend, x, normalized_shape, weight, bias, eps), None

    def backward(self, backend: Any, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any,
                 eps: float | None) -> Any:
        """``(dx, dweight, dbias)``, dbias None for RMSNorm."""
        grads = getattr(backend, self.call_backward)(dy, x, normalized_shape, *self._params(weight, bias), eps)
        return self._three(grads)

    def prepare_backward(self, backend: Any, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                         bias: Any, eps: float | None) -> Callable[[], Any] | None:
        prepared = getattr(backend, self.call_prepare_backward)(dy, x, normalized_shape,
                                                                *self._params(weight, bias), eps)
        return None if prepared is None else (lambda: self._three(prepared()))

    def forward_backward(self, backend: Any, dy: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any,
                         bias: Any, eps: float | None) -> tuple[Any, Any]:
        y, grads = getattr(backend, self.call_forward_backward)(dy, x, normalized_shape,
                                                                *self._params(weight, bias), eps)
        return y, self._three(grads)

    def warmup(self, backend: Any, x: Any, normalized_shape: tuple[int, ...], weight: Any, bias: Any,
               eps: float | None) -> None:
        getattr(backend, self.call_warmup)(x, normalized_shape, *self._params(weight, bias), eps)

    def oracle_eps(self, eps: float | None, dtype: str) -> float:
        """The eps the exact function uses: ``eps``, or for None the default (RMSNorm only)."""
        if eps is None:
            if self.name != "rms_norm":
                raise InvalidInput(f"{self.label} needs an eps (a number >= 0); only RMSNorm has a default")
            return default_rms_eps(dtype)
        return float(eps)


LAYER_NORM = Norm("layer_norm", "LayerNorm", "", centered=True, has_bias=True,
                  formula="y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias",
                  call_forward="layer_norm", call_backward="layer_norm_backward",
                  call_prepare_backward="prepare_backward", call_forward_backward="forward_backward",
                  call_warmup="warmup")
RMS_NORM = Norm("rms_norm", "RMSNorm", "rms-", centered=False, has_bias=False,
                formula="y = x / sqrt(mean(x^2) + eps) * weight",
                call_forward="rms_norm", call_backward="rms_norm_backward",
                call_prepare_backward="prepare_rms_norm_backward", call_forward_backward="rms_norm_forward_backward",
                call_warmup="warmup_rms_norm")
#: every normalization, in the order reports show them
NORMS: tuple[Norm, ...] = (LAYER_NORM, RMS_NORM)
NAMES: tuple[str, ...] = tuple(n.name for n in NORMS)


def of(name: str | Norm) -> Norm:
    """The :class:`Norm` called ``name`` (a Norm is returned as it is)."""
    if isinstance(name, Norm):
        return name
    for norm in NORMS:
        if norm.name == name:
            return norm
    raise InvalidInput(f"unknown normalization {name!r}; expected one of {', '.join(NAMES)}")


def of_case_id(case_id: str) -> Norm:
    """The normalization a case id names: RMSNorm's start with ``rms-``, every other is LayerNorm's
    (whose ids predate RMSNorm). The one place that reads a case id's normalization.

    >>> of_case_id("rms-float16-rows5-hidden33-offset3").name, of_case_id("float16-rows5-hidden33-offset3").name
    ('rms_norm', 'layer_norm')
    """
    for norm in NORMS:
        if norm.id_prefix and case_id.startswith(norm.id_prefix):
            return norm
    return LAYER_NORM


def strip_id(case_id: str) -> str:
    """A case id without its normalization's prefix: ``rms-float16-...`` -> ``float16-...``."""
    return case_id.removeprefix(of_case_id(case_id).id_prefix)


def implemented(backend: Any) -> tuple[str, ...]:
    """The normalizations a backend (class or instance) declares: ``normalizations``, default LayerNorm."""
    return tuple(getattr(backend, "normalizations", ("layer_norm",)))


def missing_reason(backend: Any, norm: str | Norm) -> str | None:
    """Why ``backend`` cannot run ``norm`` (it does not declare it), or None."""
    norm = of(norm)
    have = implemented(backend)
    if norm.name in have:
        return None
    return (f"{getattr(backend, 'name', backend)!s} implements {', '.join(have)} only, not {norm.name} "
            f"(declare normalizations = {(*have, norm.name)!r} and define {norm.call_forward} to add it)")
