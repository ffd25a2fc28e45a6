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

The residual add fused in, ``residual_out = x + residual`` (rounded once to the residual's dtype) and the
normalization of it, both returned (docs/fused.md)::

    >>> from normbench.impls.triton import add_layer_norm, add_rms_norm
    >>> y, residual_out = add_rms_norm(x, torch.randn(8, 64), (64,), torch.ones(64))
    >>> y, residual_out = add_layer_norm(x, torch.randn(8, 64), (64,), torch.ones(64), torch.zeros(64), 1e-5)

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


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    """normalized_shape as a tuple (an int is one dim)."""
    return tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)


class LayerNormFunction(torch.autograd.Function):
    """``LayerNormFunction.apply(x, normalized_shape, weight, bias, eps)``; weight and bias may be None."""

    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        y, mean, rstd = launch.forward(x, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.normalized_shape = _shape(normalized_shape)
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
        ctx.normalized_shape = _shape(normalized_shape)
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


def _dsum_for(dsum: torch.Tensor | None, x_dtype: torch.dtype, residual_dtype: torch.dtype,
              need: tuple[bool, bool]) -> tuple:
    """dsum as the gradient of x and of the residual, each in its own dtype (the tensors' dtypes, not the tensors,
    are kept for it: the inputs need not outlive the forward)."""
    if dsum is None:
        return None, None
    return (dsum.to(x_dtype) if need[0] else None), (dsum.to(residual_dtype) if need[1] else None)


class AddLayerNormFunction(torch.autograd.Function):
    """``AddLayerNormFunction.apply(x, residual, normalized_shape, weight, bias, eps) -> (y, residual_out)``."""

    @staticmethod
    def forward(ctx, x, residual, normalized_shape, weight, bias, eps):
        y, residual_out, mean, rstd = launch.add_forward(x, residual, normalized_shape, weight, bias, eps)
        ctx.save_for_backward(residual_out, weight, bias, mean, rstd)
        ctx.normalized_shape, ctx.dtypes = _shape(normalized_shape), (x.dtype, residual.dtype)
        return y, residual_out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dresidual_out):
        residual_out, weight, bias, mean, rstd = ctx.saved_tensors
        need_x, need_r, _, need_dw, need_db, _ = ctx.needs_input_grad
        dsum, dw, db = launch.add_backward(dy, dresidual_out, residual_out, ctx.normalized_shape, weight, bias, mean,
                                           rstd, need_dsum=need_x or need_r, need_dweight=need_dw, need_dbias=need_db)
        return (*_dsum_for(dsum, *ctx.dtypes, (need_x, need_r)), None, dw, db, None)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape: int | Sequence[int],
                   weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual`` and ``layer_norm(residual_out)`` in one kernel: ``(y, residual_out)``,
    differentiable in x, the residual and the parameters."""
    return AddLayerNormFunction.apply(x, residual, normalized_shape, weight, bias, eps)


class AddRMSNormFunction(torch.autograd.Function):
    """``AddRMSNormFunction.apply(x, residual, normalized_shape, weight, eps) -> (y, residual_out)``."""

    @staticmethod
    def forward(ctx, x, residual, normalized_shape, weight, eps):
        y, residual_out, rstd = launch.add_rms_forward(x, residual, normalized_shape, weight, eps)
        ctx.save_for_backward(residual_out, weight, rstd)
        ctx.normalized_shape, ctx.dtypes = _shape(normalized_shape), (x.dtype, residual.dtype)
        return y, residual_out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dresidual_out):
        residual_out, weight, rstd = ctx.saved_tensors
        need_x, need_r, _, need_dw, _ = ctx.needs_input_grad
        dsum, dw = launch.add_rms_backward(dy, dresidual_out, residual_out, ctx.normalized_shape, weight, rstd,
                                           need_dsum=need_x or need_r, need_dweight=need_dw)
        return (*_dsum_for(dsum, *ctx.dtypes, (need_x, need_r)), None, dw, None)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape: int | Sequence[int],
                 weight: torch.Tensor | None = None, eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual`` and ``rms_norm(residual_out)`` in one kernel: ``(y, residual_out)``."""
    return AddRMSNormFunction.apply(x, residual, normalized_shape, weight, eps)
