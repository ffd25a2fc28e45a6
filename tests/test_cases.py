import numpy as np
import pytest

from normbench.core import cases, operations
from normbench.core.dtypes import DTYPES
from normbench.core.exceptions import InvalidInput


def test_ids_are_unique_and_readable():
    ids = [c.id for c in cases.FORWARD_CASES]
    assert len(ids) == len(set(ids))
    assert "float16-rows5-hidden1000-offset3" in ids


def test_every_forward_family_and_dtype_is_covered():
    covered = {(c.family, c.dtype) for c in cases.FORWARD_CASES}
    for family in ("hidden", "multidim", "rows", "rank", "affine", "mixed", "eps", "dist", "layout", "nonfinite"):
        assert any(f == family for f, _ in covered), family
    assert {c.dtype for c in cases.FORWARD_CASES} == set(DTYPES)
    assert set(cases.HIDDEN) <= {c.hidden for c in cases.FORWARD_CASES}
    assert {len(c.shape) for c in cases.FORWARD_CASES} >= {1, 2, 3, 4, 5}
    assert {c.rows for c in cases.FORWARD_CASES} >= set(cases.ROWS) | {65537}
    assert set(cases.EPS) <= {c.eps for c in cases.FORWARD_CASES}
    assert set(cases.AFFINES) == {c.affine for c in cases.FORWARD_CASES}


def test_inputs_are_reproducible_and_depend_on_the_seed():
    case = cases.FORWARD_CASES[10]
    a, b, c = cases.make_inputs(case, 3), cases.make_inputs(case, 3), cases.make_inputs(case, 4)
    assert a.x.tobytes() == b.x.tobytes()
    assert a.x.tobytes() != c.x.tobytes()


def test_inputs_are_rounded_to_their_dtypes():
    case = cases.Case("t", (4, 16), (16,), "bfloat16", "offset3", param_dtype="float32")
    inputs = cases.make_inputs(case, 0)
    assert inputs.x.dtype.name == "bfloat16" and inputs.weight.dtype == np.float32


def test_poisoned_rows_hold_one_nan_and_one_inf():
    x = cases.make_inputs(cases.Case("t", (6, 64), (64,), "float32", "poisoned"), 0).x
    assert np.isnan(x[1]).sum() == 1 and np.isinf(x[2]).sum() == 1 and np.isfinite(x[[0, 3, 4, 5]]).all()


@pytest.mark.parametrize("kwargs, message", [
    (dict(shape=(4, 8), normalized_shape=(16,)), "does not end with normalized_shape"),
    (dict(eps=float("nan")), "eps must be a finite number"),
    (dict(eps=-1.0), "eps must be a finite number"),
    (dict(dtype="float8"), "unknown dtype 'float8'"),
    (dict(dist="cauchy"), "unknown distribution"),
    (dict(layout="transposed", shape=(2, 3, 8)), "needs a rank-2 shape"),
    # issue 45: x was built as (1, 32) for a (4, 8) weight
    (dict(layout="transposed", shape=(4, 8), normalized_shape=(4, 8)), r"normalized over its last dim, got shape "
                                                                       r"\(4, 8\) normalized over \(4, 8\)"),
    # issue 45: a scale that is inf or 0 in float32 passed with overflow warnings; a string was a TypeError
    (dict(norm="rms_norm_quant", qdtype="int8", scale=1e39), r"needs a scale, a number finite and > 0 in float32"),
    (dict(norm="rms_norm_quant", qdtype="int8", scale=1e-46), r"needs a scale, a number finite and > 0 in float32"),
    (dict(norm="rms_norm_quant", qdtype="int8", scale="1"), r"needs a scale, .* got scale '1'"),
    (dict(norm="rms_norm_quant", qdtype="int8", scale=True), r"needs a scale, .* got scale True"),
    (dict(norm="rms_norm_dynamic_quant", qdtype="int8", scale_ub="1"), r"scale_ub None or a number finite and > 0 "
                                                                        r"in float32.*got scale None, scale_ub '1'"),
    (dict(norm="rms_norm_dynamic_quant", qdtype="int8", scale_ub=1e39), r"scale_ub None or a number finite"),
])
def test_bad_cases_say_what_is_wrong(kwargs, message):
    args = dict(family="t", shape=(4, 8), normalized_shape=(8,), dtype="float32") | kwargs
    with pytest.raises(InvalidInput, match=message):
        cases.Case(**args)


def test_user_arrays_are_validated():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(InvalidInput, match="weight has shape"):
        cases.inputs_from_arrays(x, (8,), weight=np.ones(7, np.float32))
    inputs = cases.inputs_from_arrays(x, (8,), weight=np.ones(8, np.float32))
    assert inputs.case.affine == "w" and inputs.case.dtype == "float32"


def test_case_lists_is_the_one_registry():
    """Every module-level list of cases is in CASE_LISTS under its own name (so ALL_FAMILIES and
    the report's family lookup see it), and every list the report maps a suite to is one of them."""
    from normbench.report.shape import SUITE_CASES

    lists = {name: value for name, value in vars(cases).items()
             if isinstance(value, list) and value and all(isinstance(c, cases.Case) for c in value)}
    assert {n: id(v) for n, v in lists.items()} == {n: id(v) for n, v in cases.CASE_LISTS.items()}
    assert {name for names in SUITE_CASES.values() for name in names} <= set(cases.CASE_LISTS)
    assert cases.ALL_FAMILIES == tuple(dict.fromkeys(c.family for v in cases.CASE_LISTS.values() for c in v))


