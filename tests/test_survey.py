"""``normbench survey``: runs of many environments merged into one result set with the judged findings
(normbench.report.survey), and the report's findings section and matrix across libraries."""

import json
import re
from pathlib import Path

import pytest

from normbench.check import outcomes
from normbench.core import storage
from normbench.core.environment import ENVIRONMENT_FILE, environment
from normbench.core.storage import ResultsError
from normbench.front.cli import main
from normbench.report import survey

HEADER = ",".join(survey.FINDING_FIELDS)
DEFECT = ('liger,Liger-Kernel,0.5.2,layer_norm,float32,defect,"padded lanes counted in the variance","7.1x the bound: '
          'y 0.91 for 0.98",pytest suites --impl=liger -k hidden1000,"float64: var over N, not BLOCK; ops/layer_norm.py"')


def run_folder(root: Path, run_id: str, backends: dict[str, str], outcome: str = "passed",
               finished: bool = True) -> Path:
    """A run folder with one forward test per backend (``backends``: name -> library version)."""
    folder = root / run_id
    rows = [storage.new_row(outcomes.CONFORMANCE, run_id=run_id, backend=name, suite="test_forward.py",
                            test="test_forward", case="float32-rows7-hidden100-uniform9", normalization="layer_norm",
                            nodeid=f"suites/test_forward.py::test_forward[{name}-float32-rows7-hidden100-uniform9]",
                            outcome=outcome) for name in backends]
    storage.write_csv(folder / "conformance.csv", rows, outcomes.CONFORMANCE)
    env = environment(run_id, ["normbench", "run", f"--impl={','.join(backends)}"])
    env["backends"] = {name: {"version": version, "device": "cpu"} for name, version in backends.items()}
    env["status"] = {"state": "finished" if finished else "interrupted", "reason": None if finished else "SIGTERM",
                     "at": env["started"], "done": len(rows), "total": len(rows)}
    (folder / ENVIRONMENT_FILE).write_text(json.dumps(env))
    return folder


def findings_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "findings.in.csv"
    path.write_text("\n".join((HEADER, *lines)) + "\n")
    return path


def test_runs_merge_into_one_matrix_with_the_findings(tmp_path):
    new = run_folder(tmp_path, "liger-new", {"liger": "0.8.5", "numpy": "2.4.6"})
    old = run_folder(tmp_path, "liger-old", {"liger": "0.5.2"}, outcome="xfailed")
    out = tmp_path / "survey-cpu"
    assert main(["survey", "--out", str(out), str(new), str(old), "--findings",
                 str(findings_file(tmp_path, DEFECT.replace("liger,", "liger@0.5.2,", 1)))]) == 0
    df = storage.load(out, outcomes.CONFORMANCE)
    # one backend at two library versions: one column each; a name only one run has stays as it is
    assert sorted(set(df.backend)) == ["liger@0.5.2", "liger@0.8.5", "numpy"]
    assert set(df.run_id) == {"liger-new", "liger-old"}  # each row keeps the run it came from
    env = json.loads((out / ENVIRONMENT_FILE).read_text())
    assert env["run_id"] == "survey-cpu" and env["status"]["state"] == "finished" and env["status"]["done"] == 3
    assert set(env["backends"]) == {"liger@0.5.2", "liger@0.8.5", "numpy"}
    assert [s.split(":")[0] for s in env["sessions"]] == ["liger-new", "liger-old"]
    assert survey.read_findings(out / survey.FINDINGS_FILE)[0]["backend"] == "liger@0.5.2"
    page = (out / survey.FINDINGS_MARKDOWN).read_text()
    assert "| 1 | Liger-Kernel | 0.5.2 | liger@0.5.2 |" in page
    assert "| liger@0.5.2 | 0.5.2 | 0 | 1 | 0 | 1 | 0 | 0 |\n| liger@0.8.5 | 0.8.5 | 0 | 1 | 1 | 0 | 0 | 0 |" in page
    assert "1. Liger-Kernel 0.5.2, liger@0.5.2, layer_norm, float32: float64: var over N, not BLOCK" in page
    html = (out / "report.html").read_text()
    assert 'id="findings">Findings (1)' in html and "padded lanes counted in the variance" in html
    assert "<h3>survey-cpu (2 runs)</h3>" in html
    assert "<th>liger@0.5.2</th><th>liger@0.8.5</th><th>numpy</th>" in html


