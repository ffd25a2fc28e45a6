"""The invariance machinery itself: exact layers, the Table 1 oracles, verdicts, the eps
rule, and the first-order bounds checked against real perturbations."""

from fractions import Fraction

import numpy as np
import pytest

from normbench import cases
from normbench.check import oracle, sensitivity
from normbench.paper import invariances, propagation
from normbench.paper.invariances import FAR, Deviation, Instance
from normbench.paper.layer import exact_product, make_layer
from normbench.paper.normalizations import OracleRowLayerNorm, batch_norm, oracle_normalizers, weight_norm

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


def test_sensitivity_bounds_hold_for_real_perturbations():
    rng = np.random.default_rng(1)
    x = 3.0 + rng.standard_normal((6, 40))
    w, b = rng.standard_normal(40), rng.standard_normal(40)
    dy = 0.5 + rng.standard_normal((6, 40))
    p = 1e-7 * np.abs(x)
    ref = oracle.forward(x, (40,), w, b, 1e-5)
    grads = oracle.backward(dy, ref)
    y_bound, dx_bound = sensitivity.output_perturbation(ref, p), sensitivity.dx_perturbation(ref, grads, p)
    dw_bound = sensitivity.dweight_perturbation(dy, ref, p)
    worst = 0.0
    for _ in range(50):
        other = oracle.forward(_perturbed(x, p, rng), (40,), w, b, 1e-5)
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
