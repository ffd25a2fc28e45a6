"""Result sets: what one ``normbench report RESULTS...`` argument holds, loaded without executing anything.

An argument is a run folder (``reports/<run-id>/``) or one of its files
(``throughput.json``/``.csv``, ``conformance.json``/``.csv``,
``environment.json``, ``table1.json``), or a folder of Triton traffic counts and
static kernel estimates (``traffic.csv`` of ``normbench traffic``,
``kernels-sm90.csv`` and the like of ``normbench kernel-stats``, e.g.
``reports/traffic-h100``) or one of those files; a folder may hold both kinds.
Only JSON and CSV are read, and every
file is validated field by field: results, traffic and kernel statistics through
:mod:`normbench.core.storage` (older versions migrated or refused), ``environment.json`` through
:func:`normbench.core.environment.read_environment`, ``table1.json`` against
:data:`TABLE1_FIELDS`; nothing is unpickled or evaluated. A folder may lack any
of its files (a failed or partial run): what is missing is recorded in
:attr:`ResultSet.missing` and stated in the report (a folder of traffic files
alone is no run, and misses nothing); a results file with no rows
is valid (a run that measured nothing) and noted. A folder's results are checked
against each other and against its ``environment.json``
(:func:`normbench.report.survey.check_run`): a row repeated exactly is read once,
rows of one test that disagree are shown as one error, and rows missing or too
many for the tests the run says finished are said. What the loader noticed (those,
a journal's incomplete last line, a JSON snapshot behind its CSV journal) and how
the run ended (:func:`run_state`) are in :attr:`ResultSet.notes`. A folder with
none of the files, a missing path, or an empty, corrupt or malformed file is a
:class:`~normbench.core.storage.ResultsError` naming the file and the field; so is
a file that is there but cannot be read (a link loop, no permission, a named pipe,
which is never opened to wait on), never taken as missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.check.outcomes import CONFORMANCE
from normbench.core import storage
from normbench.core.environment import ENVIRONMENT_FILE, read_environment
from normbench.core.storage import ResultsError, boolean, integer, list_of, mapping, nullable, number, record, text
from normbench.perf.kernel_stats import KERNEL_STATS, KERNEL_STATS_PATTERN, counts_files, schema_of_counts_file
from normbench.perf.throughput import THROUGHPUT
from normbench.perf.traffic import TRAFFIC, TRAFFIC_FILE
from normbench.report import bundle, survey

if TYPE_CHECKING:
    import pandas as pd

TABLE1_FILE = "table1.json"
TABLE1 = "normbench.table1"
#: table1.json, version 2 (written by ``normbench table1 --save``, normbench.paper.table1.to_document): what the
#: report reads. Version 2 added normbench's RMSNorm row (a method with ``source`` "normbench", and ``rms_norm``, what
#: it ran on); a version 1 file (the paper's rows alone) reads as it is
TABLE1_VERSIONS = (1, 2)
TABLE1_FIELDS = record({
    "transformations": list_of(record({"key": text(), "title": text()})),
    "methods": list_of(record({"title": text(), "description": text(), "cells": list_of(record({
        "key": text(), "measured": text(), "paper": text(), "agrees": boolean(), "max_change": number(low=0.0),
        "ratio": number(low=0.0)}))}, {"method": text(), "source": text()})),
}, {"seed": integer(0), "command": text(), "layer_norm": text(), "rms_norm": text(),
    "recurrent_held": nullable(boolean()), "fields": mapping(text())})
#: the files of a run folder the report reads (and every ``kernels-*.csv``: :func:`input_files`)
READ_FILES = (*storage.RESULT_FILES, ENVIRONMENT_FILE, TABLE1_FILE, TRAFFIC_FILE, survey.FINDINGS_FILE)
#: the parts of a result set that come from a run (the rest are traffic counts and kernel estimates)
RUN_PARTS = ("throughput", "conformance", "environment", "table1")


@dataclass
class ResultSet:
    """One run's results: throughput and conformance rows, its environment and Table 1 (each may be absent)."""

    label: str
    source: str
    throughput: pd.DataFrame
    conformance: pd.DataFrame
    environment: dict[str, Any] = field(default_factory=dict)
    table1: dict[str, Any] | None = None
    missing: list[str] = field(default_factory=list)
    #: what a reader must know first: how the run ended, if not normally, and what the loader noticed
    notes: list[str] = field(default_factory=list)
    #: ``normbench traffic`` rows (schema normbench.traffic), or None when the set has no traffic.csv
    traffic: pd.DataFrame | None = None
    #: ``normbench kernel-stats`` rows of every kernels-*.csv (schema normbench.kernel_stats), or None
    kernel_stats: pd.DataFrame | None = None
    #: a survey's judged findings (``findings.csv``, normbench.report.survey), or None when the folder has none
    findings: list[dict[str, str]] | None = None

    @property
    def is_run(self) -> bool:
        """Whether the set holds anything of a run (results, environment, Table 1), not only traffic files."""
        return bool(len(self.throughput) or len(self.conformance) or self.environment or self.table1
                    or self.traffic is None and self.kernel_stats is None)


