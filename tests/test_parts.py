"""Operations composed from parts (issue 40): the twelve generated operations say what normbench 0.3's hand-written
entries said; each optional part validates its own case values; an epilogue's granularity is a value that the byte
model and the judge of the scales follow, a scale per block of 32 elements included."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from normbench.check import conformance, quantized
from normbench.check.worst import ConformanceError
from normbench.core import cases, operations, parts
from normbench.core.exceptions import InvalidInput
from normbench.core.quantized import dynamic_scale, qformat
from normbench.perf import roofline

GOLDEN = json.loads((Path(__file__).parent / "golden" / "operations-0.3.json").read_text())["operations"]


def facts(op: operations.Operation) -> dict:
    """What the golden file holds of an operation, computed from the generated entry."""
    as_lists = lambda value: json.loads(json.dumps(value, default=str))  # noqa: E731  (tuples as lists, as stored)
    return as_lists({
        "label": op.label, "formula": op.formula, "id_prefix": op.id_prefix, "params": op.params,
        "outputs": op.outputs, "cotangents": op.cotangents, "gradients": op.gradients,
        "differentiable": op.differentiable, "statistics": op.statistics, "centered": op.centered,
        "has_bias": op.has_bias,
        "default_eps": None if op.default_eps is None else [op.default_eps(t) for t in
                                                              ("float32", "float16", "bfloat16", "float64")],
        "error_terms": op.error_terms, "families": vars(op.families), "hypotheses": op.hypotheses,
        "fuses": op.fuses, "quant": op.quant, "quantizes": op.quantizes, "backward_params": op.backward_params,
        "options": op.options, "signature": op.signature(), "bsignature": op.signature(backward=True),
        "formulas": {v: roofline.formula(op, v) for v in op.traffic},
        "bytes": {v: roofline.model_bytes(op, v, 7, 33, "bfloat16", residual_dtype="float32") for v in op.traffic}})


@pytest.mark.parametrize("name", operations.NAMES)
def test_each_generated_operation_says_what_its_hand_written_entry_said(name):
    assert facts(operations.of(name)) == GOLDEN[name]


def test_the_operations_are_the_products_of_their_parts_in_the_order_they_always_had():
    assert list(GOLDEN) == sorted(operations.NAMES)
    assert operations.NAMES == ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "layer_norm_quant",
                                "rms_norm_quant", "add_layer_norm_quant", "add_rms_norm_quant",
                                "layer_norm_dynamic_quant", "rms_norm_dynamic_quant", "add_layer_norm_dynamic_quant",
                                "add_rms_norm_dynamic_quant")
    op = operations.of("add_rms_norm_dynamic_quant")
    assert op.parts == (parts.RMS_NORM_PART, parts.RESIDUAL_ADD, parts.DYNAMIC_QUANT)
    assert (op.fuses, op.quant, op.quantizes) == ("rms_norm", "dynamic", "add_rms_norm")
    assert [op.judge_of(o) for o in op.outputs] == ["codes", "scales", "exact"]
    assert [operations.ADD_LAYER_NORM.judge_of(o) for o in ("y", "residual_out", "dsum", "dweight")] == [
        "bounded", "exact", "bounded", "bounded"]


def test_each_optional_part_validates_its_own_values_and_refuses_them_where_absent():
    with pytest.raises(InvalidInput, match="LayerNorm adds no residual"):
        cases.Case("t", (2, 8), (8,), "float32", residual="same")
    with pytest.raises(InvalidInput, match="unknown residual 'bogus'"):
        cases.Case("t", (2, 8), (8,), "float32", norm="add_layer_norm", residual="bogus")
    with pytest.raises(InvalidInput, match="RMSNorm has no quantized output"):
        cases.Case("t", (2, 8), (8,), "float32", norm="rms_norm", qdtype="int8")
    with pytest.raises(InvalidInput, match="needs a scale"):
        cases.Case("t", (2, 8), (8,), "float32", norm="rms_norm_quant", qdtype="int8", scale=1e39)
    with pytest.raises(InvalidInput, match="returns its scales"):
        cases.Case("t", (2, 8), (8,), "float32", norm="rms_norm_dynamic_quant", qdtype="int8", scale=1.0)
    fused = cases.Case("t", (2, 8), (8,), "float32", norm="add_rms_norm_quant", qdtype="int8", scale=0.5)
    assert (fused.residual, fused.residual_type) == ("same", "float32")  # the prologue's default, filled in
    assert cases.PART_VALUES == ("residual", "residual_dtype", "qdtype", "scale", "scale_ub")


# -- a granularity is a value: one scale per block of 32 elements, composed here (no operation has it yet) --------

BLOCK32 = operations.compose(parts.RMS_NORM_PART, None, parts.Quantize("computed", 32))


def test_a_block_scale_is_named_counted_and_refused_by_its_values():
    assert (BLOCK32.name, BLOCK32.id_prefix, BLOCK32.label) == ("rms_norm_block32_quant", "bq32-rms-",
                                                                "RMSNorm+block-32 quant")
    assert roofline.formula(BLOCK32, "forward-inference") == (
        "M*N*e_x (read x) + N*e_w (read weight) + M*N*1 (write q) + M*N/G*4 (write scales)")
    # 3 rows of 100: x 600 B (float16), weight 200, codes 300, ceil(100/32) = 4 float32 scales per row: 48
    assert roofline.model_bytes(BLOCK32, "forward-inference", 3, 100, "float16") == 600 + 200 + 300 + 48
    assert parts.Quantize("computed", 32).scales_per_row(100) == 4
    for bad in (("computed", 48), ("given", "row"), ("computed", "tensor"), ("computed", "row", "e8m0")):
        with pytest.raises(ValueError, match="a given scale is one per tensor"):
            parts.Quantize(*bad)


def _block_inputs(monkeypatch, hidden: int) -> cases.Inputs:
    """A dynamic-quant case's inputs, judged as if its operation had one scale per block of 32."""
    case = cases.Case("t", (4, hidden), (hidden,), "float32", dist="offset3", norm="rms_norm_dynamic_quant",
                      qdtype="float8_e4m3fn")
    plain = operations.of
    monkeypatch.setattr(operations, "of", lambda name: BLOCK32 if str(name) == case.norm else plain(name))
    return cases.make_inputs(case, 0)


