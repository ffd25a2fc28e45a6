"""The example plugin (examples/normbench-flax), installed: its registration, its light
import, and the finding, so it can never silently disappear: Flax's LayerNorm with
its defaults (``use_fast_variance=True``) fails on rows with a large mean, by far, and
with ``use_fast_variance=False`` it does not; both compute a half-precision dx out of
two separately rounded parts, and so does ``flax.linen.RMSNorm`` (in ``flax`` only), whose
declared deviations are its own: LayerNorm's explain no RMSNorm failure. Run by ``tox -e jax``;
skipped where the plugin is not installed.
"""

import importlib.util
import re

import pytest

if importlib.util.find_spec("normbench_flax") is None or importlib.util.find_spec("flax") is None:
    pytest.skip("the example plugin is not installed: pip install -e examples/normbench-flax", allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry
from normbench.check import conformance  # noqa: E402
from normbench.core import cases, deviations
from normbench.kit.testing import imported_frameworks, run_doctests, run_suite_tests  # noqa: E402

#: seed 0 failures of the default variant, far out of bound, and the stable variant's verdict on them
ONE_PASS = {
    "test_forward[{}-float32-rows8-hidden1000-offset1e3]": 10.0,
    "test_forward[{}-float32-rows8-hidden1000-offset1e4]": 1000.0,
    "test_forward[{}-float64-rows8-hidden1000-offset1e3]": 10.0,
    "test_backward[{}-float32-rows8-hidden1000-offset1e3]": 10.0,
    "test_backward[{}-float32-rows8-hidden64-constant]": 1000.0,
    "test_weight_matrix_recentering[{}-float32-rows16-hidden100-normal]": 10.0,
}
#: both variants: the half-precision dx
HALF_DX = "test_backward[{}-bfloat16-rows7-hidden100-uniform9-biasonly]"


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


def test_both_backends_come_from_the_plugin_distribution():
    registry = get_registry()
    for name, cls in (("flax", "FlaxLayerNorm"), ("flax-stable", "FlaxStableLayerNorm")):
        plugin = registry.plugin(name)
        assert (plugin.distribution, plugin.target) == ("normbench-flax", f"normbench_flax.backends:{cls}")
        assert registry.load_class(name).name == name and registry.availability(name)
    assert not [p for p in registry.problems if p.distribution == "normbench-flax"]


def test_the_docstring_example_runs():
    import normbench_flax.backends

    result = run_doctests(normbench_flax.backends)
    assert result.attempted >= 4 and result.failed == 0


def test_importing_the_plugin_imports_neither_flax_nor_jax():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_flax.backends", ('flax', 'jax')) == []


@pytest.mark.parametrize("dist, at_least", [("offset1e3", 10.0), ("offset1e4", 1000.0)])
def test_the_default_variant_fails_large_offsets_and_the_stable_one_passes(dist, at_least):
    case = next(c for c in cases.FORWARD_CASES if c.id == f"float32-rows8-hidden1000-{dist}")
    registry = get_registry()
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
        conformance.check_forward(registry.create("flax"), cases.make_inputs(case, 0))
    assert ratio(str(info.value)) >= at_least, str(info.value)
    conformance.check_forward(registry.create("flax-stable"), cases.make_inputs(case, 0))


def test_rms_norm_is_flax_linen_rmsnorm_in_flax_only():
    registry = get_registry()
    assert registry.load_class("flax").operations == ("layer_norm", "rms_norm")
    assert registry.load_class("flax-stable").operations == ("layer_norm",)  # use_fast_variance: no effect on RMS
    flax = registry.create("flax")
    for case_id in ("rms-float32-rows5-hidden6x129-offset3", "rms-float32-rows7-hidden100-uniform9-noaffine"):
        case = next(c for c in cases.FORWARD_CASES if c.id == case_id)  # two trailing dims; no scale
        conformance.check_forward(flax, cases.make_inputs(case, 0))


def test_rms_half_precision_dx_is_two_roundings_of_its_two_paths():
    """Flax's RMSNorm dx in bfloat16 is bf16(bf16(rstd*g) + bf16(-x*rstd^3*mean(g*x))) (its two paths of x,
    each cotangent rounded): a NumPy model of that reproduces its bits (up to the float32 means' summation
    order), and fails as Flax does."""
    import ml_dtypes

    case = next(c for c in cases.BACKWARD_CASES if c.id == "rms-bfloat16-rows8-hidden1000-normal")
    inputs, dy = cases.make_inputs(case, 0), cases.make_dy(case, 0)
    flax = get_registry().create("flax")
    with pytest.raises(conformance.ConformanceError, match=r"\): dx\[") as info:
        conformance.check_backward(flax, inputs, dy)
    assert ratio(str(info.value)) >= 5.0, str(info.value)
    dx, _ = flax.rms_norm_backward(*(flax.asarray(a) for a in (dy, inputs.x)), (1000,), flax.asarray(inputs.weight),
                                   case.eps)
    x, g = inputs.x.astype(np.float32), dy.astype(np.float32) * inputs.weight.astype(np.float32)
    rstd = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(case.eps))
    bf16 = lambda a: a.astype(ml_dtypes.bfloat16)
    two = bf16(bf16(g * rstd).astype(np.float32) + bf16(-x * rstd**3 * (g * x).mean(axis=1, keepdims=True)))
    # XLA sums the float32 means in another order than NumPy (which depends on the CPU's vector width), so an
    # element whose float32 value sits at a bfloat16 rounding boundary may round the other way: the model must
    # give Flax's bits nearly everywhere and be within one bfloat16 ulp of the rest
    got, model = np.asarray(dx).astype(np.float32), two.astype(np.float32)
    assert (got != model).mean() <= 1e-3, f"{(got != model).sum()} of {got.size} elements differ from the model"
    ulp = np.spacing(np.abs(model).astype(ml_dtypes.bfloat16)).astype(np.float32)
    assert (np.abs(got - model) <= ulp).all()