def test_an_unfinished_run_leaves_the_survey_marked_partial(tmp_path):
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    b = run_folder(tmp_path, "b", {"torch": "2.13.0"}, finished=False)
    _, env = survey.merge([a, b], "s", "normbench survey")
    assert env["status"]["state"] == "interrupted" and "b" in env["status"]["reason"]


def test_the_same_test_twice_is_an_error_but_runs_may_split_the_seeds(tmp_path):
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    b = run_folder(tmp_path, "b", {"numpy": "2.4.6"})
    with pytest.raises(ResultsError, match=r"backend numpy 2.4.6 has the test suites/test_forward.py::test_forward\["
                                           r"numpy-float32-rows7-hidden100-uniform9\] in two of the runs"):
        survey.merge([a, b], "s", "normbench survey")
    df = storage.load(b, outcomes.CONFORMANCE)  # the same backend and version, another seed: one column
    df["nodeid"] = df.nodeid.str.replace("]", "-seed1]")
    storage.write_csv(b / "conformance.csv", storage.records(df), outcomes.CONFORMANCE)
    env = json.loads((b / ENVIRONMENT_FILE).read_text())
    (b / ENVIRONMENT_FILE).write_text(json.dumps({**env, "command": "normbench run --impl=numpy --seed=1..2"}))
    merged, environment = survey.merge([a, b], "s", "normbench survey")
    assert list(merged.backend) == ["numpy", "numpy"] and len(set(merged.nodeid)) == 2
    assert "| numpy | 2.4.6 | 0..2 | 2 | 2 | 0 | 0 | 0 |" in survey.outcomes_markdown(merged, environment)


def test_a_finding_must_name_a_backend_the_survey_ran(tmp_path):
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    with pytest.raises(ResultsError, match="names backend liger, which no run of the survey has"):
        survey.write_survey(tmp_path / "s", [a], [findings_file(tmp_path, DEFECT)], "normbench survey")


@pytest.mark.parametrize(("line", "problem"), [
    (DEFECT.replace(",defect,", ",bug,"), "verdict 'bug'"),
    (DEFECT.replace(",layer_norm,", ",batch_norm,"), "normalization 'batch_norm'"),
    (DEFECT.replace(",0.5.2,", ",,"), "version empty"),
    ("liger,Liger-Kernel", "10 fields expected"),
])
def test_a_bad_finding_is_one_clear_error(tmp_path, line, problem):
    with pytest.raises(ResultsError, match=rf"line 2: {problem}"):
        survey.read_findings(findings_file(tmp_path, line))


