"""MLX's fused normalizations, ``mlx.core.fast.layer_norm`` and ``mlx.core.fast.rms_norm``, as the normbench
backend ``mlx``, on MLX's CPU device (Linux: ``pip install 'mlx[cpu]'``; on a Mac, MLX's default device).

Mapping, one to one:

* ``mx.fast.layer_norm(x, weight, bias, eps)`` and ``mx.fast.rms_norm(x, weight, eps)``, with ``eps`` as given
  (RMSNorm's ``eps=None``, normbench's default, becomes :func:`normbench.kit.default_rms_eps` of x's dtype,
  what torch does: MLX has no default) and weight / bias passed, or None, as given, in their own dtype.
  MLX's RMSNorm is ``x * rsqrt(mean(x^2) + eps) * weight``: torch's parameterization, no conversion.
* **The normalized dims.** MLX normalizes over the last axis only, and its weight and bias are 1-D of the
  last axis's size. A ``normalized_shape`` of several trailing dims (normbench's ``hidden8x16`` etc.) is
  therefore passed as x reshaped to ``(..., prod(normalized_shape))``, weight and bias flattened, and y
  reshaped back: exactly what a user does, and exact (LayerNorm over the trailing dims is, by definition, over
  their elements; a reshape of a contiguous MLX array moves nothing). The gradients come back through the
  reshapes in the parameters' own shapes.
* **Parameters wider than x** (normbench's ``params float32`` cases, a half x with float32 weight and bias): MLX
  promotes, and returns y in float32; normbench's contract is y in x's dtype, so y is cast to x's dtype (the one
  rounding a user makes to feed the next half-precision layer; docs/writing-a-backend.md's convention for
  Hugging Face's RMSNorm). Where x and the parameters share a dtype, y is MLX's as it is.
* **Backward**: ``mx.vjp`` of that forward with respect to x, weight and bias (MLX's own VJP of its fast
  kernels), one forward and one backward per call.
* **Dtypes**: float32, float16, bfloat16 and float64 (MLX has float64 on the CPU only; both fast kernels run
  on it in mlx 0.32). Host arrays convert exactly: ``mx.array(host, dtype=...)`` (without the dtype, MLX
  would turn a float64 NumPy array into float32), and bfloat16 back through float32.
* **Evaluation**: MLX is lazy; every call ends with ``mx.eval`` of its results, so the work is done inside
  the call (what ``synchronize`` would otherwise have to do).
* MLX arrays made from NumPy are contiguous copies: not ``strided``. MLX does not return the statistics.
* **One call is refused**: LayerNorm's backward with a bias on an empty batch (0 rows). MLX's VJP sums dy
  over the rows for dbias, and its CPU reduction over an empty axis of an array that is not row-contiguous
  (``mx.array`` of an empty NumPy array keeps NumPy's zero strides) reads an empty reduction plan and can
  hang in native code, where no test timeout reaches it (:data:`EMPTY_BATCH_HANG`). The backend raises
  :class:`MlxHangs` instead of calling it; the deviation is declared.

mlx is imported in ``__init__``, never at module level: ``normbench list`` imports this module.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from normbench import Backend
from normbench.kit import default_rms_eps, dtype_name

#: a value out of its bound, an identity of the backward, or one of the paper's invariance checks
_CHECKS = (r"\): (y|dx|dweight|dbias)\[|: sum\(dx\) = |sum\(xhat\*dx\)|invariant to|must scale dL/dW|"
           r"must not change the gain|coherent structure|must have the same hidde|disagrees with the backend's own forward")
_FAST = "mlx/fast.cpp (the fallback MLX runs on the CPU)"
#: the forward's fallback: x = astype(x, float32) first, whatever x's dtype
FLOAT64_AS_FLOAT32 = {
    "*float64-* | " + _CHECKS: (
        "float64 computed in float32: the CPU fallback of fast.layer_norm / fast.rms_norm casts x to float32 "
        "(astype(inputs[0], float32) in " + _FAST + ") and the result back to float64, so y has float32's "
        "precision: 1.04e7x the bound (float64 rows5 x hidden2: 1.07752365 for 1.07752315); a float32 NumPy "
        "LayerNorm reproduces it at 0x the bound; the backward, the invariance checks and the finite differences of that "
        "float32-precise forward (<dx, v> off by 3.7e-6, bound 6.2e-11) inherit it"),
}
#: the VJP's fallback: sums of x and x^2 in x's own dtype, var = E[x^2] - E[x]^2
ONE_PASS_BACKWARD = {
    "test_backward*[*float16-*] | " + _CHECKS: (
        "the backward of the fast norms (LayerNorm::vjp / RMSNorm::vjp in " + _FAST + ") recomputes the "
        "statistics in x's own dtype, with LayerNorm's variance one-pass (sum(x^2)/N - mu^2), so a half "
        "dx / dweight loses them: bfloat16 dx 6.3x the bound on rows of mean 3 sigma (1.12e-5 for 1.66e-4), "
        "60x on constant rows"),
    "test_backward*[*float32-*-constant*] | " + _CHECKS: (
        "the backward recomputes LayerNorm's variance one-pass in float32 (sum(x^2)/N - mu^2, LayerNorm::vjp in "
        + _FAST + "), which on constant rows is rounding noise, not 0: dx up to 7x the bound at N = 65536"),
}
#: float32 constant rows in the forward: x - mean(x) is not 0 after MLX's float32 row sum
CONSTANT_ROWS = {
    "test_forward[*float32-*-constant*] | " + _CHECKS: (
        "float32 constant rows: MLX's CPU row reduction (mean(x) for LayerNorm, mean(x^2) for RMSNorm, in "
        + _FAST + ") errs more than a blocked/pairwise sum's k(N) = 16 + 2 sqrt(N): LayerNorm y = 0.0187 for "
        "0.0022 (1.3x the bound, N = 1000) to 0.54 for 0.006 (7x, N = 65536); RMSNorm 1.5x to 6x"),
}
#: half x with float32 bias and no weight: the bias is cast to x's dtype
BIAS_ONLY_PARAMS = {
    "test_backward[*-paramsfloat32-*-biasonly] | \\): dbias\\[": (
        "with a float32 bias and no weight, fast.layer_norm's output dtype is x's (its result type follows the "
        "weight only, " + _FAST + "), so the float32 bias is cast to the half dtype and its gradient is summed "
        "there: dbias -9.125 for -9.0952 in bfloat16 (2.3e3x the bound), float16 125x"),
}


#: LayerNorm's dbias on 0 rows: MLX's CPU sum over an empty axis of a non-row-contiguous array hangs
EMPTY_BATCH_HANG = (
    "MLX hangs on this call (not made): LayerNorm's VJP sums dy over the 0 rows for dbias "
    "(mlx/fast.cpp LayerNorm::vjp: sum(g, axes)); dy made from an empty NumPy array keeps NumPy's zero strides, "
    "so it is not row-contiguous, get_reduction_plan finds no reduced axis of size > 1 and reads strides.back() "
    "of an empty list (mlx/backend/common/reduce.cpp), and reduction_op's nd_loop recurses on shape.size() - 1 "
    "of an empty shape (mlx/backend/cpu/reduce.cpp): undefined behaviour that spun for 41 minutes in a suite "
    "run and never returned in 3 of 6 fresh processes (mlx 0.32.4); "
    "mx.sum(mx.transpose(mx.zeros((33, 0)) + 1), axis=0) hangs the same way")


class MlxHangs(RuntimeError):
    """A call MLX is known to hang on, refused (the hang is in native code, out of reach of a test timeout)."""


#: the refused call, declared: LayerNorm's backward (with a bias) on the suites' empty batches
EMPTY_BATCH = {
    f"test_backward*[{dtype}-rows0-*] | MLX hangs on this call": (
        "MLX's CPU sum over an empty axis of an array that is not row-contiguous hangs (undefined behaviour in "
        "mlx/backend/common/reduce.cpp get_reduction_plan: strides.back() of an empty plan; nd_loop in "
        "mlx/backend/cpu/reduce.cpp recursing on shape.size() - 1 of an empty shape): LayerNorm's VJP sums dy "
        "over the 0 rows for dbias, and an empty NumPy dy converts with zero strides; a suite run spun 41 minutes "
        "in it, 3 of 6 fresh processes never returned; the backend refuses the call")
    for dtype in ("float32", "bfloat16")
}


class MlxFast(Backend):
    """``mx.fast.layer_norm`` and ``mx.fast.rms_norm`` on MLX's CPU device; backward by ``mx.vjp``.

    Example (what ``normbench test --impl=mlx`` does for each case)::

        >>> import numpy as np
        >>> from normbench_mlx.backends import MlxFast
        >>> b = MlxFast()
        >>> x = b.asarray(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> np.round(b.to_numpy(b.layer_norm(x, (4,), None, None, 1e-5)), 4)
        array([[-1.3416, -0.4472,  0.4472,  1.3416],
               [-1.3416, -0.4472,  0.4472,  1.3416]], dtype=float32)
        >>> dx, dw = b.rms_norm_backward(x, x, (4,), b.asarray(np.ones(4, np.float32)), None)
        >>> dx.shape, dw.shape
        ((2, 4), (4,))
    """

    name = "mlx"
    description = ("mlx.core.fast.layer_norm / rms_norm on MLX's CPU device (eps as given, RMSNorm's None -> "
                   "torch's default; weight/bias as given; several normalized dims flattened into MLX's one last "
                   "axis; y cast to x's dtype where float32 params promote it); backward via mx.vjp")
    operations = ("layer_norm", "rms_norm")
    requires = ("mlx",)
    install_hint = "pip install normbench-mlx (on Linux it brings 'mlx[cpu]')"
    devices = "cpu (Linux: mlx[cpu]); MLX's default device on a Mac"
    strided = False  # mx.array copies a NumPy array into a contiguous array
    #: what normbench finds in MLX, measured (see this package's README); the first match explains a failure
    known_deviations: ClassVar[dict[str, str]] = {**FLOAT64_AS_FLOAT32, **BIAS_ONLY_PARAMS, **ONE_PASS_BACKWARD,
                                                  **CONSTANT_ROWS, **EMPTY_BATCH}

    def __init__(self) -> None:
        import mlx.core as mx

        self.mx = mx
        self._dtypes = {"float64": mx.float64, "float32": mx.float32, "float16": mx.float16,
                        "bfloat16": mx.bfloat16}
        if mx.default_device().type != mx.DeviceType.cpu:
            mx.set_default_device(mx.cpu)  # float64 exists on the CPU only; normbench measures MLX's CPU kernels
        self.device = "cpu"

    # -- arrays -----------------------------------------------------------------------------

    def asarray(self, host):
        return self.mx.array(np.ascontiguousarray(host), dtype=self._dtypes[dtype_name(host.dtype)])

    def to_numpy(self, native):
        if native.dtype == self.mx.bfloat16:  # no PEP 3118 format for bfloat16: through float32, exactly
            import ml_dtypes

            return np.array(native.astype(self.mx.float32)).astype(ml_dtypes.bfloat16)
        return np.array(native)

    # -- the forward, as a function mx.vjp can differentiate ---------------------------------

    def _forward(self, norm, normalized_shape):
        """``f(x, weight, bias)`` calling MLX's kernel on the flattened normalized dims."""
        mx = self.mx
        size = math.prod(normalized_shape)

        def forward(x, weight, bias, eps):
            shape, dtype = x.shape, x.dtype
            flat = x.reshape(*shape[:x.ndim - len(normalized_shape)], size)
            w = None if weight is None else weight.reshape(size)
            if norm == "rms_norm":
                y = mx.fast.rms_norm(flat, w, eps)
            else:
                y = mx.fast.layer_norm(flat, w, None if bias is None else bias.reshape(size), eps)
            return y.reshape(shape).astype(dtype)  # astype: a no-op unless float32 params promoted y

        return forward

    def _run(self, norm, dy, x, normalized_shape, weight, bias, eps):
        """``(y, grads)``: y alone when dy is None, else y and the VJP (None where a parameter is None)."""
        mx = self.mx
        if dy is not None and bias is not None and math.prod(x.shape[:x.ndim - len(normalized_shape)]) == 0:
            raise MlxHangs(EMPTY_BATCH_HANG)  # dbias = sum of dy over no rows: see EMPTY_BATCH_HANG
        forward = self._forward(norm, normalized_shape)
        given = [a for a in (x, weight, bias) if a is not None]
        slots = [a is not None for a in (x, weight, bias)]

        def f(*arrays):
            it = iter(arrays)
            x_, w_, b_ = (next(it) if present else None for present in slots)
            return forward(x_, w_, b_, eps)

        if dy is None:
            y = f(*given)
            mx.eval(y)
            return y, None
        (y,), grads = mx.vjp(f, given, [dy])
        mx.eval(y, *grads)
        it = iter(grads)
        return y, tuple(next(it) if present else None for present in slots)

    # -- LayerNorm ---------------------------------------------------------------------------

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self._run("layer_norm", None, x, normalized_shape, weight, bias, eps)[0]

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self._run("layer_norm", dy, x, normalized_shape, weight, bias, eps)[1]

    def forward_backward(self, op, args, cotangents):
        """One ``mx.vjp``: the output and the gradients of x and the parameters."""
        if op == "layer_norm":
            return self._run("layer_norm", cotangents[0], *args)
        x, normalized_shape, weight, eps = args
        y, grads = self._run("rms_norm", cotangents[0], x, normalized_shape, weight, None, self._eps(x, eps))
        return y, grads[:2]

    # -- RMSNorm -----------------------------------------------------------------------------

    def _eps(self, x, eps):
        return default_rms_eps(self._name(x.dtype)) if eps is None else eps

    def _name(self, dtype):
        return next(name for name, d in self._dtypes.items() if d == dtype)

    def rms_norm(self, x, normalized_shape, weight, eps):
        return self._run("rms_norm", None, x, normalized_shape, weight, None, self._eps(x, eps))[0]

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        return self._run("rms_norm", dy, x, normalized_shape, weight, None, self._eps(x, eps))[1][:2]

