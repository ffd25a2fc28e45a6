"""Never miss, never cry wolf: the invariance suite catches each mutant with the check
made for its bug, every check catches some mutant, and the correct control passes.

All run in one ``pytest suites/test_invariances.py --impl=...`` subprocess,
registered through a throw-away dist-info entry point, as a plugin would be.
"""

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from normbench.suites import DIRECTORY as SUITES
from tests import invariance_mutants as im
from tests import mutants
from tests.plugins import ROOT, outcomes_by_backend, pytest_command

SUITE = SUITES / "test_invariances.py"
#: mutant -> the suite's tests that must catch it
CAUGHT_BY = {
    im.BatchAxis: {"test_weight_matrix_recentering", "test_weight_vector_rescaling", "test_dataset_recentering",
                   "test_single_case_rescaling"},
    im.LastDimStatistics: {"test_weight_vector_rescaling"},
    im.DxMeanDropped: {"test_gradient_shift_and_scale_identities"},
    im.DxProjectionDropped: {"test_gradient_shift_and_scale_identities"},
    im.DxWithoutRstd: {"test_weight_matrix_rescaling_scales_the_gradient"},
    im.DweightUnnormalized: {"test_gain_gradient_ignores_input_rescaling"},
    mutants.OnePassVariance: {"test_weight_matrix_recentering"},
    mutants.EpsNotPropagated: {"test_weight_matrix_rescaling", "test_dataset_rescaling", "test_single_case_rescaling",
                               "test_rnn_hidden_states_invariant", "test_lstm_hidden_states_invariant"},
    # reshapes a multi-dim weight against its last dim only and crashes there: fails, though not by an invariance
    mutants.LastDimOnly: set(),
    # RMSNorm kernels against normbench's RMSNorm row (rms- cases only: they implement rms_norm alone)
    **{m: {f"test_{key}" for key in keys} for m, keys in im.RMS_INVARIANCE_MUTANTS.items()},
}
#: the correct kernels, which must pass: LayerNorm's and RMSNorm's
CONTROLS = [mutants.Fp32Kernel, im.RMS_CONTROL]
CLASSES = [*CONTROLS, *CAUGHT_BY]


@pytest.fixture(scope="module")
def junit(make_plugins, once_per_run) -> Path:
    """The JUnit XML of the invariance suite on the control and the mutants, seed 0 (once per run)."""

    def run() -> str:
        plugins = make_plugins({c.name: f"{c.__module__}:{c.__name__}" for c in CLASSES}, dist="normbench-inv-mutants")
        xml = plugins.path / "invariances.xml"
        proc = subprocess.run(
            pytest_command(str(SUITE), f"--impl={','.join(c.name for c in CLASSES)}", "-q", "-n", "2",
                           f"--junitxml={xml}", "--normbench-seed=0"),
            cwd=ROOT, env=plugins.env, capture_output=True, text=True, timeout=1200)
        output = proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.returncode in (0, 1), f"the suite did not run (exit {proc.returncode}):\n{output}"
        return str(xml)

    return Path(once_per_run("invariance-mutants", run))


@pytest.fixture(scope="module")
def outcomes(junit):
    return outcomes_by_backend(junit, [c.name for c in CLASSES])


@pytest.mark.e2e
@pytest.mark.parametrize("control, least", [(mutants.Fp32Kernel, 70), (im.RMS_CONTROL, 50)], ids=lambda v: getattr(v, "name", v))
def test_control_passes(outcomes, control, least):
    """75 LayerNorm tests, 54 RMSNorm ones (Table 1's row: every case in float32, float16, bfloat16)."""
    result = outcomes[control.name]
    assert result["failed"] == 0, f"the correct fp32 control {control.name} failed: {dict(result)}"
    assert result["passed"] >= least


@pytest.mark.e2e
@pytest.mark.parametrize("mutant", CAUGHT_BY, ids=lambda c: c.name)
def test_mutant_is_caught_by_its_checks(outcomes, mutant):
    result = outcomes[mutant.name]
    assert result["failed"] > 0, f"{mutant.name} ({mutant.__doc__.strip()}) passed the invariance suite"
    missed = sorted(t for t in CAUGHT_BY[mutant] if not result[f"caught by {t}"])
    assert not missed, f"{mutant.name} was not caught by {missed}: {dict(result)}"


def test_every_check_catches_a_mutant():
    tests = {line.split("(")[0][4:] for line in SUITE.read_text().splitlines() if line.startswith("def test_")}
    assert tests == set().union(*CAUGHT_BY.values()), "a check no mutant proves can fail, or a stale name"


@pytest.mark.e2e
def test_no_backward_skips_the_gradient_checks_with_the_reason(junit):
    skipped = [case for case in ET.parse(junit).iter("testcase")
               if "[mutant-batch-axis-float32-" in case.get("name", "") and "gradient" in case.get("name", "")]
    assert skipped and all(case.find("skipped") is not None for case in skipped)
    assert all("has no backward (has_backward = False)" in case.find("skipped").get("message", "") for case in skipped)
