"""Keras 3's ``keras.layers.LayerNormalization`` and ``keras.layers.RMSNormalization`` as three normbench
backends, one per Keras backend: ``keras-jax``, ``keras-torch``, ``keras-tensorflow``.

**One Keras backend per process.** Keras reads its backend once, when it is first imported:
``KERAS_BACKEND`` if set, else ``"backend"`` in ``$KERAS_HOME/keras.json`` (``~/.keras/keras.json``),
else ``tensorflow``. Each backend's :meth:`availability` reads the same sources without importing
keras (or asks keras itself when some other code imported it already) and, when this process's
Keras runs on another framework, gives the command that runs it
(``KERAS_BACKEND=torch normbench test --impl=keras-torch``). ``__init__`` checks
``keras.backend.backend()`` again after the import.

**The mapping, one to one, for every backend** (normbench's call on the left):

* ``normalized_shape`` (the trailing k dims): ``axis=-1`` (Keras's default) when k = 1, else the
  list of those k dims ``[ndim - k, ..., ndim - 1]`` (the form of Keras's docs, ``axis=[1, 2, 3]``).
* ``eps``: ``epsilon=eps``. Keras's own defaults are not used: LayerNormalization's 1e-3, and
  RMSNormalization's 1e-6 (``ops.rms_normalization``'s None would be ``keras.config.epsilon()``, 1e-7).
  RMSNorm's ``eps=None`` is :func:`normbench.kit.default_rms_eps` of x's dtype (what torch does).
* LayerNorm's ``weight`` / ``bias``: ``scale=weight is not None``, ``center=bias is not None``; they are
  the layer's ``gamma`` / ``beta`` variables. The layer is called as a model calls it, ``layer(x)``
  (``Layer.__call__``: input conversion, the mixed policy's autocast), with normbench's arrays as the
  variables' values through ``keras.StatelessScope``, what ``Model.stateless_call`` does for the layers
  of a model (the layer's own ``stateless_call`` would run ``layer.call`` without ``__call__``'s
  autocast). ``rms_scaling`` stays False (deprecated, and it computes ``x / sqrt(var + eps)``, not an RMSNorm).
* RMSNorm's ``weight``: the layer's ``scale`` variable. ``RMSNormalization`` always has one (it has no
  ``scale=False``): a weight of None is passed as ones of the variable's dtype, which multiplies exactly.
* dtype: the layer's dtype policy. weight/bias of x's dtype (or none): ``dtype=x.dtype``, so the
  variables, the computation dtype and y are x's. float32 weight/bias with a float16 / bfloat16 x
  (normbench's ``mixed`` cases): ``dtype="mixed_float16"`` / ``"mixed_bfloat16"``, Keras's mixed
  precision policy: float32 variables, half-precision compute dtype and output. LayerNormalization
  creates gamma and beta with ``autocast=False`` and sets ``self.autocast = False``, so they stay
  float32 inside the call; RMSNormalization's ``scale`` is autocast (the Keras default: variables are
  cast to the compute dtype when used), i.e. rounded to float16 / bfloat16 before it is used. No other
  parameter/x dtype pair exists in Keras's policies (normbench has none either).
* The backward is the framework's own autodiff of that same call, with respect to x, gamma/scale
  and beta: ``jax.vjp`` (keras-jax), ``torch.autograd.grad`` (keras-torch), ``tf.GradientTape``
  (keras-tensorflow).

**What the layers compute** (keras 3.15 ``keras/src/ops/nn.py``, ``_layer_normalization`` and
``_rms_normalization``): x is converted to ``result_type(x.dtype, float32)`` (float32 for half inputs,
float64 for float64), gamma/beta/scale to that dtype, the result cast back to x's dtype (and by the
layer to its compute dtype). Then, LayerNorm:

* torch (an axis of contiguous dims, always the case here): ``torch.nn.functional.layer_norm`` of
  the upcast x, gamma, beta, epsilon (ATen's kernel; autograd through it and the two casts).
* jax and tensorflow: ``mean, var = ops.moments(x)`` (two-pass: ``jnp.var`` / ``tf.nn.moments``,
  ``mean((x - mean)^2)``), ``inv = rsqrt(var + epsilon) * gamma``, ``y = x * inv + (beta - mean * inv)``:
  the mean is subtracted after the scaling, from ``x * inv``, not from x.

RMSNorm: torch: ``torch.nn.functional.rms_norm`` of the upcast x and scale; jax and tensorflow:
``x * rsqrt(mean(x^2) + epsilon) * scale``.

Keras exposes none of the statistics, so y and the gradients are checked. Nothing here imports
keras or a framework at module level: ``normbench list`` imports this module.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from normbench import Availability, Backend
from normbench.kit import default_rms_eps, device_label
from normbench.kit.jax import JaxBackend
from normbench.kit.torch import AutogradBackend

#: Keras's default backend when neither KERAS_BACKEND nor keras.json names one (keras/src/backend/config.py)
KERAS_DEFAULT_BACKEND = "tensorflow"


def configured_keras_backend() -> tuple[str, str]:
    """The backend Keras runs on (or will, once imported) in this process, and where that comes from,
    read as ``keras/src/backend/config.py`` reads it, without importing keras."""
    config = sys.modules.get("keras.src.backend.config")
    if config is not None and hasattr(config, "backend"):
        return config.backend(), "keras is already imported in this process"
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"], "KERAS_BACKEND"
    if "KERAS_HOME" in os.environ:
        home = os.environ["KERAS_HOME"]
    else:
        base = os.path.expanduser("~")
        home = os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")
    path = os.path.expanduser(os.path.join(home, "keras.json"))
    try:
        with open(path) as f:
            found = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        found = None
    if found:
        return found, path
    return KERAS_DEFAULT_BACKEND, "Keras's default (no KERAS_BACKEND, no backend in keras.json)"


def dtype_policy(x_dtype: str, param_dtype: str | None) -> str:
    """The Keras dtype policy of a layer for an x of ``x_dtype`` and parameters of ``param_dtype``
    (None: no parameters): x's dtype, or Keras's mixed precision policy for float32 parameters
    with a half-precision x."""
    if param_dtype is None or param_dtype == x_dtype:
        return x_dtype
    if param_dtype == "float32" and x_dtype in ("float16", "bfloat16"):
        return f"mixed_{x_dtype}"
    raise ValueError(f"Keras has no dtype policy with {param_dtype} variables and a {x_dtype} compute dtype")


def keras_axis(ndim: int, normalized_shape: tuple[int, ...]) -> int | list[int]:
    """The layer's ``axis`` for the trailing ``normalized_shape`` dims of an x of ``ndim`` dims."""
    k = len(normalized_shape)
    return -1 if k == 1 else list(range(ndim - k, ndim))


