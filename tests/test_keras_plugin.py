"""The Keras example plugin (examples/normbench-keras), installed: its registration, its light import,
the one-backend-per-process rule (availability names the command that runs the others), one forward
against NumPy, and its findings, so that none can silently disappear: on Keras's JAX and PyTorch
backends float64 is computed in float32; on PyTorch, Keras's dx is torch's float32 CPU backward (which
cancels on constant rows at 1e4); under a mixed policy RMSNormalization's float32 scale is rounded to
the half compute dtype. The tests run on the Keras backend this process's Keras runs on (KERAS_BACKEND)
and skip the others, saying so; the module is skipped where keras or the plugin is not installed.

    KERAS_BACKEND=jax pytest tests/test_keras_plugin.py        # in a venv with normbench[jax], keras, the plugin
    KERAS_BACKEND=torch pytest tests/test_keras_plugin.py
    KERAS_BACKEND=tensorflow pytest tests/test_keras_plugin.py
"""

import importlib.util
import re
import subprocess
import sys

import pytest

if importlib.util.find_spec("normbench_keras") is None or importlib.util.find_spec("keras") is None:
    pytest.skip("the Keras example plugin is not installed: pip install keras -e examples/normbench-keras",
                allow_module_level=True)

import numpy as np  # noqa: E402
from normbench_keras.backends import configured_keras_backend  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.check import conformance  # noqa: E402
from normbench.core import cases
from normbench.kit.testing import imported_frameworks, run_doctests, run_suite_tests  # noqa: E402
from tests.plugins import subprocess_env  # noqa: E402

BACKENDS = {"keras-jax": "jax", "keras-torch": "torch", "keras-tensorflow": "tensorflow"}
RUNNING = configured_keras_backend()[0]
#: the plugin's backend this process can run, or None
HERE = next((name for name, kb in BACKENDS.items() if kb == RUNNING and get_registry().availability(name)), None)
needs_backend = pytest.mark.skipif(HERE is None, reason=f"Keras runs on {RUNNING!r} here, and its framework or the "
                                   "plugin's backend for it is not available: set KERAS_BACKEND to jax, torch or "
                                   "tensorflow in a venv that has that framework")


def only(*names: str):
    return pytest.mark.skipif(HERE not in names, reason=f"a finding of {', '.join(names)}; this process runs {HERE}")


def case(cid: str, backward: bool = False):
    return next(c for c in (cases.BACKWARD_CASES if backward else cases.FORWARD_CASES) if c.id == cid)


def ratio(message: str) -> float:
    """The worst element's error over its bound, from a failure message: ``... (52.4x); ...``."""
    return float(re.search(r"\(([\d.e+]+)x\)", message)[1])


def test_the_three_backends_come_from_the_plugin_distribution():
    registry = get_registry()
    for name, cls in (("keras-jax", "KerasJax"), ("keras-torch", "KerasTorch"),
                      ("keras-tensorflow", "KerasTensorFlow")):
        plugin = registry.plugin(name)
        assert (plugin.distribution, plugin.target) == ("normbench-keras", f"normbench_keras.backends:{cls}")
        assert registry.load_class(name).name == name
        assert registry.load_class(name).operations == ("layer_norm", "rms_norm")
    assert not [p for p in registry.problems if p.distribution == "normbench-keras"]


def test_importing_the_plugin_imports_no_framework():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_keras.backends", ('keras', 'jax', 'torch', 'tensorflow')) == []


@pytest.mark.parametrize("name, keras_backend", BACKENDS.items())
def test_availability_names_the_command_for_another_keras_backend(name, keras_backend):
    """Keras picks its backend once per process: with KERAS_BACKEND naming another framework, the backend is
    unavailable and says the command that runs it (or, where its framework is missing, the install)."""
    other = "jax" if keras_backend != "jax" else "torch"
    check = (f"from normbench import get_registry; a = get_registry().availability({name!r}); "
             "print(bool(a)); print(a.reason); import sys; print('keras' in sys.modules)")
    env = {**subprocess_env(), "KERAS_BACKEND": other}
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env=env)
    available, reason, imported = out.stdout.strip().splitlines()
    assert (available, imported) == ("False", "False"), out.stdout + out.stderr
    assert (f"KERAS_BACKEND={keras_backend} normbench test --impl={name}" in reason
            or "is not installed" in reason), reason


