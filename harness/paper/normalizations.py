"""The three normalizations of Table 1, and RMSNorm, each applied to a layer with a bound on its error.

* Batch normalization (paper eq. 2 with batch statistics): per hidden unit, mu and
  sigma over the training cases (rows) of the batch.
* Weight normalization (§4, Salimans and Kingma): mu = 0, sigma = ||w_j||, the
  norm of unit j's incoming weight vector.
* Layer normalization (eq. 3): per training case, mu and sigma over the units.

* RMSNorm (normbench's row, not the paper's): per training case, mu = 0 and sigma =
  rms over the units, followed by the gain alone (it has no bias).

Each of the paper's is followed by eq. 5's gain and bias. Batch and weight norm exist
here as float64 oracles only; layer norm and RMSNorm as the float64 oracle
(:class:`OracleRowLayerNorm`) and as a backend rounded to a dtype
(:class:`BackendRowLayerNorm`), one class for both, chosen by ``norm`` (``normbench.core.operations``;
the oracle's ``norm=`` and the error model's bound for that normalization). Calling a
normalizer returns :class:`Normalized`: the output and a componentwise bound on
its distance from the exact normalization of the layer's exact summed inputs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np

from normbench.check import error_model, oracle, sensitivity
from normbench.check.handover import Handover, host_array
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.dtypes import U64, host_dtype
from normbench.paper.layer import Layer


@dataclass(frozen=True)
class Normalized:
    """Output ``h`` (M, N) float64 and ``bound`` (M, N) on ``|h - exact|``; for layer norm,
    ``ref`` is the float64 oracle on the inputs as normalized (for Jacobians)."""

    h: np.ndarray
    bound: np.ndarray
    ref: oracle.Forward | None = None


def batch_norm(a: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Eq. 2 with batch statistics, in float64: ``gain*(a - mean_rows)/sqrt(var_rows + eps) + bias``."""
    a = np.asarray(a, np.float64)
    mu = a.mean(axis=0)
    centered = a - mu
    return centered / np.sqrt((centered * centered).mean(axis=0) + eps) * gain + bias