def _name(dtype: Any) -> str:
    """A framework dtype's name ("float32", "bfloat16")."""
    import keras

    return keras.backend.standardize_dtype(dtype)


def layer_norm_layer(keras: Any, ndim: int, normalized_shape, eps, x_dtype: str, weight_dtype, bias_dtype,
                     has_weight: bool, has_bias: bool) -> Any:
    """A built ``keras.layers.LayerNormalization`` for this call (see the module doc for the mapping)."""
    policy = dtype_policy(x_dtype, weight_dtype or bias_dtype)
    layer = keras.layers.LayerNormalization(axis=keras_axis(ndim, normalized_shape), epsilon=eps, center=has_bias,
                                            scale=has_weight, dtype=policy)
    layer.build((1,) * (ndim - len(normalized_shape)) + tuple(normalized_shape))
    return layer


def call_layer(keras: Any, layer: Any, values: list, x: Any) -> Any:
    """``layer(x)``, as a model calls its layers (``Layer.__call__``: input conversion, the mixed policy's
    autocast scope), with ``values`` as the layer's trainable variables, in order, through
    ``keras.StatelessScope``: what ``Model.stateless_call`` does for the layers of a model. (A layer's
    own ``stateless_call`` runs ``layer.call`` without ``__call__``, so without the autocast.)"""
    with keras.StatelessScope(state_mapping=list(zip(layer.trainable_variables, values))):
        return layer(x)


