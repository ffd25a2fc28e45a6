"""Properties beyond tolerance (issue 15, item 3): determinism and batch invariance, per backend.

* A batch-variant kernel (one row alone rounded one ulp apart: within every bound) passes by
  default, is recorded as not batch-invariant, and fails ``--normbench-require=batch-invariant``
  with a message naming the property, the row, the elements and the typical cause.
* The nondeterministic mutants fail by default (determinism is required, as it always was) and
  pass, recorded as nondeterministic, with ``--normbench-require=none``.
* The NumPy reference is deterministic and batch-invariant.
* The option's parser refuses a bad value with one message naming the valid ones.
* The conformance results schema (version 2) round-trips the properties and reads version 1 files.
* The report shows them per backend and dtype, and the terminal summary one line per violation.

Each suite runs in this process (``normbench.front.runner.run_pytest``, no xdist) on a few cases.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re

import numpy as np
import pytest

from normbench import get_registry
from normbench.check import conformance, measurement, outcomes
from normbench.core import cases, storage
from normbench.core.registry import Selection
from normbench.front import options
from normbench.front.runner import outcome_rows, run_pytest
from normbench.report.render import render_html
from normbench.report.sources import load_result_sets
from normbench.suites import DIRECTORY as SUITES
from tests.mutants import NonDeterministic, NonDeterministicBackward
from tests.property_mutants import BatchVariant

#: the isolation cases, one forward case the forward mutant is caught on, one backward case
SELECT = ("test_rows_independent or (test_forward and float32-rows8-hidden1000-normal) "
          "or (test_backward and float32-rows7-hidden100-uniform9)")
BACKENDS = ("mutant-batch-variant", "mutant-nondeterministic", "mutant-nondeterministic-backward", "numpy")


def _run(require: str | None) -> tuple[int, list, str]:
    backends = [BatchVariant(), NonDeterministic(), NonDeterministicBackward(), get_registry().create("numpy")]
    args = [str(SUITES / "test_forward.py"), str(SUITES / "test_backward.py"), "-p", "no:xdist", "-p",
            "no:cacheprovider", "-q", "-k", SELECT, f"--normbench-impl={','.join(BACKENDS)}"]
    args += [f"--normbench-require={require}"] if require is not None else []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code, outcomes = run_pytest(args, Selection(backends))
    return code, outcomes, out.getvalue()


@pytest.fixture(scope="module")
def runs() -> dict:
    """The selected tests under the default requirement, none, and batch-invariant."""
    return {require: _run(require) for require in (None, "none", "batch-invariant")}


def _of(outcomes, backend, test):
    """The outcomes of ``backend`` on ``test``, less the cases it cannot run (its dtypes)."""
    return [o for o in outcomes if o.backend == backend and o.test == test and o.outcome != "skipped"]


def test_batch_variant_kernel_passes_by_default_and_is_recorded(runs):
    code, outcomes, out = runs[None]
    isolation = _of(outcomes, "mutant-batch-variant", "test_rows_independent")
    assert isolation and all(o.outcome == "passed" for o in _of(outcomes, "mutant-batch-variant", "test_forward")
                             + isolation)
    assert {o.property_verdict("batch-invariant") for o in isolation if o.outcome == "passed"} == {"no"}
    row = outcome_rows(isolation, "r")[0]
    assert row["batch_invariant"] == "no" and row["deterministic"] == ""
    assert row["property_notes"].startswith("batch-invariant: row 0 computed alone differs from the batch's row 0: ")
    line = next(x for x in out.splitlines() if x.startswith("mutant-batch-variant: not batch-invariant"))
    assert "in 2 of 2 tests measuring it (reported, not required: --normbench-require=batch-invariant" in line
    assert "normbench properties violated" in out


def test_batch_variant_kernel_fails_when_batch_invariance_is_required(runs):
    code, outcomes, out = runs["batch-invariant"]
    failed = [o for o in _of(outcomes, "mutant-batch-variant", "test_rows_independent") if o.outcome == "failed"]
    assert code == 1 and len(failed) == 2
    message = failed[0].message
    for said in ("required property batch-invariant violated", "row 0 computed alone differs from the batch's row 0",
                 "elements differ", "typical cause:", "chosen by the batch size"):
        assert said in message, message
    assert all(o.outcome == "passed" for o in _of(outcomes, "mutant-batch-variant", "test_forward"))
    # batch-invariant implies deterministic: the nondeterministic mutants still fail
    assert any(o.outcome == "failed" for o in _of(outcomes, "mutant-nondeterministic", "test_forward"))


@pytest.mark.parametrize("mutant, test, output", [("mutant-nondeterministic", "test_forward", "y"),
                                                  ("mutant-nondeterministic-backward", "test_backward", "dweight")])
def test_nondeterministic_mutants_fail_by_default_and_are_recorded_under_none(runs, mutant, test, output):
    _, outcomes, _ = runs[None]
    failed = [o for o in _of(outcomes, mutant, test) if o.outcome == "failed"]
    assert failed and "required property deterministic violated" in failed[0].message
    assert f"the same input twice gave a different {output}" in failed[0].message
    assert "atomics" in failed[0].message and failed[0].property_verdict("deterministic") == "no"
    code, outcomes, out = runs["none"]
    again = _of(outcomes, mutant, test)
    assert not [o for o in again if o.outcome == "failed"]
    recorded = {o.nodeid: o.property_verdict("deterministic") for o in again}
    assert all(recorded[o.nodeid] == "no" for o in failed)
    assert f"{mutant}: not deterministic in" in out and "--normbench-require=deterministic makes it a failure" in out


def test_numpy_reference_is_deterministic_and_batch_invariant(runs):
    _, outcomes, out = runs["batch-invariant"]
    mine = [o for o in outcomes if o.backend == "numpy" and o.outcome != "skipped"]
    assert mine and all(o.outcome == "passed" for o in mine)
    assert {o.property_verdict("deterministic") for o in mine if o.test in ("test_forward", "test_backward")} == {"yes"}
    assert {o.property_verdict("batch-invariant") for o in mine if o.test == "test_rows_independent"} == {"yes"}
    assert "numpy: not" not in out


def test_check_functions_report_to_the_properties_they_are_given():
    numpy = get_registry().create("numpy")
    case = next(c for c in cases.FORWARD_CASES if c.id == "float32-rows65-hidden33-offset3")
    props = conformance.Properties(required=conformance.PROPERTIES, sink=[])
    conformance.check_rows_independent(numpy, cases.make_inputs(case, 0), props)
    conformance.check_forward(numpy, cases.make_inputs(case, 0), props)
    assert props.measured == {"batch-invariant": "yes", "deterministic": "yes"}
    assert measurement.read(props.sink).properties == {"batch-invariant": "yes", "deterministic": "yes"}
    recorded = conformance.Properties(required=())
    conformance.check_rows_independent(BatchVariant(), cases.make_inputs(case, 0), recorded)
    assert recorded.measured["batch-invariant"].startswith("no: row 0 computed alone differs")
    with pytest.raises(conformance.ConformanceError, match="required property batch-invariant violated"):
        conformance.check_rows_independent(BatchVariant(), cases.make_inputs(case, 0),
                                           conformance.Properties(required=(conformance.BATCH_INVARIANT,)))


def test_nan_payloads_do_not_count_against_batch_invariance():
    quiet, other = np.float32([np.nan, 1]), np.float32([np.nan, 1])
    other.view(np.uint32)[0] |= 1  # another NaN payload
    assert conformance.bit_differences(quiet, other, nan_equal=True) == ""
    assert conformance.bit_differences(quiet, other).startswith("1 of 2 elements differ (1 bit)")


@pytest.mark.parametrize("value, said", [
    ("bitwise", "Unknown property 'bitwise'; valid properties: deterministic, batch-invariant, or none"),
    ("", "Give one or more properties separated by commas"),
    ("none,deterministic", "'none' cannot be combined with properties"),
])
def test_the_option_refuses_bad_values_with_one_message(value, said, capsys):
    with pytest.raises(argparse.ArgumentTypeError, match=f"Could not parse value: '{value}'. {said}"):
        options.parse_require(value)
    from normbench.front.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["test", f"--require={value}", "--impl=numpy"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and said in err and err.count("\n") <= 3, err


def test_the_option_parses_its_values():
    assert options.parse_require("deterministic") == ("deterministic",)
    assert options.parse_require("Batch-Invariant,deterministic") == ("deterministic", "batch-invariant")
    assert options.parse_require("none") == () and options.format_require(()) == "none"


def _v2_rows() -> list[dict]:
    return [storage.new_row(outcomes.CONFORMANCE, run_id="r", backend="torch", suite="test_forward.py",
                            test="test_rows_independent", case="float32-rows65-hidden33-offset3", outcome="passed",
                            nodeid="suites/test_forward.py::test_rows_independent[torch-float32-rows65-hidden33-offset3]",
                            batch_invariant="no", property_notes="batch-invariant: row 0 computed alone differs"),
            storage.new_row(outcomes.CONFORMANCE, run_id="r", backend="torch", suite="test_forward.py",
                            test="test_forward", case="float32-rows8-hidden1000-normal", outcome="passed",
                            nodeid="suites/test_forward.py::test_forward[torch-float32-rows8-hidden1000-normal]",
                            deterministic="yes")]


def test_the_results_schema_round_trips_the_properties(tmp_path):
    df = storage.frame(_v2_rows(), outcomes.CONFORMANCE)
    storage.save(tmp_path, df, outcomes.CONFORMANCE)
    assert json.loads((tmp_path / "conformance.json").read_text())["schema_version"] == outcomes.CONFORMANCE_VERSION
    for path in (tmp_path, tmp_path / "conformance.csv", tmp_path / "conformance.json"):
        again = storage.load(path, outcomes.CONFORMANCE)
        assert again[["deterministic", "batch_invariant", "property_notes"]].to_dict("records") == [
            {"deterministic": "", "batch_invariant": "no", "property_notes": "batch-invariant: row 0 computed alone differs"},
            {"deterministic": "yes", "batch_invariant": "", "property_notes": ""}]
    bad = _v2_rows()
    bad[0]["batch_invariant"] = "maybe"
    with pytest.raises(storage.ResultsError, match="field batch_invariant is \"maybe\", not one of yes, no, empty"):
        storage.save(tmp_path / "bad", storage.frame(bad, outcomes.CONFORMANCE), outcomes.CONFORMANCE)


def test_version_1_conformance_files_load_with_properties_not_measured(tmp_path):
    v1 = [c.name for c in outcomes.CONFORMANCE_COLUMNS if c.name not in ("deterministic", "batch_invariant",
                                                                         "property_notes")]
    rows = [{**{k: v for k, v in r.items() if k in v1}, "schema_version": 1} for r in _v2_rows()]
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "conformance.json").write_text(json.dumps(
        {"schema": outcomes.CONFORMANCE.name, "schema_version": 1, "rows": rows}))
    (tmp_path / "csv").mkdir()
    lines = [",".join(v1)] + [",".join(str(r[c]) for c in v1) for r in rows]
    (tmp_path / "csv" / "conformance.csv").write_text("\n".join(lines) + "\n")
    for folder in ("json", "csv"):
        df = storage.load(tmp_path / folder, outcomes.CONFORMANCE)
        assert list(df.columns) == [c.name for c in outcomes.CONFORMANCE_COLUMNS]
        assert set(df.schema_version) == {outcomes.CONFORMANCE_VERSION} and set(df.deterministic) == {""}
        assert set(df.message) == {""} and set(df.normalization) == {"layer_norm"}
        assert list(df.outcome) == ["passed", "passed"]
    html = render_html(load_result_sets([tmp_path / "json"]))
    assert "Properties beyond tolerance" in html and "Not measured: this run's conformance results" in html


def test_the_report_shows_the_properties_per_backend_and_dtype(runs, tmp_path):
    _, found, _ = runs[None]
    storage.save(tmp_path, storage.frame(outcome_rows(found, "r"), outcomes.CONFORMANCE), outcomes.CONFORMANCE)
    html = render_html(load_result_sets([tmp_path]))
    table = html[html.index('<table class="properties">'):]
    table = table[:table.index("</table>")]
    rows = {tuple(re.match(r"(.*?)</td><td>(.*?)</td>", r).groups()): r for r in table.split("<tr><td>")[1:]}
    variant = rows[("mutant-batch-variant", "float32")]
    assert "no in 2 of 2 tests" in variant and "float32-rows65-hidden33-offset3: row 0 computed alone differs" in variant
    assert "yes in" in variant  # its forward determinism
    assert rows[("numpy", "float32")].count("yes in") == 3  # forward, backward, batch invariance
    assert "not measured" in rows[("numpy", "float16")] and "yes in 1 of 1 tests" in rows[("numpy", "float16")]
    nondet = rows[("mutant-nondeterministic-backward", "float32")]
    assert "no in" in nondet and "a different dweight" in nondet
