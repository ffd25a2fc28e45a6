"""Text that came from a backend (its exception messages, version, device, notes), made safe to store and show.

A backend's text can hold anything: a ``\\r`` from a progress bar, a megabyte of log, a lone surrogate decoded
from bytes with ``surrogateescape``, terminal escape sequences (clear the screen, set the window title), a cell a
spreadsheet runs as a formula. Stored or printed as it is, such text broke a run's CSV (normbench's own loader then
refused the run), xdist's transport (every test of the run "not run"), the user's terminal and spreadsheet. One
rule for all of it, here:

- :func:`safe` (what is stored and shown): control characters but newline and tab written as escapes (``\\r``,
  ``\\x1b``), a lone surrogate as ``\\udcff`` (so the text encodes to UTF-8), and text longer than :data:`LIMIT`
  clipped with its length said;
- :func:`cell` (a free-text cell of a results table): :func:`safe`, and a leading ``=``, ``+``, ``-`` or ``@``
  preceded by ``'``, as spreadsheets read a literal (OWASP's rule for CSV injection).

>>> safe("downloading 50%\\rdone\\x1b[2J")
'downloading 50%\\\\rdone\\\\x1b[2J'
>>> safe("bad \\udcff byte")
'bad \\\\udcff byte'
>>> cell("=HYPERLINK(1)"), cell("-1 too small"), cell("fine")
("'=HYPERLINK(1)", "'-1 too small", 'fine')
>>> clipped = safe("x" * 100_000)
>>> len(clipped), safe(clipped) == clipped, clipped[-40:]
(4000, True, '... [clipped: 100,000 characters in all]')
"""

from __future__ import annotations

import re

#: the most characters of a backend's text that are stored or shown (a traceback fits; a log does not)
LIMIT = 4000

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f", "\x00": "\\0"}
_FORMULA = ("=", "+", "-", "@")


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object, limit: int = LIMIT) -> str:
    """``text`` (made a string) with control characters but ``\\n`` and ``\\t`` escaped, lone surrogates escaped,
    and clipped to at most ``limit`` characters, its length (escaped) said."""
    text = text if isinstance(text, str) else str(text)
    total = len(text)
    text = _UNSAFE.sub(_escape, text[:6 * limit])  # an escape is at most 6 characters: the rest is clipped anyway
    if len(text) <= limit:
        return text  # within the limit: unchanged by a second call, so stored text is stored again as it is
    marker = f"... [clipped: {max(total, len(text)):,} characters in all]"
    return text[:limit - len(marker)] + marker


def escaped(text: object) -> str:
    """``text`` (made a string) with control characters but ``\\n`` and ``\\t``, and lone surrogates, escaped as
    :func:`safe` escapes them, never clipped: for pages whose every word is kept (findings.md)."""
    return _UNSAFE.sub(_escape, text if isinstance(text, str) else str(text))


def is_safe(text: str, limit: int = LIMIT) -> bool:
    """Whether :func:`safe` leaves ``text`` as it is."""
    return len(text) <= limit and _UNSAFE.search(text) is None


def cell(text: object, limit: int = LIMIT) -> str:
    """A free-text cell of a results table: :func:`safe`, and a leading formula character preceded by ``'``."""
    text = safe(text, limit)
    return "'" + text if text.startswith(_FORMULA) else text
