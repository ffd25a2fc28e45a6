"""The Liger-Kernel example plugin (examples/normbench-liger), installed: its registration, its light
import, one forward of each normalization against NumPy, its release-dependent known deviations, and,
on a release before 0.5.4, the finding normbench was built to catch: LayerNorm's variance counted the
padded lanes of a hidden size that is not a power of two (linkedin/Liger-Kernel#518, fixed in 0.5.4 by
#519), which fails by far under ``--normbench-strict`` and is a declared deviation without it; on 0.5.4
and newer the same test passes. The kernels run in the Triton interpreter on CPU (slow): cheap cases
only. Skipped where the plugin or liger-kernel is not installed.
"""

import importlib.util
import re
import subprocess

import pytest

if importlib.util.find_spec("normbench_liger") is None or importlib.util.find_spec("liger_kernel") is None:
    pytest.skip("the Liger example plugin is not installed: pip install -e examples/normbench-liger "
                "(see its README for the liger-kernel versions)", allow_module_level=True)

import numpy as np  # noqa: E402
from normbench_liger import backends  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance  # noqa: E402
from normbench.core import cases, deviations
from normbench.kit.testing import (  # noqa: E402
    imported_frameworks,
    junit_outcomes,  # noqa: E402
    run_doctests,
)
from normbench.suites import DIRECTORY as SUITES  # noqa: E402
from tests.plugins import ROOT, pytest_command, subprocess_env  # noqa: E402

VERSION = backends.installed_version()
#: the installed release still has the padded-lanes bug (#518)
PADDED = backends.version_tuple(VERSION) < backends.PADDED_LANES_FIXED_IN
#: a LayerNorm case the bug fails everywhere (hidden 1000 pads to 1024; row mean 3 sigma): 1.96e4x the bound
PADDED_CASE = "float32-rows5-hidden1000-offset3"
PADDED_TEST = f"test_forward[liger-{PADDED_CASE}]"


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


@pytest.fixture(scope="module")
def liger():
    return get_registry().create("liger")


def test_the_backend_comes_from_the_plugin_distribution():
    registry = get_registry()
    plugin = registry.plugin("liger")
    assert (plugin.distribution, plugin.target) == ("normbench-liger", "normbench_liger.backends:LigerBackend")
    cls = registry.load_class("liger")
    assert cls.name == "liger" and registry.availability("liger")
    assert cls.operations == ("layer_norm", "rms_norm", "add_rms_norm") and cls.library_version() == VERSION
    assert not [p for p in registry.problems if p.distribution == "normbench-liger"]


def test_the_docstring_example_runs():
    result = run_doctests(backends)
    assert result.attempted >= 4 and result.failed == 0


def test_importing_the_plugin_imports_neither_torch_triton_nor_liger():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_liger.backends", ('torch', 'triton', 'liger_kernel')) == []


def test_one_forward_of_each_agrees_with_numpy(liger):
    """4 x 128 float32 (a power of two: no padded lanes, so every release agrees), weight and bias given."""
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 1.5, (4, 128)).astype(np.float32)
    w, b = rng.normal(1.0, 0.2, 128).astype(np.float32), rng.normal(0.0, 0.2, 128).astype(np.float32)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    mean, var = x64.mean(1, keepdims=True), x64.var(1, keepdims=True)
    y = liger.to_numpy(liger.layer_norm(liger.asarray(x), (128,), liger.asarray(w), liger.asarray(b), 1e-5))
    np.testing.assert_allclose(y, (x64 - mean) / np.sqrt(var + 1e-5) * w64 + b64, rtol=0, atol=2e-5)
    rms = liger.to_numpy(liger.rms_norm(liger.asarray(x), (128,), liger.asarray(w), 1e-6))
    np.testing.assert_allclose(rms, x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6) * w64, rtol=0, atol=2e-5)


def test_the_known_deviations_follow_the_installed_release():
    old, new = backends.known_deviations_for("0.5.3"), backends.known_deviations_for("0.8.5")
    padded = [key for key in old if "#518" in old[key]]
    assert padded and not [key for key in new if "#518" in new[key]]
    assert (padded[0] in backends.LigerBackend.known_deviations) == PADDED
    assert backends.version_tuple("0.5.4") == backends.PADDED_LANES_FIXED_IN and backends.version_tuple("0.6.0.dev1") == (0, 6, 0)