def read_table1(path: Path) -> dict[str, Any]:
    """``table1.json``, validated (:data:`TABLE1_FIELDS`); every method has one cell per transformation."""
    fix = "re-run `normbench table1 --save=FOLDER` to write it again"
    version = storage.read_json_version(path, fix)
    document = storage.read_document(path, TABLE1, version if version in TABLE1_VERSIONS else TABLE1_VERSIONS[-1],
                                     TABLE1_FIELDS, fix)
    columns = len(document["transformations"])
    for i, method in enumerate(document["methods"]):
        if len(method["cells"]) != columns:
            raise ResultsError(f"{path}: field methods[{i}].cells has {len(method['cells'])} cells for {columns} "
                               f"transformations. Fix: {fix}")
    return document


def _read_json_document(path: Path, what: str) -> dict[str, Any]:
    return read_environment(path) if what == "normbench.environment" else read_table1(path)


def _kind(path: Path) -> str:
    """Which file a path is, from its name: throughput, conformance, environment, table1, traffic or kernel_stats."""
    stem = path.name.split(".")[0]
    if path.name.removeprefix(stem) in (".json", ".csv", ".csv.gz") and stem in ("throughput", "conformance"):
        return stem
    if path.name in (ENVIRONMENT_FILE, TABLE1_FILE):
        return path.stem
    counts = schema_of_counts_file(path)
    if counts is not None:
        return "traffic" if counts == TRAFFIC else "kernel_stats"
    raise ResultsError(f"{path}: not a normbench results file. Fix: give a run folder, or one of its throughput, "
                       f"conformance (.json or .csv), {ENVIRONMENT_FILE} or {TABLE1_FILE} files, or a "
                       f"{TRAFFIC_FILE} or {KERNEL_STATS_PATTERN} file")


def _from_folder(folder: Path) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    if os.path.lexists(folder / bundle.MANIFEST):  # a bundle: what is read is held to its manifest first
        parts["bundle"] = bundle.check_manifest(folder, only=[p.name for p in input_files(folder)])
    for schema, name in ((THROUGHPUT, "throughput"), (CONFORMANCE, "conformance")):
        if any(storage.exists(folder / f"{name}.{ext}") for ext in ("json", "csv", "csv.gz")):
            parts[name] = storage.load(folder, schema)
    for name, path, what in (("environment", folder / ENVIRONMENT_FILE, "normbench.environment"),
                             ("table1", folder / TABLE1_FILE, TABLE1)):
        if storage.exists(path):
            parts[name] = _read_json_document(path, what)
    if storage.exists(folder / survey.FINDINGS_FILE):
        parts["findings"] = survey.read_findings(folder / survey.FINDINGS_FILE)
    counts = counts_files(folder)
    if any(p.name == TRAFFIC_FILE for p in counts):
        parts["traffic"] = storage.load(folder / TRAFFIC_FILE, TRAFFIC)
    if any(p.name != TRAFFIC_FILE for p in counts):
        parts["kernel_stats"] = storage.load(folder, KERNEL_STATS)
    if not set(parts) - {"bundle"}:
        raise ResultsError(f"{folder} holds no normbench results (throughput, conformance, {ENVIRONMENT_FILE}, "
                           f"{TABLE1_FILE}, {TRAFFIC_FILE} or {KERNEL_STATS_PATTERN}). Fix: point at a "
                           f"folder written by `normbench run` (or by `normbench traffic`/`kernel-stats` --out)")
    return parts


def _from_file(path: Path) -> dict[str, Any]:
    kind = _kind(path)
    if kind == "throughput":
        return {"throughput": storage.load(path, THROUGHPUT)}
    if kind == "conformance":
        return {"conformance": storage.load(path, CONFORMANCE)}
    if kind in ("traffic", "kernel_stats"):
        return {kind: storage.load(path, TRAFFIC if kind == "traffic" else KERNEL_STATS)}
    return {kind: _read_json_document(path, "normbench.environment" if kind == "environment" else TABLE1)}


def _label(parts: dict[str, Any], path: Path) -> str:
    env = parts.get("environment", {})
    for name in ("throughput", "conformance"):
        df = parts.get(name)
        if df is not None and not df.empty:
            run_ids = sorted(set(df.run_id) - {""})
            if env.get("run_id") and len(run_ids) > 1 and env["run_id"] not in run_ids:  # a survey of many runs
                return f"{env['run_id']} ({len(run_ids)} runs)"
            if run_ids:
                host = env.get("host") or (df.host.iloc[0] if "host" in df else "")
                return " + ".join(run_ids) + (f" ({host})" if host and host not in run_ids[0] else "")
    return str(env.get("run_id") or path.name)


