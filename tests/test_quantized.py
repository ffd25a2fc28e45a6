"""Quantized outputs (issue 28; docs/quantized.md): the exact quantization, the window a correct kernel's code may lie
in, the cases, and the proofs: the correct control and the correct variants pass every quantized case (seed 0 here;
0..19 with ``-m slow``), every mutant with one real bug fails and its failure names the element, the codes and the
boundary."""

from __future__ import annotations

import numpy as np
import pytest

from normbench.check import conformance, quantized
from normbench.check.worst import ConformanceError
from normbench.core import cases, operations
from normbench.core.exceptions import InvalidInput
from normbench.core.quantized import E4M3, E5M2, FORMATS, INT8, dynamic_scale, scale_floor
from normbench.impls.numpy_ref import _quantize as reference_quantize
from tests import quant_mutants

QUANT_CASES = [c for c in cases.FORWARD_CASES if operations.of(c.norm).quant]


# -- the exact quantization -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FORMATS))
def test_two_independent_quantizers_agree_on_every_boundary_and_beyond(name):
    """The oracle's (a table of codes) and the NumPy backend's (a quantum per binade) are written independently: they
    agree on every code, every midpoint between two codes, just above and below it, past the range, and at random."""
    fmt = FORMATS[name]
    rng = np.random.default_rng(0)
    if fmt.integer:
        codes = np.arange(-128.0, 128.0)
    else:
        codes = np.concatenate([fmt._positive, -fmt._positive])
    ordered = np.unique(codes)
    midpoints = (ordered[1:] + ordered[:-1]) / 2
    v = np.concatenate([codes, midpoints, np.nextafter(midpoints, np.inf), np.nextafter(midpoints, -np.inf),
                        rng.standard_normal(50_000) * 10.0 ** rng.uniform(-5, 6, 50_000),
                        [fmt.max * 1.01, -fmt.max * 1.01, np.inf, -np.inf, 1e30]])
    ours, theirs = fmt.values(fmt.quantize(v)), reference_quantize(v, name).astype(np.float64)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(fmt.values(fmt.quantize(codes)), codes)  # every code is its own quantization


def test_ties_go_to_the_even_code_and_saturation_is_exact():
    assert INT8.quantize(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, 200.0, -128.5, -300.0])).tolist() == \
        [0, 2, 2, 0, -2, 126, 127, 127, -128, -128]
    # e4m3fn: 448 is the largest code (480 would be its NaN); 464, the midpoint, goes to the even 448
    assert E4M3.values(E4M3.quantize(np.array([464.0, 464.1, 1e6, -1e6, np.inf]))).tolist() == \
        [448.0, 448.0, 448.0, -448.0, 448.0]
    assert E5M2.values(E5M2.quantize(np.array([57344.0 * 1.1, -np.inf]))).tolist() == [57344.0, -57344.0]
    assert np.isnan(E4M3.values(E4M3.quantize(np.array([np.nan])))).all()
    # one rounding from float64: ml_dtypes' own conversion goes through float32 and would give 1.0 here
    assert E4M3.values(E4M3.quantize(np.array([1 + 2**-4 + 2**-30]))).tolist() == [1.125]
    # subnormal codes: e4m3fn's smallest is 2^-9; half of it, a tie, goes to the even 0
    assert E4M3.values(E4M3.quantize(np.array([2.0**-9, 2.0**-10, 1.5 * 2.0**-9]))).tolist() == [2.0**-9, 0.0, 2.0**-8]


def test_the_dynamic_scale_has_a_floor_and_a_bound():
    assert dynamic_scale(np.array([0.0, 254.0, 1000.0]), "int8", scale_ub=508.0).tolist() == \
        [scale_floor("int8"), 2.0, 4.0]
    assert scale_floor("float8_e4m3fn") == 1 / (448 * 512)


# -- the window ---------------------------------------------------------------------------------------------------


def test_a_code_is_exact_away_from_a_boundary_and_either_neighbour_within_the_window():
    v, b = np.array([2.2, 2.5, 2.5, 2.5]), np.array([0.1, 0.1, 0.1, 0.1])
    assert quantized.violations(INT8, np.array([2, 2, 3, 4], np.int8), v, b).tolist() == [False, False, False, True]
    lo, hi = quantized.allowed(INT8, np.array([200.0, -3.0]), np.array([1.0, 0.2]))
    assert lo.tolist() == [127.0, -3.0] and hi.tolist() == [127.0, -3.0]  # saturated: the maximum, whatever the window
    nan = np.array([np.nan])
    assert quantized.violations(E4M3, E4M3.quantize(np.array([1.0])), nan, np.array([0.0])).tolist() == [True]
    assert quantized.violations(INT8, np.array([5], np.int8), nan, np.array([0.0])).tolist() == [False]  # not judged


