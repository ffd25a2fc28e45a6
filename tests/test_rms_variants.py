"""RMSNorm as the models use it, through the same operations (docs/checks.md, "RMSNorm's variants"): Gemma's
``weight_offset`` (``x*r*(1 + weight)``, the 1 added in float32), no weight, and per-head normalization (qk-norm)
of ``[tokens, heads, head_dim]`` with one weight per head_dim or one per head (``Case.per_head``). A correct kernel
passes their cases; Gemma's field bugs and a weight indexed by the wrong head fail them; a backend whose entry points
take no ``weight_offset`` skips the Gemma cases, one without ``per_head_weights`` the per-head ones, saying so.
"""

from __future__ import annotations

import numpy as np
import pytest

from normbench.check import conformance, oracle
from normbench.check.worst import ConformanceError
from normbench.core import cases, operations
from normbench.core.exceptions import InvalidInput
from normbench.impls.numpy_ref import NumpyBackend
from tests import rms_mutants

GEMMA = [c for c in cases.FORWARD_CASES if c.family == "gemma"]
GEMMA_BACKWARD = [c for c in cases.BACKWARD_CASES if c.family == "gemma"]
HEADS = [c for c in cases.FORWARD_CASES if c.family == "heads"]
HEADS_BACKWARD = [c for c in cases.BACKWARD_CASES if c.family == "heads"]
PER_HEAD = [c for c in HEADS if c.per_head]
PER_HEAD_BACKWARD = [c for c in HEADS_BACKWARD if c.per_head]


def test_the_variants_run_for_rmsnorm_and_its_fused_twin():
    for op in (operations.RMS_NORM, operations.ADD_RMS_NORM):
        mine = [c for c in cases.FORWARD_CASES if c.norm == op.name]
        assert {c.weight_offset for c in mine if c.family == "gemma"} == {1.0}
        assert {c.shape[-2] for c in mine if c.family == "heads"} == {4, 7, 16}
        assert {c.hidden for c in mine if c.family == "heads"} == {64, 128, 256, 512, cases.ODD}
        assert any(c.affine == "none" for c in mine), "RMSNorm without a weight"
    assert all(c.weight_offset == 0 for c in cases.FORWARD_CASES if "layer_norm" in c.norm)


def test_weight_offset_is_an_rmsnorm_option_with_a_weight():
    case = GEMMA[0]
    assert case.options == {"weight_offset": 1.0} and case.id.endswith("-weightoffset1")
    with pytest.raises(InvalidInput, match="weight_offset is an option of RMSNorm, Add\\+RMSNorm"):
        cases.Case("x", (2, 4), (4,), "float32", weight_offset=1.0)
    with pytest.raises(InvalidInput, match="with a weight"):
        cases.Case("x", (2, 4), (4,), "float32", norm="rms_norm", affine="none", weight_offset=1.0)


def test_the_oracle_adds_the_offset_exactly():
    x = np.array([[1.0, -2.0, 3.0]])
    w = np.float32([0.5, -1.25, 2**-30])
    plain = oracle.forward(x, (3,), (1.0 + w.astype(np.float64)), None, 0.0, "rms_norm")
    gemma = oracle.forward(x, (3,), w, None, 0.0, "rms_norm", weight_offset=1.0)
    assert np.array_equal(plain.y, gemma.y) and gemma.weight[2] == 1.0 + 2**-30


def test_a_backend_without_weight_offset_skips_the_gemma_cases_saying_so():
    reason = conformance.skip_reason(rms_mutants.RmsKernel(), GEMMA[0])
    assert reason.startswith("mutant-rms-control's rms_norm takes no weight_offset; define rms_norm(..., "
                             "weight_offset=0.0)"), reason
    assert conformance.skip_reason(rms_mutants.OffsetKernel(), GEMMA[0]) is None
    assert conformance.skip_reason(NumpyBackend(), GEMMA[0]) is None


@pytest.mark.parametrize("kernel_class", [rms_mutants.OffsetKernel, NumpyBackend, rms_mutants.PerHeadKernel],
                         ids=lambda b: b.name)
def test_correct_kernels_pass_gemma_and_per_head_cases(kernel_class):
    kernel = kernel_class()
    for seed in range(3):
        for case in GEMMA + HEADS:
            if conformance.skip_reason(kernel, case) is None:
                conformance.check_forward(kernel, cases.make_inputs(case, seed))
        for case in GEMMA_BACKWARD + HEADS_BACKWARD:
            if conformance.skip_reason(kernel, case, backward=True) is None:
                conformance.check_backward(kernel, cases.make_inputs(case, seed), cases.make_dy(case, seed))


