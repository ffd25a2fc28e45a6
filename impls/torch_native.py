"""PyTorch's ``torch.nn.functional.layer_norm``, on CUDA when present, else CPU.

Backward through autograd. torch is imported when the backend is created,
never when this module is imported.
"""

from __future__ import annotations

from normbench import Backend
from normbench.backend import device_label
from normbench.impls.torch_arrays import from_host, to_host


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
            self.device = device_label("cuda", self._device.index, torch.cuda.get_device_name(self._device))
        else:
            self._device = torch.device("cpu")
            self.device = device_label("cpu")

    def asarray(self, host):
        """Keeps host's layout: strides, storage offset and stride-0 broadcasts."""
        return from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return to_host(self.torch, native)

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
