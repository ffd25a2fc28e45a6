"""No command but ``normbench run`` writes into a run's folder (issue 45): ``survey --out``, ``traffic --out`` and
``kernel-stats --out`` refuse a run's folder or a run's own file names before anything is counted or written, and a
folder whose table is there twice (``conformance.csv`` beside ``conformance.csv.gz``) is refused, not read as one."""

from __future__ import annotations

import json

import pytest

from normbench.check import outcomes
from normbench.core import run_folder, storage
from normbench.core.environment import ENVIRONMENT_FILE, environment
from normbench.core.exceptions import NormbenchError
from normbench.core.storage import ResultsError
from normbench.front import counts
from normbench.front.cli import main
from normbench.report import survey


def finished_run(folder):
    """A finished run's folder as ``normbench run`` leaves it: its lock file, environment and conformance rows."""
    rows = [storage.new_row(outcomes.CONFORMANCE, run_id=folder.name, backend="numpy", suite="test_forward.py",
                            test="test_forward", case="float32-rows7-hidden100-uniform9", normalization="layer_norm",
                            nodeid="suites/test_forward.py::test_forward[numpy-float32-rows7-hidden100-uniform9]",
                            outcome="passed")]
    storage.write_csv(folder / "conformance.csv", rows, outcomes.CONFORMANCE)
    env = environment(folder.name, ["normbench", "run", "--impl=numpy"])
    env["backends"] = {"numpy": {"version": "2", "device": "cpu"}}
    env["status"] = {"state": "finished", "reason": None, "at": env["started"], "done": 1, "total": 1}
    (folder / ENVIRONMENT_FILE).write_text(json.dumps(env))
    return folder


def test_a_survey_is_never_written_into_a_run_folder_even_one_still_creating_its_backends(tmp_path):
    """A run that has claimed its folder but written no results yet (its backends still being created) holds only
    its lock file and environment.json: the survey would rewrite that environment. Refused, saying the pid."""
    source = finished_run(tmp_path / "source")
    source.mkdir(exist_ok=True)
    claimed = run_folder.claim(tmp_path, "claimed")
    try:
        (claimed.path / ENVIRONMENT_FILE).write_text('{"run_id": "claimed"}')
        before = {p.name: p.read_bytes() for p in claimed.path.iterdir()}
        with pytest.raises(ResultsError, match=r"is a run's folder \(it holds normbench run's \.normbench\.lock, held "
                                               r"by pid \d+: the run is still going\)"):
            survey.write_survey(claimed.path, [source], [], "normbench survey")
        assert main(["survey", "--out", str(claimed.path), str(source), "--no-report"]) == 2
        assert {p.name: p.read_bytes() for p in claimed.path.iterdir()} == before
    finally:
        claimed.release()
    # the run has ended: its folder is still a run's, refused without a pid
    with pytest.raises(ResultsError, match=r"it holds normbench run's \.normbench\.lock\): the survey would rewrite"):
        survey.write_survey(claimed.path, [source], [], "normbench survey")


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "source"
    folder.mkdir()
    return finished_run(folder)


@pytest.mark.parametrize("kind, name", [
    ("traffic", "conformance.csv"), ("traffic", "throughput.csv"), ("traffic", "counters.csv"),
    ("traffic", "findings.csv"), ("kernels", "conformance.csv"), ("kernels", "throughput.csv"),
])
def test_a_count_is_never_written_over_a_run_folders_own_file(source, kind, name):
    with pytest.raises(NormbenchError, match=rf"{name} is a run folder's own file, never written over"):
        counts.check_out(str(source / name), kind)


@pytest.mark.parametrize("kind, name, why", [
    ("traffic", "environment.json", "one .csv file"), ("kernels", "report.html", "one .csv file"),
    ("traffic", "kernels-sm90.csv", "read as kernel statistics, which traffic rows are not"),
    ("kernels", "traffic.csv", "kernel statistics are read from files named kernels-"),
    ("kernels", "stats.csv", "kernel statistics are read from files named kernels-"),
    ("traffic", ".", "one .csv file"),
])
def test_a_count_goes_to_a_csv_file_under_the_name_the_report_reads_it_by(source, kind, name, why):
    with pytest.raises(NormbenchError, match=why):
        counts.check_out(str(source / name), kind)


@pytest.mark.parametrize("kind, name", [("traffic", "traffic.csv"), ("traffic", "traffic-rms.csv"),
                                        ("kernels", "kernels-sm90.csv"), ("kernels", "kernels-h100.csv")])
def test_the_documented_count_files_are_allowed(tmp_path, kind, name):
    counts.check_out(str(tmp_path / name), kind)
    counts.check_out(None, kind)  # no --out: the table is printed


def test_a_count_is_not_written_into_a_folder_another_live_run_holds(tmp_path):
    """The lock is held by this process here; a child process stands for the other run."""
    import subprocess
    import sys
    import time

    held = tmp_path / "busy"
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; from normbench.core import run_folder; "
                              f"run_folder.claim({str(tmp_path)!r}, 'busy'); print('held', flush=True); "
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(NormbenchError, match=rf"the run in {held} is still writing there \(pid {child.pid}\)"):
            counts.check_out(str(held / "traffic.csv"), "traffic")
    finally:
        child.kill()
        child.wait()
    deadline = time.time() + 10
    while run_folder.holder(held) is not None and time.time() < deadline:
        time.sleep(0.05)
    counts.check_out(str(held / "traffic.csv"), "traffic")  # the run is gone: its folder may take the counts


@pytest.mark.parametrize("command, name", [("traffic", "conformance.csv"), ("kernel-stats", ENVIRONMENT_FILE),
                                           ("traffic", "kernels-sm90.csv"), ("kernel-stats", "traffic.csv")])
def test_the_commands_refuse_a_wrong_out_before_they_need_triton(source, capsys, command, name):
    """The refusal comes before the check for torch and Triton, so it reads the same on a numpy-only machine."""
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    assert main([command, "--out", str(source / name)]) == 2
    err = capsys.readouterr().err
    assert f"--out {source / name}:" in err and "Traceback" not in err and "Triton" not in err
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before


def test_a_table_held_twice_in_a_folder_is_refused_not_guessed(source):
    """conformance.csv beside conformance.csv.gz: one of them is not the run's (a survey's rows copied in, say)."""
    import gzip
    import shutil

    with open(source / "conformance.csv", "rb") as plain, gzip.open(source / "conformance.csv.gz", "wb") as packed:
        shutil.copyfileobj(plain, packed)
    with pytest.raises(ResultsError, match=r"holds conformance.csv.gz beside conformance.csv: which is the run's is "
                                           r"not known"):
        storage.load(source, outcomes.CONFORMANCE)
    assert main(["report", str(source), "--out", str(source.parent / "r.html")]) == 2
    assert len(storage.load(source / "conformance.csv.gz", outcomes.CONFORMANCE)) == 1  # each is read by its name
