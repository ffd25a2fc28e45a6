"""Results on disk: a versioned schema, written incrementally, validated at load, merged with pandas.

A run folder (``reports/<run-id>/``, one writer at a time: :mod:`normbench.core.run_folder`) holds:

* ``throughput.csv`` and ``throughput.json``: one row per measured case (the
  columns below).
* ``conformance.csv`` and ``conformance.json``: one row per conformance test
  of a ``normbench run`` (backend, test, case, outcome, message, and the properties
  beyond tolerance it measured: deterministic, batch-invariant; for a forward test, its
  error's histogram in ulps and its coherence statistics; schema version 2).
* ``environment.json``: the machine, libraries, commit, command, the measured
  ceilings and the run's status (:mod:`normbench.core.environment`).

Two more schemas describe counts, not runs, written as CSV only by
:func:`write_csv`: ``traffic.csv`` (:data:`TRAFFIC`, ``normbench traffic``: bytes
a Triton backend's launches move, counted in the interpreter with a GPU's launch
configuration) and ``kernels-sm90.csv``, ``kernels-sm80.csv``, ...
(:data:`KERNEL_STATS`, ``normbench kernel-stats``: registers, spills, occupancy,
access widths of the compiled kernels). Neither holds a speed. :func:`load` reads
them like the others (a folder's ``kernels-*.csv`` together).

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
rules a whole row obeys (:data:`ROW_RULES`), the schema version of the file
and of every row; a missing, unknown or malformed field is one
:class:`ResultsError` naming the file, the row and the field. An empty file
(0 rows) is an empty frame with the schema's columns. A folder holding both
files compares them: equal, the JSON is read; the CSV journal holding the JSON's
rows and more (the run stopped before its last JSON snapshot), the CSV is read
and a note says so; otherwise the folder is refused, saying which file holds
what. A journal whose last line is incomplete (a run killed mid-write) is read
without that line, with a note. Notes are in ``df.attrs["notes"]`` (:func:`notes`).

Every JSON file is ``{"schema": ..., "schema_version": N, ..., "rows": [...]}``;
every CSV row carries ``schema_version``. Never pickle. :func:`load` accepts a
folder or either file, migrates an older version through :data:`MIGRATIONS` or
refuses it with the reason; :func:`merge` concatenates runs from any machines.

Example::

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with ResultsWriter(folder, run_id="r1") as writer:
    ...     writer.add(new_row(run_id="r1", backend="numpy", direction="forward", dtype="float32", rows=4,
    ...                        hidden=8, bytes=256, verdict="error", message="RuntimeError: out of memory"))
    >>> load(folder)[["backend", "direction", "verdict"]].to_dict("records")
    [{'backend': 'numpy', 'direction': 'forward', 'verdict': 'error'}]
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.core import operations
from normbench.core.exceptions import NormbenchError
from normbench.core.files import append_whole, write_atomic

#: the normalizations a row may name
NORM_NAMES = operations.NAMES

if TYPE_CHECKING:
    import pandas as pd

#: the traffic and kernel-stats schemas' version; each schema's own is :data:`VERSIONS`
SCHEMA_VERSION = 1
#: the throughput schema's version: 2 added ``normalization`` (RMSNorm); version 1 files are migrated
#: (:data:`MIGRATIONS`) as LayerNorm's, the only normalization normbench measured then
THROUGHPUT_VERSION = 2
THROUGHPUT = "normbench.throughput"
CONFORMANCE = "normbench.conformance"
#: the conformance schema's version: 2 added the properties beyond tolerance (deterministic, batch_invariant,
#: property_notes) and the structure of the forward error (error_histogram, nearest_histogram, coherence_*);
#: version 1 files are migrated (:data:`MIGRATIONS`), all of these "not measured" (empty); 3 added
#: ``normalization`` (RMSNorm), migrated from the case id (every earlier case is LayerNorm's)
CONFORMANCE_VERSION = 3


class ResultsError(NormbenchError):
    """A results file that is missing, malformed, not normbench's, of a schema version this normbench
    cannot read, or that cannot be written; the message names the file and the fix."""


#: no device moves a petabyte per second: a larger speed is a broken row
MAX_GBPS = 1e6
#: a correct row stays near its ceiling (normbench.perf.throughput.ABOVE_CEILING_MARGIN); far above is broken
MAX_PERCENT = 1e6
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


SECONDS: dict[str, Any] = {"low": 0.0, "high": 1e6}
SPEED: dict[str, Any] = {"low": 0.0, "high": MAX_GBPS}

#: a conformance row's outcomes, in the order the report shows them, and those that fail a backend
CRASHED, TIMEOUT, NOT_RUN = "crashed", "timeout", "not run"
OUTCOMES = ("passed", "failed", "error", CRASHED, TIMEOUT, "xfailed", "xpassed", "skipped", NOT_RUN)
FAILING = ("failed", "error", CRASHED, TIMEOUT, "xpassed")
#: a throughput row's verdicts: only ``ok`` is a speed
VERDICTS = ("ok", "wrong-before", "wrong-after", "above-ceiling", "error", CRASHED, TIMEOUT)

#: the throughput schema, version 2: one row per (backend, case, direction)
THROUGHPUT_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (2)"),
    Column("run_id", "str", "the run this row belongs to (also the folder name)"),
    Column("time", "str", "when the row was measured, ISO 8601 UTC"),
    Column("host", "str", "the machine's host name"),
    Column("device", "str", "where the backend computed, as it reports it (e.g. cpu, cuda:0 (NVIDIA H100))"),
    Column("device_name", "str", "the CPU or GPU model"),
    Column("backend", "str", "the backend name (--impl)"),
    Column("backend_version", "str", "the version of the library it wraps"),
    Column("normalization", "str", "layer_norm or rms_norm (normbench.core.norms). Version 2", choices=NORM_NAMES),
    Column("direction", "str", "forward, backward or forward+backward"),
    Column("dtype", "str", "the dtype of x, y, dy and dx"),
    Column("param_dtype", "str", "the dtype of weight and bias"),
    Column("rows", "int", "M, the number of rows", low=1),
    Column("hidden", "int", "N, the normalized size", low=1),
    Column("shape", "str", "x's shape, ROWSxHIDDEN"),
    Column("case_id", "str", "the normbench.core.cases id of the case"),
    Column("seed", "int", "the seed of the inputs (normbench.core.cases.make_inputs)", low=0),
    Column("byte_model", "str", "forward-inference, backward or forward-training+backward (normbench.perf.roofline)"),
    Column("bytes", "int", "the bytes the byte model says the direction must move", low=1),
    Column("cache", "str", "cold (last-level cache flushed before every sample) or warm"),
    Column("timer", "str", "perf_counter_ns or cuda-events"),
    Column("calls_per_sample", "int", "calls averaged in one sample (1 with a cold cache)", low=0),
    Column("n", "int", "the number of samples", low=0),
    Column("median_s", "float", "median seconds per call", **SECONDS),
    Column("q1_s", "float", "first quartile, seconds", **SECONDS),
    Column("q3_s", "float", "third quartile, seconds", **SECONDS),
    Column("iqr_s", "float", "interquartile range, seconds", **SECONDS),
    Column("min_s", "float", "fastest sample, seconds", **SECONDS),
    Column("max_s", "float", "slowest sample, seconds", **SECONDS),
    Column("rel_spread", "float", "IQR / median", low=0.0, infinite_is_empty=True),
    Column("wide_spread", "bool", "rel_spread above normbench.perf.timing.WIDE_SPREAD: read the speed with care"),
    Column("gbps", "float", "bytes / median / 1e9; empty unless verdict is ok", **SPEED),
    Column("ceiling_gbps", "float", "the device's copy bandwidth measured in this run", low=0.0,
           low_open=True, high=MAX_GBPS),
    Column("pct_of_ceiling", "float", "100 * gbps / ceiling_gbps; empty unless verdict is ok", low=0.0,
           high=MAX_PERCENT),
    Column("fits_in_cache", "bool", "bytes <= the last-level cache: cold timing matters most here"),
    Column("verdict", "str", "ok, wrong-before, wrong-after, above-ceiling or error (normbench.perf.throughput); "
                             "crashed or timeout when the case's process died or ran out of time", choices=VERDICTS),
    Column("message", "str", "why the verdict is not ok, and any note on an ok row"),
)

#: a property's verdict in a conformance row: measured and held, measured and violated, or not measured
PROPERTY_VERDICTS = ("yes", "no", "")

#: the error histograms' bins (conformance columns ``error_histogram`` and ``nearest_histogram``): HISTOGRAM_BINS
#: bins of HISTOGRAM_WIDTH ulp, centred on 0 (the middle bin holds the errors within 1/16 ulp of 0, exact results
#: included, so a symmetric distribution gives a symmetric histogram), covering +-HISTOGRAM_BINS*HISTOGRAM_WIDTH/2 ulp
HISTOGRAM_BINS, HISTOGRAM_WIDTH = 33, 0.125
#: the most bins a histogram column may have (a newer normbench may choose other bins; the report sums like with like)
MAX_HISTOGRAM_BINS = 1025


@dataclass(frozen=True)
class Histogram:
    """Counts of values in ``len(counts)`` (odd) bins of ``width``, centred on 0, plus those below (``under``)
    and above (``over``) them. Its text, a conformance column's value: ``b=33x0.125;u=0;o=2;c=0,...,0``.

    >>> h = Histogram.parse("b=3x0.5;u=1;o=0;c=2,5,0")
    >>> h.edges(), h.total, str(h)
    ((-0.75, 0.75), 8, 'b=3x0.5;u=1;o=0;c=2,5,0')
    >>> Histogram.problem("b=3x0.5;u=1;o=0;c=2,5")
    'c has 2 counts, b says 3 bins'
    """

    width: float
    under: int
    over: int
    counts: tuple[int, ...]

    def __str__(self) -> str:
        return (f"b={len(self.counts)}x{self.width:g};u={self.under};o={self.over};"
                f"c={','.join(map(str, self.counts))}")

    def edges(self) -> tuple[float, float]:
        half = len(self.counts) * self.width / 2
        return -half, half

    @property
    def total(self) -> int:
        return self.under + self.over + sum(self.counts)

    def same_bins(self, other: Histogram) -> bool:
        return self.width == other.width and len(self.counts) == len(other.counts)

    def __add__(self, other: Histogram) -> Histogram:
        if not self.same_bins(other):
            raise ValueError(f"cannot add histograms of other bins ({self} and {other})")
        return Histogram(self.width, self.under + other.under, self.over + other.over,
                         tuple(a + b for a, b in zip(self.counts, other.counts)))

    @staticmethod
    def problem(text: str) -> str | None:
        """What is wrong with ``text`` as a histogram, or None."""
        parts = text.split(";")
        keys = [p.partition("=")[0] for p in parts]
        if keys != ["b", "u", "o", "c"] or not all("=" in p for p in parts):
            return "not b=BINSxWIDTH;u=UNDER;o=OVER;c=COUNT,... (these four fields, in this order)"
        fields = {k: p.partition("=")[2] for k, p in zip(keys, parts)}
        bins, x, width = fields["b"].partition("x")
        if not (x and bins.isdigit() and int(bins) % 2 == 1 and 1 <= int(bins) <= MAX_HISTOGRAM_BINS):
            return f"b must be BINSxWIDTH with an odd number of bins, at most {MAX_HISTOGRAM_BINS} (got {fields['b']!r})"
        try:
            w = float(width)
        except ValueError:
            w = math.nan
        if not (math.isfinite(w) and w > 0):
            return f"the bin width in b must be a finite number > 0 (got {width!r})"
        for key in ("u", "o"):
            if not fields[key].isdigit():
                return f"{key} must be a count, an integer >= 0 (got {fields[key]!r})"
        counts = fields["c"].split(",")
        if not all(c.isdigit() for c in counts):
            return "c must be counts, integers >= 0 separated by commas"
        if len(counts) != int(bins):
            return f"c has {len(counts)} counts, b says {int(bins)} bins"
        if any(int(c) > MAX_INT for c in counts + [fields["u"], fields["o"]]):
            return "a count is beyond a 64-bit integer"
        return None

    @classmethod
    def parse(cls, text: str) -> Histogram:
        """``text`` as a Histogram, or ValueError saying what is wrong with it."""
        wrong = cls.problem(text)
        if wrong:
            raise ValueError(wrong)
        fields = dict(p.split("=", 1) for p in text.split(";"))
        return cls(float(fields["b"].partition("x")[2]), int(fields["u"]), int(fields["o"]),
                   tuple(int(c) for c in fields["c"].split(",")))


HISTOGRAM_FORM = ("a histogram b=BINSxWIDTH;u=UNDER;o=OVER;c=COUNT,... (odd BINS, WIDTH > 0, BINS counts)",
                  Histogram.problem)
#: a coherence statistic's worst |value|/allowance (1: at the allowance; above: the test fails)
RATIO: dict[str, Any] = {"low": 0.0}

#: the conformance schema, version 3: one row per test of a ``normbench run``
CONFORMANCE_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (3)"),
    Column("run_id", "str", "the run this row belongs to"),
    Column("backend", "str", "the backend name"),
    Column("suite", "str", "the suite file, e.g. test_forward.py"),
    Column("test", "str", "the test function"),
    Column("case", "str", "the case id (the test id without the backend)"),
    Column("normalization", "str", "layer_norm or rms_norm, the case's normalization (normbench.core.norms; an RMSNorm "
                                   "case id starts with rms-); layer_norm for a test without a case. Version 3",
           choices=NORM_NAMES),
    Column("nodeid", "str", "the pytest node id relative to the suites, `suites/test_forward.py::test_forward[...]`, "
                            "whether they ran from a checkout or an installation"),
    Column("outcome", "str", "pytest's passed, failed, skipped, error, xfailed/xpassed (a known deviation); or crashed "
                             "(the test's process died), timeout (it ran past --normbench-timeout), not run (the run was "
                             "interrupted, or the backend stopped after crashing)", choices=OUTCOMES),
    Column("message", "str", "the failure's first line or the skip reason"),
    Column("deterministic", "str", "the property deterministic, as this test measured it: yes (the same input twice "
                                   "gave the same bits), no, or empty (not measured: another test, or it failed "
                                   "before measuring). Version 2", choices=PROPERTY_VERDICTS),
    Column("batch_invariant", "str", "the property batch-invariant: yes (each row checked had the same bits "
                                     "computed alone and at another position of a smaller batch), no, or empty "
                                     "(not measured). Version 2", choices=PROPERTY_VERDICTS),
    Column("property_notes", "str", "what differed, for each property that is no: 'batch-invariant: row 0 computed "
                                    "alone differs ...', properties separated by ' | '. Version 2"),
    Column("error_histogram", "str", "test_forward, float16, bfloat16 and float32 outputs: y's error against the "
                                     "float64 oracle, over its finite elements, signed toward zero and in ulps of the "
                                     "output dtype at the reference, (y - y_ref)*sign(y_ref)/ulp(y_ref) (negative: "
                                     "|y| too small, as truncation makes it), as a histogram "
                                     "b=BINSxWIDTH;u=UNDER;o=OVER;c=COUNT,...: BINS bins of WIDTH ulp centred on 0 "
                                     "(33x0.125: -2.0625 to 2.0625 ulp), u and o the elements below and above them; "
                                     "empty when not measured. Version 2", form=HISTOGRAM_FORM),
    Column("nearest_histogram", "str", "the same histogram, of the same elements, for the reference rounded once to "
                                       "nearest in the output dtype: what a correct round-to-nearest kernel gives at "
                                       "best. Version 2", form=HISTOGRAM_FORM),
    Column("coherence_scale", "float", "test_forward: the worst |statistic|/allowance of y's per-row scale (and of the "
                                       "scales' slope across rows) of normbench.check.coherence; above 1 fails; empty "
                                       "when the statistic does not apply (fp32/fp64 outputs, short rows) or was not "
                                       "measured. Version 2", **RATIO),
    Column("coherence_offset", "float", "the same, for the per-row offset. Version 2", **RATIO),
    Column("coherence_toward_zero", "float", "the same, for the case's rounding bias toward zero. Version 2", **RATIO),
    Column("coherence_downward", "float", "the same, for the case's rounding bias downward. Version 2", **RATIO),
)

#: traffic rows count bytes, they do not time them: directions and byte models the counter covers
TRAFFIC_DIRECTIONS = ("forward", "backward")
#: the dtypes a traffic or kernel-stats row may name (normbench.core.dtypes.DTYPES, spelled out: core imports no ml_dtypes here)
COUNTED_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: no kernel worth publishing moves a thousand times the byte model: a larger ratio is a broken row
MAX_TRAFFIC_RATIO = 1000.0
#: the widest global access one PTX instruction makes (a v4 of 64-bit values), bytes
MAX_ACCESS_BYTES = 32

#: the traffic schema, version 1: one row per (backend, shape, dtype, direction) of ``normbench traffic``
#: (normbench.perf.traffic): bytes counted in the Triton interpreter with a GPU's launch configuration, never a speed
TRAFFIC_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("backend", "str", "the backend whose Triton kernels were counted (--impl)"),
    Column("normalization", "str", "what the kernels compute (layernorm)"),
    Column("direction", "str", "forward or backward", choices=TRAFFIC_DIRECTIONS),
    Column("dtype", "str", "the dtype of x, y, dy and dx (weight and bias too)", choices=COUNTED_DTYPES),
    Column("rows", "int", "M, the number of rows", low=1),
    Column("hidden", "int", "N, the normalized size", low=1),
    Column("gpu", "str", "the GPU whose launch configuration the kernels were given (normbench.perf.traffic.GPUS)"),
    Column("sm_count", "int", "that GPU's SM count, as the launch heuristics saw it", low=1),
    Column("byte_model", "str", "forward-inference or backward (normbench.perf.roofline)",
           choices=("forward-inference", "backward")),
    Column("model_bytes", "int", "the bytes the byte model says the direction must move", low=1),
    Column("unique_bytes", "int", "distinct addresses read plus written, per launch, summed over launches: the DRAM "
                                  "traffic if every re-read inside a launch hits L1/L2 (modelled, not measured)", low=0),
    Column("requested_bytes", "int", "every unmasked lane of every load and store, re-reads included: what the kernels "
                                     "ask of L1", low=0),
    Column("ratio", "float", "unique_bytes / model_bytes, rounded to 5 decimals; never empty", low=0.0,
           high=MAX_TRAFFIC_RATIO),
    Column("requested_ratio", "float", "requested_bytes / model_bytes, rounded to 5 decimals; never empty", low=0.0,
           high=MAX_TRAFFIC_RATIO),
    Column("launches", "int", "kernel launches the direction made (a backward's repeat of the forward not counted)",
           low=1),
    Column("kernels", "str", "the launched kernels' names, in order, joined by +"),
    Column("programs_run", "int", "programs the interpreter ran (the rest extrapolated, checked on program 2)", low=1),
    Column("programs_total", "int", "programs of every launch's grid", low=1),
    Column("breakdown", "str", "per kernel argument: kernel.ARG:unique reads r + unique writes w, each / model_bytes"),
)

#: the kernel-stats schema, version 1: one row per launch of ``normbench kernel-stats`` (normbench.perf.kernel_stats):
#: compiler output and occupancy estimates for a GPU, without one; never a speed
KERNEL_STATS_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("kernel", "str", "the Triton kernel's name"),
    Column("label", "str", "the kernel with its dtypes, N, warps and constexpr configuration"),
    Column("dtype", "str", "the dtype of x of the case launching it", choices=COUNTED_DTYPES),
    Column("rows", "int", "M, the number of rows of the case", low=1),
    Column("hidden", "int", "N, the normalized size of the case", low=1),
    Column("gpu", "str", "the GPU whose limits and SM count the estimate uses"),
    Column("arch", "str", "the compile target, sm_XY"),
    Column("num_warps", "int", "warps per CTA (program)", low=1, high=32),
    Column("programs", "int", "programs the launch's grid holds", low=1),
    Column("registers", "int", "registers per thread (ptxas -v)", low=0, high=255),
    Column("spill_bytes", "int", "spill stores plus spill loads, bytes (ptxas -v)", low=0),
    Column("shared_bytes", "int", "shared memory per CTA, bytes (Triton's metadata)", low=0, high=1 << 20),
    Column("ctas_per_sm", "int", "CTAs that fit on one SM by registers, threads, CTAs and shared memory", low=0,
           high=32),
    Column("capacity_warps", "int", "ctas_per_sm * num_warps: warps per SM the resources allow", low=0, high=64),
    Column("resident_warps", "int", "warps per SM in flight, also capped by the programs the grid gives each SM",
           low=0, high=64),
    Column("limited_by", "str", "what limits the resident CTAs: registers, threads, ctas, shared memory or grid",
           choices=("registers", "threads", "ctas", "shared memory", "grid")),
    Column("load_widths", "str", "ld.global instructions by bytes per thread, widest first: 16B:3 4B:2"),
    Column("store_widths", "str", "st.global instructions by bytes per thread, widest first"),
    Column("widest_load", "int", "the widest ld.global, bytes per thread (0: none)", low=0, high=MAX_ACCESS_BYTES),
    Column("widest_store", "int", "the widest st.global, bytes per thread (0: none)", low=0, high=MAX_ACCESS_BYTES),
)

TRAFFIC = "normbench.traffic"
KERNEL_STATS = "normbench.kernel_stats"
SCHEMAS: dict[str, tuple[Column, ...]] = {THROUGHPUT: THROUGHPUT_COLUMNS, CONFORMANCE: CONFORMANCE_COLUMNS,
                                          TRAFFIC: TRAFFIC_COLUMNS, KERNEL_STATS: KERNEL_STATS_COLUMNS}
#: schema -> the version this normbench writes (and migrates older files to)
VERSIONS: dict[str, int] = {THROUGHPUT: THROUGHPUT_VERSION, CONFORMANCE: CONFORMANCE_VERSION, TRAFFIC: SCHEMA_VERSION,
                            KERNEL_STATS: SCHEMA_VERSION}
#: schema -> the stem of its files; a kernel-stats file is one per compile target, ``kernels-sm90.csv``
FILES: dict[str, str] = {THROUGHPUT: "throughput", CONFORMANCE: "conformance", TRAFFIC: "traffic",
                         KERNEL_STATS: "kernels"}
#: the names of the results files a run folder may hold (a folder holding one holds a run's results)
RESULT_FILES: tuple[str, ...] = tuple(f"{FILES[s]}.{ext}" for s in (THROUGHPUT, CONFORMANCE)
                                      for ext in ("csv", "json", "csv.gz"))
#: the files of counts and static estimates (``normbench traffic``, ``normbench kernel-stats``): CSV only, and
#: not a run's results (a run folder may sit beside them); kernel-stats files match :data:`KERNEL_STATS_PATTERN`
TRAFFIC_FILE = "traffic.csv"
KERNEL_STATS_PATTERN = "kernels-*.csv"


def counts_files(folder: str | os.PathLike) -> list[Path]:
    """The traffic and kernel-stats files in ``folder``, traffic first, kernel stats by name."""
    folder = Path(folder)
    found = [folder / TRAFFIC_FILE] if (folder / TRAFFIC_FILE).is_file() else []
    return found + sorted(p for p in folder.glob(KERNEL_STATS_PATTERN) if p.is_file())


def schema_of_counts_file(path: str | os.PathLike) -> str | None:
    """:data:`TRAFFIC` or :data:`KERNEL_STATS` for a file named like one, else None."""
    path = Path(path)
    if path.name == TRAFFIC_FILE:
        return TRAFFIC
    if path.match(KERNEL_STATS_PATTERN):
        return KERNEL_STATS
    return None


def _ok_row_is_a_speed(row: dict[str, Any]) -> str | None:
    if row["verdict"] != "ok":
        return None
    for name in ("gbps", "median_s", "ceiling_gbps", "pct_of_ceiling"):
        if row[name] is None or not row[name] > 0:
            return f"a row with verdict ok needs {name} > 0 (got {'empty' if row[name] is None else repr(row[name])})"
    return None


def _ratios_are_the_counts(row: dict[str, Any]) -> str | None:
    for name, part in (("ratio", "unique_bytes"), ("requested_ratio", "requested_bytes")):
        exact = row[part] / row["model_bytes"]
        if row[name] is None:
            return f"field {name} is empty; it must be {part} / model_bytes ({exact:.5f})"
        if abs(row[name] - exact) > 6e-6:  # rounded to 5 decimals, nothing more
            return (f"field {name} is {row[name]!r}, but {part} / model_bytes is {exact:.5f} ({row[part]} / "
                    f"{row['model_bytes']}): the counts and the ratio disagree")
    return None


def _requested_covers_unique(row: dict[str, Any]) -> str | None:
    if row["requested_bytes"] < row["unique_bytes"]:
        return (f"requested_bytes ({row['requested_bytes']}) is below unique_bytes ({row['unique_bytes']}): every "
                f"unique byte is requested at least once")
    if row["programs_run"] > row["programs_total"]:
        return f"programs_run ({row['programs_run']}) exceeds programs_total ({row['programs_total']})"
    if row["byte_model"] != ("forward-inference" if row["direction"] == "forward" else "backward"):
        return f"byte_model {row['byte_model']} is not the byte model of direction {row['direction']}"
    return None


def _widths(text: str) -> dict[int, int] | None:
    """``"16B:3 4B:2"`` as {16: 3, 4: 2}; None if it is not that form."""
    out = {}
    for part in text.split():
        width, colon, count = part.partition("B:")
        if not (colon and width.isdigit() and count.isdigit()):
            return None
        out[int(width)] = int(count)
    return out


def _stats_agree(row: dict[str, Any]) -> str | None:
    if not (row["arch"].startswith("sm_") and row["arch"][3:].isdigit()):
        return f"field arch is {row['arch']!r}, not sm_ and a compute capability x10 (sm_90)"
    if row["capacity_warps"] != row["ctas_per_sm"] * row["num_warps"]:
        return (f"capacity_warps ({row['capacity_warps']}) is not ctas_per_sm * num_warps "
                f"({row['ctas_per_sm']} * {row['num_warps']})")
    if row["resident_warps"] > row["capacity_warps"]:
        return f"resident_warps ({row['resident_warps']}) exceeds capacity_warps ({row['capacity_warps']})"
    for kind in ("load", "store"):
        widths = _widths(row[f"{kind}_widths"])
        if widths is None:
            return f"field {kind}_widths is {row[f'{kind}_widths']!r}, not WIDTHB:COUNT items (16B:3 4B:2)"
        if max(widths, default=0) != row[f"widest_{kind}"]:
            return (f"field widest_{kind} is {row[f'widest_{kind}']}, but the widest of {kind}_widths is "
                    f"{max(widths, default=0)}")
    return None


#: schema -> checks of a whole row (its values already parsed: floats may be None): each returns what is wrong, or None
ROW_RULES: dict[str, tuple[Callable[[dict[str, Any]], str | None], ...]] = {
    THROUGHPUT: (_ok_row_is_a_speed,), CONFORMANCE: (),
    TRAFFIC: (_requested_covers_unique, _ratios_are_the_counts), KERNEL_STATS: (_stats_agree,),
}

#: (schema, version) -> a function turning a frame of that version into the next version.
#: Version 1 is each schema's first; a later version adds its step here (conformance 1 -> 2 below).
MIGRATIONS: dict[tuple[str, int], Callable[[pd.DataFrame], pd.DataFrame]] = {
    # conformance 1 -> 2: the properties beyond tolerance and the error's structure were not recorded: not measured
    (CONFORMANCE, 1): lambda df: df.assign(deterministic="", batch_invariant="", property_notes="", error_histogram="",
                                           nearest_histogram="", coherence_scale=None, coherence_offset=None,
                                           coherence_toward_zero=None, coherence_downward=None),
    # conformance 2 -> 3 and throughput 1 -> 2: the normalization, LayerNorm for every earlier case
    (CONFORMANCE, 2): lambda df: df.assign(normalization=[operations.of_case_id(str(c)).name for c in df["case"]]),
    (THROUGHPUT, 1): lambda df: df.assign(normalization="layer_norm"),
}

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
                raise ValueError(f"is {_shown(value)}: {wrong}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if kind == "bool":
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ValueError(f"is {value!r}, not true or false")
        if kind == "float" and text == "":
            return None
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise ValueError(f"is {value!r}, not {'an integer' if kind == 'int' else 'a number'}") from None
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
            raise ValueError(f"is {value}, beyond a 64-bit integer")
    else:
        value = float(value)
    low, high = column.low, column.high
    if low is not None and (value < low or column.low_open and value == low) or high is not None and value > high:
        raise ValueError(f"is {value!r}, not {column.rule()}")
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (bool, type(None), int, float, str)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def new_row(schema: str = THROUGHPUT, **values: Any) -> dict[str, Any]:
    """A complete row of ``schema``: ``values`` plus empty defaults; unknown names are an error."""
    columns = SCHEMAS[schema]
    unknown = set(values) - {c.name for c in columns}
    if unknown:
        raise ValueError(f"not columns of {schema}: {', '.join(sorted(unknown))}")
    row = {c.name: _EMPTY[c.kind] for c in columns}
    row["schema_version"] = VERSIONS[schema]
    if "normalization" in row:  # unless given, the case id's (LayerNorm for a row without a case)
        row["normalization"] = operations.of_case_id(str(values.get("case") or values.get("case_id") or "")).name
    row.update(values)
    return row


def frame(rows: Iterable[dict[str, Any]], schema: str = THROUGHPUT) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's columns, in order, with their dtypes (not validated:
    :func:`load` validates what it reads, :class:`ResultsWriter` what it writes)."""
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


