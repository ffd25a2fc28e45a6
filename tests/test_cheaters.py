"""A pass and a speed no kernel can fake (issue 39): every cheating backend of tests/cheaters.py ends as a non-``ok``
throughput row, or a failed conformance check, whose message names what it did; the honest backends stay ``ok``.

Each cheater is measured on a case small enough to run in well under a second; the host timer has no flush (the
cheats do not depend on the cache) and a ceiling no speed reaches, so only the judge can refuse a row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normbench.check import conformance
from normbench.check.conformance import ConformanceError
from normbench.core import cases
from normbench.perf import timing as timing_module
from normbench.perf.throughput import ThroughputRunner
from normbench.perf.timing import HostTimer, TimingOptions
from tests import cheaters
from tests.synthetic import fixed_ceiling

CASE = cases.Case("t", (64, 256), (256,), "float32")


def runner(**options) -> ThroughputRunner:
    opts = TimingOptions(**({"min_samples": 12, "max_time_s": 0.0} | options))
    return ThroughputRunner(opts, measure_ceiling=fixed_ceiling(1e6),
                            make_timer=lambda key, cache, events: HostTimer(flush=lambda: None))


@pytest.mark.parametrize("cheater", list(cheaters.NAMED), ids=lambda c: c.name)
def test_every_cheater_is_refused_and_named(cheater):
    backend = cheater()
    try:
        row = runner().measure(backend, CASE, "forward").row
    finally:
        getattr(backend, "restore", lambda: None)()
    verdicts, words = cheaters.NAMED[cheater]
    assert row["verdict"] in verdicts, (row["verdict"], row["message"])
    assert all(w in row["message"] for w in words), row["message"]
    assert math.isnan(row["gbps"])
    assert timing_module.clock_tampering() is None  # restored: the next test's clock is the real one


@pytest.mark.parametrize("direction", ["forward", "backward", "forward+backward"])
@pytest.mark.parametrize("name", ["numpy", "torch", "jax"])
def test_the_honest_backends_stay_ok_under_the_same_judge(name, direction):
    from normbench import get_registry

    registry = get_registry()
    if not registry.availability(name):
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    row = runner(min_samples=20).measure(registry.create(name), CASE, direction).row
    assert row["verdict"] == "ok", row["message"]


@pytest.mark.parametrize("cheater", cheaters.DEFEATED, ids=lambda c: c.name)
def test_a_cache_keyed_on_the_inputs_never_hits(cheater):
    backend = cheater()
    row = runner().measure(backend, CASE, "forward").row
    assert row["verdict"] == "ok" and backend.hits == 0, (row, backend.hits)


def test_every_call_of_a_case_verified_in_full_is_judged_and_of_a_larger_one_at_random(monkeypatch):
    """Every call of a case the oracle holds whole is judged. A larger one's calls are judged after they return, the
    t-th with probability 2/t: over many measurements a backend wrong on one fixed call is caught at about that
    rate, whichever call it picks (here: the fifth)."""
    from normbench.perf import verify

    class WrongOnCall(cheaters.Cheater):
        name = "cheater-wrong-on-one-call"

        def __init__(self, wrong: int) -> None:
            self.calls, self.wrong = 0, wrong

        def layer_norm(self, x, normalized_shape, weight, bias, eps):
            self.calls += 1
            y = self.right(x, normalized_shape, weight, bias, eps)
            return np.zeros_like(y) if self.calls == self.wrong else y

    verdicts = [runner(min_samples=10).measure(WrongOnCall(5), CASE, "forward").row["verdict"] for _ in range(5)]
    assert verdicts == ["wrong-after"] * 5
    monkeypatch.setattr(verify, "SAMPLE_ABOVE", 4096)
    monkeypatch.setattr(verify, "SAMPLED_ROWS", 8)
    caught = sum(runner(min_samples=10).measure(WrongOnCall(5), CASE, "forward").row["verdict"] == "wrong-after"
                 for _ in range(60))
    # call 5 is the fourth after the first: judged with probability 2/4 (JUDGED_PER_CASE = 2): 30 of 60 expected
    assert 14 <= caught <= 46, caught


def test_the_timed_outputs_are_judged_against_their_own_inputs():
    """Each call's inputs are the case's rows in a secret order: a backend that answers for the case's own
    rows (a precomputed answer, a guessed seed) is wrong on them."""
    class PrecomputedAnswer(cheaters.Cheater):
        name = "cheater-precomputed-answer"
        answer = None

        def layer_norm(self, x, normalized_shape, weight, bias, eps):
            if self.answer is None:
                inputs = cases.make_inputs(CASE, 0)  # the public seed
                self.answer = self.right(inputs.x, normalized_shape, inputs.weight, inputs.bias, eps)
            return self.answer.copy()

    row = runner().measure(PrecomputedAnswer(), CASE, "forward").row
    assert row["verdict"] == "wrong-after" and "rows reordered at random" in row["message"], row


# -- conformance: determinism compares two copies, never one buffer with itself ---------------------------------


def test_a_nondeterministic_kernel_writing_into_one_buffer_is_not_deterministic():
    """Before: ForwardRun.y was the backend's own buffer, so the second run's write changed the first run's y too,
    and a nondeterministic kernel passed 'deterministic'. Now the second run's output is refused for sharing the
    first's memory, the message saying so."""
    inputs = cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0)
    with pytest.raises(ConformanceError, match="aliases the previous call's output y"):
        conformance.check_forward(cheaters.NondeterministicOneBuffer(), inputs)


