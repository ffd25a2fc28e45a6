"""Known failures: real defects of a backend that the suites catch, recorded so a run
stays green while the defects stay visible (reported as xfailed, with the reason).

The entries live in a data file, ``suites/known_failures.txt`` (shipped with the
suites), one per line, fields separated by ``|`` (the regex may contain ``|``; the reason may not)::

    backend | device glob | test-id glob | message regex | reason
    torch | cpu | test_backward[torch-bfloat16-*] | \\): (dweight|dbias)\\[ | dweight accumulated in bfloat16

A failing test is reported as a known failure only when its backend, device
(``Backend.device``), test id (``test_backward[torch-bfloat16-rows5-hidden8-offset3]``,
without a ``-seedN`` suffix) and failure message all match one entry; any other
failure of the same test stays a failure. ``--normbench-strict`` reports known
failures as failures. ``tests/test_known_failures.py`` checks that every entry
still names tests that exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.exceptions import NormbenchError

FILENAME = "known_failures.txt"


@dataclass(frozen=True)
class KnownFailure:
    """One entry of the known-failures file."""

    backend: str
    device: str        # glob over Backend.device
    test: str          # glob over the test id
    message: re.Pattern
    reason: str
    line: int = 0

    def matches(self, backend: str, device: str, test: str, message: str) -> bool:
        return (backend == self.backend and glob_match(self.device, device) and glob_match(self.test, test)
                and self.message.search(message) is not None)


def glob_match(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters, ``?`` one; everything else, ``[`` and ``]``
    included (test ids have them), matches itself.

    >>> glob_match("test_backward[torch-*]", "test_backward[torch-float16-rows5-hidden8-offset3]")
    True
    """
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, text) is not None


def parse(text: str, source: str = FILENAME) -> list[KnownFailure]:
    """The entries of a known-failures file's text (``#`` starts a comment line)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = line.split("|", 3)
        fields = [f.strip() for f in head[:3] + head[3].rsplit("|", 1)] if len(head) == 4 else []
        if len(fields) != 5 or not all(fields):
            raise NormbenchError(f"{source}:{number}: expected 'backend | device glob | test-id glob | message regex "
                                 f"| reason', got {raw!r}")
        try:
            pattern = re.compile(fields[3])
        except re.error as exc:
            raise NormbenchError(f"{source}:{number}: bad message regex {fields[3]!r}: {exc}") from None
        entries.append(KnownFailure(fields[0], fields[1], fields[2], pattern, fields[4], number))
    return entries


def load(path: Path | None = None) -> list[KnownFailure]:
    """The entries of ``path`` (default: the installed suites' ``known_failures.txt``; none if absent)."""
    if path is None:
        from harness.runner import suites_dir

        try:
            path = suites_dir() / FILENAME
        except FileNotFoundError:
            return []
    if not path.is_file():
        return []
    return parse(path.read_text(encoding="utf-8"), str(path))


def find(entries: list[KnownFailure], backend: str, device: str, test: str, message: str) -> KnownFailure | None:
    """The first entry that explains this failure, or None."""
    return next((e for e in entries if e.matches(backend, device, test, message)), None)
