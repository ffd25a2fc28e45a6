"""The invariance machinery itself: exact layers, the Table 1 oracles, verdicts, the eps
rule, and the first-order bounds checked against real perturbations; normbench's RMSNorm
row, each entry checked on the float64 oracles, and which §5.2 gradient properties hold for RMSNorm."""

from fractions import Fraction

import numpy as np
import pytest

from normbench.check import oracle, sensitivity
from normbench.check.conformance import ConformanceError
from normbench.core import cases
from normbench.core.registry import get_registry
from normbench.paper import geometry, invariances, propagation
from normbench.paper.invariances import FAR, Deviation, Instance
from normbench.paper.layer import exact_product, make_layer
from normbench.paper.normalizations import OracleRowLayerNorm, batch_norm, oracle_normalizers, weight_norm
from tests import rms_mutants

LAYER = make_layer(cases.table1_case("float64"), 0)


def test_summed_inputs_are_exact():
    a = LAYER.summed_inputs()
    exact = [[sum(Fraction(x) * Fraction(w) for x, w in zip(LAYER.x[i], LAYER.w[:, j])) for j in range(5)] for i in range(3)]
    assert all(Fraction(a[i, j]) == exact[i][j] for i in range(3) for j in range(5))


def test_every_transformation_keeps_the_summed_inputs_exact():
    for t in invariances.TRANSFORMATIONS.values():
        for dtype in ("float64", "bfloat16"):
            for inst in t.build(LAYER, dtype):
                inst.layer.summed_inputs()  # raises AssertionError when not exact


def test_inexact_products_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(AssertionError, match="not exact in float64"):
        exact_product(rng.standard_normal((4, 32)), rng.standard_normal((32, 8)))


def test_the_layer_does_not_depend_on_dtype_or_eps():
    other = make_layer(cases.table1_case("bfloat16", eps=0.1), 0)
    assert np.array_equal(other.x, LAYER.x) and np.array_equal(other.w, LAYER.w)


def test_batch_and_weight_norm_follow_their_definitions():
    a = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 10.0]])
    w = np.array([[3.0, 0.0], [4.0, 1.0]])
    bn = batch_norm(a, np.ones(2), np.zeros(2), 0.0)
    np.testing.assert_allclose(bn, [[-np.sqrt(1.5), -np.sqrt(1.5)], [0, 0], [np.sqrt(1.5), np.sqrt(1.5)]], atol=1e-15)
    np.testing.assert_allclose(weight_norm(a, w, np.array([2.0, 1.0]), np.array([0.0, 1.0])),
                               [[0.4, 3.0], [1.2, 7.0], [2.0, 11.0]], atol=1e-15)


def test_the_paper_table_is_the_papers():
    assert invariances.PAPER_TABLE1 == {
        "batch": dict(zip(invariances.TRANSFORMATIONS, (True, False, True, True, True, False))),
        "weight": dict(zip(invariances.TRANSFORMATIONS, (True, False, True, False, False, False))),
        "layer": dict(zip(invariances.TRANSFORMATIONS, (True, True, False, True, False, True))),
    }


# -- normbench's RMSNorm row (the paper has none): each entry derived, then checked on the float64 oracles ----------

RMS = oracle_normalizers()["rms"]


def test_the_rmsnorm_row_is_normbenchs_derivation():
    assert invariances.RMS_TABLE1 == dict(zip(invariances.TRANSFORMATIONS, (True, False, False, True, False, True)))
    assert set(invariances.PAPER_TABLE1) == {"batch", "weight", "layer"}  # never presented as the paper's


@pytest.mark.parametrize("key", list(invariances.TRANSFORMATIONS))
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_rmsnorm_oracle_measures_the_derived_row(key, eps):
    deviations = invariances.measure(RMS, LAYER, key, "float64", eps)
    assert invariances.verdict(deviations) == invariances.expected("rms", key)


