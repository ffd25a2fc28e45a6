"""What a conformance test's outcome records: the conformance results schema, the outcome vocabulary, and the
histogram type of its error columns.

A row per test of a ``normbench run`` (backend, test, case, outcome, message, the properties beyond tolerance it
measured, and for a forward test its error's histogram in ulps and its coherence statistics). The front writes
the rows (``normbench.front.runner.outcome_rows``); the report reads them; the storage mechanics are
``normbench.core.storage``'s. It lives in the check room, beside the checks whose verdicts it records, because
both its writer (the front) and its reader (the report) may import this room and not each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from normbench.core import case_ids, operations
from normbench.core.storage import MAX_INT, Column, Schema

#: a conformance row's outcomes, in the order the report shows them, and those that fail a backend
CRASHED, TIMEOUT, NOT_RUN = "crashed", "timeout", "not run"
OUTCOMES = ("passed", "failed", "error", CRASHED, TIMEOUT, "xfailed", "xpassed", "skipped", NOT_RUN)
FAILING = ("failed", "error", CRASHED, TIMEOUT, "xpassed")

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


def codes_text(exact: int, allowed: int, wrong: int) -> str:
    """A quantized output's code agreement as the ``codes`` column writes it.

    >>> codes_text(250, 5, 1), parse_codes("exact=250;allowed=5;wrong=1")
    ('exact=250;allowed=5;wrong=1', (250, 5, 1))
    """
    return f"exact={exact};allowed={allowed};wrong={wrong}"


def parse_codes(text: str) -> tuple[int, int, int]:
    """``(exact, allowed, wrong)`` from the ``codes`` column's text (ValueError saying why not)."""
    parts = dict(p.split("=", 1) for p in text.split(";") if "=" in p)
    try:
        values = tuple(int(parts[k]) for k in ("exact", "allowed", "wrong"))
    except (KeyError, ValueError):
        raise ValueError(f"is {text!r}, not exact=E;allowed=A;wrong=W") from None
    if min(values) < 0 or len(parts) != 3:
        raise ValueError(f"is {text!r}, not exact=E;allowed=A;wrong=W with counts >= 0")
    return values


def _codes_problem(text: str) -> str | None:
    try:
        parse_codes(text)
    except ValueError as exc:
        return str(exc)
    return None


CODES_FORM = ("exact=E;allowed=A;wrong=W (counts)", _codes_problem)

#: the conformance schema, version 4: one row per test of a ``normbench run``
CONFORMANCE_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (4)"),
    Column("run_id", "str", "the run this row belongs to"),
    Column("backend", "str", "the backend name"),
    Column("suite", "str", "the suite file, e.g. test_forward.py"),
    Column("test", "str", "the test function"),
    Column("case", "str", "the case id (the test id without the backend)"),
    Column("normalization", "str", "layer_norm or rms_norm, the case's normalization (normbench.core.operations; an RMSNorm "
                                   "case id starts with rms-); layer_norm for a test without a case. Version 3",
           choices=operations.NAMES),
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
    Column("codes", "str", "test_forward of a quantized output (docs/quantized.md): its codes as exact=E;allowed=A;"
                           "wrong=W, how many are the exact quantization of y_exact / scale (a dynamic case's: by the "
                           "kernel's own scales), how many another code a correct kernel may return (within the "
                           "window of a rounding boundary), how many neither; empty for every other test. Version 4",
           form=CODES_FORM),
)


#: the conformance schema's version: 2 added the properties beyond tolerance (deterministic, batch_invariant,
#: property_notes) and the structure of the forward error (error_histogram, nearest_histogram, coherence_*);
#: version 1 files are migrated, all of these "not measured" (empty); 3 added ``normalization`` (RMSNorm),
#: migrated from the case id (every earlier case is LayerNorm's); 4 added ``codes`` (quantized outputs), empty before
CONFORMANCE_VERSION = 4
CONFORMANCE = Schema("normbench.conformance", CONFORMANCE_VERSION, "conformance", CONFORMANCE_COLUMNS, migrations={
    # 1 -> 2: the properties beyond tolerance and the error's structure were not recorded: not measured
    1: lambda df: df.assign(deterministic="", batch_invariant="", property_notes="", error_histogram="",
                            nearest_histogram="", coherence_scale=None, coherence_offset=None,
                            coherence_toward_zero=None, coherence_downward=None),
    # 2 -> 3: the normalization, LayerNorm for every earlier case
    2: lambda df: df.assign(normalization=[case_ids.operation_of(str(c)).name for c in df["case"]]),
    # 3 -> 4: no quantized output was checked before
    3: lambda df: df.assign(codes=""),
})
