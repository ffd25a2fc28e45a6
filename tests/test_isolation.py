"""A backend that crashes the process, hangs, or raises SystemExit/KeyboardInterrupt is a result
for that backend (crashed, timeout, failed, not run), never the end of the run or a silent PASS;
a plugin that hangs or exits at import cannot hang or silently end ``normbench list``."""

import json
import subprocess
import sys

import pytest

import normbench
from normbench.core import cases
from normbench.front.runner import Collector, Outcome, summary
from normbench.perf.throughput import ThroughputRunner
from normbench.perf.timing import TimingOptions
from normbench.suites import DIRECTORY as SUITES
from tests.plugins import ROOT

BACKENDS = '''
import os, time
from tests.mutants import Fp32Kernel

class Crasher(Fp32Kernel):
    name = "crasher"
    def layer_norm(self, *args, **kwargs):
        os._exit(3)

class Hanger(Fp32Kernel):
    name = "hanger"
    def layer_norm(self, *args, **kwargs):
        time.sleep(1000)

class Interrupter(Fp32Kernel):
    name = "interrupter"
    def layer_norm(self, *args, **kwargs):
        raise KeyboardInterrupt

class Exiter(Fp32Kernel):
    name = "exiter"
    def layer_norm(self, *args, **kwargs):
        raise SystemExit(3)
'''
NAMES = ("crasher", "hanger", "interrupter", "exiter")


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({n: f"isolation_backends:{n.capitalize()}" for n in NAMES},
                        modules={"isolation_backends": BACKENDS,
                                 "hangs_at_import": "import time\ntime.sleep(1000)\n",
                                 "exits_at_import": "import os\nos._exit(7)\n"})


RUN = """
import json, sys
from dataclasses import asdict
from normbench.front.runner import run_pytest
code, outcomes = run_pytest(sys.argv[1:])
print("OUTCOMES " + json.dumps([asdict(o) for o in outcomes]))
sys.exit(code)
"""


def outcomes_of(plugins, impl: str, *extra: str):
    """Run the forward suite's float32 'rows' family on ``impl`` under two xdist workers, in a
    child process (as ``normbench run`` does); its outcomes as :class:`Outcome` objects."""
    out = subprocess.run([sys.executable, "-c", RUN, str(SUITES / "test_forward.py"), f"--normbench-impl={impl}",
                          "-n", "2", "-q", "-p", "no:cacheprovider", "-k",
                          "float32 and family_rows and not rms and not add-", *extra],
                         cwd=ROOT, env=plugins.env, capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("OUTCOMES ")), None)
    assert line is not None, out.stdout[-3000:] + out.stderr[-3000:]
    return out.returncode, [Outcome(**{k: tuple(map(tuple, v)) if k == "covers" else v for k, v in o.items()})
                            for o in json.loads(line.removeprefix("OUTCOMES "))]


def by_backend(outcomes, backend):
    from collections import Counter

    return Counter(o.outcome for o in outcomes if o.backend == backend)


@pytest.mark.e2e
def test_a_crashing_backend_is_recorded_and_the_others_run(plugins):
    code, outcomes = outcomes_of(plugins, "numpy,crasher")
    numpy, crasher = by_backend(outcomes, "numpy"), by_backend(outcomes, "crasher")
    assert code == 1 and set(numpy) == {"passed"} and numpy["passed"] >= 5
    # the quarantine stops it after 3 crashes (a second worker may be running one more meanwhile)
    assert 3 <= crasher["crashed"] <= 4 and crasher["not run"] > 0 and set(crasher) == {"crashed", "not run"}
    assert crasher.total() == numpy.total()
    text = summary(outcomes)
    assert f"FAIL ({crasher['crashed']} crashed, 0 timed out)" in text
    assert "tests did not run; not run: backend 'crasher'" in text


@pytest.mark.e2e
def test_a_hanging_backend_times_out(plugins):
    code, outcomes = outcomes_of(plugins, "hanger", "--normbench-timeout=0.5")
    counts = by_backend(outcomes, "hanger")
    assert code == 1 and counts["timeout"] >= 3 and counts["not run"] > 0 and set(counts) == {"timeout", "not run"}


@pytest.mark.e2e
def test_systemexit_and_keyboardinterrupt_from_a_backend_fail_its_tests(plugins):
    code, outcomes = outcomes_of(plugins, "interrupter,exiter")
    assert code == 1 and by_backend(outcomes, "interrupter") == by_backend(outcomes, "exiter")
    assert set(by_backend(outcomes, "exiter")) == {"failed"}
    message = next(o.message for o in outcomes if o.backend == "interrupter")
    assert "raised KeyboardInterrupt (no Ctrl-C or signal was received)" in message


@pytest.mark.e2e
def test_maxfail_stops_a_failing_backend_and_the_others_run_on(plugins):
    code, outcomes = outcomes_of(plugins, "numpy,exiter", "--normbench-maxfail=2")
    numpy, exiter = by_backend(outcomes, "numpy"), by_backend(outcomes, "exiter")
    assert code == 1 and set(numpy) == {"passed"} and numpy.total() == exiter.total()
    # the limit stops it after 2 failures (a second worker may be running one more meanwhile)
    assert 2 <= exiter["failed"] <= 3 and exiter["not run"] > 0 and set(exiter) == {"failed", "not run"}
    stopped = next(o.message for o in outcomes if o.backend == "exiter" and o.outcome == "not run")
    assert "backend 'exiter' failed 2 tests (--normbench-maxfail=2); normbench stopped running its tests" in stopped


