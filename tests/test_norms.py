"""RMSNorm beside LayerNorm: one set of case families for both, one way to call a backend, and
LayerNorm-only backends unaffected (their RMSNorm cases skip, saying why)."""

import numpy as np
import pytest

from normbench.check import conformance, oracle
from normbench.core import cases, norms
from normbench.core.exceptions import InvalidInput
from normbench.impls.numpy_ref import NumpyBackend


def test_every_rmsnorm_case_is_named_as_one_and_has_no_bias():
    rms = [c for c in cases.FORWARD_CASES + cases.BACKWARD_CASES + cases.GRADCHECK_CASES if c.norm == "rms_norm"]
    assert rms and all(c.id.startswith("rms-") and c.affine in ("w", "none") for c in rms)
    assert not any(c.id.startswith("rms-") for c in cases.FORWARD_CASES if c.norm == "layer_norm")


@pytest.mark.parametrize("listing", ["FORWARD_CASES", "BACKWARD_CASES", "GRADCHECK_CASES"])
def test_both_normalizations_run_every_case_family(listing):
    by_norm = {n: {c.family for c in cases.CASE_LISTS[listing] if c.norm == n} for n in norms.NAMES}
    assert by_norm["layer_norm"] == by_norm["rms_norm"]


def test_an_rmsnorm_case_refuses_a_bias_and_takes_eps_none():
    with pytest.raises(InvalidInput, match="RMSNorm has no bias"):
        cases.Case("x", (2, 4), (4,), "float32", affine="b", norm="rms_norm")
    with pytest.raises(InvalidInput, match="eps must be a finite number"):
        cases.Case("x", (2, 4), (4,), "float32", eps=None)  # LayerNorm has no default eps
    case = cases.Case("x", (2, 4), (4,), "bfloat16", eps=None, norm="rms_norm")
    assert case.id == "rms-bfloat16-rows2-hidden4-normal-epsdefault" and case.eps_value == 2.0**-23


def test_the_oracle_is_layernorm_without_centring():
    rng = np.random.default_rng(0)
    x, w = 3 + rng.standard_normal((4, 9)), rng.standard_normal(9)
    ref = oracle.forward(x, (9,), w, None, 1e-5, norm="rms_norm")
    r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ref.y, x * r * w, rtol=1e-14)
    dy = rng.standard_normal((4, 9))
    grads = oracle.backward(dy, ref)
    # the closed form against a central difference of the exact function, row by row
    v = rng.standard_normal((4, 9))
    h = 1e-6
    f = lambda z: (dy * (z / np.sqrt((z * z).mean(axis=1, keepdims=True) + 1e-5) * w)).sum()
    assert abs((f(x + h * v) - f(x - h * v)) / (2 * h) - (grads.dx * v).sum()) < 1e-7
    np.testing.assert_allclose(grads.dweight, (dy * x * r).sum(axis=0), rtol=1e-13)


class LayerNormOnly(NumpyBackend):
    name = "lnonly"
    normalizations = ("layer_norm",)


def test_a_layernorm_only_backend_skips_rmsnorm_cases_saying_why():
    case = next(c for c in cases.FORWARD_CASES if c.norm == "rms_norm")
    reason = conformance.skip_reason(LayerNormOnly(), case)
    assert "lnonly implements layer_norm only, not rms_norm" in reason
    assert "declare normalizations = ('layer_norm', 'rms_norm') and define rms_norm" in reason


def test_the_norm_calls_the_backends_rmsnorm_and_gives_three_gradients():
    backend = NumpyBackend()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    y = norms.RMS_NORM.forward(backend, x, (8,), w, None, 1e-6)
    np.testing.assert_array_equal(y, backend.rms_norm(x, (8,), w, 1e-6))
    dx, dweight, dbias = norms.RMS_NORM.backward(backend, x, x, (8,), w, None, 1e-6)
    assert dbias is None and dx.shape == x.shape and dweight.shape == (8,)
    with pytest.raises(InvalidInput, match="RMSNorm has no bias"):
        norms.RMS_NORM.forward(backend, x, (8,), w, w, 1e-6)


def test_normbench_check_takes_the_normalization(capsys):
    from normbench.front.cli import main

    assert main(["check", "--impl=numpy", "--shape=4x100", "--norm=rms_norm", "--dtype=bfloat16"]) == 0
    assert "PASS numpy rms-bfloat16-rows4-hidden100-normal (seed 0)" in capsys.readouterr().out
    assert main(["check", "--impl=numpy", "--shape=4x100", "--norm=rms_norm", "--affine=wb"]) == 2
    assert "--affine=wb: RMSNorm has no bias, so affine must be 'w' or 'none'" in capsys.readouterr().err