# -- the cases ----------------------------------------------------------------------------------------------------


def test_every_quantized_operation_has_its_cases_in_every_format():
    names = {op.name for op in operations.OPERATIONS if op.quant}
    assert len(names) == 8 and {c.norm for c in QUANT_CASES} == names
    for op in names:
        mine = [c for c in QUANT_CASES if c.norm == op]
        assert {c.qdtype for c in mine} == set(FORMATS)
        if operations.of(op).quant == "static":
            assert {c.scale for c in mine} >= {0.01, 1.0, 10.0}
            assert any(c.dist == "alternating" for c in mine)  # exact ties
        else:
            assert any(c.scale_ub for c in mine) and any(c.dist == "zerorows" for c in mine)


def test_the_ties_case_puts_y_over_the_scale_exactly_on_boundaries():
    case = next(c for c in QUANT_CASES if c.dist == "alternating" and c.qdtype == "int8" and c.norm == "rms_norm_quant")
    inputs = cases.make_inputs(case, 0)
    [ref] = quantized.references(inputs)
    v = ref.y / case.scale
    assert np.all(np.abs(v - np.round(v)) == 0.5)


def test_a_quantized_case_says_what_is_missing():
    with pytest.raises(InvalidInput, match="needs a scale"):
        cases.Case("quant", (4, 8), (8,), "float32", norm="rms_norm_quant", qdtype="int8")
    with pytest.raises(InvalidInput, match="needs a qdtype"):
        cases.Case("quant", (4, 8), (8,), "float32", norm="rms_norm_quant", qdtype="fp4", scale=1.0)
    with pytest.raises(InvalidInput, match="has no quantized output"):
        cases.Case("quant", (4, 8), (8,), "float32", norm="rms_norm", qdtype="int8")


# -- never cry wolf, never miss -------------------------------------------------------------------------------------


def _failures(backend, seeds) -> list[str]:
    out = []
    for seed in seeds:
        for case in QUANT_CASES:
            try:
                conformance.check_forward(backend, cases.make_inputs(case, seed))
            except ConformanceError as exc:
                out.append(str(exc).splitlines()[0])
    return out


@pytest.mark.parametrize("kernel", [quant_mutants.QuantKernel, *quant_mutants.VARIANTS], ids=lambda k: k.name)
def test_the_control_and_the_correct_variants_pass(kernel):
    assert _failures(kernel(), [0]) == []


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [quant_mutants.QuantKernel, *quant_mutants.VARIANTS], ids=lambda k: k.name)
def test_the_control_and_the_correct_variants_pass_on_seeds_0_to_19(kernel):
    assert _failures(kernel(), range(20)) == []


def _fails_somewhere(backend) -> bool:
    for case in QUANT_CASES:
        try:
            conformance.check_forward(backend, cases.make_inputs(case, 0))
        except ConformanceError:
            return True
    return False


@pytest.mark.parametrize("mutant", quant_mutants.MUTANTS, ids=lambda k: k.name)
def test_every_mutant_fails(mutant):
    """In-process, seed 0 (tests/test_mutants.py proves the same through the suite, as a plugin)."""
    assert _fails_somewhere(mutant()), f"{mutant.name} ({mutant.__doc__.strip()}) passed every quantized case"


def test_a_failure_names_the_element_the_codes_and_the_boundary():
    case = next(c for c in QUANT_CASES if c.norm == "rms_norm_quant" and c.qdtype == "int8" and c.scale == 1.0
                and c.dist == "normal")
    with pytest.raises(ConformanceError) as failure:
        conformance.check_forward(quant_mutants.Truncation(), cases.make_inputs(case, 0))
    text = str(failure.value)
    assert text.startswith(f"mutant-quant-truncate {case.id} (seed 0): q[")
    assert "exact code" in text and "of y/scale = " in text and "allowed int8 codes" in text
    assert "nearest rounding boundary" in text and "codes wrong" in text


