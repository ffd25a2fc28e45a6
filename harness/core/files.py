"""Writing a file so that a reader never sees half of it, and reading one that is truly a file.

Two ways of writing, each all or nothing:

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

One way of reading: :func:`open_regular` opens a regular file (a link is followed)
and refuses anything else, a named pipe, a device, a socket, a folder, with an
:class:`OSError` saying what it is, before anything could block on it; and a file
larger than the caller's limit.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from pathlib import Path
from typing import BinaryIO


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


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(mode: int, size: int, limit: int | None) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "something else")
        raise OSError(errno.EINVAL, f"it is {kind}, not a regular file")
    if limit is not None and size > limit:
        raise OSError(errno.EFBIG, f"it is {size} bytes, more than the {limit} such a file may have")


def open_regular(path: str | os.PathLike, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file of at most ``limit`` bytes (links followed);
    else the :class:`OSError` met (a link loop, no permission, no such file) or one saying what it is instead.

    It is checked (:func:`os.stat`) before it is opened, and opened non-blocking and checked again, so that a named
    pipe, which would wait for a writer forever, is never waited on (not even one put there in between).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> os.mkfifo(folder / "conformance.csv")
    >>> open_regular(folder / "conformance.csv")
    Traceback (most recent call last):
    ...
    OSError: [Errno 22] it is a named pipe (FIFO), not a regular file
    """
    before = os.stat(path)
    _check_regular(before.st_mode, before.st_size, limit)
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | nonblocking | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        _check_regular(now.st_mode, now.st_size, limit)
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
