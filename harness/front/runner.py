"""Run the installed suites through pytest and collect one outcome per test.

Used by ``normbench run`` and ``normbench test``; works from a checkout and from
an installed wheel (the suites ship as the ``normbench.suites`` package). Node ids
are recorded relative to the suites (``suites/test_forward.py::test_forward[...]``),
the same from a checkout and from ``site-packages``.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from normbench.check import measurement
from normbench.check.outcomes import CRASHED, FAILING, NOT_RUN, TIMEOUT
from normbench.core import deviations
from normbench.core.interrupts import held
from normbench.core.registry import Selection
from normbench.front.plan import Plan, PlanPlugin
from normbench.suites import DIRECTORY as SUITES_DIRECTORY

_ID = re.compile(r"^(?P<file>[^:]+)::(?P<test>[^\[]+)\[(?P<backend>[a-z][a-z0-9_-]*?)-(?P<rest>.*)\]$")


@dataclass(frozen=True)
class Outcome:
    """One test's result: ``outcome`` is passed, failed, skipped, error, xfailed (a known
    deviation: ``message`` is "known deviation (source): reason"), xpassed, or one of
    :data:`CRASHED`, :data:`TIMEOUT` and :data:`NOT_RUN` (see :class:`Collector`)."""

    nodeid: str
    backend: str
    test: str
    outcome: str
    message: str = ""
    case: str = ""
    #: the known deviations that cover this test (source -> reason), and the source of the one explaining it
    covers: tuple[tuple[str, str], ...] = ()
    explains: str = ""
    #: the properties beyond tolerance this test measured (``normbench.check.properties.PROPERTIES``):
    #: (name, "yes" or "no: what differed"); a property not measured is absent
    properties: tuple[tuple[str, str], ...] = ()
    #: what this forward test measured of y's error (``normbench.check.properties.ERROR_STRUCTURE``):
    #: (conformance column, value); a column not measured is absent
    measures: tuple[tuple[str, str | float], ...] = ()

    def property_verdict(self, name: str) -> str:
        """``yes``, ``no``, or "" (not measured)."""
        verdict = dict(self.properties).get(name, "")
        return verdict if verdict in ("", "yes") else "no"


def backend_of(nodeid: str, names: Sequence[str] = ()) -> str:
    """The backend in a suite test's node id (``...::test_forward[torch-float32-...]`` -> ``torch``), or ''.
    An id alone cannot split ``mutant-eps-fixed-float32-...``: given the backends' ``names``, the longest
    one the id's parameters start with wins; otherwise the parameters' first word."""
    match = _ID.match(nodeid.split("/")[-1])
    if not match:
        return ""
    params = f"{match['backend']}-{match['rest']}"
    known = [n for n in names if params == n or params.startswith(f"{n}-")]
    return max(known, key=len) if known else match["backend"]


def suite_nodeid(nodeid: str, rootpath: Path, file: str | None = None) -> str:
    """``nodeid`` relative to the suites folder's parent, ``suites/test_forward.py::...``,
    wherever the suites are installed and whatever pytest's rootdir; other node ids unchanged.
    ``file`` is the test's file relative to ``rootpath`` (a report's ``location[0]``, which
    says ``../`` where the node id, for a file outside the rootdir, says nothing); by
    default the node id's own path.

    >>> suite_nodeid(f"{SUITES_DIRECTORY.parent.name}/suites/test_forward.py::t[a]", SUITES_DIRECTORY.parents[1])
    'suites/test_forward.py::t[a]'
    >>> suite_nodeid("::t[a]", SUITES_DIRECTORY / "elsewhere", "../test_forward.py")
    'suites/test_forward.py::t[a]'
    >>> suite_nodeid("tests/test_cli.py::test_list", SUITES_DIRECTORY.parent / "elsewhere")
    'tests/test_cli.py::test_list'
    """
    path, sep, rest = nodeid.partition("::")
    path = path if file is None else file
    try:
        inside = (rootpath / path).resolve().relative_to(SUITES_DIRECTORY)
    except (ValueError, OSError):
        return nodeid
    return f"suites/{inside.as_posix()}{sep}{rest}"


#: pytest-timeout's failure message (its signal method): a test that ran out of time
TIMEOUT_MESSAGE = re.compile(r"^(Failed: )?Timeout \(>[0-9.]+s\) from pytest-timeout")


@dataclass
class Collector:
    """A pytest plugin object recording every test's outcome (works under xdist, in the controller).

    Each outcome is handed to ``sink`` as it arrives (``normbench run`` writes it to the run
    folder at once, so a killed run keeps every finished test). Besides pytest's outcomes it
    records ``crashed`` (an xdist worker died running the test), ``timeout`` (pytest-timeout
    stopped it) and ``not run``: at the end of the session every collected test that produced
    no outcome (an interrupted run, a backend stopped after crashing) is recorded as not run,
    so that a test which did not run is never counted as passed.
    """

    outcomes: list[Outcome] = field(default_factory=list)
    rootpath: Path = field(default_factory=Path.cwd)
    sink: Callable[[Outcome], None] | None = None
    #: the collected tests' node ids (pytest's own, relative to the rootdir), and those that reported
    expected: set[str] = field(default_factory=set)
    reported: set[str] = field(default_factory=set)
    #: why the session ended early, if it did (set by ``normbench run`` on a signal, or by pytest)
    interrupted: str = ""

    def pytest_configure(self, config: pytest.Config) -> None:
        self.rootpath = config.rootpath

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not hasattr(session.config, "workerinput"):
            self.expected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.expected.update(ids)

    def pytest_runtest_logreport(self, report) -> None:
        crashed = report.when not in ("setup", "call", "teardown")  # xdist's report for a test whose worker died
        failed_setup = report.when == "setup" and not report.passed
        if not (report.when == "call" or failed_setup or crashed):
            return
        self.reported.add(report.nodeid)
        record = getattr(report, "normbench_deviations", None) or {}
        outcome = report.outcome if report.when == "call" else ("skipped" if report.skipped else "error")
        nodeid = suite_nodeid(report.nodeid, self.rootpath, report.location[0] if report.location else None)
        message = ""
        if crashed and getattr(report, SIGNALLED, ""):  # ended from outside (normbench.front.isolation)
            outcome = NOT_RUN
            message = (f"{NOT_RUN}: its worker process was ended by {getattr(report, SIGNALLED)} while running it "
                       f"(sent from outside normbench, or by the backend itself), not a crash: no verdict; run it "
                       f"again")
        elif crashed:
            outcome = CRASHED
            message = (f"{report.longrepr}: the test process died (a segfault, an abort, os._exit, or a hang ended "
                       f"by --timeout-method=thread)")
        elif hasattr(report, "wasxfail"):  # a known deviation: expected (xfailed) or unexpectedly passing (xpassed)
            outcome = "xfailed" if report.skipped else "xpassed"
            message = str(report.wasxfail)
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
            outcome = NOT_RUN if message.startswith(f"{NOT_RUN}:") else outcome
        elif report.failed:
            message = (getattr(report, "normbench_message", "")  # a report made safe to send (pytest_plugin.py)
                       or getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message or "")
            outcome = TIMEOUT if TIMEOUT_MESSAGE.match(str(message)) else outcome
        self._add(nodeid, outcome, str(message), measurement.of_report(report), record)

    def _add(self, nodeid: str, outcome: str, message: str, measured: measurement.Measurement, record: dict) -> None:
        match = _ID.match(nodeid.split("/")[-1])
        backend = measured.backend or (match["backend"] if match else "")
        case = measured.case or (match["rest"] if match else "")
        result = Outcome(nodeid, backend, match["test"] if match else nodeid, outcome, message, case,
                         tuple(record.get("covers", {}).items()), record.get("explains") or "", _properties(measured),
                         _measures(measured))
        with held():  # counted and written together: a Ctrl-C waits until the row is written
            self.outcomes.append(result)
            if self.sink is not None:
                self.sink(result)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(session.config, "workerinput"):
            return
        self.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)

    def finish(self, interrupted: bool) -> None:
        """Record every collected test that produced no outcome as not run (saying why); ``interrupted``:
        the session ended on a signal (or a KeyboardInterrupt)."""
        from normbench.core.interrupts import last_signal

        # a signal this process received in the session ended it, whatever exit status pytest gave (after a second
        # Ctrl-C xdist's is not INTERRUPTED, and the tests left were blamed on "maximum crashed workers")
        if (interrupted or last_signal()) and not self.interrupted:
            self.interrupted = last_signal() or "KeyboardInterrupt"
        why = (f"the run was interrupted ({self.interrupted})" if self.interrupted
               else "the session ended before it (see pytest's output: e.g. xdist's 'maximum crashed workers')")
        for raw in sorted(self.expected - self.reported):
            self._add(suite_nodeid(raw, self.rootpath), NOT_RUN, f"{NOT_RUN}: {why}", measurement.Measurement(), {})
        self.reported |= self.expected


#: the attribute of xdist's report of a test whose worker died that names the signal a process outside normbench
#: sent that worker (set by :class:`normbench.front.isolation.CrashWatch`; absent for a crash)
SIGNALLED = "normbench_signalled"


def _properties(measured: measurement.Measurement) -> tuple[tuple[str, str], ...]:
    """The property verdicts a test's record holds, in :data:`~normbench.check.properties.PROPERTIES`' order."""
    from normbench.check.properties import PROPERTIES

    found = ((name, measured.properties.get(name)) for name in PROPERTIES)
    return tuple((name, verdict) for name, verdict in found if isinstance(verdict, str) and verdict)


def _measures(measured: measurement.Measurement) -> tuple[tuple[str, str | float], ...]:
    """The measurements a test's record holds (``normbench.check.properties.Properties.record``): the error
    structure, a quantized output's codes, in :data:`~normbench.check.properties.RECORDED`' order."""
    from normbench.check.properties import RECORDED

    found = ((name, measured.values.get(name)) for name in RECORDED)
    return tuple((name, value) for name, value in found
                 if isinstance(value, str) and value or isinstance(value, float))


def _plugins(plan: PlanPlugin | Selection | None) -> list[object]:
    """The plugin handing a session its plan (a Selection alone: backends made beforehand, options as given)."""
    if isinstance(plan, Selection):
        plan = PlanPlugin(Plan(selection=plan), {})
    return [] if plan is None else [plan]


def run_pytest(args: list[str], plan: PlanPlugin | Selection | None = None,
               collector: Collector | None = None) -> tuple[int, list[Outcome]]:
    """``pytest.main(args)`` with a :class:`Collector` (and ``plan``, a :class:`~normbench.front.plan.PlanPlugin`
    handing the session its plan's values and backends, or a Selection of backends made beforehand);
    returns (exit code, outcomes)."""
    collector = collector or Collector()
    plugins: list[object] = [collector, *_plugins(plan)]
    try:
        code = pytest.main(args, plugins=plugins)
    except KeyboardInterrupt:  # a second Ctrl-C while pytest was ending the session on the first
        collector.finish(interrupted=True)
        code = pytest.ExitCode.INTERRUPTED
    return int(code), collector.outcomes


@dataclass
class Collected:
    """What a pytest session would run (:func:`collect`): the tests, and those marked to skip, by reason."""

    tests: int = 0
    skips: Counter = field(default_factory=Counter)
    code: int = 0
    output: str = ""

    @property
    def runs(self) -> int:
        return self.tests - sum(self.skips.values())

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests = len(session.items)
        for item in session.items:
            marker = item.get_closest_marker("skip")
            if marker is not None:
                self.skips[str(marker.kwargs.get("reason", marker.args[0] if marker.args else ""))] += 1


def collect(args: list[str], plan: PlanPlugin | Selection | None = None) -> Collected:
    """Collect ``args`` (``--collect-only``, quietly, in this process; ``plan`` as for :func:`run_pytest`) and count
    the tests."""
    collected = Collected()
    plugins: list[object] = [collected, *_plugins(plan)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        collected.code = int(pytest.main([*args, "--collect-only", "-q"], plugins=plugins))
    collected.output = out.getvalue()
    return collected


def refused_arguments(args: Sequence[str]) -> str:
    """pytest's complaint about ``args`` (its last line, e.g. ``error: unrecognized arguments: --bogus``), or ""
    where it takes them: checked by collecting an empty folder, in this process, in a fraction of a second."""
    import tempfile

    if not args:
        return ""
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="normbench-args-") as empty, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        code = pytest.main([empty, "--collect-only", "-q", "-p", "no:cacheprovider", *args])
    if code != pytest.ExitCode.USAGE_ERROR:
        return ""
    lines = [line.strip() for line in out.getvalue().splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "usage error")


def deviation_tally(outcomes: list[Outcome]) -> deviations.Tally:
    """The known deviations of a run: which occurred, and which were declared but did not."""
    tally = deviations.Tally()
    for o in outcomes:
        tally.add({"covers": dict(o.covers), "explains": o.explains})
    return tally


def summary(outcomes: list[Outcome], max_failures: int = 5, interrupted: str = "") -> str:
    """A table per backend: passed, failed, known deviations, skipped, crashed or timed out,
    not run; then the first failures of each, the known deviations that occurred and those
    that did not. A backend with tests that did not run is INCOMPLETE, never PASS."""
    backends = sorted({o.backend for o in outcomes if o.backend})
    if not backends:
        return "no suite test ran" + (f" (the run was interrupted: {interrupted})" if interrupted else "")
    counts = {b: Counter(o.outcome for o in outcomes if o.backend == b) for b in backends}
    width = max(len(b) for b in backends + ["backend"])
    lines = [f"{'backend':<{width}}  {'passed':>7} {'failed':>7} {'known dev.':>10} {'skipped':>7} "
             f"{'crashed':>7} {'not run':>7}  verdict"]
    for b in backends:
        c = counts[b]
        died = c[CRASHED] + c[TIMEOUT]
        bad = sum(c[o] for o in FAILING) - died
        if bad or died:
            verdict = "FAIL" + (f" ({c[CRASHED]} crashed, {c[TIMEOUT]} timed out)" if died else "")
        elif c[NOT_RUN]:
            verdict = "INCOMPLETE: some tests did not run"
        elif c["passed"]:
            verdict = "PASS, with known deviations" if c["xfailed"] else "PASS"
        else:
            verdict = "nothing ran"
        lines.append(f"{b:<{width}}  {c['passed']:>7} {bad:>7} {c['xfailed']:>10} {c['skipped']:>7} "
                     f"{died:>7} {c[NOT_RUN]:>7}  {verdict}")
    if interrupted:
        lines.append(f"\nINTERRUPTED ({interrupted}): the verdicts above cover only the tests that ran")
    for b in backends:
        failures = [o for o in outcomes if o.backend == b and o.outcome in ("failed", "error", CRASHED, TIMEOUT)]
        if failures:
            lines.append(f"\n{b}: {len(failures)} failing; first {min(len(failures), max_failures)}:")
            lines += [f"  {o.nodeid}\n    {o.outcome.upper() + ': ' if o.outcome in (CRASHED, TIMEOUT) else ''}"
                      f"{o.message.splitlines()[0] if o.message else ''}" for o in failures[:max_failures]]
        stopped = next((o for o in outcomes if o.backend == b and o.outcome == NOT_RUN), None)
        if stopped is not None:
            lines.append(f"\n{b}: {counts[b][NOT_RUN]} tests did not run; {stopped.message}")
    violated = property_lines(outcomes)
    if violated:
        lines += ["\nproperties violated (reported; failures only where --require asked for them):"]
        lines += [f"  {line}" for line in violated]
    declared = deviation_tally(outcomes).lines()
    if declared:
        lines += ["\nknown deviations (declared failures, shown so they stay visible):"]
        lines += [f"  {line}" for line in declared]
    return "\n".join(lines)


def property_lines(outcomes: list[Outcome]) -> list[str]:
    """One line per backend and violated property: ``torch: not batch-invariant in 2 of 4 tests measuring it``."""
    from normbench.check.properties import PROPERTIES

    lines = []
    for b in sorted({o.backend for o in outcomes if o.backend}):
        for name in PROPERTIES:
            verdicts = [o.property_verdict(name) for o in outcomes if o.backend == b]
            measured, violated = sum(v != "" for v in verdicts), verdicts.count("no")
            if violated:
                lines.append(f"{b}: not {name} in {violated} of {measured} tests measuring it")
    return lines


def outcome_rows(outcomes: list[Outcome], run_id: str) -> list[dict]:
    """Outcomes as rows of the conformance results schema (:data:`normbench.check.outcomes.CONFORMANCE`), with the properties
    each test measured (``deterministic``, ``batch_invariant``: yes, no or empty; what differed in
    ``property_notes``) and, for a forward test, its error's histograms and coherence ratios."""
    from normbench.check.outcomes import CONFORMANCE
    from normbench.check.properties import PROPERTIES
    from normbench.core.storage import new_row

    def notes(o: Outcome) -> str:
        return " | ".join(f"{name}: {verdict.removeprefix('no: ')}" for name, verdict in o.properties
                          if verdict != "yes")

    from normbench.core.case_ids import operation_of

    return [new_row(CONFORMANCE, run_id=run_id, backend=o.backend, suite=o.nodeid.split("::")[0].split("/")[-1],
                    test=o.test, case=o.case, normalization=operation_of(o.case).name, nodeid=o.nodeid,
                    outcome=o.outcome, message=o.message,
                    **{name.replace("-", "_"): o.property_verdict(name) for name in PROPERTIES},
                    property_notes=notes(o), **dict(o.measures))
            for o in outcomes]
