"""Results on disk: the schema, incremental writes, round trips, merges, other versions."""

import json
import math

import pandas as pd
import pytest

from normbench.check import outcomes
from normbench.check.outcomes import CONFORMANCE
from normbench.core import storage
from normbench.core.storage import ResultsError, ResultsWriter, load, merge, new_row
from normbench.front.runner import Outcome, outcome_rows
from normbench.perf.throughput import THROUGHPUT


def rows(run_id="r1", n=3):
    out = []
    for i in range(n):
        ok = i != 1
        out.append(new_row(THROUGHPUT, run_id=run_id, time=f"2026-11-01T12:00:0{i}+00:00", host="h", device="cpu",
                           device_name="Xeon", backend="numpy", backend_version="2.4", direction="forward",
                           dtype="float32", param_dtype="float32", rows=2048, hidden=2048 + i, shape=f"2048x{2048 + i}",
                           case_id=f"c{i}", seed=0, byte_model="forward-inference", bytes=33570816 + i, cache="cold",
                           timer="perf_counter_ns", calls_per_sample=1, n=10, median_s=0.1 / 3 + i, q1_s=0.03,
                           q3_s=0.04, iqr_s=0.01, min_s=0.029, max_s=0.05, rel_spread=0.3, wide_spread=ok,
                           gbps=1 / 3 if ok else math.nan, ceiling_gbps=40.123456789, pct_of_ceiling=0.83 if ok else math.nan,
                           fits_in_cache=True, verdict="ok" if ok else "wrong-before",
                           message="" if ok else 'y[0, 1] = "1.5", reference 2.0,\nbound 1e-3; ünïcode'))
    return out


def test_every_column_is_documented_and_a_row_has_them_all():
    row = new_row(THROUGHPUT, backend="numpy")
    assert list(row) == [c.name for c in THROUGHPUT.columns] and row["schema_version"] == THROUGHPUT.version
    assert all(c.doc and c.kind in ("str", "int", "float", "bool") for c in THROUGHPUT.columns)
    with pytest.raises(ValueError, match="not columns of normbench.throughput: speed"):
        new_row(THROUGHPUT, speed=3)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_results_round_trip_through_disk_unchanged(tmp_path, suffix):
    df = storage.frame(rows(), THROUGHPUT)
    csv_path, json_path = storage.save(tmp_path, df, THROUGHPUT)
    again = load(json_path if suffix == ".json" else csv_path, THROUGHPUT)
    pd.testing.assert_frame_equal(again, df)
    assert again.loc[1, "message"] == rows()[1]["message"] and math.isnan(again.loc[1, "gbps"])


def test_rows_are_written_as_they_come_so_an_interrupted_run_keeps_them(tmp_path):
    writer = ResultsWriter(tmp_path, "r1", THROUGHPUT)
    for row in rows()[:2]:
        writer.add(row)
    # a crash here loses nothing already measured: the CSV journal holds both rows, the folder reads them
    pd.testing.assert_frame_equal(load(tmp_path / "throughput.csv", THROUGHPUT), storage.frame(rows()[:2], THROUGHPUT))
    pd.testing.assert_frame_equal(load(tmp_path, THROUGHPUT), storage.frame(rows()[:2], THROUGHPUT))
    writer.close()  # and the JSON snapshot is complete once the writer is closed
    pd.testing.assert_frame_equal(load(tmp_path / "throughput.json", THROUGHPUT), storage.frame(rows()[:2], THROUGHPUT))
    with ResultsWriter(tmp_path, "r1", THROUGHPUT) as again:  # a second writer of the same run appends
        again.add(rows()[2])
    pd.testing.assert_frame_equal(load(tmp_path, THROUGHPUT), storage.frame(rows(), THROUGHPUT))
    pd.testing.assert_frame_equal(load(tmp_path / "throughput.json", THROUGHPUT), storage.frame(rows(), THROUGHPUT))


def test_runs_from_several_machines_merge(tmp_path):
    storage.save(tmp_path / "a", storage.frame(rows("a"), THROUGHPUT), THROUGHPUT)
    storage.save(tmp_path / "b", storage.frame(rows("b"), THROUGHPUT), THROUGHPUT)
    merged = merge([tmp_path / "a", tmp_path / "b" / "throughput.csv", storage.frame(rows("a"), THROUGHPUT)], THROUGHPUT)
    assert len(merged) == 6 and sorted(set(merged.run_id)) == ["a", "b"]  # the repeated frame is a duplicate


def _json_with_version(tmp_path, version):
    storage.save(tmp_path, storage.frame(rows(), THROUGHPUT), THROUGHPUT)
    path = tmp_path / "throughput.json"
    doc = json.loads(path.read_text())
    doc["schema_version"] = version
    for row in doc["rows"]:
        row["schema_version"] = version
    path.write_text(json.dumps(doc))
    return path


def test_a_newer_schema_version_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ResultsError, match="schema version 3, newer than this normbench reads .2.. Fix: upgrade"):
        load(_json_with_version(tmp_path, 3), THROUGHPUT)


def test_an_older_version_is_migrated_or_refused(tmp_path, monkeypatch):
    path = _json_with_version(tmp_path, 0)
    with pytest.raises(ResultsError, match="schema version 0, which this normbench cannot migrate to version 2"):
        load(path, THROUGHPUT)
    monkeypatch.setitem(THROUGHPUT.migrations, 0, lambda df: df.assign(host="migrated"))
    assert set(load(path, THROUGHPUT).host) == {"migrated"}


def test_files_that_are_not_normbench_results_say_so(tmp_path):
    (tmp_path / "other.json").write_text('{"schema": "something.else", "rows": []}')
    with pytest.raises(ResultsError, match="is not a normbench.throughput results file .its schema is 'something.else'"):
        load(tmp_path / "other.json", THROUGHPUT)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ResultsError, match="has no schema_version column"):
        load(tmp_path / "other.csv", THROUGHPUT)
    with pytest.raises(ResultsError, match="no results at"):
        load(tmp_path / "missing", THROUGHPUT)


def test_conformance_outcomes_are_saved_per_backend_test_and_case(tmp_path):
    outcomes = [Outcome("suites/test_forward.py::test_forward[mutant-eps-fixed-float32-rows5-hidden1-offset3]",
                        "mutant-eps-fixed", "test_forward", "failed", "y[0, 0] = 1 > bound", "float32-rows5-hidden1-offset3"),
                Outcome("suites/test_forward.py::test_forward[numpy-float16-rows5-hidden1-offset3]", "numpy",
                        "test_forward", "skipped", "no float16", "float16-rows5-hidden1-offset3")]
    df = storage.frame(outcome_rows(outcomes, "r1"), CONFORMANCE)
    storage.save(tmp_path, df, CONFORMANCE)
    again = load(tmp_path, CONFORMANCE)
    pd.testing.assert_frame_equal(again, df)
    assert again.loc[0, ["backend", "suite", "test", "case", "outcome"]].tolist() == [
        "mutant-eps-fixed", "test_forward.py", "test_forward", "float32-rows5-hidden1-offset3", "failed"]


@pytest.mark.parametrize("columns", [THROUGHPUT.columns, outcomes.CONFORMANCE_COLUMNS])
def test_the_schema_tables_in_reports_readme_are_current(columns):
    from tests.plugins import ROOT

    readme = (ROOT / "reports" / "README.md").read_text()
    for c in columns:
        assert f"| `{c.name}` | {c.kind} | {c.doc} |" in readme, f"reports/README.md: update the row of {c.name}"
