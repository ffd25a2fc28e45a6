"""The loader believes nothing it reads (issue 31, second pass): a run folder's rows are checked against each other
and against its environment.json; a file that is there but cannot be read (a named pipe, a link loop, no permission)
is one message, never a hang and never "missing"; garbage is refused at its first bad row, in a message of bounded
length, without reading the rest."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import tracemalloc

import pytest

from normbench.check.outcomes import CONFORMANCE
from normbench.core import environment, storage
from normbench.core.storage import ResultsError, load
from normbench.perf.throughput import THROUGHPUT
from normbench.report import load_result_sets, render_html
from normbench.report import survey as survey_module
from tests.plugins import ROOT
from tests.report_data import write_run
from tests.test_survey import run_folder

NODE = "suites/test_forward.py::test_forward[numpy-float32-rows7-hidden100-uniform9]"


def normbench(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def conformance_run(tmp_path, n: int, done: int, command: str = "normbench run --impl=numpy --suites=conformance"):
    """A run folder of ``n`` conformance rows (one backend) whose environment.json says ``done`` of ``done`` finished."""
    folder = tmp_path / "r1"
    rows = [
        storage.new_row(
            CONFORMANCE,
            run_id="r1",
            backend="numpy",
            suite="test_forward.py",
            test="test_forward",
            case=f"float32-rows{i + 1}-hidden8-normal",
            outcome="passed",
            nodeid=f"suites/test_forward.py::test_forward[numpy-float32-rows{i + 1}-hidden8-normal]",
        )
        for i in range(n)
    ]
    storage.save(folder, storage.frame(rows, CONFORMANCE), CONFORMANCE)
    env = environment.environment("r1", command.split())
    (folder / "environment.json").write_text(json.dumps(env))
    environment.mark_status(folder, "finished", done=done, total=done)
    return folder


def notes_of(folder) -> list[str]:
    (rs,) = load_result_sets([folder])
    return rs.notes


# -- rows against the run's own environment -----------------------------------------------------------


def test_rows_missing_from_what_the_environment_says_finished_are_said_first(tmp_path):
    folder = conformance_run(tmp_path, n=10, done=637)
    (rs,) = load_result_sets([folder])
    assert len(rs.conformance) == 10
    (note,) = rs.notes
    assert note == (
        "environment.json says 637 tests finished, but the results hold rows of 10: 627 rows are missing "
        "(lost, or removed from its files); only the 10 there are shown"
    )
    html = render_html([rs])
    assert "627 rows are missing" in html[: html.index("<h2")]  # at the top, before any result


def test_a_run_whose_throughput_cases_were_skipped_is_not_said_to_miss_rows(tmp_path):
    """A skipped throughput case writes no row yet counts as finished: without --suites=conformance, fewer rows than
    finished tests is no evidence of loss, and the loader says nothing (never cry wolf)."""
    assert notes_of(conformance_run(tmp_path / "a", n=10, done=637, command="normbench run --impl=numpy")) == []
    assert notes_of(conformance_run(tmp_path / "b", n=10, done=10)) == []


def test_more_rows_than_the_run_finished_are_said(tmp_path):
    folder = conformance_run(tmp_path, n=4, done=2, command="normbench run --impl=numpy")
    assert notes_of(folder) == [
        "the results hold rows of 4 finished tests, but environment.json says 2 finished: "
        "2 rows the run did not write (added to its files, or another run's)"
    ]


@pytest.mark.parametrize("wrote, said", [
    (12, "environment.json says the run wrote 12 conformance rows, but its files hold 10: 2 rows are missing (lost, "
         "or removed from its files); only the 10 there are shown"),
    (7, "the conformance results hold 10 rows, but environment.json says the run wrote 7: 3 rows the run did not "
        "write (added to its files, or another run's)"),
    (10, None)])
def test_a_run_that_recorded_the_rows_it_wrote_is_held_to_them_exactly(tmp_path, wrote, said):
    """``normbench run`` records ``status.rows`` at its end: then rows missing are said for every run, throughput
    included, where the counts of finished tests can only prove too many."""
    folder = conformance_run(tmp_path, n=10, done=10, command="normbench run --impl=numpy")
    environment.mark_status(folder, "finished", done=10, total=10, rows={"conformance": wrote, "throughput": 0})
    assert notes_of(folder) == ([] if said is None else [said])


def test_a_row_repeated_exactly_is_read_once_and_named(tmp_path):
    folder = conformance_run(tmp_path, n=3, done=3)
    df = load(folder, CONFORMANCE)
    storage.save(folder, storage.frame(storage.records(df) + storage.records(df.iloc[[1]]), CONFORMANCE), CONFORMANCE)
    (rs,) = load_result_sets([folder])
    assert len(rs.conformance) == 3 and list(rs.conformance.nodeid) == list(df.nodeid)
    (note,) = rs.notes
    assert note == (f"the conformance results: 1 row repeats another row exactly (r1 numpy {df.nodeid[1]}): each is read once")


def test_a_test_that_both_passed_and_failed_is_shown_once_as_an_error_naming_it(tmp_path):
    folder = conformance_run(tmp_path, n=2, done=2)
    rows = storage.records(load(folder, CONFORMANCE))
    failed = {**rows[0], "outcome": "failed", "message": "y[0, 1] = 1.5, float64 reference 1.6"}
    storage.save(folder, storage.frame([rows[0], rows[1], failed], CONFORMANCE), CONFORMANCE)
    (rs,) = load_result_sets([folder])
    df = rs.conformance
    assert list(df.nodeid) == [rows[0]["nodeid"], rows[1]["nodeid"]]  # in place, once
    assert list(df.outcome) == ["error", "passed"]  # neither a pass nor the failure: no result is believed
    assert df.message[0] == "2 rows of this test disagree (passed, failed): none is believed"
    (note,) = rs.notes
    assert note == (
        f"the conformance results: 1 test has rows that disagree (r1 numpy {rows[0]['nodeid']}): none "
        f"of them is believed; each is shown once, as an error saying so"
    )
    assert "none is believed" in render_html([rs])


def test_throughput_rows_are_checked_too(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, conformance=False)
    df = load(folder, THROUGHPUT)
    slower = {**storage.records(df)[2], "gbps": 0.01, "median_s": 1.0}
    storage.save(folder, storage.frame(storage.records(df) + storage.records(df.iloc[[0]]) + [slower], THROUGHPUT), THROUGHPUT)
    (rs,) = load_result_sets([folder])
    assert len(rs.throughput) == len(df) and rs.throughput.verdict[2] == "error"
    assert rs.throughput.gbps.isna()[2]  # the speeds they disagree on are shown as none
    assert [n.split(":")[1] for n in rs.notes] == [
        " 1 row repeats another row exactly (r1 numpy layer_norm forward float32 16384 256)",
        " 1 test has rows that disagree (r1 numpy layer_norm forward float32 256 16384)",
    ]


def test_the_survey_refuses_a_run_whose_rows_disagree_with_its_environment(tmp_path):
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    env = json.loads((a / "environment.json").read_text())
    env["status"]["done"] = env["status"]["total"] = 5
    (a / "environment.json").write_text(json.dumps({**env, "command": "normbench run --suites=conformance"}))
    with pytest.raises(
        ResultsError,
        match=r"a: environment.json says 5 tests finished, but the results hold rows of "
        r"1: 4 rows are missing .*Fix: re-run it",
    ):
        survey_module.merge([a], "s", "normbench survey")
    b = run_folder(tmp_path, "b", {"numpy": "2.4.6"})
    df = load(b, CONFORMANCE)
    storage.write_csv(b / "conformance.csv", storage.records(df) * 2, CONFORMANCE)
    with pytest.raises(
        ResultsError,
        match=rf"b: the conformance results: 1 row repeats another row exactly \(b numpy "
        rf"{NODE.replace('[', '.')}",
    ):
        survey_module.merge([b], "s", "normbench survey")


# -- a file that is not a regular file, or cannot be reached ------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("name", ["conformance.csv", "throughput.json", "environment.json"])
def test_a_named_pipe_for_a_results_file_is_refused_in_one_line_not_waited_on(tmp_path, name):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    (folder / name).unlink()
    os.mkfifo(folder / name)
    for source in (folder, folder / name):
        out = normbench("report", str(source), "-o", str(tmp_path / "out.html"), timeout=60)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(
            f"normbench: error: cannot read {folder / name}: it is a named pipe (FIFO), not a regular file. Fix: "
        ), out.stderr
    assert not (tmp_path / "out.html").exists()


def test_a_link_loop_for_environment_json_is_one_message_not_missing(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    (folder / "environment.json").unlink()
    (folder / "environment.json").symlink_to("environment.json")
    with pytest.raises(
        ResultsError,
        match=r"cannot read .*r1/environment.json: Too many levels of symbolic links. "
        r"Fix: the link loops",
    ):
        load_result_sets([folder])
    out = normbench("report", str(folder), "-o", str(tmp_path / "out.html"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "environment.json" in out.stderr, out.stderr


def test_a_link_to_nothing_is_one_message_not_missing(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, env=False)
    (folder / "environment.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(ResultsError, match=r"r1/environment.json: it is a link to .*gone.json, which does not exist"):
        load_result_sets([folder])


def test_a_file_that_may_not_be_read_is_one_message_not_missing(tmp_path, monkeypatch):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    target = str(folder / "environment.json")
    real = os.stat

    def stat(path, *args, **kwargs):  # what a folder that may not be searched does (root may search any)
        if os.fspath(path) == target:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(
        ResultsError,
        match=r"cannot read .*r1/environment.json: Permission denied. Fix: make it "
        r"readable",
    ):
        load_result_sets([folder])


def test_only_a_file_that_is_not_there_is_missing(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, env=False)
    (rs,) = load_result_sets([folder])
    assert rs.missing == ["the environment (environment.json): device, versions and command are unknown"]


# -- garbage: refused at its first bad row, in a short message, without reading the rest ----------------


def test_a_million_garbage_rows_are_refused_at_the_first_in_a_short_line_without_reading_them(tmp_path):
    path = tmp_path / "conformance.csv"
    names = [c.name for c in CONFORMANCE.columns]
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        for i in range(10**6):
            f.write(",".join(f"g{i}x{j}" for j in range(len(names))) + "\n")
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ResultsError) as caught:
            load(path, CONFORMANCE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith(f"{path}, line 2: field schema_version is 'g0x0', not an integer. Fix: ")
    assert len(str(caught.value)) < 400
    assert peak < 16 << 20 and time.perf_counter() - start < 5  # a few lines read, not 130 MB (it took 2.4 GB, 22 s)


def test_a_huge_value_is_quoted_in_at_most_200_characters(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, conformance=False, env=False)
    (folder / "throughput.json").unlink()
    path = folder / "throughput.csv"
    lines = path.read_text().split("\n")
    header, cells = lines[0].split(","), lines[1].split(",")
    cells[header.index("hidden")] = "9" * 100_000 + "x"
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines))
    with pytest.raises(ResultsError, match=r"line 2: field hidden is '9{190,}\.\.\., not an integer") as caught:
        load(path, THROUGHPUT)
    assert len(str(caught.value)) < 500


def test_a_results_json_beyond_the_cap_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, conformance=False)
    size = (folder / "throughput.json").stat().st_size
    monkeypatch.setattr(storage, "MAX_RESULTS_JSON", size - 1)
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("parsed"))
    with pytest.raises(
        ResultsError,
        match=rf"cannot read .*throughput.json: it is {size} bytes, more than the "
        rf"{size - 1} such a file may have. Fix: .*read its CSV journal",
    ):
        load(folder / "throughput.json", THROUGHPUT)


def test_a_line_beyond_the_longest_a_row_may_be_is_refused_naming_it(tmp_path, monkeypatch):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1}, conformance=False, env=False)
    path = folder / "throughput.csv"
    path.write_text(path.read_text() + "x" * 5000 + "\n")
    monkeypatch.setattr(storage, "MAX_LINE", 4096)
    with pytest.raises(ResultsError, match=r"throughput.csv, line 8 is longer than 4096 characters: not a row"):
        load(path, THROUGHPUT)


def test_a_malformed_environment_names_at_most_200_characters_of_a_field(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    document = json.loads((folder / "environment.json").read_text())
    document["libraries"] = {"x" * 10**5: 1}
    (folder / "environment.json").write_text(json.dumps(document))
    with pytest.raises(ResultsError, match=r"field libraries\.x{150,}\.\.\. is 1, not a string") as caught:
        load_result_sets([folder])
    assert len(str(caught.value)) < 500
