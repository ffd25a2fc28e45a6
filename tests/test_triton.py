"""The Triton backend's own tests: backward against the oracle, determinism, the
autograd function and layer against torch, bad input, and the plain-Python heuristics.

They run where triton and torch are installed (``tox -e torch``): under the
Triton interpreter on CPU, or compiled on a CUDA device.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from normbench import cases
from normbench.check import error_model, oracle
from normbench.check.conformance import ConformanceError, same_bits, worst_violation
from normbench.dtypes import host_dtype

if importlib.util.find_spec("triton") is None:  # never import triton before the mode is chosen
    pytest.skip("triton is not installed (pip install 'normbench[triton]')", allow_module_level=True)
torch = pytest.importorskip("torch")

from normbench.impls.triton import LayerNorm, launch, layer_norm  # noqa: E402
from normbench.impls.triton.backend import TritonBackend  # noqa: E402
from normbench.impls.triton.runtime import ensure_mode  # noqa: E402

MODE = ensure_mode()


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
    assert triton_backend.warmup(x, (16,), None, triton_backend.asarray(np.zeros(16, np.float32)), 1e-5) is None


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
    for sm_90 (row in registers and looped, half and double) in a fresh process."""
    from normbench.impls.triton import compile_check

    out = subprocess.run([sys.executable, "-m", "normbench.impls.triton.compile_check", "--arch", "90",
                          "--hidden", "1,1000,65536", "--dtypes", "bfloat16,float64"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    pairs = [("bfloat16", "bfloat16"), ("float64", "float64"), ("bfloat16", "float32")]
    runs = [(*pair, "wb") for pair in pairs] + [(*pairs[0], a) for a in compile_check.AFFINES if a != "wb"]
    expected = sum(len(compile_check.variants(n, *run)) for n in (1, 1000, 65536) for run in runs)
    assert out.stdout.count("ok ") == expected and "FAIL" not in out.stdout


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