def test_the_offset_added_in_bfloat16_fails_where_the_output_is_finer():
    """Gemma's bug: ``1 + weight`` rounded to bfloat16 costs 2^-9 of the factor, inside a bfloat16 output's own
    rounding but far outside a float32 output's: the float32 case with bfloat16 weights catches it."""
    case = next(c for c in GEMMA if c.dtype == "float32" and c.param_dtype == "bfloat16")
    with pytest.raises(ConformanceError, match=r"\): y\["):
        conformance.check_forward(rms_mutants.OffsetInWeightDtype(), cases.make_inputs(case, 0))


def test_the_offset_applied_twice_fails_forward_and_backward():
    case = next(c for c in GEMMA if c.dtype == "float32" and c.param_dtype is None)
    with pytest.raises(ConformanceError, match=r"\): y\["):
        conformance.check_forward(rms_mutants.OffsetTwice(), cases.make_inputs(case, 0))
    case = next(c for c in GEMMA_BACKWARD if c.dtype == "float32")
    with pytest.raises(ConformanceError, match=r"\): dx\["):
        conformance.check_backward(rms_mutants.OffsetTwice(), cases.make_inputs(case, 0), cases.make_dy(case, 0))


# -- one weight per head ------------------------------------------------------------------------------------------


def test_per_head_weights_are_plain_rmsnorms_qk_norm():
    case = PER_HEAD[0]
    assert case.weight_shape == (case.shape[-2], case.hidden) and case.id.endswith("-perhead")
    assert cases.make_inputs(case, 0).weight.shape == case.weight_shape
    assert {c.norm for c in PER_HEAD} == {"rms_norm"} and len(PER_HEAD) == len(PER_HEAD_BACKWARD) == 9
    with pytest.raises(InvalidInput, match="per-head weights are RMSNorm's qk-norm"):
        cases.Case("x", (2, 4, 8), (8,), "float32", norm="layer_norm", affine="w", per_head=True)
    with pytest.raises(InvalidInput, match="per-head weights are RMSNorm's qk-norm"):
        cases.Case("x", (4, 8), (8,), "float32", norm="rms_norm", affine="w", per_head=True)


def test_the_oracle_scales_each_row_by_its_heads_weight_and_sums_dweight_per_head():
    x = np.arange(1.0, 25.0).reshape(2, 3, 4)  # 2 tokens, 3 heads, head_dim 4
    w = np.arange(12.0).reshape(3, 4) - 5
    ref = oracle.forward(x, (4,), w, None, 1e-6, "rms_norm")
    rows = x.reshape(6, 4)
    xhat = rows / np.sqrt((rows * rows).mean(axis=1, keepdims=True) + 1e-6)
    assert np.allclose(ref.y, xhat * w[[0, 1, 2, 0, 1, 2]], rtol=1e-15) and ref.groups == 3
    dy = np.linspace(-1, 1, 24).reshape(6, 4)
    grads = oracle.backward(dy, ref)
    per_head = np.stack([(dy * xhat)[[h, h + 3]].sum(axis=0) for h in range(3)])  # head h: rows h and h + 3
    assert np.allclose(grads.dweight.reshape(3, 4), per_head, rtol=1e-15)


def test_a_backend_without_per_head_weights_skips_them_saying_so():
    reason = conformance.skip_reason(rms_mutants.RmsKernel(), PER_HEAD[0])
    assert reason == ("backend 'mutant-rms-control' takes a weight of normalized_shape only (per_head_weights = "
                      f"False), so one weight per head, of shape {PER_HEAD[0].weight_shape}, does not apply")
    assert conformance.skip_reason(rms_mutants.PerHeadKernel(), PER_HEAD[0]) is None


def test_the_weight_of_the_wrong_head_fails_every_per_head_case_forward_and_backward():
    mutant = rms_mutants.WeightOfTheWrongHead()
    for case in PER_HEAD:
        with pytest.raises(ConformanceError, match=r"\): y\["):
            conformance.check_forward(mutant, cases.make_inputs(case, 0))
    for case in PER_HEAD_BACKWARD:
        with pytest.raises(ConformanceError, match=r"\): (dx|dweight)\["):
            conformance.check_backward(mutant, cases.make_inputs(case, 0), cases.make_dy(case, 0))