@needs_backend
def test_the_docstring_example_runs_on_keras_jax():
    if HERE != "keras-jax":
        pytest.skip("the docstring's example creates keras-jax")
    import normbench_keras.backends

    result = run_doctests(normbench_keras.backends)
    assert result.attempted >= 4 and result.failed == 0


@needs_backend
def test_one_forward_of_each_normalization_agrees_with_numpy():
    """float32, two trailing dims (a list axis), weight and bias: y within 1e-5 of a float64 NumPy LayerNorm
    and RMSNorm (eps=None: torch's machine epsilon), and the backend's check passes."""
    backend = get_registry().create(HERE)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    w, b = (rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2))
    x64 = x.astype(np.float64).reshape(3, 20)
    mu = x64.mean(1, keepdims=True)
    ln = ((x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(1, keepdims=True) + 1e-5)).reshape(x.shape) * w + b
    rms = (x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 2.0**-23)).reshape(x.shape) * w
    y = backend.to_numpy(backend.layer_norm(*(backend.asarray(a) for a in (x,)), (4, 5), backend.asarray(w),
                                            backend.asarray(b), 1e-5))
    assert y.dtype == np.float32 and np.abs(y - ln).max() < 1e-5
    y = backend.to_numpy(backend.rms_norm(backend.asarray(x), (4, 5), backend.asarray(w), None))
    assert y.dtype == np.float32 and np.abs(y - rms).max() < 1e-5
    for cid in ("float32-rows5-hidden6x129-offset3", "rms-float32-rows7-hidden100-uniform9-noaffine"):
        conformance.check_forward(backend, cases.make_inputs(case(cid), 0))


@needs_backend
def test_float64_is_computed_in_float32_except_on_tensorflow():
    """keras/src/backend/common/dtypes.py turns float64 into float32 in result_type on every backend but
    TensorFlow: every y is a float32 value, far outside float64's bound; TensorFlow computes in float64."""
    backend = get_registry().create(HERE)
    for cid in ("float64-rows8-hidden1000-normal", "rms-float64-rows8-hidden1000-normal"):
        inputs = cases.make_inputs(case(cid), 0)
        if HERE == "keras-tensorflow":
            conformance.check_forward(backend, inputs)
            continue
        with pytest.raises(conformance.ConformanceError, match=r"\): y\[") as info:
            conformance.check_forward(backend, inputs)
        assert ratio(str(info.value)) >= 1e6, str(info.value)
        x, w = backend.asarray(inputs.x), backend.asarray(inputs.weight)
        y = backend.to_numpy(backend.rms_norm(x, (1000,), w, case(cid).eps) if cid.startswith("rms") else
                             backend.layer_norm(x, (1000,), w, backend.asarray(inputs.bias), case(cid).eps))
        assert y.dtype == np.float64 and np.array_equal(y, y.astype(np.float32).astype(np.float64))


@needs_backend
@only("keras-torch")
def test_keras_torch_dx_is_torchs_float32_cpu_backward_bit_for_bit():
    """Keras upcasts x to float32 and calls F.layer_norm: its dx is torch's float32 dx (rounded to x's dtype),
    with torch's known CPU cancellation on constant rows at 1e4 (suites/known_deviations.txt)."""
    import torch

    backend = get_registry().create(HERE)
    for cid, at_least in (("float32-rows8-hidden1024-constant1e4", 1000.0), ("float16-rows8-hidden1000-offset1e4", 100.0)):
        c = case(cid, backward=True)
        inputs, dy = cases.make_inputs(c, 0), cases.make_dy(c, 0)
        with pytest.raises(conformance.ConformanceError, match=r"\): dx\[") as info:
            conformance.check_backward(backend, inputs, dy)
        assert ratio(str(info.value)) >= at_least, str(info.value)
        arrays = [None if a is None else backend.asarray(a) for a in (dy, inputs.x, inputs.weight, inputs.bias)]
        dx = backend.to_numpy(backend.layer_norm_backward(arrays[0], arrays[1], inputs.x.shape[-1:], *arrays[2:],
                                                          c.eps)[0])
        t = [None if a is None else torch.from_numpy(np.asarray(a, np.float32)).requires_grad_()
             for a in (inputs.x, inputs.weight, inputs.bias)]
        y = torch.nn.functional.layer_norm(t[0], inputs.x.shape[-1:], t[1], t[2], c.eps)
        dx32 = torch.autograd.grad(y, t[0], torch.from_numpy(dy.astype(np.float32)))[0].numpy()
        assert np.array_equal(dx, dx32.astype(inputs.x.dtype))


