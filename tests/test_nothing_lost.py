"""Nothing lost (the second pass): one plugin that crashes or hangs while it is loaded costs only its own
tests, in ``normbench run``, ``normbench test``, ``pytest suites`` and ``normbench check`` alike; a
terminal's Ctrl-C (the whole process group, once or twice) ends as an interrupted run with its status,
summary and report; a disk that fills mid-run loses no finished test; pytest arguments pytest refuses
create no run folder; a run never starts more workers than it has tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from normbench.front.plan import Plan
from normbench.front.run import worker_count
from tests.plugins import ROOT

BAD_PLUGINS = {
    "segv_at_import": "import ctypes\nctypes.string_at(0)  # a segfault, as a broken native extension has\n",
    "bad_backends": '''
import ctypes, time
from tests.mutants import Fp32Kernel

class HangsAtCreate(Fp32Kernel):
    name = "hangs-at-create"
    def __init__(self):
        time.sleep(1000)

class CrashesInCheck(Fp32Kernel):
    name = "crashes-in-check"
    def layer_norm(self, *args, **kwargs):
        ctypes.string_at(0)

class HangsInCheck(Fp32Kernel):
    name = "hangs-in-check"
    def layer_norm(self, *args, **kwargs):
        time.sleep(1000)
''',
    "killed_from_outside": '''
import os, time
from normbench.impls.numpy_ref import NumpyBackend

class WaitsToBeKilled(NumpyBackend):
    """Its first call says its process id in NORMBENCH_TEST_PID_FILE and waits there to be killed."""
    name = "waits-to-be-killed"
    def layer_norm(self, *args, **kwargs):
        try:
            fd = os.open(os.environ["NORMBENCH_TEST_PID_FILE"], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return super().layer_norm(*args, **kwargs)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(300)
''',
}
LOADING = {"segv-at-import": "segv_at_import:B", "hangs-at-create": "bad_backends:HangsAtCreate"}
RUNNING = {"crashes-in-check": "bad_backends:CrashesInCheck", "hangs-in-check": "bad_backends:HangsInCheck"}
#: a few tests of the forward suite: what runs matters less than that it runs
FEW = ["-k", "test_forward and float32 and family_rows and not rms and not add- and hidden33"]


@pytest.fixture(scope="module")
def loading(make_plugins):
    """Plugins that end or hang the process while they are imported or created."""
    plugins = make_plugins(LOADING, dist="acme-bad", modules=BAD_PLUGINS)
    return {**plugins.env, "NORMBENCH_PLUGIN_TIMEOUT": "3"}


@pytest.fixture(scope="module")
def running(make_plugins):
    """Plugins that load well and then end or hang the process when they compute."""
    return make_plugins(RUNNING, dist="acme-worse", modules=BAD_PLUGINS).env


def normbench(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


CRASHED = ("backend 'segv-at-import' from distribution acme-bad 0.0.0 ended the process with signal SIGSEGV "
           "while loading (a crash)")
HUNG = "backend 'hangs-at-create' from distribution acme-bad 0.0.0 did not finish loading within 3 s"


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["run", "test", "pytest"])
def test_a_plugin_that_crashes_or_hangs_while_loaded_costs_only_its_own_tests(loading, tmp_path, command):
    """Before: ``--impl=all`` exited 139 with nothing measured, or hung forever."""
    argv = {"run": ["-m", "normbench", "run", "--suites=conformance", "--no-report", f"--out={tmp_path}",
                    "--run-id=r1"],
            "test": ["-m", "normbench", "test", "-p", "no:cacheprovider"],
            "pytest": ["-m", "pytest", "suites", "-p", "no:cacheprovider"]}[command]
    out = subprocess.run([sys.executable, *argv, "--impl=all", "-n", "2", *FEW], cwd=ROOT, env=loading,
                         capture_output=True, text=True, timeout=600)
    said = out.stdout + out.stderr
    assert out.returncode in (0, 1), said[-3000:]  # no signal, no usage error: the run happened
    assert CRASHED in said and HUNG in said, said[-3000:]
    assert "passed" in said and "numpy" in said
    if command == "run":
        status = json.loads((tmp_path / "r1" / "environment.json").read_text())["status"]
        assert status["state"] == "finished" and status["done"] > 0


@pytest.mark.e2e
def test_a_named_plugin_that_crashes_while_loaded_is_one_line(loading):
    out = normbench("test", "--impl=segv-at-import", *FEW, env=loading)
    assert out.returncode == 4 and CRASHED in out.stdout + out.stderr


@pytest.mark.e2e
def test_a_worker_killed_from_outside_is_a_test_not_run_never_the_backends_crash(make_plugins, tmp_path):
    """Issue 45: a SIGTERM sent to one xdist worker (a user's kill, a scheduler) was recorded as the backend's crash
    ("a segfault, an abort, os._exit") and counted toward its quarantine."""
    env = {**make_plugins({"waits-to-be-killed": "killed_from_outside:WaitsToBeKilled"}, dist="acme-killed",
                          modules=BAD_PLUGINS).env, "NORMBENCH_TEST_PID_FILE": str(tmp_path / "pid")}
    with open(tmp_path / "stdout", "w") as stdout:
        child = subprocess.Popen([sys.executable, "-m", "normbench", "run", "--impl=waits-to-be-killed", "-n", "1",
                                  "--suites=conformance", "--no-report", f"--out={tmp_path}", "--run-id=r1", *FEW],
                                 cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert child.poll() is None and time.monotonic() < deadline, (tmp_path / "stdout").read_text()[-3000:]
            time.sleep(0.1)
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGTERM)  # the worker, not the run
        child.wait(timeout=300)
    out = (tmp_path / "stdout").read_text()
    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage

    rows = storage.load(tmp_path / "r1", CONFORMANCE)
    [killed] = rows[rows.outcome != "passed"].itertuples()
    assert killed.outcome == "not run" and killed.message.startswith(
        "not run: its worker process was ended by SIGTERM while running it (sent from outside normbench, or by the "
        "backend itself), not a crash"), out[-3000:]
    assert len(rows) > 1 and "crashed" not in set(rows.outcome) and "INCOMPLETE" in out and child.returncode == 1


@pytest.mark.e2e
def test_check_runs_each_backend_where_a_crash_or_hang_is_its_own(running):
    """Before: a crashing backend ended ``normbench check`` silently, a hanging one never returned."""
    out = normbench("check", "--impl=numpy,crashes-in-check,hangs-in-check,numpy", "--shape=8x16", "--timeout=5",
                    env=running, timeout=300)
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    assert lines[0].startswith("PASS numpy float32-rows8-hidden16-normal")
    assert lines[1] == ("CRASH crashes-in-check float32-rows8-hidden16-normal (seed 0): the backend ended the process "
                        "with signal SIGSEGV")
    assert lines[2] == "TIMEOUT hangs-in-check float32-rows8-hidden16-normal (seed 0): no result within 5 s (--timeout)"
    assert len(lines) == 3  # a backend named twice is checked once


@pytest.mark.e2e
def test_list_says_a_plugin_crashed_not_that_it_hangs(loading):
    """Before: a plugin that crashed while imported was listed as 'did not finish loading within N s (it hangs?)'."""
    out = normbench("list", "--plugin-timeout=20", env=loading)
    assert out.returncode == 0, out.stderr
    assert f"problem: {CRASHED}. It is left out of this list." in out.stdout
    assert "segv-at-import" in out.stdout and "did not finish loading within 20 s" not in out.stdout.split(CRASHED)[0]


def _run_until(tmp_path, interrupts: int):
    """``normbench run`` in a process group of its own, as a terminal starts it, sent ``interrupts`` SIGINTs to the
    whole group (workers included, as Ctrl-C does) once its first results are on disk."""
    folder, out, err = tmp_path / "r1", tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # files: a pipe nobody reads would stop the run
        child = subprocess.Popen([sys.executable, "-m", "normbench", "run", "--impl=numpy", "--seed=0..2", "-n", "2",
                                  f"--out={tmp_path}", "--run-id=r1"], cwd=ROOT, stdout=stdout, stderr=stderr,
                                 start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 300
        while not _rows(folder) and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.1)
        assert child.poll() is None, err.read_text()[-3000:]
        for _ in range(interrupts):
            os.killpg(child.pid, signal.SIGINT)
            time.sleep(0.3)
        child.wait(timeout=300)
    return child.returncode, out.read_text(), err.read_text(), folder


def _rows(folder) -> int:
    return _csv_rows(folder / "conformance.csv") if (folder / "conformance.csv").exists() else 0


def _csv_rows(path) -> int:
    """Rows of a CSV file (a message may hold a newline: lines are not rows)."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return sum(1 for _ in csv.DictReader(f))


@pytest.mark.e2e
@pytest.mark.parametrize("interrupts", [1, 2])
def test_ctrl_c_to_the_process_group_ends_as_an_interrupted_run(tmp_path, interrupts):
    """Before: after a double Ctrl-C the run printed no summary, marked nothing INCOMPLETE, wrote no report, and
    environment.json said done: 0, total: null."""
    code, out, err, folder = _run_until(tmp_path, interrupts)
    assert code == 2, out[-2000:] + err[-2000:]
    status = json.loads((folder / "environment.json").read_text())["status"]
    assert status["state"] == "interrupted" and status["reason"] == "SIGINT"
    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage

    rows = storage.load(folder, CONFORMANCE)
    outcomes = rows.outcome
    assert 0 < status["done"] == int((outcomes != "not run").sum()) < status["total"]
    # issue 45: after a double Ctrl-C the tests not run were blamed on xdist's "maximum crashed workers"
    assert set(rows[outcomes == "not run"].message) == {"not run: the run was interrupted (SIGINT)"}
    assert status["rows"]["conformance"] == len(outcomes)  # the tests that did not run are rows too, "not run"
    assert f"INTERRUPTED (SIGINT) after {status['done']} of {status['total']} tests" in out
    assert "INCOMPLETE: some tests did not run" in out and (folder / "report.html").exists()
    assert "Traceback" not in err


SITECUSTOMIZE = '''
import errno, os
_limit, _under = os.environ.get("FAKE_DISK_BYTES"), os.environ.get("FAKE_DISK_FOLDER")
if _limit and _under:
    _real, _left = os.write, [int(_limit)]

    def _write(fd, data):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if not path.startswith(_under):
            return _real(fd, data)
        if _left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = _real(fd, bytes(data[:_left[0]]))
        _left[0] -= n
        return n

    os.write = _write
'''


@pytest.mark.e2e
@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="the fake full disk finds a file's path in /proc")
def test_a_disk_that_fills_mid_run_loses_no_finished_test(tmp_path):
    """Before: 449 of 637 outcomes were in no file, no summary was printed and the status stayed 'running'."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
           "FAKE_DISK_BYTES": "6000", "FAKE_DISK_FOLDER": str(tmp_path / "out"), "TMPDIR": str(elsewhere)}
    out = normbench("run", "--impl=numpy", "--suites=conformance", "--no-report", f"--out={tmp_path / 'out'}",
                    "--run-id=r1", "-n", "1", "-k", "test_forward and float32 and family_rows", env=env)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    summary = out.stdout.split("normbench conformance summary", 1)[1]
    passed = int(summary.splitlines()[2].split()[1])
    assert passed >= 10 and "No space left on device" in out.stderr
    kept = elsewhere / "normbench-r1-unsaved-conformance.csv"
    assert "could not be written to the run folder" in out.stderr and str(kept) in out.stderr
    assert "the run's status (finished) could not be recorded" in out.stderr
    in_folder = _rows(tmp_path / "out" / "r1")
    assert 0 < in_folder < passed and in_folder + _csv_rows(kept) == passed
    assert "Traceback" not in out.stderr


def test_rows_a_full_disk_refused_are_written_at_the_end_once_space_is_freed(tmp_path, capsys):
    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage
    from normbench.front.run import _Sink
    from normbench.front.runner import Outcome

    class FullDisk:
        def add(self, row):
            raise storage.ResultsError("cannot write row 1 to conformance.csv: No space left on device")

        def close(self):
            raise AssertionError("a failed writer is not closed again")

    sink = _Sink(FullDisk(), "r1", reopen=lambda: storage.ResultsWriter(tmp_path, "r1", CONFORMANCE))
    for n in range(3):
        sink(Outcome(f"suites/test_forward.py::test_forward[numpy-float32-rows{n + 1}-hidden8-normal]", "numpy",
                     "test_forward", "passed"))
    sink.close()
    assert sink.error is None and not sink.unsaved and len(storage.load(tmp_path, CONFORMANCE)) == 3
    assert "now in" in capsys.readouterr().err


def test_a_row_in_the_journal_is_never_also_kept_as_unsaved(tmp_path, monkeypatch):
    """Before: the JSON snapshot that follows a row's append failed on the full disk, ``add`` raised for a row
    already in conformance.csv, and the run kept it a second time in the unsaved file (1 + 42 rows for 42 tests,
    on a busy machine, where the first test ends more than 2 s after the writer opens)."""
    import errno

    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage
    from normbench.front.run import _Sink
    from normbench.front.runner import Outcome

    def no_space(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writer = storage.ResultsWriter(tmp_path, "r1", CONFORMANCE)
    monkeypatch.setattr(storage.ResultsWriter, "JSON_EVERY_S", 0.0)
    monkeypatch.setattr(storage, "write_atomic", no_space)  # the snapshot cannot be written; the journal can
    sink = _Sink(writer, "r1")
    for n in range(3):
        sink(Outcome(f"suites/test_forward.py::test_forward[numpy-float32-rows{n + 1}-hidden8-normal]", "numpy",
                     "test_forward", "passed"))
    journal = _csv_rows(tmp_path / "conformance.csv")
    assert journal == 1 and len(sink.unsaved) == 2  # the first row is written once; the two after it refused
    assert "conformance.json" in str(sink.error)


def test_a_snapshot_that_fails_at_the_end_says_nothing_is_missing(tmp_path, monkeypatch):
    """Issue 45: every row was in the journal and only the last JSON snapshot failed, and the run's last line read
    "0 conformance results could not be written to the run folder (...); " with nothing after it."""
    import errno

    from normbench.check.outcomes import CONFORMANCE
    from normbench.core import storage
    from normbench.front.run import _Sink
    from normbench.front.runner import Outcome

    writer = storage.ResultsWriter(tmp_path, "r1", CONFORMANCE)
    sink = _Sink(writer, "r1")
    for n in range(3):
        sink(Outcome(f"suites/test_forward.py::test_forward[numpy-float32-rows{n + 1}-hidden8-normal]", "numpy",
                     "test_forward", "passed"))

    def no_space(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(storage, "write_atomic", no_space)
    sink.close()
    assert sink.error is not None and not sink.unsaved
    problem = sink.problem()
    assert problem.startswith(f"every conformance result is in {tmp_path / 'conformance.csv'}, but writing beside it "
                              f"failed (") and "0 conformance results" not in problem and not problem.endswith("; ")
    monkeypatch.undo()
    assert len(storage.load(tmp_path, CONFORMANCE)) == 3  # the journal, read to the end


def test_pytest_arguments_pytest_refuses_create_no_run_folder(tmp_path):
    """Before: pytest printed its usage and a run folder marked 'finished' with 0 tests was left."""
    out = normbench("run", "--impl=numpy", f"--out={tmp_path}", "--no-such-pytest-option")
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("normbench: error: pytest refuses the arguments normbench run passes on to it "
                           "(--no-such-pytest-option)") and "unrecognized arguments" in line
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("workers, tests, expected", [("8", 5, "5"), ("auto", 1, "1"), ("0", None, "1"),
                                                      ("3", None, "3"), ("2", 0, "1"), ("4", 100, "4")])
def test_a_run_starts_no_more_workers_than_tests(workers, tests, expected):
    """Before: ``-n 30`` started 30 workers for 5 tests."""
    assert worker_count(Plan(workers=workers, tests=tests)) == expected


# -- a run in a time budget (issue 29): the most valuable first, the rest 'not run', never passed -----------------


def test_under_a_budget_the_most_valuable_tests_come_first():
    from types import SimpleNamespace as NS

    from normbench.front.isolation import budget_rank

    def item(backend, dtype, seed=0):
        return NS(callspec=NS(params={"backend": NS(name=backend), "case": NS(dtype=dtype), "seed": seed}))

    items = [item("numpy", "bfloat16"), item("jax", "float32"), item("torch", "float32", 1), item("triton", "float32"),
             item("torch", "bfloat16"), item("mine", "float16"), item("torch", "float32")]
    ranked = [(i.callspec.params["backend"].name, i.callspec.params["case"].dtype, i.callspec.params["seed"])
              for i in sorted(items, key=budget_rank)]
    assert ranked == [("triton", "float32", 0), ("torch", "bfloat16", 0), ("torch", "float32", 0),
                      ("torch", "float32", 1), ("jax", "float32", 0), ("numpy", "bfloat16", 0), ("mine", "float16", 0)]


RUN_OUTCOMES = """
import json, sys
from dataclasses import asdict
from normbench.front.runner import run_pytest
code, outcomes = run_pytest(sys.argv[1:])
print("OUTCOMES " + json.dumps([asdict(o) for o in outcomes]))
"""


def test_a_test_not_started_when_the_budget_is_spent_is_not_run_never_passed():
    from normbench.suites import DIRECTORY

    out = subprocess.run([sys.executable, "-c", RUN_OUTCOMES, str(DIRECTORY / "test_forward.py"), "--impl=numpy",
                          "--normbench-stop-at=1", "-q", "-p", "no:cacheprovider", *FEW], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    line = next(x for x in out.stdout.splitlines() if x.startswith("OUTCOMES "))
    outcomes = json.loads(line.removeprefix("OUTCOMES "))
    assert outcomes and {o["outcome"] for o in outcomes} == {"not run"}
    assert all("the run's time budget (--budget) was spent" in o["message"] for o in outcomes)


def test_a_run_in_a_budget_measures_throughput_first_and_records_its_budget(tmp_path):
    out = normbench("run", "--impl=numpy", "--budget=300", "--no-report", f"--out={tmp_path}", "--run-id=r1", "-n", "1",
                    "--shape=16384x256", "--dtype=float32", "--direction=forward", *FEW)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.index("normbench: throughput suite") < out.stdout.index("normbench: conformance suites")
    assert "  budget:      300 s: tests start until " in out.stdout and "BUDGET SPENT" not in out.stdout
    env = json.loads((tmp_path / "r1" / "environment.json").read_text())
    assert env["budget"]["seconds"] == 300 and env["budget"]["tests_start_until"]
    assert env["status"]["state"] == "finished" and env["status"]["reason"] is None


@pytest.mark.parametrize("budget", ["5", "-5", "1e12", "soon", "nan"])
def test_a_budget_too_small_for_the_run_itself_is_one_line(tmp_path, budget):
    """Before: 1e12 was a datetime traceback after the run folder was claimed; -5 was answered "e.g. 1.0", which
    was itself refused."""
    out = normbench("run", "--impl=numpy", f"--budget={budget}", f"--out={tmp_path}")
    assert out.returncode == 2 and "A budget is at least 30 s" in out.stderr and not any(tmp_path.iterdir())
    assert "at most 2592000 s (30 days)" in out.stderr and "Traceback" not in out.stderr and "1.0" not in out.stderr


# -- the vetting cannot be bypassed from the environment (issue 45) ------------------------------------------------


def _key(env, name):
    """The verdict key of plugin ``name`` as the vetting makes it (asked in a process with the plugins' env)."""
    code = f"from normbench import get_registry; from normbench.core import vetting; " \
           f"print(vetting.key(get_registry().plugin({name!r})))"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.e2e
@pytest.mark.parametrize("forged", ["stale format", "a maker that is no ancestor"])
def test_a_forged_verdict_is_not_taken(loading, forged):
    """Before: a NORMBENCH_PLUGIN_VERDICTS calling the segfaulting plugin fine made normbench load it in process
    (exit 139, no summary)."""
    verdicts = {_key(loading, "segv-at-import"): "", _key(loading, "hangs-at-create"): ""}
    value = verdicts if forged == "stale format" else {"maker": 1, "verdicts": verdicts}
    out = normbench("test", "--impl=all", "-n", "2", *FEW, env={**loading, "NORMBENCH_PLUGIN_VERDICTS": json.dumps(value)})
    said = out.stdout + out.stderr
    assert out.returncode in (0, 1) and CRASHED in said and HUNG in said, said[-3000:]


@pytest.mark.e2e
def test_an_oversized_inherited_verdicts_variable_starts_no_failing_worker(loading):
    """Before: the inherited variable, grown by this run's verdicts past Linux's 128 KiB, made every worker fail to
    start (E2BIG): INTERNALERROR, then 'finished' with 0 of 0."""
    big = json.dumps({"x" * 10: "y" * 130_500})  # within the 128 KiB a variable may have, until verdicts are added
    out = normbench("test", "--impl=all", "-n", "2", *FEW, env={**loading, "NORMBENCH_PLUGIN_VERDICTS": big})
    said = out.stdout + out.stderr
    assert out.returncode in (0, 1) and "INTERNALERROR" not in said and "passed" in said, said[-3000:]


@pytest.mark.e2e
@pytest.mark.parametrize("value", ["0.5", "0", "soon"])
def test_a_plugin_timeout_too_short_to_vet_anything_is_one_message(loading, value):
    """Before: NORMBENCH_PLUGIN_TIMEOUT=0.5 ended the vetting child outside any plugin, every plugin was marked fine
    and the segfaulting one loaded in process (exit 139); 0 and words fell back to 60 s without a word."""
    out = normbench("test", "--impl=all", *FEW, env={**loading, "NORMBENCH_PLUGIN_TIMEOUT": value})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stdout + out.stderr
    assert f"NORMBENCH_PLUGIN_TIMEOUT='{value}' is not a plugin time limit" in out.stderr, out.stderr
    listed = normbench("list", "--plugin-timeout=0.01", env=loading)
    assert listed.returncode == 2 and "--plugin-timeout=0.01 is not a plugin time limit" in listed.stderr


def test_a_vetting_child_that_ends_outside_any_plugin_vets_none(monkeypatch):
    """The child ended (killed, crashed) before or between plugins: no plugin is marked fine."""
    from normbench.core import vetting

    class Plugin:
        def __init__(self, name):
            self.name, self.target, self.provider, self.origin = name, f"m:{name}", "acme 1.0", "/x"

    class Registry:
        def plugin(self, name):
            return Plugin(name)

    for ended in (vetting.Watched(-9, "", "", True), vetting.Watched(-11, "", "", False)):
        monkeypatch.delenv(vetting.VERDICTS_ENV, raising=False)
        monkeypatch.setattr(vetting, "watch", lambda *a, ended=ended, **k: ended)
        problems = vetting.vet(Registry(), ["a", "b"], ["true"])
        assert set(problems) == {"a", "b"} and all("could not be vetted" in p for p in problems.values()), problems
    # an exception outside any plugin (exit status 1: a plugin the child cannot find) is no crash: this process's
    # own load says why, as a PluginError
    monkeypatch.delenv(vetting.VERDICTS_ENV, raising=False)
    monkeypatch.setattr(vetting, "watch", lambda *a, **k: vetting.Watched(1, "", "", False))
    assert vetting.vet(Registry(), ["a", "b"], ["true"]) == {}
