"""What ``normbench run`` promises about its run folder (README, "Reliability"), as a user meets it:
a killed run keeps every finished test, a stopped run is marked interrupted, a folder has one
writer and is never written twice, and a bad output folder is one message before anything runs."""

import os
import signal
import subprocess
import sys
import time

import pytest

from normbench.check import outcomes
from normbench.core import storage
from normbench.core.environment import read_environment
from normbench.perf.throughput import THROUGHPUT
from tests.plugins import ROOT

#: enough conformance tests that a run is still going when the test stops it
SLOW = ["--impl=numpy", "--suites=conformance", "-n", "1", "--normbench-seed=0..3", "--no-report"]


def start(tmp_path, *args):
    return subprocess.Popen([sys.executable, "-m", "normbench", "run", f"--out={tmp_path}", "--run-id=r1", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_rows(folder, n: int, process, timeout: float = 300) -> int:
    """Wait until the conformance journal holds ``n`` rows; return how many it held."""
    journal = folder / "conformance.csv"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        rows = max(0, len(journal.read_text().splitlines()) - 1) if journal.exists() else 0
        if rows >= n:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} rows after {timeout} s")


def normbench(*args):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.e2e
def test_sigterm_keeps_what_ran_and_marks_the_run_interrupted(tmp_path):
    run = start(tmp_path, *SLOW)
    seen = wait_for_rows(tmp_path / "r1", 40, run)
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    said = f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert run.returncode == 2 and "Traceback" not in err, said
    assert "INTERRUPTED (SIGTERM)" in out and "INCOMPLETE: some tests did not run" in out and "PASS" not in out, said
    status = read_environment(tmp_path / "r1")["status"]
    assert status["state"] == "interrupted" and status["reason"] == "SIGTERM", (status, said)
    assert seen <= status["done"] < status["total"], (seen, status, said)
    rows = storage.load(tmp_path / "r1", outcomes.CONFORMANCE)
    assert len(rows) == status["total"] and (rows.outcome != "not run").sum() == status["done"], (status, said)
    assert set(rows.outcome) == {"passed", "not run"}, (rows.outcome.value_counts(), said)
    assert set(rows[rows.outcome == "not run"].message) == {"not run: the run was interrupted (SIGTERM)"}


@pytest.mark.e2e
def test_a_dropped_terminal_is_an_interrupted_run_with_its_summary_and_bundle(tmp_path):
    """SIGHUP to the run's process group (workers included), as a closed terminal or a dropped ssh connection sends
    it. Before: the run ended at once with 129, no summary, its status 'running', and --bundle wrote nothing."""
    run = start(tmp_path, *SLOW[:2], "-n", "2", *SLOW[4:], f"--bundle={tmp_path / 'bundle'}")
    seen = wait_for_rows(tmp_path / "r1", 40, run)
    os.killpg(run.pid, signal.SIGHUP)
    out, err = run.communicate(timeout=120)
    said = f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert run.returncode == 2 and "Traceback" not in err, said
    assert "INTERRUPTED (SIGHUP)" in out, said
    status = read_environment(tmp_path / "r1")["status"]
    assert status["state"] == "interrupted" and status["reason"] == "SIGHUP", (status, said)
    assert seen <= status["done"] < status["total"], (seen, status, said)
    rows = storage.load(tmp_path / "r1", outcomes.CONFORMANCE)
    assert set(rows.outcome) == {"passed", "not run"}, (rows.outcome.value_counts(), said)  # no worker "crashed"
    assert (tmp_path / "bundle" / "manifest.json").is_file(), said


@pytest.mark.e2e
def test_sigkill_keeps_every_finished_test_and_the_report_says_the_run_did_not_finish(tmp_path):
    run = start(tmp_path, *SLOW)
    seen = wait_for_rows(tmp_path / "r1", 40, run)
    os.killpg(run.pid, signal.SIGKILL)  # the run and its workers, as the OOM killer or a closed terminal would
    run.communicate(timeout=60)
    rows = storage.load(tmp_path / "r1", outcomes.CONFORMANCE)
    assert len(rows) >= seen and set(rows.outcome) == {"passed"}
    assert read_environment(tmp_path / "r1")["status"]["state"] == "running"
    report = normbench("report", str(tmp_path / "r1"))
    assert report.returncode == 0, report.stderr
    assert not [p.name for p in (tmp_path / "r1").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.e2e
def test_a_second_run_into_a_busy_folder_gets_one_message(tmp_path):
    first = start(tmp_path, *SLOW)
    wait_for_rows(tmp_path / "r1", 1, first)
    second = normbench("run", *SLOW, f"--out={tmp_path}", "--run-id=r1")
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"pid {first.pid}" in second.stderr and second.stdout == ""


@pytest.mark.e2e
def test_an_existing_run_id_is_refused_before_anything_runs(tmp_path):
    first = normbench("run", "--impl=numpy", "-n", "0", f"--out={tmp_path}", "--run-id=r1", "-m", "family_multidim",
                      "--no-report")
    assert first.returncode == 0, first.stderr
    files = lambda: {p.name: p.read_bytes() for p in (tmp_path / "r1").iterdir() if p.name != ".normbench.lock"}
    before = files()
    again = normbench("run", "--impl=numpy", "-n", "0", f"--out={tmp_path}", "--run-id=r1", "-m", "family_multidim")
    assert again.returncode == 2 and "already holds the results of a run" in again.stderr
    assert again.stdout == "" and files() == before


def test_a_folder_holding_a_results_file_even_a_corrupt_one_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "throughput.csv").write_text("garbage\n")
    out = normbench("run", "--impl=numpy", f"--out={tmp_path}", "--run-id=r1")
    assert out.returncode == 2 and "already holds the results of a run" in out.stderr and out.stdout == ""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where nobody can create a folder")
def test_an_output_folder_that_cannot_be_written_is_one_message():
    out = normbench("run", "--impl=numpy", "--out=/proc/self/normbench-runs")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "/normbench-runs/" in out.stderr
    assert out.stdout == ""


@pytest.mark.e2e
@pytest.mark.parametrize("workers", ["0", "1"])
def test_the_throughput_suite_claims_its_folder_before_measuring(tmp_path, workers):
    """``pytest suites/ -m throughput`` (no normbench run around it) obeys the same folder rules."""
    from normbench.suites import DIRECTORY

    def sweep():
        return subprocess.run([sys.executable, "-m", "pytest", str(DIRECTORY / "test_throughput.py"), "--impl=numpy",
                               f"--normbench-out={tmp_path}", "--normbench-run-id=r1", "--normbench-shape=256x16384",
                               "--normbench-norm=layer_norm",
                               "--normbench-dtype=float32", "--normbench-direction=forward", "-n", workers,
                               "--normbench-min-samples=3", "--normbench-max-time=0", "--normbench-ceiling-mib=64",
                               "-q", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=600)

    first = sweep()
    assert first.returncode == 0 and len(storage.load(tmp_path / "r1", THROUGHPUT)) == 1, first.stdout[-3000:]
    second = sweep()
    assert second.returncode == 4 and "already holds the results of a run" in second.stdout
    assert "1 passed" not in second.stdout and len(storage.load(tmp_path / "r1", THROUGHPUT)) == 1


def test_a_failed_conformance_write_is_said_once_and_the_run_goes_on(capsys):
    from normbench.core.storage import ResultsError
    from normbench.front.run import _Sink
    from normbench.front.runner import Outcome

    class FullDisk:
        calls = 0

        def add(self, row):
            FullDisk.calls += 1
            raise ResultsError("cannot write row 1 to conformance.csv: No space left on device")

        def close(self):
            raise ResultsError("cannot write row 1 to conformance.csv: No space left on device")

    sink = _Sink(FullDisk(), "r1")
    for _ in range(3):
        sink(Outcome("suites/test_forward.py::test_forward[numpy-float32-rows1-hidden8-normal]", "numpy",
                     "test_forward", "passed"))
    sink.close()
    assert capsys.readouterr().err.count("No space left on device") == 1 and FullDisk.calls == 1
    assert isinstance(sink.error, ResultsError)


def test_collecting_the_throughput_suite_creates_no_run_folder(tmp_path):
    from normbench.suites import DIRECTORY

    out = subprocess.run([sys.executable, "-m", "pytest", str(DIRECTORY / "test_throughput.py"), "--impl=numpy",
                          f"--normbench-out={tmp_path}", "--normbench-shape=256x16384", "--normbench-norm=layer_norm",
                          "--co", "-q",
                          "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "test_throughput[numpy-" in out.stdout, out.stdout[-2000:]
    assert not any(tmp_path.iterdir())


def test_a_failed_throughput_write_is_said_once_and_the_cases_go_on(pytester, monkeypatch, tmp_path):
    from normbench.core import storage
    from normbench.front.pytest_throughput import RECORDER

    class FullDisk:
        def __init__(self, *args, **kwargs):
            pass

        def add(self, row):
            raise storage.ResultsError("cannot write row 1 to throughput.csv: No space left on device")

        def close(self):
            raise storage.ResultsError("cannot write row 1 to throughput.csv: No space left on device")

    monkeypatch.setattr(storage, "ResultsWriter", FullDisk)
    config = pytester.parseconfigure(f"--normbench-out={tmp_path}", "--normbench-run-id=r1")
    recorder = config.stash[RECORDER]
    said = []
    monkeypatch.setattr(config.pluginmanager, "get_plugin",
                        lambda name: type("R", (), {"write_line": lambda self, line: said.append(line)})())
    for n in range(3):
        recorder._write({"backend": "numpy", "n": n}, False)
    session = type("S", (), {"exitstatus": pytest.ExitCode.OK})()
    recorder.pytest_sessionfinish(session)
    assert len(said) == 1 and "No space left on device" in said[0] and len(recorder.rows) == 3
    assert session.exitstatus == pytest.ExitCode.USAGE_ERROR
