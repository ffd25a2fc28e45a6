"""The jax backend's own promises: warmup leaves nothing to compile (LayerNorm and RMSNorm),
float64 without touching JAX's global configuration, RMSNorm's eps=None as torch means it,
synchronize waits, list shows version and device."""

import importlib.metadata
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from normbench.impls.jax_xla import JaxBackend  # noqa: E402
from tests.plugins import ROOT  # noqa: E402


@pytest.fixture
def compiles():
    """The names of the compilation events JAX reports while the test runs."""
    events: list[str] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: events.append(name) if name.endswith("backend_compile_duration") else None)
    return events


@pytest.mark.parametrize("dtype, affine", [("float32", "wb"), ("bfloat16", "w"), ("float64", "none")])
def test_warmup_leaves_nothing_to_compile(compiles, dtype, affine):
    from normbench.core import cases

    b = JaxBackend()
    inputs = cases.make_inputs(cases.Case("t", (37, 3, 29), (3, 29), dtype, affine=affine), 0)
    x, w, bias = (None if a is None else b.asarray(a) for a in (inputs.x, inputs.weight, inputs.bias))
    dy = b.asarray(cases.make_dy(inputs.case, 0))
    b.warmup("layer_norm", (x, (3, 29), w, bias, 1e-5))
    assert compiles, "warmup compiled nothing (was it cached from elsewhere?)"
    done = len(compiles)
    for eps in (1e-5, 0.1):
        b.layer_norm(x, (3, 29), w, bias, eps)
        b.layer_norm_backward(dy, x, (3, 29), w, bias, eps)
        b.layer_norm_statistics(x, (3, 29), w, bias, eps)
    b.synchronize()
    assert compiles[done:] == [], "a call after warmup compiled"


@pytest.mark.parametrize("dtype, affine", [("bfloat16", "w"), ("float64", "none")])
def test_rms_warmup_leaves_nothing_to_compile(compiles, dtype, affine):
    from normbench.core import cases, operations

    b = JaxBackend()
    case = cases.Case("t", (37, 3, 29), (3, 29), dtype, affine=affine, norm="rms_norm")
    inputs = cases.make_inputs(case, 0)
    x, w = (None if a is None else b.asarray(a) for a in (inputs.x, inputs.weight))
    dy = b.asarray(cases.make_dy(case, 0))
    operations.RMS_NORM.warmup(b, (x, (3, 29), w, 1e-5))
    assert compiles, "warmup compiled nothing (was it cached from elsewhere?)"
    done = len(compiles)
    for eps in (1e-5, 0.1, None):  # None is resolved on the host to a number: no retrace either
        b.rms_norm(x, (3, 29), w, eps)
        b.rms_norm_backward(dy, x, (3, 29), w, eps)
    b.synchronize()
    assert compiles[done:] == [], "a call after warmup compiled"


@pytest.mark.parametrize("op", ["add_layer_norm", "add_rms_norm"])
def test_fused_warmup_leaves_nothing_to_compile_and_the_backward_adds_dresidual_out(compiles, op):
    """The fused operations (the composition in one jitted function): warmup compiles the forward and the backward
    on the residual_out it wrote; later calls, any eps, compile nothing; dsum is dresidual_out plus the
    normalization's dx (the plain backward's on residual_out, within a rounding)."""
    from normbench.core import cases, operations

    b = JaxBackend()
    operation = operations.of(op)
    case = cases.Case("t", (37, 64), (64,), "float32", norm=op, residual_dtype="float32")
    inputs = cases.make_inputs(case, 0)
    x, residual, w, bias = (None if a is None else b.asarray(a) for a in (inputs.x, inputs.residual, inputs.weight,
                                                                            inputs.bias))
    args = operation.arguments(x=x, residual=residual, normalized_shape=(64,), weight=w, bias=bias, eps=1e-5)
    operation.warmup(b, args)
    assert compiles, "warmup compiled nothing (was it cached from elsewhere?)"
    done = len(compiles)
    dy, dres = (b.asarray(cases.make_dy(case, 0)), b.asarray(cases.make_dresidual(case, 0)))
    for eps in (1e-5, 0.1):
        call = operation.arguments(x=x, residual=residual, normalized_shape=(64,), weight=w, bias=bias, eps=eps)
        y, out = operation.forward(b, call)
        grads = operation.backward(b, operation.backward_args_from(call, (y, out)), (dy, dres))
    b.synchronize()
    assert compiles[done:] == [], "a call after warmup compiled"
    plain = operation.normalization
    plain_grads = plain.backward(b, plain.arguments(x=out, normalized_shape=(64,), weight=w, bias=bias, eps=0.1), (dy,))
    dsum = np.asarray(grads[0], np.float64)
    expected = np.asarray(plain_grads[0], np.float64) + np.asarray(dres, np.float64)
    assert np.abs(dsum - expected).max() <= 4 * 2.0**-24 * np.abs(expected).max()


