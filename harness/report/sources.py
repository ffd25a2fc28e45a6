"""Result sets: what one ``normbench report RESULTS...`` argument holds, loaded without executing anything.

An argument is a run folder (``reports/<run-id>/``) or one of its files
(``throughput.json``/``.csv``, ``conformance.json``/``.csv``,
``environment.json``, ``table1.json``). Only JSON and CSV are read, through
:mod:`normbench.results` (schema checked, older versions migrated or refused);
nothing is unpickled or evaluated. A folder may lack any of its files (a
failed or partial run): what is missing is recorded in :attr:`ResultSet.missing`
and stated in the report. A folder with none of them, a missing path, or an
empty or corrupt file is a :class:`~normbench.results.ResultsError` naming the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench import results
from normbench.results import ResultsError

if TYPE_CHECKING:
    import pandas as pd

ENVIRONMENT_FILE = "environment.json"
TABLE1_FILE = "table1.json"
TABLE1 = "normbench.table1"


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


def _read_json_document(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != what:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{path} is not a {what} file (its schema is {found!r})")
    version = document.get("schema_version")
    if version != 1:
        raise ResultsError(f"{path} has {what} schema version {version!r}; this normbench reads version 1. "
                           f"Fix: upgrade normbench, or re-run the measurement")
    return document


def _kind(path: Path) -> str:
    """Which file a path is, from its name: throughput, conformance, environment or table1."""
    stem = path.name.split(".")[0]
    if path.suffix in (".json", ".csv") and stem in ("throughput", "conformance"):
        return stem
    if path.name in (ENVIRONMENT_FILE, TABLE1_FILE):
        return path.stem
    raise ResultsError(f"{path}: not a normbench results file. Fix: give a run folder, or one of its throughput, "
                       f"conformance (.json or .csv), {ENVIRONMENT_FILE} or {TABLE1_FILE} files")


def _from_folder(folder: Path) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for schema, name in ((results.THROUGHPUT, "throughput"), (results.CONFORMANCE, "conformance")):
        if (folder / f"{name}.json").exists() or (folder / f"{name}.csv").exists():
            parts[name] = results.load(folder, schema)
    for name, path, what in (("environment", folder / ENVIRONMENT_FILE, "normbench.environment"),
                             ("table1", folder / TABLE1_FILE, TABLE1)):
        if path.exists():
            parts[name] = _read_json_document(path, what)
    if not parts:
        raise ResultsError(f"{folder} holds no normbench results (throughput, conformance, {ENVIRONMENT_FILE} or "
                           f"{TABLE1_FILE}). Fix: point at a folder written by `normbench run`")
    return parts


def _from_file(path: Path) -> dict[str, Any]:
    kind = _kind(path)
    if kind == "throughput":
        return {"throughput": results.load(path, results.THROUGHPUT)}
    if kind == "conformance":
        return {"conformance": results.load(path, results.CONFORMANCE)}
    return {kind: _read_json_document(path, "normbench.environment" if kind == "environment" else TABLE1)}


def _label(parts: dict[str, Any], path: Path) -> str:
    env = parts.get("environment", {})
    for name in ("throughput", "conformance"):
        df = parts.get(name)
        if df is not None and not df.empty:
            run_ids = sorted(set(df.run_id) - {""})
            if run_ids:
                host = env.get("host") or (df.host.iloc[0] if "host" in df else "")
                return " + ".join(run_ids) + (f" ({host})" if host and host not in run_ids[0] else "")
    return str(env.get("run_id") or path.name)


def load_result_set(source: str | os.PathLike) -> ResultSet:
    """One folder or file as a :class:`ResultSet`; an unreadable one is a ResultsError naming it."""
    path = Path(source)
    if not path.exists():
        raise ResultsError(f"no results at {path}. Fix: give a run folder (reports/<run-id>) or one of its files")
    parts = _from_folder(path) if path.is_dir() else _from_file(path)
    missing = []
    if "throughput" not in parts:
        missing.append("throughput results (no throughput.json or .csv): the throughput suite did not run")
    if "conformance" not in parts:
        missing.append("conformance results (no conformance.json or .csv): the conformance suites did not run")
    if "environment" not in parts:
        missing.append(f"the environment ({ENVIRONMENT_FILE}): device, versions and command are unknown")
    return ResultSet(label=_label(parts, path), source=str(path),
                     throughput=parts.get("throughput", results.frame([], results.THROUGHPUT)),
                     conformance=parts.get("conformance", results.frame([], results.CONFORMANCE)),
                     environment=parts.get("environment", {}), table1=parts.get("table1"), missing=missing)


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
