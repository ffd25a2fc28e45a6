"""The MLX plugin (examples/normbench-mlx), installed: its registration, its light import, one forward
against NumPy, and its findings, so they can never silently disappear: on the CPU, mlx.core.fast's
float64 is computed in float32, and with a float32 bias and no weight a half x rounds the bias and sums
its gradient in the half dtype. Skipped where the plugin or mlx is not installed.
"""

import importlib.util
import re
import subprocess
import sys

import pytest

if importlib.util.find_spec("normbench_mlx") is None or importlib.util.find_spec("mlx") is None:
    pytest.skip("the MLX plugin is not installed: pip install 'mlx[cpu]' -e examples/normbench-mlx",
                allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import cases, deviations, get_registry  # noqa: E402
from normbench.check import conformance, oracle  # noqa: E402


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
    assert registry.load_class("mlx").normalizations == ("layer_norm", "rms_norm")
    assert not [p for p in registry.problems if p.distribution == "normbench-mlx"]


def test_importing_the_plugin_does_not_import_mlx():
    check = "import normbench_mlx.backends, sys; print('mlx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr


def test_the_docstring_example_runs():
    import doctest

    import normbench_mlx.backends

    result = doctest.testmod(normbench_mlx.backends)
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
