"""The throughput judge: verify before and after timing, never report a wrong or impossible speed.

Every test uses synthetic backends (tests/synthetic.py), a fixed ceiling and
a host timer with a no-op cold-cache flush, so nothing here depends on how fast
this machine is. Timing tolerances are those of tests/test_timing.py.
"""

import dataclasses
import math

import numpy as np
import pytest

from normbench.core import cases
from normbench.perf.roofline import direction_bytes
from normbench.perf.throughput import ThroughputRunner
from normbench.perf.timing import HostTimer, TimingOptions
from tests.synthetic import CachesOutput, Erratic, KnownCost, Raises, RightThenZeros, ScribblesOnInput, Zeros, fixed_ceiling

CASE = cases.Case("t", (64, 256), (256,), "float32")


def runner(ceiling_gbps: float = 1e6, **options) -> ThroughputRunner:
    opts = TimingOptions(**({"min_samples": 20, "max_time_s": 0.0} | options))
    return ThroughputRunner(opts, measure_ceiling=fixed_ceiling(ceiling_gbps),
                            make_timer=lambda key, cache, events: HostTimer(flush=lambda: None))


@pytest.mark.parametrize("direction", ["forward", "backward", "forward+backward"])
def test_a_known_cost_gives_its_time_gb_per_s_and_fraction_of_the_ceiling(direction):
    cost = 10e-3  # the backend's own NumPy math (~0.3 ms, more on a busy machine) must fit inside it
    calls_per_op = 2 if direction == "forward+backward" else 1
    backend = KnownCost(cost)
    m = runner(ceiling_gbps=10.0).measure(backend, CASE, direction)
    row = m.row
    assert row["verdict"] == "ok", row["message"]
    op_cost = calls_per_op * cost
    assert op_cost * 0.999 <= row["min_s"] <= 1.5 * op_cost and row["median_s"] <= 10 * op_cost
    assert row["bytes"] == direction_bytes(64, 256, "float32", direction)
    assert math.isclose(row["gbps"], row["bytes"] / row["median_s"] / 1e9)
    assert math.isclose(row["pct_of_ceiling"], 100 * row["gbps"] / 10.0)
    assert row["n"] == m.timing.n >= 20 and row["timer"] == "perf_counter_ns" and row["cache"] == "cold"
    assert (row["backend"], row["direction"], row["shape"], row["case_id"]) == ("known-cost", direction, "64x256", CASE.id)


def test_warm_up_runs_first_so_a_compiling_first_call_never_enters_the_numbers():
    backend = KnownCost(cost=2e-3, first_cost=0.3, slow_calls=2)  # the verification call and the warm-up
    row = runner().measure(backend, CASE, "forward").row
    assert row["verdict"] == "ok"
    assert row["max_s"] < 0.2, "a 300 ms compile reached a sample"
    assert backend.warmups == [((64, 256), (256,), True, True, 1e-5)]  # the hook, once, with the case's arguments


def test_wrong_values_are_an_error_and_never_timed():
    row = runner().measure(Zeros(), CASE, "forward").row
    assert row["verdict"] == "wrong-before"
    assert "y[" in row["message"] and "> bound" in row["message"]
    assert math.isnan(row["gbps"]) and math.isnan(row["median_s"])


def test_a_result_that_turns_wrong_during_timing_is_caught_after_the_loop():
    row = runner().measure(RightThenZeros(), CASE, "forward").row
    assert row["verdict"] == "wrong-after" and "y[" in row["message"]
    assert math.isnan(row["gbps"]) and math.isnan(row["pct_of_ceiling"])


def test_an_input_modified_in_place_is_caught_at_the_write():
    """NumPy inputs are handed read-only: the write fails where it is made, even one undone before returning."""
    row = runner().measure(ScribblesOnInput(), CASE, "forward").row
    assert row["verdict"] == "wrong-before" and "modified its input x in place" in row["message"], row["message"]
    assert "handed read-only, the write failed where it was made" in row["message"]


def test_right_values_faster_than_the_ceiling_are_an_error_after_measuring_the_ceiling_again():
    from normbench.impls.numpy_ref import NumpyBackend

    r = runner(ceiling_gbps=1e-6)  # no kernel moves its bytes this slowly: every real one is above it
    row = r.measure(NumpyBackend(), CASE, "forward").row
    assert row["verdict"] == "above-ceiling"
    assert "faster than the device can move" in row["message"] and "recorded as an error" in row["message"]
    assert math.isnan(row["gbps"]) and row["ceiling_gbps"] == 1e-6
    assert r.measure_ceiling.calls == 2  # measured again before calling it an error
    r.measure(NumpyBackend(), CASE, "forward")
    assert r.measure_ceiling.calls == 2  # once per device