def test_layer_norm_deviations_explain_no_rms_norm_failure():
    """RMSNorm's ids match LayerNorm's globs (``*-offset1e3``); the entries' regexes keep them apart."""
    entries = deviations.from_backend(get_registry().load_class("flax"))
    for test, message, source in [
        ("test_forward[flax-float32-rows8-hidden1000-offset1e3]",
         "flax float32-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", "*-offset1e3"),
        ("test_backward[flax-bfloat16-rows8-hidden1000-normal]",
         "flax bfloat16-rows8-hidden1000-normal (seed 0): dx[0, 498] = 1, ...", "test_backward*[*float16-*]"),
        ("test_forward[flax-rms-float32-rows8-hidden1000-offset1e3]",
         "flax rms-float32-rows8-hidden1000-offset1e3 (seed 0): y[3, 5] = 1, ...", None),
        ("test_backward[flax-rms-float32-rows8-hidden64-constant]",
         "flax rms-float32-rows8-hidden64-constant (seed 0): dx[3, 5] = 1, ...", None),
        ("test_backward[flax-rms-bfloat16-rows8-hidden1000-normal]",
         "flax rms-bfloat16-rows8-hidden1000-normal (seed 0): dx[0, 498] = 1, ...", "test_backward*[*rms-*float16-*]"),
    ]:
        subject = deviations.Subject("flax", "cpu", test, test.split("[flax-")[1][:-1], "dist")
        found = deviations.find(entries, subject, message, check_failure=True)
        assert (found and found.test) == source, (test, found)


@pytest.mark.e2e
def test_strict_reports_the_finding_as_failures_and_by_how_much(tmp_path):
    out, results = run_suite_tests("flax", [*ONE_PASS, HALF_DX], tmp_path / "junit.xml", "--normbench-strict")
    assert out.returncode == 1, out.stdout[-3000:]
    assert {t: kind for t, (kind, _) in results.items()} == {t.format("flax"): "failure" for t in [*ONE_PASS, HALF_DX]}
    for test, at_least in ONE_PASS.items():
        message = results[test.format("flax")][1]
        assert "ConformanceError" in message and ratio(message) >= at_least, message


@pytest.mark.e2e
def test_without_strict_the_finding_is_known_deviations_and_nothing_else(tmp_path):
    out, results = run_suite_tests("flax", [*ONE_PASS, HALF_DX], tmp_path / "junit.xml")
    assert out.returncode == 0, out.stdout[-3000:]
    for test in [*ONE_PASS, HALF_DX]:
        kind, message = results[test.format("flax")]
        assert kind == "skipped" and message.startswith("known deviation (flax.known_deviations["), (test, message)
    assert "did not occur" not in out.stdout.split("normbench known deviations")[1]


@pytest.mark.e2e
def test_the_stable_variant_passes_the_same_cases_except_the_half_precision_dx(tmp_path):
    out, results = run_suite_tests("flax-stable", [*ONE_PASS, HALF_DX], tmp_path / "junit.xml")
    assert out.returncode == 0, out.stdout[-3000:]
    assert {t: results[t.format("flax-stable")][0] for t in ONE_PASS} == dict.fromkeys(ONE_PASS, "passed")
    kind, message = results[HALF_DX.format("flax-stable")]
    assert kind == "skipped" and message.startswith("known deviation (flax-stable.known_deviations["), message
