"""Each backward check on its own: it fails on the bug it targets, with a message that
says which gradient and why, and it passes on correct code (no check that cannot fail).

The float64 checks (finite differences) cannot be shown failing by the fp32 mutants
of tests/mutants.py, so float64 NumPy mutants live here.
"""

import numpy as np
import pytest

from normbench.check import conformance, error_model, gradcheck, identities, oracle
from normbench.core import cases
from normbench.impls.numpy_ref import NumpyBackend
from tests import mutants


def case(shape=(6, 64), dtype="float32", **kw):
    return cases.Case("t", shape, shape[-1:], dtype, **({"dist": "offset3"} | kw))


def inputs_and_dy(c, seed=0):
    return cases.make_inputs(c, seed), cases.make_dy(c, seed)


def run(backend, c, seed=0):
    inputs, dy = inputs_and_dy(c, seed)
    return inputs, dy, conformance.run_backward(backend, inputs, dy)


# -- what layer_norm_backward returns ---------------------------------------------------------


@pytest.mark.parametrize("mutant, c, message", [
    (mutants.MissingWeightGrad(), case(), "dweight is None, but weight was given"),
    (mutants.WrongGradShape(), cases.Case("t", (3, 6, 129), (6, 129), "float32"),
     "dweight has shape (774,), expected (6, 129)"),
    (mutants.WrongGradDtype(), case(dtype="bfloat16"), "dx has dtype float32, expected bfloat16"),
])
def test_wrong_returns_say_what_is_wrong(mutant, c, message):
    with pytest.raises(conformance.ConformanceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(mutant, c)


class ReturnsTwo(mutants.Fp32Kernel):
    name = "returns-two"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)[:2]


class GradForAbsentBias(mutants.Fp32Kernel):
    name = "grad-for-absent-bias"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, _ = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        return dx, dw, np.zeros(normalized_shape, np.asarray(x).dtype)


def test_a_tuple_of_three_with_none_for_absent_parameters():
    with pytest.raises(conformance.ConformanceError, match=r"returned a tuple of 2; it must return the tuple"):
        run(ReturnsTwo(), case())
    with pytest.raises(conformance.ConformanceError, match="dbias is a ndarray, but bias was None"):
        run(GradForAbsentBias(), case(affine="w"))


def test_backend_without_backward_is_skipped_with_the_reason():
    class NoBackward(mutants.Fp32Kernel):
        name = "no-backward"
        has_backward = False

    c = next(c for c in cases.BACKWARD_CASES if c.dtype == "float32")
    reason = conformance.skip_reason(NoBackward(), c, backward=True)
    assert reason == "backend 'no-backward' has no backward (has_backward = False)"
    assert conformance.skip_reason(NoBackward(), c) is None


def test_broadcast_dy_is_stride_0_and_skipped_without_strides():
    c = next(c for c in cases.BACKWARD_CASES if c.dy_broadcast and c.layout == "contiguous")
    assert cases.make_dy(c, 0).strides[0] == 0
    assert "stride-0 (broadcast) dy does not apply" in conformance.skip_reason(
        type("Flat", (mutants.Fp32Kernel,), {"name": "flat", "strided": False})(), c, backward=True)


def test_dy_has_nonzero_row_means_and_is_never_all_ones():
    for c in cases.BACKWARD_CASES[:20]:
        dy = np.asarray(cases.make_dy(c, 0), np.float64).reshape(c.rows, c.hidden)
        if c.rows and c.hidden > 8:
            assert (np.abs(dy.mean(axis=1)) > 0.2).mean() > 0.7, c.id
            assert not np.all(dy == 1)


# -- values -------------------------------------------------------------------------------------


def test_values_name_the_gradient_and_worst_element():
    inputs, dy, result = run(mutants.DbiasTimesWeight(), case())
    with pytest.raises(conformance.ConformanceError) as info:
        conformance.check_backward_values(mutants.DbiasTimesWeight(), inputs, dy, result)
    message = str(info.value)
    assert "dbias[" in message and "float64 reference" in message and "> bound" in message
    assert "make_dy(<case float32-rows6-hidden64-offset3>, seed=0)" in message