def test_a_findings_file_needs_the_header(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("backend,what\nliger,x\n")
    with pytest.raises(ResultsError, match="the header is backend,what. Fix: write .* with the header backend,library"):
        survey.read_findings(path)


def test_findings_sort_defects_first_and_escape_markdown():
    rows = [dict(zip(survey.FINDING_FIELDS, ("b", "B", "1", "rms_norm", "all", v, "a | b", "1x", "cmd", "e")))
            for v in ("harness", "limitation", "defect")]
    ordered = survey.sort_findings(rows)
    assert [r["verdict"] for r in ordered] == ["defect", "limitation", "harness"]
    assert "| a \\| b | 1x | `cmd` |" in survey.findings_markdown(ordered)


def test_the_published_survey_matches_its_findings_page():
    """docs/survey.md holds reports/survey-cpu's findings page exactly, the page is what the published rows and
    findings give, and every finding names a surveyed backend."""
    root = Path(__file__).resolve().parents[1]
    folder = root / "reports" / "survey-cpu"
    if not (folder / survey.FINDINGS_FILE).exists():
        pytest.skip("reports/survey-cpu is not published yet")
    findings = survey.read_findings(folder / survey.FINDINGS_FILE)
    df = storage.load(folder, outcomes.CONFORMANCE)
    env = json.loads((folder / ENVIRONMENT_FILE).read_text())
    page = (folder / survey.FINDINGS_MARKDOWN).read_text()
    assert page == survey.page_markdown(df, env, findings)
    assert page in (root / "docs" / "survey.md").read_text()
    survey.check_findings(findings, set(df.backend))


def published_findings() -> list[dict[str, str]]:
    path = Path(__file__).resolve().parents[1] / "reports" / "survey-cpu" / survey.FINDINGS_FILE
    if not path.exists():
        pytest.skip("reports/survey-cpu is not published yet")
    return survey.read_findings(path)


#: the start of a case id (``float16-rows8-...``, ``bfloat16-paramsfloat32-rows7-...``), ``rms-`` first for RMSNorm
#: (normbench.core.cases)
CASE_ID = re.compile(r"(?<![A-Za-z0-9])(rms-)?(?:float64|float32|float16|bfloat16)-(?:params[a-z0-9]+-)?rows")


def test_every_published_command_selects_its_findings_normalization():
    """A finding's command reproduces it: an RMSNorm finding names RMSNorm case ids (``rms-``), or
    ``--norm=rms_norm`` for ``normbench check``, and a LayerNorm finding names none of them."""
    for row in published_findings():
        command, rms = row["command"], row["normalization"] == "rms_norm"
        ids = CASE_ID.findall(command)
        where = f"{row['backend']} {row['normalization']} {row['dtype']}: {command}"
        if "normbench check" in command:
            assert ("--norm=rms_norm" in command) == rms, where
        elif ids:
            assert all(bool(prefix) == rms for prefix in ids), where


#: mechanisms that occur in several libraries' findings, found by their words: each has one verdict (docs/survey.md,
#: "How a verdict is decided")
MECHANISMS = {
    "eps held as a float32 attribute or scalar in a float64 normalization":
        r"epsilon attribute is a 32-bit float|epsilon is a C\+\+ float attribute|eps as a float32 scalar",
    "float64 computed in float32":
        r"computes? float64 inputs in float32|computes a float64 x in float32|casts? x to float32",
    "half-precision statistics, arithmetic or sums in the input dtype":
        r"in (?:a bfloat16/float16 x's|its|x's) own dtype|in x's half dtype|all arithmetic in float16"
        r"|in the input dtype|dgamma/dbeta buffers of type T|saves mean and rstd in x's half dtype",
}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_one_mechanism_has_one_verdict_in_every_library(mechanism):
    found = [r for r in published_findings() if re.search(MECHANISMS[mechanism], r["what"])]
    assert len({r["library"].split(" ")[0] for r in found}) >= 2, found  # a mechanism of several libraries
    verdicts = {f"{r['backend']} {r['normalization']} {r['dtype']}": r["verdict"] for r in found}
    assert len(set(verdicts.values())) == 1, verdicts


def test_the_merged_rows_are_compressed_and_read_back_by_name_or_folder(tmp_path):
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    out = tmp_path / "s"
    survey.write_survey(out, [a], [], "normbench survey")
    assert sorted(p.name for p in out.iterdir()) == ["conformance.csv.gz", "environment.json", "findings.csv",
                                                     "findings.md"]
    assert len(storage.load(out / "conformance.csv.gz", outcomes.CONFORMANCE)) == 1
    (out / "conformance.csv.gz").write_bytes((out / "conformance.csv.gz").read_bytes()[:20])
    with pytest.raises(ResultsError, match="cannot read .*conformance.csv.gz"):
        storage.load(out, outcomes.CONFORMANCE)


def test_runs_and_findings_may_be_given_by_their_folders(tmp_path):
    runs = tmp_path / "runs"
    run_folder(runs, "b", {"torch": "2.13.0"})
    run_folder(runs, "a", {"numpy": "2.4.6"})
    judged = tmp_path / "judged"
    judged.mkdir()
    (judged / "torch.csv").write_text(HEADER + "\n" + DEFECT.replace("liger,", "torch,", 1) + "\n")
    out = tmp_path / "s"
    assert main(["survey", "--out", str(out), "--runs-in", str(runs), "--findings", str(judged), "--no-report"]) == 0
    assert [s.split(":")[0] for s in json.loads((out / ENVIRONMENT_FILE).read_text())["sessions"]] == ["a", "b"]
    assert len(survey.read_findings(out / survey.FINDINGS_FILE)) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="holds no findings files"):
        survey.findings_files([tmp_path / "empty"])
    with pytest.raises(ResultsError, match="holds no run folders"):
        survey.run_folders_in([judged])