def test_a_cached_output_is_refused_for_what_it_is():
    """Returning the first call's array every time: the timed calls' inputs are the case's rows reordered, so the
    cache is wrong for them, and it is the same buffer as the last judged call's: named as such."""
    row = runner().measure(CachesOutput(), CASE, "forward").row
    assert row["verdict"] == "wrong-after", row
    assert "aliases the output y of an earlier call" in row["message"] or "rows reordered at random" in row["message"], row


def test_a_speed_within_the_margin_above_the_ceiling_is_a_speed():
    """Work that cannot run faster than 105 % of the ceiling is never accused (the margin is 110 %)."""
    cost = 3e-3
    fastest_possible = direction_bytes(64, 256, "float32", "forward") / cost / 1e9
    row = runner(ceiling_gbps=fastest_possible / 1.05).measure(KnownCost(cost), CASE, "forward").row
    assert row["verdict"] == "ok" and row["pct_of_ceiling"] <= 105.01


def test_a_backend_that_raises_is_an_error_row_and_the_run_goes_on():
    row = runner().measure(Raises(), CASE, "forward").row
    assert row["verdict"] == "error" and "RuntimeError: kernel launch failed" in row["message"]


def test_a_wide_spread_is_flagged_not_hidden():
    row = runner(min_samples=12).measure(Erratic(2e-3), CASE, "forward").row
    assert row["verdict"] == "ok" and row["wide_spread"] and "wide spread" in row["message"]


def test_the_directions_and_backends_of_a_case_share_its_inputs_and_oracle(monkeypatch):
    from normbench.perf import verify

    made = []
    monkeypatch.setattr(verify, "make_inputs", lambda case, seed: made.append(case) or cases.make_inputs(case, seed))
    r = runner(min_samples=3)
    for backend in (KnownCost(1e-4), KnownCost(1e-4)):
        for direction in ("forward", "backward", "forward+backward"):
            assert r.measure(backend, CASE, direction).ok
    assert made == [CASE]
    r.measure(KnownCost(1e-4), cases.Case("t", (8, 256), (256,), "float32"), "forward")
    assert len(made) == 2


def test_a_large_case_is_verified_on_sampled_rows_and_the_row_says_so(monkeypatch):
    """The GPU sweep's cases (up to 8192 x 65536) were verified on every element on the host: 1.5 to 2 hours and
    ~62 GB for the sweep (issue 29). Above SAMPLE_ABOVE elements y and dx are checked on SAMPLED_ROWS rows spread
    over the case (first and last included); a wrong sampled row still fails, and an ok row says what was checked."""
    import numpy as np

    from normbench.perf import verify
    from tests.synthetic import KnownCost

    monkeypatch.setattr(verify, "SAMPLE_ABOVE", 4096)
    monkeypatch.setattr(verify, "SAMPLED_ROWS", 16)
    monkeypatch.setattr(verify, "CHUNK_ELEMENTS", 64 * 100)  # ten chunks of 100 rows
    case = cases.Case("t", (1000, 64), (64,), "float32")
    reference = verify.Reference(case, 0)
    rows = reference.rows
    assert len(rows) == 16 and (np.diff(rows) > 0).all() and 0 <= rows[0] and rows[-1] < 1000
    assert not np.array_equal(rows, verify.Reference(case, 0).rows)  # drawn anew, from the OS: never predictable
    assert reference.forward.y.shape[0] == 16 and reference.checked_inputs.case.rows == 16
    for direction in ("forward", "backward", "forward+backward"):
        row = runner().measure(KnownCost(1e-4), case, direction).row
        assert row["verdict"] == "ok" and "verified on 16 of 1000 rows drawn at random" in row["message"], row

    class WrongRow(KnownCost):
        def layer_norm(self, x, normalized_shape, weight, bias, eps):
            y = np.array(super().layer_norm(x, normalized_shape, weight, bias, eps))
            y[500] += 1.0  # one row: sampled, or found by the every-row check of the last call
            return y

    bad = runner().measure(WrongRow(1e-4), case, "forward").row
    assert bad["verdict"] in ("wrong-before", "wrong-after") and "> bound" in bad["message"], bad
    # the wrong row is row 500 of the call's inputs, which are the case's rows in a secret order
    assert "here is row" in bad["message"] or "every row of the case, by the chunked oracle" in bad["message"]


