"""Writing a file so that a reader never sees half of it.

Results, the environment, Table 1 and the HTML report are each written whole,
with :func:`write_atomic`: an interrupted run, a full disk or a reader polling the
folder finds either the previous file or the new one, never a truncated mix.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
