"""The MLX plugin (examples/normbench-mlx), installed: its registration, its light import, one forward
against NumPy, and its findings, so they can never silently disappear: on the CPU, mlx.core.fast's
float64 is computed in float32, with a float32 bias and no weight a half x rounds the bias and sums
its gradient in the half dtype, and LayerNorm's backward on an empty batch is refused (MLX's sum over an
empty axis can hang). Also MLX's half-precision forward, bit for bit: xhat, w*xhat and +b each rounded
to the half dtype. Skipped where the plugin or mlx is not installed.
"""

import importlib.util
import re

import pytest

if importlib.util.find_spec("normbench_mlx") is None or importlib.util.find_spec("mlx") is None:
    pytest.skip("the MLX plugin is not installed: pip install 'mlx[cpu]' -e examples/normbench-mlx",
                allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance, oracle  # noqa: E402
from normbench.core import cases, deviations
from normbench.kit.testing import imported_frameworks, run_doctests  # noqa: E402


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


def case(case_id: str, backward: bool = False):
    return next(c for c in (cases.BACKWARD_CASES if backward else cases.FORWARD_CASES) if c.id == case_id)


def test_the_backend_comes_from_the_plugin_distribution():
    registry = get_registry()
    plugin = registry.plugin("mlx")
    assert (plugin.distribution, plugin.target) == ("normbench-mlx", "normbench_mlx.backends:MlxFast")
    assert registry.load_class("mlx").name == "mlx" and registry.availability("mlx")
    assert registry.load_class("mlx").operations == ("layer_norm", "rms_norm")
    assert not [p for p in registry.problems if p.distribution == "normbench-mlx"]


def test_importing_the_plugin_does_not_import_mlx():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_mlx.backends", ('mlx',)) == []


def test_the_docstring_example_runs():
    import normbench_mlx.backends

    result = run_doctests(normbench_mlx.backends)
    assert result.attempted >= 5 and result.failed == 0


def test_one_forward_agrees_with_numpy_over_two_normalized_dims():
    """MLX normalizes its last axis; hidden 8 x 16 goes through the backend's reshape, exactly."""
    b = get_registry().create("mlx")
    inputs = cases.make_inputs(case("float32-rows5-hidden8x16-offset3"), 0)
    y = b.to_numpy(b.layer_norm(b.asarray(inputs.x), (8, 16), b.asarray(inputs.weight), b.asarray(inputs.bias), 1e-5))
    ref = oracle.forward(inputs.x, (8, 16), inputs.weight, inputs.bias, 1e-5)
    assert y.shape == inputs.x.shape and np.abs(oracle.rows_view(y, (8, 16)) - ref.y).max() < 1e-4
    conformance.check_forward(b, cases.make_inputs(case("rms-float32-rows5-hidden6x129-offset3"), 0))


def test_float64_is_computed_in_float32_and_still_fails_strictly():
    b = get_registry().create("mlx")
    c = case("float64-rows5-hidden2-offset3")
    inputs = cases.make_inputs(c, 0)
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
        conformance.check_forward(b, inputs)
    assert ratio(str(info.value)) >= 1e5, str(info.value)
    y = b.to_numpy(b.layer_norm(b.asarray(inputs.x), (2,), *(b.asarray(p) for p in (inputs.weight, inputs.bias)), c.eps))
    assert y.dtype == np.float64
    error = np.abs(y - oracle.forward(inputs.x, (2,), inputs.weight, inputs.bias, c.eps).y).max()
    assert 1e-8 < error < 1e-5  # float32's precision (4.9e-7 here), not float64's (~1e-15)


def test_a_float32_bias_without_weight_gets_a_half_precision_gradient():
    b = get_registry().create("mlx")
    c = case("bfloat16-paramsfloat32-rows7-hidden100-offset3-biasonly", backward=True)
    with pytest.raises(conformance.ConformanceError, match=r"\): dbias\[") as info:
        conformance.check_backward(b, cases.make_inputs(c, 0), cases.make_dy(c, 0))
    assert ratio(str(info.value)) >= 100, str(info.value)


def test_each_finding_is_declared_and_only_for_its_failures():
    entries = deviations.from_backend(get_registry().load_class("mlx"))
    for test, message, declared in [
        ("test_forward[mlx-float64-rows5-hidden2-offset3]",
         "mlx float64-rows5-hidden2-offset3 (seed 0): y[1, 0] = 1, ...", True),
        ("test_forward[mlx-rms-float64-rows5-hidden2-offset3]",
         "mlx rms-float64-rows5-hidden2-offset3 (seed 0): y[1, 0] = 1, ...", True),
        ("test_backward[mlx-bfloat16-paramsfloat32-rows7-hidden100-offset3-biasonly]",
         "mlx bfloat16-paramsfloat32-rows7-hidden100-offset3-biasonly (seed 0): dbias[85] = 1, ...", True),
        ("test_forward[mlx-float32-rows8-hidden1000-normal]",
         "mlx float32-rows8-hidden1000-normal (seed 0): y[1, 0] = 1, ...", False),
        ("test_forward[mlx-bfloat16-rows8-hidden1000-normal]",
         "mlx bfloat16-rows8-hidden1000-normal (seed 0): y[1, 0] = 1, ...", False),  # the half forward is not declared
    ]:
        subject = deviations.Subject("mlx", "cpu", test, test.split("[mlx-")[1][:-1], "dist")
        assert bool(deviations.find(entries, subject, message, check_failure=True)) == declared, test


def test_an_empty_batch_backward_with_a_bias_is_refused_and_declared():
    """MLX's VJP sums dy over the 0 rows for dbias and can hang there (native code, out of reach of the
    suites' timeout): the backend raises instead; the declaration covers exactly that message."""
    from normbench_mlx.backends import MlxHangs

    b = get_registry().create("mlx")
    for case_id in ("float32-rows0-hidden33-offset3", "bfloat16-rows0-hidden33-offset3"):
        c = case(case_id, backward=True)
        inputs, dy = cases.make_inputs(c, 0), cases.make_dy(c, 0)
        with pytest.raises(MlxHangs, match="MLX hangs on this call"):
            b.layer_norm_backward(b.asarray(dy), b.asarray(inputs.x), (33,), b.asarray(inputs.weight),
                                  b.asarray(inputs.bias), c.eps)
    entries = deviations.from_backend(get_registry().load_class("mlx"))
    message = "MlxHangs: MLX hangs on this call (not made): ..."
    for test, failure, declared in [
        ("test_backward[mlx-float32-rows0-hidden33-offset3]", message, True),
        ("test_backward_identities[mlx-bfloat16-rows0-hidden33-offset3]", message, True),
        ("test_backward[mlx-float32-rows0-hidden33-offset3]", "mlx float32-rows0 (seed 0): dx[0, 0] = 1", False),
        ("test_backward[mlx-rms-float32-rows0-hidden33-offset3]", message, False),  # RMSNorm has no dbias
        ("test_backward[mlx-float32-rows5-hidden1000-offset3]", message, False),
    ]:
        subject = deviations.Subject("mlx", "cpu", test, test.split("[mlx-")[1][:-1], "dist")
        assert bool(deviations.find(entries, subject, failure, check_failure=False)) == declared, test
    # RMSNorm's backward on the empty batch is called (its dweight sums a computed, row-contiguous product)
    c = case("rms-float32-rows0-hidden33-offset3", backward=True)
    inputs, dy = cases.make_inputs(c, 0), cases.make_dy(c, 0)
    dx, dw = b.rms_norm_backward(b.asarray(dy), b.asarray(inputs.x), (33,), b.asarray(inputs.weight), None)
    assert dx.shape == (0, 33) and dw.shape == (33,)


def test_the_half_forward_rounds_xhat_then_w_xhat_then_the_bias_to_half():
    """What MLX's CPU fallback computes (mlx/fast.cpp layer_norm): float32 statistics (sequential sums,
    mean = sum*(1/N), rstd = 1/sqrt(var + eps)), xhat = (x - mean)*rstd cast to x's dtype, then the weight
    multiplied and the bias added in x's dtype, each op computed in float32 and rounded to nearest even:
    three roundings, reproduced here bit for bit. (normbench's correct variant 'coherence-xhat-rounded',
    tests/coherence_variants.py, is the same order.)"""
    import ml_dtypes

    b = get_registry().create("mlx")
    f32 = np.float32
    for case_id in ("bfloat16-rows5-hidden1024-offset3", "float16-rows5-hidden1024-offset3"):
        c = case(case_id)
        inputs = cases.make_inputs(c, 0)
        half = ml_dtypes.bfloat16 if c.dtype == "bfloat16" else np.float16
        y = b.to_numpy(b.layer_norm(b.asarray(inputs.x), (1024,), b.asarray(inputs.weight), b.asarray(inputs.bias),
                                    c.eps))
        x = inputs.x.astype(f32)
        total = np.zeros(x.shape[0], f32)
        for j in range(x.shape[1]):
            total = (total + x[:, j]).astype(f32)
        mean = (total * f32(1 / 1024))[:, None]
        xc = (x - mean).astype(f32)
        total = np.zeros(x.shape[0], f32)
        for j in range(x.shape[1]):
            total = (total + (xc[:, j] * xc[:, j]).astype(f32)).astype(f32)
        rstd = (f32(1) / np.sqrt((total * f32(1 / 1024) + f32(c.eps)).astype(f32)))[:, None]
        xhat = (xc * rstd).astype(f32).astype(half)
        wx = (xhat.astype(f32) * inputs.weight.astype(f32)).astype(half)
        model = (wx.astype(f32) + inputs.bias.astype(f32)).astype(half)
        assert np.array_equal(model.view(np.uint16), y.view(np.uint16)), case_id
