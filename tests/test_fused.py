"""The fused residual-add operations (docs/fused.md): their contract, their cases, and the proofs that the checks
catch every mutant of ``tests/fused_mutants.py`` and pass every correct variant.

The correct variants run every fused case here on seed 0 (``-m slow``: 0..19); each mutant must fail, and
its failure must name what it broke. ``tests/test_mutants.py`` runs the same kernels through the suites as
plugins.
"""

from __future__ import annotations

import numpy as np
import pytest

from normbench.check import conformance, error_model, fused
from normbench.check.worst import ConformanceError
from normbench.core import cases, operations
from normbench.core.exceptions import InvalidInput
from tests import fused_mutants

FORWARD = [c for c in cases.FORWARD_CASES if operations.of(c.norm).fuses]
BACKWARD = [c for c in cases.BACKWARD_CASES if operations.of(c.norm).fuses]


def failures(backend, seeds, *, forward=True, backward=True, first=False) -> list[tuple[str, int, str]]:
    """``(case id, seed, message)`` of every fused case ``backend`` fails (skipped cases left out)."""
    found = []
    for seed in seeds:
        for case in FORWARD if forward else ():
            if conformance.skip_reason(backend, case) is None:
                try:
                    conformance.check_forward(backend, cases.make_inputs(case, seed))
                except ConformanceError as exc:
                    found.append((case.id, seed, str(exc)))
                    if first:
                        return found
        for case in BACKWARD if backward else ():
            if conformance.skip_reason(backend, case, backward=True) is None:
                try:
                    conformance.check_backward(backend, cases.make_inputs(case, seed), cases.make_dy(case, seed))
                except ConformanceError as exc:
                    found.append((case.id, seed, str(exc)))
                    if first:
                        return found
    return found


# -- the contract ----------------------------------------------------------------------------------------------


def test_the_fused_operations_are_the_plain_ones_with_a_residual():
    for fused_op, plain in ((operations.ADD_LAYER_NORM, operations.LAYER_NORM),
                            (operations.ADD_RMS_NORM, operations.RMS_NORM)):
        assert fused_op.normalization is plain and plain.normalization is plain
        assert (fused_op.centered, fused_op.has_bias, fused_op.default_eps) == (plain.centered, plain.has_bias,
                                                                                  plain.default_eps)
        assert fused_op.params == ("x", "residual") + plain.params[1:]
        assert fused_op.outputs == ("y", "residual_out") and fused_op.cotangents == ("dy", "dresidual_out")
        assert fused_op.backward_parameters == ("residual_out",) + plain.params[1:]
        assert fused_op.gradients == ("dsum",) + plain.gradients[1:]
    assert operations.ADD_RMS_NORM.signature(backward=True) == (
        "add_rms_norm_backward(dy, dresidual_out, residual_out, normalized_shape, weight, eps) -> (dsum, dweight)")


def test_the_backward_of_a_fused_forward_takes_the_residual_out_it_wrote():
    op = operations.ADD_LAYER_NORM
    args = op.arguments(x="x", residual="r", normalized_shape=(4,), weight="w", bias="b", eps=1e-5)
    assert op.backward_args_from(args, ("y", "out")) == ("out", (4,), "w", "b", 1e-5)
    plain = operations.LAYER_NORM.arguments(x="x", normalized_shape=(4,), weight="w", bias="b", eps=1e-5)
    assert operations.LAYER_NORM.backward_args_from(plain, "y") == plain


def test_case_ids_name_their_operation_by_the_longest_prefix():
    from normbench.core import case_ids

    for case in FORWARD[:: 50] + BACKWARD[:: 50]:
        assert case_ids.operation_of(case.id).name == case.norm
    assert case_ids.dtype_of("add-rms-float32-rows3-hidden8-normal") == "float32"


def test_a_residual_belongs_to_a_fused_case_only():
    with pytest.raises(InvalidInput, match="adds no residual"):
        cases.Case("x", (2, 4), (4,), "float32", residual="normal")
    case = cases.Case("x", (2, 4), (4,), "float16", norm="add_rms_norm", residual_dtype="float32")
    assert case.residual == "same" and case.residual_type == "float32" and "residualfloat32" in case.id
    inputs = cases.make_inputs(case, 0)
    assert inputs.residual.dtype == np.float32 and inputs.x.dtype == np.float16
    with pytest.raises(InvalidInput, match="unknown residual"):
        cases.Case("x", (2, 4), (4,), "float32", norm="add_rms_norm", residual="huge")


