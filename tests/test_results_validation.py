"""Nothing measured is lost and every bad input gets one message (issue 13, items 3, 5, 6, 10, 12):
writes on a full disk, a folder whose CSV and JSON disagree, empty results, malformed files of
every kind, a report written over its input, environment.json and the run's status."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from normbench.check.outcomes import CONFORMANCE
from normbench.core import environment, files, storage
from normbench.core.run_folder import claim
from normbench.core.storage import ResultsError, ResultsWriter, load
from normbench.perf.throughput import THROUGHPUT
from normbench.report import load_result_sets, render_html, write_report
from tests.plugins import ROOT
from tests.report_data import write_run
from tests.test_results import rows


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(k)``: from now on the disk takes ``k`` more bytes, then every write fails with ENOSPC
    (a write that does not fit writes what fits, as a real one does)."""
    real = os.write

    def fill(budget: int) -> None:
        left = [budget]

        def write(fd, data):
            if left[0] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = real(fd, bytes(data[:left[0]]))
            left[0] -= n
            return n
        monkeypatch.setattr(os, "write", write)
    return fill


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- item 3: a write that fails says so once and leaves nothing behind ---------------------------


def test_a_full_disk_mid_row_keeps_the_rows_before_it_whole_and_says_so_once(tmp_path, full_disk):
    writer = ResultsWriter(tmp_path, "r1", THROUGHPUT)
    for row in rows(n=6):
        writer.add(row)
    line = len(storage._csv_text(storage._validated_rows(rows(n=1), THROUGHPUT, "", ""), THROUGHPUT.columns,
                                 header=False))
    full_disk(line // 2)  # the 7th row's line half fits
    with pytest.raises(ResultsError) as caught:
        writer.add(rows(n=7)[6])
    message = str(caught.value)
    assert message == (f"cannot write row 7 to {tmp_path / 'throughput.csv'}: No space left on device; the 6 rows "
                       f"before it are safely in {tmp_path / 'throughput.csv'}. Fix: free disk space (or give --out "
                       f"on another disk), then run again")
    for again in (lambda: writer.add(rows(n=8)[7]), writer.close):  # the same error, not a new one per row
        with pytest.raises(ResultsError) as later:
            again()
        assert str(later.value) == message
    text = (tmp_path / "throughput.csv").read_text()
    assert text.endswith("\n") and leftovers(tmp_path) == []
    df = load(tmp_path, THROUGHPUT)
    assert len(df) == 6 and storage.notes(df) == []


def test_a_json_snapshot_that_does_not_fit_leaves_no_temporary_file(tmp_path, full_disk):
    writer = ResultsWriter(tmp_path, "r1", THROUGHPUT)
    writer.add(rows()[0])
    writer.flush()
    line = storage._csv_text(storage._validated_rows([rows()[1]], THROUGHPUT, "", ""), THROUGHPUT.columns,
                             header=False)
    full_disk(len(line.encode()))  # the next row's line fits, the JSON snapshot after it does not: its temporary
    writer.add(rows()[1])  # file is created, and stays empty
    with pytest.raises(ResultsError, match=r"cannot write .*throughput\.json: No space left on device; the 2 rows "
                                           r"written so far are safely in .*throughput\.csv\. Fix: free disk space"):
        writer.close()
    assert leftovers(tmp_path) == []
    assert len(load(tmp_path / "throughput.csv", THROUGHPUT)) == 2 and len(load(tmp_path / "throughput.json", THROUGHPUT)) == 1
    assert len(load(tmp_path, THROUGHPUT)) == 2  # the folder: the journal, with a note


def test_write_atomic_leaves_the_old_file_and_no_temporary_one_when_the_disk_is_full(tmp_path, full_disk):
    target = tmp_path / "environment.json"
    target.write_text("old")
    for budget in (0, 3):
        full_disk(budget)
        with pytest.raises(OSError, match="No space left"):
            files.write_atomic(target, "new contents")
        assert target.read_text() == "old" and leftovers(tmp_path) == []


def test_append_whole_cuts_a_torn_record_back(tmp_path, full_disk):
    log = tmp_path / "journal.csv"
    files.append_whole(log, "a,b\n")
    full_disk(2)
    with pytest.raises(OSError):
        files.append_whole(log, "1,2,3\n")
    assert log.read_text() == "a,b\n"


def test_writing_into_a_folder_that_cannot_be_written_is_one_message(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultsError, match=r"cannot write .*file/r1/throughput.csv: .*Fix: check the disk"):
        ResultsWriter(tmp_path / "file" / "r1", "r1", THROUGHPUT)
    with pytest.raises(ResultsError, match=r"cannot write 3 throughput rows into .*file/r1: "):
        storage.save(tmp_path / "file" / "r1", storage.frame(rows(), THROUGHPUT), THROUGHPUT)


def test_the_json_is_not_rewritten_after_every_row(tmp_path, monkeypatch):
    """Thousands of conformance rows: the JSON snapshot is written a bounded number of times, not per row."""
    writes = []
    real = storage.write_atomic
    monkeypatch.setattr(storage, "write_atomic", lambda path, data: writes.append(path) or real(path, data))
    row = storage.new_row(CONFORMANCE, run_id="r1", backend="numpy", suite="test_forward.py", test="test_forward",
                          case="c", nodeid="suites/test_forward.py::test_forward[numpy-c]", outcome="passed")
    with ResultsWriter(tmp_path, "r1", CONFORMANCE) as writer:
        for _ in range(2000):
            writer.add(row)
    assert len(writes) <= 3 and len(load(tmp_path / "conformance.json", CONFORMANCE)) == 2000


# -- item 3: a folder's CSV and JSON disagree: reconciled or refused, never the shorter silently --


def test_the_journal_holding_more_rows_than_the_json_is_read_and_said(tmp_path):
    storage.save(tmp_path, storage.frame(rows()[:2], THROUGHPUT), THROUGHPUT)
    with open(tmp_path / "throughput.csv", "a") as f:  # the journal got a row the snapshot did not
        f.write(storage._csv_text(storage._validated_rows([rows()[2]], THROUGHPUT, "", ""), THROUGHPUT.columns,
                                  header=False))
    df = load(tmp_path, THROUGHPUT)
    pd.testing.assert_frame_equal(df, storage.frame(rows(), THROUGHPUT))
    (note,) = storage.notes(df)
    assert "throughput.json holds 2 rows and the journal throughput.csv 3" in note
    html = render_html(load_result_sets([tmp_path]))
    assert "the run stopped before its last JSON snapshot; the CSV&#39;s rows were read" in html


def test_a_json_with_more_rows_or_other_values_than_the_csv_is_refused(tmp_path):
    storage.save(tmp_path / "a", storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    storage.save(tmp_path / "tmp", storage.frame(rows()[:2], THROUGHPUT), THROUGHPUT)
    os.replace(tmp_path / "tmp" / "throughput.csv", tmp_path / "a" / "throughput.csv")
    with pytest.raises(ResultsError, match=r"throughput.json and throughput.csv disagree \(throughput.json holds 3 "
                                           r"rows, more than the 2 of the journal throughput.csv\); neither is "
                                           r"preferred. Fix: read one of them by name"):
        load(tmp_path / "a", THROUGHPUT)
    changed = [dict(r) for r in rows()]
    changed[1]["median_s"] = 9.0
    storage.save(tmp_path / "b", storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    storage.save(tmp_path / "tmp", storage.frame(changed, THROUGHPUT), THROUGHPUT)
    os.replace(tmp_path / "tmp" / "throughput.json", tmp_path / "b" / "throughput.json")
    with pytest.raises(ResultsError, match=r"disagree \(they differ at row 2, field median_s\)"):
        load(tmp_path / "b", THROUGHPUT)


@pytest.mark.parametrize("cut", ["mid-field", "inside a quoted message"])
def test_a_journal_cut_mid_row_loses_the_cut_row_only_and_says_so(tmp_path, cut):
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.csv"
    text = path.read_text()
    last = text.rindex("\n", 0, len(text) - 1) + 1
    end = text.index("bound 1e-3") if cut == "inside a quoted message" else last + 20  # after a quoted newline
    path.write_text(text[:end])
    (tmp_path / "throughput.json").unlink(missing_ok=True)
    df = load(tmp_path, THROUGHPUT)
    kept = 2 if cut == "mid-field" else 1
    pd.testing.assert_frame_equal(df, storage.frame(rows()[:kept], THROUGHPUT))
    (note,) = storage.notes(df)
    assert note.endswith(f"its last line is incomplete (the run stopped while writing it) and was left out; {kept} "
                         f"complete rows read")


def test_a_short_line_inside_the_journal_is_refused(tmp_path):
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.csv"
    lines = path.read_text().split("\n")
    lines[1] = ",".join(lines[1].split(",")[:5])
    path.write_text("\n".join(lines))
    with pytest.raises(ResultsError, match=rf"throughput.csv, line 2 has 5 fields, the header {len(THROUGHPUT.columns)}"):
        load(path, THROUGHPUT)


def test_a_blank_line_after_the_header_is_refused_naming_it(tmp_path):
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.csv"
    lines = path.read_text().split("\n")
    path.write_text("\n".join([lines[0], "", *lines[1:]]))
    with pytest.raises(ResultsError, match=r"throughput.csv, line 2 has 0 fields"):
        load(path, THROUGHPUT)


# -- item 6: empty results are valid -------------------------------------------------------------


@pytest.mark.parametrize("schema", [THROUGHPUT, CONFORMANCE])
def test_a_run_that_wrote_no_rows_loads_as_an_empty_frame_and_renders(tmp_path, schema):
    ResultsWriter(tmp_path, "r1", schema).close()
    name = schema.stem
    for source in (tmp_path, tmp_path / f"{name}.json", tmp_path / f"{name}.csv"):
        df = load(source, schema)
        pd.testing.assert_frame_equal(df, storage.frame([], schema))
    html = render_html(load_result_sets([tmp_path]))
    assert f"The {name} results hold no rows: the run wrote none" in html


# -- item 10: every file validated at load, field by field ---------------------------------------


def _throughput_json(tmp_path, change) -> str:
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.json"
    document = json.loads(path.read_text())
    text = change(document)
    path.write_text(text if isinstance(text, str) else json.dumps(document))
    return str(path)


def _set(field, value, row=0):
    def change(document):
        document["rows"][row][field] = value
    return change


def _every(field, value):
    def change(document):
        for row in document["rows"]:
            row[field] = value
    return change


MALFORMED = {
    "rows as a string": (lambda d: d.update(rows="abc"), r"rows is \"abc\", not a list of rows"),
    "a row as a number": (lambda d: d["rows"].__setitem__(0, 5), r"row 1 is 5, not an object of fields"),
    "non-numeric integer": (_set("hidden", "12a"), r"row 1: field hidden is '12a', not an integer"),
    "a float integer": (_set("n", 2.5), r"row 1: field n is 2.5, not an integer"),
    "hidden 0": (_set("hidden", 0), r"row 1: field hidden is 0, not an integer >= 1"),
    "gbps Infinity": (lambda d: json.dumps(d).replace('"gbps": 0.3333333333333333', '"gbps": Infinity', 1),
                      r"row 1: field gbps is not finite"),
    "gbps 1e308": (_set("gbps", 1e308), r"row 1: field gbps is 1e\+308, not a finite number >= 0, <= 1e\+06"),
    "every ceiling 0": (_every("ceiling_gbps", 0), r"row 1: field ceiling_gbps is 0.0, not a finite number > 0"),
    "an ok row without a speed": (_set("gbps", None), r"row 1: a row with verdict ok needs gbps > 0 \(got empty\)"),
    "a string for a bool": (_set("wide_spread", "yes"), r"row 1: field wide_spread is 'yes', not true or false"),
    "a number for a string": (_set("backend", 3), r"row 1: field backend is 3, not a string"),
    "a missing field": (lambda d: d["rows"][2].pop("gbps"), r"row 3 lacks the fields gbps"),
    "an unknown field": (_set("speed", 3.0), r"row 1 has fields not in normbench.throughput version 2: speed"),
    "a row of version 3": (_set("schema_version", 3, row=1), r"row 2: field schema_version is 3, but the file is "
                                                             r"version 2"),
    "a bool version": (lambda d: d.update(schema_version=True), r"schema_version is true, not an integer"),
    "deeply nested": (lambda d: '{"rows": ' + "[" * 100000 + "]" * 100000 + "}", r"nested too deeply"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_results_file_is_refused_naming_the_row_and_field(tmp_path, name):
    change, message = MALFORMED[name]
    path = _throughput_json(tmp_path, change)
    with pytest.raises(ResultsError, match=message + ".*Fix: ") as caught:
        load(path, THROUGHPUT)
    assert str(caught.value).startswith((path, f"cannot read {path}"))


@pytest.mark.parametrize("field, value, message", [
    ("hidden", "12a", r"line 3: field hidden is '12a', not an integer"),
    ("gbps", "inf", r"line 2: field gbps is not finite"),
    ("wide_spread", "maybe", r"line 2: field wide_spread is 'maybe', not true or false"),
])
def test_a_malformed_csv_is_refused_naming_the_line_and_field(tmp_path, field, value, message):
    df = storage.frame(rows(), THROUGHPUT)
    storage.save(tmp_path, df, THROUGHPUT)
    lines = (tmp_path / "throughput.csv").read_text().split("\n")
    header = lines[0].split(",")
    row = 1 if field != "hidden" else 2
    cells = lines[row].split(",")
    cells[header.index(field)] = value
    lines[row] = ",".join(cells)
    (tmp_path / "throughput.csv").write_text("\n".join(lines))
    with pytest.raises(ResultsError, match=message):
        load(tmp_path / "throughput.csv", THROUGHPUT)


def test_a_csv_header_lacking_columns_is_refused_even_without_rows(tmp_path):
    (tmp_path / "throughput.csv").write_text("schema_version,run_id\n")
    with pytest.raises(ResultsError, match=r"its header lacks the columns time, host"):
        load(tmp_path / "throughput.csv", THROUGHPUT)


def _environment(tmp_path, **changes):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    document = json.loads((folder / "environment.json").read_text())
    document.update(changes)
    (folder / "environment.json").write_text(json.dumps(document))
    return folder


@pytest.mark.parametrize("changes, message", [
    ({"gpus": "none"}, r"field gpus is \"none\", not a list of an object of a string"),
    ({"ceilings": {"cpu": {"gbps": 0}}}, r"field ceilings.cpu.gbps is 0, not a finite number > 0"),
    ({"ceilings": {"cpu": {"method": "copy"}}}, r"field ceilings.cpu.gbps is missing"),
    ({"libraries": {"numpy": 2}}, r"field libraries.numpy is 2, not a string"),
    ({"command": ["normbench", "run"]}, r"field command is list, not a string"),
    ({"schema_version": True}, r"schema version True; this normbench reads version 1"),
    ({"status": {"state": "paused", "at": "now", "done": 1}}, r"field status.state is \"paused\", not one of running, "
                                                               r"finished, interrupted"),
    ({"status": {"state": "running", "at": "now", "done": -1}}, r"field status.done is -1, not an integer >= 0"),
])
def test_a_malformed_environment_is_refused_naming_the_field(tmp_path, changes, message):
    folder = _environment(tmp_path, **changes)
    with pytest.raises(ResultsError, match=message):
        load_result_sets([folder])


def _table1(folder, change):
    document = {"schema": "normbench.table1", "schema_version": 1, "seed": 0, "command": "normbench table1",
                "layer_norm": "oracle", "recurrent_held": True,
                "transformations": [{"key": "k", "title": "Weight matrix re-scaling"}],
                "methods": [{"method": "layer", "title": "Layer norm", "description": "d",
                             "cells": [{"key": "k", "measured": "Invariant", "paper": "Invariant", "agrees": True,
                                        "max_change": 0.0, "ratio": 0.1}]}]}
    change(document)
    (folder / "table1.json").write_text(json.dumps(document))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("methods"), r"table1.json: field methods is missing"),
    (lambda d: d["methods"][0]["cells"][0].pop("agrees"), r"field methods\[0\].cells\[0\].agrees is missing"),
    (lambda d: d["methods"][0]["cells"][0].update(ratio="big"), r"field methods\[0\].cells\[0\].ratio is \"big\""),
    (lambda d: d["transformations"].append({"key": "j", "title": "t"}), r"methods\[0\].cells has 1 cells for 2"),
])
def test_a_malformed_table1_is_refused_naming_the_field(tmp_path, change, message):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    _table1(folder, lambda d: None)
    assert "Weight matrix re-scaling" in render_html(load_result_sets([folder]))
    _table1(folder, change)
    with pytest.raises(ResultsError, match=message + ".*Fix: re-run `normbench table1"):
        load_result_sets([folder])


def normbench(*args):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_normbench_report_prints_one_line_for_malformed_input(tmp_path):
    folder = _environment(tmp_path, gpus="none")
    path = _throughput_json(folder, lambda d: '{"rows": ' + "[" * 100000 + "]" * 100000 + "}")
    for source in (folder, path):
        out = normbench("report", str(source), "-o", str(tmp_path / "out.html"))
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert "nested too deeply" in out.stderr
    assert not (tmp_path / "out.html").exists()


# -- item 5: the report never overwrites its inputs ----------------------------------------------


def test_the_report_never_overwrites_its_inputs(tmp_path):
    folder = write_run(tmp_path / "r1", "r1", {"numpy": 0.1})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    for source, out in ((folder, folder / "throughput.json"), (folder, folder / "environment.json"),
                        (folder, folder / "table1.json"), (folder / "throughput.csv", folder / "throughput.csv"),
                        (folder, tmp_path / "r1" / ".." / "r1" / "conformance.csv"), (folder, folder)):
        with pytest.raises(ResultsError, match=r"is one of the report's inputs .*the report never overwrites what it "
                                               r"reads. Fix: give -o a new file, e.g. .*r1/report.html"):
            write_report([source], out)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert write_report([folder], folder / "report.html").exists()


# -- item 12: environment.json written with one message, and the run's status ---------------------


def test_write_environment_into_a_folder_that_cannot_be_written_is_one_message(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultsError, match=r"cannot write .*file/r1/environment.json: .*Fix: "):
        environment.write_environment(tmp_path / "file" / "r1", environment.environment("r1"))

    def read_only(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(environment, "write_atomic", read_only)
    with pytest.raises(ResultsError, match=r"cannot write .*environment.json: Read-only file system. Fix: make the "
                                           r"folder writable, or give --out a writable folder"):
        environment.write_environment(tmp_path / "r2", environment.environment("r2"))


def test_mark_status_keeps_the_rest_and_a_bad_status_is_refused(tmp_path):
    environment.write_environment(tmp_path, environment.environment("r1", ["normbench", "run"]))
    environment.mark_status(tmp_path, "running", total=4)
    environment.mark_status(tmp_path, "interrupted", "KeyboardInterrupt", done=2, total=4)
    env = environment.read_environment(tmp_path)
    assert env["command"] == "normbench run" and env["status"]["state"] == "interrupted"
    assert (env["status"]["reason"], env["status"]["done"], env["status"]["total"]) == ("KeyboardInterrupt", 2, 4)
    environment.write_environment(tmp_path, environment.environment("r1", ["normbench", "run"]))
    assert environment.read_environment(tmp_path)["status"]["state"] == "interrupted"  # a later session keeps it
    with pytest.raises(ResultsError, match=r"field state is \"paused\", not one of running, finished, interrupted"):
        environment.mark_status(tmp_path, "paused")


def _report_of(folder):
    html = render_html(load_result_sets([folder]))
    return html[:html.index("<h2>At a glance")]


def test_the_report_says_first_how_a_run_ended(tmp_path):
    with claim(tmp_path, "r1") as run:  # a run in progress holds its folder
        folder = write_run(run.path, "r1", {"numpy": 0.1})
        environment.mark_status(folder, "running", done=3)
        assert f"The run is still running (pid {os.getpid()}; 3 done at" in _report_of(folder)
    assert "The run never finished: its status still says running (3 done at" in _report_of(folder)
    assert "no process holds its folder: the run&#39;s process ended without finishing (killed?)" in _report_of(folder)
    environment.mark_status(folder, "interrupted", "SIGTERM", done=3, total=10)
    assert "The run was interrupted (SIGTERM) at " in _report_of(folder) and "after 3 of 10" in _report_of(folder)
    environment.mark_status(folder, "finished", done=10, total=10)  # its 4 conformance and 6 throughput rows
    assert "notice" not in _report_of(folder)


def test_a_row_normbench_measures_with_an_infinite_spread_is_written_empty_not_refused(tmp_path):
    row = {**rows()[1], "median_s": 0.0, "rel_spread": float("inf")}  # a coarse timer: median 0, IQR/median inf
    with ResultsWriter(tmp_path, "r1", THROUGHPUT) as writer:
        writer.add(row)
    df = load(tmp_path, THROUGHPUT)
    assert len(df) == 1 and df.rel_spread.isna().all() and df.median_s[0] == 0.0


def test_an_older_folder_with_an_infinite_spread_in_its_csv_still_loads(tmp_path):
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.csv"
    path.write_text(path.read_text().replace(",0.3,", ",inf,", 1))  # what pandas wrote for IQR / a median of 0
    json_path = tmp_path / "throughput.json"
    document = json.loads(json_path.read_text())
    document["rows"][0]["rel_spread"] = None  # and the JSON's null
    json_path.write_text(json.dumps(document))
    for source in (tmp_path / "throughput.csv", tmp_path):  # the same rows in both: the folder loads
        df = load(source, THROUGHPUT)
        assert len(df) == 3 and df.rel_spread.isna().tolist() == [True, False, False]
