"""Known deviations: failures of a backend that are expected, each declared with a
reason, so a run stays green while the finding stays visible (reported as xfailed,
"known deviation (source): reason"). One mechanism, two sources:

* **Data files**: ``suites/known_deviations.txt`` (shipped with the suites) and any
  file given with ``--normbench-deviations=FILE``. One entry per line, fields
  separated by ``|`` (the regex may contain ``|``; the reason may not)::

      backend | device glob | test pattern | message regex | reason
      torch | cpu | test_backward[torch-bfloat16-*] | \\): (dweight|dbias)\\[ | dweight accumulated in bfloat16

* **The backend itself**: a class attribute mapping ``"test pattern"`` or
  ``"test pattern | message regex"`` (the file's third and fourth fields) to the
  reason, for any device. Without a regex, an entry explains only failures that the
  suites' checks report (a :class:`~normbench.check.conformance.ConformanceError`: a value,
  identity or invariance out of its bound), never a crash::

      class FlaxLayerNorm(Backend):
          known_deviations = {
              "*-offset1e4": "one-pass variance: var = E[x^2] - E[x]^2 cancels",
              "test_backward*[*float16-*] | \\): dx\\[": "half-precision dx rounded in two parts",
          }

A **test pattern** is a glob (``*``, ``?``; brackets match themselves) matched
against four names of a test, any of which may match: its id without a ``-seedN``
suffix (``test_forward[flax-float32-rows8-hidden1000-offset1e3]``), the same
without the backend (``test_forward[float32-rows8-hidden1000-offset1e3]``), its
case id (``float32-rows8-hidden1000-offset1e3``) and its case family (``dist``).

A failing test is a known deviation only when one entry matches its backend,
device, test and failure; any other failure stays a failure. An entry that covered
tests in a run but explained none of their failures is listed at the end of the
run as not occurring, so it can be removed. ``--normbench-strict`` reports known
deviations as failures and fails a run with an entry that did not occur.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from normbench.core.exceptions import NormbenchError, PluginError
from normbench.suites import DIRECTORY as SUITES_DIRECTORY

FILENAME = "known_deviations.txt"
#: the Backend class attribute that declares a backend's own known deviations
ATTRIBUTE = "known_deviations"


@dataclass(frozen=True)
class Subject:
    """The names of one test of one backend that an entry's pattern may match."""

    backend: str
    device: str
    test: str               # test_forward[flax-float32-rows8-hidden1000-offset1e3], no -seedN
    case_id: str = ""       # float32-rows8-hidden1000-offset1e3
    family: str = ""        # dist

    @property
    def names(self) -> tuple[str, ...]:
        bare = self.test.replace(f"[{self.backend}-", "[", 1).replace(f"[{self.backend}]", "", 1)
        return tuple(n for n in (self.test, bare, self.case_id, self.family) if n)


@dataclass(frozen=True)
class KnownDeviation:
    """One declared deviation. ``message`` None: any failure found by the suites' checks."""

    backend: str
    device: str             # glob over Backend.device
    test: str               # test pattern (see the module doc)
    message: re.Pattern | None
    reason: str
    origin: str             # who declared it: "suites/known_deviations.txt", "my.txt", "flax.known_deviations"
    where: str              # and where in it: "12" (a line), "*-offset1e4" (a key)

    @property
    def source(self) -> str:
        """``suites/known_deviations.txt:12`` or ``flax.known_deviations["*-offset1e4"]``: unique per entry."""
        return f"{self.origin}:{self.where}" if self.where.isdigit() else f'{self.origin}["{self.where}"]'

    def covers(self, subject: Subject) -> bool:
        """Whether this entry is about ``subject`` (whatever the outcome)."""
        return (subject.backend == self.backend and glob_match(self.device, subject.device)
                and any(glob_match(self.test, name) for name in subject.names))

    def explains(self, subject: Subject, message: str, check_failure: bool) -> bool:
        """Whether this entry explains ``subject`` failing with ``message``."""
        if not self.covers(subject):
            return False
        return check_failure if self.message is None else self.message.search(message) is not None


