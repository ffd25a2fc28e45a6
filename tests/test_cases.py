import numpy as np
import pytest

from harness import cases
from harness.dtypes import DTYPES
from harness.exceptions import InvalidInput


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
