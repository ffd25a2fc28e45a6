"""The JAX plumbing of a backend built on JAX: devices, float64, jit, vjp, dispatch.

Shared by normbench's ``jax`` backend (:mod:`normbench.impls.jax_xla`) and JAX-based
plugins (``examples/normbench-flax``). A backend subclasses :class:`JaxBackend`
and gives its forward as a function JAX can trace (:meth:`JaxBackend.make_forward`;
for RMSNorm too, :meth:`JaxBackend.make_rms_forward` with ``"rms_norm"`` in
``operations``); the base does the rest, for each operation:

* **device**: the first device JAX sees (a GPU if jaxlib has one, else the CPU),
  named in ``device`` as every backend names it (``"cpu"``, ``"cuda:0 (NVIDIA H100 80GB HBM3)"``:
  :func:`normbench.kit.device_label`); :meth:`~JaxBackend.asarray` copies a host array there
  (JAX arrays have no strides: the host layout is not kept). No normbench process lets JAX preallocate
  75 % of a GPU (``import normbench`` sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless it is set): torch
  and JAX share the GPU, and each xdist worker is a process of its own.
* **float64 without touching anyone's global configuration**: JAX truncates
  float64 to float32 unless x64 is enabled, and ``jax.config.update("jax_enable_x64",
  True)`` would change that for every other user in the process. Instead every call
  on float64 arrays runs inside ``jax.enable_x64(True)``, a thread-local context
  (``jax.experimental.enable_x64`` before JAX 0.7; :func:`scoped_x64`). Where
  neither exists, float64 is left out of ``dtypes`` (the suites skip it, saying so).
* **compilation**: the forward and its backward (``jax.vjp`` with respect to x,
  weight and bias: :func:`vjp_of`) run under ``jax.jit`` with ``normalized_shape``
  static and eps traced, so XLA compiles once per shape, dtype, weight/bias
  presence and normalized_shape, never per eps. :meth:`~JaxBackend.warmup`
  compiles the forward, the statistics (where the backend has them) and the
  backward for one such signature, so a timed region that follows never compiles
  (the hook takes the operation: RMSNorm's the same way).
* **RMSNorm's eps=None** is resolved on the host to :func:`normbench.core.dtypes.default_rms_eps`
  of x's dtype (torch's semantics), so the jitted function always gets a number.
* **asynchronous dispatch**: JAX returns before the device is done; results are
  remembered until :meth:`~JaxBackend.synchronize` blocks on them (at most
  :data:`MAX_PENDING` are held: beyond that the oldest are waited for at once).

jax is imported when a backend is created, never when this module is imported:
``normbench list`` imports backend modules to read their class attributes.

Example, a complete JAX backend (normbench's ``jax`` backend is this, plus statistics and RMSNorm)::

    >>> import numpy as np
    >>> from normbench.kit.jax import JaxBackend
    >>> class Mine(JaxBackend):
    ...     name = "mine"
    ...
    ...     def make_forward(self):
    ...         jnp = self.jax.numpy
    ...
    ...         def forward(x, weight, bias, eps, normalized_shape):
    ...             axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    ...             x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    ...             centered = x32 - x32.mean(axis=axes, keepdims=True)
    ...             y = centered / jnp.sqrt((centered * centered).mean(axis=axes, keepdims=True) + eps)
    ...             y = y if weight is None else y * weight
    ...             return (y if bias is None else y + bias).astype(x.dtype)
    ...
    ...         return forward
    >>> b = Mine()
    >>> x = b.asarray(np.array([[0.0, 1.0, 2.0, 3.0]]))  # float64: computed in float64, x64 for this call only
    >>> w = b.asarray(np.full(4, 2.0))
    >>> np.round(b.to_numpy(b.layer_norm(x, (4,), w, None, 1e-5)), 4)
    array([[-2.6833, -0.8944,  0.8944,  2.6833]])
    >>> dx, dw, db = b.layer_norm_backward(x, x, (4,), w, None, 1e-5)
    >>> dx.dtype, dw.shape, db
    (dtype('float64'), (4,), None)
    >>> b.synchronize()
"""