def test_the_fused_families_run_the_shared_ones_and_the_residuals_that_matter():
    for op in (operations.ADD_LAYER_NORM, operations.ADD_RMS_NORM):
        mine = [c for c in FORWARD if c.norm == op.name]
        families = {c.family for c in mine}
        assert set(operations.NORMALIZATION_FORWARD) | {"residual"} <= families
        assert {c.residual for c in mine} >= {"same", "dominant", "cancel", "zero", "normal"}
        assert {c.hidden for c in mine if c.family == "residual"} >= set(cases.FIELD_HIDDEN)
        assert any(c.residual_type == "float32" and c.dtype in cases.HALF for c in mine)
        layouts = {c.layout for c in mine}
        assert layouts == set(cases.LAYOUTS)


def test_the_residual_is_laid_out_like_x():
    case = next(c for c in FORWARD if c.layout == "transposed")
    inputs = cases.make_inputs(case, 0)
    assert inputs.residual.strides == inputs.x.strides and inputs.residual.shape == inputs.x.shape


def test_residual_out_is_one_rounding_of_the_exact_sum():
    case = cases.Case("x", (1, 3), (3,), "float16", norm="add_rms_norm", residual_dtype="float32")
    x = np.float16([1.0, 2049.0, -0.0])  # 2049 is not a float16: it is 2048; the float32 sum keeps the residual
    inputs = cases.Inputs(case, 0, x.reshape(1, 3), None, None, np.float32([2**-20, 0.5, 0.0]).reshape(1, 3))
    out = fused.residual_out(inputs)
    assert out.dtype == np.float32 and out.tolist() == [[1.0 + 2**-20, 2048.5, 0.0]]


# -- the bounds: derived, and needed -------------------------------------------------------------------------


def test_the_two_conventions_disagree_beyond_the_bound_and_each_passes():
    """Where the sum's rounding is coarse (bfloat16 rows at an offset of 100) the normalizations of the rounded and
    the unrounded sum are far more than a bound apart: a kernel of either convention passes (each is judged against
    its own reference), and one half-way between fails."""
    case = next(c for c in FORWARD if c.id == "add-bfloat16-rows8-hidden1000-offset1e2")
    inputs = cases.make_inputs(case, 0)
    ref, exact = conformance.reference(inputs), fused.unrounded_reference(inputs)
    assert (np.abs(exact.y - ref.y) > 10 * error_model.forward_bound(ref, case.dtype)).any()
    for kernel in (fused_mutants.FusedKernel(), fused_mutants.UnroundedSum()):
        conformance.check_forward(kernel, inputs)

    class HalfWay(fused_mutants.FusedKernel):
        name = "mutant-half-way"

        def normalized_input(self, total, stored):
            return (total + np.asarray(stored, dtype=np.float32)) / np.float32(2)

    with pytest.raises(ConformanceError, match="nor within the bound of the unrounded sum's normalization"):
        conformance.check_forward(HalfWay(), inputs)


def test_with_a_float32_residual_the_conventions_agree_within_the_bound():
    for case in (c for c in FORWARD if c.residual_type == "float32" and c.dtype in cases.HALF):
        inputs = cases.make_inputs(case, 0)
        ref, exact = conformance.reference(inputs), fused.unrounded_reference(inputs)
        assert (np.abs(exact.y - ref.y) < 0.01 * error_model.forward_bound(ref, case.dtype)).all(), case.id


# -- never cry wolf, never miss ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", fused_mutants.CORRECT_VARIANTS, ids=lambda v: v.name)
def test_correct_fused_kernels_pass(variant):
    assert failures(variant(), range(1)) == []


@pytest.mark.slow
@pytest.mark.parametrize("variant", fused_mutants.CORRECT_VARIANTS, ids=lambda v: v.name)
def test_correct_fused_kernels_pass_on_twenty_seeds(variant):
    assert failures(variant(), range(20)) == []


