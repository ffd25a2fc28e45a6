"""The Triton backend's own tests: backward against the oracle, determinism, the
autograd function and layer against torch, bad input, and the plain-Python heuristics;
RMSNorm (the same kernels with CENTERED off) against a float64 NumPy recomputation.

They run where triton and torch are installed (``tox -e torch``): under the
Triton interpreter on CPU, or compiled on a CUDA device.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from normbench.check import error_model, oracle
from normbench.check.conformance import ConformanceError, same_bits, worst_violation
from normbench.core import cases
from normbench.core.dtypes import host_dtype

if importlib.util.find_spec("triton") is None:  # never import triton before the mode is chosen
    pytest.skip("triton is not installed (pip install 'normbench[triton]')", allow_module_level=True)
torch = pytest.importorskip("torch")

from normbench.impls.triton import (  # noqa: E402
    AddLayerNormFunction,
    LayerNorm,
    RMSNorm,
    add_layer_norm,
    add_rms_norm,
    launch,
    layer_norm,
    rms_norm,
)
from normbench.impls.triton.backend import TritonBackend  # noqa: E402
from normbench.kit.triton import ensure_mode  # noqa: E402

MODE = ensure_mode()

import triton  # noqa: E402  (after the mode is settled)
import triton.language as tl  # noqa: E402

from normbench.impls.triton import forward_kernels  # noqa: E402


@pytest.fixture(scope="module")
def triton_backend():
    return TritonBackend()


def make_dy(inputs: cases.Inputs, broadcast: bool = False) -> np.ndarray:
    """Random dy with a nonzero row mean (never all ones: NUMERICS.md), in x's dtype."""
    rng = cases.rng_for(inputs.case, inputs.seed, "dy")
    shape = inputs.case.shape
    if broadcast:  # stride-0 dy: one row broadcast to every row
        row = (rng.standard_normal(inputs.case.normalized_shape) + 0.5).astype(host_dtype(inputs.case.dtype))
        return np.broadcast_to(row, shape)
    return (rng.standard_normal(shape) + 0.5).astype(host_dtype(inputs.case.dtype))


def check_backward(backend, inputs: cases.Inputs, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    """dx, dweight, dbias within ``error_model.backward_bounds`` of the float64 oracle; returns them."""
    case = inputs.case
    x, w, b = (None if a is None else backend.asarray(a) for a in (inputs.x, inputs.weight, inputs.bias))
    got = backend.layer_norm_backward(backend.asarray(dy), x, case.normalized_shape, w, b, case.eps)
    ref = oracle.forward(inputs.x, case.normalized_shape, inputs.weight, inputs.bias, case.eps)
    grads = oracle.backward(dy, ref)
    bounds = error_model.backward_bounds(dy, ref, grads, case.dtype)
    host = []
    for what, value, param, want, bound in zip(("dx", "dweight", "dbias"), got, (x, w, b),
                                               (grads.dx, grads.dweight, grads.dbias), bounds):
        if what != "dx" and param is None:
            assert value is None, f"{what} must be None without its parameter"
            host.append(None)
            continue
        array = backend.to_numpy(value)
        assert array.shape == (case.shape if what == "dx" else case.normalized_shape)
        assert array.dtype == host_dtype(case.dtype if what == "dx" else case.params)
        worst = worst_violation(array.reshape(want.shape), want, bound)
        if worst is not None:
            raise ConformanceError(f"{case.id}: {what}{list(worst.index)} = {worst.value:.9g}, reference "
                                   f"{worst.reference:.9g}, bound {worst.bound:.3g} ({worst.ratio:.3g}x), "
                                   f"{worst.violations} of {worst.total} out of bound")
        host.append(array)
    return tuple(host)


@pytest.mark.parametrize("shape", [(64, 100), (2, 3, 257), (5, 20000), (1025, 8)], ids=str)
def test_backward_stride0_dy(triton_backend, shape):
    case = cases.Case("layout", shape, shape[-1:], "float32", dist="offset3")
    inputs = cases.make_inputs(case, 0)
    check_backward(triton_backend, inputs, make_dy(inputs, broadcast=True))


@pytest.mark.parametrize("shape", [(4099, 33), (3, 20000), (600, 1000)], ids=str)
def test_dweight_dbias_bit_identical(triton_backend, shape):
    """Persistent programs and a fixed-order reduction: no run-to-run variation."""
    inputs = cases.make_inputs(cases.Case("rows", shape, shape[-1:], "bfloat16", dist="offset3"), 0)
    dy = make_dy(inputs)
    first = check_backward(triton_backend, inputs, dy)
    again = check_backward(triton_backend, inputs, dy)
    for a, b in zip(first, again):
        assert same_bits(a, b)


def test_rows_are_read_through_their_stride_and_only_strided_columns_are_copied():
    base = torch.randn(8, 6)
    for view in (base[::2], base[:, 1:], base[1:], torch.randn(6).expand(5, 6)):
        rows = launch.rows_view(view, view.shape[-1])
        assert rows.data_ptr() == view.data_ptr() and rows.stride() == view.stride()
    transposed = launch.rows_view(base.T, 8)
    assert transposed.is_contiguous() and torch.equal(transposed, base.T)
    stacked = torch.randn(2, 3, 4)[:, :2]  # leading dims that do not collapse to one stride: reshape copies
    assert launch.rows_view(stacked, 4).shape == (4, 4)


# -- the autograd function and the layer, against torch ------------------------------------

AFFINE = [(True, True), (True, False), (False, True), (False, False)]


def _params(n_shape, weight: bool, bias: bool, dtype=torch.float64):
    gen = torch.Generator().manual_seed(1)
    make = lambda: torch.randn(n_shape, generator=gen, dtype=dtype)
    return (make() if weight else None), (make() if bias else None)


@pytest.mark.parametrize("weight,bias", AFFINE, ids=lambda v: str(v))
def test_gradcheck_float64(weight, bias):
    """Finite differences in float64 (directional: gradcheck's fast mode), every weight/bias combination."""
    x = torch.randn(3, 2, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 2
    w, b = _params((2, 7), weight, bias)
    inputs = [t.requires_grad_() if t is not None else None for t in (x, w, b)]
    fn = lambda x_, w_=None, b_=None: layer_norm(x_, (2, 7), w_ if weight else None, b_ if bias else None, 1e-5)
    assert torch.autograd.gradcheck(fn, tuple(t for t in inputs if t is not None) if weight or not bias else (x, b),
                                    fast_mode=True)


@pytest.mark.parametrize("shape,dtype", [((4, 33), torch.float32), ((2, 3, 20000), torch.float32),
                                         ((65, 257), torch.bfloat16), ((7, 1000), torch.float16)], ids=str)
@pytest.mark.parametrize("weight,bias", AFFINE, ids=lambda v: str(v))
def test_matches_torch_layer_norm(shape, dtype, weight, bias):
    """Values and every gradient agree with torch.nn.functional.layer_norm in float64; y.sum()
    makes autograd hand the backward a stride-0 dy."""
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(0)) + 3).to(dtype)
    w, b = _params(shape[-1:], weight, bias, dtype)
    ours = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = [t.double().requires_grad_() if t is not None else None for t in (x, w, b)]
    y = layer_norm(ours[0], shape[-1:], ours[1], ours[2], 1e-5)
    y_ref = torch.nn.functional.layer_norm(ref[0], shape[-1:], ref[1], ref[2], 1e-5)
    (y.float() * torch.arange(shape[-1])).sum().backward()
    (y_ref * torch.arange(shape[-1])).sum().backward()
    tol = {torch.float32: 1e-4, torch.bfloat16: 0.1, torch.float16: 0.02}[dtype]
    torch.testing.assert_close(y.double(), y_ref, atol=tol, rtol=tol)
    for mine, theirs in zip(ours, ref):
        if mine is not None:
            scale = theirs.grad.abs().max().item() + 1
            torch.testing.assert_close(mine.grad.double() / scale, theirs.grad / scale, atol=tol, rtol=tol)


