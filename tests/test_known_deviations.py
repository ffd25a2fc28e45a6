"""Known deviations through pytest and `normbench run`, as users meet them: a backend's
own ``known_deviations`` and a user's ``--normbench-deviations`` file turn the failures
they explain into xfailed "known deviation" reports, never passes; any other failure
still fails; a declared deviation that did not occur is listed for removal, and fails
the run only with ``--normbench-strict``.

The backend is the one-pass-variance mutant (a real bug: fails on rows with a large
mean), registered through a throw-away dist-info like any plugin.
"""

import os
import subprocess
import sys

import pytest

from normbench.check import outcomes
from normbench.core import storage
from normbench.front.runner import Outcome, summary
from normbench.suites import DIRECTORY as SUITES
from tests.plugins import ROOT

FORWARD = str(SUITES / "test_forward.py")
#: its node id prefix: the path from the rootdir (a checkout's suites/, or site-packages in an installed env)
FORWARD_NODE = os.path.relpath(FORWARD, ROOT)
OFFSET1E3 = "float32-rows8-hidden1000-offset1e3"
OFFSET1E4 = "float32-rows8-hidden1000-offset1e4"
NORMAL = "float32-rows8-hidden1000-normal"

DECLARING = f'''
from tests.mutants import Fp32Kernel, OnePassVariance


class Declared(OnePassVariance):
    name = "declared"
    known_deviations = {{
        "*-offset1e3 | \\\\): y\\\\[": "one-pass variance at a mean of 1e3 sigma",
        "{NORMAL}": "declared, but this case passes: must be reported as not occurring",
    }}


class Crashes(Fp32Kernel):
    name = "crashes"
    known_deviations = {{"{OFFSET1E3}": "declared without a regex: explains check failures, not crashes"}}

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if x.shape == (8, 1000):
            raise RuntimeError("kernel crashed")
        return super().layer_norm(x, normalized_shape, weight, bias, eps)
'''


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({"declared": "declaring_plugin:Declared", "crashes": "declaring_plugin:Crashes",
                         "mutant-one-pass-variance": "tests.mutants:OnePassVariance"}, dist="declaring-plugins",
                        modules={"declaring_plugin": DECLARING})


@pytest.fixture
def run(plugins, runner):
    """``run(*args)``: pytest on the forward suite in a subprocess, with these plugins: a ``pytest.RunResult``."""
    return lambda *args: runner.pytest(FORWARD, *args, plugins=plugins)


def only(*case_ids: str) -> list[str]:
    return ["-k", " or ".join(f"test_forward and {c} and not rms and not add-" for c in case_ids)]


def test_declared_failures_are_known_deviations_and_a_stale_one_is_listed(run):
    result = run("--impl=declared", "-rx", "-v", *only(OFFSET1E3, NORMAL))
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    result.assert_outcomes(passed=1, xfailed=1)
    assert "normbench: known deviations declared: 2 in declared.known_deviations" in out
    source = 'declared.known_deviations["*-offset1e3 | \\): y\\["]'
    assert f"XFAIL {FORWARD_NODE}::test_forward[declared-{OFFSET1E3}] - known deviation ({source}): " \
           "one-pass variance at a mean of 1e3 sigma" in out
    summary_section = out.split("normbench known deviations")[1]
    assert f"known deviation in 1 of 1 tests: {source}" in summary_section
    assert ("declared deviation did not occur in the 1 tests it covers (remove it?): "
            f'declared.known_deviations["{NORMAL}"]') in summary_section


def test_strict_fails_the_deviations_and_the_stale_declaration(run):
    result = run("--impl=declared", "--normbench-strict", *only(OFFSET1E3))
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    result.assert_outcomes(failed=1)
    assert "(--normbench-strict: reported as failures)" in out
    assert "> bound" in out
    stale = run("--impl=declared", "--normbench-strict", *only(NORMAL))
    assert stale.ret == 1, stale.stdout.str()[-3000:]
    stale.assert_outcomes(passed=1)
    assert "declared deviation did not occur" in stale.stdout.str()


