"""Results on disk: versioned schemas, written incrementally, validated at load, migrated, merged with pandas.

The storage mechanics of every results schema, one place: a :class:`Schema` is defined beside what writes its
rows (``normbench.perf.throughput.THROUGHPUT``, ``normbench.check.outcomes.CONFORMANCE``,
``normbench.perf.traffic.TRAFFIC``, ``normbench.perf.kernel_stats.KERNEL_STATS``) and handed to the functions
here, which know none of them. A run folder (``reports/<run-id>/``, one writer at a time:
:mod:`normbench.core.run_folder`) holds ``throughput.csv`` and ``.json``, ``conformance.csv`` and ``.json``, and
``environment.json`` (:mod:`normbench.core.environment`); the traffic and kernel-stats tables are CSV only
(:func:`write_csv`), and :func:`load` reads them like the others (a folder's ``kernels-*.csv`` together).

**Writing** (:class:`ResultsWriter`). The CSV is the journal: every row is
appended as one complete line, handed to the operating system at once (a killed
run keeps it) and fsynced at least every :attr:`ResultsWriter.SYNC_EVERY_S`
seconds and at :meth:`~ResultsWriter.close`. A failed append is cut back, so the
journal never ends in a torn line. The JSON is a snapshot, written whole
(:func:`normbench.core.files.write_atomic`) at ``close()`` and in between at most
every :attr:`ResultsWriter.JSON_EVERY_S` seconds, and never more often than
1/20 of the time a rewrite takes: a run of thousands of rows spends a bounded
share of its time on it (a rewrite after every row would be quadratic). A run
that measured nothing still writes both files, with no rows. A write that fails
(a full disk) raises one :class:`ResultsError` naming the file, the rows safely
on disk and the fix; nothing half-written is left behind.

**Reading** (:func:`load`). Every file is validated field by field against its
schema: each column's kind and range (:class:`Column`, next to its doc), the
rules a whole row obeys (``Schema.rules``), the schema version of the file
and of every row; a missing, unknown or malformed field is one
:class:`ResultsError` naming the file, the row and the field, quoting at most
:data:`SHOWN` characters of any value. A CSV is read a line at a time and checked
as it is read, so garbage is refused at its first bad row; a JSON file is parsed
whole, up to :data:`MAX_RESULTS_JSON` bytes. Only a regular file is read: a named
pipe, a link loop or a file that may not be read is one ResultsError naming it
(:func:`exists`, :func:`read_bytes`), never a hang and never taken as missing. A
run's rows are one per test (:func:`distinct_rows`). An empty file
(0 rows) is an empty frame with the schema's columns. A folder holding both
files compares them: equal, the JSON is read; the CSV journal holding the JSON's
rows and more (the run stopped before its last JSON snapshot), the CSV is read
and a note says so; otherwise the folder is refused, saying which file holds
what. A journal whose last line is incomplete (a run killed mid-write) is read
without that line, with a note. Notes are in ``df.attrs["notes"]`` (:func:`notes`).

Every JSON file is ``{"schema": ..., "schema_version": N, ..., "rows": [...]}``;
every CSV row carries ``schema_version``. Never pickle. :func:`load` accepts a
folder or either file, migrates an older version through ``Schema.migrations`` or
refuses it with the reason; :func:`merge` concatenates runs from any machines.

Example::

    >>> import tempfile
    >>> from normbench.perf.throughput import THROUGHPUT
    >>> folder = tempfile.mkdtemp()
    >>> with ResultsWriter(folder, run_id="r1", schema=THROUGHPUT) as writer:
    ...     writer.add(new_row(THROUGHPUT, run_id="r1", backend="numpy", direction="forward", dtype="float32", rows=4,
    ...                        hidden=8, bytes=256, verdict="error", message="RuntimeError: out of memory"))
    >>> load(folder, THROUGHPUT)[["backend", "direction", "verdict"]].to_dict("records")
    [{'backend': 'numpy', 'direction': 'forward', 'verdict': 'error'}]
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.core import case_ids, safe_text
from normbench.core.exceptions import NormbenchError
from normbench.core.files import append_whole, open_regular, write_atomic

if TYPE_CHECKING:
    import pandas as pd

class ResultsError(NormbenchError):
    """A results file that is missing, malformed, not normbench's, of a schema version this normbench
    cannot read, or that cannot be written; the message names the file and the fix."""


#: an int column's values fit in int64
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Column:
    """One column of a schema: its name, kind and meaning, and the values it may hold.

    ``low``/``high`` bound a number (``low_open``: strictly above ``low``); a float is
    finite or empty (NaN in memory, ``null`` in JSON, an empty CSV field); an int is
    never empty; a str may be anything.

    >>> Column("hidden", "int", "N", low=1).rule()
    'an integer >= 1'
    >>> Column("gbps", "float", "GB/s", low=0.0, high=1e6).problem("Infinity")
    'is not finite'
    """

    name: str
    kind: str  # "str", "int", "float" or "bool"
    doc: str
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    #: an infinite value is read as empty (IQR / a median of 0: JSON always held null, an older CSV "inf")
    infinite_is_empty: bool = False
    #: the values a str may take (None: any)
    choices: tuple[str, ...] | None = None
    #: the form a non-empty str must have: (its description, a function returning what is wrong with a value or None)
    form: tuple[str, Callable[[str], str | None]] | None = None

    def rule(self) -> str:
        """The allowed values, in words (for messages)."""
        what = {"str": "a string", "int": "an integer", "float": "a finite number", "bool": "true or false"}[self.kind]
        if self.choices is not None:
            return "one of " + ", ".join(c or "empty" for c in self.choices)
        if self.form is not None:
            return f"{self.form[0]}, or empty"
        if self.low is not None:
            what += f" {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            what += f"{',' if self.low is not None else ''} <= {self.high:g}"
        return what + (", or empty" if self.kind == "float" else "")

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (as parsed from JSON, read from a CSV field, or given
        in memory), or None. Use :func:`parse_value` to get the value itself."""
        try:
            parse_value(self, value)
        except ValueError as exc:
            return str(exc)
        return None


