"""The survey: many libraries' conformance runs merged into one result set, with the findings judged from them.

Real libraries cannot all share one process: Keras picks its backend once per process, an old and a new
Liger-Kernel cannot be installed side by side, TensorFlow and PaddlePaddle pin their own NumPy. So each
environment runs ``normbench run --suites=conformance`` on its backends into a run folder of its own, and
``normbench survey`` merges those folders into one (``reports/survey-cpu``):

* ``conformance.csv.gz``: every run's rows as they were (each keeps its ``run_id``), compressed (some 10^5
  rows). A backend name that runs hold at different library versions (``liger`` 0.5.3 and 0.8.5) becomes
  ``name@version``, so the conformance matrix has one column per library version. Runs may split one
  backend's seeds (a slow backend run seed by seed); the same test twice is an error, and so is the same run
  folder twice (by two paths, or through a link), and a run whose rows disagree with its own environment.json
  (:func:`check_run`: rows repeated, contradictory or missing).
* ``environment.json``: one environment for the whole survey (normbench's ``environment.json`` schema): every
  backend with its library version and device, the union of the libraries (a library at two versions lists
  both), each run's command in ``sessions``, and the status ``finished`` only when every run finished.
* ``findings.csv``: the judged findings (:data:`FINDING_FIELDS`, one row per library, normalization, dtype and
  class of failure, with its verdict: :data:`VERDICTS`), from the findings files given, checked against the
  runs (a finding names a backend the survey ran).
* ``findings.md``: the findings as a Markdown table (docs/survey.md holds the same table), every value from a run
  or a findings file escaped (:func:`md`: no HTML of its own reaches the page), and ``report.html``, which shows
  the findings first, before any result (``normbench.report.render``).

A findings file is CSV with :data:`FINDING_FIELDS` as its header, written by whoever judged the failures: each
row says what is wrong in words a library maintainer can act on, how large (the ratio to normbench's bound and
the plain numbers), the one command that reproduces it, and the evidence (the case recomputed in float64, the
library source or documentation that explains it).
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normbench.check.outcomes import CONFORMANCE, FAILING, NOT_RUN
from normbench.core import operations, storage
from normbench.core.environment import ENVIRONMENT, ENVIRONMENT_FIELDS, ENVIRONMENT_FILE, now_utc, read_environment
from normbench.core.files import write_atomic
from normbench.core.safe_text import escaped
from normbench.core.storage import ResultsError, check_document, distinct_rows
from normbench.report import bundle

FINDINGS_FILE = "findings.csv"
#: the merged rows, compressed (normbench.core.storage reads it)
CONFORMANCE_FILE = "conformance.csv.gz"
FINDINGS_MARKDOWN = "findings.md"
#: a finding's fields, in the order of the CSV header and the Markdown table
FINDING_FIELDS = ("backend", "library", "version", "normalization", "dtype", "verdict", "what", "size", "command",
                  "evidence")
#: a finding's verdict, and what it means
VERDICTS = {
    "defect": "a real defect of the library, shown independently of normbench (float64 recomputation, source)",
    "limitation": "documented behaviour of the library; the suites skip it, or declare it, with the reason",
    "harness": "normbench cried wolf: fixed in normbench, and the case added to the never-cry-wolf tests",
}
#: the Markdown table's columns: (title, field); the evidence is long and stays in findings.csv and docs
MARKDOWN_COLUMNS = (("library", "library"), ("version", "version"), ("backend", "backend"),
                    ("normalization", "normalization"), ("dtype", "dtype"), ("verdict", "verdict"),
                    ("what is wrong", "what"), ("how large", "size"), ("reproduce", "command"))


def read_findings(path: str | os.PathLike) -> list[dict[str, str]]:
    """A findings file's rows, each field checked: one ResultsError naming the file, the row and the field."""
    path = Path(path)
    fix = f"write {path} as CSV with the header {','.join(FINDING_FIELDS)} (normbench.report.survey)"
    try:
        text = storage.read_bytes(path, storage.MAX_DOCUMENT, fix).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"cannot read the findings file {path}: {exc}. Fix: {fix}") from None
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != FINDING_FIELDS:
        header = storage.clip(",".join(reader.fieldnames or ())) or "missing"
        raise ResultsError(f"{path}: the header is {header}. Fix: {fix}")
    rows = []
    for line, row in enumerate(reader, start=2):
        where = f"{path}, line {line}"
        if None in row or any(v is None for v in row.values()):
            raise ResultsError(f"{where}: {len(FINDING_FIELDS)} fields expected. Fix: quote fields that hold commas")
        empty = [f for f in FINDING_FIELDS if not row[f].strip()]
        if empty:
            raise ResultsError(f"{where}: {', '.join(empty)} empty. Fix: every field of a finding says something")
        if row["verdict"] not in VERDICTS:
            raise ResultsError(f"{where}: verdict {storage.quoted(row['verdict'])}. Fix: one of {', '.join(VERDICTS)}")
        if row["normalization"] not in operations.NAMES:
            raise ResultsError(f"{where}: normalization {storage.quoted(row['normalization'])}. Fix: one of "
                               f"{', '.join(operations.NAMES)}")
        rows.append({f: row[f].strip() for f in FINDING_FIELDS})
    return rows