def test_tests_that_never_reported_are_not_run():
    collector = Collector()
    collector.expected = {"suites/test_forward.py::test_forward[numpy-float32-rows1-hidden8-normal]"}
    session = type("S", (), {"config": type("C", (), {})()})()
    collector.pytest_sessionfinish(session, pytest.ExitCode.INTERRUPTED)
    [outcome] = collector.outcomes
    assert (outcome.backend, outcome.outcome) == ("numpy", "not run")
    assert outcome.message == "not run: the run was interrupted (KeyboardInterrupt)"
    assert "INCOMPLETE" in summary(collector.outcomes) and "PASS" not in summary(collector.outcomes)


@pytest.mark.parametrize("name, error", [("exiter", "SystemExit: 3"), ("interrupter", "KeyboardInterrupt")])
def test_throughput_records_systemexit_and_keyboardinterrupt_as_an_error_row(installed_plugins, plugins, name, error):
    installed_plugins.distribution({name: f"isolation_backends:{name.capitalize()}"}, dist="acme")
    installed_plugins.module("isolation_backends", BACKENDS)
    runner = ThroughputRunner(TimingOptions(min_samples=3, max_time_s=0), ceiling_bytes=16 << 20)
    row = runner.measure(normbench.refresh().create(name), cases.Case("t", (8, 256), (256,), "float32"), "forward").row
    assert row["verdict"] == "error" and row["message"].startswith(f"the backend raised {error}")


@pytest.mark.e2e
def test_list_survives_plugins_that_hang_or_exit_at_import(plugins):
    plugins.distribution({"hangs-at-import": "hangs_at_import:B", "exits-at-import": "exits_at_import:B"},
                         dist="acme-bad")
    out = subprocess.run([sys.executable, "-m", "normbench", "list", "--plugin-timeout=2"], cwd=ROOT,
                         env=plugins.env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("problem: backend 'exits-at-import' from distribution acme-bad 0.0.0 ended the process with exit "
            "status 7 while loading") in out.stdout
    assert ("problem: backend 'hangs-at-import' from distribution acme-bad 0.0.0 did not finish loading within "
            "2 s") in out.stdout
    assert any(line.startswith("numpy ") and " yes " in line for line in out.stdout.splitlines())


def test_a_hyphenated_backend_name_is_found_in_its_test_ids():
    """Quarantine and --normbench-maxfail count the backend a test ran, even where an id alone is ambiguous."""
    from normbench.front.runner import backend_of

    nodeid = "suites/test_backward.py::test_backward[mutant-no-mean-term-float32-rows7-hidden100-uniform9]"
    names = ["mutant-control", "mutant-no-mean", "mutant-no-mean-term"]
    assert backend_of(nodeid, names) == "mutant-no-mean-term"
    assert backend_of(nodeid) == "mutant"  # without the names: the first word only
    assert backend_of("suites/test_forward.py::test_forward[numpy-float32-rows1-hidden8-normal]", names) == "numpy"


# -- a slow start is no plugin's hang: the limits count from the child's start (a busy machine, load 4-6) ------


def _slow_start(seconds: float, then: str) -> list[str]:
    """A child that takes ``seconds`` to start (as Python and normbench do on a busy machine), then runs ``then``
    with ``path``, its progress file, as a name."""
    return [sys.executable, "-c", f"import sys, time; path = sys.argv[1]; time.sleep({seconds}); {then}"]


def test_a_plugin_limit_is_not_spent_on_the_childs_start(tmp_path):
    """Before: the limit counted from the launch; a start-up slower than it called a crashing plugin a hang."""
    from normbench.core import vetting

    progress = str(tmp_path / "loading")
    then = "open(path, 'w').write('slow\\tacme 1.0'); import os; os._exit(7)"
    watched = vetting.watch([*_slow_start(1.5, then), progress], progress, timeout=0.5)
    assert (watched.returncode, watched.loading, watched.timed_out, watched.started) == (7, "slow", False, True)
    hangs = "open(path, 'w').write('slow\\tacme 1.0'); time.sleep(100)"
    watched = vetting.watch([*_slow_start(0.2, hangs), str(tmp_path / "again")], str(tmp_path / "again"), timeout=0.5)
    assert watched.timed_out and watched.loading == "slow"  # the plugin's own time is still limited


def test_a_childs_start_that_never_ends_is_not_a_plugins(tmp_path, monkeypatch):
    from normbench.core import vetting

    monkeypatch.setattr(vetting, "STARTUP_S", 0.3)
    progress = str(tmp_path / "loading")
    watched = vetting.watch([*_slow_start(100, ""), progress], progress, timeout=0.1)
    assert watched.timed_out and not watched.started and watched.loading == ""


def test_check_times_the_backend_from_its_start_on_the_case(tmp_path, monkeypatch):
    """``normbench check --timeout`` counts from the moment the child starts on the case, not from its launch."""
    from normbench.front import cli

    started = str(tmp_path / "started")
    slow = subprocess.Popen(_slow_start(1.0, "open(path, 'w'); sys.exit(1)") + [started])
    assert cli._wait_for_check(slow, started, timeout=0.3) == (1, True)  # 1 s to start, then a FAIL: not a TIMEOUT
    hangs = subprocess.Popen(_slow_start(0.1, "open(path, 'w'); time.sleep(100)") + [str(tmp_path / "h")])
    assert cli._wait_for_check(hangs, str(tmp_path / "h"), timeout=0.3) == (None, True)
    monkeypatch.setattr(cli, "_check_startup_s", lambda: 0.3)
    never = subprocess.Popen(_slow_start(100, "") + [str(tmp_path / "n")])
    assert cli._wait_for_check(never, str(tmp_path / "n"), timeout=0.3) == (None, False)