#: each mutant, and what its first failure must name
NAMED = {
    fused_mutants.ResidualOutNotWritten: "residual_out[",
    fused_mutants.ResidualOutTruncated: "residual_out[",
    fused_mutants.StaleResidual: "residual_out[",
    fused_mutants.TailIntoNextRow: "): y[",
    fused_mutants.NormalizesX: "): y[",
    fused_mutants.InPlaceResidual: "modified its input residual in place",
    fused_mutants.PrenormBackward: "): dsum[",
    fused_mutants.DropsResidualGradient: "): dsum[",
    fused_mutants.BackwardIntoDy: "modified its input dy in place",
}


@pytest.mark.parametrize("mutant", fused_mutants.FORWARD_MUTANTS + fused_mutants.BACKWARD_MUTANTS,
                         ids=lambda m: m.name)
def test_every_fused_mutant_fails_naming_what_it_broke(mutant):
    forward = mutant in fused_mutants.FORWARD_MUTANTS
    found = failures(mutant(), range(1), forward=forward, backward=not forward, first=True)
    assert found, f"{mutant.name} ({mutant.__doc__.strip()}) passed every fused case"
    assert NAMED[mutant] in found[0][2], found[0]


def test_the_tail_mutant_fails_at_the_field_hidden_size():
    """The vector tail into the next row fails at 769, where the field found it, not only somewhere."""
    case = next(c for c in FORWARD if c.family == "residual" and c.hidden == 769 and c.rows == 65)
    with pytest.raises(ConformanceError, match=r"\): y\["):
        conformance.check_forward(fused_mutants.TailIntoNextRow(), cases.make_inputs(case, 0))


def test_a_sum_rounded_through_x_dtype_fails_residual_out():
    """A float32 residual stream added in x's half dtype (rounded twice) is not the one rounding."""

    class ThroughHalf(fused_mutants.FusedKernel):
        name = "mutant-through-half"

        def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
            self._x_dtype = np.asarray(x).dtype
            return super().add_rms_norm(x, residual, normalized_shape, weight, eps)

        def store(self, total, residual):
            return total.astype(self._x_dtype).astype(residual.dtype)

    case = next(c for c in FORWARD if c.norm == "add_rms_norm" and c.residual_type == "float32"
                and c.dtype == "float16")
    with pytest.raises(ConformanceError, match=r"residual_out\[.*rounded once to float32"):
        conformance.check_forward(ThroughHalf(), cases.make_inputs(case, 0))


def test_a_forward_that_returns_y_alone_is_told_the_contract():
    class YAlone(fused_mutants.FusedKernel):
        name = "mutant-y-alone"

        def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
            return super().add_rms_norm(x, residual, normalized_shape, weight, eps)[0]

    case = next(c for c in FORWARD if c.norm == "add_rms_norm")
    with pytest.raises(ConformanceError, match=r"must return the tuple \(y, residual_out\)"):
        conformance.check_forward(YAlone(), cases.make_inputs(case, 0))


def test_a_truncated_residual_out_is_named_and_a_differently_wrong_one_is_not():
    """The diagnosis names truncation only where every element is the exact sum rounded toward zero (the Triton
    interpreter's and vLLM's CPU bfloat16 stores without AVX512-BF16): the truncating mutant gets it, a sum rounded
    twice does not."""
    case = next(c for c in FORWARD if c.norm == "add_rms_norm" and c.dtype == "bfloat16" and c.residual is not None
                and c.residual_type == "bfloat16" and c.rows * c.hidden >= 1000)
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(ConformanceError, match=r"every element is the exact sum truncated \(rounded toward zero\)"):
        conformance.check_forward(fused_mutants.ResidualOutTruncated(), inputs)
    twice = np.asarray(fused.exact_sum(inputs).astype(np.float16).astype(fused.residual_out(inputs).dtype))
    with pytest.raises(ConformanceError, match=r"rounded once to bfloat16") as caught:
        conformance.check_residual_out(fused_mutants.FusedKernel(), inputs, twice)
    assert "truncated" not in str(caught.value)