def test_a_case_too_large_for_the_host_is_one_message_before_anything_is_made(monkeypatch):
    from normbench.core import machine
    from normbench.perf import verify
    from tests.synthetic import KnownCost

    monkeypatch.setattr(machine, "available_memory", lambda: machine.MemorySize(1 << 20, "test"))
    row = runner().measure(KnownCost(1e-4), cases.Case("t", (1000, 64), (64,), "float32"), "forward").row
    assert row["verdict"] == "error" and "needs about" in row["message"] and "1 MiB is available" in row["message"]
    assert verify.SAMPLE_ABOVE == 1 << 24


# -- the fused operations (docs/fused.md): the same runner, their residual verified, counted and handed over ------

FUSED_CASES = [cases.Case("t", (16, 64), (64,), "float32", norm="add_rms_norm"),
               cases.Case("t", (16, 64), (64,), "float32", norm="add_layer_norm"),
               cases.Case("t", (16, 64), (64,), "bfloat16", norm="add_rms_norm", residual_dtype="float32")]


@pytest.mark.parametrize("name", ["numpy", "torch"])
@pytest.mark.parametrize("case", FUSED_CASES, ids=lambda c: c.id)
def test_a_fused_case_is_verified_and_its_bytes_count_the_residual_in_its_own_dtype(name, case):
    from normbench import get_registry

    registry = get_registry()
    if not registry.availability(name):
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    backend, r = registry.create(name), runner(min_samples=3)
    for direction in ("forward", "backward", "forward+backward"):
        row = r.measure(backend, case, direction).row
        assert row["verdict"] == "ok", row["message"]
        assert row["normalization"] == case.norm and row["case_id"] == case.id
        assert row["bytes"] == direction_bytes(16, 64, case.dtype, direction, norm=case.norm,
                                               residual_dtype=case.residual_type)
        assert row["bytes"] > direction_bytes(16, 64, case.dtype, direction, norm=case.norm.removeprefix("add_"))
        if case.residual_dtype:  # the float32 residual stream counted at 4 bytes, not at x's 2
            assert row["bytes"] > direction_bytes(16, 64, case.dtype, direction, norm=case.norm)


FUSED = cases.Case("t", (16, 64), (64,), "bfloat16", norm="add_rms_norm")


@pytest.mark.parametrize("direction", ["forward", "backward", "forward+backward"])
@pytest.mark.parametrize("norm", ["add_rms_norm", "add_layer_norm"])
def test_the_correct_fused_kernel_is_ok_so_a_mutant_fails_for_its_bug(norm, direction):
    from tests.fused_mutants import FusedKernel

    row = runner(min_samples=3).measure(FusedKernel(), dataclasses.replace(FUSED, norm=norm), direction).row
    assert row["verdict"] == "ok", row["message"]


def test_a_kernel_normalizing_the_unrounded_sum_is_ok_though_far_from_the_stored_sums_normalization():
    """Either rounding of the sum is correct (docs/fused.md): at an offset of 100 in bfloat16 the two conventions'
    references are hundreds of bounds apart, and a kernel following the unrounded one is a speed, not wrong."""
    from normbench.check import conformance, error_model, fused
    from tests.fused_mutants import UnroundedSum

    case = cases.Case("t", (16, 64), (64,), "bfloat16", dist="offset1e2", norm="add_layer_norm")
    inputs = cases.make_inputs(case, 0)
    stored, unrounded = conformance.reference(inputs), fused.unrounded_reference(inputs)
    assert (np.abs(unrounded.y - stored.y) > 100 * error_model.forward_bound(stored, case.dtype)).any()
    row = runner(min_samples=3).measure(UnroundedSum(), case, "forward").row
    assert row["verdict"] == "ok", row["message"]


def _fused_mutant(name):
    from tests import fused_mutants

    return getattr(fused_mutants, name)()


@pytest.mark.parametrize("mutant, direction, verdict, named", [
    ("ResidualOutNotWritten", "forward", "wrong-before", "residual_out["),   # the residual handed back, not the sum
    ("ResidualOutTruncated", "forward", "wrong-before", "residual_out["),    # the sum rounded toward zero
    ("ResidualOutTruncated", "forward+backward", "wrong-before", "residual_out["),
    ("NormalizesX", "forward", "wrong-before", "): y["),                     # y of x, not of the sum
    ("DropsResidualGradient", "backward", "wrong-before", "): dsum["),       # dsum without dresidual_out
    ("DropsResidualGradient", "forward+backward", "wrong-before", "): dsum["),
    ("InPlaceResidual", "forward", "wrong-before", "modified its input residual in place"),  # the sum into the residual
    ("BackwardIntoDy", "backward", "wrong-before", "modified its input dy in place"),         # dsum written into dy
])
def test_a_fused_mutant_is_wrong_not_a_speed(mutant, direction, verdict, named):
    row = runner(min_samples=3).measure(_fused_mutant(mutant), FUSED, direction).row
    assert row["verdict"] == verdict and named in row["message"], (row["verdict"], row["message"])
    assert math.isnan(row["gbps"])


