"""Never miss, never cry wolf: every forward mutant fails the forward suite,
and its correct control passes it.

All mutants run in one ``pytest suites/test_forward.py --impl=...`` subprocess,
registered through a throw-away dist-info entry point, as a plugin would be.
"""

import subprocess

import pytest

from normbench.suites import DIRECTORY as SUITES
from tests import mutants
from tests.plugins import ROOT, outcomes_by_backend, pytest_command, subprocess_env, write_dist_info

CONTROL = mutants.Fp32Kernel.name


@pytest.fixture(scope="module")
def forward_outcomes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mutant-plugins")
    classes = [mutants.Fp32Kernel, *mutants.FORWARD_MUTANTS]
    write_dist_info(folder, {c.name: f"tests.mutants:{c.__name__}" for c in classes}, dist="normbench-mutants")
    xml = folder / "forward.xml"
    names = [c.name for c in classes]
    proc = subprocess.run(
        pytest_command(str(SUITES / "test_forward.py"), f"--impl={','.join(names)}", "-q", "-n", "2",
                       f"--junitxml={xml}", "--normbench-seed=0"),
        cwd=ROOT, env=subprocess_env(folder), capture_output=True, text=True, timeout=1200)
    output = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode in (0, 1), f"the suite did not run (exit {proc.returncode}):\n{output}"
    return outcomes_by_backend(xml, names)


def test_control_passes(forward_outcomes):
    control = forward_outcomes[CONTROL]
    assert control["failed"] == 0, f"the correct fp32 control failed: {dict(control)}"
    assert control["passed"] > 200


@pytest.mark.parametrize("mutant", mutants.FORWARD_MUTANTS, ids=lambda c: c.name)
def test_mutant_fails(forward_outcomes, mutant):
    result = forward_outcomes[mutant.name]
    assert result["passed"] + result["failed"] > 0, f"{mutant.name} did not run"
    assert result["failed"] > 0, f"{mutant.name} ({mutant.__doc__.strip()}) passed the forward suite"
