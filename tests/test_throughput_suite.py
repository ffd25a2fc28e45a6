"""The throughput suite as users run it: in a subprocess, on the real suites, on small filters.

Each run here times one or two cases with 3 samples and a 64 MiB ceiling
buffer, so the file stays fast; what is checked is selection, files and
verdicts, never a speed.
"""

import json
import subprocess

import pytest

from normbench.core import storage
from normbench.perf.throughput import THROUGHPUT as THROUGHPUT_SCHEMA
from normbench.suites import DIRECTORY
from tests.plugins import ROOT, pytest_command

SUITES = str(DIRECTORY)
THROUGHPUT = str(DIRECTORY / "test_throughput.py")
ONE_CASE = ["--normbench-shape=256x16384", "--normbench-dtype=float32", "--normbench-direction=forward",
            "--normbench-norm=layer_norm",
            "--normbench-min-samples=3", "--normbench-max-time=0", "--normbench-ceiling-mib=64"]


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({"zeros": "tests.synthetic:Zeros"}, dist="fake-plugins")


def run(plugins, *args, timeout=600):
    return subprocess.run(pytest_command(*args), cwd=ROOT, env=plugins.env,
                          capture_output=True, text=True, timeout=timeout)


def test_pytest_suites_runs_conformance_only_and_m_throughput_selects_the_sweep(plugins):
    out = run(plugins, SUITES, "--impl=numpy", "--collect-only", "-q")
    assert out.returncode == 0 and "test_throughput[" not in out.stdout and "deselected" in out.stdout
    out = run(plugins, SUITES, "--impl=numpy", "-m", "throughput", "--collect-only", "-q")
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids and all("test_throughput[numpy-" in i for i in ids)
    assert any(i.endswith("[numpy-bfloat16-rows2048-hidden2048-normal-forward+backward]") for i in ids)
    out = run(plugins, THROUGHPUT, "--impl=numpy", "--collect-only", "-q", "--normbench-direction=backward")
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids and all(i.endswith("-backward]") for i in ids)  # the file alone: its tests run, filtered


@pytest.mark.parametrize("option, message", [
    ("--normbench-dtype=float8", "Unknown dtype 'float8'; valid dtypes: float64, float32, float16, bfloat16"),
    ("--normbench-direction=sideways", "valid directions: forward, backward, forward+backward"),
    ("--normbench-shape=7x7", "Unknown shape '7x7'; valid shapes: 16384x256, 2048x2048"),
    ("--normbench-min-samples=1", "Use an integer >= 3"),
])
def test_an_unknown_filter_is_a_usage_error_listing_the_valid_values(plugins, option, message):
    out = run(plugins, THROUGHPUT, "--impl=numpy", option, "--collect-only", "-q")
    assert out.returncode == 4 and message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.e2e
def test_a_case_is_measured_written_and_handed_to_pytest_benchmark(plugins, tmp_path):
    out = run(plugins, THROUGHPUT, "--impl=numpy", *ONE_CASE, f"--normbench-out={tmp_path}", "--normbench-run-id=r1",
              f"--benchmark-json={tmp_path / 'bench.json'}", "-q")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "[1/1] numpy forward float32 256x16384: " in out.stdout and "% of " in out.stdout
    row = storage.load(tmp_path / "r1", THROUGHPUT_SCHEMA).iloc[0]
    assert row.verdict == "ok" and row.n >= 3 and row.gbps > 0 and row.run_id == "r1"
    env = json.loads((tmp_path / "r1" / "environment.json").read_text())
    assert env["ceilings"]["cpu"]["buffer_bytes"] == 64 << 20 and env["libraries"]["numpy"]
    bench = json.loads((tmp_path / "bench.json").read_text())["benchmarks"][0]
    assert bench["stats"]["rounds"] == row.n and bench["stats"]["median"] == pytest.approx(row.median_s, rel=1e-9)
    assert bench["extra_info"]["gbps"] == pytest.approx(row.gbps) and bench["options"]["timer"].endswith("replay_clock")


def test_a_wrong_backend_fails_and_is_recorded_as_an_error_not_a_speed(plugins, tmp_path):
    out = run(plugins, THROUGHPUT, "--impl=zeros", *ONE_CASE, f"--normbench-out={tmp_path}", "--normbench-run-id=r1")
    assert out.returncode == 1 and ("wrong-before: the first call (verified before timing): zeros "
                                    "float32-rows256-hidden16384-normal (seed 0): y[") in out.stdout
    row = storage.load(tmp_path / "r1", THROUGHPUT_SCHEMA).iloc[0]
    assert row.verdict == "wrong-before" and row.gbps != row.gbps  # NaN: no speed


def test_under_xdist_throughput_cases_skip_with_the_reason(plugins, tmp_path):
    out = run(plugins, THROUGHPUT, "--impl=numpy", *ONE_CASE, "-n", "2", "-rs", f"--normbench-out={tmp_path}")
    assert out.returncode == 0 and "run it without -n (pytest-xdist)" in out.stdout
    assert not any(tmp_path.iterdir())
