"""JAX: LayerNorm and RMSNorm in ``jax.numpy`` under ``jax.jit`` (XLA), on the first device
JAX sees (a GPU if jaxlib has one, else the CPU); backward through ``jax.vjp``. The fused operations
(``add_layer_norm``, ``add_rms_norm``) as a JAX user composes them in one jitted function: the sum in float32,
rounded once to the residual's dtype, then the normalization of that stored sum (XLA may fuse the two).

Statistics in float32 for half and single inputs (float64 for float64): LayerNorm's variance
in two passes, RMSNorm's mean of squares directly; one rounding to the input dtype at the end;
the parameters are upcast the same way. x is upcast once, so its gradient is rounded once.
RMSNorm's ``eps=None`` is :func:`normbench.core.dtypes.default_rms_eps` (torch's semantics).

The JAX plumbing (float64 under a thread-local ``jax.enable_x64`` instead of the
global configuration, ``jax.jit`` with eps traced so it never recompiles,
``jax.vjp``, :meth:`warmup`, :meth:`synchronize` for JAX's asynchronous dispatch)
is :class:`normbench.kit.jax.JaxBackend`, shared with JAX-based
plugins; this module adds the forward and the statistics. jax is imported when the
backend is created, never when this module is imported.
"""

from __future__ import annotations

from normbench.kit.jax import JaxBackend as JaxBase


def _normalize(jnp, x, weight, bias, eps, normalized_shape, subtract_mean=True):
    """The forward in the accumulation dtype (float32 or wider), rounded once to x's dtype;
    ``subtract_mean=False`` is RMSNorm's (no mean subtracted: the returned mean is None)."""
    acc = jnp.promote_types(x.dtype, jnp.float32)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    x32 = x.astype(acc)
    mean = jnp.mean(x32, axis=axes, keepdims=True) if subtract_mean else None
    centered = x32 - mean if subtract_mean else x32
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    rstd = 1 / jnp.sqrt(var + jnp.asarray(eps, acc))
    y = centered * rstd
    if weight is not None:
        y = y * weight.astype(acc)
    if bias is not None:
        y = y + bias.astype(acc)
    return y.astype(x.dtype), mean, rstd


def _add(jnp, x, residual):
    """``residual_out = x + residual``: the sum in float32 (or wider), rounded once to the residual's dtype."""
    acc = jnp.promote_types(jnp.promote_types(x.dtype, residual.dtype), jnp.float32)
    return (x.astype(acc) + residual.astype(acc)).astype(residual.dtype)


class JaxBackend(JaxBase):
    name = "jax"
    description = ("LayerNorm and RMSNorm in jax.numpy under jax.jit (XLA), plain or with the residual add fused "
                   "in (the composition, one jitted function), GPU if JAX sees one else CPU; backward via jax.vjp")
    operations = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
    install_hint = "pip install 'normbench[jax]'"

    def __init__(self) -> None:
        super().__init__()
        jnp = self.jax.numpy

        def statistics(x, eps, normalized_shape):
            _, mean, rstd = _normalize(jnp, x, None, None, eps, normalized_shape)
            return mean.reshape(-1), rstd.reshape(-1)

        self._statistics = self.jit(statistics)

        def add_forward(x, residual, weight, bias, eps, normalized_shape, centered):
            """The fused forward as a JAX user composes it: ``(y, residual_out)``, y normalizing the stored sum."""
            total = _add(jnp, x, residual)
            y = _normalize(jnp, total, weight, bias, eps, normalized_shape, subtract_mean=centered)[0]
            return y.astype(x.dtype), total

        def add_backward(dy, dresidual_out, residual_out, weight, bias, eps, normalized_shape, centered):
            """``(dsum, dweight, dbias)``: the VJP of the normalization at ``residual_out`` against dy, plus
            dresidual_out (residual_out's own cotangent), as ``jax.vjp`` of the composition gives them."""
            def normalized(s, w, b):
                return _normalize(jnp, s, w, b, eps, normalized_shape, subtract_mean=centered)[0], s

            (y, _), vjp = self.jax.vjp(normalized, residual_out, weight, bias)
            return vjp((dy.astype(y.dtype), dresidual_out.astype(residual_out.dtype)))

        static = ("normalized_shape", "centered")
        self._add_forward = self.jax.jit(add_forward, static_argnames=static)
        self._add_backward = self.jax.jit(add_backward, static_argnames=static)

    def make_forward(self):
        jnp = self.jax.numpy

        def forward(x, weight, bias, eps, normalized_shape):
            return _normalize(jnp, x, weight, bias, eps, normalized_shape)[0]

        return forward

    def make_rms_forward(self):
        jnp = self.jax.numpy

        def forward(x, weight, eps, normalized_shape):
            return _normalize(jnp, x, weight, None, eps, normalized_shape, subtract_mean=False)[0]

        return forward

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        with self.scope(x):
            stats = self._statistics(x, float(eps), normalized_shape=tuple(normalized_shape))
        return self.queued(stats)

    # -- the residual add fused in: x + residual rounded once to the residual's dtype, then the normalization --

    def _fused(self, function, arrays, eps, normalized_shape, centered, like):
        """``function`` on ``arrays`` (eps None: RMSNorm's default of ``like``'s dtype, x's or dy's)."""
        eps = float(eps) if centered else self.rms_eps(like, eps)
        with self.scope(*arrays):
            return self.queued(function(*arrays, eps, normalized_shape=tuple(normalized_shape), centered=centered))

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        return self._fused(self._add_forward, (x, residual, weight, bias), eps, normalized_shape, True, x)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        return self._fused(self._add_forward, (x, residual, weight, None), eps, normalized_shape, False, x)

    def add_layer_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps):
        return tuple(self._fused(self._add_backward, (dy, dresidual_out, residual_out, weight, bias), eps,
                                 normalized_shape, True, dy))

    def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps):
        return tuple(self._fused(self._add_backward, (dy, dresidual_out, residual_out, weight, None), eps,
                                 normalized_shape, False, dy))[:2]
