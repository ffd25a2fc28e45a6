"""Liger-Kernel's Triton LayerNorm and RMSNorm as the normbench backend ``liger``.

What it calls, one to one, is what Liger's modules call in their ``forward`` (feature-detected, so
the backend runs against old and new releases alike):

* LayerNorm: ``liger_kernel.transformers.LigerLayerNorm.forward`` is ``LigerLayerNormFunction.apply(x,
  weight, bias, eps)`` up to 0.6.x and ``liger_kernel.functional.layer_norm(x, weight, bias, eps)``
  (the implementation dispatcher, which on CPU picks the ``nvidia-triton`` implementation, the same
  autograd function) in newer releases (read from the module's source file: importing
  ``liger_kernel.transformers`` needs Hugging Face ``transformers`` up to 0.5.x, the kernels do not);
  the backend calls that same function with normbench's x,
  weight, bias and eps. Liger's LayerNorm always has a weight and a bias (the module holds them as
  parameters, ``ones`` and ``zeros`` when untrained; its functional requires a weight), so a call
  without weight passes ``ones`` and one without bias ``zeros`` (in the weight's dtype, else x's), as a
  user's untrained or frozen module holds; their gradients are not returned (None, as normbench asks).
* RMSNorm: ``LigerRMSNorm.forward`` is ``LigerRMSNormFunction.apply(x, weight, eps, offset,
  casting_mode, in_place[, row_mode])``; the backend calls
  ``liger_kernel.ops.rms_norm.LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", True)``, the same
  function with the module's defaults: ``offset=0.0`` (y = x * rstd * weight, torch's ``F.rms_norm``
  parameterization, so weight is passed as it is: no conversion), ``casting_mode="llama"`` (x in
  float32 for mean(x^2) and rstd, ``x * rstd`` rounded to x's dtype, then multiplied by the weight),
  ``in_place=True`` (the backward writes dx into dy's buffer). Without weight: ``weight=None`` where
  the release has ``LigerRMSNorm(elementwise_affine=False)`` (0.6 and newer), else ``ones`` in x's
  dtype (what the module holds). normbench's ``eps=None`` becomes
  :func:`normbench.kit.default_rms_eps` of x's dtype (torch's), not Liger's module default 1e-6.

* The residual add fused into RMSNorm (``add_rms_norm``, where the release has it: 0.8.5 has, 0.5.3 has not):
  ``LigerFusedAddRMSNorm.forward`` is ``LigerFusedAddRMSNormFunction.apply(hidden_states, residual, weight, eps,
  offset, casting_mode, in_place)``; the backend calls it with the module's defaults (``offset=0.0``,
  ``casting_mode="llama"``, ``in_place=False``) and normbench's ``weight_offset`` as ``offset`` (Gemma's ``1 +
  weight``: the module's own parameter). It returns ``(y, residual_out)``, the sum stored in x's dtype
  (``S = torch.empty(..., dtype=X.dtype)``), so a float32 residual with half x cannot be expressed: those cases skip
  with that reason. Without weight: ``ones`` (the module always holds one).

Both normalize over the last dim only (Liger's API takes ``hidden_size``, weight of shape
``(hidden,)``); a normalized_shape of several trailing dims is passed as one dim of their product
(x reshaped to ``(..., prod)``, weight and bias flattened): the same normalization, what a user of a
multi-dim LayerNorm does with Liger. Every dtype goes in as it is (x, weight and bias in their own
dtypes); y has x's dtype. The backward is torch autograd through Liger's autograd functions
(normbench's ``torch_arrays``). Liger does not return its statistics, so y and the gradients are checked.

Where it runs: compiled on a CUDA device when there is one; otherwise in the Triton interpreter
on CPU (``TRITON_INTERPRET=1``; normbench's ``normbench.kit.triton.ensure_mode`` decides,
exactly as for normbench's own ``triton`` backend), with that backend's ``timing_note`` and
``runtime_note``, and a ``max_elements`` cap of :data:`INTERPRETER_MAX_ELEMENTS` (Liger launches one
program per row; ``NORMBENCH_TRITON_MAX_ELEMENTS`` overrides it). Two gaps of the interpreter that
compiled Triton does not have are bridged for Liger's kernels only (:func:`_adapt_interpreter`): float
arguments become fp32 scalars, and libdevice's ``rsqrt`` becomes ``tl.math.rsqrt``.

The known deviations depend on the installed release (read from its metadata, without importing
it; :func:`known_deviations_for`): releases before 0.5.4 count the padded lanes of a non-power-of-two
hidden size in LayerNorm's variance (linkedin/Liger-Kernel#518, fixed by #519 in 0.5.4), and keep
half-precision statistics. See this package's README for every finding and its numbers.

Nothing here imports torch, triton or liger_kernel at module level: ``normbench list`` imports this
module to read the class attributes. They load in ``__init__``.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
import re
from collections.abc import Mapping
from typing import ClassVar

from normbench import Limits
from normbench.kit import default_rms_eps, device_label
from normbench.kit import torch as torch_arrays
from normbench.kit import triton as triton_kit

DISTRIBUTION = "liger-kernel"


#: the runtime note under the interpreter: normbench's triton backend's, and what this backend adapts
RUNTIME_NOTE = (triton_kit.RUNTIME_NOTE + "; it also multiplies two bfloat16 tensors as raw uint16 bit patterns "
                "(garbage, where a GPU computes in fp32); and for Liger's kernels this backend passes float arguments "
                "(eps) as fp32 scalars and maps libdevice.rsqrt to tl.math.rsqrt, as compiled Triton does (the "
                "interpreter has neither)")
#: the default cap under the interpreter: Liger launches one program per row (normbench's triton backend packs rows),
#: and the interpreter runs programs one after another, so a 65537-row case takes minutes per call (past
#: pytest-timeout's 300 s); every case up to 1025 x 128 stays in. ``NORMBENCH_TRITON_MAX_ELEMENTS`` overrides it.
INTERPRETER_MAX_ELEMENTS = 200_000


def installed_version() -> str:
    """The installed liger-kernel's version from its metadata ("" when absent); liger is not imported."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return ""


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.3"`` -> ``(0, 5, 3)``; the leading numeric release parts only (``"0.6.0.dev1"`` -> ``(0, 6, 0)``)."""
    parts = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if not match:
            break
        parts.append(int(match[0]))
        if match[0] != part:
            break
    return tuple(parts)


