"""JAX: ``jax.numpy`` under ``jax.jit`` (XLA), on the first device JAX sees (a GPU if
jaxlib has one, else the CPU); backward through ``jax.vjp``.

Two-pass statistics in float32 for half and single inputs (float64 for float64),
one rounding to the input dtype at the end; the parameters are upcast the same way.

float64 without touching anyone's global configuration: JAX truncates float64 to
float32 unless x64 is enabled, and ``jax.config.update("jax_enable_x64", True)``
would change that for every other user in the process. Instead every call on
float64 arrays runs inside ``jax.enable_x64(True)``, a thread-local context
(``jax.experimental.enable_x64`` before JAX 0.7). Where neither exists, float64
is left out of :attr:`dtypes` (the suites skip it, saying so).

Compilation: XLA compiles on the first call for each shape, dtype, weight/bias
presence and normalized_shape (eps is a traced argument, so it never recompiles).
:meth:`warmup` compiles the forward, the backward and the statistics for one
such signature, so a timed region that follows never compiles. JAX dispatches
asynchronously: :meth:`synchronize` blocks until every result since the last
synchronize is ready. jax is imported when the backend is created, never when
this module is imported.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

import numpy as np

from normbench import Backend
from normbench.dtypes import DTYPES

#: results held for :meth:`JaxBackend.synchronize`; beyond this many, the oldest are
#: waited for at once (the device still has the rest queued, so throughput is unaffected)
MAX_PENDING = 64


def _normalize(jnp, x, weight, bias, eps, normalized_shape):
    """The forward in the accumulation dtype (float32 or wider), rounded once to x's dtype."""
    acc = jnp.promote_types(x.dtype, jnp.float32)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    x32 = x.astype(acc)
    mean = jnp.mean(x32, axis=axes, keepdims=True)
    centered = x32 - mean
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    rstd = 1 / jnp.sqrt(var + jnp.asarray(eps, acc))
    y = centered * rstd
    if weight is not None:
        y = y * weight.astype(acc)
    if bias is not None:
        y = y + bias.astype(acc)
    return y.astype(x.dtype), mean, rstd


class JaxBackend(Backend):
    name = "jax"
    description = "jax.numpy under jax.jit (XLA), GPU if JAX sees one else CPU; backward via jax.vjp"
    requires = ("jax",)
    install_hint = "pip install 'normbench[jax]'"
    devices = "gpu if JAX sees one, else cpu"

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self._device = jax.devices()[0]
        self.device = f"{self._device.platform}:{self._device.id} ({self._device.device_kind})"
        self._x64 = getattr(jax, "enable_x64", None)
        if self._x64 is None:
            with contextlib.suppress(ImportError):
                from jax.experimental import enable_x64 as scoped

                self._x64 = lambda on=True: scoped(on)
        if self._x64 is None:
            self.dtypes = tuple(d for d in DTYPES if d != "float64")
        self._pending: deque = deque()

        def forward(x, weight, bias, eps, normalized_shape):
            return _normalize(jnp, x, weight, bias, eps, normalized_shape)[0]

        def statistics(x, eps, normalized_shape):
            _, mean, rstd = _normalize(jnp, x, None, None, eps, normalized_shape)
            return mean.reshape(-1), rstd.reshape(-1)

        def backward(dy, x, weight, bias, eps, normalized_shape):
            _, vjp = jax.vjp(lambda x_, w_, b_: forward(x_, w_, b_, eps, normalized_shape), x, weight, bias)
            return vjp(dy)

        static = ("normalized_shape",)
        self._forward = jax.jit(forward, static_argnames=static)
        self._statistics = jax.jit(statistics, static_argnames=static)
        self._backward = jax.jit(backward, static_argnames=static)

    # -- helpers --------------------------------------------------------------------------

    def _scope(self, *arrays) -> Any:
        """x64 on, for this thread only, when any array is float64."""
        if any(a is not None and a.dtype == np.float64 for a in arrays):
            return self._x64(True)
        return contextlib.nullcontext()

    def _queued(self, result):
        """Remember ``result`` for :meth:`synchronize`; drop results already done."""
        self._pending.append(result)
        while self._pending and (len(self._pending) > MAX_PENDING or self._ready(self._pending[0])):
            self.jax.block_until_ready(self._pending.popleft())
        return result

    def _ready(self, result) -> bool:
        leaves = [a for a in self.jax.tree_util.tree_leaves(result) if hasattr(a, "is_ready")]
        return all(a.is_ready() for a in leaves)

    # -- the contract -----------------------------------------------------------------------

    def asarray(self, host):
        """A copy on the device (JAX arrays have no strides: the host layout is not kept)."""
        host = np.ascontiguousarray(host)
        with self._scope(host):
            return self.jax.device_put(host, self._device)

    def to_numpy(self, native):
        return np.asarray(native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with self._scope(x, weight, bias):
            return self._queued(self._forward(x, weight, bias, float(eps), normalized_shape=tuple(normalized_shape)))

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        with self._scope(x):
            stats = self._statistics(x, float(eps), normalized_shape=tuple(normalized_shape))
        return self._queued(stats)

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        with self._scope(dy, x, weight, bias):
            grads = self._backward(dy, x, weight, bias, float(eps), normalized_shape=tuple(normalized_shape))
        return self._queued(tuple(grads))

    def warmup(self, x, normalized_shape, weight, bias, eps):
        """Compile the forward, the statistics and the backward for arrays like these
        (dy like x), and wait for them: later calls with the same shapes, dtypes,
        weight/bias presence and normalized_shape do not compile (any eps)."""
        with self._scope(x):
            dy = self.jnp.zeros_like(x)
        self.layer_norm(x, normalized_shape, weight, bias, eps)
        self.layer_norm_statistics(x, normalized_shape, weight, bias, eps)
        self.layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        self.synchronize()

    def synchronize(self):
        while self._pending:
            self.jax.block_until_ready(self._pending.popleft())
