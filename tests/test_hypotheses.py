"""Failures that explain themselves (``normbench.check.hypotheses``), in process.

* Every value failure of a mutant whose bug is a hypothesis names a hypothesis that
  reproduces it ("explained: ..."), and its own hypothesis in at least one failure.
* A float64 result computed with eps held as float32 says so (it failed at 2.8e6x the
  bound with no word about eps before).
* Hypotheses run only for failing checks: the passing path never computes one.
* A runtime's hypothesis (the Triton interpreter's truncating bf16 conversion) is tried
  only for a backend with a ``runtime_note``, and a match says the runtime is at fault.
* The new constant-row cases catch the two released behaviours they target (a mean summed
  sequentially in fp32; a backward that never centres x), seeds 0..2, while the correct
  control passes them.
"""

from __future__ import annotations

import numpy as np
import pytest

from normbench.check import conformance, hypotheses, identities
from normbench.core import cases
from normbench.impls.numpy_ref import NumpyBackend
from tests import mutants

MODELLED = [m for m in dict.fromkeys(mutants.FORWARD_MUTANTS + mutants.BACKWARD_MUTANTS)
            if m.model is not hypotheses.CORRECT]


def failures(backend, direction: str, seed: int = 0, family: str | None = None) -> list[tuple[str, str]]:
    """(case id, message) of every value failure of ``backend`` on the suite of ``direction``."""
    out = []
    for case in cases.FORWARD_CASES if direction == "forward" else cases.BACKWARD_CASES:
        if case.slow or conformance.skip_reason(backend, case, backward=direction == "backward"):
            continue
        if family and case.family != family:
            continue
        inputs = cases.make_inputs(case, seed)
        try:
            if direction == "forward":
                conformance.check_forward_values(backend, inputs, conformance.run_forward(backend, inputs))
            else:
                dy = cases.make_dy(case, seed)
                conformance.check_backward_values(backend, inputs, dy, conformance.run_backward(backend, inputs, dy))
        except conformance.ConformanceError as exc:
            out.append((case.id, str(exc)))
    return out


@pytest.mark.parametrize("cls", MODELLED, ids=lambda c: c.name)
def test_every_failure_of_a_modelled_bug_names_a_hypothesis(cls):
    direction = "forward" if cls in mutants.FORWARD_MUTANTS else "backward"
    found = [(cid, m) for cid, m in failures(cls(), direction) if "float64 reference" in m]
    assert found, f"{cls.name} has no value failure"
    unexplained = [cid for cid, m in found if "\n  explained: " not in m]
    assert not unexplained, f"{cls.name}: failures without an explanation: {unexplained[:5]}\n{found[0][1]}"
    own = f"matches {cls.model.says}"
    assert any(own in m for _, m in found), f"{cls.name}: no failure names its own bug ({own!r}): {found[0][1]}"


class Float64Eps32(NumpyBackend):
    """float64 LayerNorm with eps held as float32."""

    name = "eps-as-float32"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return super().layer_norm(x, normalized_shape, weight, bias, float(np.float32(eps)))


def test_eps_held_as_float32_is_named():
    case = next(c for c in cases.FORWARD_CASES if c.id == "float64-rows8-hidden64-sigmasqrteps-eps0.1")
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(conformance.ConformanceError) as caught:
        conformance.check_forward(Float64Eps32(), inputs)
    message = str(caught.value)
    assert "explained: y matches LayerNorm with eps rounded to float32 (bug class #13)" in message, message


