"""A case id is one grammar (normbench.core.case_ids, issue 40 item 2): every id normbench makes parses back into the
values of the case that made it and is written again the same, and every published run's ids parse; the report
reads what it needs from results columns or the parser, never by splitting an id on ``-``."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from normbench.core import case_ids, cases
from normbench.core.case_ids import CaseId, operation_of, parse, write

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("norm", "dtype", "shape", "normalized_shape", "dist", "eps", "affine", "layout", "dy_broadcast", "residual",
          "weight_offset", "per_head", "qdtype", "scale", "scale_ub")


def every_case():
    return {c.id: c for cases_ in cases.CASE_LISTS.values() for c in cases_} | {
        c.id: c for c in cases.rehearsal_cases()}


def test_every_case_id_parses_back_into_its_case_and_is_written_the_same():
    made = every_case()
    assert len(made) > 1500
    for case_id, case in made.items():
        parsed = parse(case_id)
        assert parsed is not None, case_id
        assert write(parsed) == case_id
        assert {f: getattr(parsed, f) for f in FIELDS} == {f: getattr(case, f) for f in FIELDS}, case_id
        assert parsed.param_dtype in (None, case.param_dtype) and parsed.residual_dtype in (None, case.residual_dtype)


def test_every_operation_and_value_kind_is_among_them():
    """The round trip covers the grammar: each operation, dtype, layout, affine word and optional part occurs."""
    parsed = [parse(i) for i in every_case()]
    from normbench.core.operations import NAMES

    assert {p.norm for p in parsed} == set(NAMES)
    assert {p.layout for p in parsed} == set(cases.LAYOUTS) and {p.affine for p in parsed} == set(cases.AFFINES)
    for present in ("param_dtype", "residual_dtype", "qdtype", "scale", "scale_ub"):
        assert any(getattr(p, present) is not None for p in parsed), present
    assert any(p.eps is None for p in parsed) and any(p.dy_broadcast for p in parsed) and any(p.per_head for p in parsed)
    assert any(p.weight_offset for p in parsed) and any(p.residual not in (None, "same") for p in parsed)
    assert any("e-" in f"{p.eps}" for p in parsed if p.eps)  # a '-' inside a part: never split on '-'


@pytest.mark.parametrize("case_id, values", [
    ("float32-rows7-hidden100-sigma1e-3", dict(norm="layer_norm", dist="sigma1e-3", shape=(7, 100))),
    ("rms-float16-rowsnone-hidden8x16-offset1e3-epsdefault-noaffine", dict(norm="rms_norm", shape=(8, 16), eps=None,
                                                                           affine="none")),
    ("dq-add-bfloat16-residualfloat32-rows3x5-hidden64-normal-eps1e-06-int8-ub3",
     dict(norm="add_layer_norm_dynamic_quant", shape=(3, 5, 64), residual_dtype="float32", eps=1e-6, qdtype="int8",
          scale_ub=3.0, residual="same")),
])
def test_an_id_says_its_values(case_id, values):
    parsed = parse(case_id)
    assert {k: getattr(parsed, k) for k in values} == values and write(parsed) == case_id


def test_an_id_the_grammar_does_not_parse_still_names_its_operation():
    assert parse("rms-float32-a-newer-normbench-id") is None
    assert operation_of("rms-float32-a-newer-normbench-id").name == "rms_norm"
    assert operation_of("something else").name == "layer_norm"  # ids without a prefix predate the others
    assert case_ids.dtype_of("q-float16-x") == "float16" and case_ids.qdtype_of("q-float16-x") == ""


def test_every_published_runs_ids_parse():
    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage

    ids = set()
    for path in glob.glob(str(ROOT / "reports" / "**" / "conformance.csv.gz"), recursive=True):
        ids |= set(storage.load(path, CONFORMANCE).case)
    assert ids, "no published run found"
    assert [i for i in ids if parse(i) is None or write(parse(i)) != i] == []


def test_a_case_id_is_a_value_not_a_case():
    parsed = CaseId("layer_norm", "float32", (4, 8), (8,), "normal")
    assert parsed.id == "float32-rows4-hidden8-normal" and parsed.eps == 1e-5
