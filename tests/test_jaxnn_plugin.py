"""The example plugin examples/normbench-jaxnn, installed: its registration, its light import, one
forward of each backend against the oracle, and its findings, so they can never silently disappear:
Haiku computes a half-precision x in x's dtype (y 51x the bound in bfloat16, reproduced bit for bit by a
NumPy model of that arithmetic; float16 RMSNorm of |x| >= 256 gives y = 0) while Equinox upcasts and
passes the same case; Haiku's y with float32 parameters is float32; ``use_fast_variance=True`` (not
Haiku's default) cancels and, unclamped, gives NaN. Skipped where the plugin or a library is not
installed (``pip install -e examples/normbench-jaxnn``).
"""

import importlib.metadata
import importlib.util
import inspect
import re

import pytest

if any(importlib.util.find_spec(m) is None for m in ("normbench_jaxnn", "equinox", "haiku")):
    pytest.skip("the example plugin is not installed: pip install -e examples/normbench-jaxnn", allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance  # noqa: E402
from normbench.core import cases, deviations
from normbench.kit.testing import imported_frameworks, run_doctests, run_suite_tests  # noqa: E402

BACKENDS = {"equinox": "EquinoxNorm", "haiku": "HaikuNorm", "haiku-fast": "HaikuFastLayerNorm"}
#: seed 0 failures of haiku (both variants compute a half-precision x in its dtype), each at least this far out
HAIKU = {
    "test_forward[{}-bfloat16-rows3-hidden4096-offset3]": 10.0,
    "test_forward[{}-rms-float16-rows9-hidden1-offset1e3]": 100.0,
    "test_backward[{}-bfloat16-rows7-hidden100-uniform9-biasonly]": 10.0,
    "test_forward[{}-bfloat16-paramsfloat32-rows7-hidden100-offset3]": 0.0,  # y is float32: no ratio
    "test_backward[{}-bfloat16-paramsfloat32-rows7-hidden100-offset3]": 0.0,  # jax.vjp refuses dy: no ratio
}
#: seed 0 failures of haiku-fast in float32, far out of bound (the one-pass variance, unclamped)
FAST = {
    "test_forward[{}-float32-rows8-hidden1000-offset1e3]": 10.0,
    "test_forward[{}-float32-rows8-hidden1000-offset1e4]": 0.0,  # NaN: "(infx)"
    "test_backward[{}-float32-rows8-hidden64-constant]": 1000.0,
}


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


def _case(case_id: str, backward: bool = False) -> cases.Case:
    return next(c for c in (cases.BACKWARD_CASES if backward else cases.FORWARD_CASES) if c.id == case_id)


def test_the_backends_come_from_the_plugin_distribution():
    registry = get_registry()
    for name, cls in BACKENDS.items():
        plugin = registry.plugin(name)
        assert (plugin.distribution, plugin.target) == ("normbench-jaxnn", f"normbench_jaxnn.backends:{cls}")
        assert registry.load_class(name).name == name and registry.availability(name)
    assert not [p for p in registry.problems if p.distribution == "normbench-jaxnn"]
    assert registry.load_class("haiku-fast").operations == ("layer_norm",)  # haiku.RMSNorm has no such option
    assert registry.load_class("haiku").library_version() == importlib.metadata.version("dm-haiku")


def test_haiku_fast_is_named_by_what_differs_from_haikus_default():
    import haiku as hk

    assert inspect.signature(hk.LayerNorm.__init__).parameters["use_fast_variance"].default is False
    registry = get_registry()
    assert (registry.load_class("haiku").use_fast_variance, registry.load_class("haiku-fast").use_fast_variance) == (
        False, True)


def test_the_docstring_examples_run():
    import normbench_jaxnn.backends

    result = run_doctests(normbench_jaxnn.backends)
    assert result.attempted >= 8 and result.failed == 0


def test_importing_the_plugin_imports_no_jax_library():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_jaxnn.backends", ('jax', 'equinox', 'haiku')) == []


@pytest.mark.parametrize("name", list(BACKENDS))
def test_one_forward_and_backward_of_each_agree_with_the_oracle(name):
    """float32 cases with one and two trailing dims (Haiku's broadcast parameter shape; Equinox vmapped over two
    leading dims), with and without weight/bias, LayerNorm and (where declared) RMSNorm."""
    backend = get_registry().create(name)
    ids = ["float32-rows7-hidden100-uniform9", "float32-rows7-hidden100-uniform9-biasonly",
           "float32-rows5-hidden2x2x5-offset3", "float32-rows2x2x3-hidden19-offset3"]
    if "rms_norm" in backend.operations:
        ids += ["rms-float32-rows5-hidden6x129-offset3", "rms-float32-rows7-hidden100-uniform9-noaffine"]
    for case_id in ids:
        conformance.check_forward(backend, cases.make_inputs(_case(case_id), 0))
    case = _case("float32-rows7-hidden100-uniform9", backward=True)
    conformance.check_backward(backend, cases.make_inputs(case, 0), cases.make_dy(case, 0))


def test_haiku_computes_bfloat16_in_bfloat16_and_equinox_upcasts():
    """Haiku's bfloat16 LayerNorm is, bit for bit, mean and variance each rounded to bfloat16, x - mean and
    rsqrt in bfloat16: 51x the bound at seed 0; Equinox computes in float32 and passes the same case."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    case = _case("bfloat16-rows3-hidden4096-offset3")
    inputs = cases.make_inputs(case, 0)
    registry = get_registry()
    haiku = registry.create("haiku")
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
        conformance.check_forward(haiku, inputs)
    assert ratio(str(info.value)) >= 10.0, str(info.value)
    y = np.asarray(haiku.layer_norm(*(haiku.asarray(a) for a in (inputs.x,)), (4096,),
                                    *(None if a is None else haiku.asarray(a) for a in (inputs.weight, inputs.bias)),
                                    case.eps))
    x = inputs.x.astype(np.float32)
    mean = x.mean(-1, keepdims=True).astype(bf16).astype(np.float32)
    var = ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True).astype(bf16).astype(np.float32)
    inv = (1 / np.sqrt(var + np.float32(np.array(case.eps).astype(bf16)))).astype(bf16).astype(np.float32)
    if inputs.weight is not None:
        inv = (inputs.weight.astype(np.float32) * inv).astype(bf16).astype(np.float32)
    model = (inv * (x - mean).astype(bf16).astype(np.float32)).astype(bf16)
    if inputs.bias is not None:
        model = (model.astype(np.float32) + inputs.bias.astype(np.float32)).astype(bf16)
    assert np.array_equal(y, model)
    conformance.check_forward(registry.create("equinox"), inputs)


def test_haiku_float16_rms_norm_of_large_x_is_zero():
    """x^2 overflows float16 at |x| >= 256: mean(x^2) = inf, y = x * rsqrt(inf) = 0."""
    case = _case("rms-float16-rows9-hidden1-offset1e3")
    inputs = cases.make_inputs(case, 0)
    haiku = get_registry().create("haiku")
    y = np.asarray(haiku.rms_norm(haiku.asarray(inputs.x), (1,), haiku.asarray(inputs.weight), case.eps))
    assert np.all(y == 0) and np.all(np.abs(inputs.x) >= 256)
    with pytest.raises(conformance.ConformanceError, match=r"\): y\["):
        conformance.check_forward(haiku, inputs)


def test_haiku_returns_float32_for_float32_parameters():
    inputs = cases.make_inputs(_case("bfloat16-paramsfloat32-rows7-hidden100-offset3"), 0)
    haiku = get_registry().create("haiku")
    with pytest.raises(conformance.ConformanceError, match="y has dtype float32, expected bfloat16"):
        conformance.check_forward(haiku, inputs)


def test_haiku_fast_variance_is_unclamped_and_the_default_passes():
    """E[x^2] - E[x]^2 in float32 at a row mean of 1e4 sigma goes negative: y = NaN; haiku's default passes."""
    inputs = cases.make_inputs(_case("float32-rows8-hidden1000-offset1e4"), 0)
    registry = get_registry()
    fast = registry.create("haiku-fast")
    y = np.asarray(fast.layer_norm(fast.asarray(inputs.x), (1000,), fast.asarray(inputs.weight),
                                   fast.asarray(inputs.bias), 1e-5))
    assert np.isnan(y).any()
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[\d+, \d+\] = nan"):
        conformance.check_forward(fast, inputs)
    conformance.check_forward(registry.create("haiku"), inputs)


def test_declared_deviations_are_specific():
    """Haiku's half-precision entries explain no float32 failure, and the one-pass entries no half one."""
    for name, test, message, source in [
        ("haiku", "test_forward[haiku-float32-rows8-hidden1000-offset1e3]",
         "haiku float32-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", None),
        ("haiku", "test_forward[haiku-bfloat16-rows8-hidden1000-offset1e3]",
         "haiku bfloat16-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", "test_forward[*float16-*]"),
        ("haiku", "test_backward[haiku-rms-float16-rows8-hidden1000-normal]",
         "haiku rms-float16-rows8-hidden1000-normal (seed 0): dx[0, 1] = 1, ...", "test_backward*[*float16-*]"),
        ("haiku-fast", "test_forward[haiku-fast-float32-rows8-hidden1000-offset1e3]",
         "haiku-fast float32-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", "*-offset1e*"),
        ("haiku-fast", "test_forward[haiku-fast-float32-rows8-hidden1000-normal]",
         "haiku-fast float32-rows8-hidden1000-normal (seed 0): y[3, 5] = 1, ...", None),
        ("equinox", "test_forward[equinox-bfloat16-rows8-hidden1000-offset1e3]",
         "equinox bfloat16-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", None),
    ]:
        entries = deviations.from_backend(get_registry().load_class(name))
        subject = deviations.Subject(name, "cpu", test, test.split(f"[{name}-")[1][:-1], "dist")
        found = deviations.find(entries, subject, message, check_failure=True)
        assert (found and found.test) == source, (test, found)


@pytest.mark.e2e
@pytest.mark.parametrize("impl, tests", [("haiku", HAIKU), ("haiku-fast", FAST)])
def test_strict_reports_the_findings_as_failures_and_by_how_much(tmp_path, impl, tests):
    out, results = run_suite_tests(impl, list(tests), tmp_path / "junit.xml", "--normbench-strict")
    assert out.returncode == 1, out.stdout[-3000:]
    assert {t: kind for t, (kind, _) in results.items()} == {t.format(impl): "failure" for t in tests}
    for test, at_least in tests.items():
        message = results[test.format(impl)][1]
        if at_least:
            assert "ConformanceError" in message and ratio(message) >= at_least, message


@pytest.mark.e2e
@pytest.mark.parametrize("impl, tests", [("haiku", HAIKU), ("haiku-fast", FAST)])
def test_without_strict_the_findings_are_known_deviations_and_nothing_else(tmp_path, impl, tests):
    out, results = run_suite_tests(impl, list(tests), tmp_path / "junit.xml")
    assert out.returncode == 0, out.stdout[-3000:]
    for test in tests:
        kind, message = results[test.format(impl)]
        assert kind == "skipped" and message.startswith(f"known deviation ({impl}.known_deviations["), (test, message)
    assert "did not occur" not in out.stdout.split("normbench known deviations")[1]


@pytest.mark.e2e
def test_equinox_passes_the_cases_haiku_fails(tmp_path):
    tests = [t for t in HAIKU if "paramsfloat32" not in t] + ["test_forward[{}-bfloat16-paramsfloat32-rows7-hidden100-offset3]"]
    out, results = run_suite_tests("equinox", tests, tmp_path / "junit.xml", "--normbench-strict")
    assert out.returncode == 0, out.stdout[-3000:]
    assert {t: results[t.format("equinox")][0] for t in tests} == dict.fromkeys(tests, "passed")