def run_state(environment: dict[str, Any], folder: Path | None) -> str:
    """How the run ended, when a reader must be told first: interrupted (by what, when, how far), still
    running (its folder's lock held), never finished (its status says running, but no process holds
    its folder, or the folder is unknown), finished early (its ``--budget`` spent), and a rehearsal; "" for a
    run that finished whole or recorded no status.

    >>> run_state({"status": {"state": "interrupted", "reason": "SIGTERM", "at": "2026-11-01T12:00:00+00:00",
    ...                       "done": 3, "total": 10}}, None)
    'The run was interrupted (SIGTERM) at 2026-11-01T12:00:00+00:00, after 3 of 10: its results are partial.'
    >>> run_state({"status": {"state": "finished", "reason": "the time budget of 60 s was spent", "at": "",
    ...                       "done": 3, "total": 10}, "rehearsal": True}, None)  # doctest: +NORMALIZE_WHITESPACE
    'The run finished early: the time budget of 60 s was spent; 3 of 10 ran, the others are marked not run. A
    rehearsal (normbench run --rehearsal: the GPU sweep shrunk, timed briefly): its speeds measure nothing.'
    """
    from normbench.core.run_folder import holder

    status = environment.get("status")
    rehearsal = (" A rehearsal (normbench run --rehearsal: the GPU sweep shrunk, timed briefly): its speeds measure "
                 "nothing." if environment.get("rehearsal") else "")
    if not status or status["state"] == "finished" and not status.get("reason"):
        return rehearsal.strip()
    done = f"{status['done']} of {status['total']}" if status.get("total") is not None else f"{status['done']}"
    if status["state"] == "finished":  # a spent --budget: what it left is marked not run
        return f"The run finished early: {status['reason']}; {done} ran, the others are marked not run.{rehearsal}"
    if status["state"] == "interrupted":
        why = f" ({status['reason']})" if status.get("reason") else ""
        return f"The run was interrupted{why} at {status['at']}, after {done}: its results are partial."
    pid = holder(folder) if folder is not None else None
    if pid is not None:
        return f"The run is still running (pid {pid}; {done} done at {status['at']}): its results are partial."
    return (f"The run never finished: its status still says running ({done} done at {status['at']}), but no "
            f"process holds its folder: the run's process ended without finishing (killed?). Its results are partial.")


def input_files(source: str | os.PathLike) -> list[Path]:
    """The files the report reads for ``source`` (resolved): the file, or every file a folder may hold that is read."""
    path = Path(os.path.realpath(source))  # a link loop is the loader's one message, not pathlib's RuntimeError
    if not path.is_dir():
        return [path]
    return [path / name for name in READ_FILES] + sorted(path.glob(KERNEL_STATS_PATTERN))


def load_result_set(source: str | os.PathLike) -> ResultSet:
    """One folder or file as a :class:`ResultSet`; an unreadable one is a ResultsError naming it."""
    path = Path(source)
    if not storage.exists(path):
        raise ResultsError(f"no results at {path}. Fix: give a run folder (reports/<run-id>) or one of its files")
    parts = _from_folder(path) if path.is_dir() else _from_file(path)
    environment = parts.get("environment", {}) if path.is_dir() else {}  # a file alone: its counts are not of it
    results, problems = survey.check_run({name: parts[name] for name in storage.RUN_RESULTS if name in parts},
                                         environment)
    parts.update(results)
    missing = []
    run = any(name in parts for name in RUN_PARTS)  # traffic files alone are no run: no run file is missing
    if "throughput" not in parts and run:
        missing.append("throughput results (no throughput.json or .csv): the throughput suite did not run")
    if "conformance" not in parts and run:
        missing.append("conformance results (no conformance.json or .csv): the conformance suites did not run")
    if "environment" not in parts and run:
        missing.append(f"the environment ({ENVIRONMENT_FILE}): device, versions and command are unknown")
    found = []
    state = run_state(parts.get("environment", {}), path if path.is_dir() else None)
    if state:
        found.append(state)
    found += problems
    if "bundle" in parts:
        found += bundle.left_out_notes(parts["bundle"])
    for name in ("throughput", "conformance"):
        if name in parts:
            found += storage.notes(parts[name])
            if parts[name].empty:
                found.append(f"The {name} results hold no rows: the run wrote none (stopped early, or nothing "
                             f"was selected).")
    for name, what in (("traffic", "traffic counts"), ("kernel_stats", "kernel statistics")):
        if name in parts:
            found += storage.notes(parts[name])
            if parts[name].empty:
                found.append(f"The {what} hold no rows.")
    return ResultSet(label=_label(parts, path), source=str(path),
                     throughput=parts.get("throughput", storage.frame([], THROUGHPUT)),
                     conformance=parts.get("conformance", storage.frame([], CONFORMANCE)),
                     environment=parts.get("environment", {}), table1=parts.get("table1"), missing=missing,
                     notes=found, traffic=parts.get("traffic"), kernel_stats=parts.get("kernel_stats"),
                     findings=parts.get("findings"))


def load_result_sets(sources: list[str | os.PathLike]) -> list[ResultSet]:
    """Every source as a result set; labels made unique (a repeated label gets ``#2``, ``#3``)."""
    if not sources:
        raise ResultsError("no results given. Fix: name one or more run folders, e.g. reports/<run-id>")
    sets = [load_result_set(s) for s in sources]
    seen: dict[str, int] = {}
    for rs in sets:
        seen[rs.label] = seen.get(rs.label, 0) + 1
        if seen[rs.label] > 1:
            rs.label = f"{rs.label} #{seen[rs.label]}"
    return sets