def notes(df: pd.DataFrame) -> list[str]:
    """What :func:`load` noticed while reading ``df`` and a reader should be told (a journal's
    incomplete last line left out, the CSV read because the JSON lagged behind); usually none."""
    return list(df.attrs.get("notes", []))


def _document(schema: str, rows: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
    return json.dumps({"schema": schema, "schema_version": VERSIONS[schema], **(extra or {}),
                       "columns": {c.name: c.doc for c in SCHEMAS[schema]}, "rows": rows},
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


def _file_name(schema: str, ext: str = "csv") -> str:
    """How ``schema``'s files are named, for messages: ``throughput.csv``, ``kernels-sm90.csv``."""
    return f"{FILES[schema]}-sm90.{ext}" if schema == KERNEL_STATS else f"{FILES[schema]}.{ext}"


def write_csv(path: str | os.PathLike, rows: Iterable[dict[str, Any]], schema: str) -> Path:
    """``rows`` of ``schema`` (dicts of its columns; ``schema_version`` added when absent) as one CSV file,
    validated like a loaded file and written whole (no JSON beside it: the traffic and kernel-stats tables
    are CSV); gzip-compressed where ``path`` ends in ``.gz`` (a published survey's ``conformance.csv.gz``,
    which :func:`load` reads, and a folder's ``<name>.csv.gz`` where it has no ``.csv`` or ``.json``). A row
    that breaks the schema is one ResultsError naming the row and the field, before anything is written."""
    path = Path(path)
    rows = [{"schema_version": VERSIONS[schema], **row} for row in rows]
    clean = _validated_rows(rows, schema, f"the {schema} rows to write to {path}",
                            "this is a normbench bug: please report it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = _csv_text(clean, SCHEMAS[schema], header=True)
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


def save(folder: str | os.PathLike, df: pd.DataFrame, schema: str = THROUGHPUT,
         extra: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``df`` (validated like a loaded file) as ``<folder>/<name>.csv`` and ``.json``, each whole,
    replacing them; returns both paths. ``df`` may have no rows."""
    folder = Path(folder)
    name = FILES[schema]
    csv_path, json_path = folder / f"{name}.csv", folder / f"{name}.json"
    rows = _validated_rows(records(_coerce(df, SCHEMAS[schema])), schema, f"the {name} rows to save in {folder}",
                           "this is a normbench bug: please report it")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(csv_path, _csv_text(rows, SCHEMAS[schema], header=True))
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

    def __init__(self, folder: str | os.PathLike, run_id: str, schema: str = THROUGHPUT) -> None:
        self.folder = Path(folder)
        self.run_id = run_id
        self.schema = schema
        self.columns = SCHEMAS[schema]
        name = FILES[schema]
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
        the field, before anything is written."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise ResultsError(f"{self.csv_path}: the writer is closed; open a new ResultsWriter to add rows")
        row = {k: _json_value(v) for k, v in row.items()}  # as JSON has it: an infinite spread (median 0) is empty
        (clean,) = _validated_rows([row], self.schema, f"the {FILES[self.schema]} row to write to {self.csv_path}",
                                   "this is a normbench bug: please report it", first=len(self.rows) + 1)
        now = time.monotonic()
        sync = now - self._last_sync >= self.SYNC_EVERY_S
        self._try(lambda: append_whole(self.csv_path, _csv_text([clean], self.columns, header=False), sync=sync),
                  self.csv_path, row=len(self.rows) + 1)
        if sync:
            self._last_sync = now
        self.rows.append(clean)
        if now - self._last_json >= max(self.JSON_EVERY_S, 20 * self._json_seconds):
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


def _readable(schema: str, version: int, source: str) -> None:
    """Refuse a version this normbench cannot read: newer, or older without a migration path."""
    if version > VERSIONS[schema]:
        raise ResultsError(f"{source} has {schema} schema version {version}, newer than this normbench reads "
                           f"({VERSIONS[schema]}). Fix: upgrade normbench to read it")
    for step in range(version, VERSIONS[schema]):
        if (schema, step) not in MIGRATIONS:
            raise ResultsError(f"{source} has {schema} schema version {version}, which this normbench cannot "
                               f"migrate to version {VERSIONS[schema]}. Fix: re-run the measurement, or load it with "
                               f"the normbench version that wrote it")


def _migrate(df: pd.DataFrame, schema: str, version: int, source: str) -> pd.DataFrame:
    _readable(schema, version, source)
    while version < VERSIONS[schema]:
        df, version = MIGRATIONS[(schema, version)](df), version + 1
    for c in SCHEMAS[schema]:  # an older CSV's empty fields were read as None: a string column's empty is ""
        if c.kind == "str" and c.name in df:
            df[c.name] = df[c.name].where(df[c.name].notna(), "")
    return df


def _validated_rows(rows: list[Any], schema: str, source: str, fix: str, first: int = 1,
                    lines: list[int] | None = None) -> list[dict[str, Any]]:
    """Every row checked against ``schema`` (fields, kinds, ranges, :data:`ROW_RULES`) and parsed;
    the first problem is a ResultsError naming ``source``, the row (1-based, from ``first``; or its
    CSV line) and the field."""
    columns = SCHEMAS[schema]
    names = [c.name for c in columns]
    out = []
    for i, row in enumerate(rows):
        where = f"{source}, {f'line {lines[i]}' if lines else f'row {first + i}'}"
        if not isinstance(row, dict):
            raise ResultsError(f"{where} is {_shown(row)}, not an object of fields. Fix: {fix}")
        missing = [n for n in names if n not in row]
        unknown = [str(n) for n in row if n not in names]
        if missing or unknown:
            said = "; ".join(part for part in (f"lacks the fields {', '.join(missing)}" if missing else "",
                                               f"has fields not in {schema} version {VERSIONS[schema]}: "
                                               f"{', '.join(unknown)}" if unknown else "") if part)
            raise ResultsError(f"{where} {said}. Fix: {fix}")
        clean = {}
        for c in columns:
            try:
                clean[c.name] = parse_value(c, row[c.name])
            except ValueError as exc:
                raise ResultsError(f"{where}: field {c.name} {exc} (it must be {c.rule()}). Fix: {fix}") from None
        if clean["schema_version"] != VERSIONS[schema]:
            raise ResultsError(f"{where}: field schema_version is {clean['schema_version']}, but the file is "
                               f"version {VERSIONS[schema]}. Fix: {fix}")
        for rule in ROW_RULES[schema]:
            problem = rule(clean)
            if problem:
                raise ResultsError(f"{where}: {problem}. Fix: {fix}")
        out.append(clean)
    return out


def _rows_frame(rows: list[dict[str, Any]], schema: str, found: list[str]) -> pd.DataFrame:
    df = frame(rows, schema)
    df.attrs["notes"] = found
    return df


_FIX_FILE = "correct or remove that row (the file was edited, damaged or not written by normbench), or re-run the measurement"


def _version(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsError(f"{where} is {_shown(value)}, not an integer; the file was not written by normbench. "
                           f"Fix: point at a file normbench wrote")
    return value


def _read_json(path: Path, fix: str) -> Any:
    """The JSON value in ``path``; a file that cannot be read or parsed is one ResultsError."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ResultsError(f"cannot read {path}: its JSON is nested too deeply to be a normbench file. "
                           f"Fix: {fix}") from None
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None


def _load_json(path: Path, schema: str) -> pd.DataFrame:
    import pandas as pd

    document = _read_json(path, f"point at a {FILES[schema]}.json normbench wrote")
    if not isinstance(document, dict) or document.get("schema") != schema or "rows" not in document:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{path} is not a {schema} results file (its schema is {found!r}). "
                           f"Fix: point at a {FILES[schema]}.json or its run folder")
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
    if version != VERSIONS[schema]:
        if not all(isinstance(r, dict) for r in rows):
            raise ResultsError(f"{path}: rows must be objects of fields. Fix: {_FIX_FILE}")
        rows = records(_migrate(pd.DataFrame(rows), schema, version, str(path)).assign(schema_version=VERSIONS[schema]))
    return _rows_frame(_validated_rows(rows, schema, str(path), _FIX_FILE), schema, [])


def _csv_records(path: Path, text: str) -> tuple[list[list[str]], list[int], bool]:
    """The CSV's records, the line each starts on, and whether an incomplete last record was left out."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    reader = csv.reader(iter(lines), strict=True)
    found, starts, torn, start = [], [], not text.endswith("\n"), 1
    try:
        for record in reader:
            found.append(record)
            starts.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        if reader.line_num < len(lines):
            raise ResultsError(f"cannot read {path}, line {start}: {exc}. Fix: {_FIX_FILE}") from None
        torn = True  # the file ends inside a quoted field: its last record was cut
    else:
        if torn:
            found.pop()
            starts.pop()
    return found, starts, torn


def _load_csv(path: Path, schema: str) -> pd.DataFrame:
    import pandas as pd

    try:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip's BadGzipFile is an OSError
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if not text:
        raise ResultsError(f"cannot read {path}: it is empty (a normbench CSV has a header line even with no rows). "
                           f"Fix: point at a {_file_name(schema)} normbench wrote")
    records_, starts, torn = _csv_records(path, text)
    if not records_:
        raise ResultsError(f"cannot read {path}: its header line is incomplete. Fix: point at a "
                           f"{_file_name(schema)} normbench wrote")
    header, body, starts = records_[0], records_[1:], starts[1:]
    if "schema_version" not in header:
        raise ResultsError(f"{path} has no schema_version column: not a normbench {schema} CSV")
    if len(set(header)) != len(header):
        raise ResultsError(f"{path}: its header repeats a column. Fix: {_FIX_FILE}")
    for record, line in zip(body, starts):
        if len(record) != len(header):
            raise ResultsError(f"{path}, line {line} has {len(record)} fields, the header {len(header)}. Fix: {_FIX_FILE}")
    names = [c.name for c in SCHEMAS[schema]]
    version_of_header = body[0][header.index("schema_version")] if body else str(VERSIONS[schema])
    if version_of_header == str(VERSIONS[schema]) and sorted(header) != sorted(names):
        missing, unknown = [n for n in names if n not in header], [n for n in header if n not in names]
        said = "; ".join(part for part in (f"lacks the columns {', '.join(missing)}" if missing else "",
                                           f"has columns not in {schema} version {VERSIONS[schema]}: {', '.join(unknown)}"
                                           if unknown else "") if part)
        raise ResultsError(f"{path}: its header {said}. Fix: {_FIX_FILE}")
    rows = [dict(zip(header, record)) for record in body]
    versions = sorted({r["schema_version"] for r in rows})
    if len(versions) > 1 or not all(v.isdigit() for v in versions):
        raise ResultsError(f"{path} mixes or garbles schema versions ({', '.join(versions)}). "
                           f"Fix: load each run's file separately and merge() them")
    version = int(versions[0]) if versions else VERSIONS[schema]
    if version != VERSIONS[schema]:
        df = pd.DataFrame(rows, columns=header).replace({"": None})
        rows = records(_migrate(df, schema, version, str(path)).assign(schema_version=VERSIONS[schema]))
        starts = None
    found = [f"{path}: its last line is incomplete (the run stopped while writing it) and was left out; "
             f"{len(rows)} complete rows read"] if torn else []
    return _rows_frame(_validated_rows(rows, schema, str(path), _FIX_FILE, lines=starts), schema, found)


def _first_difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """Where the first ``len(a)`` rows of ``b`` differ from ``a`` ("row 3, field gbps"), or "" if they do not."""
    head = b.iloc[:len(a)].reset_index(drop=True)
    same = (a == head) | (a.isna() & head.isna())
    if same.all(axis=None):
        return ""
    row = int((~same).any(axis=1).to_numpy().argmax())
    return f"row {row + 1}, field {same.columns[(~same.iloc[row]).to_numpy().argmax()]}"


def _reconcile(folder: Path, schema: str) -> pd.DataFrame:
    """A folder holding both files: the JSON if they agree, the CSV journal if it holds the JSON's rows and more
    (with a note), else a ResultsError saying which holds what."""
    name = FILES[schema]
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


def load(path: str | os.PathLike, schema: str = THROUGHPUT) -> pd.DataFrame:
    """A run folder, or its ``.json`` or ``.csv`` file, as a validated DataFrame of the current schema.

    A folder with both files is read as the module doc says (they are compared); with one, from it.
    What a reader should be told is in :func:`notes`.
    """
    path = Path(path)
    name = FILES[schema]
    if path.is_dir() and schema == KERNEL_STATS:
        return _load_kernel_stats_folder(path)
    if path.is_dir():
        have = [p for p in (path / f"{name}.json", path / f"{name}.csv") if p.exists()]
        if len(have) == 2:
            return _reconcile(path, schema)
        if not have and (path / f"{name}.csv.gz").exists():  # a published folder's compressed table
            have = [path / f"{name}.csv.gz"]
        path = have[0] if have else path / f"{name}.json"
    if not path.exists():
        raise ResultsError(f"no results at {path}. Fix: give a run folder (reports/<run-id>) or one of its "
                           f"{name}.csv / .json files")
    return _load_json(path, schema) if path.suffix == ".json" else _load_csv(path, schema)



def _load_kernel_stats_folder(folder: Path) -> pd.DataFrame:
    """Every ``kernels-*.csv`` of ``folder`` (one per compile target), in name order, as one frame."""
    import pandas as pd

    paths = sorted(p for p in folder.glob(KERNEL_STATS_PATTERN) if p.is_file())
    if not paths:
        raise ResultsError(f"no kernel statistics in {folder} (no {KERNEL_STATS_PATTERN}). Fix: give a folder "
                           f"`normbench kernel-stats --out FOLDER/kernels-sm90.csv` wrote into, or one of its files")
    frames = [_load_csv(p, KERNEL_STATS) for p in paths]
    df = _coerce(pd.concat(frames, ignore_index=True), KERNEL_STATS_COLUMNS)
    df.attrs["notes"] = [n for f in frames for n in notes(f)]
    return df


def merge(sources: Iterable[str | os.PathLike | pd.DataFrame], schema: str = THROUGHPUT) -> pd.DataFrame:
    """Rows of several runs (folders, files or frames) in one DataFrame; exact duplicates dropped."""
    import pandas as pd

    frames = [_coerce(s, SCHEMAS[schema]) if isinstance(s, pd.DataFrame) else load(s, schema) for s in sources]
    if not frames:
        return frame([], schema)
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(ignore_index=True)
    return _coerce(merged, SCHEMAS[schema])


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
    normbench.core.results.ResultsError: environment.json: field gbps is 0, not a finite number > 0. Fix: re-run
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
        raise ResultsError(f"{path} is not a {schema} file (its schema is {found!r})")
    found = document.get("schema_version")
    if isinstance(found, bool) or found != version:
        raise ResultsError(f"{path} has {schema} schema version {found!r}; this normbench reads version {version}. "
                           f"Fix: upgrade normbench, or re-run the measurement")
    check_document(document, spec, str(path), fix)
    return document
