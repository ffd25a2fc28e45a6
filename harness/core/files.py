"""Writing a file so that a reader never sees half of it.

Two ways, each all or nothing:

* :func:`write_atomic` replaces a whole file (results JSON, environment, Table 1,
  the HTML report): an interrupted run, a full disk or a reader polling the folder
  finds either the previous file or the new one, never a truncated mix, and no
  temporary file is left behind, even when the disk fills after the temporary
  file was created.
* :func:`append_whole` appends a record (a line of a CSV journal): on a failed
  write the file is cut back to its previous length, so it never ends in a torn
  record.

Both write through :func:`os.write` (tests simulate a full disk by replacing it)
and raise the :class:`OSError` they met; callers turn it into a message naming
the file and the fix.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


def _write_all(fd: int, payload: bytes) -> None:
    """Every byte of ``payload`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - a file system that neither writes nor fails
            raise OSError(f"write returned {written}")
        view = view[written:]


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8, newlines as given) atomically:
    write a temporary file in the same folder, fsync it, rename it over ``path``; if
    anything fails the temporary file is removed and ``path`` is left as it was.
    The new file's permissions follow the umask, as for any new file. Returns ``path``.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "table1.json"
    >>> write_atomic(target, '{"ok": true}\\n').read_text()
    '{"ok": true}\\n'
    >>> [p.name for p in target.parent.iterdir()]
    ['table1.json']
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = -1
    try:  # everything after the temporary file may exist is inside: nothing is left behind
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        _write_all(fd, payload)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def append_whole(path: str | os.PathLike, data: str | bytes, sync: bool = True) -> int:
    """Append ``data`` to ``path`` (created if missing) whole or not at all; returns the new length.

    The data reaches the operating system before this returns (a killed process loses
    nothing appended); ``sync`` also fsyncs it to the disk (a power cut loses nothing).
    If a write fails (a full disk), the file is cut back to its length before the call
    and the :class:`OSError` is raised.

    >>> import tempfile
    >>> log = Path(tempfile.mkdtemp()) / "rows.csv"
    >>> append_whole(log, "a,b\\n"), append_whole(log, "1,2\\n", sync=False), log.read_text()
    (4, 8, 'a,b\\n1,2\\n')
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o666)
    try:
        before = os.fstat(fd).st_size
        try:
            _write_all(fd, payload)
            if sync:
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)  # no torn record: the file ends where it ended
            raise
        return before + len(payload)
    finally:
        os.close(fd)