@needs_backend
def test_mixed_rms_norm_rounds_its_float32_scale_to_the_compute_dtype():
    """mixed_bfloat16: RMSNormalization's scale is autocast (LayerNormalization's gamma is not): y is a NumPy
    RMSNorm in float32 with the scale rounded to bfloat16, bit for bit; its dx fails (seed 1: 32x)."""
    import ml_dtypes

    backend = get_registry().create(HERE)
    c = case("rms-bfloat16-paramsfloat32-rows7-hidden100-offset3", backward=True)
    inputs, dy = cases.make_inputs(c, 1), cases.make_dy(c, 1)
    with pytest.raises(conformance.ConformanceError, match=r"\): dx\[") as info:
        conformance.check_backward(backend, inputs, dy)
    assert ratio(str(info.value)) >= 5.0, str(info.value)
    y = backend.to_numpy(backend.rms_norm(backend.asarray(inputs.x), (100,), backend.asarray(inputs.weight), c.eps))
    x = inputs.x.astype(np.float32)
    eps = np.float32(2.0**-23 if c.eps is None else c.eps)
    normalized = x / np.sqrt((x * x).mean(1, keepdims=True) + eps)
    rounded = inputs.weight.astype(ml_dtypes.bfloat16).astype(np.float32)
    # the NumPy model's rsqrt and mean orders differ from the frameworks' in the last float32 bit: compare in bf16 ulps
    diff = np.abs(y.astype(np.float32) - (normalized * rounded).astype(ml_dtypes.bfloat16).astype(np.float32))
    assert (diff > 0).mean() < 0.02


#: per backend, one test of each declared finding (seed 1), cheap to run
FINDINGS = {
    "keras-jax": ["test_forward[{}-float64-rows8-hidden1000-normal]", "test_forward[{}-rms-float64-rows8-hidden1000-normal]",
                  "test_backward[{}-rms-bfloat16-paramsfloat32-rows7-hidden100-offset3]"],
    "keras-torch": ["test_forward[{}-float64-rows8-hidden1000-normal]", "test_backward[{}-float32-rows8-hidden1024-constant1e4]",
                    "test_backward[{}-float16-rows8-hidden1000-offset1e4]",
                    "test_backward[{}-rms-bfloat16-paramsfloat32-rows7-hidden100-offset3]"],
    "keras-tensorflow": ["test_backward[{}-rms-bfloat16-paramsfloat32-rows7-hidden100-offset3]"],
}



def _keras_env(backend: str) -> dict[str, str]:
    """The subprocess environment under the Keras backend ``backend`` runs on (Keras reads it at import)."""
    return {**subprocess_env(), "KERAS_BACKEND": BACKENDS[backend]}

@pytest.mark.e2e
@needs_backend
def test_strict_reports_each_finding_as_a_failure_and_without_it_a_known_deviation(tmp_path):
    tests = FINDINGS[HERE]
    out, results = run_suite_tests(HERE, tests, tmp_path / "strict.xml", "--normbench-strict", seed=1, env=_keras_env(HERE))
    assert out.returncode == 1, out.stdout[-3000:]
    assert {t: kind for t, (kind, _) in results.items()} == {t.format(HERE): "failure" for t in tests}, results
    out, results = run_suite_tests(HERE, tests, tmp_path / "default.xml", seed=1, env=_keras_env(HERE))
    assert out.returncode == 0, out.stdout[-3000:]
    for test in tests:
        kind, message = results[test.format(HERE)]
        assert kind == "skipped" and message.startswith(f"known deviation ({HERE}.known_deviations["), (test, message)