def rms_norm_layer(keras: Any, ndim: int, normalized_shape, eps, x_dtype: str, weight_dtype) -> Any:
    """A built ``keras.layers.RMSNormalization`` for this call."""
    layer = keras.layers.RMSNormalization(axis=keras_axis(ndim, normalized_shape), epsilon=eps,
                                          dtype=dtype_policy(x_dtype, weight_dtype))
    layer.build((1,) * (ndim - len(normalized_shape)) + tuple(normalized_shape))
    return layer


class _KerasBackend:
    """What the three backends share: the Keras backend they need, availability and the check in ``__init__``."""

    #: the Keras backend (KERAS_BACKEND value) this backend runs on
    keras_backend: ClassVar[str]
    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]]
    install_hint: ClassVar[str]
    operations: ClassVar[tuple[str, ...]] = ("layer_norm", "rms_norm")

    @classmethod
    def availability(cls) -> Availability:
        for module in cls.requires:
            if importlib.util.find_spec(module) is None:
                return Availability.no(f"{module} is not installed; {cls.install_hint}")
        running, source = configured_keras_backend()
        if running != cls.keras_backend:
            return Availability.no(
                f"Keras runs on {running!r} in this process ({source}) and picks its backend once per process, "
                f"at import; run: KERAS_BACKEND={cls.keras_backend} normbench test --impl={cls.name}")
        return Availability.yes()

    @classmethod
    def library_version(cls) -> str:
        """keras's version and the framework's: ``3.15.1 (jax 0.10.2)``."""
        try:
            keras = importlib.metadata.version("keras")
        except importlib.metadata.PackageNotFoundError:
            return ""
        framework = {"tensorflow": ("tensorflow", "tensorflow-cpu")}.get(cls.keras_backend, (cls.keras_backend,))
        for dist in framework:
            try:
                return f"{keras} ({cls.keras_backend} {importlib.metadata.version(dist)})"
            except importlib.metadata.PackageNotFoundError:
                continue
        return keras

    def _import_keras(self) -> Any:
        """keras, after checking it runs on this backend's framework (it picks one per process)."""
        import keras

        if keras.backend.backend() != self.keras_backend:
            raise RuntimeError(
                f"{self.name} needs Keras on {self.keras_backend!r}, but keras in this process runs on "
                f"{keras.backend.backend()!r} (set at its import); run: "
                f"KERAS_BACKEND={self.keras_backend} normbench test --impl={self.name}")
        if not hasattr(keras.layers, "RMSNormalization"):  # keras before RMSNormalization: LayerNorm only
            self.operations = ("layer_norm",)
        self.keras = keras
        return keras


def _layer_norm_only(regex: str) -> str:
    """``regex`` on a LayerNorm case's check failure only: every check's message starts with
    ``<backend> <case id> (seed N): `` and only RMSNorm's case ids start with ``rms-`` (as in normbench-flax)."""
    return r"^\S+ (?!rms-)\S+ (?s:.*)(" + regex + ")"