@pytest.mark.parametrize("cheater, called", [(cheaters.SkipsWhatItWouldFail, "pytest.skip"),
                                             (cheaters.XfailsWhatItWouldFail, "pytest.xfail")])
def test_a_backend_deciding_its_own_outcome_fails_in_conformance(cheater, called):
    """Issue 45: a kernel that called pytest.skip() on every case got the verdict PASS."""
    said = (rf"layer_norm (or layer_norm_statistics )?called {called}\(\) inside its call \(.*\): a backend says "
            rf"what it cannot run through its operations, dtypes and limits")
    with pytest.raises(ConformanceError, match=said):
        conformance.check_forward(cheater(), cases.make_inputs(CASE, 0))


@pytest.mark.e2e
def test_a_backend_that_skips_every_case_is_no_pass(make_plugins):
    import subprocess
    import sys

    from tests.plugins import ROOT

    env = make_plugins({"cheater-skips-what-it-would-fail": "tests.cheaters:SkipsWhatItWouldFail"}, dist="acme-skipper").env
    out = subprocess.run([sys.executable, "-m", "normbench", "test", "--impl=cheater-skips-what-it-would-fail", "-n", "0", "-q",
                          "-k", "test_forward and float32 and family_rows and hidden33"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" not in out.stdout.splitlines()[-1] and "failed" in out.stdout.splitlines()[-1], out.stdout[-2000:]
    assert "called pytest.skip() inside its call" in out.stdout


def test_an_output_in_its_inputs_memory_is_named_in_conformance():
    inputs = cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0)
    with pytest.raises(ConformanceError, match="modified its input x in place|aliases the input x"):
        conformance.check_forward(cheaters.AliasesItsInput(), inputs)


def test_a_write_into_an_input_fails_at_the_write_in_conformance():
    inputs = cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0)
    with pytest.raises(ConformanceError, match="wrote into an input it was handed, and undid the write"):
        conformance.check_forward(cheaters.WritesInputAndUndoes(), inputs)


def test_each_output_is_a_copy_taken_at_the_handover():
    """An output whose buffer the backend changes after handing it over: the copy keeps what was handed over."""
    backend = cheaters.OneOutputBuffer()
    inputs = cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0)
    run = conformance.run_forward(backend, inputs, statistics=False)
    backend.buffer[...] = 7.0
    assert not (run.y == 7.0).any()


class CheaperWhenLarge(cheaters.Cheater):
    """1/rms rounded to bfloat16 above 2^21 elements only: within every element's bound at bfloat16, and caught by
    the coherence checks, in conformance at the sweep's size and in the throughput judge."""

    name = "cheater-cheaper-when-large"
    dtypes = ("float32", "bfloat16")

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if x.size <= 1 << 21:
            return self.right(x, normalized_shape, weight, bias, eps)
        import ml_dtypes

        rows = np.asarray(x, np.float32).reshape(-1, math.prod(normalized_shape))
        centred = rows - rows.mean(axis=1, keepdims=True)
        rstd = (1 / np.sqrt((centred * centred).mean(axis=1, keepdims=True) + np.float32(eps)))
        y = centred * rstd.astype(ml_dtypes.bfloat16).astype(np.float32)  # the cheaper path: rstd in bfloat16
        y = y.reshape(x.shape) * (1 if weight is None else weight) + (0 if bias is None else bias)
        return y.astype(x.dtype)


def test_a_cheaper_path_taken_only_at_throughput_sizes_is_refused():
    """The throughput verifier runs the coherence checks on what it verifies, as the suites do."""
    row = runner(min_samples=3).measure(CheaperWhenLarge(), cases.Case("t", (2048, 2048), (2048,), "bfloat16"),
                                        "forward").row
    assert row["verdict"] == "wrong-before" and "coherent structure" in row["message"], row


def test_a_cheaper_path_taken_only_at_throughput_sizes_fails_the_suites_sweep_case():
    """The suites' sweep family holds a case of the CPU sweep's size: the cheaper path fails it (the error's
    structure, each element within its bound), and the honest path passes it."""
    case = next(c for c in cases.forward_cases() if c.family == "sweep")
    assert case.shape in cases.CPU_SWEEP_SHAPES and math.prod(case.shape) > 1 << 21
    inputs = cases.make_inputs(case, 0)
    with pytest.raises(ConformanceError, match="coherent structure"):
        conformance.check_forward(CheaperWhenLarge(), inputs)
    conformance.check_forward(cheaters.Cheater(), inputs)
