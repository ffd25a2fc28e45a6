"""One bound for every backend: no verdict depends on the optional ``layer_norm_statistics`` hook.

The backward suite's checks (values, then the reference-free identities) never call the hook:
a control whose hook fails the test if called passes every backward case, so no backward verdict,
of any backend or mutant, can depend on it. Every built-in backend that runs here is also run
twice, as it is and with its hook hidden (returning None, the default), through the backward
checks and the forward suite's y check, and its verdicts must be identical case by case: a
backend that says its statistics are stored in half precision buys no allowance (issue 19).
Forward checks of the saved mean and rstd exist only where the hook does, so only y is compared.

The mutant that stores and reuses half-precision statistics and declares them
(``mutant-declared-half-statistics``) must fail the backward either way.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from normbench import get_registry
from normbench.check import conformance, error_model, identities, oracle
from normbench.check.worst import worst_violation
from normbench.core import cases
from tests import mutants

pytestmark = pytest.mark.e2e

BUILT_IN = ("numpy", "torch", "jax", "triton")


def hidden(backend):
    """The same backend object with its statistics hook answering None (the contract's default)."""
    clone = object.__new__(type(backend))
    clone.__dict__.update(backend.__dict__)
    clone.layer_norm_statistics = lambda *args, **kwargs: None
    clone.layer_norm_with_statistics = lambda x, ns, w, b, eps: (clone.layer_norm(x, ns, w, b, eps), None)
    return clone


def _verdict(check, *args) -> str:
    """"pass", "fail <output>" (the output out of its bound: dx, sum(dx), y, ...) or "error <type>"."""
    try:
        check(*args)
    except conformance.ConformanceError as exc:
        what = re.search(r"(\w+(?:\([^)]*\))?)\[|(sum\([^)]*\))", str(exc))
        return "fail " + (what.group(1) or what.group(2) if what else "")
    except Exception as exc:  # a crash is a verdict too
        return f"error {type(exc).__name__}"
    return "pass"


def _backward_values(backend, inputs, dy) -> None:
    conformance.check_backward_values(backend, inputs, dy, conformance.run_backward(backend, inputs, dy))


def _y_only(backend, inputs) -> None:
    run = conformance.run_forward(backend, inputs)
    ref = conformance.reference(inputs)
    y = oracle.rows_view(run.y, inputs.case.normalized_shape)
    worst = worst_violation(y, ref.y, error_model.forward_bound(ref, inputs.case.dtype))
    if worst is not None:
        raise conformance.ConformanceError(f"y[{worst.where}] {worst.excess()}")


def verdicts(backend, forward: bool = True) -> dict[str, str]:
    """Case id -> verdict of the backward values, the identities and (``forward``) the forward y, seed 0."""
    out = {}
    for case in cases.BACKWARD_CASES:
        if case.slow or conformance.skip_reason(backend, case, backward=True):
            continue
        inputs, dy = cases.make_inputs(case, 0), cases.make_dy(case, 0)
        out[f"backward {case.id}"] = _verdict(_backward_values, backend, inputs, dy)
        if case.family != "nonfinite":
            out[f"identities {case.id}"] = _verdict(identities.check_identities, backend, inputs, dy)
    for case in cases.FORWARD_CASES if forward else ():
        if case.slow or conformance.skip_reason(backend, case):
            continue
        inputs = cases.make_inputs(case, 0)
        out[f"forward y {case.id}"] = _verdict(_y_only, backend, inputs)
    return out


def _assert_same(backend, forward: bool = True) -> dict[str, str]:
    exposed, without = verdicts(backend, forward), verdicts(hidden(backend), forward)
    differ = {k: (exposed[k], without.get(k)) for k in exposed if exposed[k] != without.get(k)}
    assert not differ, f"{backend.name}: verdicts depend on the statistics hook: {dict(list(differ.items())[:5])}"
    return exposed


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_backends_have_one_bound(name):
    registry = get_registry()
    if not registry.availability(name):
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    _assert_same(registry.create(name))


class Trapped(mutants.Fp32Kernel):
    """The control, with a statistics hook that fails the test if anything calls it."""

    name = "trapped-statistics"

    def layer_norm_statistics(self, *args, **kwargs):
        raise AssertionError("a backward check called layer_norm_statistics")


def test_the_backward_checks_never_read_the_statistics_hook():
    """Why one bound holds for every backend, mutant or not: the backward values and identities
    never call the hook, so no verdict of theirs can depend on it (each case's verdict is 'pass')."""
    got = verdicts(Trapped(), forward=False)
    assert got and set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}


def test_declared_half_statistics_fail_with_and_without_the_hook():
    got = _assert_same(mutants.DeclaredHalfStatistics(), forward=False)
    failed = [k for k, v in got.items() if k.startswith("backward ") and v.startswith("fail")]
    assert failed, "the backward that reuses half-precision statistics it declares passed"
    assert any("float16" in k for k in failed) and any("bfloat16" in k for k in failed)


def test_the_hook_is_hidden():
    backend = hidden(mutants.DeclaredHalfStatistics())
    x = np.ones((2, 3), np.float16)
    assert backend.layer_norm_statistics(x, (3,), None, None, 1e-5) is None
    assert mutants.DeclaredHalfStatistics().layer_norm_statistics(x, (3,), None, None, 1e-5)[0].dtype == np.float16
