"""Equinox's and Haiku's normalizations as normbench backends.

* ``equinox``: ``equinox.nn.LayerNorm`` and ``equinox.nn.RMSNorm``. An Equinox module acts on one
  example whose shape is the module's ``shape``, and users apply it over the leading dims with
  ``jax.vmap`` (its FAQ: ``jax.vmap(layer)(array)``), so x's leading dims are vmapped, one ``jax.vmap``
  each (none for a rank-1 x). The module is built as ``LayerNorm(normalized_shape, eps=eps,
  use_weight=weight is not None, use_bias=bias is not None)`` (RMSNorm: ``use_bias=False``, normbench's
  RMSNorm has no bias), and normbench's weight and bias become its ``weight`` / ``bias`` fields with
  ``eqx.tree_at``, in their own dtype. Equinox computes in ``result_type(x.dtype, float32)`` (float32
  for half and single x, float64 for float64), casts the parameters to that dtype, and returns
  ``out.astype(x.dtype)``: y is in x's dtype, rounded once.
* ``haiku``: ``haiku.LayerNorm`` with its defaults, ``use_fast_variance=False`` included (dm-haiku
  0.0.17: the variance is ``jnp.var``, two passes), and ``haiku.RMSNorm``. ``axis`` and ``param_axis``
  are the trailing normalized dims; ``create_scale`` / ``create_offset`` follow whether weight / bias
  are given, and they are passed as the module's ``scale`` / ``offset`` parameters
  (``hk.transform``, then ``apply`` with a params dict), as they are: Haiku's parameters of one
  trailing axis have shape ``(C,)``, of several the broadcast shape ``(1, ..., 1, *normalized_shape)``
  (Haiku's own ``param_shape``), so a multi-dim weight is reshaped to that, nothing else. ``eps=eps``.
  Haiku computes in x's dtype: no upcast of a half-precision x (its mean and variance are rounded to
  x's dtype), and y's dtype is JAX's promotion of x's and the parameters' dtypes.
  ``haiku.RMSNorm`` is ``x * scale * rsqrt(mean(x^2) + eps)``: the scale as it is (not ``1 + scale``),
  so normbench's weight is its scale, unconverted; ``create_scale`` from whether weight is given;
  normbench's ``eps=None`` becomes :func:`normbench.kit.default_rms_eps` of x's dtype (torch's
  semantics, resolved by the base), not Haiku's default 1e-5.
* ``haiku-fast``: ``haiku.LayerNorm(use_fast_variance=True)``, the one argument that differs from
  ``haiku``: ``var = E[x^2] - E[x]^2``, not clamped at 0. LayerNorm only: ``haiku.RMSNorm`` has no
  such option.

The backward of each is ``jax.vjp`` of that forward, with respect to x, weight and bias. Neither
library exposes its statistics: the suites check y and the gradients.

The JAX plumbing (the device, float64 under a thread-local ``jax.enable_x64``, ``jax.jit`` with eps
traced, the ``jax.vjp`` backward, ``warmup`` and ``synchronize``) is normbench's own
:class:`normbench.kit.jax.JaxBackend`, exactly as in ``examples/normbench-flax``: a
backend here gives only the forwards.

Nothing here imports jax, equinox or haiku at module level: ``normbench list`` imports this module to
read the class attributes. They load in ``__init__`` (through ``make_forward``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import ClassVar

from normbench.kit.jax import JaxBackend


@contextlib.contextmanager
def _traced_eps():
    """Equinox declares ``eps`` a static field and warns ("A JAX array is being set as static!") when it
    holds an array: normbench's base traces eps, so the module is built, inside the jitted forward, with a
    tracer there. Harmless here (the module never crosses a jit boundary and is never hashed: Equinox only
    adds ``self.eps`` to the variance), so exactly that warning is silenced while the module is built."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="A JAX array is being set as static", category=UserWarning)
        yield


#: a value out of its bound (not a shape, dtype, determinism or crash)
_VALUES = r"\): (y|dx|dweight|dbias)\["


def _in(dtypes: str, regex: str) -> str:
    """``regex`` on a check failure of a case of these dtypes (an alternation: ``float32|float64``): every
    check's message starts with ``<backend> <case id> (seed N): ``, and a case id with its dtype (``rms-`` first
    for RMSNorm). Globs have no character classes, so the dtype is read from the message."""
    return r"^\S+ (rms-)?(" + dtypes + r")-\S+ (?s:.*)(" + regex + ")"