def _versions(environment: dict[str, Any]) -> dict[str, str]:
    return {name: (info.get("version") or "") for name, info in environment.get("backends", {}).items()}


def _labels(runs: list[tuple[Path, Any, dict[str, Any]]]) -> list[dict[str, str]]:
    """Per run, backend name -> its label in the survey: the name, or ``name@version`` where runs hold it at
    several library versions. Runs may split one backend's seeds between them; a test two runs both hold, for
    the same backend and version, is an error."""
    seen: dict[str, set[str]] = {}
    tests: dict[tuple[str, str], Path] = {}
    for folder, df, env in runs:
        versions = _versions(env)
        for name, group in df.groupby("backend"):
            version = versions.get(name, "")
            seen.setdefault(name, set()).add(version)
            for nodeid in group.nodeid:
                first = tests.setdefault((f"{name} {version}", nodeid), folder)
                if first != folder:
                    which = storage.clip(f"{name} {version or '(no version)'}")
                    raise ResultsError(f"backend {which} has the test {storage.clip(nodeid)} in two of the runs, "
                                       f"{first} and {folder}. Fix: give each test of a backend and library version "
                                       f"once (split a backend's runs by seed)")
    shared = {name for name, versions in seen.items() if len(versions) > 1}
    return [{name: f"{name}@{_versions(env).get(name, '')}" if name in shared else name for name in set(df.backend)}
            for _, df, env in runs]


