"""Results on disk: a versioned schema, written incrementally, loaded and merged with pandas.

A run folder (``reports/<run-id>/``) holds:

* ``throughput.csv`` and ``throughput.json``: one row per measured case (the
  columns below). The CSV grows a row at a time and the JSON is rewritten
  after every row, so an interrupted run keeps every row already measured.
* ``conformance.csv`` and ``conformance.json``: one row per conformance test
  of a ``normbench run`` (backend, test, case, outcome, message).
* ``environment.json``: the machine, libraries, commit, command and the
  measured ceilings (:mod:`normbench.environment`).

Every JSON file is ``{"schema": ..., "schema_version": N, ..., "rows": [...]}``;
every CSV row carries ``schema_version``. Never pickle. :func:`load` accepts a
folder or either file, checks the schema, migrates an older version through
:data:`MIGRATIONS` or refuses with the reason; :func:`merge` concatenates runs
from any machines.

Example::

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> writer = ResultsWriter(folder, run_id="r1")
    >>> writer.add(new_row(run_id="r1", backend="numpy", direction="forward", dtype="float32", verdict="ok"))
    >>> load(folder)[["backend", "direction", "verdict"]].to_dict("records")
    [{'backend': 'numpy', 'direction': 'forward', 'verdict': 'ok'}]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.exceptions import NormbenchError
from normbench.files import write_atomic

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
THROUGHPUT = "normbench.throughput"
CONFORMANCE = "normbench.conformance"


class ResultsError(NormbenchError):
    """A results file that is missing, not normbench's, or of a schema version this normbench cannot read."""


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str", "int", "float" or "bool"
    doc: str


#: the throughput schema, version 1: one row per (backend, case, direction)
THROUGHPUT_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("run_id", "str", "the run this row belongs to (also the folder name)"),
    Column("time", "str", "when the row was measured, ISO 8601 UTC"),
    Column("host", "str", "the machine's host name"),
    Column("device", "str", "where the backend computed, as it reports it (e.g. cpu, cuda:0 (NVIDIA H100))"),
    Column("device_name", "str", "the CPU or GPU model"),
    Column("backend", "str", "the backend name (--impl)"),
    Column("backend_version", "str", "the version of the library it wraps"),
    Column("direction", "str", "forward, backward or forward+backward"),
    Column("dtype", "str", "the dtype of x, y, dy and dx"),
    Column("param_dtype", "str", "the dtype of weight and bias"),
    Column("rows", "int", "M, the number of rows"),
    Column("hidden", "int", "N, the normalized size"),
    Column("shape", "str", "x's shape, ROWSxHIDDEN"),
    Column("case_id", "str", "the normbench.cases id of the case"),
    Column("seed", "int", "the seed of the inputs (normbench.cases.make_inputs)"),
    Column("byte_model", "str", "forward-inference, backward or forward-training+backward (normbench.perf.roofline)"),
    Column("bytes", "int", "the bytes the byte model says the direction must move"),
    Column("cache", "str", "cold (last-level cache flushed before every sample) or warm"),
    Column("timer", "str", "perf_counter_ns or cuda-events"),
    Column("calls_per_sample", "int", "calls averaged in one sample (1 with a cold cache)"),
    Column("n", "int", "the number of samples"),
    Column("median_s", "float", "median seconds per call"),
    Column("q1_s", "float", "first quartile, seconds"),
    Column("q3_s", "float", "third quartile, seconds"),
    Column("iqr_s", "float", "interquartile range, seconds"),
    Column("min_s", "float", "fastest sample, seconds"),
    Column("max_s", "float", "slowest sample, seconds"),
    Column("rel_spread", "float", "IQR / median"),
    Column("wide_spread", "bool", "rel_spread above normbench.perf.timing.WIDE_SPREAD: read the speed with care"),
    Column("gbps", "float", "bytes / median / 1e9; empty unless verdict is ok"),
    Column("ceiling_gbps", "float", "the device's copy bandwidth measured in this run"),
    Column("pct_of_ceiling", "float", "100 * gbps / ceiling_gbps; empty unless verdict is ok"),
    Column("fits_in_cache", "bool", "bytes <= the last-level cache: cold timing matters most here"),
    Column("verdict", "str", "ok, wrong-before, wrong-after, above-ceiling or error (normbench.perf.throughput)"),
    Column("message", "str", "why the verdict is not ok, and any note on an ok row"),
)