_HALF_CAUSE = ("Haiku computes in x's dtype (no upcast of a float16/bfloat16 x: mean, variance or mean(x^2), x - mean, "
               "rsqrt and the products are each rounded to x's dtype; in float16 x^2 and (x - mean)^2 overflow to inf "
               "once |x| or |x - mean| exceeds 256)")
#: both haiku backends, LayerNorm and RMSNorm: the half-precision arithmetic
HAIKU_HALF = {
    "test_forward[*float16-*] | " + _in("float16|bfloat16", r"\): y\[|coherent structure"): (
        _HALF_CAUSE + ": y up to 51x the bound in bfloat16 (rows3-hidden4096-offset3) and 677x in float16 "
        "(rows4-hidden4096-big300); float16 RMSNorm of |x| >= 256 gives y = 0 (x^2 = inf), 682x"),
    "test_backward*[*float16-*] | " + _in("float16|bfloat16", r"\): (dx|dweight|dbias)\[|coherent structure|"
                                          r": sum\(dx\) = |dx\(x\) - dx\(-x\) = "): (
        _HALF_CAUSE + ": dx up to 1520x the bound in bfloat16 (LayerNorm rows65537-hidden8-offset3) and 2720x "
        "(RMSNorm rows5-hidden1-offset3), sum(dx) far from 0; float16 dx = NaN where (v + eps)^-1.5 overflows "
        "(var + eps < 6.1e-4: every dx of float16-rows8-hidden1000-sigma1e-2) or x^2 does (|x| >= 256)"),
    "test_*rescaling*[*float16-*] | " + _in("float16|bfloat16", r"is invariant to|must scale dL/dW|must not change the gain"): (
        _HALF_CAUSE + ": Table 1's re-scalings by 768 overflow float16's (x - mean)^2 and x^2 (y = 0: changed by 1.75, "
        "265x the bound; dW = NaN)"),
    "test_weight_matrix_recentering[*float16-*] | " + _in("float16|bfloat16", r"is invariant to"): (
        _HALF_CAUSE + ": Table 1's re-centering changes y by 1.2x to 1.4x the bound"),
}
#: both haiku backends: float32 parameters with a half-precision x
HAIKU_MIXED = {
    "test_forward[*-paramsfloat32-*] | y has dtype float32, expected b?float16": (
        "float32 parameters with a half-precision x: Haiku has no output dtype argument and returns JAX's "
        "promotion of x and its parameters (float32), not x's dtype"),
    "test_backward*[*-paramsfloat32-*] | unexpected JAX type \\(e\\.g\\. shape/dtype\\) for argument to VJP function": (
        "float32 parameters with a half-precision x: Haiku's y is float32 (JAX's promotion of x and the "
        "parameters), so jax.vjp refuses normbench's dy in x's dtype"),
}
_ONE_PASS = ("use_fast_variance=True: var = E[x^2] - E[x]^2, in x's dtype and not clamped at 0, cancels ")
#: haiku-fast only: the one-pass variance, unclamped
HAIKU_ONE_PASS = {
    "*-offset1e4 | " + _in("float32", r"\): (y|dx)\[|: sum\(dx\) = nan"): (
        _ONE_PASS + "to a negative variance at a row mean of 1e4 sigma: rsqrt gives NaN, y = NaN in 7803 of 8000 "
        "elements (float32)"),
    "*-nearconstant-eps1e-12 | " + _in("float32", _VALUES): (
        _ONE_PASS + "to a negative variance larger than eps = 1e-12 on rows of sigma 1e-6: y = NaN (float32)"),
    "*-offset1e* | " + _in("float32|float64", _VALUES): (
        _ONE_PASS + "at a row mean of 1e2 to 1e4 sigma: float32 y 3.7x / 52x the bound at 1e2 / 1e3, dx 11x / 117x; "
        "float64 y 4.6x / 33x / 320x, dx 9.8x / 100x / 754x"),
    "*-offset3* | " + _in("float32|float64", _VALUES): (
        _ONE_PASS + "on rows whose sample mean is tens of sigmas (few elements per row, or one row in thousands): "
        "1-3x the bound, which cases depends on the seed"),
    "test_backward[*-constant*] | " + _in("float32|float64", _VALUES): (
        _ONE_PASS + "to rounding noise instead of 0 on constant rows: dx scaled by the wrong rstd (float32: "
        "4.4e5x the bound; eps 0.1: 26x)"),
    "test_weight_matrix_recentering[*] | " + _in("float32|float64", r"re-centering"): (
        _ONE_PASS + "under Table 1's re-centering (a ~1e3-sigma shift of every summed input): float32 82x to 213x "
        "the bound, float64 50x to 109x"),
}
_HALF_FAST = ("float16/bfloat16 with use_fast_variance=True: Haiku computes E[x^2] - E[x]^2 in x's dtype (each mean "
              "rounded to it, no clamp), so the variance is lost to rounding at row means of a few sigma: ")
