"""Never miss, never cry wolf, for gradients: every backward mutant fails the backward
suite, and its correct control passes it.

All of them run in one ``pytest suites/test_backward.py --impl=...`` subprocess,
registered through a throw-away dist-info entry point, as a plugin would be.
"""

import subprocess

import pytest

from normbench.suites import DIRECTORY as SUITES
from tests import mutants
from tests.plugins import ROOT, outcomes_by_backend, pytest_command, subprocess_env, write_dist_info

CONTROL = mutants.Fp32Kernel.name


@pytest.fixture(scope="module")
def backward_outcomes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("backward-mutant-plugins")
    classes = [mutants.Fp32Kernel, *mutants.BACKWARD_MUTANTS]
    write_dist_info(folder, {c.name: f"tests.mutants:{c.__name__}" for c in classes}, dist="normbench-mutants")
    xml = folder / "backward.xml"
    names = [c.name for c in classes]
    proc = subprocess.run(
        pytest_command(str(SUITES / "test_backward.py"), f"--impl={','.join(names)}", "-q", "-n", "2",
                       f"--junitxml={xml}", "--normbench-seed=0"),
        cwd=ROOT, env=subprocess_env(folder), capture_output=True, text=True, timeout=1200)
    output = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode in (0, 1), f"the suite did not run (exit {proc.returncode}):\n{output}"
    return outcomes_by_backend(xml, names)


def test_control_passes(backward_outcomes):
    control = backward_outcomes[CONTROL]
    assert control["failed"] == 0, f"the correct fp32 control failed: {dict(control)}"
    assert control["passed"] > 250


@pytest.mark.parametrize("mutant", mutants.BACKWARD_MUTANTS, ids=lambda c: c.name)
def test_mutant_fails(backward_outcomes, mutant):
    result = backward_outcomes[mutant.name]
    assert result["passed"] + result["failed"] > 0, f"{mutant.name} did not run"
    assert result["failed"] > 0, f"{mutant.name} ({mutant.__doc__.strip()}) passed the backward suite"
