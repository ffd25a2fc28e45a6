"""``normbench table1`` as a user runs it: measured, compared with the paper, failing loudly."""

import re
import subprocess
import sys

import pytest

from tests import invariance_mutants as im
from tests.plugins import ROOT

FAKES = '''
from normbench import Availability
from tests.mutants import Fp32Kernel

class NeedsGpu(Fp32Kernel):
    name = "needs-gpu"

    @classmethod
    def availability(cls):
        return Availability.no("no GPU found; run on a machine with CUDA")
'''


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({"needs-gpu": "fake_table1_plugin:NeedsGpu", "mutant-control": "tests.mutants:Fp32Kernel",
                         "mutant-batch-axis": "tests.invariance_mutants:BatchAxis"}, dist="table1-plugins",
                        modules={"fake_table1_plugin": FAKES})


@pytest.fixture(scope="module")
def rms_plugins(make_plugins):
    """RMSNorm-only kernels (tests.invariance_mutants): the control and the mutants that break normbench's row."""
    return make_plugins({c.name: f"tests.rms_mutants:{c.__name__}" for c in (im.RMS_CONTROL, *im.RMS_INVARIANCE_MUTANTS)},
                        dist="table1-rms-plugins")


def table1(*args, env=None):
    return subprocess.run([sys.executable, "-m", "normbench", "table1", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_oracles_reproduce_the_paper_and_import_no_framework():
    code = ("import sys\nfrom normbench.front.cli import main\nrc = main(['table1'])\n"
            "print('HEAVY:', sorted(m for m in ('torch', 'jax') if m in sys.modules))\nsys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All 24 cells agree with the paper (and RMSNorm's with its derivation)." in out.stdout
    assert "HEAVY: []" in out.stdout
    for heading in ("Paper", "Measured", "Batch norm", "Weight norm", "Layer norm", "§3.1 recurrent networks",
                    "RNN (eq. 4)", "LSTM (eq. 20-22)", "no norm, 10*W"):
        assert heading in out.stdout


def test_a_backend_measures_the_layer_norm_row(plugins):
    out = table1("--impl=mutant-control", "--dtype=bfloat16", env=plugins.env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Layer norm: mutant-control (bfloat16), bfloat16, eps 1e-05" in out.stdout
    assert "RMSNorm *: float64 oracle (RMSNorm), float64, eps 0" in out.stdout  # it has no rms_norm
    assert "All 24 cells agree with the paper (and RMSNorm's with its derivation)." in out.stdout


def test_a_backend_with_rms_norm_measures_normbenchs_rmsnorm_row(rms_plugins):
    """An RMSNorm-only backend: its RMSNorm row is measured, the layer-norm row (and §3.1) stay the oracle's."""
    out = table1(f"--impl={im.RMS_CONTROL.name}", "--dtype=bfloat16", "--no-recurrent", env=rms_plugins.env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"RMSNorm *: {im.RMS_CONTROL.name} (bfloat16, RMSNorm), bfloat16, eps 1e-05" in out.stdout
    assert "Layer norm: float64 oracle (eq. 3), float64, eps 0" in out.stdout
    assert "implements rms_norm only, not layer_norm" in out.stderr and "stay the float64 oracle's" in out.stderr
    assert "* RMSNorm's row is normbench's measurement against normbench's derivation, not the paper's." in out.stdout
    assert "All 24 cells agree with the paper (and RMSNorm's with its derivation)." in out.stdout


@pytest.mark.parametrize("mutant, dtype, disagreement", [
    # LayerNorm without bias shipped as RMSNorm: invariant to re-centering, which RMSNorm is not
    (im.MeanSubtracted, "bfloat16", "RMSNorm * / Weight matrix re-centering: normbench derivation No, measured Invariant"),
    # 1/(sqrt(ms) + eps): RMS_eps(delta*a) = RMS_(eps/delta^2)(a) no longer holds
    (im.EpsOutsideSqrt, "float32", "RMSNorm * / Dataset re-scaling: normbench derivation Invariant, measured unclear"),
], ids=lambda v: getattr(v, "name", None))
def test_a_wrong_rmsnorm_disagrees_with_normbenchs_row_and_fails(rms_plugins, mutant, dtype, disagreement):
    out = table1(f"--impl={mutant.name}", f"--dtype={dtype}", "--no-recurrent", env=rms_plugins.env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert disagreement in out.stdout
    verdict = out.stdout[out.stdout.index("DISAGREE"):]
    assert "Batch norm /" not in verdict and "Weight norm /" not in verdict and "Layer norm /" not in verdict


def test_a_wrong_backend_disagrees_and_fails(plugins):
    """The batch-axis mutant is batch norm: the layer-norm row turns into batch norm's."""
    out = table1("--impl=mutant-batch-axis", "--no-recurrent", env=plugins.env)
    assert out.returncode == 1
    assert "cells DISAGREE with the paper" in out.stdout and "!!" in out.stdout
    assert "Layer norm / Dataset re-centering: paper No, measured Invariant" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--impl=nope"], "unknown backend 'nope'; known backends: *mutant-batch-axis, mutant-control, needs-gpu, numpy"),
    (["--impl=needs-gpu"], "no GPU found; run on a machine with CUDA. Known backends: *mutant-batch-axis"),
    (["--impl=all"], "table1 measures one backend's layer norm; choose one of: *mutant-batch-axis"),
    (["--impl=mutant-control", "--dtype=float64"], "supports float32, float16, bfloat16; choose one of those"),
    (["--dtype=float32"], "--dtype=float32 needs --impl"),
    (["--impl=numpy", "--eps=-1"], "eps must be a finite number >= 0"),
    (["--eps=0.1"], "--eps=0.1 needs --impl"),
])
def test_bad_input_is_a_usage_error(plugins, args, message):
    """``*`` in ``message`` stands for the built-in backends listed before the test's own
    (jax, ... as installed), so the test does not depend on which extras are present."""
    out = table1(*args, env=plugins.env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert re.search(re.escape(message).replace(r"\*", "(?:[a-z0-9_-]+, )*"), out.stderr), out.stderr
    assert "Traceback" not in out.stderr