#: haiku-fast only: its half precision (the one-pass variance in x's dtype, on top of HAIKU_HALF's cause)
HAIKU_FAST_HALF = {
    "test_forward[*float16-*] | " + _in("float16|bfloat16", r"\): y\[|coherent structure"): (
        _HALF_FAST + "y up to 2.7e4x the bound (bfloat16 rows8-hidden1000-offset1e2), NaN where the variance goes "
        "negative; float16 overflow as haiku's"),
    "test_backward*[*float16-*] | " + _in("float16|bfloat16", r"\): (dx|dweight|dbias)\[|coherent structure|"
                                          r": sum\(dx\) = "): (
        _HALF_FAST + "dx up to 7e9x the bound (bfloat16 rows8-hidden1000-offset1e2), sum(dx) far from 0"),
    "test_*rescaling*[*float16-*] | " + _in("float16|bfloat16", r"is invariant to|must scale dL/dW|must not change the gain"): (
        _HALF_FAST + "Table 1's re-scalings by 768 overflow float16's x^2 as haiku's (y changed by 1.75, 265x the bound)"),
    "test_weight_matrix_recentering[*float16-*] | " + _in("float16|bfloat16", r"is invariant to"): (
        _HALF_FAST + "Table 1's re-centering 35x to 59x the bound in float16, 1.2x in bfloat16"),
}


def _vmapped(jax, function: Callable, lead: int) -> Callable:
    """``function`` of one example, vmapped over ``lead`` leading dims (what an Equinox user writes)."""
    for _ in range(lead):
        function = jax.vmap(function)
    return function


class EquinoxNorm(JaxBackend):
    """``equinox.nn.LayerNorm`` and ``equinox.nn.RMSNorm``, vmapped over x's leading dims.

    Example (what ``normbench test --impl=equinox`` does for each case)::

        >>> import numpy as np
        >>> from normbench_jaxnn.backends import EquinoxNorm
        >>> b = EquinoxNorm()
        >>> x = b.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> np.round(b.to_numpy(b.layer_norm(x, (4,), None, None, 1e-5)), 4)
        array([[-1.3416, -0.4472,  0.4472,  1.3416],
               [-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
        >>> np.round(b.to_numpy(b.rms_norm(x, (4,), b.asarray(np.full(4, 2, np.float32)), 0.0)), 4)
        array([[0.    , 1.069 , 2.1381, 3.2071],
               [1.4254, 1.7817, 2.1381, 2.4944]], dtype=float32)
    """

    name = "equinox"
    description = ("equinox.nn.LayerNorm / RMSNorm (eps=eps, weight/bias set with eqx.tree_at, use_weight/use_bias "
                   "from their presence), jax.vmap over the leading dims; computes in promote(x, float32), "
                   "y in x's dtype; backward via jax.vjp")
    operations = ("layer_norm", "rms_norm")
    requires = ("equinox", "jax")
    install_hint = "pip install ./examples/normbench-jaxnn (it brings equinox, dm-haiku and jax)"
    known_deviations: ClassVar[dict[str, str]] = {}

    def make_forward(self) -> Callable:
        import equinox as eqx

        jax = self.jax

        def forward(x, weight, bias, eps, normalized_shape):
            with _traced_eps():
                module = eqx.nn.LayerNorm(normalized_shape, eps=eps, use_weight=weight is not None,
                                          use_bias=bias is not None)
            if weight is not None:
                module = eqx.tree_at(lambda m: m.weight, module, weight)
            if bias is not None:
                module = eqx.tree_at(lambda m: m.bias, module, bias)
            return _vmapped(jax, module, x.ndim - len(normalized_shape))(x)

        return forward

    def make_rms_forward(self) -> Callable:
        import equinox as eqx

        jax = self.jax

        def forward(x, weight, eps, normalized_shape):
            with _traced_eps():
                module = eqx.nn.RMSNorm(normalized_shape, eps=eps, use_weight=weight is not None, use_bias=False)
            if weight is not None:
                module = eqx.tree_at(lambda m: m.weight, module, weight)
            return _vmapped(jax, module, x.ndim - len(normalized_shape))(x)

        return forward


