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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from normbench import deviations
from normbench.registry import Selection
from normbench.suites import DIRECTORY as SUITES_DIRECTORY

#: the backends of a pytest session (``--normbench-impl``); the plugin makes it, unless
#: :func:`run_pytest` was given one already made (``normbench run`` makes it first, to print it)
SELECTION = pytest.StashKey[Selection]()

_ID = re.compile(r"^(?P<file>[^:]+)::(?P<test>[^\[]+)\[(?P<backend>[a-z][a-z0-9_-]*?)-(?P<rest>.*)\]$")


@dataclass(frozen=True)
class Outcome:
    """One test's result: ``outcome`` is passed, failed, skipped, error, xfailed (a known
    deviation: ``message`` is "known deviation (source): reason") or xpassed."""

    nodeid: str
    backend: str
    test: str
    outcome: str
    message: str = ""
    case: str = ""
    #: the known deviations that cover this test (source -> reason), and the source of the one explaining it
    covers: tuple[tuple[str, str], ...] = ()
    explains: str = ""


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


@dataclass
class Collector:
    """A pytest plugin object recording every test's outcome (works under xdist)."""

    outcomes: list[Outcome] = field(default_factory=list)
    rootpath: Path = field(default_factory=Path.cwd)

    def pytest_configure(self, config: pytest.Config) -> None:
        self.rootpath = config.rootpath

    def pytest_runtest_logreport(self, report) -> None:
        failed_setup = report.when == "setup" and not report.passed
        if not (report.when == "call" or failed_setup):
            return
        record = getattr(report, "normbench_deviations", None) or {}
        outcome = report.outcome if report.when == "call" else ("skipped" if report.skipped else "error")
        nodeid = suite_nodeid(report.nodeid, self.rootpath, report.location[0] if report.location else None)
        match = _ID.match(nodeid.split("/")[-1])
        props = dict(report.user_properties)
        backend = props.get("normbench_backend") or (match["backend"] if match else "")
        case = props.get("normbench_case") or (match["rest"] if match else "")
        message = ""
        if hasattr(report, "wasxfail"):  # a known deviation: expected (xfailed) or unexpectedly passing (xpassed)
            outcome = "xfailed" if report.skipped else "xpassed"
            message = str(report.wasxfail)
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.failed:
            message = getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message or ""
        self.outcomes.append(Outcome(nodeid, backend, match["test"] if match else nodeid, outcome,
                                     str(message), case, tuple(record.get("covers", {}).items()),
                                     record.get("explains") or ""))


@dataclass
class GivenSelection:
    """A pytest plugin object handing the session a :class:`Selection` made beforehand, so that the
    backends a run prints are the ones it runs (and are created once)."""

    selection: Selection

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[SELECTION] = self.selection


def run_pytest(args: list[str], selection: Selection | None = None) -> tuple[int, list[Outcome]]:
    """``pytest.main(args)`` with a :class:`Collector` (and ``selection``, if given, as the
    session's backends); returns (exit code, outcomes)."""
    collector = Collector()
    plugins: list[object] = [collector] + ([GivenSelection(selection)] if selection is not None else [])
    code = pytest.main(args, plugins=plugins)
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


def collect(args: list[str], selection: Selection | None = None) -> Collected:
    """Collect ``args`` (``--collect-only``, quietly, in this process) and count the tests."""
    collected = Collected()
    plugins: list[object] = [collected] + ([GivenSelection(selection)] if selection is not None else [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        collected.code = int(pytest.main([*args, "--collect-only", "-q"], plugins=plugins))
    collected.output = out.getvalue()
    return collected


def deviation_tally(outcomes: list[Outcome]) -> deviations.Tally:
    """The known deviations of a run: which occurred, and which were declared but did not."""
    tally = deviations.Tally()
    for o in outcomes:
        tally.add({"covers": dict(o.covers), "explains": o.explains})
    return tally


def summary(outcomes: list[Outcome], max_failures: int = 5) -> str:
    """A table per backend: passed, failed, known deviations, skipped; then the first
    failures of each, the known deviations that occurred and those that did not."""
    backends = sorted({o.backend for o in outcomes if o.backend})
    if not backends:
        return "no suite test ran"
    counts = {b: Counter(o.outcome for o in outcomes if o.backend == b) for b in backends}
    width = max(len(b) for b in backends + ["backend"])
    lines = [f"{'backend':<{width}}  {'passed':>7} {'failed':>7} {'known dev.':>10} {'skipped':>7}  verdict"]
    for b in backends:
        c = counts[b]
        bad = c["failed"] + c["error"] + c["xpassed"]
        verdict = "PASS" if bad == 0 and c["passed"] else ("FAIL" if bad else "nothing ran")
        if verdict == "PASS" and c["xfailed"]:
            verdict = "PASS, with known deviations"
        lines.append(f"{b:<{width}}  {c['passed']:>7} {bad:>7} {c['xfailed']:>10} {c['skipped']:>7}  {verdict}")
    for b in backends:
        failures = [o for o in outcomes if o.backend == b and o.outcome in ("failed", "error")]
        if failures:
            lines.append(f"\n{b}: {len(failures)} failing; first {min(len(failures), max_failures)}:")
            lines += [f"  {o.nodeid}\n    {o.message.splitlines()[0] if o.message else ''}"
                      for o in failures[:max_failures]]
    declared = deviation_tally(outcomes).lines()
    if declared:
        lines += ["\nknown deviations (declared failures, shown so they stay visible):"]
        lines += [f"  {line}" for line in declared]
    return "\n".join(lines)


def outcome_rows(outcomes: list[Outcome], run_id: str) -> list[dict]:
    """Outcomes as rows of the conformance results schema (:mod:`normbench.results`)."""
    from normbench.results import CONFORMANCE, new_row

    return [new_row(CONFORMANCE, run_id=run_id, backend=o.backend, suite=o.nodeid.split("::")[0].split("/")[-1],
                    test=o.test, case=o.case, nodeid=o.nodeid, outcome=o.outcome, message=o.message)
            for o in outcomes]
