"""The built-in ``onnxruntime`` backend (``pip install 'normbench[onnxruntime]'``): its registration, its
light import, a forward that agrees with NumPy, the limits it skips with their reasons, and its declared
findings, so they can never silently disappear: ONNX's float32 ``epsilon`` attribute in float64
models, the 8-lane float32 sum of squares of ORT's CPU RMSNormalization on a long constant row, and the one-lane
sum of squares of its SkipSimplifiedLayerNormalization (the fused add, docs/fused.md).
Skipped where onnxruntime or onnx is not installed.
"""

import importlib.util

import pytest

if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
    pytest.skip("onnxruntime is not installed: pip install 'normbench[onnxruntime]'", allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance  # noqa: E402
from normbench.core import cases
from normbench.kit.testing import imported_frameworks, run_suite_tests  # noqa: E402

#: seed 0 failures, each explained by a declared deviation
FINDINGS = [
    "test_forward[{}-float64-rows8-hidden64-sigmasqrteps-eps0.1]",
    "test_forward[{}-rms-float64-rows8-hidden1000-normal]",
    "test_forward[{}-rms-float32-rows2-hidden65536-constant]",
    "test_forward[{}-add-rms-float32-rows4-hidden8192-constant]",
    "test_dataset_rescaling[{}-float64-rows16-hidden100-normal]",
]


def _case(case_id):
    return next(c for c in cases.FORWARD_CASES if c.id == case_id)


@pytest.fixture(scope="module")
def ort():
    backend = get_registry().create("onnxruntime")
    backend.set_threads(1)
    return backend


def test_registered_as_a_built_in_backend():
    registry = get_registry()
    plugin = registry.plugin("onnxruntime")
    assert (plugin.distribution, plugin.target) == ("normbench", "normbench.impls.onnxruntime_ort:OnnxRuntimeBackend")
    cls = registry.load_class("onnxruntime")
    assert cls.name == "onnxruntime" and registry.availability("onnxruntime")
    assert cls.operations == ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
    assert not cls.has_backward and not cls.strided


def test_importing_the_module_imports_neither_onnx_nor_onnxruntime():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench.impls.onnxruntime_ort", ('onnx', 'onnxruntime')) == []


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_forward_agrees_with_numpy(ort, dtype):
    import ml_dtypes

    host = {"bfloat16": ml_dtypes.bfloat16}.get(dtype, dtype)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(host) for s in ((3, 4, 5), (4, 5), (4, 5)))
    y = ort.to_numpy(ort.layer_norm(ort.asarray(x), (4, 5), w, b, 1e-5))
    x64 = x.astype(np.float64).reshape(3, 20)
    ref = ((x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)).reshape(3, 4, 5)
    ref = ref * w.astype(np.float64) + b.astype(np.float64)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float64), ref, atol={"float32": 1e-5}.get(dtype, 2e-2))
    # a second size of the same signature runs in the same session
    assert ort.layer_norm(ort.asarray(x[:1]), (4, 5), w, b, 1e-5).shape == (1, 4, 5)
    assert len([k for k in ort._sessions if k[1] == x.dtype]) == 1


def test_weight_none_is_scale_ones_and_rms_default_eps_is_torchs(ort):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(ort.layer_norm(x, (8,), None, None, 1e-5),
                                  ort.layer_norm(x, (8,), np.ones(8, np.float32), None, 1e-5))
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + np.finfo(np.float32).eps)
    np.testing.assert_allclose(ort.rms_norm(x, (8,), None, None), ref, rtol=1e-6)