def test_a_fused_backend_writing_into_its_residual_is_caught_by_the_input_check():
    """Right outputs every time (from a copy of the first residual it saw), the residual overwritten after: only the
    input check sees it, and it names the residual."""
    from tests.fused_mutants import FusedKernel

    class ScribblesOnResidual(FusedKernel):
        """Right outputs, the residual overwritten after, its read-only flag lifted first (as a framework whose arrays
        have no such flag would write)."""

        name = "scribbles-on-residual"

        def add_rms_norm(self, x, residual, normalized_shape, weight, eps):
            out = super().add_rms_norm(x, residual, normalized_shape, weight, eps)
            residual.flags.writeable = True
            residual[...] = 0
            return out

    row = runner(min_samples=3).measure(ScribblesOnResidual(), FUSED, "forward").row
    assert row["verdict"] == "wrong-before" and "modified its input residual in place" in row["message"], row["message"]


def test_a_fused_backward_writing_into_dresidual_out_or_residual_out_is_caught():
    """The backward's own inputs are checked too: dresidual_out (the harness's) and residual_out (what the untimed
    forward wrote and the backward is handed)."""
    from tests.fused_mutants import FusedKernel

    class Scribbles(FusedKernel):
        """Right gradients every time, ``target`` written into after (its read-only flag lifted first)."""

        name = "scribbles-on-backward-inputs"
        target = "dresidual_out"

        def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps):
            out = tuple(np.array(g) for g in super().add_rms_norm_backward(dy, dresidual_out, residual_out,
                                                                          normalized_shape, weight, eps))
            written = {"dresidual_out": dresidual_out, "residual_out": residual_out}[self.target]
            written.flags.writeable = True
            written[0, 0] += 1
            return out

    for target in ("dresidual_out", "residual_out"):
        backend = Scribbles()
        backend.target = target
        row = runner(min_samples=3).measure(backend, FUSED, "backward").row
        assert row["verdict"] == "wrong-before" and f"modified its input {target} in place" in row["message"], row


def test_a_large_fused_case_samples_the_residual_and_dresidual_out_with_x_and_dy(monkeypatch):
    """Sampled rows of a fused case take their residual and dresidual_out from the same rows: numpy's correct dsum
    passes only so; a residual_out wrong in the last row fails (on the sampled rows, or on every row at the last
    call), its row named."""
    from normbench import get_registry
    from normbench.perf import verify
    from tests.fused_mutants import FusedKernel

    monkeypatch.setattr(verify, "SAMPLE_ABOVE", 4096)
    monkeypatch.setattr(verify, "SAMPLED_ROWS", 16)
    case = cases.Case("t", (1000, 64), (64,), "float32", norm="add_layer_norm")
    reference = verify.Reference(case, 0)
    assert reference.checked_inputs.residual.shape == reference.checked_dresidual.shape == (16, 64)
    assert (reference.checked_inputs.residual[-1] == reference.inputs.residual[reference.rows[-1]]).all()
    for direction in ("forward", "backward", "forward+backward"):
        row = runner(min_samples=3).measure(get_registry().create("numpy"), case, direction).row
        assert row["verdict"] == "ok" and "verified on 16 of 1000 rows" in row["message"], row["message"]

    class WrongLastRow(FusedKernel):
        def finish(self, y, stored, x):
            stored = stored.copy()
            stored[-1, 0] += 1.0
            return super().finish(y, stored, x)

    bad = runner(min_samples=3).measure(WrongLastRow(), case, "forward").row
    assert bad["verdict"] in ("wrong-before", "wrong-after") and "residual_out[" in bad["message"], bad["message"]
    assert "drawn at random" in bad["message"] or "every row of the case" in bad["message"], bad["message"]


def test_a_backend_without_the_fused_operations_skips_their_cases_saying_so():
    from normbench.check.conformance import skip_reason
    from tests.mutants import Fp32Kernel  # LayerNorm alone

    backend = Fp32Kernel()
    for case in FUSED_CASES:
        reason = skip_reason(backend, case, backward=True)
        assert reason and f"not {case.norm}" in reason and "implements" in reason, reason