def merge(folders: Sequence[str | os.PathLike], survey_id: str, command: str) -> tuple[Any, dict[str, Any]]:
    """The runs in ``folders`` as one conformance frame and one environment (the module doc says how)."""
    if not folders:
        raise ResultsError("no runs given. Fix: name the run folders the survey merges (normbench run --out ...)")
    folders = list(map(Path, folders))
    _once(folders)
    runs = []
    for folder in folders:
        if os.path.lexists(folder / bundle.MANIFEST):  # a bundle's files are held to its manifest, as the report does
            bundle.check_manifest(folder, only=(*storage.RESULT_FILES, ENVIRONMENT_FILE))
        df = storage.load(folder, CONFORMANCE)
        if df.empty:
            raise ResultsError(f"{folder} holds no conformance rows. Fix: run `normbench run --suites=conformance` "
                               f"into it first")
        env = read_environment(folder)
        _, problems = check_run({"conformance": df}, env)
        if problems:
            raise ResultsError(f"{folder}: {'; '.join(problems)}. Fix: re-run it, or give the survey the runs whose "
                               f"results are whole")
        runs.append((folder, df, env))
    labels = _labels(runs)
    frames, environment = [], {}
    backends: dict[str, Any] = {}
    libraries: dict[str, list[str]] = {}
    notes: dict[str, dict[str, str]] = {"skipped_backends": {}, "not_timed": {}, "runtime_notes": {}}
    sessions, done, total, unfinished = [], 0, 0, []
    for (folder, df, env), label in zip(runs, labels):
        frames.append(df.assign(backend=[label[b] for b in df.backend]))
        environment = environment or dict(env)
        for name, info in env.get("backends", {}).items():
            backends[label.get(name, name)] = info
        for lib, version in env.get("libraries", {}).items():
            libraries.setdefault(lib, [])
            if version not in libraries[lib]:
                libraries[lib].append(version)
        for key in notes:
            notes[key].update({label.get(k, k): v for k, v in (env.get(key) or {}).items()})
        sessions.append(f"{env.get('run_id', folder.name)}: {env.get('command', '')}")
        status = env.get("status") or {}
        done += int(status.get("done") or 0)
        total += int(status.get("total") or status.get("done") or 0)
        if status.get("state") != "finished":
            unfinished.append(env.get("run_id", folder.name))
    import pandas as pd

    environment.update({
        "run_id": survey_id, "command": command, "started": min(e.get("started", "") for _, _, e in runs),
        "backends": backends, "libraries": {k: ", ".join(v) for k, v in libraries.items()}, "ceilings": {},
        "sessions": sessions, **notes,
        "status": {"state": "interrupted" if unfinished else "finished",
                   "reason": f"runs not finished: {', '.join(unfinished)}" if unfinished else None,
                   "at": now_utc(), "done": done, "total": total},
    })
    environment.setdefault("schema", ENVIRONMENT)
    check_document(environment, ENVIRONMENT_FIELDS, "the survey's environment", "this is a normbench bug")
    return pd.concat(frames, ignore_index=True), environment


def _once(folders: Sequence[Path]) -> None:
    """Each run folder once: the same folder twice (by two paths, or through a link) would count its rows twice."""
    seen: dict[str, Path] = {}
    for folder in folders:
        real = os.path.realpath(folder)
        if real in seen:
            same = "is given twice" if seen[real] == folder else f"and {seen[real]} are one folder"
            raise ResultsError(f"the run {folder} {same} ({real}): its rows would be counted twice. Fix: give each run "
                               f"once")
        seen[real] = folder


#: what identifies one test's row in each of a run's results (by the file's stem), and the column holding its result
ROW_KEYS = {"conformance": (("run_id", "backend", "nodeid"), "outcome"),
            "throughput": (("run_id", "backend", "normalization", "direction", "dtype", "rows", "hidden", "case_id"),
                           "verdict")}


