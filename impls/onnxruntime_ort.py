"""ONNX Runtime's CPU kernels of ``LayerNormalization`` (opset 17) and ``RMSNormalization`` (opset 23), and of the
fused ``SkipLayerNormalization`` and ``SkipSimplifiedLayerNormalization`` (com.microsoft), each run as a one-node
ONNX model (``pip install 'normbench[onnxruntime]'``).

One model per signature, built with ``onnx.helper`` and run by an ``onnxruntime.InferenceSession``
on ``CPUExecutionProvider``: (normalization, dtype, rank of x, normalized rank, weight/bias
presence, eps, thread count). Every dim of x is symbolic (``d0``, ``d1``, ...; the parameters
take the trailing ones), so one session serves every size; sessions are cached.

The mapping of normbench's call, one to one:

* LayerNorm: ``LayerNormalization(X, Scale, B)`` with ``axis = x.ndim - len(normalized_shape)``
  (the first normalized dim: ONNX normalizes from ``axis`` to the last dim), ``epsilon = eps``
  (an ONNX float attribute: eps as float32), ``stash_type`` left at its default 1 (the
  statistics computed in float32 whatever x's type, as ONNX exporters emit the op). ``Scale``
  is a required input: when normbench's weight is None it is given ones of x's dtype
  (``y * 1`` is exact). ``B`` is optional: omitted when bias is None. Only ``Y`` is asked
  for; the optional ``Mean`` / ``InvStdDev`` outputs are not exposed.
* RMSNorm: ``RMSNormalization(X, scale)`` with the same ``axis`` and ``epsilon`` (normbench's
  ``eps=None`` becomes :func:`normbench.core.dtypes.default_rms_eps` of x's dtype, torch's
  semantics, not ONNX's default 1e-5), ``stash_type`` 1; ``scale`` is required: ones of x's
  dtype when weight is None. ONNX's RMSNormalization has torch's parameterization
  (``x / sqrt(mean(x^2) + epsilon) * scale``), so weight is passed as it is.
* y has x's type and shape (ONNX's ``Y`` is of type ``T``, x's).
* The fused operations (docs/fused.md): ``add_layer_norm`` is ``SkipLayerNormalization(input, skip, gamma, beta)``,
  ``add_rms_norm`` is ``SkipSimplifiedLayerNormalization(input, skip, gamma)``, both with ``epsilon = eps`` (eps
  None -> torch's default), gamma = weight or ones, beta = bias or omitted, no ``bias`` input (normbench's fused
  add has none); outputs 0 (y) and 3 (``input_skip_bias_sum``: residual_out). The ops normalize the last dim of a
  3-D input, so x and the residual are handed as (rows, 1, hidden), views of the same contiguous buffers. ORT's
  float16 kernel normalizes the float32 sum it also stores rounded (the unrounded-sum convention, which passes).

What the library supports, declared per operation in ``operation_limits`` (``normbench.Limits``), so that the
harness skips the rest with the reason before any call, never failed (and never skipped from inside a call, which
the harness would fail: a kernel that skipped the cases it would fail must not pass):

* dtypes: ORT's CPU execution provider computes LayerNormalization in float32, float64,
  float16 and bfloat16; RMSNormalization in float32, float64 and float16 only (its CPU kernel
  is registered for those three, ``onnxruntime/core/providers/cpu/nn/rms_norm.cc``; a bfloat16
  model falls back to the op's function body, whose ``Mul`` has no bfloat16 CPU kernel:
  ``NOT_IMPLEMENTED``). bfloat16 crosses ORT's Python API only as an ``OrtValue`` over a
  uint16 buffer (NumPy has no bfloat16 type that ORT maps), so those calls use IOBinding.
* parameters of another dtype than x (normbench's ``paramsfloat32`` cases): LayerNormalization-17
  types X, Scale and B with the one type parameter T, so the model cannot be built (ORT:
  "Type parameter (T) ... bound to different types"). RMSNormalization-23 allows a scale of
  another type V, but then Y is of type V, not x's, and ORT's CPU kernel registers V = T only.
* the fused ops: input, skip, gamma and beta share one type T, float or float16 (the com.microsoft schema; a
  float64 or bfloat16 model is INVALID_GRAPH): other dtypes, a float32 residual with half x and parameters of
  another dtype skip; so does a normalized_shape of more than one dim (they normalize the last dim only).
* no backward: ORT inference has none (``has_backward = False``).
* not strided: :meth:`asarray` makes contiguous host arrays (ORT takes NumPy, C order).

Threads: :meth:`set_threads` sets ``SessionOptions.intra_op_num_threads`` of the sessions
created from then on (each count has its own cached sessions); None is ORT's default (0: one
thread per physical core). onnx and onnxruntime are imported when the backend is created,
never when this module is imported.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from normbench import Backend, Limits
from normbench.kit import default_rms_eps, device_label

#: what the ONNX schemas and ORT's CPU kernels cannot express, per operation: the cases outside are skipped with
#: these reasons before any call (normbench.core.backend.Limits), never by the backend from inside one
_LN_LIMITS = Limits(params_in_x_dtype=True, source=(
    "ONNX LayerNormalization-17 types X, Scale and B with one type parameter T, so parameters of another dtype than "
    "x cannot be expressed (onnx.checker: Scale has inconsistent type; ORT: Type parameter (T) bound to different "
    "types)"))
_RMS_LIMITS = Limits(dtypes=("float64", "float32", "float16"), params_in_x_dtype=True, source=(
    "ONNX RMSNormalization-23 gives a scale of another type V an output Y of type V, not x's, and ORT's CPU kernel "
    "registers V = T only (rms_norm.cc); ORT's CPU execution provider has no bfloat16 RMSNormalization kernel "
    "(rms_norm.cc registers float, double, float16; the function-body fallback's Mul(14) has no bfloat16 CPU "
    "kernel: NOT_IMPLEMENTED)"))


def _skip_limits(op: str) -> Limits:
    return Limits(dtypes=("float32", "float16"), residual_in_x_dtype=True, params_in_x_dtype=True, normalized_dims=1,
                  source=(f"ONNX Runtime's {op} (com.microsoft) types input, skip, gamma and beta with one type T, "
                          f"float or float16 (a float64 or bfloat16 model is INVALID_GRAPH), and normalizes the last "
                          f"dim only"))


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    description = ("ONNX Runtime CPU: one-node LayerNormalization-17 (axis = first normalized dim, epsilon = eps, "
                   "stash_type 1, Scale = weight or ones, B = bias or omitted) and RMSNormalization-23 (scale = "
                   "weight or ones, eps None -> torch's default); the fused add: SkipLayerNormalization / "
                   "SkipSimplifiedLayerNormalization (com.microsoft; outputs 0 and 3); y in x's dtype; no backward")
    operations = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
    dtypes = ("float64", "float32", "float16", "bfloat16")
    has_backward = False
    strided = False
    operation_limits: ClassVar[dict[str, Limits]] = {
        "layer_norm": _LN_LIMITS, "rms_norm": _RMS_LIMITS,
        "add_layer_norm": _skip_limits("SkipLayerNormalization"),
        "add_rms_norm": _skip_limits("SkipSimplifiedLayerNormalization")}
    requires = ("onnxruntime", "onnx")
    install_hint = "pip install 'normbench[onnxruntime]'"
    devices = "cpu"
    #: measured on seeds 0..2 with onnxruntime 1.32.0 (the reasons carry the numbers); the first match explains
    known_deviations: ClassVar[dict[str, str]] = {
        "*float64-* | \\): y\\[": (
            "defect (of the ONNX operator schema, which ORT follows; the same verdict as PaddlePaddle's float32 eps, "
            "docs/survey.md): ONNX's epsilon attribute is a float (32-bit), so a float64 model computes with eps "
            "rounded to float32 (1e-5 -> 9.99999975e-06): y agrees with a float64 LayerNorm/RMSNorm of float32(eps) "
            "to 4e-16, and is off the exact one by up to 1.3e-8 where var ~ eps (LayerNorm sigma^2 ~ eps = 0.1: "
            "8.4e5x the bound; eps 1e-5, mean 3 sigma, N 2: 1.3e-11, 101x)"),
        "test_*_rescaling[*float64-*] | is invariant to .*re-scaling .*changed y\\[": (
            "defect (the ONNX schema's float epsilon attribute again): Table 1's re-scaling compares LN_eps(delta*a) with "
            "LN_(eps/delta^2)(a), and the two eps (1e-5, 1.165) round to float32 differently; y changes by up to "
            "6e-8 (1.8e6x the float64 bound), a float64 NumPy LayerNorm of the float32-rounded eps changes by 3.8e-8 "
            "without weight and bias, with the exact eps by 4e-16"),
        "test_forward[*add-rms-float32-*-constant*] | \\): y\\[": (
            "defect (the plain RMSNormalization's mechanism, below, in one lane): ORT's CPU "
            "SkipSimplifiedLayerNormalization sums the squares of the float32 sum one after another in one float32 "
            "accumulator (contrib_ops/cpu/skip_layer_norm.cc, ComputeJob); a NumPy model of that sequential sum gives "
            "its y to 9e-8 relative, the float64 sum is 4e-4 away; on constant rows the error grows as N*u: 1.2x the "
            "bound at N = 1000, 3.6x at 8192, 13x at 65536"),
        "test_forward[onnxruntime-rms-float32-rows2-hidden65536-constant*] | \\): y\\[": (
            "defect: ORT's CPU RMSNormalization sums x^2 in 8 float32 lanes of 8192 terms each at N = 65536 "
            "(a NumPy model of 8 sequential lanes gives its 1/rms 0.3228407 exactly); on a constant row that sum "
            "drifts by -8.2e-5 relative, y = 2.0207345 where float64 gives 2.0206517 (1.3x the bound)"),
    }

    def __init__(self) -> None:
        import ml_dtypes
        import onnx
        import onnxruntime

        self.onnx = onnx
        self.ort = onnxruntime
        self._bf16 = np.dtype(ml_dtypes.bfloat16)
        self._elem = {np.dtype(np.float64): onnx.TensorProto.DOUBLE, np.dtype(np.float32): onnx.TensorProto.FLOAT,
                      np.dtype(np.float16): onnx.TensorProto.FLOAT16, self._bf16: onnx.TensorProto.BFLOAT16}
        self._threads: int | None = None
        self._sessions: dict[tuple, Any] = {}
        self.device = device_label("cpu")

    # -- arrays -------------------------------------------------------------------------------

    def asarray(self, host):
        """A contiguous copy (ORT reads C-order NumPy buffers)."""
        return np.ascontiguousarray(host).copy()

    def to_numpy(self, native):
        return np.asarray(native)

    def set_threads(self, threads):
        """Sessions created from now on use ``threads`` intra-op threads (None: ORT's default, one per
        physical core, reported as ``os.cpu_count()``); sessions are cached per count."""
        self._threads = threads
        return threads if threads is not None else os.cpu_count()

    # -- the models ---------------------------------------------------------------------------

    def _session(self, op: str, dtype: np.dtype, rank: int, axis: int, bias: bool, eps: float):
        key = (op, dtype, rank, axis, bias, float(np.float32(eps)), self._threads)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._build(*key)
        return session

    def _build(self, op, dtype, rank, axis, bias, eps, threads):
        helper, elem = self.onnx.helper, self._elem[dtype]
        dims = [f"d{i}" for i in range(rank)]
        inputs = [helper.make_tensor_value_info("X", elem, dims),
                  helper.make_tensor_value_info("Scale", elem, dims[axis:])]
        if bias:
            inputs.append(helper.make_tensor_value_info("B", elem, dims[axis:]))
        opset = 17 if op == "LayerNormalization" else 23
        node = helper.make_node(op, [i.name for i in inputs], ["Y"], axis=axis, epsilon=eps)
        graph = helper.make_graph([node], f"normbench_{op}", inputs, [helper.make_tensor_value_info("Y", elem, dims)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="normbench")
        model.ir_version = min(model.ir_version, 10)  # what ORT >= 1.17 loads
        options = self.ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        return self.ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def _run(self, session, feeds: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        if x.dtype != self._bf16:
            return session.run(["Y"], feeds)[0]
        # bfloat16: OrtValues over uint16 buffers, y written into a preallocated one
        ortvalue = self.ort.OrtValue.ortvalue_from_numpy_with_onnx_type
        binding = session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ortvalue(np.ascontiguousarray(array).view(np.uint16), self._elem[self._bf16]))
        y = np.empty(x.shape, np.uint16)
        binding.bind_ortvalue_output("Y", ortvalue(y, self._elem[self._bf16]))
        session.run_with_iobinding(binding)
        return y.view(self._bf16)

    def _params(self, x, normalized_shape, weight, bias):
        scale = weight if weight is not None else np.ones(normalized_shape, x.dtype)
        return scale, bias

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        scale, bias = self._params(x, normalized_shape, weight, bias)
        axis = x.ndim - len(normalized_shape)
        session = self._session("LayerNormalization", x.dtype, x.ndim, axis, bias is not None, eps)
        feeds = {"X": x, "Scale": scale, **({"B": bias} if bias is not None else {})}
        return self._run(session, feeds, x)

    # -- the fused add: com.microsoft's SkipLayerNormalization and SkipSimplifiedLayerNormalization ---------------

    def _skip_session(self, op: str, dtype: np.dtype, beta: bool, eps: float):
        key = (op, dtype, beta, float(np.float32(eps)), self._threads)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._build_skip(*key)
        return session

    def _build_skip(self, op, dtype, beta, eps, threads):
        helper, elem = self.onnx.helper, self._elem[dtype]
        dims = ["rows", "one", "hidden"]
        inputs = [helper.make_tensor_value_info("X", elem, dims), helper.make_tensor_value_info("Skip", elem, dims),
                  helper.make_tensor_value_info("Gamma", elem, ["hidden"])]
        if beta:
            inputs.append(helper.make_tensor_value_info("Beta", elem, ["hidden"]))
        # outputs 1 and 2 (mean, inv_std_var) are not asked for; output 3 is input + skip, residual_out
        node = helper.make_node(op, [i.name for i in inputs], ["Y", "", "", "Sum"], domain="com.microsoft", epsilon=eps)
        outputs = [helper.make_tensor_value_info(name, elem, dims) for name in ("Y", "Sum")]
        graph = helper.make_graph([node], f"normbench_{op}", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                                  producer_name="normbench")
        model.ir_version = min(model.ir_version, 10)
        options = self.ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        return self.ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def _fused(self, op, x, residual, normalized_shape, weight, bias, eps):
        scale, bias = self._params(x, normalized_shape, weight, bias)
        n = normalized_shape[0]
        feeds = {"X": x.reshape(-1, 1, n), "Skip": residual.reshape(-1, 1, n), "Gamma": scale,
                 **({"Beta": bias} if bias is not None else {})}
        y, out = self._skip_session(op, x.dtype, bias is not None, eps).run(["Y", "Sum"], feeds)
        return y.reshape(x.shape), out.reshape(x.shape)

    def add_layer_norm(self, x, residual, normalized_shape, weight, bias, eps):
        return self._fused("SkipLayerNormalization", x, residual, normalized_shape, weight, bias, eps)

    def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
        eps = default_rms_eps(x.dtype.name) if eps is None else eps
        return self._fused("SkipSimplifiedLayerNormalization", x, residual, normalized_shape, weight, None, eps)

    def rms_norm(self, x, normalized_shape, weight, eps):
        scale, _ = self._params(x, normalized_shape, weight, None)
        eps = default_rms_eps(x.dtype.name) if eps is None else eps
        axis = x.ndim - len(normalized_shape)
        session = self._session("RMSNormalization", x.dtype, x.ndim, axis, False, eps)
        return self._run(session, {"X": x, "Scale": scale}, x)