@pytest.mark.parametrize("delta", invariances.SCALES)
def test_rmsnorm_rescaling_is_exact_with_the_eps_rule(delta):
    """rms(delta*a) = |delta|*sqrt(mean(a^2) + eps/delta^2) under eps: RMS_eps(delta*a) = RMS_(eps/delta^2)(a)."""
    a = LAYER.summed_inputs()
    scaled = oracle.forward(delta * a, (a.shape[1],), LAYER.gain, None, 1e-5, "rms_norm").y
    plain = oracle.forward(a, (a.shape[1],), LAYER.gain, None, 1e-5 / delta**2, "rms_norm").y
    np.testing.assert_allclose(scaled, plain, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("key", ["weight_matrix_recentering", "dataset_recentering"])
def test_rmsnorm_is_not_invariant_to_recentering_because_nothing_subtracts_the_mean(key):
    """Weight-matrix re-centering adds a constant per case (gamma.x_i), dataset re-centering one per unit
    (c*sum_i W_ij). LayerNorm, which subtracts the case's mean, is invariant to the first (Table 1);
    RMSNorm, which subtracts nothing, to neither."""
    instance = invariances.TRANSFORMATIONS[key].build(LAYER, "float64")[0]
    shift = instance.layer.summed_inputs() - LAYER.summed_inputs()
    per_case = np.ptp(shift, axis=1).max() <= 1e-12 * np.abs(shift).max()
    assert per_case == (key == "weight_matrix_recentering")
    centred = invariances.LayerNormalizer(OracleRowLayerNorm())
    assert invariances.compare(centred, LAYER, instance, 0.0).verdict == ("Invariant" if per_case else "No")
    assert invariances.compare(RMS, LAYER, instance, 0.0).verdict == "No"


@pytest.mark.parametrize("change, verdict", [(0.5, "Invariant"), (1.0, "Invariant"), (1.5, "unclear"),
                                             (FAR * 0.99, "unclear"), (FAR, "No"), (np.inf, "unclear")])
def test_verdicts(change, verdict):
    d = Deviation(Instance("t", LAYER), np.array([[0.0, change]]), np.array([[1.0, 1.0]]))
    assert d.verdict == verdict


def test_a_cell_needs_every_instance():
    inv = Deviation(Instance("a", LAYER), np.zeros((1, 1)), np.ones((1, 1)))
    far = Deviation(Instance("b", LAYER), np.full((1, 1), 2 * FAR), np.ones((1, 1)))
    assert invariances.verdict([inv, inv]) == "Invariant" and invariances.verdict([far, far]) == "No"
    assert invariances.verdict([inv, far]) == "unclear"


def test_the_eps_rule_is_needed():
    """NUMERICS.md: LN_eps(delta*a) and LN_eps(a) differ by O(1) at delta ~ 1e-3; with
    eps/delta^2 on the unscaled side they agree within the bound."""
    norm = oracle_normalizers()["layer"]
    scaled = invariances.TRANSFORMATIONS["dataset_rescaling"].build(LAYER, "float64")[0]
    naive = Instance(scaled.label, scaled.layer, None)
    assert invariances.compare(norm, LAYER, scaled, 1e-5).verdict == "Invariant"
    assert invariances.compare(norm, LAYER, naive, 1e-5).max_change > 0.5


def test_single_case_rescaling_normalizes_the_scaled_row_alone():
    norm = oracle_normalizers()["layer"]
    inst = invariances.TRANSFORMATIONS["single_case_rescaling"].build(LAYER, "float64")[0]
    assert invariances.compare(norm, LAYER, inst, 1e-5).verdict == "Invariant"
    with pytest.raises(Exception, match="no exact counterpart"):
        invariances.compare(oracle_normalizers()["batch"], LAYER, inst, 1e-5)


def _perturbed(x, p, rng):
    return x + p * rng.uniform(-1, 1, x.shape)


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_sensitivity_bounds_hold_for_real_perturbations(norm):
    rng = np.random.default_rng(1)
    x = 3.0 + rng.standard_normal((6, 40))
    w, b = rng.standard_normal(40), (rng.standard_normal(40) if norm == "layer_norm" else None)
    dy = 0.5 + rng.standard_normal((6, 40))
    p = 1e-7 * np.abs(x)
    ref = oracle.forward(x, (40,), w, b, 1e-5, norm)
    grads = oracle.backward(dy, ref)
    y_bound, dx_bound = sensitivity.output_perturbation(ref, p), sensitivity.dx_perturbation(ref, grads, p)
    dw_bound = sensitivity.dweight_perturbation(dy, ref, p)
    worst = 0.0
    for _ in range(50):
        other = oracle.forward(_perturbed(x, p, rng), (40,), w, b, 1e-5, norm)
        other_grads = oracle.backward(dy, other)
        for got, want, bound in ((other.y, ref.y, y_bound), (other_grads.dx, grads.dx, dx_bound),
                                 (other_grads.dweight, grads.dweight, dw_bound)):
            assert (np.abs(got - want) <= bound).all()
            worst = max(worst, float((np.abs(got - want) / bound).max()))
    assert worst > 0.05, "the bounds are far looser than any perturbation reaches"


def test_the_jacobian_matches_finite_differences():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 12)), rng.standard_normal(12)
    ref = oracle.forward(x, (12,), w, None, 0.1)
    jac = propagation.ln_jacobian(ref)
    h = 1e-6
    for j in range(12):
        step = np.zeros(12)
        step[j] = h
        fd = (oracle.forward(x + step, (12,), w, None, 0.1).y - oracle.forward(x - step, (12,), w, None, 0.1).y) / (2 * h)
        np.testing.assert_allclose(jac[:, :, j], fd, atol=1e-8)
    m = rng.standard_normal((12, 5))
    np.testing.assert_allclose(propagation.ln_jacobian_times(ref, m), jac @ m, atol=1e-13)


