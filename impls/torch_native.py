"""PyTorch's ``torch.nn.functional.layer_norm``, on CUDA when present, else CPU.

Backward through autograd. torch is imported when the backend is created,
never when this module is imported.
"""

from __future__ import annotations

import warnings

import numpy as np

from harness import Backend
from harness.layout import decompose


class TorchBackend(Backend):
    name = "torch"
    description = "torch.nn.functional.layer_norm (ATen), CUDA if available else CPU; backward via autograd"
    strided = True
    requires = ("torch",)
    install_hint = "pip install 'normbench[torch]'"
    devices = "cuda if available, else cpu"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        if torch.cuda.is_available():
            self._device = torch.device("cuda", torch.cuda.current_device())
            self.device = f"cuda:{self._device.index} ({torch.cuda.get_device_name(self._device)})"
        else:
            self._device = torch.device("cpu")
            self.device = "cpu"

    def asarray(self, host):
        """Keeps host's layout: strides, storage offset and stride-0 broadcasts."""
        torch = self.torch
        flat, shape, strides, offset = decompose(host)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only (broadcast) buffers
            if flat.dtype.name == "bfloat16":
                base = torch.from_numpy(flat.view(np.uint16)).view(torch.bfloat16)
            else:
                base = torch.from_numpy(flat)
        base = base.to(self._device, copy=True)
        return base.as_strided(shape, strides, offset)

    def to_numpy(self, native):
        t = native.detach().cpu()
        if t.dtype == self.torch.bfloat16:
            import ml_dtypes

            return t.contiguous().view(self.torch.uint16).numpy().view(ml_dtypes.bfloat16).reshape(t.shape)
        return t.numpy()

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self.torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        _, mean, rstd = self.torch.ops.aten.native_layer_norm(x, list(normalized_shape), weight, bias, eps)
        return mean, rstd

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        torch = self.torch
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in (x, weight, bias)]
        with torch.enable_grad():
            y = torch.nn.functional.layer_norm(leaves[0], normalized_shape, leaves[1], leaves[2], eps)
            wanted = [t for t in leaves if t is not None]
            grads = iter(torch.autograd.grad(y, wanted, dy))
        return tuple(next(grads) if t is not None else None for t in leaves)

    def synchronize(self):
        if self._device.type == "cuda":
            self.torch.cuda.synchronize(self._device)