#: keras-jax and keras-torch: Keras's type promotion turns float64 into float32 (a defect; see the README)
FLOAT64_IN_FLOAT32 = {
    r"*float64-* | ^\S+ (rms-)?float64-\S+ \(seed \d+\): ": (
        "Keras computes float64 inputs in float32 on its JAX and PyTorch backends: _layer_normalization and "
        "_rms_normalization (keras/src/ops/nn.py) compute in backend.result_type(x.dtype, 'float32'), which Keras's "
        "promotion (keras/src/backend/common/dtypes.py, BIT64_TO_BIT32_DTYPE) makes float32 on every backend but "
        "TensorFlow; y, mean/var and the gradients are float32 values cast back to float64 (seed 0, "
        "float64 8 x 1000 normal: y off by 1.8e-7, 2.7e8x the bound; every float64 check fails, TensorFlow passes)"),
}
#: keras-jax, keras-torch, keras-tensorflow: RMSNormalization's scale is autocast under a mixed policy (a limitation)
MIXED_RMS_SCALE = {
    r"test_backward*[*rms-*float16-paramsfloat32-*] | \): dx\[|coherent structure|sum\(xhat\*dx\)": (
        "mixed_float16 / mixed_bfloat16: RMSNormalization creates its float32 scale with autocast=True (Keras's "
        "default; LayerNormalization opts out with autocast=False), so Layer.__call__ casts it to the half compute "
        "dtype before use: y and dx see a rounded scale, and dx, which cancels on rows with a mean of 3 sigma, "
        "is off by up to 32x the bound (seed 1, bfloat16 7 x 100: dx = -0.000171 for -0.0000804)"),
}


class KerasJax(_KerasBackend, JaxBackend):
    """The layers on Keras's JAX backend: ``layer(x)`` in a ``keras.StatelessScope`` traced inside normbench's ``jax.jit``
    (:class:`normbench.kit.jax.JaxBackend`), the backward by ``jax.vjp``. The layer is
    created and built at trace time, with the traced eps as its ``epsilon``.

    Example (``KERAS_BACKEND=jax``)::

        >>> import numpy as np
        >>> from normbench_keras.backends import KerasJax
        >>> b = KerasJax()
        >>> x = b.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> np.round(b.to_numpy(b.layer_norm(x, (4,), None, None, 1e-5)), 4)
        array([[-1.3416, -0.4472,  0.4472,  1.3416],
               [-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
    """

    name = "keras-jax"
    keras_backend = "jax"
    description = ("keras.layers.LayerNormalization / RMSNormalization on Keras's JAX backend (epsilon=eps, "
                   "scale/center from weight/bias, dtype=x's or mixed_<half> with float32 params), "
                   "layer(x) in keras.StatelessScope under jax.jit; backward via jax.vjp")
    requires = ("keras", "jax")
    install_hint = "pip install normbench-keras 'jax>=0.4.30' and run with KERAS_BACKEND=jax"
    #: what normbench finds (see this package's README); the first match explains a failure
    known_deviations: ClassVar[dict[str, str]] = {**FLOAT64_IN_FLOAT32, **MIXED_RMS_SCALE}

    def __init__(self) -> None:
        self._import_keras()
        super().__init__()

    def make_forward(self) -> Callable:
        keras = self.keras

        def forward(x, weight, bias, eps, normalized_shape):
            layer = layer_norm_layer(keras, x.ndim, normalized_shape, eps, _name(x.dtype),
                                     None if weight is None else _name(weight.dtype),
                                     None if bias is None else _name(bias.dtype), weight is not None, bias is not None)
            return call_layer(keras, layer, [v for v in (weight, bias) if v is not None], x)

        return forward

    def make_rms_forward(self) -> Callable:
        keras = self.keras
        jnp = self.jax.numpy

        def forward(x, weight, eps, normalized_shape):
            layer = rms_norm_layer(keras, x.ndim, normalized_shape, eps, _name(x.dtype),
                                   None if weight is None else _name(weight.dtype))
            scale = jnp.ones(normalized_shape, layer.scale.dtype) if weight is None else weight
            return call_layer(keras, layer, [scale], x)

        return forward


#: keras-torch: Keras runs torch.nn.functional.layer_norm in float32 (half x upcast), and torch's CPU float32
#: backward is known to cancel at large row means (normbench's own suites/known_deviations.txt, torch | cpu)
_TORCH_DX = ("torch's CPU LayerNorm backward, which Keras's torch backend calls on the float32-upcast x "
             "(F.layer_norm in _layer_normalization, keras/src/ops/nn.py), forms dx = a*dy*gamma + b*x + c without "
             "centring x, which cancels at row means of 1e3-1e4 sigma; Keras's dx is torch's float32 dx bit for bit "
             "(rounded to x's dtype), ")