#: the conformance schema, version 1: one row per test of a ``normbench run``
CONFORMANCE_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("run_id", "str", "the run this row belongs to"),
    Column("backend", "str", "the backend name"),
    Column("suite", "str", "the suite file, e.g. test_forward.py"),
    Column("test", "str", "the test function"),
    Column("case", "str", "the case id (the test id without the backend)"),
    Column("nodeid", "str", "the pytest node id relative to the suites, `suites/test_forward.py::test_forward[...]`, "
                            "whether they ran from a checkout or an installation"),
    Column("outcome", "str", "passed, failed, skipped, error, or xfailed/xpassed (a known deviation)"),
    Column("message", "str", "the failure's first line or the skip reason"),
)

SCHEMAS: dict[str, tuple[Column, ...]] = {THROUGHPUT: THROUGHPUT_COLUMNS, CONFORMANCE: CONFORMANCE_COLUMNS}
FILES: dict[str, str] = {THROUGHPUT: "throughput", CONFORMANCE: "conformance"}

#: (schema, version) -> a function turning a frame of that version into the next version.
#: Version 1 is the first; a later version adds its step here, e.g.
#: ``MIGRATIONS[(THROUGHPUT, 1)] = lambda df: df.assign(new_column="")``.
MIGRATIONS: dict[tuple[str, int], Callable[[pd.DataFrame], pd.DataFrame]] = {}

_EMPTY = {"str": "", "int": 0, "float": math.nan, "bool": False}


def new_row(schema: str = THROUGHPUT, **values: Any) -> dict[str, Any]:
    """A complete row of ``schema``: ``values`` plus empty defaults; unknown names are an error."""
    columns = SCHEMAS[schema]
    unknown = set(values) - {c.name for c in columns}
    if unknown:
        raise ValueError(f"not columns of {schema}: {', '.join(sorted(unknown))}")
    row = {c.name: _EMPTY[c.kind] for c in columns}
    row["schema_version"] = SCHEMA_VERSION
    row.update(values)
    return row


def frame(rows: Iterable[dict[str, Any]], schema: str = THROUGHPUT) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's columns, in order, with their dtypes."""
    import pandas as pd

    columns = SCHEMAS[schema]
    df = pd.DataFrame(list(rows), columns=[c.name for c in columns])
    return _coerce(df, columns)


def _coerce(df: pd.DataFrame, columns: tuple[Column, ...]) -> pd.DataFrame:
    import pandas as pd

    out = {}
    for c in columns:
        s = df[c.name] if c.name in df else pd.Series([_EMPTY[c.kind]] * len(df), index=df.index)
        if c.kind == "str":
            s = s.where(s.notna(), "").astype(str)
        elif c.kind == "int":
            s = pd.to_numeric(s.where(s.notna(), 0)).astype("int64")
        elif c.kind == "float":
            s = pd.to_numeric(s, errors="coerce").astype("float64")
        else:
            s = s.map(lambda v: str(v).strip().lower() in ("true", "1") if isinstance(v, str) else bool(v)).astype(bool)
        out[c.name] = s
    return pd.DataFrame(out, index=pd.RangeIndex(len(df)))


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):  # NumPy scalars
        return _json_value(v.item())
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """``df``'s rows as JSON-ready dicts: NumPy scalars as Python values, NaN and infinities as None.

    >>> import pandas as pd
    >>> records(pd.DataFrame({"gbps": [2.5, float("nan")], "n": [10, 3]}))
    [{'gbps': 2.5, 'n': 10}, {'gbps': None, 'n': 3}]
    """
    return [{k: _json_value(v) for k, v in r.items()} for r in df.to_dict("records")]


def _write_json(path: Path, document: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(document, indent=1, allow_nan=False) + "\n")  # never a half-written file