@dataclass(frozen=True, eq=False)
class Schema:
    """One results schema: its name (every file and row names it), its version, its columns, the rules a whole
    row obeys and how an older version's rows become this version's. The module that writes a schema's rows
    defines it (``normbench.perf.throughput.THROUGHPUT``, ``normbench.check.outcomes.CONFORMANCE``, ...);
    this module stores, validates, migrates and loads any of them.

    >>> demo = Schema("normbench.demo", 1, "demo", (Column("schema_version", "int", ""), Column("n", "int", "", low=1)))
    >>> str(demo), demo.file_name("json")
    ('normbench.demo', 'demo.json')
    """

    name: str
    version: int
    #: the stem of its files: ``throughput`` (``throughput.csv``, ``throughput.json``)
    stem: str
    columns: tuple[Column, ...]
    #: checks of a whole row (its values already parsed: floats may be None): each returns what is wrong, or None
    rules: tuple[Callable[[dict[str, Any]], str | None], ...] = ()
    #: version -> a function turning a frame of that version into the next version
    migrations: Mapping[int, Callable[[pd.DataFrame], pd.DataFrame]] = field(default_factory=dict)
    #: a schema written one CSV file per compile target (``kernels-sm90.csv``): the glob of its files, else ""
    pattern: str = ""

    def __str__(self) -> str:
        return self.name

    @functools.cached_property
    def free_text(self) -> frozenset[str]:
        """The columns that hold any text (str, without choices or a form): what :func:`storable` makes safe."""
        return frozenset(c.name for c in self.columns if c.kind == "str" and c.choices is None and c.form is None)

    def file_name(self, ext: str = "csv") -> str:
        """How its files are named, for messages: ``throughput.csv``, ``kernels-sm90.csv``."""
        return f"{self.stem}-sm90.{ext}" if self.pattern else f"{self.stem}.{ext}"


#: the stems of a run's results files; a folder holding one of :data:`RESULT_FILES` holds a run's results
RUN_RESULTS: tuple[str, ...] = ("throughput", "conformance")
RESULT_FILES: tuple[str, ...] = tuple(f"{stem}.{ext}" for stem in RUN_RESULTS for ext in ("csv", "json", "csv.gz"))
#: the files of counts and static estimates (``normbench traffic``, ``normbench kernel-stats``: CSV only, not a run's
#: results), by name and by pattern; with :data:`RESULT_FILES`, every file a normbench schema writes into a folder
#: (each schema's module checks that its files are among them: a run folder holding one is refused)
COUNTS_FILES: tuple[str, ...] = ("traffic.csv", "counters.csv")
COUNTS_PATTERNS: tuple[str, ...] = ("kernels-*.csv",)


_EMPTY = {"str": "", "int": 0, "float": math.nan, "bool": False}
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def parse_value(column: Column, value: Any) -> Any:
    """``value`` as ``column``'s Python value (a float column's empty value is None), or ValueError saying why not.

    Accepts what JSON gives (a bool is not a number), what a CSV field holds (a string:
    ``"2048"``, ``"0.5"``, ``""`` for an empty float, ``"True"``), and NumPy scalars.

    >>> parse_value(Column("n", "int", ""), "12")
    12
    >>> parse_value(Column("n", "int", ""), True)
    Traceback (most recent call last):
    ...
    ValueError: is true, not an integer
    """
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # NumPy scalars
    kind = column.kind
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"is {_shown(value)}, not a string")
        if column.choices is not None and value not in column.choices:
            raise ValueError(f"is {_shown(value)}, not {column.rule()}")
        if column.form is not None and value:
            wrong = column.form[1](value)
            if wrong:
                raise ValueError(f"is {_shown(value)}: {clip(wrong)}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if kind == "bool":
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ValueError(f"is {quoted(value)}, not true or false")
        if kind == "float" and text == "":
            return None
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise ValueError(f"is {quoted(value)}, not {'an integer' if kind == 'int' else 'a number'}") from None
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"is {_shown(value)}, not true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) and value is not None:
        raise ValueError(f"is {_shown(value)}, not {'an integer' if kind == 'int' else 'a number'}")
    if kind == "float" and (value is None or (isinstance(value, float) and math.isnan(value))):
        return None
    if value is None:
        raise ValueError("is empty, not an integer")
    if isinstance(value, float) and not math.isfinite(value):
        if column.infinite_is_empty:
            return None
        raise ValueError("is not finite")
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"is {value!r}, not an integer")
        value = int(value)
        if abs(value) > MAX_INT:
            raise ValueError(f"is {clip(str(value))}, beyond a 64-bit integer")
    else:
        value = float(value)
    low, high = column.low, column.high
    if low is not None and (value < low or column.low_open and value == low) or high is not None and value > high:
        raise ValueError(f"is {value!r}, not {column.rule()}")
    return value


#: the most characters of a value read from a file that a message quotes (a garbage file makes no huge message)
SHOWN = 200