def weight_norm(a: np.ndarray, w: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """§4: ``gain * a / ||w_j|| + bias`` (mu = 0, sigma = the norm of unit j's incoming weights), float64."""
    return np.asarray(a, np.float64) / np.linalg.norm(np.asarray(w, np.float64), axis=0) * gain + bias


def _affine(layer: Layer) -> tuple[np.ndarray, np.ndarray]:
    n = layer.hidden
    return oracle.params_row(layer.gain, n, 1.0), oracle.params_row(layer.bias, n, 0.0)


class Normalizer(abc.ABC):
    """One row of Table 1: a normalization method applied to a :class:`~normbench.paper.layer.Layer`."""

    #: the Table 1 row: "batch", "weight" or "layer"
    method: str
    #: how it is computed, for reports
    label: str
    #: True when a training case's output depends on that case alone (then a row may be normalized alone)
    rowwise: bool

    @abc.abstractmethod
    def __call__(self, layer: Layer, eps: float) -> Normalized:
        """The normalized summed inputs of ``layer`` (eps is ignored by weight norm)."""


class OracleBatchNorm(Normalizer):
    """Batch norm in float64. Its error is LayerNorm's on the transposed summed inputs
    (the float64 forward bound of ``normbench.check.error_model`` without affine, N = rows), times
    ``|gain|``, plus the affine step's roundings ``3*u*(|gain*xhat| + |bias|)``."""

    method, label, rowwise = "batch", "float64 oracle (eq. 2, batch statistics)", False

    def __call__(self, layer: Layer, eps: float) -> Normalized:
        a = layer.summed_inputs()
        gain, bias = _affine(layer)
        h = batch_norm(a, gain, bias, eps)
        ref_t = oracle.forward(a.T, (a.shape[0],), None, None, eps)
        xhat = ref_t.xhat.T
        bound = np.abs(gain) * error_model.forward_bound(ref_t, "float64").T + 3 * U64 * (np.abs(gain * xhat) + np.abs(bias))
        return Normalized(h, bound)


class OracleWeightNorm(Normalizer):
    """Weight norm in float64: the summed inputs are exact, ||w_j|| errs by at most
    k(D)*u relative (a sum of D squares and a sqrt), the division, the gain and
    the bias add one rounding each: ``|dh| <= (3 + k(D))*u*(|gain*a/||w_j||| + |bias|)``."""

    method, label, rowwise = "weight", "float64 oracle (§4, mu = 0, sigma = ||w||)", True

    def __call__(self, layer: Layer, eps: float) -> Normalized:
        a = layer.summed_inputs()
        gain, bias = _affine(layer)
        h = weight_norm(a, layer.w, gain, bias)
        scaled = np.abs(a / np.linalg.norm(layer.w, axis=0) * gain)
        return Normalized(h, (3 + error_model.k(layer.x.shape[1])) * U64 * (scaled + np.abs(bias)))


class RowLayerNorm(abc.ABC):
    """LayerNorm on given float64 summed inputs, whose exact values lie within a
    componentwise ``perturbation`` of them (used by the layer model and the RNNs)."""

    label: str
    #: the dtype the inputs are rounded to before normalizing
    dtype: str

    @abc.abstractmethod
    def apply(self, a: np.ndarray, normalized_shape: tuple[int, ...], gain: Any, bias: Any, eps: float,
              perturbation: np.ndarray | None = None) -> Normalized:
        """LN of the (M, N) rows ``a``; the bound adds the effect of ``perturbation``
        (and of rounding ``a`` to :attr:`dtype`) to the kernel's own error."""


class OracleRowLayerNorm(RowLayerNorm):
    """The float64 oracle; its own error is bounded like a float64 kernel's. ``norm="rms_norm"``:
    RMSNorm's (no centring, and no bias: a layer's bias is left out)."""

    dtype = "float64"

    def __init__(self, norm: str = "layer_norm") -> None:
        self.norm = norm
        self.label = "float64 oracle (eq. 3)" if norm == "layer_norm" else f"float64 oracle ({operations.of(norm).label})"

    def apply(self, a, normalized_shape, gain, bias, eps, perturbation=None):
        a = np.asarray(a, np.float64)
        bias = bias if operations.of(self.norm).has_bias else None
        ref = oracle.forward(a, normalized_shape, gain, bias, eps, self.norm)
        bound = error_model.forward_bound(ref, "float64")
        if perturbation is not None:
            bound = bound + sensitivity.output_perturbation(ref, perturbation)
        return Normalized(ref.y, bound, ref)


class BackendRowLayerNorm(RowLayerNorm):
    """A backend's ``layer_norm`` (``rms_norm`` for ``norm="rms_norm"``) on the inputs rounded
    to ``dtype``: the bound is the error model's forward bound on the rounded inputs plus the
    effect of the rounding (and of ``perturbation``) from :mod:`normbench.check.sensitivity`."""

    def __init__(self, backend: Backend, dtype: str, norm: str = "layer_norm") -> None:
        self.backend, self.dtype, self.norm = backend, dtype, norm
        self.label = f"{backend.name} ({dtype})" if norm == "layer_norm" else \
            f"{backend.name} ({dtype}, {operations.of(norm).label})"

    def run(self, x_host: np.ndarray, normalized_shape, gain, bias, eps) -> np.ndarray:
        """The backend's y for host arrays, as float64 (M, N) rows."""
        be, norm = self.backend, operations.of(self.norm)
        handed = Handover.of(be, x=x_host, weight=gain, bias=bias)
        args = norm.arguments(x=handed["x"], normalized_shape=tuple(normalized_shape), weight=handed["weight"],
                              bias=handed["bias"], eps=eps)
        y = handed.call(norm.entry, f"{be.name}: ", lambda a: norm.forward(be, a), args)
        be.synchronize()
        handed.check(norm.entry, f"{be.name}: ")
        return oracle.rows_view(host_array(f"{norm.entry}'s y (x's shape)", y, be, x_host.shape),
                                normalized_shape)

    def apply(self, a, normalized_shape, gain, bias, eps, perturbation=None):
        a = np.asarray(a, np.float64)
        bias = bias if operations.of(self.norm).has_bias else None
        rounded = a.astype(host_dtype(self.dtype))
        p = sensitivity.rounding_perturbation(a, rounded)
        if perturbation is not None:
            p = p + perturbation
        x_host = rounded.reshape(a.shape[0], *normalized_shape)
        ref = oracle.forward(rounded, normalized_shape, gain, bias, eps, self.norm)
        y = self.run(x_host, normalized_shape, gain, bias, eps)
        return Normalized(y, error_model.forward_bound(ref, self.dtype) + sensitivity.output_perturbation(ref, p), ref)


class LayerNormalizer(Normalizer):
    """Layer norm of a layer's summed inputs, by a :class:`RowLayerNorm` (oracle or backend)."""

    rowwise = True

    def __init__(self, row_norm: RowLayerNorm) -> None:
        self.row_norm = row_norm
        self.label = row_norm.label
        #: Table 1's row: "layer", or "rms" for RMSNorm (normbench's row, not the paper's)
        self.method = "rms" if getattr(row_norm, "norm", "layer_norm") == "rms_norm" else "layer"

    def __call__(self, layer: Layer, eps: float) -> Normalized:
        return self.row_norm.apply(layer.summed_inputs(), layer.normalized_shape, layer.gain, layer.bias, eps)


def oracle_normalizers() -> dict[str, Normalizer]:
    """The three rows of Table 1 as float64 oracles, keyed by method, and normbench's RMSNorm row ("rms")."""
    return {"batch": OracleBatchNorm(), "weight": OracleWeightNorm(), "layer": LayerNormalizer(OracleRowLayerNorm()),
            "rms": LayerNormalizer(OracleRowLayerNorm("rms_norm"))}
