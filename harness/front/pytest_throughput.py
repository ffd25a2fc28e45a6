"""The throughput half of the pytest plugin: options, the sweep, results and progress.

Loaded by :mod:`normbench.front.pytest_plugin`. A throughput test takes ``backend``,
``case``, ``direction`` and the session fixture ``normbench_throughput``::

    @pytest.mark.throughput
    def test_throughput(backend, case, direction, normbench_throughput, request):
        measurement = normbench_throughput.measure(backend, case, direction)

and is parametrized over the selected backends x the sweep of each backend's
device (:func:`normbench.core.cases.throughput_cases`) x the directions, narrowed by
``--normbench-direction``, ``--normbench-dtype`` and ``--normbench-shape``.

Default selection: ``pytest suites/`` runs the conformance suites only. Tests
marked ``throughput`` are deselected unless ``-m`` is given (``-m throughput``
runs them, ``-m "not throughput"`` says so explicitly) or they are all that was
collected (``pytest suites/test_throughput.py``). Under pytest-xdist workers
they skip: timing needs the machine to itself. A backend whose ``timing_note``
says its timings would mean nothing where it runs (the Triton interpreter on CPU)
has every case skipped with that note (:func:`not_timed_reason`).

With ``-q`` the sweep writes one progress line per case and nothing else per test:
no ``.``/``x``/``s`` letters (and ``normbench run`` turns off pytest's ``[ nn%]``
with ``-o console_output_style=classic``), so the lines stay clean.

Rows go to ``<--normbench-out>/<run-id>/`` as they are measured
(:data:`normbench.perf.throughput.THROUGHPUT`, stored by :mod:`normbench.core.storage`), with ``environment.json``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from normbench.core.storage import ResultsError
from normbench.front import options, settings
from normbench.front.plan import SELECTION
from normbench.perf.sweep import Filters

if TYPE_CHECKING:
    from normbench.core.backend import Backend
    from normbench.core.cases import Case
    from normbench.perf.throughput import Measurement

SESSION = pytest.StashKey["ThroughputSession"]()
RECORDER = pytest.StashKey["Recorder"]()
RUN_ID = pytest.StashKey[str]()
COUNT = pytest.StashKey[int]()
#: how a worker learns the controller's run id
RUN_ID_INPUT = "normbench_run_id"
#: the user property carrying the ceilings a test measured ({device key: Ceiling.as_dict()})
CEILINGS = "normbench_ceilings"
#: the user property under which a throughput test reports its results row
ROW = "normbench_row"
XDIST_REASON = ("throughput timing needs the machine to itself: run it without -n (pytest-xdist), or with -n 1 "
                "(one worker process)")


#: a rehearsal (``--normbench-rehearsal``) times each case this few samples, for this long at most, and measures the
#: copy ceiling on, and flushes the cache with, a buffer of this many MiB (below the cache rule, which the ceiling's
#: record says): it proves the path, it measures nothing
REHEARSAL_SAMPLES = 3
REHEARSAL_TIME_S = 0.05
REHEARSAL_CEILING_MIB = 16


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normbench", "normbench LayerNorm suites")
    add = group.addoption
    options.add_throughput_options(add, prefix="normbench-")
    add("--normbench-min-samples", metavar="N", type=options.parse_count(3), default=10,
        help="Timed samples per case, at least. Default: %(default)r")
    add("--normbench-max-time", metavar="SECONDS", type=options.parse_seconds, default=1.0,
        help="Keep sampling a case until this much time has passed (or 200 samples). Default: %(default)r")
    add("--normbench-ceiling-mib", metavar="MIB", type=options.parse_count(1), default=None,
        help="The ceiling's copy buffer in MiB (recorded; below 4x the last-level cache is noted). "
             "Default: 4x the last-level cache")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Progress(config), "normbench-progress")
    if not hasattr(config, "workerinput"):
        config.stash[RECORDER] = Recorder(config)
        config.pluginmanager.register(config.stash[RECORDER], "normbench-throughput-recorder")
    config.addinivalue_line("markers", "throughput: a timed throughput case; deselected unless -m selects it "
                                       "or it is all that was collected")


def filters(config: pytest.Config) -> Filters:
    return Filters(settings.of(config).direction, settings.of(config).dtype,
                   settings.of(config).shape, settings.of(config).norm,
                   bool(settings.of(config).rehearsal))


def not_timed_reason(backend: Backend) -> str | None:
    """The skip reason of every throughput case of a backend whose ``timing_note`` says its
    timings would mean nothing where it runs; None for a backend that is timed."""
    note = getattr(backend, "timing_note", None)
    return f"not timed: {note}" if note else None


def sweep_params(config: pytest.Config, backends: list) -> list:
    """pytest params (backend, case, direction) of the sweep for each backend,
    case by case (every backend and direction of a case in a row, so they share
    its inputs and oracle results, and compare side by side)."""
    from normbench.check.applicability import skip_reason

    worker = _shared_worker(config)
    params = []
    for backend in backends:
        untimed = not_timed_reason(backend)
        for case, direction in filters(config).pairs(backend.device):
            reason = XDIST_REASON if worker else untimed or skip_reason(backend, case, backward=direction != "forward")
            marks = [getattr(pytest.mark, f"family_{case.family}")] + ([pytest.mark.skip(reason=reason)] if reason else [])
            params.append(pytest.param(backend, case, direction, id=f"{backend.name}-{case.id}-{direction}", marks=marks))
    order = {case: i for i, case in enumerate(dict.fromkeys(p.values[1] for p in params))}
    return sorted(params, key=lambda p: order[p.values[1]])


def parametrize_sweep(metafunc: pytest.Metafunc, backends: list) -> None:
    params = sweep_params(metafunc.config, backends) or [pytest.param(
        None, None, None, id="no-case", marks=pytest.mark.skip(reason="no backend or no case passed the filters"))]
    metafunc.parametrize(["backend", "case", "direction"], params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timed = [i for i in items if i.get_closest_marker("throughput")]
    if config.getoption("markexpr") or not timed or len(timed) == len(items):
        return
    config.hook.pytest_deselected(items=timed)
    items[:] = [i for i in items if not i.get_closest_marker("throughput")]


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[COUNT] = sum(1 for i in session.items if i.get_closest_marker("throughput")
                                      and not i.get_closest_marker("skip"))
    if session.config.stash[COUNT] and RECORDER in session.config.stash and not session.config.option.collectonly:
        session.config.stash[RECORDER].claim()


@dataclass
class ThroughputSession:
    """The process that measures: one run's runner. Each row travels with its test's report
    (the user property :data:`ROW`, and :data:`CEILINGS` when a ceiling was measured) to the
    process that writes the run folder (:class:`Recorder`): this one, or the xdist controller."""

    config: pytest.Config
    runner: Any
    run_id: str
    _ceilings_sent: set = field(default_factory=set)

    def measure(self, backend: Backend, case: Case, direction: str) -> Measurement:
        """Measure one case (:meth:`normbench.perf.throughput.ThroughputRunner.measure`)."""
        return self.runner.measure(backend, case, direction)

    def new_ceilings(self) -> dict[str, dict]:
        """The ceilings measured since the last call, as JSON-ready dicts."""
        fresh = {k: c.as_dict() for k, c in self.runner.ceilings.items() if (k, c.gbps) not in self._ceilings_sent}
        self._ceilings_sent |= {(k, c["gbps"]) for k, c in fresh.items()}
        return fresh


def _run_id(config: pytest.Config) -> str:
    """The run id: ``--normbench-run-id``, else one made once per session (xdist workers get the controller's)."""
    if RUN_ID not in config.stash:
        from normbench.core.environment import new_run_id

        given = getattr(config, "workerinput", {}).get(RUN_ID_INPUT)
        config.stash[RUN_ID] = settings.of(config).run_id or given or new_run_id()
    return config.stash[RUN_ID]


def _session(config: pytest.Config) -> ThroughputSession:
    if SESSION not in config.stash:
        from normbench.perf.throughput import ThroughputRunner
        from normbench.perf.timing import TimingOptions

        rehearsal = bool(settings.of(config).rehearsal)
        min_samples = REHEARSAL_SAMPLES if rehearsal else settings.of(config).min_samples
        options = TimingOptions(cache=settings.of(config).cache, min_samples=min_samples,
                                max_samples=max(200, min_samples),
                                max_time_s=REHEARSAL_TIME_S if rehearsal else settings.of(config).max_time)
        mib = settings.of(config).ceiling_mib or (REHEARSAL_CEILING_MIB if rehearsal else None)
        runner = ThroughputRunner(options, ceiling_bytes=mib << 20 if mib else None,
                                  flush_bytes=REHEARSAL_CEILING_MIB << 20 if rehearsal else None,
                                  seed=settings.of(config).seed[0], run_id=_run_id(config))
        config.stash[SESSION] = ThroughputSession(config, runner, _run_id(config))
    return config.stash[SESSION]


def _shared_worker(config: pytest.Config) -> bool:
    """Whether this is one of several xdist workers (timing would compete for the machine)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is not None and int(workerinput.get("workercount", 2)) > 1


@pytest.fixture(scope="session")
def normbench_throughput(request: pytest.FixtureRequest) -> ThroughputSession:
    """The session's throughput runner (see the module doc)."""
    if _shared_worker(request.config):
        pytest.skip(XDIST_REASON)
    return _session(request.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    if call.when == "call" and SESSION in item.config.stash and item.get_closest_marker("throughput"):
        fresh = item.config.stash[SESSION].new_ceilings()
        if fresh:
            item.user_properties.append((CEILINGS, fresh))
    return (yield)


class Recorder:
    """Writes the run folder, in the process pytest reports to (the xdist controller, or the
    only process): each throughput test's row as its report arrives, ``environment.json`` with
    the ceilings, and a row for a case that never produced one: ``crashed`` (its worker died),
    ``timeout`` (pytest-timeout stopped it) or ``error`` (an exception, in the test or its setup).
    The folder is claimed (:mod:`normbench.core.run_folder`) as soon as collection says a case will be
    measured (never by ``--collect-only``) and released at the end of the session. A write that
    fails (a full disk) is said once; the cases go on and the session exits 4."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[dict] = []
        self.ceilings: dict[str, dict] = {}
        self._claim: Any = None
        self._writer: Any = None
        #: the first failed write, said once (the run goes on)
        self.error: Exception | None = None
        self._cases: dict[str, tuple] | None = None

    @property
    def folder(self) -> Path:
        return Path(settings.of(self.config).out) / _run_id(self.config)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[RUN_ID_INPUT] = _run_id(self.config)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """Under xdist the controller collects nothing: count the cases to measure from the worker's ids."""
        if int(node.workerinput.get("workercount", 1)) > 1:  # the workers skip every case (XDIST_REASON)
            self.config.stash[COUNT] = 0
            return
        cases = self._sweep()
        self.config.stash[COUNT] = sum(1 for i in ids if _is_throughput(i) and _case_id(i) in cases
                                       and not cases[_case_id(i)][1])
        if self.config.stash[COUNT] and not self.config.option.collectonly:
            self.claim()

    def claim(self) -> None:
        """Claim the run folder before anything is measured (:mod:`normbench.core.run_folder`): a bad
        run id, another writer or a folder already holding results ends the session with one message."""
        from normbench.core.run_folder import claim

        if self._claim is None:
            try:
                self._claim = claim(settings.of(self.config).out, _run_id(self.config))
            except ResultsError as exc:
                pytest.exit(f"normbench: error: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)

    def _sweep(self) -> dict[str, tuple]:
        """The sweep's cases by test id: (backend, case, direction), and whether the case is skipped."""
        if self._cases is None:
            selection = self.config.stash.get(SELECTION, None)
            self._cases = {} if selection is None else {
                p.id: (tuple(p.values), any(m.name == "skip" for m in p.marks))
                for p in sweep_params(self.config, selection.backends)}
        return self._cases

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        failed_setup = report.when == "setup" and report.failed  # a fixture error: the case never ran
        if not (report.when in ("call", "???") or failed_setup) or not _is_throughput(report.nodeid):
            return  # "???": xdist's report of a test whose worker died
        props = dict(report.user_properties)
        self.ceilings.update(props.get(CEILINGS) or {})
        row = props.get(ROW)
        if row is None and report.failed:
            row = self._unmeasured(report)
        if row is not None:
            self._write({**row, "run_id": _run_id(self.config)}, bool(props.get(CEILINGS)))

    def _unmeasured(self, report: pytest.TestReport) -> dict | None:
        """The row of a case that failed without producing one (crashed, timed out, or an exception
        outside the runner), made from the sweep's own case; None if it cannot be found, or if its worker was killed
        from outside normbench (a SIGTERM to it alone): no verdict on the backend, the case is not measured, as a
        case a spent budget left."""
        from normbench.front.runner import SIGNALLED, TIMEOUT_MESSAGE

        found = self._sweep().get(_case_id(report.nodeid))
        if found is None or getattr(report, SIGNALLED, ""):
            return None
        backend, case, direction = found[0]
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        verdict = ("crashed" if report.when == "???" else
                   "timeout" if TIMEOUT_MESSAGE.match(message) else "error")
        if verdict == "crashed":
            message += ": the test process died measuring this case (a segfault, an abort, os._exit)"
        return {**_session(self.config).runner.base_row(backend, case, direction), "verdict": verdict,
                "message": message}

    def _write(self, row: dict, ceilings_changed: bool) -> None:
        from normbench.core.environment import backends_record, environment, write_environment
        from normbench.core.storage import ResultsWriter
        from normbench.perf.throughput import THROUGHPUT

        self.rows.append(row)  # the summary shows every row, written or not
        if self.error is not None:
            return
        try:
            if self._writer is None:
                self.claim()
                self._writer = ResultsWriter(self.folder, _run_id(self.config), THROUGHPUT)
            self._writer.add(row)
            if ceilings_changed or len(self.rows) == 1:
                env = environment(_run_id(self.config), sys.argv)
                env["ceilings"] = dict(self.ceilings)
                if SELECTION in self.config.stash:
                    env.update(backends_record(self.config.stash[SELECTION]))
                write_environment(self.folder, env)
        except ResultsError as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """A write failed (a full disk): say it once; the cases go on and the summary shows them."""
        if self.error is None:
            self.error = exc
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"normbench: error: {exc}. The cases go on; the summary shows every row")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
        except ResultsError as exc:
            self._failed(exc)
        finally:
            if self._claim is not None:
                self._claim.release()
            self._writer = self._claim = None
        if self.error is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR  # 4: the results are not all on disk


def _is_throughput(nodeid: str) -> bool:
    return "test_throughput.py::" in nodeid


def _case_id(nodeid: str) -> str:
    """``...::test_throughput[numpy-float32-...-forward]`` -> ``numpy-float32-...-forward``."""
    return nodeid.rpartition("[")[2].rstrip("]")


def _row(report: pytest.TestReport) -> dict | None:
    return next((value for key, value in report.user_properties if key == ROW), None)


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    # -q: a throughput test writes its progress line (a measured case, or one that failed
    # without a row), never a letter: ".", "x", "s" or "F" would land in front of those lines
    if config.getoption("verbose") >= 0 or "throughput" not in getattr(report, "keywords", {}):
        return None
    if hasattr(report, "wasxfail"):
        return ("xfailed" if report.skipped else "xpassed"), "", ""
    if report.failed and report.when != "call":
        return "error", "", ""
    return report.outcome if report.when == "call" or not report.passed else "", "", ""


class Progress:
    """Writes a progress line per measured case with -q or -v (the default output keeps its dots),
    and one per case that failed without being measured (an exception, not a verdict)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seen = 0

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or self.config.getoption("verbose") == 0:
            return
        row = _row(report)
        unmeasured = row is None and report.failed and "throughput" in report.keywords
        if row is None and not unmeasured:
            return
        from normbench.report.text import progress_line

        self.seen += 1
        total = self.config.stash.get(COUNT, 0)
        if row is not None:
            line = progress_line(row, self.seen, total)
        else:
            crash = getattr(report.longrepr, "reprcrash", None)
            first = (getattr(crash, "message", "") or str(report.longrepr)).splitlines()[:1]
            line = f"[{self.seen}/{total or '?'}] {report.nodeid.rpartition('::')[2]}: ERROR: {first[0] if first else ''}"
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    recorder = config.stash.get(RECORDER, None)
    if recorder is None or not recorder.rows:
        return
    from normbench.report.text import ceiling_lines, throughput_table

    terminalreporter.section("normbench throughput")
    if config.getoption("verbose") >= 0:
        terminalreporter.write_line(throughput_table(recorder.rows))
        for line in ceiling_lines(recorder.ceilings.values()):
            terminalreporter.write_line(line)
    terminalreporter.write_line(f"{len(recorder.rows)} rows in {recorder.folder}/ (throughput.csv, throughput.json, "
                                f"environment.json)")
