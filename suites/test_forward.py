"""Forward conformance: every case of ``normbench.core.cases.FORWARD_CASES`` (LayerNorm's, RMSNorm's,
whose ids start with ``rms-``, and the fused operations', ``add-`` and ``add-rms-``: residual_out bit for bit,
y under ``normbench.check.fused``) on every selected backend that implements the case's operation,
judged against the float64 oracle by ``normbench.check.error_model``.

Each case checks: y (and the saved statistics, if exposed) within the
componentwise bound; output shape and dtype; inputs unmodified. NaN/Inf cases
check that non-finite values stay in their rows (the reference has them only there).

Inputs unmodified, after every call of every test here: the harness keeps its own copy of x, weight
and bias (``conformance.Handover``), computes the reference from the inputs as it made them, and fails a
backend that wrote into one right after the call, naming it (``layer_norm modified its input x in place
(12 of 1,600 elements changed)``), before any value is judged.

Properties beyond tolerance (``normbench_properties``, the plugin's fixture): every
case measures ``deterministic`` (the same input twice gives bit-identical y) and the
isolation cases ``batch-invariant`` (a row's bits whatever the batch size and its
position); ``--normbench-require`` says which fail a test (default: deterministic),
the others are recorded and reported.
"""

import pytest

from normbench.check import conformance
from normbench.core import cases

_ISOLATION_IDS = {"float32-rows65-hidden33-offset3", "bfloat16-rows1025-hidden33-offset3",
                  "float16-rows6-hidden64-poisoned", "float32-rows2x2x3-hidden19-offset3"}
#: the same cases for both normalizations (an RMSNorm twin's id is its LayerNorm id after ``rms-``)
ISOLATION_CASES = [c for c in cases.FORWARD_CASES if c.id.removeprefix("rms-") in _ISOLATION_IDS]


@pytest.mark.normbench_cases(cases.FORWARD_CASES)
def test_forward(backend, case, seed, normbench_properties):
    conformance.check_forward(backend, cases.make_inputs(case, seed), normbench_properties)


@pytest.mark.normbench_cases(ISOLATION_CASES)
def test_rows_independent(backend, case, seed, normbench_properties):
    """LN(x)[i] and LN(x[i:i+1]) agree within twice the bound: a failure otherwise. Bit-equality across
    batch sizes and positions (pytorch/pytorch#74033) is the property ``batch-invariant``, measured on
    the same runs and one more, and required only with ``--normbench-require=batch-invariant``."""
    conformance.check_rows_independent(backend, cases.make_inputs(case, seed), normbench_properties)
