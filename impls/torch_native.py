"""PyTorch's ``torch.nn.functional.layer_norm`` and ``torch.nn.functional.rms_norm``, on CUDA
when present, else CPU; the fused operations (``add_layer_norm``, ``add_rms_norm``) as a PyTorch user composes
them, ``residual = x + residual`` then the normalization (two kernels: what a fused kernel is measured against).

RMSNorm with one weight per head (qk-norm, a ``[heads, head_dim]`` weight) as a careful model writes it:
``F.rms_norm`` without a weight, times the weight, both in fp32, rounded once to x's dtype. Backward through
autograd, for all. ``rms_norm`` gets normbench's arguments as they are,
``eps=None`` included (torch then uses the machine epsilon of its computation dtype:
:func:`normbench.core.dtypes.default_rms_eps`). torch is imported when the backend is created,
never when this module is imported.
"""

from __future__ import annotations

from normbench.kit import device_label
from normbench.kit.composed import QuantizedFromParts
from normbench.kit.torch import AutogradBackend, from_host, set_threads, to_host


class TorchBackend(QuantizedFromParts, AutogradBackend):
    name = "torch"
    description = ("torch.nn.functional.layer_norm and rms_norm (ATen), CUDA if available else CPU; "
                   "backward via autograd; the fused and quantized operations composed of torch ops")
    operations = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
                  "layer_norm_quant", "rms_norm_quant", "add_layer_norm_quant", "add_rms_norm_quant",
                  "layer_norm_dynamic_quant", "rms_norm_dynamic_quant", "add_layer_norm_dynamic_quant",
                  "add_rms_norm_dynamic_quant")
    strided = True
    per_head_weights = True
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

    def layer_norm_with_statistics(self, x, normalized_shape, weight, bias, eps):
        """One ``native_layer_norm`` call: the kernel ``F.layer_norm`` runs, with the statistics it saves."""
        y, mean, rstd = self.torch.ops.aten.native_layer_norm(x, list(normalized_shape), weight, bias, eps)
        return y, (mean, rstd)

    def set_threads(self, threads):
        return set_threads(self.torch, threads)

    def rms_norm(self, x, normalized_shape, weight, eps, weight_offset=0.0):
        if weight is not None and weight.dim() > len(normalized_shape):  # one weight per head: F.rms_norm takes
            # a weight of normalized_shape only, so a model multiplies it after (broadcast over the tokens), in fp32
            # and rounded once to x's dtype (composed in x's dtype, autograd would round dy*weight to bf16 before
            # the normalization's backward: 20-270x dx's bound on the suites' bf16 cases)
            f32 = self.torch.promote_types(x.dtype, self.torch.float32)
            normed = self.torch.nn.functional.rms_norm(x.to(f32), list(normalized_shape), None, eps)
            return (normed * weight.to(f32)).to(x.dtype)
        if weight_offset and weight is not None:  # Gemma's: x*r*(1.0 + weight.float()), then x's dtype
            weight = self._offset(weight, weight_offset)
            return self.torch.nn.functional.rms_norm(x, list(normalized_shape), weight, eps).to(x.dtype)
        return self.torch.nn.functional.rms_norm(x, list(normalized_shape), weight, eps)

    def _offset(self, weight, offset):
        """``offset + weight`` computed in float32 (or wider), as Gemma's PyTorch code computes it."""
        return weight.to(self.torch.promote_types(weight.dtype, self.torch.float32)) + offset

    # -- the residual add and the normalization as a PyTorch user composes them (eager: two kernels) --------

    def _sum(self, x, residual):
        """``x + residual`` rounded once to the residual's dtype (torch promotes a half x and a float32 residual to
        float32)."""
        return self.torch.add(x, residual).to(residual.dtype)

    def _params(self, out, *params):
        """The parameters upcast to the sum's dtype where it is wider (exact): F.layer_norm takes no narrower ones."""
        return tuple(None if p is None else p.to(self.torch.promote_types(p.dtype, out.dtype)) for p in params)

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        out = self._sum(x, residual)
        weight, bias = self._params(out, weight, bias)
        return self.torch.nn.functional.layer_norm(out, normalized_shape, weight, bias, eps).to(x.dtype), out

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps, weight_offset=0.0):
        out = self._sum(x, residual)
        (weight,) = self._params(out, weight)
        if weight_offset and weight is not None:
            weight = self._offset(weight, weight_offset)
        if eps is None:  # the default of x's dtype, as the operation defines it (float32's for every narrower one)
            eps = self.torch.finfo(self.torch.promote_types(x.dtype, self.torch.float32)).eps
        return self.torch.nn.functional.rms_norm(out, list(normalized_shape), weight, eps).to(x.dtype), out

    # -- the output quantized as a PyTorch user composes it (docs/quantized.md): y in x's dtype, then float32 y / scale
    # (a static scale; per-row absmax scales for dynamic), clamped to the format's range and converted (float8: torch's
    # round-to-nearest-even conversion; int8: torch.round, half to even); the entry points composed by
    # normbench.kit.composed from the base operation's entry point and these two quantizers --

    def _quantize(self, v, qdtype):
        torch = self.torch
        if qdtype == "int8":
            return torch.round(v.clamp(-128.0, 127.0)).nan_to_num(0.0).to(torch.int8)
        dtype = getattr(torch, qdtype)
        top = torch.finfo(dtype).max
        return v.clamp(-top, top).to(dtype)

    def quantize_given(self, y, scale, qdtype):
        return self._quantize(y.float() / scale, qdtype)

    def quantize_computed(self, y, normalized_shape, qdtype, scale_ub):
        torch = self.torch
        top = 127.0 if qdtype == "int8" else torch.finfo(getattr(torch, qdtype)).max
        dims = tuple(range(y.dim() - len(normalized_shape), y.dim()))
        y = y.float()
        absmax = y.abs().amax(dim=dims, keepdim=True)
        if scale_ub is not None:
            absmax = absmax.clamp(max=scale_ub)
        scales = (absmax / top).clamp(min=1.0 / (top * 512.0))
        return self._quantize(y / scales, qdtype), scales.reshape(y.shape[: y.dim() - len(dims)])

    def synchronize(self):
        if self._device.type == "cuda":
            self.torch.cuda.synchronize(self._device)
