"""The paper's claims (Ba, Kiros, Hinton 2016) as properties of every selected backend.

* Table 1 (§5.1), the layer-norm row, one test per column: on a layer ``a = x @ W``
  (exact in float64, then rounded to the dtype), the output is invariant to
  weight-matrix re-scaling and re-centering, dataset re-scaling and single-case
  re-scaling (within the error model's bound, with the eps rule
  ``LN_eps(delta*a) = LN_(eps/delta^2)(a)``; the other cases' rows unchanged), and
  changes at least ``normbench.paper.invariances.FAR`` times the bound under weight-vector
  re-scaling and dataset re-centering. Math and bounds: ``harness/paper/invariances.py``.
* RMSNorm's row (``rms-`` cases; normbench's derivation, not the paper's:
  ``invariances.RMS_TABLE1``), with the same columns: invariant to weight-matrix,
  dataset and single-case re-scaling; at least FAR times the bound away under
  weight-matrix and dataset re-centering (nothing subtracts the mean) and weight-vector
  re-scaling.
* §5.2, on backends with a backward: ``W -> delta*W`` scales dL/dW by 1/delta, the
  gain's gradient ignores input re-scaling, and each row's dx obeys the shift and
  scale identities (``harness/paper/geometry.py``; an RMSNorm case checks the scale
  identity alone: RMSNorm is not invariant to a shift).
* §3.1: a layer-normalized RNN and LSTM over 128 steps keep their hidden states
  when W_h and W_x are re-scaled together; without normalization they do not
  (``harness/paper/recurrent.py``). ``normbench table1`` prints all of it as tables.
"""

import pytest

from normbench.core import cases
from normbench.paper import geometry, invariances, recurrent


def check_column(backend, case, seed, key):
    """One Table 1 column, skipped with the reason where the method's eps/delta^2 cannot stay
    inside the backend's documented eps range (``invariances.skip_reason``)."""
    reason = invariances.skip_reason(backend, case, key)
    if reason:
        pytest.skip(reason)
    invariances.check_column(backend, case, seed, key)


def skip_outside_limits(backend, case):
    reason = geometry.skip_reason(backend, case)
    if reason:
        pytest.skip(reason)


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_weight_matrix_rescaling(backend, case, seed):
    check_column(backend, case, seed, "weight_matrix_rescaling")


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_weight_matrix_recentering(backend, case, seed):
    """Adds ~1e3 sigma per case in fp32: doubles as a cancellation (one-pass variance) detector."""
    check_column(backend, case, seed, "weight_matrix_recentering")


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_weight_vector_rescaling(backend, case, seed):
    """Must change: one unit, and one trailing slice of a multi-dim layer."""
    check_column(backend, case, seed, "weight_vector_rescaling")


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_dataset_rescaling(backend, case, seed):
    check_column(backend, case, seed, "dataset_rescaling")


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_dataset_recentering(backend, case, seed):
    """Must change: a batch-axis normalization would not."""
    check_column(backend, case, seed, "dataset_recentering")


@pytest.mark.normbench_cases(cases.INVARIANCE_CASES)
def test_single_case_rescaling(backend, case, seed):
    """The re-scaled case's output is unchanged, and so is every other case's."""
    check_column(backend, case, seed, "single_case_rescaling")


@pytest.mark.normbench_cases(cases.GEOMETRY_CASES, backward=True)
def test_weight_matrix_rescaling_scales_the_gradient(backend, case, seed):
    skip_outside_limits(backend, case)
    geometry.check_weight_matrix_gradient(backend, case, seed)


@pytest.mark.normbench_cases(cases.GEOMETRY_CASES, backward=True)
def test_gain_gradient_ignores_input_rescaling(backend, case, seed):
    skip_outside_limits(backend, case)
    geometry.check_gain_gradient(backend, case, seed)


@pytest.mark.normbench_cases(cases.GEOMETRY_CASES, backward=True)
def test_gradient_shift_and_scale_identities(backend, case, seed):
    geometry.check_gradient_identities(backend, case, seed)


@pytest.mark.normbench_cases(cases.RNN_CASES)
def test_rnn_hidden_states_invariant(backend, case, seed, record_property):
    result = recurrent.check(backend, case, seed, "rnn")
    record_property("hidden_state_norms", {k: [round(float(v), 4) for v in n] for k, n in result.norms.items()})


@pytest.mark.normbench_cases(cases.LSTM_CASES)
def test_lstm_hidden_states_invariant(backend, case, seed, record_property):
    result = recurrent.check(backend, case, seed, "lstm")
    record_property("hidden_state_norms", {k: [round(float(v), 4) for v in n] for k, n in result.norms.items()})