def test_the_padded_lanes_case_fails_by_far_on_old_releases_and_passes_on_new_ones(liger):
    case = next(c for c in cases.FORWARD_CASES if c.id == PADDED_CASE)
    inputs = cases.make_inputs(case, 0)
    if not PADDED:
        conformance.check_forward(liger, inputs)
        return
    with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
        conformance.check_forward(liger, inputs)
    assert ratio(str(info.value)) >= 1000, str(info.value)
    assert "padded lanes counted" in str(info.value)  # normbench's own diagnosis names the bug
    # the float64 recomputation of what the kernel does: the 24 padded lanes add 24 * mean^2 to the sum of squares
    x = inputs.x.astype(np.float64)
    n, block = x.shape[1], 1024
    mean = x.mean(1, keepdims=True)
    var_padded = (((x - mean) ** 2).sum(1, keepdims=True) + (block - n) * mean**2) / n
    model = (x - mean) / np.sqrt(var_padded + case.eps_value) * inputs.weight + inputs.bias
    y = liger.to_numpy(liger.layer_norm(liger.asarray(inputs.x), (n,), liger.asarray(inputs.weight),
                                        liger.asarray(inputs.bias), case.eps_value))
    np.testing.assert_allclose(y, model, rtol=1e-5, atol=1e-5)


def test_layer_norm_deviations_explain_no_rms_norm_failure():
    """RMSNorm's ids match LayerNorm's globs; the entries' regexes keep them apart (the padded-lanes one
    is LayerNorm's only: Liger's RMSNorm masks its padded lanes, x = 0 there, in every release)."""
    entries = deviations.from_backend(type("Old", (), {"name": "liger",
                                                        "known_deviations": backends.known_deviations_for("0.5.3")}))
    for test, message, expected in [
        (PADDED_TEST, f"liger {PADDED_CASE} (seed 0): y[3, 376] = -6.6, ...", True),
        ("test_forward[liger-rms-float32-rows5-hidden1000-offset3]",
         "liger rms-float32-rows5-hidden1000-offset3 (seed 0): y[3, 376] = -6.6, ...", False),
    ]:
        subject = deviations.Subject("liger", "cpu", test, test.split("[liger-")[1][:-1], "dist")
        found = deviations.find(entries, subject, message, check_failure=True)
        assert bool(found and "#518" in found.reason) == expected, (test, found)


@pytest.mark.e2e
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "declared"])
def test_the_padded_lanes_finding_through_the_suite(tmp_path, strict):
    """The suite itself, one cheap test: on an old release a failure under --normbench-strict (by
    1e4x) and a declared known deviation without it; on a new release a pass either way."""
    junit = tmp_path / "junit.xml"
    args = [f"{SUITES / 'test_forward.py'}::{PADDED_TEST}", "--impl=liger", "--normbench-seed=0", f"--junitxml={junit}"]
    env = subprocess_env()
    env.setdefault("TRITON_INTERPRET", "1")
    out = subprocess.run(pytest_command(*args, *(["--normbench-strict"] if strict else [])), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    [(kind, message)] = junit_outcomes(junit).values()
    if not PADDED:
        assert (out.returncode, kind) == (0, "passed"), out.stdout[-3000:]
    elif strict:
        assert (out.returncode, kind) == (1, "failure"), out.stdout[-3000:]
        assert "ConformanceError" in message and ratio(message) >= 1000, message
    else:
        assert (out.returncode, kind) == (0, "skipped"), out.stdout[-3000:]
        assert message.startswith("known deviation (liger.known_deviations[") and "#518" in message, message


def test_the_fused_add_is_liger_fused_add_rms_norm_with_residual_out_bit_for_bit():
    """add_rms_norm is LigerFusedAddRMSNormFunction (where the release has it): float32 and float16 cases pass with residual_out
    bit for bit, Gemma's offset as Liger's own ``offset``; a float32 residual with half x skips, saying why."""
    backend = get_registry().create("liger")
    if "add_rms_norm" not in backend.operations:
        pytest.skip(f"liger-kernel {VERSION} has no fused add (LigerFusedAddRMSNormFunction)")
    for case_id in ("add-rms-float32-rows7-hidden769-offset3-residualdominant",
                    "add-rms-float16-rows7-hidden769-offset3-residualcancel",
                    "add-rms-float32-paramsbfloat16-rows7-hidden127-normal-weightoffset1"):
        case = next(c for c in cases.FORWARD_CASES if c.id == case_id)
        conformance.check_forward(backend, cases.make_inputs(case, 0))
    case = next(c for c in cases.BACKWARD_CASES if c.id == "add-rms-float32-rows7-hidden100-uniform9")
    conformance.check_backward(backend, cases.make_inputs(case, 0), cases.make_dy(case, 0))
    case = next(c for c in cases.FORWARD_CASES if c.residual_type == "float32" and c.dtype == "float16"
                and c.norm == "add_rms_norm")
    reason = conformance.skip_reason(backend, case)
    assert "float32 residual with float16 x: the library takes the residual in x's dtype" in reason, reason
