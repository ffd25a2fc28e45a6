import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from normbench.core.cases import Case, make_inputs
from normbench.kit.layout import decompose


def rebuild(view):
    flat, shape, strides, offset = decompose(view)
    item = flat.itemsize
    return as_strided(flat[offset:], shape, tuple(s * item for s in strides))


@pytest.mark.parametrize("make", [
    lambda b: b, lambda b: b.T, lambda b: b[::2], lambda b: b[:, 1:], lambda b: b[1:],
    lambda b: np.broadcast_to(b[0], b.shape), lambda b: b[1:, ::3].T,
], ids=["contiguous", "transposed", "step2", "colslice", "rowslice", "broadcast", "mixed"])
def test_decompose_rebuilds_the_same_view(make):
    base = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    view = make(base)
    again = rebuild(view)
    assert again.shape == view.shape and again.strides == view.strides
    np.testing.assert_array_equal(again, view)


def test_decompose_keeps_offset_and_strides():
    base = np.zeros((5, 7), dtype=np.float16)
    _, shape, strides, offset = decompose(base[1:, 2:])
    assert (shape, strides, offset) == ((4, 5), (7, 1), 9)


@pytest.mark.parametrize("layout", ["transposed", "step2", "colslice", "rowslice"])
def test_layout_cases_are_really_strided(layout):
    case = Case("layout", (16, 100), (100,), "float32", "offset3", layout=layout)
    x = make_inputs(case, 0).x
    contiguous = make_inputs(Case("layout", (16, 100), (100,), "float32", "offset3"), 0).x
    assert x.shape == (16, 100)
    assert not (x.flags.c_contiguous and decompose(x)[3] == 0), "the view must not be a plain contiguous array"
    assert np.isfinite(x).all() and abs(float(x.mean()) - 3) < 0.5
    assert contiguous.flags.c_contiguous
