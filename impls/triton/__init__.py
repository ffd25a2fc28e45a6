"""normbench's own LayerNorm and RMSNorm kernels in Triton: forward and backward.

For PyTorch users (differentiable; tensors on CUDA, or on CPU under the
Triton interpreter where no GPU is present)::

    from normbench.impls.triton import LayerNorm, layer_norm, LayerNormFunction
    from normbench.impls.triton import RMSNorm, rms_norm, RMSNormFunction
    from normbench.impls.triton import add_layer_norm, add_rms_norm  # the residual add fused in

Modules, each with one job:

* ``forward_kernels``, ``backward_kernels``: the ``@triton.jit`` kernels
* ``heuristics``: block sizes, warps and grids (plain Python, documented)
* ``launch``: tensor checks, layouts and kernel launches (no autograd)
* ``autograd``: ``LayerNormFunction``, ``layer_norm`` and the ``LayerNorm`` layer, their
  RMSNorm counterparts, and the fused ``add_layer_norm`` and ``add_rms_norm`` (``Add*Function``)
* ``runtime``: compiled on CUDA or interpreted on CPU, decided before triton loads
* ``backend``: the ``triton`` backend of the harness

Importing this package imports neither torch nor triton; the names above load
on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {"LayerNorm": "autograd", "LayerNormFunction": "autograd", "layer_norm": "autograd",
         "RMSNorm": "autograd", "RMSNormFunction": "autograd", "rms_norm": "autograd", "TritonBackend": "backend",
         "AddLayerNormFunction": "autograd", "add_layer_norm": "autograd", "AddRMSNormFunction": "autograd",
         "add_rms_norm": "autograd"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"normbench.impls.triton.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'normbench.impls.triton' has no attribute {name!r}")