def test_backward_cases_cover_what_the_gradient_bugs_need():
    bw = cases.BACKWARD_CASES
    ids = [c.id for c in bw]
    assert len(ids) == len(set(ids))
    assert {c.family for c in bw + cases.GRADCHECK_CASES} <= set(cases.ALL_FAMILIES)
    assert "gradcheck" in cases.ALL_FAMILIES
    assert set(cases.AFFINES) == {c.affine for c in bw}
    assert {(8, 16), (6, 129)} <= {c.normalized_shape for c in bw}
    assert {0, 1, 1025, 65537} <= {c.rows for c in bw}
    assert {c.dtype for c in bw if c.rows >= 1025} >= {"float32", "float16", "bfloat16"}
    assert any(c.hidden == 1 for c in bw) and any(c.dist == "sigmasqrteps" for c in bw)
    assert any(c.eps == 0 for c in bw) and any(c.dy_broadcast for c in bw)
    assert set(cases.LAYOUTS[1:]) <= {c.layout for c in bw}
    assert {c.dtype for c in cases.GRADCHECK_CASES} == {"float64"}


def test_dy_is_laid_out_like_x_or_broadcast():
    strided = next(c for c in cases.BACKWARD_CASES if c.layout == "step2")
    dy = cases.make_dy(strided, 0)
    assert dy.shape == strided.shape and not dy.flags.c_contiguous and dy.dtype == np.float32
    broadcast = next(c for c in cases.BACKWARD_CASES if c.dy_broadcast and len(c.shape) == 3)
    dy = cases.make_dy(broadcast, 0)
    assert dy.shape == broadcast.shape and dy.strides[:2] == (0, 0)
    assert cases.make_dy(strided, 0).tobytes() == cases.make_dy(strided, 0).tobytes()
    assert "dybroadcast" in broadcast.id


@pytest.mark.parametrize("op", operations.OPERATIONS, ids=str)
@pytest.mark.parametrize("suite", ["forward", "backward", "gradcheck", "invariance", "geometry"])
def test_every_family_runs_at_a_multiple_of_128_and_at_an_odd_size(op, suite):
    """A kernel that takes only multiples of 8 (or 16, or 128) still gets every family, and a vector tail at an odd
    size is in every family too: before, the layout family ran at hidden 100 alone, so such a kernel had no layout
    coverage and one that ignored strides at other sizes passed."""
    sizes: dict[str, set[int]] = {}
    for case in cases.suite_cases(op, suite):
        sizes.setdefault(case.family, set()).add(case.hidden)
    for family, found in sizes.items():
        assert any(n % 128 == 0 for n in found), f"{op} {suite} {family}: no multiple of 128 in {sorted(found)}"
        if family != "sweep":  # the sweep family mirrors the throughput sweep's shapes (powers of two); tails: above
            assert any(n % 2 for n in found), f"{op} {suite} {family}: no odd size in {sorted(found)}"


def test_a_hidden_size_rule_is_a_skip_with_its_reason_and_layouts_still_run():
    from normbench.check import conformance
    from normbench.core.backend import Limits
    from tests import mutants

    class EightWide(mutants.Fp32Kernel):
        name = "eight-wide"
        limits = Limits(hidden_multiple=8, source="its docs: hidden must be a multiple of 8")

    backend = EightWide()
    layout = [c for c in cases.suite_cases("layer_norm", "forward") if c.family == "layout"]
    runs = [c for c in layout if conformance.skip_reason(backend, c) is None]
    assert {c.layout for c in runs} == set(cases.LAYOUTS[1:]) and all(c.hidden % 8 == 0 for c in runs)
    odd = next(c for c in layout if c.hidden == cases.ODD)
    assert conformance.skip_reason(backend, odd) == (
        "outside backend 'eight-wide''s documented limits: the normalized size 127 is not a multiple of 8, which "
        "the library requires (its docs: hidden must be a multiple of 8)")
    with pytest.raises(ValueError, match="hidden_multiple=0"):
        Limits(hidden_multiple=0)


def test_a_quantized_format_or_scale_bound_a_library_lacks_is_a_skip_with_its_reason():
    """Limits(qdtypes=..., scale_ub=False): a library that stores int8 alone and takes no bound on a dynamic scale
    (vLLM's CPU quantizers) skips the float8 and scale_ub cases, saying why, and runs the rest."""
    from normbench.check import conformance
    from normbench.core.backend import Limits
    from tests import quant_mutants

    class Int8Only(quant_mutants.QuantKernel):
        name = "int8-only"
        limits = Limits(qdtypes=("int8",), scale_ub=False, source="its docs")

    backend = Int8Only()
    quant = [c for c in cases.suite_cases("rms_norm_dynamic_quant", "forward")]
    runs = [c for c in quant if conformance.skip_reason(backend, c) is None]
    assert runs and all(c.qdtype == "int8" and c.scale_ub is None for c in runs)
    e4m3 = next(c for c in quant if c.qdtype == "float8_e4m3fn")
    assert conformance.skip_reason(backend, e4m3) == ("outside backend 'int8-only''s documented limits: the library "
                                                      "stores no float8_e4m3fn codes (it stores int8) (its docs)")
    bounded = next(c for c in quant if c.qdtype == "int8" and c.scale_ub is not None)
    assert "takes no upper bound on a dynamic scale (scale_ub 1)" in conformance.skip_reason(backend, bounded)
    for wrong in (("float8_e4m3fnuz",), (), "int8"):
        with pytest.raises(ValueError, match=r"Limits\(qdtypes=.*give a tuple of some of float8_e4m3fn"):
            Limits(qdtypes=wrong)
