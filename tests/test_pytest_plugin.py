"""The pytest plugin, run as users run it: in a subprocess, on the real suites."""

import os
import subprocess

import pytest

from normbench import __version__
from normbench.suites import DIRECTORY as SUITES
from tests.plugins import ROOT, pytest_command

FORWARD = str(SUITES / "test_forward.py")
BACKWARD = str(SUITES / "test_backward.py")

FAKES = '''
from normbench import Availability
from tests.mutants import Fp32Kernel

class NeedsGpu(Fp32Kernel):
    name = "needs-gpu"

    @classmethod
    def availability(cls):
        return Availability.no("no GPU found; run on a machine with CUDA")


class ForwardOnly(Fp32Kernel):
    name = "forward-only"
    has_backward = False

    def layer_norm_backward(self, *args):
        raise AssertionError("the harness called the backward of a backend without one")
'''


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({"needs-gpu": "fake_backends_plugin:NeedsGpu", "broken": "no_such_module:Backend",
                         "mutant-eps-fixed": "tests.mutants:EpsNotPropagated",
                         "forward-only": "fake_backends_plugin:ForwardOnly"}, dist="fake-plugins",
                        modules={"fake_backends_plugin": FAKES})


def run(plugins, *args, timeout=600):
    return subprocess.run(pytest_command(*args), cwd=ROOT, env=plugins.env,
                          capture_output=True, text=True, timeout=timeout)


def test_unknown_backend_is_a_usage_error_listing_the_names(plugins):
    out = run(plugins, FORWARD, "--impl=nope", "--collect-only", "-q")
    assert out.returncode == 4
    assert "unknown backend 'nope'; known backends:" in out.stderr and "numpy" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_unavailable_named_backend_is_a_usage_error_with_its_reason(plugins):
    out = run(plugins, FORWARD, "--impl=needs-gpu", "--collect-only", "-q")
    assert out.returncode == 4
    assert "no GPU found; run on a machine with CUDA" in out.stderr


def test_broken_named_plugin_names_its_distribution(plugins):
    out = run(plugins, FORWARD, "--impl=broken", "--collect-only", "-q")
    assert out.returncode == 4
    assert "fake-plugins" in out.stderr and "failed to import" in out.stderr


@pytest.mark.e2e
def test_all_skips_and_lists_what_cannot_run(plugins):
    out = run(plugins, FORWARD, "--impl=all", "--collect-only", "-k", "hidden1000-offset3 and not torch")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "normbench: skipped needs-gpu: backend 'needs-gpu' is not available: no GPU found" in out.stdout
    assert "normbench: skipped broken:" in out.stdout
    assert "test_forward[numpy-float32-rows5-hidden1000-offset3]>" in out.stdout


def test_bad_seed_is_a_usage_error(plugins):
    out = run(plugins, FORWARD, "--impl=numpy", "--normbench-seed=3..1", "--collect-only", "-q")
    assert out.returncode == 4 and "Could not parse value: '3..1'" in out.stderr


def test_ids_and_header_and_seed_ranges(plugins):
    out = run(plugins, FORWARD, "--impl=numpy", "--normbench-seed=4..5", "--collect-only", "-k", "hidden1000")
    assert f"normbench {__version__}: backends numpy (" in out.stdout and "seed 4,5 (2 seeds)" in out.stdout
    listed = run(plugins, FORWARD, "--impl=numpy", "--normbench-seed=1,4,9", "--collect-only", "-k", "hidden1000")
    assert "seed 1,4,9 (3 seeds)" in listed.stdout  # the seeds that run, never a range that names others
    assert "test_forward[numpy-float16-rows5-hidden1000-offset3-seed5]>" in out.stdout


def test_families_are_markers(plugins):
    out = run(plugins, FORWARD, "--impl=numpy", "--collect-only", "-q", "-m", "family_layout")
    assert out.returncode == 0
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    # every operation: LayerNorm's 16 layout cases (4 layouts: float32 and bfloat16 at hidden 100, float32 at
    # 128 and 127) and their RMSNorm, Add+LayerNorm and Add+RMSNorm twins
    assert len(collected) == 64 and all("-offset3-" in line for line in collected)
    assert sum("numpy-rms-" in line for line in collected) == 16
    assert sum("numpy-add-rms-" in line for line in collected) == 16


def test_a_failure_says_how_to_reproduce_it(plugins):
    out = run(plugins, FORWARD, "--impl=mutant-eps-fixed", "-q", "-k", "rows8-hidden64-sigmasqrteps-eps0.5",
              "--normbench-seed=7")
    assert out.returncode == 1
    assert "rstd[" in out.stdout or "y[" in out.stdout
    node = os.path.relpath(FORWARD, ROOT)  # from the rootdir: suites/ in a checkout, site-packages when installed
    assert (f"pytest '{node}::test_forward[mutant-eps-fixed-float32-rows8-hidden64-sigmasqrteps-"
            "eps0.5]' --impl=mutant-eps-fixed --normbench-seed=7") in out.stdout


def test_unsupported_dtypes_are_skipped_with_the_reason(plugins):
    out = run(plugins, FORWARD, "--impl=mutant-eps-fixed", "-q", "-rs", "-k", "float64-rows5-hidden1000")
    assert out.returncode == 0
    assert "backend 'mutant-eps-fixed' does not support float64" in out.stdout


@pytest.mark.e2e
def test_suites_run_under_xdist(plugins, runner):
    result = runner.pytest(FORWARD, "--impl=numpy", "-q", "-n", "2", "-m", "family_rank or family_multidim",
                           plugins=plugins)
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert result.parseoutcomes()["passed"] > 0


def test_a_backend_without_backward_has_its_gradient_tests_skipped_with_the_reason(plugins, runner):
    result = runner.pytest(BACKWARD, "--impl=forward-only", "-q", "-rs", "-m", "family_affine or family_gradcheck",
                           plugins=plugins)
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert "backend 'forward-only' has no backward (has_backward = False)" in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert "passed" not in outcomes and "failed" not in outcomes and outcomes["skipped"] > 0, outcomes