#: releases whose LayerNorm forward counts the padded lanes in its variance (issue #518, fixed in 0.5.4 by #519)
PADDED_LANES_FIXED_IN = (0, 5, 4)

#: any LayerNorm check failure (value, identity, invariance: every such message starts "<backend> <case id> (seed N): "
#: and only RMSNorm's case ids start with "rms-"); RMSNorm's test ids match the same globs
LAYER_NORM_CHECK = r"^\S+ (?!rms-)\S+ \(seed \d+\): "
#: any RMSNorm check failure
RMS_NORM_CHECK = r"^\S+ rms-\S+ \(seed \d+\): "
#: any check failure of the residual add fused into RMSNorm
ADD_RMS_NORM_CHECK = r"^\S+ add-rms-\S+ \(seed \d+\): "

#: bfloat16 under the Triton interpreter: not Liger's, and not judgeable here
INTERPRETER_BFLOAT16 = (
    "the Triton interpreter, not Liger (judge bfloat16 on a GPU): triton 3.9's interpreter keeps bfloat16 tensors as "
    "uint16 bit patterns, multiplies two of them as integers (1.5 * 2.0 -> 0.0) and converts fp32 to bfloat16 by "
    "truncation (0.8555 -> 0.8516, where a GPU rounds to 0.8555); ")

