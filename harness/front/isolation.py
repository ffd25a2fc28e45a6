"""A backend that crashes, hangs or raises ``KeyboardInterrupt`` is a result, not the end of the run.

Part of the pytest plugin (``normbench.front.pytest_plugin`` loads it), for normbench's suite tests
(those parametrized over ``backend``):

* **Crashes.** Under pytest-xdist a test whose worker process dies (a segfault, an abort,
  ``os._exit``) is reported by xdist and recorded by :class:`normbench.front.runner.Collector` as
  ``crashed``; xdist starts a new worker and the run goes on. After :data:`CRASH_LIMIT`
  crashes of one backend the workers stop running that backend's remaining tests: they are
  skipped as ``not run``, with the reason, so one broken backend cannot exhaust xdist's
  worker restarts and silently end the other backends' tests. ``normbench run`` always runs
  the suites in worker processes (``-n 1`` at least); a plain ``pytest`` without ``-n`` runs
  the tests in its own process, which a crash ends.
* **A worker killed by a signal** (a SIGTERM sent to it alone, by a user or a job scheduler) is not a crash: the
  worker writes the signal and its test to a file beside the quarantine's before it dies, and that test is
  recorded as ``not run``, saying so (counted apart: :data:`CRASH_LIMIT` such kills stop the backend's tests too).
  SIGINT and SIGHUP end a worker's test as an interruption.
* **Hangs.** Every suite test gets a time limit (``--normbench-timeout``, default
  :data:`DEFAULT_TIMEOUT` s; 0 for none), enforced by pytest-timeout; a test that runs out of
  time is recorded as ``timeout``. pytest-timeout's own settings (``--timeout``, the ini
  value or ``PYTEST_TIMEOUT``) win where given. pytest-timeout's default method (a signal)
  stops a test that hangs in Python code; a hang inside native code that never returns to
  Python needs ``--timeout-method=thread``, which ends the worker process: the test is then
  recorded as crashed.
* **Too many failures** (``--normbench-maxfail=N``): after N failed tests of one backend its
  remaining tests are not run either, the same way (skipped as ``not run``, with the reason),
  while the other backends go on: a kernel that fails its first cases tells nothing more by
  failing hundreds (pytest's own ``--maxfail`` would stop every backend). Default: no limit.
* **KeyboardInterrupt raised by a backend** (not by a signal this process received) fails
  that test with a message instead of ending the run. ``SystemExit`` from a test is already
  a failure in pytest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from normbench.check import measurement
from normbench.check.outcomes import NOT_RUN
from normbench.core.interrupts import forget_signals, note_sigint, received_signal
from normbench.front import options, settings
from normbench.front.plan import SELECTION
from normbench.front.runner import SIGNALLED, TIMEOUT_MESSAGE, backend_of

#: crashes of one backend after which its remaining tests are not run
CRASH_LIMIT = 3
#: seconds a suite test may take (a large case under the Triton interpreter takes well under a minute)
DEFAULT_TIMEOUT = 300.0
_QUARANTINE = "normbench_quarantine"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normbench")
    group.addoption("--normbench-timeout", type=options.parse_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                    help="Time limit of each suite test; a test that runs longer is recorded as 'timeout' "
                         "(pytest-timeout; its --timeout, where given, wins). 0: no limit. Default: %(default)r.")
    group.addoption("--normbench-maxfail", type=options.parse_count(0), default="0", metavar="N",
                    help="After N failed tests of one backend, skip its remaining tests as 'not run' (the other "
                         "backends go on). 0: no limit. Default: %(default)r.")
    group.addoption("--normbench-stop-at", type=float, default=None, metavar="UNIX_TIME",
                    help="A time budget's end (normbench run --budget sets it): the most valuable tests run first "
                         "(budget_rank), and a test not started by then is recorded as 'not run'. Default: none.")


def pytest_configure(config: pytest.Config) -> None:
    forget_signals()  # a signal that ended an earlier session in this process says nothing about this one
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, note_sigint)
            config.add_cleanup(lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
        except ValueError:  # not the main thread: leave the signals alone
            pass
    hangup = getattr(signal, "SIGHUP", None)
    if (hangup is not None and settings.of(config).impl is not None
            and signal.getsignal(hangup) is signal.SIG_DFL):
        # a dropped terminal sends SIGHUP to the whole process group, as Ctrl-C sends SIGINT: a session running
        # normbench's suites (an xdist worker too) ends the same way, as an interrupted run, not as a crash
        try:
            signal.signal(hangup, note_sigint)
            config.add_cleanup(lambda: signal.signal(hangup, signal.SIG_DFL))
        except ValueError:
            pass
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        if workerinput.get(_QUARANTINE):
            config.stash[QUARANTINE] = Quarantine(Path(workerinput[_QUARANTINE]))
            _say_a_kill_before_dying(Path(workerinput[_QUARANTINE]).with_name(_SIGNALS_FILE))
        return
    folder = Path(tempfile.mkdtemp(prefix="normbench-quarantine-"))
    config.stash[QUARANTINE] = Quarantine(folder / "backends")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    config.pluginmanager.register(CrashWatch(config.stash[QUARANTINE], settings.of(config).maxfail, config),
                                  "normbench-crash-watch")


#: beside the quarantine file: each test whose worker a process outside normbench killed (SIGTERM), and the signal
_SIGNALS_FILE = "signalled"
#: the test this worker runs now (its node id), for the line :func:`_say_a_kill_before_dying` writes
_RUNNING = [""]


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _RUNNING[0] = nodeid


def _say_a_kill_before_dying(path: Path) -> None:
    """In an xdist worker: a SIGTERM sent to it alone (by a user, a job scheduler, the OOM handling of a cluster)
    is written to ``path`` with the test running, then ends the worker as it did, so that the controller records
    that test as not run, ended from outside, never as the backend's crash (:meth:`CrashWatch.pytest_handlecrashitem`).
    SIGINT and SIGHUP already end a worker's test as an interruption (:func:`pytest_configure`)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def ended(signum, frame):
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
            f.write(f"{_RUNNING[0]}\t{signal.Signals(signum).name}\n")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    with contextlib.suppress(ValueError):  # not the main thread: the signals are not ours
        signal.signal(signal.SIGTERM, ended)


