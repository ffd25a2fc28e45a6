"""normbench's command line, as a user types it."""

import json
import subprocess
import sys

import pytest

from normbench.check import outcomes
from normbench.core import storage
from normbench.perf.throughput import THROUGHPUT
from tests.plugins import ROOT


def normbench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_list_shows_the_builtin_backends():
    out = normbench("list")
    assert out.returncode == 0
    header, *rows = out.stdout.splitlines()
    assert header.split()[:3] == ["name", "provided", "by"]
    assert any(r.startswith("numpy ") and " yes " in r for r in rows)


def test_list_reports_a_broken_plugin_and_keeps_the_others(plugin_folder):
    plugin_folder.distribution({"broken": "no_such_module:Backend", "Bad Name": "x:y"}, dist="acme-kernels")
    out = normbench("list", env=plugin_folder.env)
    assert out.returncode == 0
    assert "problem: backend 'broken' from distribution acme-kernels 0.0.0" in out.stdout
    assert "backend name 'Bad Name' from distribution acme-kernels is not valid" in out.stdout
    assert any(line.startswith("numpy ") for line in out.stdout.splitlines())


def test_check_checks_every_backend_it_names():
    out = normbench("check", "--impl=numpy,numpy", "--shape=8x16")
    assert out.returncode == 0 and out.stdout.count("PASS numpy float32-rows8-hidden16-normal") == 1


def test_check_fails_if_any_named_backend_fails(plugin_folder):
    plugin_folder.distribution({"mutant-bessel": "tests.mutants:BesselCorrection"})
    out = normbench("check", "--impl=numpy,mutant-bessel", "--shape=8x4", env=plugin_folder.env)
    assert out.returncode == 1 and out.stdout.startswith("PASS numpy ") and "\nFAIL mutant-bessel " in out.stdout


def test_run_with_an_unknown_backend_creates_nothing(tmp_path):
    out = normbench("run", "--impl=nope", f"--out={tmp_path / 'runs'}")
    assert out.returncode == 2 and "unknown backend 'nope'" in out.stderr and out.stderr.count("error") == 1
    assert not (tmp_path / "runs").exists() and "Traceback" not in out.stderr


def test_check_passes_a_correct_backend():
    out = normbench("check", "--impl=numpy", "--shape=64x1000", "--dtype=bfloat16", "--dist=offset1e3")
    assert out.returncode == 0 and out.stdout.startswith("PASS numpy bfloat16-rows64-hidden1000-offset1e3")


@pytest.mark.parametrize("args, case", [
    (["--norm=rms_norm_quant"], "q-rms-float32-rows8-hidden64-normal-e4m3-scale1"),  # the defaults
    (["--norm=layer_norm_quant", "--qdtype=int8", "--scale=0.05"], "q-float32-rows8-hidden64-normal-int8-scale0.05"),
    (["--norm=add_rms_norm_dynamic_quant", "--scale-ub=3", "--residual=zero", "--residual-dtype=float32",
      "--dtype=bfloat16"], "dq-add-rms-bfloat16-residualfloat32-rows8-hidden64-normal-residualzero-e4m3-ub3"),
    (["--norm=add_layer_norm", "--residual=dominant"], "add-float32-rows8-hidden64-normal-residualdominant"),
])
def test_check_takes_the_quantized_and_fused_operations_values(args, case):
    """Issue 45: --norm=<any *_quant> always failed, needing a qdtype no option could give."""
    out = normbench("check", "--impl=numpy", "--shape=8x64", *args)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.startswith(f"PASS numpy {case} (seed 0)"), out.stdout