#: every release measured (0.5.3 and 0.8.5)
COMMON = {
    # RMSNorm, float64: casting_mode="llama" computes in float32, and the backward has no float64 kernel
    "rms-float64-* | " + RMS_NORM_CHECK + "|^torch\\.float64$": (
        "defect (the survey's one verdict for float64 computed in float32, docs/survey.md; its judged findings say "
        "so): Liger's RMSNorm has no float64 path: the forward computes a float64 x in float32 (casting_mode "
        "'llama': X_row.to(tl.float32), eps and rstd in float32; liger_kernel/ops/rms_norm.py:108 in 0.8.5), so y is "
        "off by up to 2.7e-7 (5.6e7x the float64 bound: y = -1.85226424 for -1.85226397, rms-float64-rows5-hidden4-"
        "offset3), and the backward raises KeyError: torch.float64 (torch_to_triton_dtype has no float64; "
        "ops/rms_norm.py:574 in 0.8.5, :277 in 0.5.3)"),
    # RMSNorm: the module's default in_place=True writes dx into dy's buffer
    "test_backward*[*rms-*] | rms_norm_backward modified its input dy in place": (
        "limitation, documented: LigerRMSNorm's default in_place=True makes the backward write dx into dy's buffer "
        "(ops/rms_norm.py:555 'if in_place is True: dX = dY'; its docstring: 'default to True to save memory ... it "
        "can produce incorrect inputs'), so the caller's dy is overwritten by dx after backward"),
    # RMSNorm, float16: casting_mode="llama" rounds every dweight term to float16
    "test_backward[*rms-float16-*] | \\): dweight\\[": (
        "limitation of casting_mode='llama' (the module's default, HF Llama's convention): every row's dweight term "
        "dY * (x*rstd).to(float16) is a float16 product, rounded before the float32 sum (ops/rms_norm.py:237 in "
        "0.8.5), so dweight carries one float16 rounding per row: up to 54x the bound (rms-float16-paramsfloat32-"
        "rows7-hidden100-offset3: dweight[64] = 1.25622 for 1.25758)"),
    # bfloat16 in the Triton interpreter: not Liger's
    "bfloat16-* | " + LAYER_NORM_CHECK: INTERPRETER_BFLOAT16 + (
        "LayerNorm's fp32 y and dx are stored to bfloat16 by truncation: biased toward zero by -0.49 ulp, which "
        "normbench reports as a 'coherent structure' (0.8.5); 0.5.3 computes its statistics and dx in bfloat16 "
        "arithmetic, which the interpreter turns into garbage (dx = 9.5e35, y off by 0.77)"),
    "rms-bfloat16-* | " + RMS_NORM_CHECK: INTERPRETER_BFLOAT16 + (
        "RMSNorm's dweight term dY * (x*rstd).to(bfloat16) (ops/rms_norm.py:237 in 0.8.5) is such a product: "
        "dweight = nan, inf or 1e38; y stored by truncation is off by up to 1.3x the bound"),
}

#: 0.5.4 and newer, measured on 0.8.5 (statistics in float32, y and dx converted once)
NEW = {
    "float64-* | " + LAYER_NORM_CHECK: (
        "defect (the survey's one verdict for float64 computed in float32): Liger's LayerNorm computes a float64 x in "
        "float32 (X_row.to(tl.float32), eps.to(tl.float32); "
        "liger_kernel/ops/layer_norm.py:67,75 in 0.8.5; its tolerance table lists float16, bfloat16 and float32 only, "
        "ops/backends/_triton/layer_norm.py:21) and stores the float32 result as float64: y off by ~1e-7 (up to "
        "2.9e8x the float64 bound: y = -1.02859175 for -1.02859185), dx 5.5e7x, sum(dx) 4.9e-7 instead of 0, and "
        "the float64 invariance checks fail by the same rounding"),
}