TORCH_FP32_BACKWARD = {
    "test_backward*[*-constant1e*] | " + _layer_norm_only(r"\): dx\[|sum\(dx\)"): (
        _TORCH_DX + "on constant rows at 1e3-1e4: seed 0, float32 8 x 1024 constant 1e4: dx = 0 for 3.885 "
                    "(2.9e3x the bound), a row's sum(dx) = -2672 for 0"),
    "test_backward*[*-offset1e*] | " + _layer_norm_only(r"\): dx\[|sum\(dx\)"): (
        _TORCH_DX + "on rows with a mean of 1e3-1e4 sigma: seed 0, float16 8 x 1000 offset 1e4: dx = 8 for 0.365 "
                    "(3.4e3x the bound)"),
}


class _EagerKerasBackend(_KerasBackend, Backend):
    """keras-torch and keras-tensorflow: the layer built once per signature (cached), called eagerly."""

    def _layers(self) -> dict:
        if not hasattr(self, "_cache"):
            self._cache = {}
        return self._cache

    def _layer_norm_layer(self, x, normalized_shape, weight, bias, eps):
        key = ("ln", len(x.shape), tuple(normalized_shape), float(eps), _name(x.dtype),
               None if weight is None else _name(weight.dtype), None if bias is None else _name(bias.dtype))
        cache = self._layers()
        if key not in cache:
            cache[key] = layer_norm_layer(self.keras, *key[1:], weight is not None, bias is not None)
        return cache[key]

    def _rms_norm_layer(self, x, normalized_shape, weight, eps):
        key = ("rms", len(x.shape), tuple(normalized_shape), float(eps), _name(x.dtype),
               None if weight is None else _name(weight.dtype))
        cache = self._layers()
        if key not in cache:
            cache[key] = rms_norm_layer(self.keras, *key[1:])
        return cache[key]

    def _call_layer_norm(self, x, normalized_shape, weight, bias, eps):
        layer = self._layer_norm_layer(x, normalized_shape, weight, bias, eps)
        return call_layer(self.keras, layer, [v for v in (weight, bias) if v is not None], x)

    def _call_rms_norm(self, x, normalized_shape, weight, eps):
        eps = default_rms_eps(_name(x.dtype)) if eps is None else float(eps)
        layer = self._rms_norm_layer(x, normalized_shape, weight, eps)
        scale = self.keras.ops.ones(tuple(normalized_shape), layer.scale.dtype) if weight is None else weight
        return call_layer(self.keras, layer, [scale], x)


class KerasTorch(AutogradBackend, _EagerKerasBackend):
    """The layers on Keras's PyTorch backend, called eagerly (``layer(x)`` in a ``keras.StatelessScope``), the backward
    by ``torch.autograd.grad`` on that call (normbench's :mod:`normbench.kit.torch` plumbing;
    arrays keep the host layout, strides included)."""

    name = "keras-torch"
    keras_backend = "torch"
    description = ("keras.layers.LayerNormalization / RMSNormalization on Keras's PyTorch backend (epsilon=eps, "
                   "scale/center from weight/bias, dtype=x's or mixed_<half> with float32 params), "
                   "layer(x) in keras.StatelessScope, eagerly; backward via torch.autograd")
    requires = ("keras", "torch")
    install_hint = "pip install normbench-keras 'torch>=2.1' and run with KERAS_BACKEND=torch"
    devices = "Keras's torch device: cuda if available, else cpu"
    strided = True
    known_deviations: ClassVar[dict[str, str]] = {**FLOAT64_IN_FLOAT32, **TORCH_FP32_BACKWARD, **MIXED_RMS_SCALE}

    def __init__(self) -> None:
        keras = self._import_keras()
        import torch

        from normbench.kit import torch as torch_arrays

        self.torch = torch
        self._arrays = torch_arrays
        self._device = keras.ops.zeros(()).device  # where Keras puts its tensors
        index = self._device.index if self._device.type == "cuda" else None
        name = torch.cuda.get_device_name(self._device) if self._device.type == "cuda" else ""
        self.device = device_label(self._device.type, index, name)

    def asarray(self, host):
        return self._arrays.from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return self._arrays.to_host(self.torch, native)

    def set_threads(self, threads):
        return self._arrays.set_threads(self.torch, threads)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with self.torch.no_grad():
            return self._call_layer_norm(x, normalized_shape, weight, bias, eps)

    def rms_norm(self, x, normalized_shape, weight, eps):
        with self.torch.no_grad():
            return self._call_rms_norm(x, normalized_shape, weight, eps)

    def autograd_forward(self, op, args):
        """The layer's call with autograd on (the entry points run it under no_grad)."""
        return {"layer_norm": self._call_layer_norm, "rms_norm": self._call_rms_norm}[op](*args)

    def synchronize(self):
        if self._device.type == "cuda":
            self.torch.cuda.synchronize(self._device)