def clip(text: str, limit: int = SHOWN) -> str:
    """``text``, or its first ``limit`` characters and an ellipsis."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quoted(value: Any) -> str:
    """``repr(value)`` of at most :data:`SHOWN` characters (a long string is cut before it is quoted)."""
    return clip(repr(value[:SHOWN] if isinstance(value, str) else value))


def _shown(value: Any) -> str:
    """A value read from a file, for a message: as JSON writes it, at most :data:`SHOWN` characters.

    >>> len(_shown("x" * 10**6)), _shown("x" * 10**6)[-5:]
    (200, 'xx...')
    """
    if isinstance(value, str):
        value = value[:SHOWN]
    text = json.dumps(value) if isinstance(value, (bool, type(None), int, float, str)) else type(value).__name__
    return clip(text)


def _listed(names: Iterable[Any], most: int = 5) -> str:
    """Names from a file, for a message: the first ``most``, each clipped, and how many more.

    >>> _listed(["a", "b", "c"], most=2)
    'a, b and 1 more'
    """
    names = list(names)
    shown = ", ".join(clip(str(n)) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def new_row(schema: Schema, **values: Any) -> dict[str, Any]:
    """A complete row of ``schema``: ``values`` plus empty defaults; unknown names are an error."""
    columns = schema.columns
    unknown = set(values) - {c.name for c in columns}
    if unknown:
        raise ValueError(f"not columns of {schema}: {', '.join(sorted(unknown))}")
    row = {c.name: _EMPTY[c.kind] for c in columns}
    row["schema_version"] = schema.version
    if "normalization" in row:  # unless given, the case id's (LayerNorm for a row without a case)
        row["normalization"] = case_ids.operation_of(str(values.get("case") or values.get("case_id") or "")).name
    row.update(values)
    return row


def storable(row: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """``row`` as it is written: each free-text field (a str column without choices or a form: messages, versions,
    notes, which a backend's text reaches) made safe to store and show (:func:`normbench.core.safe_text.cell`:
    control characters escaped, clipped, a leading formula character quoted for spreadsheets). Called by every
    writer, so a backend's ``\\r``, megabyte or lone surrogate cannot make a file normbench's own loader refuses.

    >>> from normbench.check.outcomes import CONFORMANCE
    >>> storable({"message": "50%\\r100%", "outcome": "failed"}, CONFORMANCE)["message"]
    '50%\\\\r100%'
    """
    free = schema.free_text
    return {k: safe_text.cell(v) if k in free and isinstance(v, str) else v for k, v in row.items()}


def frame(rows: Iterable[dict[str, Any]], schema: Schema) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's columns, in order, with their dtypes (not validated:
    :func:`load` validates what it reads, :class:`ResultsWriter` what it writes)."""
    import pandas as pd

    columns = schema.columns
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


def notes(df: pd.DataFrame) -> list[str]:
    """What :func:`load` noticed while reading ``df`` and a reader should be told (a journal's
    incomplete last line left out, the CSV read because the JSON lagged behind); usually none."""
    return list(df.attrs.get("notes", []))