def _param_shape(x_ndim: int, normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Haiku's shape of a parameter over the trailing ``normalized_shape`` axes (its ``param_shape``):
    ``(C,)`` for the last axis alone, else the broadcast shape ``(1, ..., 1, *normalized_shape)``."""
    if len(normalized_shape) == 1:
        return tuple(normalized_shape)
    return (1,) * (x_ndim - len(normalized_shape)) + tuple(normalized_shape)


class HaikuNorm(JaxBackend):
    """``haiku.LayerNorm`` with Haiku's defaults (``use_fast_variance=False``), and ``haiku.RMSNorm``.

    Example (what ``normbench test --impl=haiku`` does for each case)::

        >>> import numpy as np
        >>> from normbench_jaxnn.backends import HaikuNorm
        >>> b = HaikuNorm()
        >>> x = b.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> np.round(b.to_numpy(b.layer_norm(x, (4,), None, None, 1e-5)), 4)
        array([[-1.3416, -0.4472,  0.4472,  1.3416],
               [-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
        >>> np.round(b.to_numpy(b.rms_norm(x, (4,), b.asarray(np.full(4, 2, np.float32)), 0.0)), 4)
        array([[0.    , 1.069 , 2.1381, 3.2071],
               [1.4254, 1.7817, 2.1381, 2.4944]], dtype=float32)
    """

    name = "haiku"
    description = ("haiku.LayerNorm with its defaults (use_fast_variance=False) and haiku.RMSNorm (scale as is): "
                   "axis=param_axis=the normalized dims, eps=eps, create_scale/create_offset from weight/bias "
                   "presence, passed as params; computes in x's dtype; backward via jax.vjp")
    operations = ("layer_norm", "rms_norm")
    requires = ("haiku", "jax")
    install_hint = "pip install ./examples/normbench-jaxnn (it brings dm-haiku, equinox and jax)"
    #: Haiku's own default; the subclass below turns it on
    use_fast_variance: ClassVar[bool] = False
    #: what normbench finds in Haiku, measured (see this package's README); the first match explains a failure
    known_deviations: ClassVar[dict[str, str]] = {**HAIKU_MIXED, **HAIKU_HALF}

    @classmethod
    def library_version(cls) -> str:
        """dm-haiku's version: the import name ``haiku`` is not the distribution's name."""
        import importlib.metadata

        try:
            return importlib.metadata.version("dm-haiku")
        except importlib.metadata.PackageNotFoundError:
            return ""

    def make_forward(self) -> Callable:
        import haiku as hk

        fast = self.use_fast_variance

        def forward(x, weight, bias, eps, normalized_shape):
            axes = tuple(range(-len(normalized_shape), 0))

            def apply(x_):
                return hk.LayerNorm(axis=axes, param_axis=axes, create_scale=weight is not None,
                                    create_offset=bias is not None, eps=eps, use_fast_variance=fast)(x_)

            shape = _param_shape(x.ndim, normalized_shape)
            params = {k: v.reshape(shape) for k, v in (("scale", weight), ("offset", bias)) if v is not None}
            return hk.without_apply_rng(hk.transform(apply)).apply({"layer_norm": params} if params else {}, x)

        return forward

    def make_rms_forward(self) -> Callable:
        import haiku as hk

        def forward(x, weight, eps, normalized_shape):
            axes = tuple(range(-len(normalized_shape), 0))

            def apply(x_):
                return hk.RMSNorm(axis=axes, param_axis=axes, eps=eps, create_scale=weight is not None)(x_)

            params = {} if weight is None else {"rms_norm": {"scale": weight.reshape(_param_shape(x.ndim,
                                                                                                  normalized_shape))}}
            return hk.without_apply_rng(hk.transform(apply)).apply(params, x)

        return forward


class HaikuFastLayerNorm(HaikuNorm):
    """``haiku.LayerNorm(use_fast_variance=True)``: the one-pass variance, ``E[x^2] - E[x]^2``."""

    name = "haiku-fast"
    description = ("haiku.LayerNorm(use_fast_variance=True), one-pass variance E[x^2] - E[x]^2 in x's dtype; "
                   "otherwise as haiku; backward via jax.vjp")
    use_fast_variance = True
    #: haiku.RMSNorm has no use_fast_variance
    operations = ("layer_norm",)
    known_deviations: ClassVar[dict[str, str]] = {**HAIKU_MIXED, **HAIKU_FAST_HALF, **HAIKU_ONE_PASS}
