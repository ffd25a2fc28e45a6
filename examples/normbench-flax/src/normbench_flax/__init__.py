"""normbench backends for Flax's LayerNorm: ``flax`` (its defaults) and ``flax-stable``
(``use_fast_variance=False``). Registered in this package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    flax = "normbench_flax.backends:FlaxLayerNorm"
    flax-stable = "normbench_flax.backends:FlaxStableLayerNorm"

Importing this package imports neither jax nor flax.
"""

__version__ = "0.1.0"
