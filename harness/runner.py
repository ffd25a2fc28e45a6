"""Run the installed suites through pytest and collect one outcome per test.

Used by ``normbench run`` and ``normbench test``; works from a checkout and from
an installed wheel (the suites ship as the ``normbench.suites`` package).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import pytest

from normbench import deviations

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


@dataclass
class Collector:
    """A pytest plugin object recording every test's outcome (works under xdist)."""

    outcomes: list[Outcome] = field(default_factory=list)

    def pytest_runtest_logreport(self, report) -> None:
        failed_setup = report.when == "setup" and not report.passed
        if not (report.when == "call" or failed_setup):
            return
        record = getattr(report, "normbench_deviations", None) or {}
        outcome = report.outcome if report.when == "call" else ("skipped" if report.skipped else "error")
        match = _ID.match(report.nodeid.split("/")[-1])
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
        self.outcomes.append(Outcome(report.nodeid, backend, match["test"] if match else report.nodeid, outcome,
                                     str(message), case, tuple(record.get("covers", {}).items()),
                                     record.get("explains") or ""))


def run_pytest(args: list[str]) -> tuple[int, list[Outcome]]:
    """``pytest.main(args)`` with a :class:`Collector`; returns (exit code, outcomes)."""
    collector = Collector()
    code = pytest.main(args, plugins=[collector])
    return int(code), collector.outcomes


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