@pytest.mark.parametrize("case, reason", [
    (dict(dtype="float16", param_dtype="float32"), "a float32 weight and bias with float16 x: the library takes the "
                                                   "weight and bias in x's dtype (ONNX LayerNormalization-17 types X, "
                                                   "Scale and B with one type parameter T"),
    (dict(dtype="float16", param_dtype="float32", norm="rms_norm", affine="w"), "RMSNormalization-23 gives a scale "
                                                                                "of another type V"),
    (dict(dtype="bfloat16", norm="rms_norm", affine="w"), "bfloat16 x is not among the dtypes it takes, float64, "
                                                          "float32, float16 (ONNX RMSNormalization-23"),
    (dict(dtype="float16", norm="add_layer_norm", residual_dtype="float32"), "a float32 residual with float16 x: the "
                                                                             "library takes the residual in x's dtype "
                                                                             "(ONNX Runtime's SkipLayerNormalization"),
    (dict(dtype="float64", norm="add_rms_norm", affine="w"), "float64 x is not among the dtypes it takes, float32, "
                                                             "float16 (ONNX Runtime's SkipSimplifiedLayerNormalization"),
    (dict(shape=(2, 2, 4), normalized_shape=(2, 4), norm="add_rms_norm", affine="w"),
     "it normalizes the last dim only, not 2 trailing dims (ONNX Runtime's SkipSimplifiedLayerNormalization"),
])
def test_what_onnx_cannot_express_is_skipped_before_the_call_with_its_reason(ort, case, reason):
    """Declared per operation (operation_limits), never by pytest.skip() from inside a call (which the harness
    fails: a kernel that skipped the cases it would fail must not pass)."""
    case = cases.Case(**{"family": "t", "shape": (2, 8), "normalized_shape": (8,), "dtype": "float32", **case})
    assert reason in conformance.skip_reason(ort, case)


def test_the_fused_ops_are_skip_layer_normalization_with_its_sum(ort):
    """SkipLayerNormalization's output 3 is residual_out, bit for bit; float16 normalizes the unrounded sum (the
    other correct convention, which passes); what the schema cannot express is skipped before the call (above)."""
    for case_id in ("add-float16-rows7-hidden769-offset3-residualdominant", "add-rms-float32-rows7-hidden769-offset3-"
                    "residualcancel", "add-float16-rows5-hidden1023-offset3"):
        conformance.check_forward(ort, cases.make_inputs(_case(case_id), 0))


def test_the_fused_rms_finding_is_a_one_lane_sum_of_squares(ort):
    """SkipSimplifiedLayerNormalization on float32 constant rows at N = 8192: a NumPy model summing the squares one
    after another in float32 gives its y to 1e-6 relative; the float64 sum is 40 times farther."""
    case = _case("add-rms-float32-rows4-hidden8192-constant")
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(conformance.ConformanceError, match=r"(?s)\): y\[.*explained: y matches sums accumulated in one"):
        conformance.check_forward(ort, inputs)
    y, out = ort.add_rms_norm(inputs.x, inputs.residual, (8192,), inputs.weight, case.eps)
    total = np.float32(0) * out[:, 0]
    for column in out.T:
        total = (total + column * column).astype(np.float32)
    model = out.astype(np.float64) / np.sqrt(total.astype(np.float64)[:, None] / 8192 + 1e-5) * inputs.weight
    exact = out.astype(np.float64) / np.sqrt((out.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * inputs.weight
    near, far = (np.abs(y / m - 1).max() for m in (model, exact))
    assert near < 1e-6 and far > 40 * near, (near, far)


def test_float64_uses_eps_rounded_to_float32(ort):
    """The float64 finding: y is a float64 LayerNorm of float32(eps), not of eps."""
    case = _case("float64-rows8-hidden64-sigmasqrteps-eps0.1")
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(conformance.ConformanceError, match=r"\): y\["):
        conformance.check_forward(ort, inputs)
    y = ort.layer_norm(inputs.x, (64,), inputs.weight, inputs.bias, 0.1)
    x = inputs.x
    xhat = lambda eps: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps)
    assert np.abs(y - (xhat(float(np.float32(0.1))) * inputs.weight + inputs.bias)).max() < 1e-14
    assert np.abs(y - (xhat(0.1) * inputs.weight + inputs.bias)).max() > 1e-9


@pytest.mark.e2e
def test_strict_reports_the_findings_as_failures(tmp_path):
    out, results = run_suite_tests("onnxruntime", FINDINGS, tmp_path / "junit.xml", "--normbench-strict")
    assert out.returncode == 1, out.stdout[-3000:]
    assert {t: kind for t, (kind, _) in results.items()} == {t.format("onnxruntime"): "failure" for t in FINDINGS}


@pytest.mark.e2e
def test_without_strict_the_findings_are_known_deviations(tmp_path):
    out, results = run_suite_tests("onnxruntime", FINDINGS, tmp_path / "junit.xml")
    assert out.returncode == 0, out.stdout[-3000:]
    for test in FINDINGS:
        kind, message = results[test.format("onnxruntime")]
        assert kind == "skipped" and message.startswith("known deviation (onnxruntime.known_deviations["), message