def test_n1_dweight_is_zero_up_to_one_rounding():
    c = case(shape=(9, 1), dist="offset1e3")
    inputs, dy, result = run(mutants.Fp32Kernel(), c)
    conformance.check_backward_values(mutants.Fp32Kernel(), inputs, dy, result)
    assert np.all(result.dweight == 0)  # a two-pass kernel gets exactly 0
    ref = conformance.reference(inputs)
    general = error_model.backward_bounds(dy, ref, oracle.backward(dy, ref), c.dtype)[1]
    result.dweight = (0.5 * general).astype(result.dweight.dtype)  # within the general bound, not N = 1's
    with pytest.raises(conformance.ConformanceError, match="N = 1: xhat = x - mean = 0 exactly"):
        conformance.check_backward_values(mutants.Fp32Kernel(), inputs, dy, result)


def test_n1_bound_is_one_rounding_of_mean_times_rstd():
    """A kernel computing xhat as fma(x, rstd, -(mean*rstd)) (torch CPU) stays within it, and
    the bound is far below the general dweight bound at N = 1."""
    c = case(shape=(9, 1), dist="offset1e3")
    inputs, dy = inputs_and_dy(c)
    ref = conformance.reference(inputs)
    x = ref.x.astype(np.float32)
    r = (np.float32(1) / np.sqrt(np.float32(c.eps))).astype(np.float32)
    b = -(x * r)  # rounded product, as the fma form's addend
    xhat = (x.astype(np.float64) * np.float64(r) + b.astype(np.float64))  # the fma: exact product, one rounding
    dweight = (np.asarray(dy, np.float64) * xhat).sum(axis=0)
    bound = error_model.n1_dweight_bound(dy, ref, c.dtype)
    general = error_model.backward_bounds(dy, ref, oracle.backward(dy, ref), c.dtype)[1]
    assert np.all(np.abs(dweight) <= bound) and np.any(dweight != 0)
    assert np.all(bound * 20 < general)


# -- reference-free identities --------------------------------------------------------------------


def test_row_sums_catch_a_dropped_mean_term():
    c = case()
    conformance_ok = run(mutants.Fp32Kernel(), c)
    identities.check_row_sums(mutants.Fp32Kernel(), *conformance_ok)
    with pytest.raises(conformance.ConformanceError, match=r"sum\(dx\) = .* in row"):
        identities.check_row_sums(mutants.NoMeanTerm(), *run(mutants.NoMeanTerm(), c))


def test_xhat_projection_catches_a_dropped_projection_and_needs_eps_0():
    c = case(dist="normal", eps=0.0)
    identities.check_xhat_projection(mutants.Fp32Kernel(), *run(mutants.Fp32Kernel(), c))
    identities.check_row_sums(mutants.NoProjection(), *run(mutants.NoProjection(), c))  # invisible to row sums
    with pytest.raises(conformance.ConformanceError, match=r"sum\(xhat\*dx\)"):
        identities.check_xhat_projection(mutants.NoProjection(), *run(mutants.NoProjection(), c))
    with pytest.raises(ValueError, match="only for eps = 0"):
        identities.check_xhat_projection(mutants.Fp32Kernel(), *run(mutants.Fp32Kernel(), case()))


def test_xhat_projection_is_not_zero_with_eps():
    """The identity really is for eps = 0 only: the closed form gives r*N*mean(g*xhat)*eps/(var + eps)."""
    c = case(dist="sigmasqrteps", eps=1e-3)
    inputs, dy = inputs_and_dy(c)
    ref = conformance.reference(inputs)
    grads = oracle.backward(dy, ref)
    sums = (ref.xhat * grads.dx).sum(axis=1)
    expected = ref.rstd * c.hidden * (grads.g * ref.xhat).mean(axis=1) * c.eps / ref.sigma_eps**2
    np.testing.assert_allclose(sums, expected, rtol=1e-9)