#: the residual add fused into RMSNorm (LigerFusedAddRMSNormFunction), measured on 0.8.5: the plain RMSNorm's
#: mechanisms, the same verdicts (docs/survey.md, "The fused residual add")
FUSED = {
    "add-rms-float64-* | " + ADD_RMS_NORM_CHECK + "|^torch\\.float64$": (
        "defect, as Liger's plain RMSNorm (float64 computed in float32): the fused forward computes a float64 sum in float32 "
        "(casting_mode 'llama', ops/fused_add_rms_norm.py: S_row.to(tl.float32); normbench: 'y matches float64 data "
        "computed in float32', 1e7-6e7x the float64 bound), and the backward raises KeyError: torch.float64 "
        "(torch_to_triton_dtype has no float64)"),
    "test_backward[*add-rms-float16-*] | \\): dweight\\[": (
        "limitation of casting_mode='llama', as Liger's plain RMSNorm: each row's dweight term "
        "dY * (S*rstd).to(float16) is a float16 product rounded before the float32 sum (ops/fused_add_rms_norm.py, "
        "the backward kernel's dW_row += dY_row * (X_row * rstd_row).to(X_dtype)): up to 24x the bound "
        "(add-rms-float16-rows7-hidden100-uniform9: dweight[95] = 0.02686 for 0.02901)"),
    "add-rms-bfloat16-* | " + ADD_RMS_NORM_CHECK: INTERPRETER_BFLOAT16 + (
        "the fused add S = X + R of two bfloat16 tensors is done on their bit patterns: 2.125 + 4.5 gives "
        "-1.4e-38 (0x4008 + 0x4090 = 0x8098), so residual_out, y and dweight are garbage here; float16 and float32 "
        "pass, residual_out bit for bit"),
}

#: before 0.5.4, measured on 0.5.3
OLD = {
    "float32-* | " + LAYER_NORM_CHECK: (
        "defect (linkedin/Liger-Kernel#518, fixed in 0.5.4 by #519): the forward's variance sums (x - mean)^2 over "
        "all BLOCK_SIZE lanes, and a padded lane (x loaded as 0) adds mean^2, so a hidden size that is not a power of "
        "two gets var + (BLOCK_SIZE - N) * mean^2 / N (liger_kernel/ops/layer_norm.py:60 in 0.5.3): y = -6.6157 for "
        "-7.2208 (1.96e4x the bound; a NumPy model of the padded variance gives -6.61570; float32-rows5-hidden1000-"
        "offset3), up to 3.7e5x (rows1025-hidden33-offset3); dx through the same rstd up to 2.6e5x; Table 1's weight "
        "re-centering 948x. Every float32 failure is at such a hidden size"),
    "float16-* | " + LAYER_NORM_CHECK: (
        "defects: the padded lanes of #518 (fixed in 0.5.4) and half-precision arithmetic: Mean and RSTD are float16 "
        "tensors and the statistics float16 sums (layer_norm.py:148 in 0.5.3; normbench: 'statistics accumulated in "
        "the input dtype'), and the backward rounds dx, dweight and dbias through bfloat16 for every input that is not "
        "float32 (triton_dtype = tl.float32 if X.dtype == torch.float32 else tl.bfloat16, layer_norm.py:197): y up to "
        "492x the bound, dx up to 1.8e4x (dx = -0.2598 for -0.0020, float16-rows1025-hidden33-offset3)"),
    "float64-* | " + LAYER_NORM_CHECK: (
        "defects: the padded lanes of #518 (y off by 1.03, 1.5e14x the bound, float64-rows5-hidden65-offset3), eps "
        "passed as a float32 scalar, and the backward stores dx, dweight, dbias through bfloat16 (layer_norm.py:197 in "
        "0.5.3; on a GPU a bfloat16-rounded float64 dx; in the interpreter, which cannot convert float64 to bfloat16, "
        "nan and 1e38)"),
}


