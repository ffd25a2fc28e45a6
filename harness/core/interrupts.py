"""Which signals this process received: a ``KeyboardInterrupt`` that no signal caused was raised
by a backend, and is that backend's result, not the end of the run.

The pytest plugin (:mod:`normbench.front.isolation`) installs :func:`note_sigint` as the SIGINT
handler of a session; ``normbench run`` records a SIGTERM with :func:`note_signal` before
turning it into ``KeyboardInterrupt``. The throughput runner and the suites ask
:func:`received_signal` when a backend call raises ``KeyboardInterrupt``. Once a run is interrupted,
:func:`deferred` holds further signals off while it writes what ran.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

_RECEIVED: list[int] = []
#: the signals a user sends to end a run: Ctrl-C, a kill, a dropped terminal or ssh connection (SIGHUP, where the
#: platform has it); each ends a run as an interrupted run, keeping what ran
ENDING: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


def note_signal(signum: int) -> None:
    """Record that ``signum`` arrived (it ends the run)."""
    _RECEIVED.append(signum)


def forget_signals() -> None:
    """Forget the signals recorded so far (a new pytest session starts with none)."""
    _RECEIVED.clear()


def note_sigint(signum: int, frame) -> None:
    """A SIGINT handler: record it, then raise ``KeyboardInterrupt`` as Python's default handler does."""
    note_signal(signum)
    raise KeyboardInterrupt


def received_signal() -> bool:
    """Whether this process received one of the :data:`ENDING` signals (as recorded here) since it started."""
    return bool(_RECEIVED)


def last_signal() -> str:
    """The name of the last signal recorded (``"SIGTERM"``), or ``""``."""
    return signal.Signals(_RECEIVED[-1]).name if _RECEIVED else ""


def pytest_outcome(exc: BaseException) -> str:
    """The pytest function a backend called inside its own call to decide its test's outcome, ``"pytest.skip"``
    (``importorskip`` too), ``"pytest.xfail"`` or ``"pytest.exit"``, or "" for any other exception. A backend says
    what it cannot run through its operations, dtypes and limits, before the call; one that skips, xfails or ends
    the session from inside it would turn the cases it fails into a pass (``pytest.fail`` is a failure already)."""
    import sys

    pytest = sys.modules.get("pytest")  # a backend that raised pytest's exceptions has imported it
    if pytest is None:
        return ""
    for kind, name in ((pytest.skip.Exception, "pytest.skip"), (pytest.xfail.Exception, "pytest.xfail"),
                       (pytest.exit.Exception, "pytest.exit")):
        if isinstance(exc, kind):
            return name
    return ""


def backend_raised(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a backend call, is the backend's doing: ``SystemExit``, or a
    ``KeyboardInterrupt`` that no signal caused (a real Ctrl-C must still end the run)."""
    return isinstance(exc, SystemExit) or (isinstance(exc, KeyboardInterrupt) and not received_signal())


@contextlib.contextmanager
def _handled_by(handler: Callable) -> Iterator[bool]:
    """The :data:`ENDING` signals go to ``handler`` inside the block, to their previous handlers again after it;
    yields whether they were installed (False off the main thread, where signals are not ours to handle)."""
    try:
        previous = {s: signal.signal(s, handler) for s in ENDING}
    except ValueError:
        yield False
        return
    try:
        yield True
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def deferred(say: Callable[[str], None]):
    """While a run that was interrupted writes what it has (its status, summary and report), SIGINT and
    SIGTERM are recorded, said once through ``say``, and otherwise wait: a second Ctrl-C must not lose the
    bookkeeping of the first. (SIGKILL still ends the process at once; the journal keeps every row.)"""
    said = []

    def later(signum, frame):
        note_signal(signum)
        if not said:
            said.append(signum)
            say(f"{signal.Signals(signum).name} received while normbench writes the run's status, summary and "
                f"report; they are finished first (SIGKILL ends the process now, keeping every result row)")

    with _handled_by(later):
        yield


@contextlib.contextmanager
def held():
    """While one result is recorded (its outcome counted and its row written), SIGINT and SIGTERM wait, and are
    delivered as soon as it is recorded: a Ctrl-C that landed between a test's outcome and its row lost the row
    while the run's status still counted the test (``normbench run``'s journal, ``front/runner.Collector``)."""
    arrived: list[int] = []
    with _handled_by(lambda signum, frame: arrived.append(signum)):
        yield
    if arrived:
        signal.raise_signal(arrived[0])  # now, to the handler that was in place