def _exact_block_quant(inputs: cases.Inputs) -> tuple[np.ndarray, np.ndarray]:
    """Codes and one scale per 32 elements, in float64 from the oracle's y: what a correct block kernel returns."""
    ref = quantized.references(inputs)[0]
    m, n = ref.y.shape
    absmax = np.abs(quantized.groups_of(ref.y, 32)).max(axis=2)
    scales = dynamic_scale(absmax, inputs.case.qdtype, None).astype(np.float32)
    codes = qformat(inputs.case.qdtype).quantize(ref.y / quantized.per_element(scales.astype(np.float64), 32, n))
    return codes, scales


@pytest.mark.parametrize("hidden", [128, 100])  # 100: the last block of each row has 4 elements
def test_the_scales_judge_follows_the_epilogue_block_by_block(monkeypatch, hidden):
    inputs = _block_inputs(monkeypatch, hidden)
    codes, scales = _exact_block_quant(inputs)
    seen = []
    quantized.check_dynamic(inputs, codes, scales.reshape(-1), "", seen.append)
    assert seen == [f"exact={4 * hidden};allowed=0;wrong=0"]
    # one block's scale doubled: named by row and block
    wrong = scales.copy()
    wrong[2, 1] *= 2
    with pytest.raises(ConformanceError, match=r"scales\[2, 1\] = .* 1 of 16 group scales wrong"):
        quantized.check_dynamic(inputs, codes, wrong.reshape(-1), "", seen.append)
    # the field's bug: one scale for the whole row (its absmax) where each block has its own
    rows = np.repeat(scales.max(axis=1, keepdims=True), scales.shape[1], axis=1)
    with pytest.raises(ConformanceError, match="group scales wrong"):
        quantized.check_dynamic(inputs, codes, rows.reshape(-1), "", seen.append)


def test_a_backends_block_scales_are_brought_back_as_many_as_the_epilogue_says(monkeypatch):
    inputs = _block_inputs(monkeypatch, 100)
    codes, scales = _exact_block_quant(inputs)

    class Block:
        name, device = "block", "cpu"

        def asarray(self, a, dtype=None):
            return np.array(a)

        def to_numpy(self, a):
            return np.asarray(a)

        def synchronize(self):
            pass

        def rms_norm_block32_quant(self, x, normalized_shape, weight, eps, qdtype, scale_ub):
            return codes.copy(), scales.copy()

    got = conformance.run_quantized(Block(), inputs)
    assert got["scales"].shape == (16,) and np.array_equal(got["scales"], scales.reshape(-1))