def signalled(path: Path, nodeid: str) -> str:
    """The signal a process outside normbench ended ``nodeid``'s worker with, as the worker wrote it, or ""."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    return next((name for test, _, name in (line.partition("\t") for line in lines) if test == nodeid), "")


class Quarantine:
    """The backends whose tests the workers no longer run: a file the controller appends to
    (a name and the reason per line) and each worker reads before a test, when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.crashes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self._seen: tuple[tuple[int, int], dict[str, str]] = ((-1, -1), {})

    def crashed(self, backend: str) -> None:
        """A test of ``backend`` crashed the test process or ran out of time."""
        self.crashes[backend] += 1
        if self.crashes[backend] == CRASH_LIMIT:
            self.stop(backend, f"not run: backend {backend!r} crashed the test process or ran out of time "
                               f"{CRASH_LIMIT} times; normbench stopped running its tests (those are recorded as "
                               f"'crashed' or 'timeout')")

    def signalled(self, backend: str, name: str) -> None:
        """A test of ``backend`` ended with its worker killed by ``name`` (SIGTERM), which no crash count holds."""
        self.kills[backend] += 1
        if self.kills[backend] == CRASH_LIMIT:
            self.stop(backend, f"not run: the worker process was ended by {name} {CRASH_LIMIT} times while running "
                               f"backend {backend!r}'s tests; normbench stopped running them")

    def failed(self, backend: str, limit: int) -> None:
        """A test of ``backend`` failed; at ``limit`` failures (0: never) its other tests stop."""
        self.failures[backend] += 1
        if limit and self.failures[backend] == limit:
            self.stop(backend, f"not run: backend {backend!r} failed {limit} test{'s' if limit > 1 else ''} "
                               f"(--normbench-maxfail={limit}); normbench stopped running its tests")

    def stop(self, backend: str, reason: str) -> None:
        if self.reason(backend) is None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{backend}\t{reason}\n")

    def reason(self, backend: str) -> str | None:
        """Why ``backend``'s tests are no longer run (None: they are)."""
        try:
            stat = self.path.stat()
        except OSError:
            return None
        version = (stat.st_mtime_ns, stat.st_size)  # two appends in one mtime tick still differ in size
        if version != self._seen[0]:
            lines = self.path.read_text(encoding="utf-8").splitlines()
            stopped: dict[str, str] = {}
            for line in lines:
                name, _, why = line.partition("\t")
                stopped.setdefault(name, why)
            self._seen = (version, stopped)
        return self._seen[1].get(backend)


QUARANTINE = pytest.StashKey[Quarantine]()