def known_deviations_for(version: str) -> dict[str, str]:
    """The known deviations of the liger-kernel release ``version``: the failures measured on 0.5.3 (before the
    padded-lanes fix, 0.5.4) or on 0.8.5 (0.5.4 and newer), with their numbers; see the README. Releases
    between these two may fail otherwise, and show it."""
    if not version:
        return {}
    old = version_tuple(version) < PADDED_LANES_FIXED_IN
    return {**(OLD if old else {**NEW, **FUSED}), **COMMON}


class LigerBackend(torch_arrays.AutogradBackend):
    """Liger-Kernel's LayerNorm and RMSNorm as their modules compute them (see the module doc).

    Example (what ``normbench test --impl=liger`` does for each case)::

        >>> import numpy as np
        >>> from normbench_liger.backends import LigerBackend
        >>> b = LigerBackend()
        >>> x = b.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> np.round(b.to_numpy(b.layer_norm(x, (4,), None, None, 1e-5)), 4)
        array([[-1.3416, -0.4472,  0.4472,  1.3416],
               [-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
        >>> np.round(b.to_numpy(b.rms_norm(x, (4,), None, None)), 4)
        array([[0.    , 0.5345, 1.069 , 1.6036],
               [0.7127, 0.8909, 1.069 , 1.2472]], dtype=float32)
    """

    name = "liger"
    description = ("Liger-Kernel's Triton LayerNorm and RMSNorm as LigerLayerNorm / LigerRMSNorm compute them: "
                   "eps=eps, the normalized dims flattened to one, weight/bias as given (ones/zeros where absent, "
                   "as the module holds), RMSNorm with the module defaults offset=0 (weight as is), "
                   "casting_mode='llama', in_place=True; backward via torch autograd; CUDA, or the Triton "
                   "interpreter on CPU")
    operations = ("layer_norm", "rms_norm", "add_rms_norm")
    strided = True  # torch tensors keep normbench's layouts; Liger makes them contiguous itself
    #: LigerFusedAddRMSNorm stores the sum in x's dtype: a float32 residual with half x cannot be expressed
    limits = Limits(residual_in_x_dtype=True, source="S = torch.empty(..., dtype=X.dtype), "
                    "liger_kernel/ops/fused_add_rms_norm.py")
    requires = ("liger_kernel", "triton", "torch")
    install_hint = "pip install ./examples/normbench-liger (it brings liger-kernel, triton and torch)"
    devices = "cuda, or the Triton interpreter on CPU"
    #: the installed release's, read from its metadata when this module is imported (liger is not imported)
    known_deviations: ClassVar[Mapping[str, str]] = known_deviations_for(installed_version())

    @classmethod
    def library_version(cls) -> str:
        return installed_version()

    def __init__(self) -> None:
        self.mode = triton_kit.ensure_mode()  # before triton (and so liger) is imported
        import torch

        self.torch = torch
        if self.mode.interpreter:
            self._device = torch.device("cpu")
            self.device = triton_kit.INTERPRETER_DEVICE
            self.max_elements = triton_kit.interpreter_max_elements(INTERPRETER_MAX_ELEMENTS)
            self.timing_note = triton_kit.TIMING_NOTE
            self.runtime_note = RUNTIME_NOTE
            _adapt_interpreter()
        else:
            if not torch.cuda.is_available():
                raise RuntimeError(f"the Triton kernels are set to compile ({self.mode.reason}) but no CUDA device "
                                   f"is present; unset TRITON_INTERPRET to run them in the interpreter on CPU")
            self._device = torch.device("cuda", torch.cuda.current_device())
            self.device = device_label("cuda", self._device.index, torch.cuda.get_device_name(self._device))
        self.version = installed_version()
        self._layer_norm, self.layer_norm_api = _liger_layer_norm()
        from liger_kernel.ops import rms_norm as rms_ops

        self._rms_function = rms_ops.LigerRMSNormFunction
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        except ImportError:  # a release before the fused add: narrowed on the instance (normbench honours it)
            LigerFusedAddRMSNormFunction = None
            self.operations = ("layer_norm", "rms_norm")
        self._fused_add_function = LigerFusedAddRMSNormFunction
        #: whether the release's RMSNorm runs without a weight (LigerRMSNorm(elementwise_affine=False)): its
        #: kernels take the flag (0.6 and newer); older modules always hold a weight
        self.rms_without_weight = "elementwise_affine" in inspect.getsource(rms_ops)

    # -- arrays ----------------------------------------------------------------------------

    def asarray(self, host):
        """Keeps host's layout: strides, storage offset and stride-0 broadcasts."""
        return torch_arrays.from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return torch_arrays.to_host(self.torch, native)

    def set_threads(self, threads):
        """torch's CPU threads: the interpreter's host work, and the tensors' copies."""
        return torch_arrays.set_threads(self.torch, threads)

    def synchronize(self):
        if self._device.type == "cuda":
            self.torch.cuda.synchronize(self._device)

    # -- the mapping onto Liger's calls --------------------------------------------------------

    def _flat(self, x, normalized_shape):
        """x as ``(..., prod(normalized_shape))``: Liger normalizes over the last dim."""
        if len(normalized_shape) == 1:
            return x
        return x.reshape(*x.shape[:x.ndim - len(normalized_shape)], math.prod(normalized_shape))

    def _liger_layer_norm(self, x, normalized_shape, weight, bias, eps):
        """What ``LigerLayerNorm.forward`` computes, with these parameters (autograd flows through)."""
        n = math.prod(normalized_shape)
        like = weight if weight is not None else x
        w = weight.reshape(n) if weight is not None else self.torch.ones(n, dtype=like.dtype, device=x.device)
        b = bias.reshape(n) if bias is not None else self.torch.zeros(n, dtype=like.dtype, device=x.device)
        return self._layer_norm(self._flat(x, normalized_shape), w, b, eps).reshape(x.shape)

    def _liger_rms_norm(self, x, normalized_shape, weight, eps):
        """What ``LigerRMSNorm.forward`` computes with the module's defaults, with this weight."""
        if eps is None:
            eps = default_rms_eps(str(x.dtype).removeprefix("torch."))
        n = math.prod(normalized_shape)
        if weight is not None:
            w = weight.reshape(n)
        else:
            w = None if self.rms_without_weight else self.torch.ones(n, dtype=x.dtype, device=x.device)
        # LigerRMSNorm.forward with its defaults: offset=0.0, casting_mode="llama", in_place=True (row_mode=None)
        y = self._rms_function.apply(self._flat(x, normalized_shape), w, eps, 0.0, "llama", True)
        return y.reshape(x.shape)

    # -- LayerNorm -------------------------------------------------------------------------

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with self.torch.no_grad():
            return self._liger_layer_norm(x, normalized_shape, weight, bias, eps)

    def autograd_forward(self, op, args, **options):
        """Liger's own autograd functions (the entry points run them under no_grad)."""
        functions = {"layer_norm": self._liger_layer_norm, "rms_norm": self._liger_rms_norm,
                     "add_rms_norm": self._liger_add_rms_norm}
        return functions[op](*args, **options)

    def warmup(self, op, args):
        """Compile (on CUDA) the forward and backward kernels that arguments like these launch, and wait."""
        getattr(self, f"{op}_backward")(self.torch.zeros_like(args[0]), *args)
        self.synchronize()

    # -- RMSNorm ---------------------------------------------------------------------------

    def rms_norm(self, x, normalized_shape, weight, eps):
        with self.torch.no_grad():
            return self._liger_rms_norm(x, normalized_shape, weight, eps)

    # -- the residual add fused into RMSNorm (its backward: the kit's add_rms_norm_backward, through autograd) ----

    def _liger_add_rms_norm(self, x, residual, normalized_shape, weight, eps, weight_offset=0.0):
        """What ``LigerFusedAddRMSNorm.forward`` computes with the module's defaults and ``offset=weight_offset``."""
        if eps is None:
            eps = default_rms_eps(str(x.dtype).removeprefix("torch."))
        n = math.prod(normalized_shape)
        w = weight.reshape(n) if weight is not None else self.torch.ones(n, dtype=x.dtype, device=x.device)
        y, out = self._fused_add_function.apply(self._flat(x, normalized_shape), self._flat(residual, normalized_shape),
                                                w, eps, float(weight_offset), "llama", False)
        return y.reshape(x.shape), out.reshape(x.shape)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps, weight_offset=0.0):
        with self.torch.no_grad():
            return self._liger_add_rms_norm(x, residual, normalized_shape, weight, eps, weight_offset)



