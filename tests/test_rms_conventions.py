"""RMSNorm's rounding conventions and bug classes, in process and cheap: each mutant fails for the
reason it was written for, on the case built to show it, and each correct convention passes those
same cases (the sweeps over every case and seeds 0..19 run in ``tests/test_mutants.py`` and as the
documented command in README)."""

import pytest

from normbench.check import conformance
from normbench.core import cases
from normbench.paper import invariances
from tests import rms_mutants

CASES = {c.id: c for c in cases.FORWARD_CASES + cases.BACKWARD_CASES}

#: mutant, the case built to catch it, and what its failure must say
CAUGHT = [
    (rms_mutants.HalfSumOfSquares, "rms-float16-rows4-hidden4096-big300", "y["),
    (rms_mutants.EpsOutsideSqrt, "rms-float32-rows8-hidden64-sigmasqrteps-eps0.5", "y["),
    (rms_mutants.MeanSubtracted, "rms-float32-rows5-hidden33-offset3", "y["),
    (rms_mutants.OnePlusWeight, "rms-float32-rows7-hidden100-uniform9", "y["),
    (rms_mutants.PaddedLanes, "rms-float32-rows5-hidden33-offset3", "y["),
    # within every element's bound; the coherence checks see the same scale error along the row
    (rms_mutants.RstdInInputDtype, "rms-float16-rows3-hidden8192-offset3", "coherent structure"),
]


@pytest.mark.parametrize("mutant, case_id, says", CAUGHT, ids=[m.name for m, _, _ in CAUGHT])
def test_each_forward_mutant_fails_for_its_bug(mutant, case_id, says):
    with pytest.raises(conformance.ConformanceError) as failure:
        conformance.check_forward(mutant(), cases.make_inputs(CASES[case_id], 0))
    assert says in str(failure.value)


BACKWARD = [
    (rms_mutants.NoProjection, "rms-float32-rows5-hidden129-offset3", "dx["),
    (rms_mutants.BackwardMeanTerm, "rms-float32-rows5-hidden129-offset3", "dx["),
    (rms_mutants.DweightHalfAccumulation, "rms-bfloat16-rows65537-hidden8-offset3", "dweight["),
]


@pytest.mark.parametrize("mutant, case_id, says", BACKWARD, ids=[m.name for m, _, _ in BACKWARD])
def test_each_backward_mutant_fails_for_its_bug(mutant, case_id, says):
    case = CASES[case_id]
    with pytest.raises(conformance.ConformanceError) as failure:
        conformance.check_backward(mutant(), cases.make_inputs(case, 0), cases.make_dy(case, 0))
    assert says in str(failure.value)


@pytest.mark.parametrize("variant", [rms_mutants.RmsKernel, *rms_mutants.CORRECT_VARIANTS], ids=lambda v: v.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_correct_conventions_pass_the_cases_that_catch_the_mutants(variant, seed):
    for _, case_id, _ in CAUGHT:
        conformance.check_forward(variant(), cases.make_inputs(CASES[case_id], seed))
    for _, case_id, _ in BACKWARD:
        case = CASES[case_id]
        conformance.check_backward(variant(), cases.make_inputs(case, seed), cases.make_dy(case, seed))


# -- normbench's Table 1 row for RMSNorm (normbench.paper.invariances.RMS_TABLE1) ---------------------------------

TABLE1_CASE = cases.table1_case("float32", norm="rms_norm")


@pytest.mark.parametrize("key", sorted(invariances.RMS_TABLE1))
def test_a_correct_rmsnorm_has_normbenchs_table1_row(key):
    invariances.check_column(rms_mutants.RmsKernel(), TABLE1_CASE, 0, key)


def test_eps_outside_the_sqrt_breaks_rmsnorms_rescaling_invariance():
    # RMSNorm_eps(delta*a) = RMSNorm_(eps/delta^2)(a) holds only with eps under the square root
    with pytest.raises(conformance.ConformanceError, match="RMSNorm is invariant to dataset re-scaling"):
        invariances.check_column(rms_mutants.EpsOutsideSqrt(), TABLE1_CASE, 0, "dataset_rescaling")
