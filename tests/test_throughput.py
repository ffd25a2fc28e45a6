"""The throughput judge: verify before and after timing, never report a wrong or impossible speed.

Every test uses synthetic backends (tests/synthetic.py), a fixed ceiling and
a host timer with a no-op cold-cache flush, so nothing here depends on how fast
this machine is. Timing tolerances are those of tests/test_timing.py.
"""

import math

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


def test_an_input_modified_in_place_is_caught():
    row = runner().measure(ScribblesOnInput(), CASE, "forward").row
    assert row["verdict"] == "wrong-after" and "modified its input x in place" in row["message"]


def test_right_values_faster_than_the_ceiling_are_an_error_after_measuring_the_ceiling_again():
    r = runner(ceiling_gbps=0.5)
    row = r.measure(CachesOutput(), CASE, "forward").row
    assert row["verdict"] == "above-ceiling"
    assert "faster than the device can move" in row["message"] and "recorded as an error" in row["message"]
    assert math.isnan(row["gbps"]) and row["ceiling_gbps"] == 0.5
    assert r.measure_ceiling.calls == 2  # measured again before calling it an error
    r.measure(CachesOutput(), CASE, "forward")
    assert r.measure_ceiling.calls == 2  # once per device


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
    case = cases.Case("t", (1000, 64), (64,), "float32")
    reference = verify.Reference(case, 0)
    assert len(reference.rows) == 16 and reference.rows[0] == 0 and reference.rows[-1] == 999
    assert reference.forward.y.shape[0] == 16 and reference.checked_inputs.case.rows == 16
    row = runner().measure(KnownCost(1e-4), case, "backward").row
    assert row["verdict"] == "ok" and "verified on 16 of 1000 rows" in row["message"], row["message"]

    class WrongLastRow(KnownCost):
        def layer_norm(self, x, normalized_shape, weight, bias, eps):
            y = np.array(super().layer_norm(x, normalized_shape, weight, bias, eps))
            y[-1] += 1.0  # the last row: always among the sampled ones
            return y

    bad = runner().measure(WrongLastRow(1e-4), case, "forward").row
    assert bad["verdict"] == "wrong-before" and "y[15, " in bad["message"]
    assert "row 15 here is row 999 of the case" in bad["message"]


def test_a_case_too_large_for_the_host_is_one_message_before_anything_is_made(monkeypatch):
    from normbench.core import machine
    from normbench.perf import verify
    from tests.synthetic import KnownCost

    monkeypatch.setattr(machine, "available_memory", lambda: machine.MemorySize(1 << 20, "test"))
    row = runner().measure(KnownCost(1e-4), cases.Case("t", (1000, 64), (64,), "float32"), "forward").row
    assert row["verdict"] == "error" and "needs about" in row["message"] and "1 MiB is available" in row["message"]
    assert verify.SAMPLE_ABOVE == 1 << 24
