"""Backward conformance: dx, dweight and dbias of every selected backend, for every
case of ``normbench.core.cases.BACKWARD_CASES`` (every operation; RMSNorm's ``rms-`` cases have no
dbias; the fused operations' ``add-`` and ``add-rms-`` cases return dsum = dresidual_out + dx for dx, with
dresidual_out from ``normbench.core.cases.make_dresidual``), with dy from ``normbench.core.cases.make_dy``
(random, nonzero row means).

* ``test_backward``: values within the backward error model of ``normbench.check.error_model``
  (dweight and dbias bounded by sums of magnitudes over rows, not by their own
  size) against the float64 oracle's closed form; the returned tuple, shapes and
  dtypes; None exactly for absent parameters; with N = 1, dweight exactly 0;
  dy and the inputs unmodified (after every backward call of every test here, ``conformance.Handover``:
  ``layer_norm_backward modified its input dy in place``, before any value is judged);
  the property ``deterministic`` (the same input twice gives identical bits of dx,
  dweight and dbias), required by default (``--normbench-require``), else recorded.
* ``test_backward_identities``: without any reference, per row sum(dx) = 0 (LayerNorm); with
  eps = 0, sum(xhat*dx) = 0; dbias does not depend on x (LayerNorm); negating x keeps dx and
  negates dweight (RMSNorm) (``normbench.check.identities``).
* ``test_finite_differences``: on float64 backends, directional central differences
  of the backend's own forward, step scaled to each row's sigma (``normbench.check.gradcheck``).

Backends without a backward (``has_backward = False``) are skipped with that reason.
"""

import pytest

from normbench.check import conformance, gradcheck, identities
from normbench.core import cases, operations

#: rows with a NaN or an Inf obey no identity, and the same x everywhere else is covered; a fused operation's dsum
#: is dresidual_out + dx, whose rounding at |dresidual_out| swamps dx's identities (its dx is the plain one's, whose
#: cases check them)
IDENTITY_CASES = [c for c in cases.BACKWARD_CASES if c.family != "nonfinite" and not operations.of(c.norm).fuses]


@pytest.mark.normbench_cases(cases.BACKWARD_CASES, backward=True)
def test_backward(backend, case, seed, normbench_properties):
    conformance.check_backward(backend, cases.make_inputs(case, seed), cases.make_dy(case, seed), normbench_properties)


@pytest.mark.normbench_cases(IDENTITY_CASES, backward=True)
def test_backward_identities(backend, case, seed):
    identities.check_identities(backend, cases.make_inputs(case, seed), cases.make_dy(case, seed))


@pytest.mark.normbench_cases(cases.GRADCHECK_CASES, backward=True)
def test_finite_differences(backend, case, seed):
    gradcheck.check_directional_derivatives(backend, cases.make_inputs(case, seed), cases.make_dy(case, seed))