def test_an_undeclared_failure_still_fails(run):
    result = run("--impl=declared", *only(OFFSET1E3, OFFSET1E4))
    assert result.ret == 1
    result.assert_outcomes(failed=1, xfailed=1)
    assert f"FAILED {FORWARD_NODE}::test_forward[declared-{OFFSET1E4}]" in result.stdout.str()


def test_a_crash_is_never_a_declared_deviation_without_a_regex(run):
    result = run("--impl=crashes", *only(OFFSET1E3))
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.assert_outcomes(failed=1)
    assert "RuntimeError: kernel crashed" in result.stdout.str()


def test_a_users_deviations_file(run, tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("# my findings\nmutant-one-pass-variance | * | dist | \\): y\\[ | we know: one-pass variance\n")
    result = run("--impl=mutant-one-pass-variance", f"--normbench-deviations={mine}", "-rx",
                 *only(OFFSET1E3, OFFSET1E4, NORMAL))
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    result.assert_outcomes(passed=1, xfailed=2)
    assert f"normbench: known deviations declared: 1 in {mine}" in out
    assert f"known deviation ({mine}:2): we know: one-pass variance" in out
    assert f"known deviation in 2 of 3 tests: {mine}:2" in out


@pytest.mark.e2e
def test_the_tally_survives_xdist(run):
    result = run("--impl=declared", "-n", "2", *only(OFFSET1E3, NORMAL))
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    result.assert_outcomes(passed=1, xfailed=1)
    assert "known deviation in 1 of 1 tests" in out and "declared deviation did not occur" in out


@pytest.mark.parametrize("value, message", [
    ("nope.txt", "Could not parse value: 'nope.txt'. Give an existing known-deviations file."),
])
def test_a_bad_deviations_option_is_a_usage_error(run, value, message):
    result = run("--impl=numpy", f"--normbench-deviations={value}", "--collect-only", "-q")
    assert result.ret == 4 and message in result.stderr.str()


def test_a_bad_deviations_file_names_the_line(run, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("numpy | cpu | only three\n")
    result = run("--impl=numpy", f"--normbench-deviations={bad}", "--collect-only", "-q")
    assert result.ret == 4 and f"{bad}:1: expected 'backend | device glob | test pattern" in result.stderr.str()


@pytest.mark.e2e
def test_normbench_run_counts_lists_and_saves_them(plugins, tmp_path):
    out = subprocess.run([sys.executable, "-m", "normbench", "run", "--impl=declared", "-n", "0", "--suites=conformance",
                          f"--out={tmp_path}", "--run-id=r1", "--no-report", *only(OFFSET1E3, NORMAL)], cwd=ROOT,
                         env=plugins.env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    table = out.stdout.split("normbench conformance summary")[1]
    row = next(line for line in table.splitlines() if line.startswith("declared "))
    assert row.split()[1:4] == ["1", "0", "1"] and row.endswith("PASS, with known deviations")
    assert "known deviation in 1 of 1 tests" in table and "declared deviation did not occur" in table
    saved = storage.load(tmp_path / "r1", outcomes.CONFORMANCE).set_index("case")
    assert saved.loc[OFFSET1E3, "outcome"] == "xfailed" and saved.loc[NORMAL, "outcome"] == "passed"
    assert saved.loc[OFFSET1E3, "message"].startswith('known deviation (declared.known_deviations["*-offset1e3')


def test_summary_counts_deviations_apart_from_passes_and_failures():
    source = 'b.known_deviations["x"]'
    outcomes = [Outcome("t::test_forward[b-a]", "b", "test_forward", "passed", covers=((source, "why"),)),
                Outcome("t::test_forward[b-c]", "b", "test_forward", "xfailed", f"known deviation ({source}): why",
                        "c", ((source, "why"),), source),
                Outcome("t::test_forward[b-d]", "b", "test_forward", "failed", "y[1] = 2 > bound")]
    text = summary(outcomes)
    assert text.splitlines()[1].split()[1:5] == ["1", "1", "1", "0"] and text.splitlines()[1].endswith("FAIL")
    assert f"known deviation in 1 of 2 tests: {source}" in text