def _liger_layer_norm():
    """The function ``LigerLayerNorm.forward`` calls in the installed release, and its name:
    ``liger_kernel.functional.layer_norm`` (the implementation dispatcher, 0.7 and newer), else the
    autograd function ``liger_kernel.ops.layer_norm.LigerLayerNormFunction.apply``. Read from the
    module's source rather than by importing ``liger_kernel.transformers``: up to 0.5.x that package's
    ``__init__`` imports Hugging Face ``transformers``, which the kernels themselves do not need."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("liger_kernel")
    path = Path(spec.origin).parent / "transformers" / "layer_norm.py" if spec and spec.origin else None
    source = path.read_text(encoding="utf-8") if path and path.is_file() else ""
    if "_functional_layer_norm(" in source:
        from liger_kernel.functional import layer_norm

        return (lambda x, w, b, eps: layer_norm(x, w, b, eps)), "liger_kernel.functional.layer_norm"
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return LigerLayerNormFunction.apply, "LigerLayerNormFunction.apply"


def _adapt_interpreter() -> None:
    """Under the Triton interpreter, two things that compiled Triton does and the interpreter (3.9) does not,
    for Liger's kernels only (those defined in ``liger_kernel``); installed once per process:

    * a Python float argument (eps, offset) becomes an fp32 scalar tensor, as compiled Triton specializes it
      (``fp32``): the interpreter passes the raw float, so Liger's ``eps.to(tl.float32)`` (0.6 and newer)
      raises ``AttributeError: 'float' object has no attribute 'to'`` there;
    * Liger's ``rsqrt`` (``triton.language.extra.libdevice.rsqrt`` with triton >= 3.0, a stub the compiler
      resolves to the device library's; the interpreter has no libdevice: it returns None and the kernel
      fails at ``tl.store(RSTD_ptr, rstd)``) becomes ``tl.math.rsqrt``, what Liger itself uses with
      triton < 3.0 and what the interpreter implements (NumPy's ``1 / sqrt``)."""
    import importlib
    import threading

    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    def interpreted_rsqrt(x):
        return tl.math.rsqrt(x)  # looked up at call time: the interpreter patches tl.math during a launch

    for name in ("liger_kernel.ops.layer_norm", "liger_kernel.ops.rms_norm", "liger_kernel.ops.fused_add_rms_norm"):
        module = importlib.import_module(name)
        if getattr(getattr(module, "rsqrt", None), "__module__", "").startswith("triton.language.extra"):
            module.rsqrt = interpreted_rsqrt
    if getattr(interpreter, "_normbench_liger_floats", False):
        return
    local = threading.local()
    convert, call = interpreter._implicit_cvt, interpreter.GridExecutor.__call__

    def implicit_cvt(arg):
        if getattr(local, "liger", False) and isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return convert(arg)

    def grid_call(self, *args, **kwargs):
        before = getattr(local, "liger", False)
        local.liger = getattr(self.fn, "__module__", "").startswith("liger_kernel")
        try:
            return call(self, *args, **kwargs)
        finally:
            local.liger = before

    interpreter._implicit_cvt, interpreter.GridExecutor.__call__ = implicit_cvt, grid_call
    interpreter._normbench_liger_floats = True