def test_only_the_gradients_asked_for():
    x, w, b = torch.randn(5, 16), torch.randn(16).requires_grad_(), torch.randn(16)
    layer_norm(x, (16,), w, b).sum().backward()
    assert w.grad is not None and x.grad is None and b.grad is None
    x.requires_grad_()
    layer_norm(x, 16, None, None).pow(2).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_layer_is_a_drop_in_torch_layer_norm():
    ref = torch.nn.LayerNorm((4, 6), eps=1e-3)
    torch.nn.init.normal_(ref.weight), torch.nn.init.normal_(ref.bias)
    ours = LayerNorm((4, 6), eps=1e-3)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 6)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    assert LayerNorm(8, bias=False).bias is None and LayerNorm(8, elementwise_affine=False).weight is None
    assert isinstance(ours, torch.nn.LayerNorm)


def test_no_double_backward():
    x = torch.randn(3, 8, requires_grad=True)
    (dx,) = torch.autograd.grad(layer_norm(x, (8,)).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dx.sum().backward()


def test_warmup_runs_forward_and_backward(triton_backend):
    x = triton_backend.asarray(np.ones((4, 16), np.float32))
    assert triton_backend.warmup("layer_norm", (x, (16,), None, triton_backend.asarray(np.zeros(16, np.float32)),
                                                1e-5)) is None


def test_empty_input():
    x = torch.randn(0, 7, requires_grad=True)
    w, b = torch.randn(7, requires_grad=True), torch.randn(7, requires_grad=True)
    y = layer_norm(x, (7,), w, b)
    assert y.shape == (0, 7)
    y.sum().backward()
    assert x.grad.shape == (0, 7) and torch.equal(w.grad, torch.zeros(7)) and torch.equal(b.grad, torch.zeros(7))


# -- bad input -------------------------------------------------------------------------------


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match=r"x has dtype torch.int32; the Triton LayerNorm kernels support float16"):
        launch.forward(torch.zeros(2, 3, dtype=torch.int32), (3,))


@pytest.mark.skipif(not MODE.interpreter, reason="compiled on CUDA: CPU tensors are the wrong device")
def test_wrong_device_says_where_to_move_it():
    with pytest.raises(ValueError, match=r"x is on meta, but the Triton kernels run on interpreter \(CPU; not for "
                                         r"timing\) here .*; move it with x.cpu\(\)"):
        layer_norm(torch.zeros(2, 3, device="meta"), (3,))
    with pytest.raises(ValueError, match=r"weight is on meta, .*; move it with weight.cpu\(\)"):
        layer_norm(torch.zeros(2, 3), (3,), torch.zeros(3, device="meta"))


@pytest.mark.skipif(MODE.interpreter, reason="needs a CUDA device")
def test_cpu_tensor_on_cuda_build_says_where_to_move_it():
    with pytest.raises(ValueError, match=r"x is on cpu, .*move it with x.cuda\(\)"):
        layer_norm(torch.zeros(2, 3), (3,))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"normalized_shape \(4,\) must be .* x's trailing dims"):
        layer_norm(torch.zeros(2, 3), (4,))
    with pytest.raises(ValueError, match=r"weight has shape \(2,\); it must have normalized_shape \(3,\)"):
        layer_norm(torch.zeros(2, 3), (3,), torch.zeros(2))


def test_device_is_reported(triton_backend):
    if MODE.interpreter:
        assert triton_backend.device == "interpreter (CPU; not for timing)"
        assert triton_backend.max_elements and triton_backend.max_elements >= 65537 * 8
    else:
        assert triton_backend.device.startswith("cuda:") and triton_backend.max_elements is None


def test_unavailable_without_triton_names_the_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    available = TritonBackend.availability()
    assert not available
    assert available.reason == "triton is not installed; pip install 'normbench[triton]'"


