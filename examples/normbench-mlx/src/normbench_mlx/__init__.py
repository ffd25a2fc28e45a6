"""normbench backend for MLX's fused normalizations, ``mlx.core.fast.layer_norm`` and
``mlx.core.fast.rms_norm``: ``mlx``. Registered in this package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    mlx = "normbench_mlx.backends:MlxFast"

Importing this package does not import mlx.
"""

__version__ = "0.1.0"
