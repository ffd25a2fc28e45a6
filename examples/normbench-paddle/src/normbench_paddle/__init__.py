"""normbench backends for PaddlePaddle on the CPU: ``paddle`` (``paddle.nn.functional.layer_norm``)
and ``paddle-fused-rms`` (``paddle.incubate.nn.functional.fused_rms_norm``, forward only).
Registered in this package's ``pyproject.toml``::

    [project.entry-points."normbench.backends"]
    paddle = "normbench_paddle.backends:PaddleLayerNorm"
    paddle-fused-rms = "normbench_paddle.backends:PaddleFusedRmsNorm"

Importing this package does not import paddle.
"""

__version__ = "0.1.0"