def test_propagated_bound_covers_a_linear_recurrence():
    """e_t = A_t e_{t-1} + l_t with random signs: the bound covers every realization."""
    rng = np.random.default_rng(3)
    steps, size = 40, 6
    jacs = [0.6 * rng.standard_normal((1, size, size)) / np.sqrt(size) for _ in range(steps)]
    local = [rng.uniform(0.5, 1.0, (1, size)) for _ in range(steps)]
    at = propagation.checkpoints(steps)
    bound = propagation.propagated_bound(jacs, local, at)
    for _ in range(200):
        e, errs = np.zeros((1, size)), []
        for t in range(steps):
            e = np.einsum("bij,bj->bi", jacs[t], e) + local[t] * rng.choice([-1.0, 1.0], (1, size))
            errs.append(e)
        assert (np.abs(np.stack(errs)[at]) <= bound * (1 + 1e-12)).all()
    assert bound.max() < 10, "a contracting recurrence must keep a bounded bound"


@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_recurrent_oracle_runs_are_invariant(eps):
    """With eps > 0 the unscaled run uses eps/delta^2 in the LayerNorms whose input delta scales."""
    from normbench.paper import recurrent

    for case, kind in ((cases.RNN_CASES[0], "rnn"), (cases.LSTM_CASES[0], "lstm")):
        result = recurrent.measure(OracleRowLayerNorm(), recurrent.make_network(case, 0, kind), eps)
        assert all(result.ratio(d) <= 1 and result.plain_ratio(d) >= FAR for d in recurrent.RNN_SCALES)


# -- §5.2 for RMSNorm (normbench.paper.geometry): which gradient properties hold, derived there ------------------


@pytest.fixture(scope="module")
def rms_geometry_cases():
    return {c.id: c for c in cases.geometry_cases("rms_norm")}


@pytest.mark.parametrize("case_id", ["rms-float32-rows16-hidden100-normal", "rms-bfloat16-rows16-hidden100-normal",
                                     "rms-float32-rows16-hidden8x16-normal", "rms-float32-rows16-hidden100-normal-eps0.1"])
def test_a_correct_rmsnorm_has_the_gradient_properties(rms_geometry_cases, case_id):
    case = rms_geometry_cases[case_id]
    for backend in (get_registry().select("numpy").backends[0], rms_mutants.RmsKernel()):
        geometry.check_weight_matrix_gradient(backend, case, 0)
        geometry.check_gain_gradient(backend, case, 0)
        geometry.check_gradient_identities(backend, case, 0)


def test_rmsnorm_has_no_shift_identity_and_the_check_does_not_ask_for_one():
    """RMSNorm's dx = r*(g - xhat*m): its rows do not sum to 0 (RMSNorm is not invariant to a shift)."""
    a = LAYER.summed_inputs()
    dy = 0.5 + np.random.default_rng(0).standard_normal(a.shape)
    grads = oracle.backward(dy, oracle.forward(a, (a.shape[1],), LAYER.gain, None, 0.0, "rms_norm"))
    assert np.abs(grads.dx.sum(axis=1)).min() > 1e-3


@pytest.mark.parametrize("mutant, check, message", [
    ("NoProjection", "check_gradient_identities", "re-scaling a row changes RMSNorm only through eps"),
    ("EpsOutsideSqrt", "check_weight_matrix_gradient", "must scale dL/dW by 1/"),
    ("EpsOutsideSqrt", "check_gain_gradient", "must not change the gain's gradient"),
])
def test_a_wrong_rmsnorm_backward_breaks_its_gradient_property(rms_geometry_cases, mutant, check, message):
    with pytest.raises(ConformanceError, match=message):
        getattr(geometry, check)(getattr(rms_mutants, mutant)(), rms_geometry_cases["rms-float32-rows16-hidden100-normal"], 0)
