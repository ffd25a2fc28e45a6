"""Never miss, never cry wolf: every forward mutant fails the forward suite, every
backward mutant fails the backward suite, and the correct control passes both.

Each suite runs once, in one ``pytest suites/test_<direction>.py --normbench-impl=...``
subprocess over the control and all the mutants of that direction (``tests/mutants.py``),
registered through a throw-away dist-info entry point, as a plugin would be. A mutant needs
one failure to prove the suite catches it, so ``--normbench-maxfail=1`` stops each mutant's
tests at its first failure (per worker); the control, which must pass, runs every test.
"""

import subprocess
from collections import Counter, defaultdict

import pytest

from normbench.suites import DIRECTORY as SUITES
from tests import fused_mutants, mutants, quant_mutants, rms_mutants
from tests.plugins import ROOT, outcomes_by_backend, pytest_command

pytestmark = pytest.mark.e2e
#: direction -> its mutants, and how many of its suite's tests the control must pass, more than;
#: the rms- directions run RMSNorm's cases (``-k rms``) with the RMSNorm control and mutants, the add- ones the
#: fused operations' cases (``-k add-``) with the fused control and mutants (``tests/fused_mutants.py``), q-forward
#: the quantized outputs' cases with the quantized control and mutants (``tests/quant_mutants.py``)
DIRECTIONS = {
    "forward": (mutants.FORWARD_MUTANTS, 200),
    "backward": (mutants.BACKWARD_MUTANTS, 250),
    "rms-forward": (rms_mutants.FORWARD_MUTANTS, 200),
    "rms-backward": (rms_mutants.BACKWARD_MUTANTS, 250),
    "add-forward": (fused_mutants.FORWARD_MUTANTS, 400),
    "add-backward": (fused_mutants.BACKWARD_MUTANTS, 300),
    "q-forward": (quant_mutants.MUTANTS, 150),
}
CONTROLS = {"forward": mutants.Fp32Kernel, "backward": mutants.Fp32Kernel,
            "rms-forward": rms_mutants.RmsKernel, "rms-backward": rms_mutants.RmsKernel,
            "add-forward": fused_mutants.FusedKernel, "add-backward": fused_mutants.FusedKernel,
            "q-forward": quant_mutants.QuantKernel}
#: the cases each direction runs (a pytest -k expression), by its prefix (the quantized operations' ids start with
#: q- or dq-: docs/quantized.md)
SELECTED = {"rms-": ["-k", "rms and not add- and not q-"], "add-": ["-k", "add- and not q-"], "q-": ["-k", "q-"]}
MUTANTS = [pytest.param(direction, mutant, id=f"{direction}-{mutant.name}")
           for direction, (classes, _) in DIRECTIONS.items() for mutant in classes]


@pytest.fixture(scope="module")
def direction(request) -> str:
    """The suite under test, ``forward`` or ``backward`` (parametrized indirectly)."""
    return request.param


@pytest.fixture(scope="module")
def outcomes(direction, make_plugins, once_per_run) -> dict[str, Counter]:
    """Per backend, the outcomes of the control and every mutant of ``direction`` on its suite, seed 0
    (computed once per run, whichever xdist workers its tests land on)."""
    classes = [CONTROLS[direction], *DIRECTIONS[direction][0]]
    names = [c.name for c in classes]
    prefix = direction[:direction.index("-") + 1] if "-" in direction else ""
    suite = direction.removeprefix(prefix)
    only = SELECTED.get(prefix, ["-k", "not add- and not q-"])

    def run() -> dict[str, Counter]:
        plugins = make_plugins({c.name: f"{c.__module__}:{c.__name__}" for c in classes}, dist="normbench-mutants")
        xml = plugins.path / f"{direction}.xml"
        proc = subprocess.run(
            pytest_command(str(SUITES / f"test_{suite}.py"), f"--normbench-impl={','.join(names)}", "-q", "-n", "2",
                           f"--junitxml={xml}", "--normbench-seed=0", "--normbench-maxfail=1", *only),
            cwd=ROOT, env=plugins.env, capture_output=True, text=True, timeout=1200)
        output = proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.returncode in (0, 1), f"the {direction} suite did not run (exit {proc.returncode}):\n{output}"
        return outcomes_by_backend(xml, names)

    stored = once_per_run(f"{direction}-mutants", run)
    return defaultdict(Counter, {name: Counter(counts) for name, counts in stored.items()})


@pytest.mark.parametrize("direction", DIRECTIONS, indirect=True)
def test_control_passes(outcomes, direction):
    control = outcomes[CONTROLS[direction].name]
    assert control["failed"] == 0, f"the correct fp32 control failed the {direction} suite: {dict(control)}"
    assert control["passed"] > DIRECTIONS[direction][1]


@pytest.mark.parametrize("direction, mutant", MUTANTS, indirect=["direction"])
def test_mutant_fails(outcomes, direction, mutant):
    result = outcomes[mutant.name]
    assert result["passed"] + result["failed"] > 0, f"{mutant.name} did not run"
    assert result["failed"] > 0, f"{mutant.name} ({mutant.__doc__.strip()}) passed the {direction} suite"


@pytest.mark.parametrize("direction", DIRECTIONS, indirect=True)
def test_mutants_stop_at_their_first_failures(outcomes, direction):
    """--normbench-maxfail=1 finds the mutants by their hyphenated names: after a failure their other
    tests are skipped as not run (more skips than the control's, which are its unsupported cases)."""
    control = outcomes[CONTROLS[direction].name]["skipped"]
    stopped = [m.name for m in DIRECTIONS[direction][0] if outcomes[m.name]["skipped"] > control]
    assert len(stopped) > len(DIRECTIONS[direction][0]) // 2, f"only {stopped} stopped early"