def test_dbias_independence_catches_swapped_gradients():
    c = case()
    identities.check_dbias_independent_of_x(mutants.Fp32Kernel(), *run(mutants.Fp32Kernel(), c))
    with pytest.raises(conformance.ConformanceError, match="dbias depends on x"):
        identities.check_dbias_independent_of_x(mutants.SwappedParamGrads(), *run(mutants.SwappedParamGrads(), c))


# -- finite differences (float64) --------------------------------------------------------------


class NumpyNoMeanTerm(NumpyBackend):
    name = "numpy-no-mean-term"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        g = np.asarray(dy) * (1.0 if weight is None else np.asarray(weight))
        return dx + g.mean(axis=-1, keepdims=True) * super()._statistics64(x, normalized_shape, eps)[3], dw, db


class NumpyDweightFromY(NumpyBackend):
    name = "numpy-dweight-from-y"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        y = self.layer_norm(x, normalized_shape, weight, bias, eps)
        return dx, None if dw is None else (np.asarray(dy) * y).reshape(-1, dw.size).sum(axis=0), db


class NumpyDbiasTimesWeight(NumpyBackend):
    name = "numpy-dbias-times-weight"

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        dx, dw, db = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        w = 1.0 if weight is None else np.asarray(weight)
        return dx, dw, None if db is None else (np.asarray(dy) * w).reshape(-1, db.size).sum(axis=0)


@pytest.mark.parametrize("c", cases.GRADCHECK_CASES, ids=str)
def test_finite_differences_pass_on_correct_code(c):
    gradcheck.check_directional_derivatives(NumpyBackend(), *inputs_and_dy(c))


@pytest.mark.parametrize("impl, gradient", [(NumpyNoMeanTerm(), "dx"), (NumpyDweightFromY(), "dweight"),
                                               (NumpyDbiasTimesWeight(), "dbias")], ids=lambda v: getattr(v, "name", v))
def test_finite_differences_name_the_wrong_gradient(impl, gradient):
    c = cases.Case("t", (4, 64), (64,), "float64", "sigma1e-3")
    with pytest.raises(conformance.ConformanceError, match=rf"{gradient} disagrees with the backend's own forward"):
        gradcheck.check_directional_derivatives(impl, *inputs_and_dy(c))


def test_finite_differences_are_tight():
    """Not a vacuous check (bug class 20): the bound is a tiny fraction of the directional derivative."""
    c = cases.Case("t", (4, 1000), (1000,), "float64", "offset1e3")
    inputs, dy = inputs_and_dy(c)
    for what, point in gradcheck.directions(inputs):
        result = gradcheck.compare(NumpyBackend(), inputs, dy, what, point)
        assert result.ok and result.bound < 1e-5 * abs(result.backward), (what, result)


def test_perturbed_points_are_exact():
    inputs, _ = inputs_and_dy(cases.Case("t", (4, 100), (100,), "float64", "offset1e3"))
    for _, point in gradcheck.directions(inputs):
        for p, v in ((point.x, point.vx), (point.weight, point.vw), (point.bias, point.vb)):
            if v is not None:
                plus, minus = p + v, p - v
                assert np.array_equal(plus - p, v) and np.array_equal(p - minus, v)


def test_truncation_bound_holds_and_is_not_loose(monkeypatch):
    """With a large step (alpha = 0.05) truncation dominates every other error: the
    derived bound T must cover the observed error, and be within 2x of it."""
    monkeypatch.setattr(gradcheck, "ALPHA", 0.05)
    for dist in ("normal", "outlier", "uniform0to10"):
        c = cases.Case("t", (6, 64), (64,), "float64", dist)
        inputs, dy = inputs_and_dy(c)
        what, point = gradcheck.directions(inputs)[0]
        result = gradcheck.compare(NumpyBackend(), inputs, dy, what, point)
        observed = abs(result.central - result.backward)
        assert observed > 100 * (result.forward_rounding + result.backward_rounding + result.host)
        assert observed <= result.truncation < 2 * observed, (dist, observed, result.truncation)