def _document(schema: Schema, rows: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
    return json.dumps({"schema": schema.name, "schema_version": schema.version, **(extra or {}),
                       "columns": {c.name: c.doc for c in schema.columns}, "rows": rows},
                      indent=1, allow_nan=False) + "\n"


def _csv_text(rows: list[dict[str, Any]], columns: tuple[Column, ...], header: bool) -> str:
    """Rows (parsed values, floats None when empty) as CSV lines ending in ``\\n``; floats by ``repr`` (exact)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow([c.name for c in columns])
    for row in rows:
        writer.writerow(["" if row[c.name] is None else repr(row[c.name]) if c.kind == "float" else row[c.name]
                         for c in columns])
    return out.getvalue()


def write_csv(path: str | os.PathLike, rows: Iterable[dict[str, Any]], schema: Schema) -> Path:
    """``rows`` of ``schema`` (dicts of its columns; ``schema_version`` added when absent) as one CSV file,
    validated like a loaded file and written whole (no JSON beside it: the traffic and kernel-stats tables
    are CSV); gzip-compressed where ``path`` ends in ``.gz`` (a published survey's ``conformance.csv.gz``,
    which :func:`load` reads, and a folder's ``<name>.csv.gz`` where it has no ``.csv`` or ``.json``). A row
    that breaks the schema is one ResultsError naming the row and the field, before anything is written."""
    path = Path(path)
    rows = [storable({"schema_version": schema.version, **row}, schema) for row in rows]
    clean = _validated_rows(rows, schema, f"the {schema} rows to write to {path}",
                            "this is a normbench bug: please report it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = _csv_text(clean, schema.columns, header=True)
        write_atomic(path, gzip.compress(text.encode("utf-8"), mtime=0) if path.name.endswith(".gz") else text)
    except OSError as exc:
        raise ResultsError(f"cannot write {len(clean)} {schema} rows to {path}: {exc.strerror or exc}. "
                           f"Fix: {_fix_disk(exc)}") from None
    return path


def _fix_disk(exc: OSError) -> str:
    import errno

    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return "free disk space (or give --out on another disk)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make the folder writable, or give --out a writable folder"
    return "check the disk and the folder, then run again"


def save(folder: str | os.PathLike, df: pd.DataFrame, schema: Schema,
         extra: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``df`` (validated like a loaded file) as ``<folder>/<name>.csv`` and ``.json``, each whole,
    replacing them; returns both paths. ``df`` may have no rows."""
    folder = Path(folder)
    name = schema.stem
    csv_path, json_path = folder / f"{name}.csv", folder / f"{name}.json"
    rows = _validated_rows([storable(r, schema) for r in records(_coerce(df, schema.columns))], schema,
                           f"the {name} rows to save in {folder}",
                           "this is a normbench bug: please report it")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(csv_path, _csv_text(rows, schema.columns, header=True))
        write_atomic(json_path, _document(schema, rows, extra))
    except OSError as exc:
        raise ResultsError(f"cannot write {len(rows)} {name} rows into {folder}: {exc.strerror or exc}. "
                           f"Fix: {_fix_disk(exc)}") from None
    return csv_path, json_path


class ResultsWriter:
    """Writes a run's rows as they come: the CSV journal a line per row, the JSON snapshot now and then
    (the module doc says when); :meth:`close` writes the final JSON. Rows already in the folder
    (a second writer of the same run, e.g. a resumed session) are kept.

    A failed write raises one :class:`ResultsError` (file, rows safely on disk, fix); after it
    every :meth:`add` raises the same error, so the caller should stop and print it once.

    >>> import tempfile
    >>> from normbench.check.outcomes import CONFORMANCE
    >>> writer = ResultsWriter(tempfile.mkdtemp(), "r1", CONFORMANCE)
    >>> writer.add(new_row(CONFORMANCE, run_id="r1", backend="numpy", test="test_forward", outcome="passed"))
    >>> writer.close()
    >>> len(load(writer.folder, CONFORMANCE)), writer.written
    (1, 1)
    """

    #: the longest time the JSON snapshot lags behind the journal while rows come
    JSON_EVERY_S = 2.0
    #: the longest time an appended row waits for fsync (the OS has it at once: a killed run keeps it)
    SYNC_EVERY_S = 1.0

    def __init__(self, folder: str | os.PathLike, run_id: str, schema: Schema) -> None:
        self.folder = Path(folder)
        self.run_id = run_id
        self.schema = schema
        self.columns = schema.columns
        name = schema.stem
        self.csv_path = self.folder / f"{name}.csv"
        self.json_path = self.folder / f"{name}.json"
        self.rows: list[dict[str, Any]] = []
        self._failed: ResultsError | None = None
        self._closed = False
        self._json_rows = -1  # rows in the JSON on disk (-1: none written yet)
        self._json_seconds = 0.0  # how long the last JSON rewrite took
        self._last_json = self._last_sync = time.monotonic()
        if self.csv_path.exists() or self.json_path.exists():
            self.rows = records(load(self.folder, schema))
            self._try(lambda: write_atomic(self.csv_path, _csv_text(self.rows, self.columns, header=True)),
                      self.csv_path)
        else:
            self._try(lambda: (self.folder.mkdir(parents=True, exist_ok=True),
                               append_whole(self.csv_path, _csv_text([], self.columns, header=True))), self.csv_path)

    @property
    def written(self) -> int:
        """Rows safely in the journal (the CSV)."""
        return len(self.rows)

    def _try(self, write: Callable[[], Any], path: Path, row: int | None = None) -> None:
        try:
            write()
        except OSError as exc:
            what = f"row {row} to {path}" if row is not None else str(path)
            kept = (f"the {len(self.rows)} rows before it are safely in {self.csv_path}" if row is not None else
                    f"the {len(self.rows)} rows written so far are safely in {self.csv_path}"
                    if path != self.csv_path else f"nothing was lost ({len(self.rows)} rows were there before)")
            self._failed = ResultsError(f"cannot write {what}: {exc.strerror or exc}; {kept}. "
                                        f"Fix: {_fix_disk(exc)}, then run again")
            raise self._failed from None

    def add(self, row: dict[str, Any]) -> None:
        """Append one row (a dict of every column, as :func:`new_row` makes; a float that is NaN or
        infinite is written empty, as JSON has it); a row that breaks the schema is refused, with
        the field, before anything is written. It raises only for a row it did not write: once the
        row is in the journal, a failure of the JSON snapshot that follows is raised by the next call
        (a caller that keeps the rows :meth:`add` refused then keeps each row exactly once)."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise ResultsError(f"{self.csv_path}: the writer is closed; open a new ResultsWriter to add rows")
        row = storable({k: _json_value(v) for k, v in row.items()}, self.schema)  # NaN and inf empty, as in JSON
        (clean,) = _validated_rows([row], self.schema, f"the {self.schema.stem} row to write to {self.csv_path}",
                                   "this is a normbench bug: please report it", first=len(self.rows) + 1)
        now = time.monotonic()
        sync = now - self._last_sync >= self.SYNC_EVERY_S
        self._try(lambda: append_whole(self.csv_path, _csv_text([clean], self.columns, header=False), sync=sync),
                  self.csv_path, row=len(self.rows) + 1)
        if sync:
            self._last_sync = now
        self.rows.append(clean)  # in the journal: from here on, this row is written, whatever else fails
        if now - self._last_json >= max(self.JSON_EVERY_S, 20 * self._json_seconds):
            with contextlib.suppress(ResultsError):  # the snapshot's failure is raised by the next add or close
                self.flush()

    def flush(self) -> None:
        """Rewrite the JSON snapshot now (whole), if rows came since the last one."""
        if self._failed is not None:
            raise self._failed
        if self._json_rows == len(self.rows):
            return
        start = time.monotonic()
        self._try(lambda: write_atomic(self.json_path, _document(self.schema, self.rows)), self.json_path)
        self._json_rows, self._last_json = len(self.rows), time.monotonic()
        self._json_seconds = self._last_json - start

    def close(self) -> None:
        """Write the final JSON and fsync the journal; idempotent. Raises the writer's failure, if any."""
        if self._closed:
            if self._failed is not None:
                raise self._failed
            return
        self._closed = True
        if self._failed is not None:
            raise self._failed
        self._try(lambda: append_whole(self.csv_path, b"", sync=True), self.csv_path)
        self.flush()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


# -- reading ---------------------------------------------------------------------------------------


def _readable(schema: Schema, version: int, source: str) -> None:
    """Refuse a version this normbench cannot read: newer, or older without a migration path."""
    if version > schema.version:
        raise ResultsError(f"{source} has {schema} schema version {version}, newer than this normbench reads "
                           f"({schema.version}). Fix: upgrade normbench to read it")
    for step in range(version, schema.version):
        if step not in schema.migrations:
            raise ResultsError(f"{source} has {schema} schema version {version}, which this normbench cannot "
                               f"migrate to version {schema.version}. Fix: re-run the measurement, or load it with "
                               f"the normbench version that wrote it")


def _migrate(df: pd.DataFrame, schema: Schema, version: int, source: str) -> pd.DataFrame:
    _readable(schema, version, source)
    while version < schema.version:
        df, version = schema.migrations[version](df), version + 1
    for c in schema.columns:  # an older CSV's empty fields were read as None: a string column's empty is ""
        if c.kind == "str" and c.name in df:
            df[c.name] = df[c.name].where(df[c.name].notna(), "")
    return df


def _validated_rows(rows: list[Any], schema: Schema, source: str, fix: str, first: int = 1,
                    lines: list[int] | None = None) -> list[dict[str, Any]]:
    """Every row checked against ``schema`` (fields, kinds, ranges, its rules) and parsed;
    the first problem is a ResultsError naming ``source``, the row (1-based, from ``first``; or its
    CSV line) and the field."""
    return [_validated_row(row, schema, f"{source}, {f'line {lines[i]}' if lines else f'row {first + i}'}", fix)
            for i, row in enumerate(rows)]


def _validated_row(row: Any, schema: Schema, where: str, fix: str) -> dict[str, Any]:
    """One row checked and parsed (:func:`_validated_rows`); ``where`` names it in the message."""
    columns = schema.columns
    names = [c.name for c in columns]
    if not isinstance(row, dict):
        raise ResultsError(f"{where} is {_shown(row)}, not an object of fields. Fix: {fix}")
    missing = [n for n in names if n not in row]
    unknown = [n for n in row if n not in names]
    if missing or unknown:
        said = "; ".join(part for part in (f"lacks the fields {_listed(missing)}" if missing else "",
                                           f"has fields not in {schema} version {schema.version}: "
                                           f"{_listed(unknown)}" if unknown else "") if part)
        raise ResultsError(f"{where} {said}. Fix: {fix}")
    clean = {}
    for c in columns:
        try:
            clean[c.name] = parse_value(c, row[c.name])
        except ValueError as exc:
            raise ResultsError(f"{where}: field {c.name} {exc} (it must be {c.rule()}). Fix: {fix}") from None
    if clean["schema_version"] != schema.version:
        raise ResultsError(f"{where}: field schema_version is {clean['schema_version']}, but the file is "
                           f"version {schema.version}. Fix: {fix}")
    for rule in schema.rules:
        problem = rule(clean)
        if problem:
            raise ResultsError(f"{where}: {clip(problem)}. Fix: {fix}")
    return clean


def _rows_frame(rows: list[dict[str, Any]], schema: Schema, found: list[str]) -> pd.DataFrame:
    df = frame(rows, schema)
    df.attrs["notes"] = found
    return df


_FIX_FILE = "correct or remove that row (the file was edited, damaged or not written by normbench), or re-run the measurement"
#: the largest JSON results file read (it is parsed whole; the CSV journal beside it is read a line at a time):
#: some 1.5 kB a conformance row, so 10^5 rows and more; garbage beyond it is refused before it takes the memory
MAX_RESULTS_JSON = 512 << 20
#: the largest environment.json, table1.json or findings file read: a few kB when normbench writes them
MAX_DOCUMENT = 16 << 20
#: the longest line of a CSV read (a row is far shorter: the csv module refuses a field beyond 128 kB)
MAX_LINE = 4 << 20


def _version(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsError(f"{where} is {_shown(value)}, not an integer; the file was not written by normbench. "
                           f"Fix: point at a file normbench wrote")
    return value


def _fix_read(exc: OSError, fix: str) -> str:
    import errno

    if exc.errno == errno.ELOOP:
        return "the link loops: point it at the file, or remove it"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "make it readable (chmod), or copy it somewhere readable"
    return fix


def unreadable(path: str | os.PathLike, exc: OSError, fix: str = "point at a file normbench wrote") -> ResultsError:
    """The one message for a file that is there but cannot be read: the file, why (a link loop, no permission, a
    named pipe, too large: :func:`normbench.core.files.open_regular`) and the fix."""
    return ResultsError(f"cannot read {path}: {exc.strerror or exc}. Fix: {_fix_read(exc, fix)}")


def exists(path: str | os.PathLike) -> bool:
    """Whether anything is at ``path``. Only nothing at all (no such file or folder) is False: a path that is there
    but cannot be followed (a link loop, a link to nothing, a folder that may not be searched) is a ResultsError
    naming it, never taken for a file that is missing."""
    try:
        os.stat(path)
    except FileNotFoundError:
        if not os.path.lexists(path):
            return False
        raise ResultsError(f"cannot read {path}: it is a link to {os.readlink(path)}, which does not exist. "
                           f"Fix: point the link at the file, or remove it") from None
    except OSError as exc:
        raise unreadable(path, exc) from None
    return True


def read_bytes(path: str | os.PathLike, limit: int, fix: str = "point at a file normbench wrote") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; anything else is one ResultsError
    (:func:`unreadable`): a named pipe is refused without waiting on it, a larger file before it is read."""
    try:
        with open_regular(path, limit) as f:
            return f.read()
    except OSError as exc:
        raise unreadable(path, exc, fix) from None


def _read_json(path: Path, fix: str, limit: int = MAX_DOCUMENT) -> Any:
    """The JSON value in ``path``; a file that cannot be read or parsed is one ResultsError."""
    try:
        text = read_bytes(path, limit, fix).decode("utf-8")  # the bytes are let go before parsing
        return json.loads(text)
    except RecursionError:
        raise ResultsError(f"cannot read {path}: its JSON is nested too deeply to be a normbench file. "
                           f"Fix: {fix}") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError: short, positions not contents
        raise ResultsError(f"cannot read {path}: {clip(str(exc))}") from None


def _load_json(path: Path, schema: Schema) -> pd.DataFrame:
    import pandas as pd

    document = _read_json(path, f"point at a {schema.stem}.json normbench wrote, or read its CSV journal "
                                f"{schema.stem}.csv by name (read a line at a time)", MAX_RESULTS_JSON)
    if not isinstance(document, dict) or document.get("schema") != schema.name or "rows" not in document:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{path} is not a {schema} results file (its schema is {quoted(found)}). "
                           f"Fix: point at a {schema.stem}.json or its run folder")
    if "schema_version" not in document:
        raise ResultsError(f"{path} has no integer schema_version (got None); it was not written by normbench")
    version = _version(document["schema_version"], f"{path}: schema_version")
    _readable(schema, version, str(path))
    rows = document["rows"]
    if not isinstance(rows, list):
        raise ResultsError(f"{path}: rows is {_shown(rows)}, not a list of rows. Fix: {_FIX_FILE}")
    for i, row in enumerate(rows, 1):
        if isinstance(row, dict) and "schema_version" in row:
            if _version(row["schema_version"], f"{path}, row {i}: field schema_version") != version:
                raise ResultsError(f"{path}, row {i}: field schema_version is {row['schema_version']}, but the file "
                                   f"is version {version}. Fix: {_FIX_FILE}")
    if version != schema.version:
        if not all(isinstance(r, dict) for r in rows):
            raise ResultsError(f"{path}: rows must be objects of fields. Fix: {_FIX_FILE}")
        rows = records(_migrate(pd.DataFrame(rows), schema, version, str(path)).assign(schema_version=schema.version))
    return _rows_frame(_validated_rows(rows, schema, str(path), _FIX_FILE), schema, [])


class _Lines:
    """A CSV's lines, one at a time (none longer than :data:`MAX_LINE`), each ending in ``\\n`` but maybe the last;
    :attr:`last` is the last line read, :attr:`ended` whether there are no more."""

    def __init__(self, path: Path, stream: Any) -> None:
        self.path, self.stream, self.last, self.ended, self.count = path, stream, "", False, 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.stream.readline(MAX_LINE)
        if not line:
            self.ended = True
            raise StopIteration
        self.count += 1
        if len(line) == MAX_LINE and not line.endswith("\n"):
            raise ResultsError(f"{self.path}, line {self.count} is longer than {MAX_LINE} characters: not a row of "
                               f"a normbench CSV. Fix: {_FIX_FILE}")
        self.last = line
        return line


def _csv_records(path: Path, stream: Any, torn: list[bool]) -> Iterator[tuple[int, list[str]]]:
    """The CSV's records, each with the line it starts on, read a line at a time. An incomplete last record (the file
    ends inside it) is left out, and ``torn`` becomes ``[True]``."""
    lines = _Lines(path, stream)
    reader = csv.reader(lines, strict=True)
    held, start = None, 1  # a record is given once the next one is read: only then is it known not to be the last
    try:
        for record in reader:
            if held is not None:
                yield held
            held, start = (start, record), reader.line_num + 1
    except csv.Error as exc:
        if not lines.ended:
            raise ResultsError(f"cannot read {path}, line {start}: {clip(str(exc))}. Fix: {_FIX_FILE}") from None
        torn[:] = [True]  # the file ends inside a quoted field: its last record was cut
    else:
        if lines.last and not lines.last.endswith("\n"):
            torn[:] = [True]
            held = None
    if held is not None:
        yield held


def _load_csv(path: Path, schema: Schema) -> pd.DataFrame:
    """A CSV of ``schema``, read a line at a time and checked as it is read: the first malformed row is refused
    before the rest is read (a file of garbage takes neither the memory of its rows nor a message of its size)."""
    try:
        raw = open_regular(path)
    except OSError as exc:
        raise unreadable(path, exc) from None
    with raw:  # decompressed and decoded as it is read, never whole
        try:
            binary = gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw
            return _parse_csv(path, io.TextIOWrapper(binary, encoding="utf-8", newline="\n"), schema)
        except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip's BadGzipFile is an OSError
            raise ResultsError(f"cannot read {path}: {clip(str(exc))}") from None


def _parse_csv(path: Path, stream: Any, schema: Schema) -> pd.DataFrame:
    import pandas as pd

    torn: list[bool] = [False]
    found = _csv_records(path, stream, torn)
    first = next(found, None)
    if first is None and not torn[0]:
        raise ResultsError(f"cannot read {path}: it is empty (a normbench CSV has a header line even with no rows). "
                           f"Fix: point at a {schema.file_name()} normbench wrote")
    if first is None:
        raise ResultsError(f"cannot read {path}: its header line is incomplete. Fix: point at a "
                           f"{schema.file_name()} normbench wrote")
    header = first[1]
    if "schema_version" not in header:
        raise ResultsError(f"{path} has no schema_version column: not a normbench {schema} CSV")
    if len(set(header)) != len(header):
        raise ResultsError(f"{path}: its header repeats a column. Fix: {_FIX_FILE}")
    at = header.index("schema_version")
    names = [c.name for c in schema.columns]
    rows, older = [], []
    version, version_line = str(schema.version), 0
    for line, record in found:
        if len(record) != len(header):
            raise ResultsError(f"{path}, line {line} has {len(record)} fields, the header {len(header)}. "
                               f"Fix: {_FIX_FILE}")
        if not version_line:  # the first row's version is the file's: the header must be that version's
            version, version_line = record[at], line
            if not version.isdigit():
                raise ResultsError(f"{path}, line {line}: field schema_version is {quoted(version)}, not an integer. "
                                   f"Fix: {_FIX_FILE}")
            if version == str(schema.version):
                _check_header(path, header, names, schema)
            else:  # a version this normbench cannot read is refused before the rest is read
                _readable(schema, int(version), str(path))
        elif record[at] != version:
            raise ResultsError(f"{path}, line {line}: field schema_version is {quoted(record[at])}, but line "
                               f"{version_line} says {version}: a file holds one version. Fix: load each run's file "
                               f"separately and merge() them")
        row = dict(zip(header, record))
        if version == str(schema.version):
            rows.append(_validated_row(row, schema, f"{path}, line {line}", _FIX_FILE))
        else:  # an older version is migrated whole, then validated
            older.append(row)
    if not version_line:
        _check_header(path, header, names, schema)
    if older:
        df = pd.DataFrame(older, columns=header).replace({"": None})
        migrated = records(_migrate(df, schema, int(version), str(path)).assign(schema_version=schema.version))
        rows = _validated_rows(migrated, schema, str(path), _FIX_FILE)
    said = [f"{path}: its last line is incomplete (the run stopped while writing it) and was left out; "
            f"{len(rows)} complete rows read"] if torn[0] else []
    return _rows_frame(rows, schema, said)


def _check_header(path: Path, header: list[str], names: list[str], schema: Schema) -> None:
    """A header of the schema's version names its columns, each once, no others."""
    if sorted(header) != sorted(names):
        missing, unknown = [n for n in names if n not in header], [n for n in header if n not in names]
        said = "; ".join(part for part in (f"lacks the columns {_listed(missing)}" if missing else "",
                                           f"has columns not in {schema} version {schema.version}: {_listed(unknown)}"
                                           if unknown else "") if part)
        raise ResultsError(f"{path}: its header {said}. Fix: {_FIX_FILE}")


def _first_difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """Where the first ``len(a)`` rows of ``b`` differ from ``a`` ("row 3, field gbps"), or "" if they do not."""
    head = b.iloc[:len(a)].reset_index(drop=True)
    same = (a == head) | (a.isna() & head.isna())
    if same.all(axis=None):
        return ""
    row = int((~same).any(axis=1).to_numpy().argmax())
    return f"row {row + 1}, field {same.columns[(~same.iloc[row]).to_numpy().argmax()]}"


def _reconcile(folder: Path, schema: Schema) -> pd.DataFrame:
    """A folder holding both files: the JSON if they agree, the CSV journal if it holds the JSON's rows and more
    (with a note), else a ResultsError saying which holds what."""
    name = schema.stem
    json_df = _load_json(folder / f"{name}.json", schema)
    csv_df = _load_csv(folder / f"{name}.csv", schema)
    found = notes(csv_df)
    short, long = (json_df, csv_df) if len(json_df) <= len(csv_df) else (csv_df, json_df)
    differs = _first_difference(short, long)
    if not differs and len(json_df) == len(csv_df):
        json_df.attrs["notes"] = found
        return json_df
    if not differs and len(json_df) < len(csv_df):
        csv_df.attrs["notes"] = [*found, f"{folder}/{name}.json holds {len(json_df)} rows and the journal {name}.csv "
                                 f"{len(csv_df)}: the run stopped before its last JSON snapshot; the CSV's rows were read"]
        return csv_df
    why = (f"they differ at {differs}" if differs else
           f"{name}.json holds {len(json_df)} rows, more than the {len(csv_df)} of the journal {name}.csv")
    raise ResultsError(f"{folder}: {name}.json and {name}.csv disagree ({why}); neither is preferred. Fix: read one "
                       f"of them by name (e.g. `normbench report {folder}/{name}.csv`), or remove the wrong one")


def load(path: str | os.PathLike, schema: Schema) -> pd.DataFrame:
    """A run folder, or its ``.json`` or ``.csv`` file, as a validated DataFrame of the current schema.

    A folder with both files is read as the module doc says (they are compared); with one, from it.
    What a reader should be told is in :func:`notes`. A file that is there but cannot be read (a link
    loop, no permission, a named pipe) is refused (:func:`exists`, :func:`read_bytes`), never taken as missing.
    """
    path = Path(path)
    name = schema.stem
    if path.is_dir() and schema.pattern:
        return _load_per_target_folder(path, schema)
    if path.is_dir():
        have = [p for p in (path / f"{name}.json", path / f"{name}.csv") if exists(p)]
        if have and exists(path / f"{name}.csv.gz"):
            raise ResultsError(f"{path} holds {name}.csv.gz beside {' and '.join(p.name for p in have)}: which is the "
                               f"run's is not known, and neither is passed over. Fix: read one of them by name (e.g. "
                               f"`normbench report {path}/{name}.csv.gz`), or remove the wrong one")
        if len(have) == 2:
            return _reconcile(path, schema)
        if not have and exists(path / f"{name}.csv.gz"):  # a published folder's compressed table
            have = [path / f"{name}.csv.gz"]
        path = have[0] if have else path / f"{name}.json"
    if not exists(path):
        raise ResultsError(f"no results at {path}. Fix: give a run folder (reports/<run-id>) or one of its "
                           f"{name}.csv / .json files")
    return _load_json(path, schema) if path.suffix == ".json" else _load_csv(path, schema)


def _load_per_target_folder(folder: Path, schema: Schema) -> pd.DataFrame:
    """Every file of ``schema`` in ``folder`` (``kernels-*.csv``, one per compile target), in name order, as one frame
    (each is read, so one that is not a regular file is refused, not passed over)."""
    import pandas as pd

    paths = sorted(folder.glob(schema.pattern))
    if not paths:
        raise ResultsError(f"no {schema} rows in {folder} (no {schema.pattern}). Fix: give a folder "
                           f"`normbench kernel-stats --out FOLDER/kernels-sm90.csv` wrote into, or one of its files")
    frames = [_load_csv(p, schema) for p in paths]
    df = _coerce(pd.concat(frames, ignore_index=True), schema.columns)
    df.attrs["notes"] = [n for f in frames for n in notes(f)]
    return df


def merge(sources: Iterable[str | os.PathLike | pd.DataFrame], schema: Schema) -> pd.DataFrame:
    """Rows of several runs (folders, files or frames) in one DataFrame; exact duplicates dropped."""
    import pandas as pd

    frames = [_coerce(s, schema.columns) if isinstance(s, pd.DataFrame) else load(s, schema) for s in sources]
    if not frames:
        return frame([], schema)
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)
    return _coerce(merged, schema.columns)


def distinct_rows(df: pd.DataFrame, key: tuple[str, ...], result: str, what: str) -> tuple[pd.DataFrame, list[str]]:
    """``df`` holding each test once (a test: the values of its ``key`` columns), and what a reader must be told,
    naming the tests (``what`` names the rows: "the conformance results").

    A row repeating another exactly is read once. Rows of one test that differ (it passed, and it failed) leave no
    result to believe, and keeping one would take a side: a pass would hide a failure the file records, a failure
    would make one up. They become one row whose ``result`` is ``error`` and whose message says why (the columns
    they disagree on emptied): never a pass, never silently a failure of the backend, and named.

    >>> import pandas as pd
    >>> df = pd.DataFrame({"test": ["a", "a", "b", "b"], "outcome": ["passed", "passed", "passed", "failed"],
    ...                    "message": ["", "", "", "y off"]})
    >>> clean, said = distinct_rows(df, ("test",), "outcome", "the results")
    >>> clean.outcome.tolist(), clean.message[1]
    (['passed', 'error'], '2 rows of this test disagree (passed, failed): none is believed')
    >>> said[1]
    'the results: 1 test has rows that disagree (b): none of them is believed; each is shown once, as an error saying so'
    """
    import pandas as pd

    found, kept = [], notes(df)
    repeated = df.duplicated()
    if repeated.any():
        n = int(repeated.sum())
        found.append(f"{what}: {n} row{'s repeat' if n > 1 else ' repeats'} another row exactly "
                     f"({_listed(_test_names(df[repeated], key))}): each is read once")
        df = df[~repeated]
    clash = df.duplicated(list(key), keep=False)
    if clash.any():
        empty = {name: {"O": "", "i": 0, "u": 0, "b": False}.get(dtype.kind, math.nan) for name, dtype in df.dtypes.items()}
        marked = {}
        for _, group in df[clash].groupby(list(key), sort=False):
            row = group.iloc[0].copy()
            for name in group.columns:
                if group[name].nunique(dropna=False) > 1:
                    row[name] = empty[name]
            row[result] = "error"
            row["message"] = (f"{len(group)} rows of this test disagree ({', '.join(dict.fromkeys(group[result]))}): "
                              f"none is believed")
            marked[group.index[0]] = row
        tests = _test_names(pd.DataFrame(marked.values()), key)
        found.append(f"{what}: {len(tests)} test{'s have' if len(tests) > 1 else ' has'} rows that disagree "
                     f"({_listed(tests)}): none of them is believed; each is shown once, as an error saying so")
        dtypes = df.dtypes.to_dict()
        df = pd.concat([df[~clash], pd.DataFrame(marked.values(), index=list(marked))]).sort_index().astype(dtypes)
    df = df.reset_index(drop=True)
    df.attrs["notes"] = kept
    return df, found


def _test_names(df: pd.DataFrame, key: tuple[str, ...]) -> list[str]:
    return [" ".join(str(v) for v in values if str(v)) for values in df[list(key)].itertuples(index=False)]


# -- JSON documents (environment.json, table1.json): their fields, checked one by one ----------------


class Field:
    """A check of one JSON value: ``what`` it must be, in words, and :meth:`check`, which raises
    ``ValueError(where, what)`` (the innermost field) when the value is not that.

    Built from :func:`text`, :func:`integer`, :func:`number`, :func:`boolean`, :func:`one_of`,
    :func:`nullable`, :func:`list_of`, :func:`mapping` and :func:`record`; :func:`check_document`
    turns the first problem into one ResultsError naming the file and the field.

    >>> spec = record({"gbps": number(low=0.0, low_open=True)}, {"method": text()})
    >>> check_document({"gbps": 0}, spec, "environment.json", "re-run")
    Traceback (most recent call last):
    ...
    normbench.core.storage.ResultsError: environment.json: field gbps is 0, not a finite number > 0. Fix: re-run
    """

    def __init__(self, what: str, test: Callable[[Any, str], None]) -> None:
        self.what, self._test = what, test

    def check(self, value: Any, where: str = "") -> None:
        self._test(value, where)


def _simple(what: str, ok: Callable[[Any], bool]) -> Field:
    def test(value: Any, where: str) -> None:
        if not ok(value):
            raise ValueError(where, what, value)
    return Field(what, test)


def text() -> Field:
    return _simple("a string", lambda v: isinstance(v, str))


def boolean() -> Field:
    return _simple("true or false", lambda v: isinstance(v, bool))


def integer(low: int | None = None) -> Field:
    what = "an integer" + (f" >= {low}" if low is not None else "")
    return _simple(what, lambda v: isinstance(v, int) and not isinstance(v, bool) and (low is None or v >= low)
                   and abs(v) <= MAX_INT)


def number(low: float | None = None, low_open: bool = False, high: float | None = None) -> Field:
    column = Column("", "float", "", low=low, low_open=low_open, high=high)
    return _simple(column.rule().removesuffix(", or empty"),
                   lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and column.problem(v) is None)


def one_of(*values: str) -> Field:
    return _simple("one of " + ", ".join(values), lambda v: isinstance(v, str) and v in values)


def nullable(inner: Field) -> Field:
    def test(value: Any, where: str) -> None:
        if value is not None:
            inner.check(value, where)
    return Field(f"{inner.what}, or null", test)


def list_of(item: Field) -> Field:
    def test(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise ValueError(where, f"a list of {item.what}", value)
        for i, v in enumerate(value):
            item.check(v, f"{where}[{i}]")
    return Field(f"a list of {item.what}", test)


def mapping(item: Field) -> Field:
    """An object of any names, each value ``item``."""
    def test(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise ValueError(where, f"an object of {item.what}", value)
        for k, v in value.items():
            item.check(v, f"{where}.{k}" if where else k)
    return Field(f"an object of {item.what}", test)


def record(required: dict[str, Field], optional: dict[str, Field] | None = None, others: bool = True) -> Field:
    """An object with the ``required`` fields and maybe the ``optional`` ones (``others``: other
    names allowed, unchecked; a newer normbench may add fields)."""
    optional = optional or {}

    def test(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise ValueError(where, "an object", value)
        for name in required:
            if name not in value:
                raise ValueError(f"{where}.{name}" if where else name, "present", _MISSING)
        if not others:
            extra = [k for k in value if k not in required and k not in optional]
            if extra:
                raise ValueError(f"{where}.{extra[0]}" if where else extra[0], "absent (not a field here)", value[extra[0]])
        for name, spec in {**required, **optional}.items():
            if name in value:
                spec.check(value[name], f"{where}.{name}" if where else name)
    return Field("an object", test)


_MISSING = object()


def check_document(document: Any, spec: Field, source: str, fix: str) -> None:
    """Check ``document`` against ``spec``; the first problem is one ResultsError: ``source``, the field, the fix."""
    try:
        spec.check(document, "")
    except ValueError as exc:
        where, what, value = exc.args
        where = clip(where)  # a field's path holds names from the file
        if value is _MISSING:
            raise ResultsError(f"{source}: field {where} is missing. Fix: {fix}") from None
        raise ResultsError(f"{source}: {f'field {where}' if where else 'the document'} is {_shown(value)}, "
                           f"not {what}. Fix: {fix}") from None


def read_json_version(path: Path, fix: str) -> Any:
    """The ``schema_version`` a JSON document at ``path`` says it has (None when it says none)."""
    document = _read_json(path, fix)
    return document.get("schema_version") if isinstance(document, dict) else None


def read_document(path: Path, schema: str, version: int, spec: Field, fix: str) -> dict[str, Any]:
    """A JSON document of ``schema`` and ``version`` at ``path``, checked against ``spec``."""
    document = _read_json(path, fix)
    if not isinstance(document, dict) or document.get("schema") != schema:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{path} is not a {schema} file (its schema is {quoted(found)})")
    found = document.get("schema_version")
    if isinstance(found, bool) or found != version:
        raise ResultsError(f"{path} has {schema} schema version {quoted(found)}; this normbench reads version {version}. "
                           f"Fix: upgrade normbench, or re-run the measurement")
    check_document(document, spec, str(path), fix)
    return document
