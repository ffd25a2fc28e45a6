"""Throughput: every case of the device's sweep (``normbench.core.cases.throughput_cases``)
on every selected backend, in every direction (forward, backward, forward+backward).

Each case is verified against the float64 oracle before it is timed and again
after; a wrong result, or one faster than the measured copy-bandwidth ceiling
allows, fails the test and is recorded as an error, never as a speed. A passing
test means the backend was right and its speed was recorded: GB/s under the
byte model and % of the ceiling go to ``reports/<run-id>/`` and into
pytest-benchmark (``--benchmark-json`` keeps working; its numbers are the
samples ``normbench.perf.timing`` measured, per call, not a host clock around them).

Deselected by ``pytest suites/``; run with ``pytest suites/ -m throughput`` or
``pytest suites/test_throughput.py`` (never under ``-n``), or ``normbench run``.
"""

import pytest

from normbench.perf.timing import REPLAY, replay_clock


@pytest.mark.throughput
@pytest.mark.benchmark(timer=replay_clock)
def test_throughput(backend, case, direction, normbench_throughput, request):
    if request.config.getoption("benchmark_skip", False):
        pytest.skip("benchmarks are skipped (--benchmark-skip)")
    measurement = normbench_throughput.measure(backend, case, direction)
    row = measurement.row
    request.node.user_properties.append(("normbench_row", row))
    if not measurement.ok:
        pytest.fail(f"{row['verdict']}: {row['message']}", pytrace=False)
    benchmark = request.getfixturevalue("benchmark")
    benchmark.group = f"{direction} {case.dtype} {row['shape']}"
    benchmark.extra_info.update({k: row[k] for k in ("bytes", "byte_model", "gbps", "ceiling_gbps", "pct_of_ceiling",
                                                     "cache", "timer", "wide_spread", "run_id", "device")})
    REPLAY.load(measurement.timing.samples)
    benchmark.pedantic(REPLAY.advance, rounds=measurement.timing.n, iterations=1)
