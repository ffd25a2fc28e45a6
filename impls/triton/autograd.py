"""The kernels for PyTorch users: an autograd function, a functional form, and a layer.

    >>> import torch
    >>> from normbench.impls.triton import LayerNorm, layer_norm
    >>> x = torch.randn(8, 64, requires_grad=True)        # .cuda() where a GPU is present
    >>> y = layer_norm(x, (64,), torch.ones(64), torch.zeros(64), 1e-5)
    >>> y.sum().backward()
    >>> ln = LayerNorm(64)                                 # a drop-in torch.nn.LayerNorm
    >>> tuple(ln(x).shape)
    (8, 64)
    >>> from normbench.impls.triton import RMSNorm, rms_norm
    >>> tuple(rms_norm(x, (64,), torch.ones(64)).shape), tuple(RMSNorm(64)(x).shape)
    ((8, 64), (8, 64))

Same semantics and signatures as ``torch.nn.functional.layer_norm`` and
``torch.nn.functional.rms_norm`` (eps None: the accumulation dtype's machine epsilon,
as torch does); the forward saves fp32 mean and rstd (rstd alone for RMSNorm; fp64
for float64 x) and the backward uses them. Tensors live where the kernels run: CUDA, or CPU under the interpreter
(``normbench.kit.triton``). Importing this module imports torch, never triton.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from normbench.impls.triton import launch


class LayerNormFunction(torch.autograd.Function):
    """``LayerNormFunction.apply(x, normalized_shape, weight, bias, eps)``; weight and bias may be None."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        y, mean, rstd = launch.forward(x, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.normalized_shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable  # the kernels have no double backward: say so, loudly
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        need_dx, _, need_dw, need_db, _ = ctx.needs_input_grad
        dx, dw, db = launch.backward(dy, x, ctx.normalized_shape, weight, bias, mean, rstd, need_dx=need_dx,
                                     need_dweight=need_dw, need_dbias=need_db)
        return dx, None, dw, db, None


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` computed by the Triton kernels, differentiable."""
    return LayerNormFunction.apply(x, normalized_shape, weight, bias, eps)


class LayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` (same arguments, parameters and state dict) computed by the Triton kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNormFunction(torch.autograd.Function):
    """``RMSNormFunction.apply(x, normalized_shape, weight, eps)``; weight may be None, eps None
    (``launch.rms_eps``)."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps):
        y, rstd = launch.rms_forward(x, normalized_shape, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.normalized_shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward, as for LayerNorm
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        need_dx, _, need_dw, _ = ctx.needs_input_grad
        dx, dw = launch.rms_backward(dy, x, ctx.normalized_shape, weight, rstd, need_dx=need_dx, need_dweight=need_dw)
        return dx, None, dw, None


def rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """``torch.nn.functional.rms_norm`` computed by the Triton kernels, differentiable."""
    return RMSNormFunction.apply(x, normalized_shape, weight, eps)


class RMSNorm(torch.nn.RMSNorm):
    """``torch.nn.RMSNorm`` (same arguments, parameters and state dict) computed by the Triton kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)