class KerasTensorFlow(_EagerKerasBackend):
    """The layers on Keras's TensorFlow backend, called eagerly (``layer(x)`` in a ``keras.StatelessScope``; TensorFlow's
    default execution), the backward by ``tf.GradientTape`` on that call."""

    name = "keras-tensorflow"
    keras_backend = "tensorflow"
    description = ("keras.layers.LayerNormalization / RMSNormalization on Keras's TensorFlow backend "
                   "(epsilon=eps, scale/center from weight/bias, dtype=x's or mixed_<half> with float32 params), "
                   "layer(x) in keras.StatelessScope, eagerly; backward via tf.GradientTape")
    requires = ("keras", "tensorflow")
    install_hint = "pip install normbench-keras tensorflow (or tensorflow-cpu) and run with KERAS_BACKEND=tensorflow"
    devices = "TensorFlow's default device (cpu here)"
    backward_includes_forward = True
    known_deviations: ClassVar[dict[str, str]] = dict(MIXED_RMS_SCALE)

    def __init__(self) -> None:
        self._import_keras()
        import tensorflow as tf

        self.tf = tf
        probe = tf.constant(0.0)
        kind = tf.DeviceSpec.from_string(probe.device).device_type or "CPU"
        self.device = device_label("cuda" if kind == "GPU" else kind.lower())

    def asarray(self, host):
        """A copy as a tf.Tensor (TensorFlow tensors have no strides: the host layout is not kept)."""
        return self.tf.constant(np.ascontiguousarray(host))

    def to_numpy(self, native):
        return native.numpy()

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self._call_layer_norm(x, normalized_shape, weight, bias, eps)

    def _tape(self, call, dy, leaves, *args):
        """``(y, grads)``: ``call(*leaves, *args)`` under a GradientTape watching the non-None leaves."""
        with self.tf.GradientTape() as tape:
            for leaf in leaves:
                if leaf is not None:
                    tape.watch(leaf)
            y = call(*leaves, *args)
        watched = [leaf for leaf in leaves if leaf is not None]
        grads = iter(tape.gradient(y, watched, output_gradients=dy))
        return y, tuple(next(grads) if leaf is not None else None for leaf in leaves)

    def forward_backward(self, op, args, cotangents):
        """One tape over the layer's call: its output and the gradients of x and the parameters."""
        if op == "layer_norm":
            x, normalized_shape, weight, bias, eps = args
            call = lambda x_, w, b: self._call_layer_norm(x_, normalized_shape, w, b, eps)
            return self._tape(call, cotangents[0], [x, weight, bias])
        x, normalized_shape, weight, eps = args
        call = lambda x_, w: self._call_rms_norm(x_, normalized_shape, w, eps)
        return self._tape(call, cotangents[0], [x, weight])

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self.forward_backward("layer_norm", (x, normalized_shape, weight, bias, eps), (dy,))[1]

    def rms_norm(self, x, normalized_shape, weight, eps):
        return self._call_rms_norm(x, normalized_shape, weight, eps)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        return self.forward_backward("rms_norm", (x, normalized_shape, weight, eps), (dy,))[1]