def test_no_hypothesis_on_the_passing_path(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a hypothesis was computed for a passing check")

    monkeypatch.setattr(hypotheses, "explain", refuse)
    control = mutants.Fp32Kernel()
    for case in cases.BACKWARD_CASES[:40]:
        inputs, dy = cases.make_inputs(case, 0), cases.make_dy(case, 0)
        if conformance.skip_reason(control, case, backward=True):
            continue
        conformance.check_forward(control, inputs)
        conformance.check_backward(control, inputs, dy)
        identities.check_identities(control, inputs, dy)


class TruncatingRuntime(mutants.Fp32Kernel):
    """A correct kernel that does its bfloat16 arithmetic step by step (xhat, weight*xhat, + bias),
    on a runtime that converts fp32 to bf16 by truncation, as the Triton interpreter does."""

    name = "truncating-runtime"
    runtime_note = "a test runtime that truncates fp32 -> bf16"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if x.dtype.name != "bfloat16":
            return super().layer_norm(x, normalized_shape, weight, bias, eps)
        trunc = hypotheses.truncate_to_bfloat16
        x32 = self.read(x, normalized_shape)
        mean, rstd = self.statistics(x32, eps)
        y = trunc(self.normalize(x32, mean, rstd, eps))
        if weight is not None:
            y = trunc(y * np.asarray(weight, np.float64).reshape(-1))
        if bias is not None:
            y = trunc(y + np.asarray(bias, np.float64).reshape(-1))
        return y.reshape(x.shape).astype(x.dtype)


def test_the_runtime_is_named_when_it_explains_a_failure():
    case = next(c for c in cases.FORWARD_CASES if c.id == "bfloat16-rows8-hidden1000-uniform9")
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(conformance.ConformanceError) as caught:
        conformance.check_forward(TruncatingRuntime(), inputs)
    assert "explained by the runtime, not the kernel: a test runtime that truncates fp32 -> bf16" in str(caught.value)
    plain = type("Plain", (TruncatingRuntime,), {"runtime_note": None, "name": "plain"})()
    with pytest.raises(conformance.ConformanceError) as caught:
        conformance.check_forward(plain, inputs)
    assert "runtime" not in str(caught.value)


def test_truncation_is_what_the_interpreter_does():
    assert float(hypotheses.truncate_to_bfloat16(np.array([0.57]))[0]) == 0.56640625
    assert float(np.float32(0.57).astype(cases.host_dtype("bfloat16"))) == 0.5703125


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_constant_rows_catch_a_sequential_mean(seed):
    """Naive sequential fp32 summation of the mean: caught at N = 8192 and 65536 (constant rows)."""
    failed = {cid for cid, _ in failures(mutants.SequentialMean(), "forward", seed, "constant")}
    assert {"float32-rows4-hidden8192-constant", "float32-rows2-hidden65536-constant"} <= failed
    assert not failures(mutants.Fp32Kernel(), "forward", seed, "constant")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_constant_rows_catch_an_uncentred_backward(seed):
    """dx = rstd*g + b*x + c (sums over x, never x - mean): caught on constant rows at 1e3 and 1e4."""
    found = failures(mutants.ExpandedDx(), "backward", seed, "constant")
    failed = {cid for cid, _ in found}
    for dtype in ("float32", "float16", "bfloat16"):
        assert f"{dtype}-rows8-hidden1024-constant1e4" in failed
    assert "float32-rows8-hidden1024-constant1e3" in failed
    assert all("explained: dx matches dx in the expanded form" in m for _, m in found)
    assert not failures(mutants.Fp32Kernel(), "backward", seed, "constant")


def test_the_declared_half_statistics_backward_fails_and_says_why():
    found = failures(mutants.DeclaredHalfStatistics(), "backward")
    assert found
    assert any("matches mean and rstd stored in the input dtype" in m for _, m in found)


def test_a_failing_mean_is_not_explained_by_bugs_that_leave_the_mean_alone():
    """torch CPU stores a bfloat16 input's mean in bfloat16. A saved statistic may be rounded to the input dtype, so
    every hypothesis whose mean is a correct kernel's would "match" it as well as a correct kernel does: only
    those that change the mean are tried (the variance and eps bugs declare what they change)."""
    case = next(c for c in cases.FORWARD_CASES if c.id == "bfloat16-rows8-hidden1000-offset1e3")
    inputs = cases.make_inputs(case, 0)
    stored = hypotheses.SavedStatisticsInInputDtype().outputs(inputs)["mean"]
    lines = hypotheses.explain("mean", stored, np.full(stored.shape, 1e-9), inputs)
    assert any("stored in the input dtype" in line for line in lines), lines
    assert not any(word in line for line in lines for word in ("variance", "eps", "Bessel", "padded")), lines
    assert not {"mean"} & hypotheses.VARIANCE_ONLY