class CrashWatch:
    """In the controller (the xdist controller, or a run without xdist): counts each backend's
    crashed and timed-out tests and quarantines it at :data:`CRASH_LIMIT`, and its failed tests
    up to ``maxfail`` (0: no limit)."""

    def __init__(self, quarantine: Quarantine, maxfail: int = 0, config: pytest.Config | None = None) -> None:
        self.quarantine = quarantine
        self.maxfail = maxfail
        self.config = config

    def _backend(self, nodeid: str, report: pytest.TestReport | None = None) -> str:
        """The backend of a suite test: the name the test recorded (its report's user properties), or
        the longest selected backend's name its id starts with (``mutant-no-mean-term-float32-...`` is
        ``mutant-no-mean-term``, not ``mutant``), or the id's first word."""
        recorded = measurement.of_report(report).backend if report is not None else None
        if recorded:
            return recorded
        selection = self.config.stash.get(SELECTION, None) if self.config is not None else None
        names = [b.name for b in selection.backends] if selection is not None else []
        return backend_of(nodeid, names)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist: tell each new worker where the quarantine file is."""
        node.workerinput[_QUARANTINE] = str(self.quarantine.path)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        """xdist: a worker died running ``crashitem``: the backend's crash, counted, unless the worker said it was
        killed from outside (then its report says so to the collector, which records the test not run)."""
        ended_by = signalled(self.quarantine.path.with_name(_SIGNALS_FILE), crashitem)
        if ended_by:
            setattr(report, SIGNALLED, ended_by)
            backend = self._backend(crashitem)
            if backend:  # a backend that sends it to itself on every case must not exhaust xdist's restarts either
                self.quarantine.signalled(backend, ended_by)
            return
        self._count(crashitem)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.failed:
            return
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None and TIMEOUT_MESSAGE.match(crash.message):
            self._count(report.nodeid, report)
        elif self.maxfail:
            backend = self._backend(report.nodeid, report)
            if backend:
                self.quarantine.failed(backend, self.maxfail)

    def _count(self, nodeid: str, report: pytest.TestReport | None = None) -> None:
        backend = self._backend(nodeid, report)
        if backend:
            self.quarantine.crashed(backend)


def _backend(item: pytest.Item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("backend") if callspec is not None else None


#: under a time budget, the backends measured first (the GPU reference run's order: our Triton kernels and torch,
#: then jax, then anything else) and the dtypes (bf16 first)
BUDGET_BACKENDS = ("triton", "torch", "jax")
BUDGET_DTYPES = ("bfloat16", "float16", "float32", "float64")


def budget_rank(item: pytest.Item) -> tuple[int, int, int]:
    """Where a test comes under a time budget: by backend (:data:`BUDGET_BACKENDS`), then dtype
    (:data:`BUDGET_DTYPES`), then seed (seed 0 first)."""
    backend, params = _backend(item), getattr(getattr(item, "callspec", None), "params", {})
    name = getattr(backend, "name", "")
    dtype = getattr(params.get("case"), "dtype", "")
    rank = lambda order, value: order.index(value) if value in order else len(order)
    return rank(BUDGET_BACKENDS, name), rank(BUDGET_DTYPES, dtype), int(params.get("seed", 0) or 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if settings.of(config).stop_at is not None:  # the most valuable first (a stable sort keeps the rest)
        items.sort(key=budget_rank)
    limit = settings.of(config).timeout
    if not limit or not config.pluginmanager.hasplugin("timeout") or _timeout_given(config):
        return
    mark = pytest.mark.timeout(limit)
    for item in items:
        if _backend(item) is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(mark)


def _timeout_given(config: pytest.Config) -> bool:
    """Whether the user set pytest-timeout's own timeout (command line, ini file or environment)."""
    return (config.getoption("timeout", None) is not None or bool(config.getini("timeout"))
            or bool(os.environ.get("PYTEST_TIMEOUT")))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    backend = _backend(item)
    stop_at = settings.of(item.config).stop_at
    if backend is not None and stop_at is not None and time.time() >= stop_at:
        pytest.skip(f"{NOT_RUN}: the run's time budget (--budget) was spent before this test started")
    quarantine = item.config.stash.get(QUARANTINE, None)
    if backend is not None and quarantine is not None:
        reason = quarantine.reason(backend.name)
        if reason:
            pytest.skip(reason)


class BackendInterrupt(Exception):
    """A backend raised KeyboardInterrupt without a signal: a result for that test, not the end of the run."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    except KeyboardInterrupt:
        if received_signal() or _backend(item) is None:
            raise
        raise BackendInterrupt(f"backend {_backend(item).name!r} raised KeyboardInterrupt (no Ctrl-C or signal "
                               f"was received): recorded as this test's failure; the run goes on") from None