@pytest.mark.e2e
def test_kernels_compile_for_a_gpu(tmp_path):
    """The interpreter cannot show what only the compiler rejects: compile a few configurations
    for sm_90 (row in registers and looped, half and double) in a fresh process (the quantized
    kernels: test_quantized_kernels_compile_for_a_gpu_and_keep_their_rounding)."""
    from normbench.impls.triton import compile_check

    out = subprocess.run([sys.executable, "-m", "normbench.impls.triton.compile_check", "--arch", "90",
                          "--hidden", "1,1000,65536", "--dtypes", "bfloat16,float64",
                          "--norms", ",".join(compile_check.NORMS)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    pairs = [("bfloat16", "bfloat16"), ("float64", "float64"), ("bfloat16", "float32")]
    expected = 0
    for norm in compile_check.NORMS:  # both normalizations by default
        full, *others = compile_check.affines(norm)
        runs = [(*pair, full) for pair in pairs] + [(*pairs[0], a) for a in others]
        expected += sum(len(compile_check.variants(n, *run, norm=norm)) for n in (1, 1000, 65536) for run in runs)
    assert out.stdout.count("ok ") == expected and "FAIL" not in out.stdout
    assert "ok   rms_norm_backward_looped[bfloat16/bfloat16, N=65536" in out.stdout


def test_the_forward_statistics_divide_correctly_rounded_on_a_gpu():
    """fp32 ``/`` compiles to div.full.f32 (within 2 ulp) on NVIDIA GPUs, which the interpreter cannot show: a mean
    1 ulp off on a constant row at 2e4 is a variance of 4e-6 beside eps 1e-5 (rstd 15% off). The forward kernels
    divide with div.rn (``forward_kernels.divide``): compiled for sm_90, no div.full.f32 is left in them."""
    program = ("from normbench.impls.triton import compile_check as cc\n"
               "for norm in cc.NORMS:\n"
               "    for n in (1000, 65536):\n"
               "        for v in cc.variants(n, 'float32', 'float32', next(iter(cc.affines(norm))), norm=norm):\n"
               "            if 'forward' in v.kernel:\n"
               "                ptx = cc.compile_variant(v, 90).asm['ptx']\n"
               "                print(v.kernel, n, ptx.count('div.full.f32'), ptx.count('div.rn.f32'))\n")
    counts = compiled_counts(program)
    assert len(counts) == 8 and all(full == "0" and int(rn) > 0 for _, _, full, rn in counts), counts


def compiled_counts(program: str) -> list[list[str]]:
    """Run ``program`` (it compiles kernels with compile_check and prints one line of counts per kernel) in a fresh
    process with the kernels compiled, not interpreted: its lines, split."""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"})
    assert out.returncode == 0, out.stderr
    return [line.split() for line in out.stdout.splitlines()]


# -- RMSNorm: the same kernel bodies with CENTERED off -----------------------------------------
#
# Checked against a float64 NumPy recomputation of the formulas (r = 1/sqrt(mean(x^2) + eps),
# xhat = x*r, g = dy*weight: y = xhat*weight, dx = r*(g - xhat*mean(g*xhat)), dweight = column
# sums of dy*xhat) on the very inputs the kernels saw (cast from their dtype). The bound per
# element: the output's rounding (2 ulp-halves: round to nearest, or the interpreter's bf16
# truncation) plus k*u_acc times the scale of the terms (|y|; r*(|g| + |xhat|*mean|g*xhat|);
# sum|dy*xhat|), with k = 16 + 2*sqrt(terms summed), as normbench's error model does. A
# formula error (a mean subtracted, a term missing, weight applied twice) is off by O(1).

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
TINY = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 2.0**-1074}


def rms_reference(x: np.ndarray, w: np.ndarray | None, dy: np.ndarray, eps: float) -> dict:
    """float64 y, dx, dweight and the scales of their terms (see above)."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    w = np.ones(x.shape[-1]) if w is None else w.astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat = x * r
    g = dy * w
    rows = tuple(range(x.ndim - 1))
    return {"y": xhat * w, "y_scale": np.abs(xhat * w),
            "dx": r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True)),
            "dx_scale": r * (np.abs(g) + np.abs(xhat) * np.mean(np.abs(g * xhat), axis=-1, keepdims=True)),
            "dweight": np.sum(dy * xhat, axis=rows), "dweight_scale": np.sum(np.abs(dy * xhat), axis=rows)}


def assert_close_to_reference(what: str, got: torch.Tensor, want: np.ndarray, scale: np.ndarray, dtype: str,
                              terms: int) -> None:
    u_out, u_acc = UNIT_ROUNDOFF[dtype], UNIT_ROUNDOFF["float64" if dtype == "float64" else "float32"]
    assert got.dtype == getattr(torch, dtype) and tuple(got.shape) == want.shape, what
    got = got.double().numpy()
    computing = (16 + 2 * math.sqrt(terms)) * u_acc * scale
    bound = 2 * u_out * (np.abs(want) + computing) + computing + TINY[dtype]
    error = np.abs(got - want)
    worst = np.unravel_index(np.argmax(error / bound), want.shape)
    assert np.all(error <= bound), (f"{what}{list(worst)} = {got[worst]!r}, reference {want[worst]!r}, "
                                    f"bound {bound[worst]:.3g}; {int(np.sum(error > bound))} of {error.size} out")


def rms_inputs(shape, dtype: str, weight: bool, seed: int = 0, offset: float = 0.5):
    """x (its row 0 all zeros: rstd = 1/sqrt(eps)), weight and dy in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + offset
    x.view(-1, shape[-1])[0] = 0
    w = torch.randn(shape[-1:], generator=gen, dtype=torch.float64) if weight else None
    dy = torch.randn(shape, generator=gen, dtype=torch.float64) + 0.5
    cast = lambda t: None if t is None else t.to(getattr(torch, dtype))
    return cast(x), cast(w), cast(dy)


def check_rms(x: torch.Tensor, w: torch.Tensor | None, dy: torch.Tensor, eps: float | None = None):
    """The kernels' y, dx, dweight (and the saved rstd) against :func:`rms_reference`; returns them."""
    dtype = str(x.dtype).removeprefix("torch.")
    n = x.shape[-1]
    y, rstd = launch.rms_forward(x, (n,), w, eps)
    dx, dw = launch.rms_backward(dy, x, (n,), w, rstd)
    host = lambda t: None if t is None else t.double().numpy()
    ref = rms_reference(host(x), host(w), host(dy), launch.rms_eps(eps, x.dtype))
    assert rstd.dtype == launch.statistics_dtype(x.dtype) and rstd.shape == (x.numel() // n,)
    assert_close_to_reference("y", y, ref["y"], ref["y_scale"], dtype, n)
    assert_close_to_reference("dx", dx, ref["dx"], ref["dx_scale"], dtype, n)
    if w is None:
        assert dw is None
    else:
        assert_close_to_reference("dweight", dw, ref["dweight"], ref["dweight_scale"], dtype, x.numel() // n + n)
    return y, dx, dw


#: (shape, dtypes): each path of the kernels; the interpreter runs a program per loop step, so
#: the longest rows take few of them (and the slowest dtype pair once)
RMS_SHAPES = [((5, 1), ("float32", "float16", "bfloat16")),  # N = 1: y = sign(x)*w, dx nearly cancels
              ((37, 1001), ("float32", "float16", "bfloat16")),  # odd N: rows in registers, padded lanes
              ((3, 5, 64), ("float32", "float16", "bfloat16")),  # several leading dims, many rows per program
              ((3, 20000), ("float32", "bfloat16")),  # looped forward and backward, a ragged last chunk
              ((2, 65536), ("float32", "bfloat16"))]  # the longest rows: 16 forward, 8 backward chunks


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize("shape,dtype", [(shape, d) for shape, dtypes in RMS_SHAPES for d in dtypes], ids=str)
def test_rms_norm_against_float64_numpy(shape, dtype, weight):
    check_rms(*rms_inputs(shape, dtype, weight))


@pytest.mark.parametrize("shape", [(64, 100), (4, 9000)], ids=str)
def test_rms_norm_float64(shape):
    """fp64 statistics and eps (2**-52 by default: an fp32 eps would be 2**29 times larger)."""
    check_rms(*rms_inputs(shape, "float64", True))
    check_rms(*rms_inputs(shape, "float64", True), eps=1e-300)


def test_rms_norm_strided_inputs():
    """Rows read through their stride and offset (no copy), a stride-0 broadcast dy, a transposed
    x (copied): each equal to the kernels on the contiguous copy, and to the reference."""
    for dtype in ("float32", "bfloat16"):
        base, w, dy_full = rms_inputs((9, 1030), dtype, True)
        x = base[::2, 3:1027]  # row stride 2060, offset 3
        dy = dy_full[1, 3:1027].expand(x.shape)  # stride 0
        assert launch.rows_view(x, 1024).data_ptr() == x.data_ptr()
        got = check_rms(x, w[3:1027], dy)
        again = check_rms(x.contiguous(), w[3:1027].contiguous(), dy.contiguous())
        for a, b in zip(got, again):
            assert torch.equal(a, b)
        xt = base[:, :9].T  # (9, 9): a strided last dim, copied by rows_view
        check_rms(xt, None, dy_full[:, :9])


@pytest.mark.parametrize("shape", [(4099, 33), (3, 20000)], ids=str)
def test_rms_dweight_bit_identical(shape):
    """Persistent programs and the fixed-order reduction (rows in registers, and looped)."""
    x, w, dy = rms_inputs(shape, "bfloat16", True)
    first, again = (check_rms(x, w, dy)[2] for _ in range(2))
    assert same_bits(first.view(torch.int16).numpy(), again.view(torch.int16).numpy())


def test_rms_eps_none_is_the_accumulation_dtypes_machine_epsilon():
    """torch's default (normbench.core.dtypes.default_rms_eps): float32's eps for half and float32 x,
    float64's for float64; tiny rows make it visible."""
    from normbench.core.dtypes import default_rms_eps

    for dtype, eps in (("float32", 2.0**-23), ("bfloat16", 2.0**-23), ("float64", 2.0**-52)):
        assert default_rms_eps(dtype) == eps == launch.rms_eps(None, getattr(torch, dtype))
        x = (torch.randn(4, 16, generator=torch.Generator().manual_seed(3)) * 1e-4).to(getattr(torch, dtype))
        y, rstd = launch.rms_forward(x, (16,))
        y_eps, rstd_eps = launch.rms_forward(x, (16,), None, eps)
        assert torch.equal(y, y_eps) and torch.equal(rstd, rstd_eps)
        assert not torch.equal(rstd, launch.rms_forward(x, (16,), None, eps * 4)[1])


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no-weight"])
def test_rms_gradcheck_float64(weight):
    x = torch.randn(3, 2, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    w = torch.randn(2, 7, dtype=torch.float64).requires_grad_() if weight else None
    fn = (lambda x_, w_: rms_norm(x_, (2, 7), w_, 1e-5)) if weight else (lambda x_: rms_norm(x_, (2, 7), None, 1e-5))
    assert torch.autograd.gradcheck(fn, (x, w) if weight else (x,), fast_mode=True)


@pytest.mark.parametrize("eps", [None, 1e-6], ids=str)
def test_rms_matches_torch_rms_norm(eps):
    """Values and gradients agree with torch.nn.functional.rms_norm (eps None: its default)."""
    x = (torch.randn(65, 257, generator=torch.Generator().manual_seed(0)) + 1).to(torch.bfloat16)
    w = torch.randn(257, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ours = [t.clone().requires_grad_() for t in (x, w)]
    ref = [t.double().requires_grad_() for t in (x, w)]
    y = rms_norm(ours[0], (257,), ours[1], eps)
    ref_eps = eps if eps is not None else torch.finfo(torch.float32).eps  # torch's default for bf16 x
    y_ref = torch.nn.functional.rms_norm(ref[0], (257,), ref[1], ref_eps)
    (y.float() * torch.arange(257)).sum().backward()  # a stride-0 dy times a column ramp
    (y_ref * torch.arange(257)).sum().backward()
    torch.testing.assert_close(y.double(), y_ref, atol=0.05, rtol=0.02)
    for mine, theirs in zip(ours, ref):
        scale = theirs.grad.abs().max().item() + 1
        torch.testing.assert_close(mine.grad.double() / scale, theirs.grad / scale, atol=0.02, rtol=0.02)


def test_rms_layer_is_a_drop_in_torch_rms_norm():
    ref = torch.nn.RMSNorm((4, 6), eps=1e-3)
    torch.nn.init.normal_(ref.weight)
    ours = RMSNorm((4, 6), eps=1e-3)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 6)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    default = RMSNorm(6, elementwise_affine=False)  # eps None, no weight
    torch.testing.assert_close(default(x), torch.nn.RMSNorm(6, elementwise_affine=False)(x), atol=1e-6, rtol=1e-6)
    assert isinstance(ours, torch.nn.RMSNorm) and default.weight is None


def test_rms_only_the_gradients_asked_for_and_no_double_backward():
    x, w = torch.randn(5, 16), torch.randn(16).requires_grad_()
    rms_norm(x, (16,), w).sum().backward()
    assert w.grad is not None and x.grad is None
    x.requires_grad_()
    (dx,) = torch.autograd.grad(rms_norm(x, 16).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dx.sum().backward()


def test_rms_backend_methods(triton_backend):
    """The backend contract: rms_norm, its backward (through autograd), the backward prepared
    alone, one forward and one backward, warmup; the same bits every way."""
    from normbench.core.operations import NAMES

    assert tuple(triton_backend.operations) == NAMES  # every operation normbench knows
    x, w, dy = rms_inputs((6, 40), "float32", True)
    y = triton_backend.rms_norm(x, (40,), w, None)
    dx, dw = triton_backend.rms_norm_backward(dy, x, (40,), w, None)
    y_fb, (dx_fb, dw_fb) = triton_backend.forward_backward("rms_norm", (x, (40,), w, None), (dy,))
    prepared = triton_backend.prepare_backward("rms_norm", (x, (40,), w, None), (dy,))
    for a, b in zip((y, dx, dw, dx, dw), (y_fb, dx_fb, dw_fb, *prepared())):
        assert torch.equal(a, b)
    assert torch.equal(prepared()[0], dx)  # runs again: the graph is kept
    _, w_none, _ = rms_inputs((6, 40), "float32", False)
    assert triton_backend.rms_norm_backward(dy, x, (40,), w_none, 1e-6)[1] is None
    assert triton_backend.warmup("rms_norm", (x, (40,), w, None)) is None
    check_rms(x, w, dy)


def test_rms_empty_input_and_bad_input():
    x = torch.randn(0, 7, requires_grad=True)
    w = torch.randn(7, requires_grad=True)
    y = rms_norm(x, (7,), w)
    assert y.shape == (0, 7)
    y.sum().backward()
    assert x.grad.shape == (0, 7) and torch.equal(w.grad, torch.zeros(7))
    with pytest.raises(TypeError, match=r"x has dtype torch.int32; the Triton RMSNorm kernels support float16"):
        launch.rms_forward(torch.zeros(2, 3, dtype=torch.int32), (3,))
    with pytest.raises(ValueError, match=r"weight has shape \(2,\); it must have normalized_shape \(3,\)"):
        rms_norm(torch.zeros(2, 3), (3,), torch.zeros(2))
    with pytest.raises(ValueError, match=r"rstd must be the forward's saved statistics"):
        launch.rms_backward(torch.zeros(2, 3), torch.zeros(2, 3), (3,), None, torch.zeros(3))


# -- the residual add fused in: the same bodies with HAS_RESIDUAL and HAS_DRES ---------------------
#
# The suites judge the fused kernels against the float64 oracle (pytest suites --impl=triton -k add-). Here: what
# ties them to the plain kernels, bit for bit. The fused forward's statistics and y are the plain forward's on the
# residual_out it wrote; its dweight and dbias the plain backward's; residual_out is one rounding of the exact sum
# (under the interpreter, bfloat16 is stored by truncation: the backend's runtime_note, pinned here as the
# mechanism of the declared deviation in suites/known_deviations.txt).

#: (shape, x dtype, residual dtype): rows in registers, ragged looped rows, several leading dims, fp32 residual
FUSED_SHAPES = [((37, 1001), "float32", "float32"), ((3, 20000), "bfloat16", "bfloat16"),
                ((3, 5, 64), "float16", "float16"), ((9, 769), "bfloat16", "float32"), ((4, 100), "float64", "float64"),
                ((2, 65536), "float16", "float16")]


def _stored_sum(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """x + residual rounded once to the residual's dtype, as the kernels store it here: exactly (the float64 sum of
    two values of these dtypes is exact) and rounded to nearest, or under the interpreter for bfloat16 the fp32 sum
    truncated (what the interpreter's conversion does)."""
    exact = x.double() + residual.double()
    if residual.dtype != torch.bfloat16 or not MODE.interpreter:
        return exact.to(residual.dtype)
    bits = (x.float() + residual.float()).view(torch.int32)
    return (bits >> 16).to(torch.int16).view(torch.bfloat16)


def _fused_inputs(shape, dtype: str, residual_dtype: str, strided: bool = False):
    gen = torch.Generator().manual_seed(3)
    make = lambda *s: torch.randn(s, generator=gen, dtype=torch.float64)
    x = (make(*shape) * 2 + 3).to(getattr(torch, dtype))
    residual = (make(*shape[:-1], 2 * shape[-1])[..., ::2] if strided else make(*shape)).to(getattr(torch, residual_dtype))
    w, b = (make(shape[-1]).to(getattr(torch, dtype)) for _ in range(2))
    return x, residual, w, b


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided-residual"])
@pytest.mark.parametrize("shape,dtype,residual_dtype", FUSED_SHAPES, ids=str)
def test_fused_forward_is_the_plain_kernel_on_the_residual_out_it_stores(shape, dtype, residual_dtype, strided):
    x, residual, w, b = _fused_inputs(shape, dtype, residual_dtype, strided)
    n = shape[-1:]
    y, residual_out, mean, rstd = launch.add_forward(x, residual, n, w, b, 1e-5)
    assert residual_out.dtype == residual.dtype and y.dtype == x.dtype and residual_out.is_contiguous()
    bits = lambda t: t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    assert torch.equal(bits(residual_out), bits(_stored_sum(x, residual)))
    y_plain, mean_plain, rstd_plain = launch.forward(residual_out, n, w, b, 1e-5)
    assert torch.equal(mean, mean_plain) and torch.equal(rstd, rstd_plain)
    y_rms, residual_out_rms, rstd_rms = launch.add_rms_forward(x, residual, n, w)
    assert torch.equal(residual_out_rms, residual_out)
    y_rms_plain, rstd_rms_plain = launch.rms_forward(residual_out, n, w, launch.rms_eps(None, x.dtype))
    assert torch.equal(rstd_rms, rstd_rms_plain)
    if residual.dtype == x.dtype:  # else the plain kernel writes y in the residual's dtype
        assert torch.equal(y, y_plain) and torch.equal(y_rms, y_rms_plain)


@pytest.mark.parametrize("shape,dtype,residual_dtype", FUSED_SHAPES[:4], ids=str)
def test_fused_backward_adds_dresidual_out_and_sums_the_plain_parameter_gradients(shape, dtype, residual_dtype):
    """dweight and dbias bit for bit the plain backward's on residual_out; dsum = dresidual_out + dx, rounded once
    (so within one rounding of the plain dx, itself rounded, plus dresidual_out); the autograd function hands dsum to
    x and to the residual in their own dtypes."""
    x, residual, w, b = _fused_inputs(shape, dtype, residual_dtype)
    n = shape[-1:]
    gen = torch.Generator().manual_seed(4)
    dy = torch.randn(shape, generator=gen).to(x.dtype)
    dres = torch.randn(shape, generator=gen).to(residual.dtype)
    _, residual_out, mean, rstd = launch.add_forward(x, residual, n, w, b, 1e-5)
    dsum, dw, db = launch.add_backward(dy, dres, residual_out, n, w, b, mean, rstd)
    dx, dw_plain, db_plain = launch.backward(dy.to(residual_out.dtype), residual_out, n, w, b, mean, rstd)
    assert torch.equal(dw, dw_plain) and torch.equal(db, db_plain) and dsum.dtype == residual.dtype
    ulp = torch.finfo(residual.dtype).eps
    scale = dx.double().abs() + dres.double().abs()
    assert torch.all((dsum.double() - (dx.double() + dres.double())).abs() <= 2 * ulp * scale + 1e-30)
    _, _, rstd_rms = launch.add_rms_forward(x, residual, n, w)
    dsum_rms, dw_rms = launch.add_rms_backward(dy, dres, residual_out, n, w, rstd_rms)
    assert torch.equal(dw_rms, launch.rms_backward(dy.to(residual_out.dtype), residual_out, n, w, rstd_rms)[1])
    leaves = [t.detach().requires_grad_() for t in (x, residual, w, b)]
    y, out = AddLayerNormFunction.apply(*leaves[:2], n, *leaves[2:], 1e-5)
    torch.autograd.backward((y, out), (dy, dres))
    assert leaves[0].grad.dtype == x.dtype and leaves[1].grad.dtype == residual.dtype
    assert torch.equal(leaves[1].grad, dsum) and torch.equal(leaves[0].grad, dsum.to(x.dtype))
    assert torch.equal(leaves[2].grad, dw) and torch.equal(leaves[3].grad, db)


def test_fused_backend_methods_and_bad_input(triton_backend):
    """The backend contract for the fused operations (the backward through autograd, warmup) and the
    wrappers' messages for a residual or dresidual_out that does not fit."""
    x, residual, w, b = _fused_inputs((6, 40), "float32", "float32")
    y, residual_out = triton_backend.add_layer_norm(x, residual, (40,), w, b, 1e-5)
    dy, dres = torch.randn(6, 40), torch.randn(6, 40)
    dsum, dw, db = triton_backend.add_layer_norm_backward(dy, dres, residual_out, (40,), w, b, 1e-5)
    _, _, mean, rstd = launch.add_forward(x, residual, (40,), w, b, 1e-5)
    for a, e in zip((dsum, dw, db), launch.add_backward(dy, dres, residual_out, (40,), w, b, mean, rstd)):
        assert torch.equal(a, e)
    assert triton_backend.warmup("add_rms_norm", (x, residual, (40,), w, None)) is None
    y_rms, out_rms = add_rms_norm(x, residual, 40, w)
    assert torch.equal(out_rms, residual_out) and torch.equal(y_rms, triton_backend.add_rms_norm(x, residual, 40, w,
                                                                                              None)[0])
    with pytest.raises(ValueError, match=r"residual has shape \(6, 41\); it must have x's shape \(6, 40\)"):
        launch.add_forward(x, torch.zeros(6, 41), (40,))
    with pytest.raises(ValueError, match=r"dresidual_out has shape \(6,\); it must have residual_out's shape"):
        launch.add_rms_backward(dy, torch.zeros(6), residual_out, (40,), None, rstd)
    with pytest.raises(TypeError, match=r"residual has dtype torch.int64; the Triton add \+ LayerNorm kernels"):
        add_layer_norm(x, torch.zeros(6, 40, dtype=torch.int64), (40,))


# -- the output quantized with a static scale: the same bodies with QUANT ---------------------
#
# The suites judge the codes against the float64 oracle within the error model's window (pytest suites --impl=triton
# -k "q- and not dq-"). Here: the quantizer itself bit for bit against normbench.core.quantized on the values that
# break one (every code, every midpoint and its float32 neighbours, beyond the maximum, NaN, Inf, -0, subnormal
# float32), and what ties the quantized kernels to the plain ones: the codes of the very fp32 y the plain kernel
# stores, and a fused kernel's codes the plain quantized kernel's on the residual_out it stored.


def _quantizer_probes(fmt) -> np.ndarray:
    """float32 values at and around every rounding decision of ``fmt``, and 20000 random magnitudes over 18 decades."""
    exact = fmt._positive if not fmt.integer else np.arange(0, 129, dtype=np.float64)
    values = np.concatenate([exact, (exact[1:] + exact[:-1]) / 2, fmt.max * np.array([1.0001, 1.5, 2, 1e6])])
    v32 = values.astype(np.float32)
    near = np.concatenate([v32, np.nextafter(v32, np.float32(np.inf)), np.nextafter(v32, np.float32(0))])
    rng = np.random.default_rng(0)
    spread = (rng.standard_normal(20000) * 10.0 ** rng.uniform(-12, 6, 20000)).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, 1.0625, 464, 500, -0.001, 127.5, 126.5, -128.5],
                       np.float32)
    return np.concatenate([near, -near, spread, special]).astype(np.float32)


@triton.jit
def _quantize_probe(V, Q, n, QUANT: tl.constexpr, BLOCK: tl.constexpr):
    """forward_kernels.quantize on n fp32 values: their codes."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    codes = forward_kernels.quantize(tl.load(V + offsets, mask=mask, other=0.0), QUANT)
    tl.store(Q + offsets, codes.to(Q.dtype.element_ty), mask=mask)


@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "float8_e5m2", "int8"])
def test_the_kernels_quantizer_is_the_oracles_bit_for_bit(qdtype):
    """forward_kernels.quantize: saturate, round to nearest even, NaN kept (int8: not judged), sign of zero kept."""
    from normbench.core.quantized import qformat

    fmt = qformat(qdtype)
    v = _quantizer_probes(fmt)
    device = torch.device("cpu" if MODE.interpreter else "cuda")
    out = torch.empty(v.size, dtype=torch.int8 if fmt.integer else torch.uint8, device=device)
    with np.errstate(all="ignore"):
        _quantize_probe[(triton.cdiv(v.size, 1024),)](torch.from_numpy(v).to(device), out, v.size,
                                                      QUANT=forward_kernels.QUANT_FORMATS[qdtype], BLOCK=1024)
    got = out.cpu().numpy().view(np.uint8)
    expected = fmt.quantize(v.astype(np.float64))
    nan = np.isnan(v)
    wrong = np.flatnonzero((got != expected.view(np.uint8)) & ~nan)
    assert wrong.size == 0, [(float(v[i]), int(got[i]), int(expected.view(np.uint8)[i])) for i in wrong[:8]]
    if not fmt.integer:  # NaN stays NaN (any NaN code)
        assert np.isnan(got[nan].view(fmt.host).astype(np.float64)).all()


#: (shape, x dtype): rows in registers, ragged looped rows (several chunks), fp64 statistics
QUANT_SHAPES = [((37, 1001), "float32"), ((3, 20000), "float32"), ((4, 100), "float64")]


@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "float8_e5m2", "int8"])
@pytest.mark.parametrize("shape,dtype", QUANT_SHAPES, ids=str)
def test_quantized_kernels_store_the_codes_of_the_plain_kernels_y(shape, dtype, qdtype):
    """For fp32 and fp64 x the plain kernel stores y exactly as the quantized kernel holds it before quantizing, so
    the codes are bit for bit ``Q(y * rn(1 / scale))`` of that y (fp32; fp64 then rounded once to fp32), for both
    normalizations, plain and fused (whose residual_out is the plain fused kernel's)."""
    from normbench.core.quantized import qformat
    from normbench.kit import torch as torch_arrays

    fmt = qformat(qdtype)
    x, residual, w, b = _fused_inputs(shape, dtype, dtype)
    x = x * 40  # y / scale spans the saturated codes too
    n, scale = shape[-1:], 0.0625 * 3  # a scale whose reciprocal rounds
    for centered in (True, False):
        bias = b if centered else None
        y_plain = launch._forward(x, n, w, bias, 1e-5, centered)[0]
        y_fused, out_fused = launch._forward(x, n, w, bias, 1e-5, centered, residual=residual)[::3]
        for res, y in ((None, y_plain), (residual, y_fused)):
            q, out = launch.quant_forward(x, res, n, w, bias, 1e-5, scale, qdtype, centered)
            assert q.dtype == getattr(torch, qdtype) and q.shape == x.shape
            if dtype == "float64":
                v = (y.cpu().numpy() * (1.0 / scale)).astype(np.float32)
            else:
                v = y.cpu().numpy() * np.float32(1.0 / np.float32(scale))
            expected = fmt.quantize(v.astype(np.float64))
            assert np.array_equal(torch_arrays.to_host(torch, q).view(np.uint8), expected.view(np.uint8))
            assert (out is None) == (res is None) and (out is None or torch.equal(out, out_fused))


@pytest.mark.parametrize("scale_ub", [None, 2.0], ids=["unbounded", "ub2"])
@pytest.mark.parametrize("qdtype", ["float8_e4m3fn", "float8_e5m2", "int8"])
@pytest.mark.parametrize("shape,dtype", QUANT_SHAPES, ids=str)
def test_dynamic_quantized_kernels_store_the_scales_and_codes_of_the_plain_kernels_y(shape, dtype, qdtype, scale_ub):
    """Per row, bit for bit from the very y the plain kernel stores (fp32 and fp64 x): the scale
    ``fp32(max(min(absmax, scale_ub) / qmax, 1 / (qmax * 512)))`` (the division correctly rounded; an all-zero row
    gets the floor), and the codes of ``y * rn(1 / scale)``; rows and looped, both normalizations, plain and fused."""
    from normbench.core.quantized import qformat, qmax
    from normbench.kit import torch as torch_arrays

    fmt = qformat(qdtype)
    x, residual, w, b = _fused_inputs(shape, dtype, dtype)
    x[0] = 0  # an all-zero row (RMSNorm's y is 0 there: the floor)
    residual[0] = 0
    acc = np.float64 if dtype == "float64" else np.float32
    top, bound = qmax(qdtype), np.inf if scale_ub is None else scale_ub
    for centered in (True, False):
        bias = b if centered else None
        y_plain = launch._forward(x, shape[-1:], w, bias, 1e-5, centered)[0]
        y_fused, out_fused = launch._forward(x, shape[-1:], w, bias, 1e-5, centered, residual=residual)[::3]
        for res, y in ((None, y_plain), (residual, y_fused)):
            q, scales, out = launch.dynamic_quant_forward(x, res, shape[-1:], w, bias, 1e-5, qdtype, scale_ub, centered)
            yv = y.cpu().numpy().reshape(-1, shape[-1])
            absmax = np.abs(yv).max(axis=1)
            scale = np.maximum(np.minimum(absmax, acc(bound)) / acc(top), acc(1.0 / (top * 512.0))).astype(np.float32)
            assert np.array_equal(scales.cpu().numpy().reshape(-1), scale), (centered, res is None)
            inverse = (acc(1.0) / scale.astype(acc))[:, None]
            v = (yv * inverse).astype(np.float32)
            expected = fmt.quantize(v.astype(np.float64)).reshape(x.shape)
            assert np.array_equal(torch_arrays.to_host(torch, q).view(np.uint8), expected.view(np.uint8))
            assert (out is None) == (res is None) and (out is None or torch.equal(out, out_fused))
            if not centered:  # codes 0 (-0 where y is -0: x * a negative weight)
                zero_row = torch_arrays.to_host(torch, q)[0].astype(np.float64)
                assert scales[0] == np.float32(1.0 / (top * 512.0)) and not zero_row.any()


@pytest.mark.parametrize("shape,dtype,residual_dtype", FUSED_SHAPES[:4], ids=str)
def test_fused_quantized_kernels_are_the_plain_quantized_kernel_on_the_residual_out_they_store(shape, dtype,
                                                                                              residual_dtype):
    """Every dtype (bfloat16 included, whose residual_out the interpreter truncates): the codes are the plain
    quantized kernel's on the stored residual_out, bit for bit."""
    x, residual, w, b = _fused_inputs(shape, dtype, residual_dtype)
    n = shape[-1:]
    for centered, qdtype in ((True, "float8_e4m3fn"), (False, "float8_e5m2"), (False, "int8")):
        bias = b if centered else None
        q, out = launch.quant_forward(x, residual, n, w, bias, 1e-5, 0.01, qdtype, centered)
        assert torch.equal(out, _stored_sum(x, residual))
        q_plain, none = launch.quant_forward(out, None, n, w, bias, 1e-5, 0.01, qdtype, centered)
        assert none is None and torch.equal(q.view(torch.int8), q_plain.view(torch.int8))


def test_quantized_backend_methods_and_bad_input(triton_backend):
    """The backend's quantized operations, static and dynamic, warmup (a forward alone: no backward) and the messages
    for a format the kernels do not store and a scale (or scale bound) that is not a positive number."""
    x, residual, w, b = _fused_inputs((6, 40), "float32", "float32")
    q = triton_backend.rms_norm_quant(x, (40,), w, None, 0.5, "int8")
    q_ln = triton_backend.layer_norm_quant(x, (40,), w, b, 1e-5, 0.5, "float8_e4m3fn")
    q_add, out = triton_backend.add_rms_norm_quant(x, residual, (40,), w, None, 0.5, "int8")
    q_add_ln, out_ln = triton_backend.add_layer_norm_quant(x, residual, (40,), w, b, 1e-5, 0.5, "float8_e5m2")
    assert q.dtype == torch.int8 and q_ln.dtype == torch.float8_e4m3fn and q_add_ln.dtype == torch.float8_e5m2
    assert torch.equal(out, out_ln) and torch.equal(q_add, launch.quant_forward(out, None, (40,), w, None, None, 0.5,
                                                                                "int8", False)[0])
    assert triton_backend.warmup("add_rms_norm_quant", (x, residual, (40,), w, None, 0.5, "int8")) is None
    q_dyn, scales = triton_backend.rms_norm_dynamic_quant(x, (40,), w, None, "int8", None)
    q_dyn_add, scales_add, out_dyn = triton_backend.add_layer_norm_dynamic_quant(x, residual, (40,), w, b, 1e-5,
                                                                               "float8_e5m2", 1.0)
    assert scales.shape == (6,) and scales.dtype == torch.float32 and q_dyn.dtype == torch.int8
    assert q_dyn_add.dtype == torch.float8_e5m2 and torch.equal(out_dyn, out) and bool((scales_add <= 1 / 57344).all())
    assert len(triton_backend.layer_norm_dynamic_quant(x, (40,), w, b, 1e-5, "int8", None)) == 2
    assert len(triton_backend.add_rms_norm_dynamic_quant(x, residual, (40,), w, None, "int8", None)) == 3
    with pytest.raises(ValueError, match=r"qdtype 'float8_e4m3fnuz' is not one the Triton kernels store; expected "
                                         r"one of float8_e4m3fn, float8_e5m2, int8"):
        launch.quant_forward(x, None, (40,), w, None, None, 0.5, "float8_e4m3fnuz", False)
    for scale in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale must be a finite positive number"):
            launch.quant_forward(x, None, (40,), w, None, None, scale, "int8", False)
    with pytest.raises(ValueError, match="scale_ub must be a positive number"):
        launch.dynamic_quant_forward(x, None, (40,), w, None, None, "int8", 0.0, False)


def test_quantized_kernels_compile_for_a_gpu_and_keep_their_rounding():
    """Compiled for sm_90 (rows in registers and looped; each format once, a dynamic kernel too): the
    round-to-nearest-even step, adding and subtracting 2**23 (1.5 * 2**23 for int8), survives the compiler: as many
    subtractions as additions (an fma with the exact power-of-two product is still one rounding), and no approximate
    division."""
    program = ("from normbench.impls.triton import compile_check as cc\n"
               "for norm, q, c in (('add_rms_norm_quant', 'float8_e4m3fn', '4B000000'),\n"
               "                   ('layer_norm_quant', 'int8', '4B400000'),\n"
               "                   ('add_rms_norm_dynamic_quant', 'float8_e5m2', '4B000000')):\n"
               "    for n in (1000, 65536):\n"
               "        for v in cc.variants(n, 'bfloat16', 'bfloat16', next(iter(cc.affines(norm))), norm=norm, qdtype=q):\n"
               "            ptx = cc.compile_variant(v, 90).asm['ptx']\n"
               "            print(v.kernel, n, q, ptx.count('0f' + c), ptx.count('0fC' + c[1:]), ptx.count('div.full.f32'))\n")
    counts = compiled_counts(program)
    assert len(counts) == 6, counts
    assert all(int(add) > 0 and add == sub and full == "0" for *_, add, sub, full in counts), counts
    assert {(k, n) for k, n, *_ in counts} == {(f"{norm}_forward_{path}", n) for path, n in (("rows", "1000"),
                                                                                           ("looped", "65536"))
                                             for norm in ("add_rms_norm_quant", "layer_norm_quant",
                                                          "add_rms_norm_dynamic_quant")}


# -- compiled or interpreted: decided before triton is imported ------------------------------


def _run_python(program: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env={**environ, **env})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_triton_imported_first_is_a_clear_error():
    out = _run_python("import triton\nfrom normbench.impls.triton import TritonBackend\nTritonBackend()")
    assert out.returncode != 0
    assert "triton was imported before TRITON_INTERPRET=1 was set; set TRITON_INTERPRET=1" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_compiled_mode_without_cuda_is_unavailable_with_the_reason():
    out = _run_python("from normbench import get_registry\nget_registry().create('triton')", TRITON_INTERPRET="0")
    assert out.returncode != 0
    assert "set to compile (TRITON_INTERPRET=0 is set) but no CUDA device is present" in out.stderr