def save(folder: str | os.PathLike, df: pd.DataFrame, schema: str = THROUGHPUT,
         extra: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``df`` as ``<folder>/<name>.csv`` and ``.json`` (replacing them); returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    df = _coerce(df, SCHEMAS[schema])
    csv_path, json_path = folder / f"{FILES[schema]}.csv", folder / f"{FILES[schema]}.json"
    write_atomic(csv_path, df.to_csv(index=False))
    _write_json(json_path, {"schema": schema, "schema_version": SCHEMA_VERSION, **(extra or {}),
                            "columns": {c.name: c.doc for c in SCHEMAS[schema]}, "rows": records(df)})
    return csv_path, json_path


class ResultsWriter:
    """Appends rows to a run folder as they are measured (CSV appended, JSON rewritten).

    Rows already in the folder (the same run id, resumed) are kept.
    """

    def __init__(self, folder: str | os.PathLike, run_id: str, schema: str = THROUGHPUT) -> None:
        self.folder = Path(folder)
        self.run_id = run_id
        self.schema = schema
        self.folder.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.folder / f"{FILES[schema]}.csv"
        self.json_path = self.folder / f"{FILES[schema]}.json"
        self.rows: list[dict[str, Any]] = []
        if self.json_path.exists() or self.csv_path.exists():
            self.rows = records(load(self.folder, schema))

    def add(self, row: dict[str, Any]) -> None:
        df = frame([row], self.schema)
        df.to_csv(self.csv_path, mode="a", header=not self.csv_path.exists(), index=False)
        self.rows += records(df)
        _write_json(self.json_path, {"schema": self.schema, "schema_version": SCHEMA_VERSION,
                                     "columns": {c.name: c.doc for c in SCHEMAS[self.schema]}, "rows": self.rows})


def _migrate(df: pd.DataFrame, schema: str, version: int, source: str) -> pd.DataFrame:
    if version == SCHEMA_VERSION:
        return df
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{source} has {schema} schema version {version}, newer than this normbench reads "
                           f"({SCHEMA_VERSION}). Fix: upgrade normbench to read it")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get((schema, version))
        if step is None:
            raise ResultsError(f"{source} has {schema} schema version {version}, which this normbench cannot "
                               f"migrate to version {SCHEMA_VERSION}. Fix: re-run the measurement, or load it with "
                               f"the normbench version that wrote it")
        df, version = step(df), version + 1
    return df


def _load_json(path: Path, schema: str) -> pd.DataFrame:
    import pandas as pd

    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != schema or "rows" not in document:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{path} is not a {schema} results file (its schema is {found!r}). "
                           f"Fix: point at a {FILES[schema]}.json or its run folder")
    version = document.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"{path} has no integer schema_version (got {version!r}); it was not written by normbench")
    return _migrate(pd.DataFrame(document["rows"]), schema, version, str(path))


def _load_csv(path: Path, schema: str) -> pd.DataFrame:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if "schema_version" not in df.columns:
        raise ResultsError(f"{path} has no schema_version column: not a normbench {schema} CSV")
    versions = sorted(set(df["schema_version"]))
    if len(versions) > 1 or not all(v.isdigit() for v in versions):
        raise ResultsError(f"{path} mixes or garbles schema versions ({', '.join(versions)}). "
                           f"Fix: load each run's file separately and merge() them")
    version = int(versions[0]) if versions else SCHEMA_VERSION
    df = df.replace({"": None})
    return _migrate(df, schema, version, str(path))


def load(path: str | os.PathLike, schema: str = THROUGHPUT) -> pd.DataFrame:
    """A run folder, or its ``.json`` or ``.csv`` file, as a DataFrame of the current schema.

    A folder is read from its JSON (complete types) or, if that is missing, its CSV.
    """
    path = Path(path)
    if path.is_dir():
        name = FILES[schema]
        path = path / f"{name}.json" if (path / f"{name}.json").exists() else path / f"{name}.csv"
    if not path.exists():
        raise ResultsError(f"no results at {path}. Fix: give a run folder (reports/<run-id>) or one of its "
                           f"{FILES[schema]}.csv / .json files")
    df = _load_json(path, schema) if path.suffix == ".json" else _load_csv(path, schema)
    missing = [c.name for c in SCHEMAS[schema] if c.name not in df.columns]
    if missing:
        raise ResultsError(f"{path} lacks the columns {', '.join(missing)} of {schema} version {SCHEMA_VERSION}")
    df = df.assign(schema_version=SCHEMA_VERSION)
    return _coerce(df, SCHEMAS[schema])


def merge(sources: Iterable[str | os.PathLike | pd.DataFrame], schema: str = THROUGHPUT) -> pd.DataFrame:
    """Rows of several runs (folders, files or frames) in one DataFrame; exact duplicates dropped."""
    import pandas as pd

    frames = [_coerce(s, SCHEMAS[schema]) if isinstance(s, pd.DataFrame) else load(s, schema) for s in sources]
    if not frames:
        return frame([], schema)
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)
    return _coerce(merged, SCHEMAS[schema])