def test_a_survey_never_writes_over_a_run(tmp_path):
    """--out onto a run folder, or one of the survey's own inputs, is refused and leaves them whole; onto an earlier
    survey's folder it republishes; a file or a read-only folder is one error line."""
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    b = run_folder(tmp_path, "b", {"torch": "2.13.0"})
    before = {p.name: p.read_bytes() for p in a.iterdir()}
    with pytest.raises(ResultsError, match="is one of the runs the survey merges"):
        survey.write_survey(a, [a, b], [], "normbench survey")
    with pytest.raises(ResultsError, match=r"holds a run's results \(conformance.csv\)"):
        survey.write_survey(a, [b], [], "normbench survey")
    assert {p.name: p.read_bytes() for p in a.iterdir()} == before
    out = tmp_path / "s"
    survey.write_survey(out, [a, b], [], "normbench survey")
    survey.write_survey(out, [a], [], "normbench survey")  # an earlier survey's folder: republished in place
    assert set(storage.load(out, outcomes.CONFORMANCE).backend) == {"numpy"}
    (tmp_path / "file").write_text("")
    assert main(["survey", "--out", str(tmp_path / "file"), str(a), "--no-report"]) == 2
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        import os

        if os.access(readonly, os.W_OK):  # root writes anyway: nothing to prove here
            return
        with pytest.raises(ResultsError, match="cannot write the survey there"):
            survey.write_survey(readonly, [a], [], "normbench survey")
    finally:
        readonly.chmod(0o700)


def test_the_same_run_given_twice_is_refused_however_it_is_reached(tmp_path):
    """By the same path, another spelling of it or a link to it: merged twice, its rows would count twice."""
    a = run_folder(tmp_path, "a", {"numpy": "2.4.6"})
    out = tmp_path / "s"
    with pytest.raises(ResultsError, match=rf"the run {a} is given twice \({a}\): its rows would be counted twice. "
                                           rf"Fix: give each run once"):
        survey.write_survey(out, [a, a], [], "normbench survey")
    (tmp_path / "link").symlink_to(a)
    for again in (tmp_path / "link", tmp_path / "a" / ".." / "a"):
        with pytest.raises(ResultsError, match=rf"the run {again} and {a} are one folder \({a}\)"):
            survey.write_survey(out, [a, again], [], "normbench survey")
    assert main(["survey", "--out", str(out), str(a), "--runs-in", str(tmp_path), "--no-report"]) == 2
    assert not out.exists()


def test_the_findings_page_lets_no_markup_or_broken_table_through(tmp_path):
    """findings.md is published as Markdown (docs/survey.md): a backend, library, version or finding holding HTML,
    a Markdown link, ``|`` or a line break shows as text, in its own cell."""
    evil = "<script>alert(1)</script>"
    name = f"numpy{evil}|x"
    a = run_folder(tmp_path, "a", {name: f"2.4.6 {evil} | x \x1b]0;owned\x07\x1b[2J"})  # issue 45: a terminal's
    fields = (name, f"lib {evil}", "1|2", "layer_norm", "float32", "defect", f"what {evil} | a\nb & c", f"size {evil}",
              f"cmd {evil} | `x`", f"evidence {evil} | [x](javascript:alert(1))")
    judged = survey.write_findings(tmp_path / "judged.csv", [dict(zip(survey.FINDING_FIELDS, fields))])
    out = tmp_path / "s"
    survey.write_survey(out, [a], [judged], "normbench survey")
    page = (out / survey.FINDINGS_MARKDOWN).read_text()
    command = "`` cmd <script>alert(1)</script> \\| `x` ``"  # a command is code: shown as it is, never HTML
    assert command in page
    text = page.replace(command, "")
    assert "<" not in text and ">" not in text and "\\[x](javascript:" in text  # no tag, no link
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "a b &amp; c" in text
    assert "\x1b" not in page and "\x07" not in page and "\\x1b]0;owned\\x07\\x1b\\[2J" in page  # printed, not run
    tables = [line for line in page.splitlines() if line.startswith("|")]
    cells = [len(re.findall(r"(?<!\\)\|", line)) for line in tables]
    assert cells == [9, 9, 9] + [len(survey.MARKDOWN_COLUMNS) + 2] * 3  # header, rule, the row: none broken
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - the rendered check needs a Markdown renderer
        return
    html = MarkdownIt("commonmark").enable("table").render(page)
    assert "<script" not in html and "<a " not in html and html.count("<tr>") == 4
