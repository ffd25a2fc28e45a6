"""Library limits are skips with reasons, not failures (``Backend.limits``).

A library that refuses eps > 1e-3 fails none of Table 1's tests (the invariance suite and
``normbench table1`` pick re-scaling factors whose eps/delta^2 it accepts); the cases
outside its documented limits skip, saying which limit and where it is documented.
"""

from __future__ import annotations

import pytest

from normbench.check import conformance
from normbench.core import cases
from normbench.core.backend import Limits
from normbench.paper import geometry, invariances, table1
from normbench.paper.normalizations import BackendRowLayerNorm
from tests import mutants


class SmallEps(mutants.Fp32Kernel):
    """A correct kernel whose library refuses eps > 1e-3 (it raises, as a real one would)."""

    name = "small-eps"
    limits = Limits(eps=(0.0, 1e-3), source="small-eps docs: eps must be at most 1e-3")

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if eps > 1e-3:
            raise ValueError(f"eps {eps} > 1e-3 is not supported")
        return super().layer_norm(x, normalized_shape, weight, bias, eps)


class OnlyOneEps(mutants.Fp32Kernel):
    name = "only-one-eps"
    limits = Limits(eps=(1e-5, 1e-5), min_rank=2, layouts=("contiguous",), source="its docs")


def test_cases_outside_the_limits_skip_with_the_reason():
    case = next(c for c in cases.FORWARD_CASES if c.eps == 0.1 and c.dtype == "float32")
    assert conformance.skip_reason(SmallEps(), case) == (
        "outside backend 'small-eps''s documented limits: eps 0.1 is outside the documented range [0, 0.001] "
        "(small-eps docs: eps must be at most 1e-3)")
    rank1 = next(c for c in cases.FORWARD_CASES if len(c.shape) == 1)
    assert "rank 1, below the documented minimum 2 (its docs)" in conformance.skip_reason(OnlyOneEps(), rank1)
    strided = next(c for c in cases.FORWARD_CASES if c.layout == "transposed")
    assert "layout transposed is not among the documented ones" in conformance.skip_reason(OnlyOneEps(), strided)
    broadcast = next(c for c in cases.BACKWARD_CASES if c.dy_broadcast and c.layout == "contiguous" and c.eps == 1e-5)
    assert "layout dybroadcast" in conformance.skip_reason(OnlyOneEps(), broadcast, backward=True)
    inside = next(c for c in cases.FORWARD_CASES if c.eps == 1e-5 and c.dtype == "float32")
    assert conformance.skip_reason(SmallEps(), inside) is None


@pytest.mark.parametrize("key", list(invariances.TRANSFORMATIONS))
def test_table1_columns_stay_inside_the_eps_range(key):
    backend = SmallEps()
    for case in cases.INVARIANCE_CASES:
        if conformance.skip_reason(backend, case):
            continue
        assert invariances.skip_reason(backend, case, key) is None
        invariances.check_column(backend, case, 0, key)  # raises on any disagreement


def test_gradient_rescaling_stays_inside_the_eps_range():
    backend = SmallEps()
    case = next(c for c in cases.GEOMETRY_CASES if c.dtype == "float32" and c.eps == 1e-5)
    assert geometry.skip_reason(backend, case) is None
    geometry.check_weight_matrix_gradient(backend, case, 0)
    geometry.check_gain_gradient(backend, case, 0)


def test_no_factor_inside_the_range_is_a_skip_with_the_reason():
    case = cases.table1_case("float32")
    reason = invariances.skip_reason(OnlyOneEps(), case, "dataset_rescaling")
    assert reason == ("only-one-eps documents limits no re-scaling factor keeps eps/delta^2 inside the documented "
                      "range [1e-05, 1e-05] (eps 1e-05)")
    assert invariances.skip_reason(OnlyOneEps(), case, "dataset_recentering") is None
    assert geometry.skip_reason(OnlyOneEps(), case) is not None


def test_normbench_table1_measures_a_limited_backend():
    row = table1.layer_norm_row(BackendRowLayerNorm(SmallEps(), "float32"), 1e-5)
    cells = table1.measure_table({"layer": row}, 0)
    assert all(c.agrees and not c.skipped for c in cells.values()), {k: c.verdict for k, c in cells.items()}
    text = table1.render_table(cells, {"layer": row}, 0)
    assert "W -> 0.1875*W" in text and "All 6 cells agree with the paper." in text


def test_normbench_table1_skips_what_it_cannot_measure():
    row = table1.layer_norm_row(BackendRowLayerNorm(OnlyOneEps(), "float32"), 1e-5)
    cells = table1.measure_table({"layer": row}, 0)
    skipped = {k for (_, k), c in cells.items() if c.skipped}
    assert skipped == {"weight_matrix_rescaling", "dataset_rescaling", "single_case_rescaling"}
    assert all(c.agrees for c in cells.values())
    document = table1.to_document(cells, {"layer": row}, 0, "normbench table1", None)
    assert [c["measured"] for c in document["methods"][0]["cells"]].count("skipped") == 3
    assert "Skipped: Layer norm / Dataset re-scaling: only-one-eps (float32) documents limits: no re-scaling" \
        in table1.render_table(cells, {"layer": row}, 0)
