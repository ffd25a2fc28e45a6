"""JAX: LayerNorm and RMSNorm in ``jax.numpy`` under ``jax.jit`` (XLA), on the first device
JAX sees (a GPU if jaxlib has one, else the CPU); backward through ``jax.vjp``.

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


class JaxBackend(JaxBase):
    name = "jax"
    description = ("LayerNorm and RMSNorm in jax.numpy under jax.jit (XLA), GPU if JAX sees one else CPU; "
                   "backward via jax.vjp")
    operations = ("layer_norm", "rms_norm")
    install_hint = "pip install 'normbench[jax]'"

    def __init__(self) -> None:
        super().__init__()
        jnp = self.jax.numpy

        def statistics(x, eps, normalized_shape):
            _, mean, rstd = _normalize(jnp, x, None, None, eps, normalized_shape)
            return mean.reshape(-1), rstd.reshape(-1)

        self._statistics = self.jit(statistics)

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