def test_check_fails_a_wrong_backend_with_a_diagnosis(plugin_folder):
    plugin_folder.distribution({"mutant-bessel": "tests.mutants:BesselCorrection"})
    out = normbench("check", "--impl=mutant-bessel", "--shape=8x4", env=plugin_folder.env)
    assert out.returncode == 1
    assert out.stdout.startswith("FAIL mutant-bessel float32-rows8-hidden4-normal (seed 0): y[")
    assert "> bound" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["check", "--impl=nope", "--shape=4x4"], "unknown backend 'nope'; known backends:"),
    (["check", "--impl=numpy", "--shape=4x8", "--normalized-shape=16"], "does not end with normalized_shape"),
    (["check", "--impl=numpy", "--shape=4x8", "--eps=inf"], "eps must be a finite number"),
    (["check", "--impl=numpy", "--shape=4xq"], "Could not parse value: '4xq'"),
    (["check", "--impl=numpy", "--shape=4x8", "--dtype=float8"], "invalid choice: 'float8'"),
    (["run", "--seed=x"], "Could not parse value: 'x'"),
    (["run", "--direction=sideways"], "valid directions: forward, backward, forward+backward"),
    (["run", "--dtype=float8"], "valid dtypes: float64, float32, float16, bfloat16"),
    (["run", "--shape=3x3"], "valid shapes: 16384x256"),
    (["run", "--suites=speed"], "Valid suites: conformance, throughput"),
    (["list", "--bogus"], "unrecognized arguments: --bogus"),
    (["check", "--impl=numpy", "--shape=8x4", "--seed=-5"], "Seed -5 is out of range"),
    (["table1", "--seed=-5"], "Seed -5 is out of range"),
    (["check", "--impl=numpy", "--shape=100000000x100000"], "needs about 2.27 PiB of memory, but"),
    (["check", "--impl=numpy", "--shape=4x"], "A size is missing"),
    (["check", "--impl=numpy", "--shape=4xx8"], "A size is missing"),
    (["check", "--impl=", "--shape=4x8"], "It names no backend"),
    (["run", "--impl="], "It names no backend"),
    (["test", "--impl="], "It names no backend"),
    (["table1", "--impl="], "It names no backend"),
    (["run", "-n", "x"], "argument -n/--workers: Could not parse value: 'x'"),
    (["run", "--run-id=../../x"], "--run-id"),
    (["run", "--run-id=/tmp/x"], "--run-id"),
    # issue 45: the quantized and fused operations' own values, each refused where it does not apply
    (["check", "--impl=numpy", "--shape=4x8", "--norm=rms_norm", "--qdtype=int8"], "--qdtype=int8: --norm=rms_norm "
                                                                                   "does not take it (RMSNorm). Fix: "
                                                                                   "give --norm=rms_norm_quant"),
    (["check", "--impl=numpy", "--shape=4x8", "--norm=rms_norm_dynamic_quant", "--scale=2"],
     "a dynamic quantization computes its own scales (--scale-ub bounds them)"),
    (["check", "--impl=numpy", "--shape=4x8", "--norm=layer_norm_quant", "--scale-ub=2"],
     "a static quantization's scale is --scale"),
    (["check", "--impl=numpy", "--shape=4x8", "--norm=layer_norm", "--residual=zero"],
     "--residual=zero: --norm=layer_norm does not take it (LayerNorm). Fix: give --norm=add_layer_norm"),
    (["check", "--impl=numpy", "--shape=4x8", "--norm=rms_norm_quant", "--scale=1e39"],
     "A scale must stay finite and > 0 in float32"),
    (["check", "--impl=numpy", "--shape=4x8", "--norm=rms_norm_quant", "--scale=1e-46"],
     "A scale must stay finite and > 0 in float32"),
    (["check", "--impl=numpy", "--shape=4x8", "--normalized-shape=4x8", "--layout=transposed"],
     "needs a rank-2 shape (rows, hidden) normalized over its last dim"),
    (["run", "--norm=rms_norm_quant"], "The throughput sweep does not time rms_norm_quant; it times layer_norm, "),
])
def test_bad_input_gets_one_clear_message(args, message):
    out = normbench(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.e2e
def test_run_prints_a_summary(tmp_path):
    out = normbench("run", "--impl=numpy", "-n", "0", f"--out={tmp_path}", "--run-id=r1", "-m", "family_multidim")
    assert out.returncode == 0, out.stdout[-2000:]
    assert "normbench conformance summary" in out.stdout
    assert any(line.split()[:1] == ["numpy"] and line.rstrip().endswith("PASS") for line in out.stdout.splitlines())
    conformance = storage.load(tmp_path / "r1", outcomes.CONFORMANCE)
    assert set(conformance.outcome) == {"passed"} and set(conformance.backend) == {"numpy"}
    assert {"test_forward", "test_backward"} <= set(conformance.test) and conformance.case.str.len().min() > 0


@pytest.mark.e2e
def test_run_runs_both_suites_into_one_results_folder(tmp_path):
    """One conformance family and one throughput case (3 samples, a small ceiling buffer)."""
    out = normbench("run", "--impl=numpy", "-n", "0", f"--out={tmp_path}", "--run-id=r1", "--shape=256x16384",
                    "--dtype=float32", "--direction=forward",
                    "--norm=layer_norm", "-k", "(family_multidim or throughput) and not rms and not add-",
                    "--normbench-min-samples=3", "--normbench-max-time=0", "--normbench-ceiling-mib=64")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "[1/1] numpy forward float32 256x16384: " in out.stdout  # progress
    summary = out.stdout[out.stdout.index("normbench throughput summary"):]
    assert "numpy    forward    float32  1/1" in summary and "ceiling cpu: " in summary
    folder = tmp_path / "r1"
    assert {p.name for p in folder.iterdir()} == {"environment.json", "throughput.csv", "throughput.json",
                                                  "conformance.csv", "conformance.json", "report.html",
                                                  ".normbench.lock"}  # the run folder's lock (run_folder.py)
    assert storage.load(folder, THROUGHPUT).verdict.tolist() == ["ok"]
    assert "<polyline" in (folder / "report.html").read_text() and f"report: {folder / 'report.html'}" in out.stdout
    assert "test_forward" in set(storage.load(folder, outcomes.CONFORMANCE).test)
    env = json.loads((folder / "environment.json").read_text())
    assert env["command"].startswith("normbench run --impl=numpy") and "cpu" in env["ceilings"]