@pytest.mark.e2e
def test_a_run_records_the_codes_and_the_report_shows_their_agreement(tmp_path):
    """``normbench run`` on the quantized RMSNorm cases of int8: each test's codes in the conformance results
    (schema version 4), summed in the report's code-level table."""
    import subprocess
    import sys

    from normbench.check.outcomes import CONFORMANCE, parse_codes
    from normbench.core import storage
    from normbench.report import codes, render, sources
    from tests.plugins import ROOT

    out = subprocess.run([sys.executable, "-m", "normbench", "run", "--impl=numpy", "--suites=conformance", "--no-report",
                          f"--out={tmp_path}", "--run-id=q", "-n", "1", "-k", "test_forward and q-rms- and int8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = storage.load(tmp_path / "q", CONFORMANCE)  # q-rms- and dq-rms-: static and dynamic
    assert len(rows) == 16 and all(sum(parse_codes(t)) > 0 and parse_codes(t)[2] == 0 for t in rows.codes)
    table = codes.code_table(sources.load_result_set(tmp_path / "q"))
    assert [(r["backend"], r["operation"], r["format"], r["tests"], r["wrong"]) for r in table["rows"]] == [
        ("numpy", operations.of(op).label, "int8", sum(c.norm == op and c.qdtype == "int8" for c in QUANT_CASES), 0)
        for op in ("rms_norm_quant", "rms_norm_dynamic_quant")]
    for row in table["rows"]:  # float64 y: the exact codes, but at a hair
        assert row["exact"] >= 0.99 * (row["exact"] + row["allowed"]) > 0
    html = render.render_html([sources.load_result_set(tmp_path / "q")])
    assert "Quantized outputs: code-level agreement" in html


def test_an_infinite_y_allows_its_saturated_code_alone():
    v = np.array([np.inf, -np.inf])
    b = quantized.window(np.array([1.0, 1.0]), v, 1.0)
    assert not quantized.violations(E4M3, E4M3.quantize(v), v, b).any()
    assert quantized.violations(INT8, np.array([126, -128], np.int8), v, b).tolist() == [True, False]


class _ScaleOffInRowZero(quant_mutants.QuantKernel):
    name = "scale-off-in-row-0"

    def row_scale(self, absmax, qdtype, scale_ub):
        scales = super().row_scale(absmax, qdtype, scale_ub)
        scales[0] *= 1.5
        return scales


class _NanRowsZeroed(quant_mutants.QuantKernel):
    name = "nan-rows-zeroed"

    def convert(self, v, qdtype):
        return super().convert(np.where(np.isnan(v).any(axis=1, keepdims=True), 0, v), qdtype)


def test_a_row_with_a_wrong_scale_counts_its_codes_against_the_exact_scale_once():
    from normbench.check.conformance import Properties
    from normbench.check.outcomes import parse_codes

    case = next(c for c in QUANT_CASES if c.id == "dq-rms-bfloat16-rows64-hidden256-normal-int8")
    inputs = cases.make_inputs(case, 0)
    measured = {}
    for kernel in (quant_mutants.QuantKernel(), _ScaleOffInRowZero()):
        properties = Properties()
        try:
            conformance.check_forward(kernel, inputs, properties)
        except ConformanceError as exc:
            assert "scales[0]" in str(exc)
        measured[kernel.name] = parse_codes(properties.values["codes"])
    exact, allowed, wrong = measured["scale-off-in-row-0"]
    q, scales = _ScaleOffInRowZero().rms_norm_dynamic_quant(inputs.x, (256,), inputs.weight, case.eps, "int8", None)
    [ref] = quantized.references(inputs)
    exact_scale = quantized.dynamic_scale(np.abs(ref.y).max(axis=1), "int8")[0]
    off = int((INT8.values(q[0]) != INT8.values(INT8.quantize(ref.y[0] / exact_scale))).sum())
    assert wrong == off and exact + allowed + wrong == 64 * 256
    control_exact, control_allowed, _ = measured[quant_mutants.QuantKernel.name]
    assert allowed <= control_allowed and exact + allowed == control_exact + control_allowed - off


def test_a_nan_y_must_be_a_nan_code_with_dynamic_scales_too():
    case = next(c for c in QUANT_CASES if c.norm == "rms_norm_dynamic_quant" and c.dist == "poisoned"
                and c.qdtype == "float8_e4m3fn")
    with pytest.raises(ConformanceError, match=r"q\[1, 0\] = 0 \(0x00\), exact code nan"):
        conformance.check_forward(_NanRowsZeroed(), cases.make_inputs(case, 0))
    conformance.check_forward(quant_mutants.QuantKernel(), cases.make_inputs(case, 0))