def test_rms_eps_none_is_the_default_of_the_computation_dtype():
    from normbench.core.dtypes import default_rms_eps

    b = JaxBackend()
    rows = np.full((2, 64), 1e-3, np.float32)  # rms 1e-3: eps 2**-23 (fp32's) against bfloat16's 2**-7 shows
    for dtype in (np.float32, np.float64):
        x = b.asarray(rows.astype(dtype))
        default = default_rms_eps("float64" if dtype == np.float64 else "float32")
        assert np.array_equal(b.to_numpy(b.rms_norm(x, (64,), None, None)), b.to_numpy(b.rms_norm(x, (64,), None, default)))
    import ml_dtypes

    y = b.to_numpy(b.rms_norm(b.asarray(rows.astype(ml_dtypes.bfloat16)), (64,), None, None)).astype(np.float64)
    assert np.allclose(y, 1 / np.sqrt(1 + 2.0**-23 / 1e-6), rtol=2.0**-8), y  # 0.945, as torch gives; not 0.0088


def test_rms_backward_returns_dx_and_dweight_only():
    b = JaxBackend()
    x = b.asarray(np.random.default_rng(0).standard_normal((4, 8)))  # float64
    w = b.asarray(np.ones(8))
    dx, dw = b.rms_norm_backward(x, x, (8,), w, None)
    assert dx.dtype == dw.dtype == np.float64 and dw.shape == (8,) and not jax.config.jax_enable_x64
    assert b.rms_norm_backward(x, x, (8,), None, 0.0)[1] is None
    y, (dx2, dw2) = b.forward_backward("rms_norm", (x, (8,), w, None), (x,))
    assert np.array_equal(np.asarray(dx), np.asarray(dx2)) and np.array_equal(np.asarray(dw), np.asarray(dw2))


def test_float64_without_changing_the_global_configuration():
    b = JaxBackend()
    x = b.asarray(np.random.default_rng(0).standard_normal((4, 8)))
    y = b.layer_norm(x, (8,), None, None, 1e-5)
    dx, _, _ = b.layer_norm_backward(x, x, (8,), None, None, 1e-5)
    assert x.dtype == y.dtype == dx.dtype == np.float64
    assert not jax.config.jax_enable_x64
    assert jax.numpy.asarray(np.zeros(2)).dtype == np.float32  # everyone else still gets JAX's default


def test_without_scoped_x64_float64_is_left_out(monkeypatch):
    monkeypatch.delattr(jax, "enable_x64", raising=False)
    monkeypatch.delattr(jax.experimental, "enable_x64", raising=False)
    monkeypatch.setitem(sys.modules, "jax.experimental.enable_x64", None)
    assert "float64" not in JaxBackend().dtypes


def test_synchronize_waits_for_every_result():
    b = JaxBackend()
    x = b.asarray(np.ones((256, 64), np.float32))
    outs = [b.layer_norm(x, (64,), None, None, 1e-5) for _ in range(5)]
    b.synchronize()
    assert all(o.is_ready() for o in outs) and not b._pending


@pytest.mark.e2e
def test_list_shows_version_and_device():
    out = subprocess.run([sys.executable, "-m", "normbench", "list", "--probe"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    row = next(line for line in out.stdout.splitlines() if line.startswith("jax "))
    assert importlib.metadata.version("jax") in row
    assert f"  {JaxBackend().device}  " in row  # "cpu" (as torch and numpy say it), or "cuda:0 (<model>)"
