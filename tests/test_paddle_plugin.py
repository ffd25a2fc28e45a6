"""The Paddle plugin (examples/normbench-paddle), installed: its registration, its light import, one
forward against NumPy, and its findings, so they can never silently disappear: float64 LayerNorm computes
with eps rounded to float32 (the op's epsilon is a C++ float), and the row mean's sequential float32 sum
shows on long constant rows. Skipped where the plugin or paddle is not installed.
"""

import importlib.util
import re

import pytest

if importlib.util.find_spec("normbench_paddle") is None or importlib.util.find_spec("paddle") is None:
    pytest.skip("the Paddle plugin is not installed: pip install paddlepaddle -e examples/normbench-paddle",
                allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance, oracle  # noqa: E402
from normbench.core import cases
from normbench.kit.testing import imported_frameworks, run_doctests, run_suite_tests  # noqa: E402

#: seed 0 failures, each far out of bound (ratio to the bound, at least)
FINDINGS = {
    "test_forward[paddle-float64-rows8-hidden64-sigmasqrteps-eps0.001]": 1e6,   # eps as float32
    "test_backward[paddle-float64-rows8-hidden64-constant]": 1e6,              # eps as float32
    "test_forward[paddle-float64-rows5-hidden2-offset3]": 50.0,                # eps as float32
    "test_backward[paddle-float32-rows2-hidden65536-constant]": 3.0,           # the sequential mean
}


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


def case(case_id: str, backward: bool = False):
    return next(c for c in (cases.BACKWARD_CASES if backward else cases.FORWARD_CASES) if c.id == case_id)


def test_both_backends_come_from_the_plugin_distribution():
    registry = get_registry()
    for name, cls in (("paddle", "PaddleLayerNorm"), ("paddle-fused-rms", "PaddleFusedRmsNorm")):
        plugin = registry.plugin(name)
        assert (plugin.distribution, plugin.target) == ("normbench-paddle", f"normbench_paddle.backends:{cls}")
        assert registry.load_class(name).name == name and registry.availability(name)
    assert not [p for p in registry.problems if p.distribution == "normbench-paddle"]
    assert registry.load_class("paddle").dtypes == ("float64", "float32")  # no CPU half kernels
    assert registry.load_class("paddle-fused-rms").has_backward is False


def test_importing_the_plugin_does_not_import_paddle():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_paddle.backends", ('paddle',)) == []


def test_the_docstring_examples_run():
    import normbench_paddle.backends

    result = run_doctests(normbench_paddle.backends)
    assert result.attempted >= 5 and result.failed == 0


def test_one_forward_agrees_with_numpy():
    b = get_registry().create("paddle")
    inputs = cases.make_inputs(case("float32-rows5-hidden8x16-offset3"), 0)  # two normalized dims: weight flattened
    y = b.to_numpy(b.layer_norm(b.asarray(inputs.x), (8, 16), b.asarray(inputs.weight), b.asarray(inputs.bias), 1e-5))
    ref = oracle.forward(inputs.x, (8, 16), inputs.weight, inputs.bias, 1e-5)
    assert np.abs(oracle.rows_view(y, (8, 16)) - ref.y).max() < 1e-4


def test_the_documented_limits_are_skips():
    b = get_registry().create("paddle")
    assert "float16" in conformance.skip_reason(b, case("float16-rows5-hidden2x3-offset3"))
    assert "documented range" in conformance.skip_reason(b, case("float32-rows8-hidden64-sigmasqrteps-eps0.1"))
    assert "rank 1" in conformance.skip_reason(b, case("float32-rowsnone-hidden19-offset3"))
    with pytest.raises(ValueError, match="epsilon"):  # the limit is Paddle's own
        b.layer_norm(b.asarray(np.ones((2, 4), np.float32)), (4,), None, None, 0.1)


def test_float64_uses_eps_rounded_to_float32():
    """Paddle's float64 y equals float64 LayerNorm with float32(eps), not with eps."""
    b = get_registry().create("paddle")
    c = case("float64-rows8-hidden64-sigmasqrteps")
    inputs = cases.make_inputs(c, 0)
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
        conformance.check_forward(b, inputs)
    assert ratio(str(info.value)) >= 1e4, str(info.value)
    y = b.to_numpy(b.layer_norm(b.asarray(inputs.x), (64,), *(b.asarray(p) for p in (inputs.weight, inputs.bias)), c.eps))
    as_float32 = oracle.forward(inputs.x, (64,), inputs.weight, inputs.bias, float(np.float32(c.eps))).y
    assert np.allclose(y, as_float32, rtol=1e-13, atol=1e-13)


def test_fused_rms_norm_forward_passes_in_float32():
    b = get_registry().create("paddle-fused-rms")
    for case_id in ("rms-float32-rows5-hidden6x129-offset3", "rms-float32-rows7-hidden100-uniform9-noaffine"):
        conformance.check_forward(b, cases.make_inputs(case(case_id), 0))


@pytest.mark.e2e
def test_strict_reports_the_findings_as_failures_and_by_how_much(tmp_path):
    out, results = run_suite_tests("paddle", list(FINDINGS), tmp_path / "junit.xml", "--normbench-strict")
    assert out.returncode == 1, out.stdout[-3000:]
    assert {t: kind for t, (kind, _) in results.items()} == dict.fromkeys(FINDINGS, "failure")
    for test, at_least in FINDINGS.items():
        message = results[test][1]
        assert "ConformanceError" in message and ratio(message) >= at_least, message


@pytest.mark.e2e
def test_without_strict_the_findings_are_known_deviations(tmp_path):
    out, results = run_suite_tests("paddle", list(FINDINGS), tmp_path / "junit.xml")
    assert out.returncode == 0, out.stdout[-3000:]
    for test in FINDINGS:
        kind, message = results[test]
        assert kind == "skipped" and message.startswith("known deviation (paddle.known_deviations["), (test, message)
