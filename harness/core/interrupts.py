"""Which signals this process received: a ``KeyboardInterrupt`` that no signal caused was raised
by a backend, and is that backend's result, not the end of the run.

The pytest plugin (:mod:`normbench.front.isolation`) installs :func:`note_sigint` as the SIGINT
handler of a session; ``normbench run`` records a SIGTERM with :func:`note_signal` before
turning it into ``KeyboardInterrupt``. The throughput runner and the suites ask
:func:`received_signal` when a backend call raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal

_RECEIVED: list[int] = []


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
    """Whether this process received SIGINT or SIGTERM (as recorded here) since it started."""
    return bool(_RECEIVED)


def last_signal() -> str:
    """The name of the last signal recorded (``"SIGTERM"``), or ``""``."""
    return signal.Signals(_RECEIVED[-1]).name if _RECEIVED else ""


def backend_raised(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a backend call, is the backend's doing: ``SystemExit``, or a
    ``KeyboardInterrupt`` that no signal caused (a real Ctrl-C must still end the run)."""
    return isinstance(exc, SystemExit) or (isinstance(exc, KeyboardInterrupt) and not received_signal())