from __future__ import annotations

import abc
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from normbench.core import operations
from normbench.core.backend import Backend, device_label
from normbench.core.dtypes import default_rms_eps, dtype_name

#: results held for :meth:`JaxBackend.synchronize`; beyond this many, the oldest are
#: waited for at once (the device still has the rest queued, so throughput is unaffected)
MAX_PENDING = 64
#: the arguments every forward and backward takes statically (the rest are traced)
STATIC = ("normalized_shape",)


def scoped_x64(jax: Any) -> Callable[[bool], Any] | None:
    """JAX's thread-local x64 switch: ``jax.enable_x64`` (JAX >= 0.7), else
    ``jax.experimental.enable_x64``; None where neither exists."""
    x64 = getattr(jax, "enable_x64", None)
    if x64 is None:
        with contextlib.suppress(ImportError):
            from jax.experimental import enable_x64 as scoped

            x64 = lambda on=True: scoped(on)
    return x64


def vjp_of(jax: Any, forward: Callable) -> Callable:
    """The backward of ``forward(x, weight, bias, eps, normalized_shape)``: a function of
    ``(dy, x, weight, bias, eps, normalized_shape)`` returning ``(dx, dweight, dbias)``
    by ``jax.vjp`` (None where weight or bias is None)."""

    def backward(dy, x, weight, bias, eps, normalized_shape):
        return forward_and_vjp(jax, forward)(dy, x, weight, bias, eps, normalized_shape)[1]

    return backward


def forward_and_vjp(jax: Any, forward: Callable) -> Callable:
    """One training step of ``forward``: a function of ``(dy, x, weight, bias, eps, normalized_shape)``
    returning ``(y, (dx, dweight, dbias))``, one forward and one backward."""

    def step(dy, x, weight, bias, eps, normalized_shape):
        y, vjp = residuals_of(jax, forward, with_output=True)(x, weight, bias, eps, normalized_shape)
        return y, vjp(dy)

    return step


def residuals_of(jax: Any, forward: Callable, with_output: bool = False) -> Callable:
    """A function of ``(x, weight, bias, eps, normalized_shape)`` returning ``forward``'s VJP: a pytree
    holding the saved residuals, applied to dy by :func:`apply_vjp` (the backward alone); with
    ``with_output``, ``(y, vjp)``."""

    def residuals(x, weight, bias, eps, normalized_shape):
        y, vjp = jax.vjp(lambda x_, w_, b_: forward(x_, w_, b_, eps, normalized_shape), x, weight, bias)
        return (y, vjp) if with_output else vjp

    return residuals


def apply_vjp(vjp: Any, dy: Any) -> tuple:
    """The backward alone: a VJP of :func:`residuals_of` applied to dy (jit it)."""
    return vjp(dy)


def without_bias(rms_forward: Callable) -> Callable:
    """An RMSNorm forward ``(x, weight, eps, normalized_shape)`` in LayerNorm's signature
    ``(x, weight, bias, eps, normalized_shape)``, bias always None: so :func:`vjp_of`,
    :func:`forward_and_vjp` and :func:`residuals_of` serve both (their dbias is None)."""

    def forward(x, weight, bias, eps, normalized_shape):
        return rms_forward(x, weight, eps, normalized_shape)

    return forward


