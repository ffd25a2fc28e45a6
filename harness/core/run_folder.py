"""A run folder has one writer: :func:`claim` it before measuring anything, release it at the end.

``claim(out_dir, run_id)`` checks, in this order, and raises one :class:`RunFolderError`
(the run id or folder, why, the fix) for the first problem:

1. the run id (:func:`check_run_id`): letters, digits, ``.``, ``_``, ``-``, ``+``; no path
   separator, no ``..``, not starting with ``.``; the folder resolves strictly inside ``out_dir``
   (a link pointing elsewhere is refused);
2. the lock: an exclusive ``fcntl.flock`` on ``<folder>/.normbench.lock``, held for the life of
   the claim. The kernel drops it when the process ends however it ends (a killed run leaves no
   stale lock). A second writer is told the pid, host and start time of the holder. Where
   ``fcntl`` does not exist, the lock file is created with ``O_CREAT | O_EXCL`` instead, holds
   the pid, and is removed at release (a crashed run leaves it: the message says to remove it);
3. the folder's contents: a folder already holding results (:data:`normbench.core.storage.RESULT_FILES`:
   ``throughput.csv/.json``, ``conformance.csv/.json``; or published counts: ``traffic.csv``,
   ``kernels-*.csv``) is refused, for conformance and
   throughput alike: a run folder is written by one run. A missing or empty folder, or one
   holding only files of a run that never wrote a row (``environment.json``, ``report.html``,
   ``table1.json``, the lock file), is used.

**Re-entrant.** In the process holding a claim, claiming the same folder again returns the
same :class:`RunFolder` (counted: the folder is released when every claim is released), so
``normbench run`` claims the folder and its in-process pytest session's throughput plugin
claims it again. **Inherited.** While a claim is held, the environment variable
:data:`CLAIM_VARIABLE` (``NORMBENCH_RUN_FOLDER``) holds ``<pid>:<folder>``; a child process
started meanwhile (a pytest subprocess, a pytest-xdist worker) that claims that folder gets an
inherited claim (no second lock, no contents check) as long as that pid still holds the lock.

Usage (the CLI and the pytest throughput plugin)::

    >>> import tempfile
    >>> from normbench.core.run_folder import claim, RunFolderError
    >>> out = tempfile.mkdtemp()
    >>> with claim(out, "r1") as run:                  # before anything is measured
    ...     again = claim(out, "r1")                   # the same process: the same claim
    ...     _ = (run.path / "throughput.csv").write_text("...")
    ...     again.release()
    ...     print(run.path.name, again is run, holder(run.path) == os.getpid())
    r1 True True
    >>> try:
    ...     claim(out, "r1")                           # later: a folder holding results is refused
    ... except RunFolderError as exc:
    ...     print(str(exc).split("; ")[1])
    a run folder is written by one run. Fix: omit --run-id for a fresh one, choose another, or remove the folder
    >>> claim(out, "../elsewhere")                     # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    normbench.core.run_folder.RunFolderError: run id '../elsewhere': a run id names one folder...

Without ``with``: ``run = claim(out, run_id)`` ... ``run.release()`` (in a ``finally``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.core.storage import COUNTS_FILES, COUNTS_PATTERNS, RESULT_FILES, ResultsError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".normbench.lock"
#: ``<pid>:<folder>`` of the claim held by an ancestor process (set while a claim is held)
CLAIM_VARIABLE = "NORMBENCH_RUN_FOLDER"
#: what a run id may be: one plain folder name (``environment.new_run_id`` makes such ids)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}", re.ASCII)  # to be fullmatch-ed: "$" lets "\n" through


class RunFolderError(ResultsError):
    """A run folder that cannot be claimed: a bad run id, another writer, or results already there."""


def check_run_id(run_id: Any) -> str:
    """``run_id`` if it names one plain folder, else a RunFolderError with the fix.

    >>> check_run_id("20261101T150102Z-myhost-4711-0a3f")
    '20261101T150102Z-myhost-4711-0a3f'
    """
    if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) and ".." not in run_id:
        return run_id
    raise RunFolderError(f"run id {run_id!r}: a run id names one folder under the output folder: letters, digits, "
                         f"'.', '_', '-' and '+', at most 200, starting with a letter or digit; no '/', '\\', '..' "
                         f"or absolute path. Fix: omit --run-id for a fresh one, or choose one like 'gpu-run-1'")


def _folder(out_dir: str | os.PathLike, run_id: str) -> Path:
    """``out_dir/run_id``, resolved, strictly inside ``out_dir`` (resolved)."""
    base = Path(out_dir).resolve()
    folder = (base / check_run_id(run_id)).resolve()
    if folder.parent != base:
        raise RunFolderError(f"run id {run_id!r}: {base / run_id} leads out of {base} (a link?). Fix: choose another "
                             f"--run-id, or remove that link")
    return folder


@dataclass(eq=False)
class RunFolder:
    """A claimed run folder: ``path``, ``run_id``; ``inherited`` when an ancestor process holds the lock.
    :meth:`release` (or leaving the ``with`` block) gives it back."""

    path: Path
    run_id: str
    inherited: bool = False
    _fd: int = -1
    _count: int = 1

    def release(self) -> None:
        """Give back one claim; the last one unlocks the folder. Idempotent once released."""
        if self._count <= 0:
            return
        self._count -= 1
        if self._count > 0:
            return
        _HELD.pop(self.path, None)
        if os.environ.get(CLAIM_VARIABLE) == _variable(self.path) and not self.inherited:
            del os.environ[CLAIM_VARIABLE]
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                if fcntl is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                else:  # pragma: no cover - Windows
                    os.unlink(self.path / LOCK_FILE)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def remove_if_unused(self, also: tuple[str, ...] = ()) -> bool:
        """Remove the folder while this process holds it, if it holds nothing but its lock file (and the files named
        in ``also``, e.g. the run's log): a run that failed before writing anything (a backend not available) leaves
        no empty locked folder behind. True if removed."""
        if not self.held or self.inherited:
            return False
        try:
            names = {p.name for p in self.path.iterdir()}
            if not names <= {LOCK_FILE, *also}:
                return False
            for name in sorted(names - {LOCK_FILE}) + [LOCK_FILE]:
                os.unlink(self.path / name)
            self.path.rmdir()
        except OSError:
            return False
        return True

    @property
    def held(self) -> bool:
        return self._count > 0

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


#: the claims this process holds, by resolved folder
_HELD: dict[Path, RunFolder] = {}


def _variable(folder: Path) -> str:
    return f"{os.getpid()}:{folder}"


def _owner(text: str) -> str:
    """The holder as a lock file records it: ``pid 4711 on myhost since 2026-...``."""
    parts = text.split()
    return f"pid {parts[0]} on {parts[1]} since {parts[2]}" if len(parts) >= 3 else "another process"


def _lock_text() -> str:
    from normbench.core.environment import now_utc

    return f"{os.getpid()} {socket.gethostname()} {now_utc()}\n"


def _read_lock(folder: Path) -> str:
    try:
        return (folder / LOCK_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cannot(folder: Path, exc: OSError) -> RunFolderError:
    return RunFolderError(f"cannot create or lock the run folder {folder}: {exc.strerror or exc}. Fix: give --out a "
                          f"writable folder")


def _lock(folder: Path) -> int:
    """An exclusive lock on ``folder``'s lock file: its descriptor, or a RunFolderError naming the holder."""
    path = folder / LOCK_FILE
    if fcntl is None:  # pragma: no cover - Windows
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            raise RunFolderError(f"{folder} is being written by another normbench run ({_owner(_read_lock(folder))}; "
                                 f"{path} exists). A run folder has one writer. Fix: wait for that run, choose another "
                                 f"--run-id (or omit it); if no run is writing there, remove {path}") from None
        except OSError as exc:
            raise _cannot(folder, exc) from None
    else:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise _cannot(folder, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _cannot(folder, exc) from None
            raise RunFolderError(f"{folder} is being written by another normbench run ({_owner(_read_lock(folder))}). "
                                 f"A run folder has one writer. Fix: wait for that run to end, or choose another "
                                 f"--run-id (or omit it for a fresh one)") from None
    with contextlib.suppress(OSError):  # who holds it, for the message a second writer gets
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _lock_text().encode())
    return fd


def holder(folder: str | os.PathLike) -> int | None:
    """The pid holding ``folder``'s lock (this process's own claims included), or None when no run holds it:
    a run whose status still says ``running`` and whose folder nobody holds ended without finishing."""
    folder = Path(folder).resolve()
    if folder in _HELD:
        return os.getpid()
    path = folder / LOCK_FILE
    text = _read_lock(folder)
    pid = int(text.split()[0]) if text.split() and text.split()[0].isdigit() else -1
    if fcntl is None:  # pragma: no cover - Windows
        return pid if path.exists() else None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return pid
    finally:
        os.close(fd)  # closing drops the shared lock taken to test it
    return None


def _inherited(folder: Path, run_id: str) -> RunFolder | None:
    """The claim an ancestor holds on ``folder`` and passed down in :data:`CLAIM_VARIABLE`, if it still holds it."""
    pid, _, named = os.environ.get(CLAIM_VARIABLE, "").partition(":")
    if not pid.isdigit() or int(pid) == os.getpid() or named != str(folder) or holder(folder) != int(pid):
        return None
    return RunFolder(folder, run_id, inherited=True)


def claim(out_dir: str | os.PathLike, run_id: str) -> RunFolder:
    """Claim ``out_dir/run_id`` for this run (the module doc says what is checked); a RunFolderError
    names the problem and the fix. Call it before anything is measured."""
    folder = _folder(out_dir, run_id)
    held = _HELD.get(folder)
    if held is not None:
        held._count += 1
        return held
    inherited = _inherited(folder, run_id)
    if inherited is not None:
        _HELD[folder] = inherited
        return inherited
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot(folder, exc) from None
    fd = _lock(folder)
    run = RunFolder(folder, run_id, _fd=fd)
    found = [name for name in (*RESULT_FILES, *COUNTS_FILES) if (folder / name).exists()]
    found += sorted(path.name for pattern in COUNTS_PATTERNS for path in folder.glob(pattern))
    if found:
        run.release()
        raise RunFolderError(f"{folder} already holds the results of a run ({', '.join(found)}); a run folder is "
                             f"written by one run. Fix: omit --run-id for a fresh one, choose another, or remove the "
                             f"folder")
    _HELD[folder] = run
    os.environ[CLAIM_VARIABLE] = _variable(folder)
    return run
