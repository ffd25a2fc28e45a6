"""normbench backends for the normalizations of Equinox and Haiku: ``equinox``
(``equinox.nn.LayerNorm`` / ``equinox.nn.RMSNorm``), ``haiku`` (``haiku.LayerNorm`` with its
defaults / ``haiku.RMSNorm``) and ``haiku-fast`` (``haiku.LayerNorm(use_fast_variance=True)``).
Registered in this package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    equinox = "normbench_jaxnn.backends:EquinoxNorm"
    haiku = "normbench_jaxnn.backends:HaikuNorm"
    haiku-fast = "normbench_jaxnn.backends:HaikuFastLayerNorm"

Importing this package imports neither jax, equinox nor haiku.
"""

__version__ = "0.1.0"