def check_run(results: dict[str, Any], environment: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A run's results (stem -> frame: ``conformance``, ``throughput``) checked against each other and against its
    ``environment.json``: each test once (:func:`normbench.core.storage.distinct_rows`: repeated rows read once,
    rows that disagree shown as one error), then as many rows as the environment says tests finished. The results
    as they may be shown, and what is wrong, in words naming the rows. The report reads every run folder through it
    (problems become the set's notes); the survey refuses a run with any problem."""
    clean, problems = {}, []
    for name, df in results.items():
        key, result = ROW_KEYS[name]
        clean[name], found = distinct_rows(df, key, result, f"the {name} results")
        problems += found
    return clean, problems + _counted(clean, environment, written=results)


def _counted(results: dict[str, Any], environment: dict[str, Any], written: dict[str, Any]) -> list[str]:
    """Rows against the count ``normbench run`` recorded at its end (status ``done`` of ``total``). Every finished
    conformance test writes a row, and every throughput case measured; a throughput case skipped (a backend not timed
    here, a case its limits skip) writes none, yet counts as finished. So more rows than finished tests is always
    wrong, and fewer is certain only for a run of the conformance suites alone (its command says so). A run that
    recorded the rows it wrote into each file (``status.rows``) is held to them exactly (``written``: the files'
    rows as read, repeats included)."""
    status = environment.get("status") or {}
    if status.get("state") not in ("finished", "interrupted"):
        return []  # still running, or killed: the run state says so
    if isinstance(status.get("rows"), dict):  # the rows the run wrote, file by file: exact
        problems = []
        for name, wrote in sorted(status["rows"].items()):
            held = 0 if written.get(name) is None else len(written[name])
            if held < wrote:
                problems.append(f"{ENVIRONMENT_FILE} says the run wrote {wrote} {name} rows, but its files hold "
                                f"{held}: {wrote - held} rows are missing (lost, or removed from its files); "
                                f"only the {held} there are shown")
            elif held > wrote:
                problems.append(f"the {name} results hold {held} rows, but {ENVIRONMENT_FILE} says the run wrote "
                                f"{wrote}: {held - wrote} rows the run did not write (added to its files, "
                                f"or another run's)")
        return problems
    if status.get("total") is None:
        return []  # stopped before it counted
    done, conformance, throughput = status["done"], results.get("conformance"), results.get("throughput")
    rows = ((0 if conformance is None else int((conformance.outcome != NOT_RUN).sum()))
            + (0 if throughput is None else len(throughput)))
    if rows > done:
        return [f"the results hold rows of {rows} finished tests, but {ENVIRONMENT_FILE} says {done} finished: "
                f"{rows - done} rows the run did not write (added to its files, or another run's)"]
    if rows < done and _conformance_only(environment.get("command", "")):
        return [f"{ENVIRONMENT_FILE} says {done} tests finished, but the results hold rows of {rows}: {done - rows} "
                f"rows are missing (lost, or removed from its files); only the {rows} there are shown"]
    return []


def _conformance_only(command: str) -> bool:
    """Whether a recorded command is ``normbench run`` of the conformance suites alone (``--suites=conformance``;
    argparse takes a prefix of an option's name, and the last of an option given twice).

    >>> _conformance_only("normbench run --impl=numpy --suite conformance"), _conformance_only("normbench run")
    (True, False)
    """
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    suites = None
    for i, word in enumerate(words[2:] if words[1:2] == ["run"] else [], start=2):
        name, equals, value = word.partition("=")
        if len(name) > 3 and "--suites".startswith(name):
            suites = value if equals else (words[i + 1] if i + 1 < len(words) else "")
    return suites is not None and {s.strip() for s in suites.split(",") if s.strip()} == {"conformance"}


def check_findings(findings: list[dict[str, str]], backends: set[str]) -> None:
    """Every finding names a backend (or ``name@version`` label) the survey ran."""
    for row in findings:
        if row["backend"] not in backends:
            raise ResultsError(f"the finding {storage.quoted(row['what'])} names backend {storage.clip(row['backend'])}, "
                               f"which no run of the survey has (it has {', '.join(sorted(backends))}). Fix: run it, "
                               f"or correct the name")


def md(value: Any) -> str:
    """Text from a run or a findings file, for a Markdown page rendered as HTML (findings.md, docs/survey.md): its
    ``&``, ``<`` and ``>`` as HTML entities, so no tag, comment or autolink of its own reaches the page; ``[``
    escaped, so it makes no link (``[x](javascript:...)``); ``|`` escaped, so it stays in its table cell; line breaks
    as spaces, so it stays on its line; control characters (a terminal's escape sequences, ``\\r``) written as
    escapes (:func:`normbench.core.safe_text.escaped`), so the page is safe to print.

    >>> print(md("<script>alert(1)</script> | [a](javascript:b) & c"))
    &lt;script&gt;alert(1)&lt;/script&gt; \\| \\[a](javascript:b) &amp; c
    """
    text = html.escape(escaped(value), quote=False).replace("[", "\\[").replace("|", "\\|")
    return text.replace("\n", " ")


def md_code(value: Any) -> str:
    """Text as a Markdown code span: shown as it is (a code span is never HTML, so nothing is escaped as entities),
    fenced by more backticks than it holds in a row, ``|`` escaped and line breaks as spaces, as :func:`md`.

    >>> print(md_code("pytest -k 'a|b'"), md_code("a`b"))
    `pytest -k 'a\\|b'` `` a`b ``
    """
    text = escaped(value).replace("|", "\\|").replace("\n", " ")
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{fence}{text}{fence}" if fence == "`" else f"{fence} {text} {fence}"


def findings_markdown(findings: list[dict[str, str]]) -> str:
    """The findings as Markdown: a table of :data:`MARKDOWN_COLUMNS`, numbered, then each finding's evidence
    under its number (every value escaped, :func:`md`; commands as code, :func:`md_code`)."""
    def cell(field: str, value: str) -> str:
        return md_code(value) if field == "command" else md(value)

    lines = ["| # | " + " | ".join(title for title, _ in MARKDOWN_COLUMNS) + " |",
             "|---|" + "---|" * len(MARKDOWN_COLUMNS)]
    lines += [f"| {i} | " + " | ".join(cell(f, row[f]) for _, f in MARKDOWN_COLUMNS) + " |"
              for i, row in enumerate(findings, start=1)]
    if findings:
        lines += ["", "Evidence, by number:", ""]
        lines += [f"{i}. {md(row['library'])} {md(row['version'])}, {md(row['backend'])}, {md(row['normalization'])}, "
                  f"{md(row['dtype'])}: {md(row['evidence'])}" for i, row in enumerate(findings, start=1)]
    return "\n".join(lines) + "\n"


def outcomes_markdown(df: Any, environment: dict[str, Any]) -> str:
    """Per backend of the merged rows: its library version, the seeds its runs used, and how many tests passed,
    were known deviations (declared findings), were skipped (the library's documented limits, or what it does
    not implement) and failed, as a Markdown table."""
    versions, seeds = _versions(environment), _seeds(df, environment)
    lines = ["| backend | library version | seeds | tests | passed | known deviations | skipped | failed |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, group in df.groupby("backend", sort=True):
        counts = group.outcome.value_counts()
        failed = int(sum(counts.get(o, 0) for o in FAILING))
        skipped = int(counts.get("skipped", 0) + counts.get(NOT_RUN, 0))
        lines.append(f"| {md(backend)} | {md(versions.get(backend, ''))} | {seeds[backend]} | {len(group)} | "
                     f"{int(counts.get('passed', 0))} | {int(counts.get('xfailed', 0))} | {skipped} | {failed} |")
    return "\n".join(lines) + "\n"


def page_markdown(df: Any, environment: dict[str, Any], findings: list[dict[str, str]]) -> str:
    """``findings.md``: the outcomes per backend, then the findings (docs/survey.md holds it whole)."""
    return (f"Outcomes per backend (`normbench survey`):\n\n{outcomes_markdown(df, environment)}\n"
            f"Findings:\n\n{findings_markdown(findings)}")


def _seeds(df: Any, environment: dict[str, Any]) -> dict[str, str]:
    """Per backend, the seeds of the runs holding it (each run's ``--seed`` in its command, kept in the survey's
    ``sessions``; 0 when it gave none), as ``0..2`` or ``0, 2``."""
    commands = dict(s.split(": ", 1) for s in environment.get("sessions", []) if ": " in s)
    found = {}
    for backend, group in df.groupby("backend"):
        seeds: set[int] = set()
        for run_id in set(group.run_id):
            given = re.search(r"--seed[= ](\S+)", commands.get(run_id, ""))
            seeds.update(_command_seeds(given[1]) if given else [0])
        ordered = sorted(seeds)
        found[backend] = (f"{ordered[0]}..{ordered[-1]}" if len(ordered) > 1 and ordered == list(
            range(ordered[0], ordered[-1] + 1)) else ", ".join(map(str, ordered)))
    return found


def _command_seeds(value: str) -> list[int]:
    """A recorded ``--seed`` value (normbench checked it when the run started): ``3``, ``0..2`` or ``1,4``."""
    low, dots, high = value.partition("..")
    return list(range(int(low), int(high) + 1)) if dots else [int(v) for v in value.split(",")]


_VERDICT_ORDER = {v: i for i, v in enumerate(VERDICTS)}


def sort_findings(findings: list[dict[str, str]]) -> list[dict[str, str]]:
    """Defects first, then limitations, then normbench's own; by library, backend, normalization and dtype."""
    return sorted(findings, key=lambda r: (_VERDICT_ORDER[r["verdict"]], r["library"].lower(), r["backend"],
                                           r["normalization"], r["dtype"]))


def write_findings(path: str | os.PathLike, findings: list[dict[str, str]]) -> Path:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FINDING_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(findings)
    write_atomic(Path(path), out.getvalue())
    return Path(path)


def run_folders_in(folders: Sequence[str | os.PathLike]) -> list[Path]:
    """The run folders inside each of ``folders``, sorted by name; a folder with none is an error."""
    found = []
    for folder in map(Path, folders):
        runs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        if not runs:
            raise ResultsError(f"{folder} holds no run folders. Fix: give the folder the runs wrote into (--out)")
        found += runs
    return found


def findings_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """``paths``, each folder replaced by its ``*.csv`` files, sorted; a folder with none is an error."""
    found = []
    for path in map(Path, paths):
        files = sorted(p for p in path.glob("*.csv") if not p.is_dir()) if path.is_dir() else [path]
        if not files:
            raise ResultsError(f"{path} holds no findings files (*.csv). Fix: give the files, or their folder")
        found += files
    return found


def write_survey(out: str | os.PathLike, folders: Sequence[str | os.PathLike],
                 findings: Sequence[str | os.PathLike], command: str,
                 runs_in: Sequence[str | os.PathLike] = ()) -> list[Path]:
    """Merge the runs (``folders``, and every run folder inside ``runs_in``) into ``out`` with the ``findings``
    (files, or folders of ``*.csv`` files); the files written. ``normbench survey`` then renders the folder's
    report (normbench.report: a room above this one)."""
    out = Path(out)
    inputs = [*map(Path, folders), *run_folders_in(runs_in)]
    check_out(out, inputs)
    df, environment = merge(inputs, out.name, command)
    findings = sort_findings([row for f in findings_files(findings) for row in read_findings(f)])
    check_findings(findings, set(df.backend))
    try:
        written = [storage.write_csv(out / CONFORMANCE_FILE, storage.records(df), CONFORMANCE)]
        write_atomic(out / ENVIRONMENT_FILE, json.dumps(environment, indent=1) + "\n")
        written += [out / ENVIRONMENT_FILE, write_findings(out / FINDINGS_FILE, findings)]
        write_atomic(out / FINDINGS_MARKDOWN, page_markdown(df, environment, findings))
    except OSError as exc:
        raise ResultsError(f"--out {out}: cannot write the survey there: {exc.strerror or exc}. Fix: give a writable "
                           f"folder") from None
    written.append(out / FINDINGS_MARKDOWN)
    return written


def check_out(out: Path, inputs: Sequence[Path]) -> None:
    """The survey's folder may be new, or an earlier survey's (republished in place), never a file, one of the runs
    it merges, a run's folder (its lock file there, the run finished or still creating its backends), or a folder
    holding a run's results: the survey writes its own conformance file and environment there, and a run's would be
    read instead of it, or lost."""
    if out.exists() and not out.is_dir():
        raise ResultsError(f"--out {out} is a file, not a folder. Fix: give the survey's folder (new, or an earlier "
                           f"survey's)")
    for folder in inputs:
        if os.path.realpath(folder) == os.path.realpath(out):
            raise ResultsError(f"--out {out} is one of the runs the survey merges: its results would be replaced. "
                               f"Fix: give another folder")
    from normbench.core.run_folder import LOCK_FILE, holder

    if os.path.lexists(out / LOCK_FILE):  # only `normbench run` makes one: the folder is a run's, finished or not
        pid = holder(out)
        running = f", held by pid {pid}: the run is still going" if pid is not None else ""
        raise ResultsError(f"--out {out} is a run's folder (it holds normbench run's {LOCK_FILE}{running}): the survey "
                           f"would rewrite its {ENVIRONMENT_FILE}. Fix: give a new folder, or an earlier survey's")
    held = [name for name in storage.RESULT_FILES if name != CONFORMANCE_FILE and (out / name).exists()]
    if held:
        raise ResultsError(f"--out {out} holds a run's results ({', '.join(held)}): a survey there would hide or "
                           f"replace them. Fix: give a new folder, or an earlier survey's")