class JaxBackend(Backend):
    """A backend whose forward is a JAX function; see the module doc. Subclasses set ``name`` and implement
    :meth:`make_forward` (and, declaring ``"rms_norm"`` in ``operations``, :meth:`make_rms_forward`); they
    may add statistics (jit them with :meth:`jit`, run them in :meth:`scope`, return them through
    :meth:`queued`)."""

    requires: ClassVar[tuple[str, ...]] = ("jax",)
    devices: ClassVar[str] = "gpu if JAX sees one, else cpu"
    #: the jitted VJP recomputes the forward's residuals; prepare_backward separates them for timing
    backward_includes_forward: ClassVar[bool] = True
    #: each operation's forward factory: the method returning the function JAX traces, in LayerNorm's
    #: signature ``(x, weight, bias, eps, normalized_shape)`` (an operation without a bias gets bias None)
    FORWARD_FACTORIES: ClassVar[dict[str, str]] = {"layer_norm": "make_forward", "rms_norm": "make_rms_forward"}

    def __init__(self) -> None:
        import jax

        self.jax = jax
        self.jax_device = jax.devices()[0]
        # JAX names a CUDA device "gpu"; normbench's device strings (ceilings, sweeps, deviations) say "cuda"
        kind = "cuda" if self.jax_device.platform == "gpu" else self.jax_device.platform
        self.device = device_label(kind, self.jax_device.id, self.jax_device.device_kind)
        self._x64 = scoped_x64(jax)
        if self._x64 is None:
            self.dtypes = tuple(d for d in self.dtypes if d != "float64")
        self._pending: deque = deque()
        #: operation -> its jitted forward, backward, training step and residuals (the backward alone applies them)
        self._compiled: dict[str, dict[str, Callable]] = {}
        self._apply_vjp = jax.jit(apply_vjp)
        for op in self.operations:
            if op not in self.FORWARD_FACTORIES:  # a fused operation: the subclass defines its entry points itself
                continue
            forward = self._traced(op)
            self._compiled[op] = {"forward": self.jit(forward), "backward": self.jit(vjp_of(jax, forward)),
                                  "step": self.jit(forward_and_vjp(jax, forward)),
                                  "residuals": self.jit(residuals_of(jax, forward))}

    def _traced(self, op: str) -> Callable:
        """The function JAX traces for ``op``, in LayerNorm's signature (RMSNorm's made so by :func:`without_bias`)."""
        factory = getattr(self, self.FORWARD_FACTORIES[op])
        return factory() if operations.of(op).has_bias else without_bias(factory())

    @abc.abstractmethod
    def make_forward(self) -> Callable:
        """The forward as a function JAX can trace, ``forward(x, weight, bias, eps, normalized_shape) -> y``
        (weight and bias may be None; normalized_shape is a static tuple). Called once, in ``__init__``,
        after ``self.jax`` is set: import the framework here."""

    def make_rms_forward(self) -> Callable:
        """The RMSNorm forward, for a backend that declares ``"rms_norm"`` in ``operations``:
        ``forward(x, weight, eps, normalized_shape) -> y`` (weight may be None; eps is a number, never
        None: the base resolves None first). Called once, in ``__init__``, after :meth:`make_forward`."""
        raise NotImplementedError(f"{type(self).__name__} declares rms_norm but defines no make_rms_forward")

    # -- plumbing for subclasses ------------------------------------------------------------

    def jit(self, function: Callable) -> Callable:
        """``jax.jit`` with ``normalized_shape`` static (everything else, eps included, traced)."""
        return self.jax.jit(function, static_argnames=STATIC)

    def scope(self, *arrays: Any) -> Any:
        """x64 on, for this thread only, when any array is float64 (JAX truncates it otherwise)."""
        if any(a is not None and getattr(a, "dtype", None) == np.float64 for a in arrays):
            return self._x64(True)
        return contextlib.nullcontext()

    def queued(self, result: Any) -> Any:
        """Remember ``result`` for :meth:`synchronize` and return it; results already done are
        dropped, and beyond :data:`MAX_PENDING` the oldest are waited for now, so memory stays bounded."""
        self._pending.append(result)
        while self._pending and (len(self._pending) > MAX_PENDING or self._ready(self._pending[0])):
            self.jax.block_until_ready(self._pending.popleft())
        return result

    def _ready(self, result: Any) -> bool:
        leaves = [a for a in self.jax.tree_util.tree_leaves(result) if hasattr(a, "is_ready")]
        return all(a.is_ready() for a in leaves)

    @staticmethod
    def rms_eps(x: Any, eps: float | None) -> float:
        """eps as a number: None is :func:`normbench.core.dtypes.default_rms_eps` of x's dtype."""
        return default_rms_eps(dtype_name(x.dtype)) if eps is None else float(eps)

    def _traced_args(self, op: str, args: tuple) -> tuple[tuple, dict]:
        """``args`` of ``op`` as the traced function's ``(x, weight, bias, eps)`` and its static keywords;
        eps None resolved to the operation's default on the host."""
        operation = operations.of(op)
        value = dict(zip(operation.params, args))
        x = value["x"]
        eps = operation.oracle_eps(value["eps"], dtype_name(x.dtype))
        return (x, value.get("weight"), value.get("bias"), eps), {"normalized_shape": tuple(value["normalized_shape"])}

    def _gradients(self, op: str, grads: Any) -> tuple:
        """The VJP's (dx, dweight, dbias) as the operation returns its gradients (RMSNorm: no dbias)."""
        return tuple(grads)[:len(operations.of(op).gradients)]

    def _forward(self, op: str, args: tuple) -> Any:
        traced, static = self._traced_args(op, args)
        with self.scope(*traced[:3]):
            return self.queued(self._compiled[op]["forward"](*traced, **static))

    def _backward(self, op: str, args: tuple, dy: Any) -> tuple:
        traced, static = self._traced_args(op, args)
        with self.scope(dy, *traced[:3]):
            grads = self._compiled[op]["backward"](dy, *traced, **static)
        return self.queued(self._gradients(op, grads))

    # -- the contract -----------------------------------------------------------------------

    def asarray(self, host):
        """A copy on the device (JAX arrays have no strides: the host layout is not kept)."""
        host = np.ascontiguousarray(host)
        with self.scope(host):
            return self.jax.device_put(host, self.jax_device)

    def to_numpy(self, native):
        return np.asarray(native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self._forward("layer_norm", (x, normalized_shape, weight, bias, eps))

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self._backward("layer_norm", (x, normalized_shape, weight, bias, eps), dy)

    def rms_norm(self, x, normalized_shape, weight, eps):
        return self._forward("rms_norm", (x, normalized_shape, weight, eps))

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        return self._backward("rms_norm", (x, normalized_shape, weight, eps), dy)

    def prepare_backward(self, op, args, cotangents):
        """The forward's residuals now (jitted ``jax.vjp``); the callable applies the jitted VJP to dy. An operation
        without a traced forward here (a fused one a subclass defines itself): the base's (None: its backward is
        timed as it is)."""
        if op not in self._compiled:
            return super().prepare_backward(op, args, cotangents)
        traced, static = self._traced_args(op, args)
        dy = cotangents[0]
        with self.scope(dy, *traced[:3]):
            vjp = self._compiled[op]["residuals"](*traced, **static)

        def backward():
            with self.scope(dy, *traced[:3]):
                return self.queued(self._gradients(op, self._apply_vjp(vjp, dy)))

        return backward

    def forward_backward(self, op, args, cotangents):
        """One jitted step: the forward and its VJP applied to dy (an operation a subclass defines itself: the
        base's, its forward then its backward)."""
        if op not in self._compiled:
            return super().forward_backward(op, args, cotangents)
        traced, static = self._traced_args(op, args)
        dy = cotangents[0]
        with self.scope(dy, *traced[:3]):
            y, grads = self._compiled[op]["step"](dy, *traced, **static)
        return self.queued((y, self._gradients(op, grads)))

    def warmup(self, op, args):
        """Compile the forward, the statistics (if any) and the backward of ``op`` for arguments like ``args``
        (dy like x), and wait for them: later calls with the same shapes, dtypes, parameter presence and
        normalized_shape do not compile (any eps)."""
        operation = operations.of(op)
        outputs, _ = operation.forward_with_statistics(self, args)
        if self.has_backward:  # one cotangent like each output (a fused operation's y and residual_out)
            with self.scope(args[0]):
                cotangents = tuple(self.jax.numpy.zeros_like(o) for o in (
                    outputs if isinstance(outputs, (tuple, list)) else (outputs,)))
            operation.backward(self, operation.backward_args_from(args, outputs), cotangents)
        self.synchronize()

    def synchronize(self) -> None:
        while self._pending:
            self.jax.block_until_ready(self._pending.popleft())


#: normbench 0.2's name of :class:`JaxBackend`
JaxBackendBase = JaxBackend