def glob_match(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters, ``?`` one; everything else, ``[`` and ``]``
    included (test ids have them), matches itself.

    >>> glob_match("test_backward[torch-*]", "test_backward[torch-float16-rows5-hidden8-offset3]")
    True
    """
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, text) is not None


def parse(text: str, source: str = FILENAME) -> list[KnownDeviation]:
    """The entries of a known-deviations file's text (``#`` starts a comment line).

    >>> (entry,) = parse("torch | cpu | test_backward[torch-*] | dbias | half accumulation", "k.txt")
    >>> entry.source, entry.reason
    ('k.txt:1', 'half accumulation')
    """
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = line.split("|", 3)
        fields = [f.strip() for f in head[:3] + head[3].rsplit("|", 1)] if len(head) == 4 else []
        if len(fields) != 5 or not all(fields):
            raise NormbenchError(f"{source}:{number}: expected 'backend | device glob | test pattern | message regex "
                                 f"| reason', got {raw!r}")
        try:
            pattern = re.compile(fields[3])
        except re.error as exc:
            raise NormbenchError(f"{source}:{number}: bad message regex {fields[3]!r}: {exc}") from None
        entries.append(KnownDeviation(fields[0], fields[1], fields[2], pattern, fields[4], source, str(number)))
    return entries


def load(path: Path | None = None) -> list[KnownDeviation]:
    """The entries of ``path`` (default: the installed suites' ``known_deviations.txt``; none if absent)."""
    if path is None:
        path = SUITES_DIRECTORY / FILENAME
        if not path.is_file():
            return []
        return parse(path.read_text(encoding="utf-8"), f"suites/{FILENAME}")
    if not path.is_file():
        raise NormbenchError(f"known-deviations file {str(path)!r} does not exist; give the path of a file "
                             f"with lines 'backend | device glob | test pattern | message regex | reason'")
    return parse(path.read_text(encoding="utf-8"), str(path))


def declaration_problem(cls: type) -> str:
    """What is wrong with a class's ``known_deviations`` and how to fix it, or ""."""
    declared = getattr(cls, ATTRIBUTE, None) or {}
    fix = (f"Fix: write e.g. {ATTRIBUTE} = {{'*-offset1e4': 'one-pass variance cancels at large means', "
           f"'test_backward[*] | \\): dx\\[': 'dx rounded twice'}}")
    bad = ([] if isinstance(declared, Mapping) else [declared]) or [
        (k, v) for k, v in declared.items()
        if not (isinstance(k, str) and k.partition("|")[0].strip() and isinstance(v, str) and v.strip())]
    if bad:
        return f"{ATTRIBUTE} must map test patterns to reasons, both non-empty strings; got {bad[0]!r}. {fix}"
    for key in declared:
        regex = key.partition("|")[2].strip()
        try:
            re.compile(regex)
        except re.error as exc:
            return f"{ATTRIBUTE}: bad message regex {regex!r} in {key!r}: {exc}. {fix}"
    return ""


def from_backend(cls: type) -> list[KnownDeviation]:
    """The deviations a Backend class declares in ``known_deviations``:
    ``{"test pattern": reason}`` or ``{"test pattern | message regex": reason}``.

    Raises :class:`~normbench.core.exceptions.PluginError` when the attribute is malformed.

    >>> class Mine:
    ...     name = "mine"
    ...     known_deviations = {"*-offset1e4": "one-pass variance", "test_backward[*] | dx": "dx"}
    >>> [(d.test, d.message and d.message.pattern) for d in from_backend(Mine)]
    [('*-offset1e4', None), ('test_backward[*]', 'dx')]
    >>> from_backend(Mine)[0].source
    'mine.known_deviations["*-offset1e4"]'
    """
    name = getattr(cls, "name", cls.__name__)
    problem = declaration_problem(cls)
    if problem:
        raise PluginError(f"backend {name!r} ({cls.__module__}.{cls.__qualname__}): {problem}")
    entries = []
    for key, reason in (getattr(cls, ATTRIBUTE, None) or {}).items():
        pattern, bar, regex = (part.strip() for part in key.partition("|"))
        entries.append(KnownDeviation(name, "*", pattern, re.compile(regex) if bar else None, reason.strip(),
                                      f"{name}.{ATTRIBUTE}", key))
    return entries


def find(entries: list[KnownDeviation], subject: Subject, message: str, check_failure: bool) -> KnownDeviation | None:
    """The first entry that explains this failure, or None."""
    return next((e for e in entries if e.explains(subject, message, check_failure)), None)


@dataclass
class Tally:
    """Per entry (by source): tests of a run it covered and failures it explained,
    so that an entry that no longer occurs is reported for removal."""

    reasons: dict[str, str] = field(default_factory=dict)
    covered: Counter = field(default_factory=Counter)
    explained: Counter = field(default_factory=Counter)

    def add(self, record: Mapping) -> None:
        """Count one test's record (:func:`record`)."""
        for source, reason in record.get("covers", {}).items():
            self.reasons[source] = reason
            self.covered[source] += 1
        if record.get("explains"):
            self.explained[record["explains"]] += 1

    def stale(self) -> list[str]:
        """The entries that covered tests but explained none of their failures."""
        return sorted(s for s in self.covered if not self.explained[s])

    def lines(self) -> list[str]:
        """What to print at the end of a run: every entry that occurred, then every one that did not."""
        out = [f"known deviation in {self.explained[s]} of {self.covered[s]} tests: {s}\n    {self.reasons[s]}"
               for s in sorted(self.explained)]
        out += [f"declared deviation did not occur in the {self.covered[s]} tests it covers (remove it?): {s}\n"
                f"    {self.reasons[s]}" for s in self.stale()]
        return out


def record(entries: list[KnownDeviation], subject: Subject, failed: bool, message: str = "",
           check_failure: bool = False) -> dict:
    """One test's record for a :class:`Tally`: the entries covering it and the one explaining its failure."""
    covering = [e for e in entries if e.covers(subject)]
    explaining = find(covering, subject, message, check_failure) if failed else None
    return {"covers": {e.source: e.reason for e in covering},
            "explains": explaining.source if explaining else None}
