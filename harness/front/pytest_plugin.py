"""The pytest plugin (entry point ``pytest11``): ``--normbench-impl``, seeds, parametrization.

Loaded by every pytest session in an environment with normbench installed, so
it stays cheap: it imports no backend until a test asks for the ``backend``
argument, or ``--normbench-impl`` is given (then a bad name is a usage error at once).
For the same reason it registers only ``--normbench-*`` options, which cannot
collide with a project's own: the short ``--impl`` is an alias that
``suites/conftest.py`` adds where normbench's suites are collected
(``pytest suites/ --impl=torch``); both spellings are one setting, and giving
them different values is a usage error.

A suite test takes ``backend`` (and optionally ``case`` and ``seed``)::

    @pytest.mark.normbench_cases(cases.FORWARD_CASES)
    def test_forward(backend, case, seed):
        conformance.check_forward(backend, cases.make_inputs(case, seed))

and is parametrized over the selected backends x cases x seeds, with ids like
``test_forward[torch-float16-rows65-hidden1000-offset1e3]`` and a marker per
case family (``pytest suites/ -m family_layout``). Cases a backend
cannot run (dtype, layout, no backward) are skipped with the reason.

Known deviations (``normbench.core.deviations``: ``suites/known_deviations.txt``, files
given with ``--normbench-deviations`` and each backend's ``known_deviations``) turn
the failures they explain into xfailed "known deviation" reports; the terminal
summary lists them, and the declared ones that did not occur.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from normbench import __version__
from normbench.core import deviations, safe_text
from normbench.core.exceptions import NormbenchError
from normbench.core.registry import ALL, Selection, describe, get_registry
from normbench.front import options, plan, settings, threads
from normbench.front.plan import SELECTION

#: throughput options, the sweep, results and progress live in their own module; crash and hang
#: isolation in another
pytest_plugins = ["normbench.front.pytest_throughput", "normbench.front.isolation"]
KNOWN_DEVIATIONS = pytest.StashKey[list]()
TALLY = pytest.StashKey[deviations.Tally]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normbench", "normbench LayerNorm suites")
    options.add_impl_option(group.addoption, prefix="normbench-",
                            note=" On normbench's suites folder, --impl is the same option.")
    options.add_seed_option(group.addoption, prefix="normbench-")
    options.add_threads_option(group.addoption, prefix="normbench-")
    options.add_require_option(group.addoption, prefix="normbench-")
    group.addoption("--normbench-deviations", metavar="FILE", type=options.parse_deviations_file, action="append",
                    default=[],
                    help="A file of known deviations, lines 'backend | device glob | test pattern | message regex "
                         "| reason' (harness/core/deviations.py), in addition to suites/known_deviations.txt and the "
                         "backends' own known_deviations. Repeatable. Default: none.")
    options.add_untrusted_option(group.addoption, prefix="normbench-")
    group.addoption("--normbench-strict", action="store_true", default=False,
                    help="Report known deviations as failures, not xfailed, and fail the run if a declared "
                         "deviation did not occur. Default: %(default)r.")


def pytest_configure(config: pytest.Config) -> None:
    plan.apply_to_worker(config)  # an xdist worker of `normbench run`: the plan its controller sent
    config.addinivalue_line("markers", "normbench_cases(cases, backward=False): parametrize a suite test "
                                       "over these normbench.core.cases.Case objects and the selected backends")
    config.addinivalue_line("markers", "slow: a large case; deselect with -m 'not slow'")
    from normbench.core.cases import ALL_FAMILIES

    for family in ALL_FAMILIES:
        config.addinivalue_line("markers", f"family_{family}: cases of the {family!r} family (normbench.core.cases)")
    try:
        config.stash[KNOWN_DEVIATIONS] = deviations.load() + [
            e for path in settings.of(config).deviations for e in deviations.load(path)]
    except NormbenchError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[TALLY] = deviations.Tally()
    config.pluginmanager.register(DeviationReport(config), "normbench-deviations")
    config.pluginmanager.register(PropertyReport(config), "normbench-properties")
    if settings.of(config).impl is not None:
        from normbench.core import vetting

        vetting.discard_foreign()  # before xdist starts a worker: a verdict no ancestor made is not passed on
        selection(config)


def selection(config: pytest.Config) -> Selection:
    """The backends ``--normbench-impl`` (or its alias ``--impl``) selects (created once per process)."""
    if SELECTION not in config.stash:
        spec = settings.of(config).impl or ALL
        try:
            from normbench.core import remote

            config.stash[SELECTION] = get_registry().select(
                spec, create=remote.start if settings.of(config).untrusted else None)
        except NormbenchError as exc:
            raise pytest.UsageError(f"{options.impl_given_as(config.option)}={spec}: {exc}") from None
    return config.stash[SELECTION]


def _header(config: pytest.Config) -> list[str]:
    sel = config.stash[SELECTION]
    seeds = settings.of(config).seed
    seed = options.format_seeds(seeds) + (f" ({len(seeds)} seeds)" if len(seeds) > 1 else "")
    if len(seeds) == 1 and os.environ.get(options.SEED_DRAWN_ENV) == str(seeds[0]):
        seed += f" (drawn at random for this run; --normbench-seed={seeds[0]} reproduces it)"
    shown = ", ".join(describe(b) for b in sel.backends) or "none"
    lines = [f"normbench {__version__}: backends {shown}; seed {seed}"]
    if sel.backends:
        lines.append(f"normbench: threads in the conformance suites: "
                     f"{threads.describe(sel.backends, settings.of(config).threads)}")
        lines.append(f"normbench: properties required: {_required_said(config)}")
    lines += [f"normbench: runtime note: {b.name}: {b.runtime_note}" for b in sel.backends if b.runtime_note]
    lines += [f"normbench: skipped {name}: {reason}" for name, reason in sel.skipped]
    lines += [f"normbench: warning: {message}" for message in sel.warnings]
    declared = _declared(config, sel)
    if declared:
        lines.append(f"normbench: known deviations declared: {declared}"
                     + (" (--normbench-strict: reported as failures)" if settings.of(config).strict else ""))
    return lines


def _required_said(config: pytest.Config) -> str:
    """``deterministic (batch-invariant reported, not required)``: what --normbench-require asks."""
    from normbench.check.properties import PROPERTIES

    required = settings.of(config).require
    reported = [p for p in PROPERTIES if p not in required]
    return (", ".join(required) or "none") + (f" ({', '.join(reported)} reported, not required)" if reported else "")


@pytest.fixture
def normbench_properties(request: pytest.FixtureRequest):
    """The :class:`normbench.check.properties.Properties` a suite test hands its checks: the properties
    ``--normbench-require`` requires fail the test when violated; every verdict goes into the test's
    record (``normbench.check.measurement``: ``deterministic``: ``yes`` or ``no: what differed``), which the
    results, the terminal summary and the report read; so do the measurements a check records
    (``error_histogram``, ...: ``normbench.check.properties.error_structure``)."""
    from normbench.check.properties import Properties

    return Properties(required=tuple(settings.of(request.config).require), sink=request.node.user_properties)


def _declared(config: pytest.Config, sel: Selection) -> str:
    """``"3 in suites/known_deviations.txt; 5 in flax.known_deviations"``: the entries for the selected backends."""
    names = {b.name for b in sel.backends}
    counts = Counter(e.origin for e in _entries(config, sel.backends) if e.backend in names)
    return "; ".join(f"{n} in {origin}" for origin, n in counts.items())


def _entries(config: pytest.Config, backends) -> list:
    """The file entries and the known_deviations of ``backends`` (validated when the class was loaded)."""
    declared = [e for b in backends for e in deviations.from_backend(type(b))]
    return config.stash[KNOWN_DEVIATIONS] + declared


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return _header(config) if SELECTION in config.stash else None


def pytest_report_collectionfinish(config: pytest.Config, items) -> list[str] | None:
    # --normbench-impl not given: the selection was made lazily during collection
    if settings.of(config).impl is None and SELECTION in config.stash:
        return _header(config)
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    from normbench.check.applicability import skip_reason

    sel = selection(metafunc.config)
    if "direction" in metafunc.fixturenames:  # a throughput test: the sweep, not the conformance cases
        from normbench.front.pytest_throughput import parametrize_sweep

        return parametrize_sweep(metafunc, sel.backends)
    seeds = settings.of(metafunc.config).seed
    marker = metafunc.definition.get_closest_marker("normbench_cases")
    case_list = list(marker.args[0]) if marker else [None]
    backward = bool(marker.kwargs.get("backward", False)) if marker else False
    use_seed = "seed" in metafunc.fixturenames
    argnames = ["backend"] + (["case"] if marker else []) + (["seed"] if use_seed else [])
    params = []
    for backend in sel.backends:
        for case in case_list:
            for seed in seeds if use_seed else [None]:
                parts = [backend.name, case.id if case else None,
                         f"seed{seed}" if use_seed and len(seeds) > 1 else None]
                marks = []
                reason = skip_reason(backend, case, backward=backward) if case else (
                    f"backend {backend.name!r} has no backward (has_backward = False)"
                    if backward and not backend.has_backward else None)
                if reason:
                    marks.append(pytest.mark.skip(reason=reason))
                if case is not None:
                    marks.append(getattr(pytest.mark, f"family_{case.family}"))
                    if case.slow:
                        marks.append(pytest.mark.slow)
                values = [backend] + ([case] if marker else []) + ([seed] if use_seed else [])
                params.append(pytest.param(*values, id="-".join(p for p in parts if p), marks=marks))
    if not params:
        why = "; ".join(f"{n}: {r}" for n, r in sel.skipped) or "no backend selected"
        params = [pytest.param(*([None] * len(argnames)), id="no-backend",
                               marks=pytest.mark.skip(reason=f"no available backend ({why})"))]
    metafunc.parametrize(argnames, params)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Name the backend and case in every report (``normbench.front.runner`` reads them;
    a test id alone cannot split ``mutant-eps-fixed-float32-...``)."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec else None
    if backend is not None:
        from normbench.check import measurement

        case = callspec.params.get("case")
        measurement.update(item.user_properties, backend=backend.name, case=None if case is None else case.id)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A conformance test runs its backend with ``--normbench-threads`` threads, a throughput
    case with the library's own (:mod:`normbench.front.threads`)."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    if backend is not None:
        throughput = "direction" in getattr(item, "fixturenames", ())
        threads.apply(backend, None if throughput else settings.of(item.config).threads)


def _subject(item: pytest.Item, backend) -> deviations.Subject:
    case = item.callspec.params.get("case")
    return deviations.Subject(backend.name, backend.device, re.sub(r"-seed\d+\]$", "]", item.name),
                                  getattr(case, "id", ""), getattr(case, "family", ""))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    if backend is not None:
        _safe_report(report)
    if report.when != "call" or backend is None or report.skipped:
        return
    from normbench.check.conformance import ConformanceError

    message = str(call.excinfo.value) if call.excinfo is not None else ""
    check_failure = call.excinfo is not None and call.excinfo.errisinstance(ConformanceError)
    record = deviations.record(_entries(item.config, [backend]), _subject(item, backend), report.failed,
                                   message, check_failure)
    if record["covers"]:
        report.normbench_deviations = record  # plain data: travels to the xdist controller with the report
    if not report.failed:
        return
    if record["explains"] and not settings.of(item.config).strict:
        report.outcome = "skipped"
        report.wasxfail = f"known deviation ({record['explains']}): {record['covers'][record['explains']]}"
        return
    seed = callspec.params.get("seed", settings.of(item.config).seed[0])
    nodeid = re.sub(r"-seed\d+\]$", "]", item.nodeid)
    report.sections.append(("normbench: reproduce",
                            f"pytest '{nodeid}' {_impl_flag(item)}={backend.name} --normbench-seed={seed}"))


#: the most characters of a failure's report (traceback and message) and of each captured output shown
REPORT_LIMIT = 50_000


def _safe_report(report: pytest.TestReport) -> None:
    """A backend test's report made safe to send and show (:mod:`normbench.core.safe_text`): a backend's exception
    text or output with a lone surrogate made xdist's transport fail (INTERNALERROR, every test "not run"), escape
    sequences reached the terminal raw, a 5 MB message was printed whole. Reports that are safe are left as they are."""
    if report.longrepr is not None and not isinstance(report.longrepr, tuple):  # a skip's (path, line, reason) kept
        text = str(report.longrepr)
        if not safe_text.is_safe(text, REPORT_LIMIT):
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None:  # the failure's one-line message, which the results record (front/runner.py)
                report.normbench_message = safe_text.safe(crash.message)
            report.longrepr = safe_text.safe(text, REPORT_LIMIT)
    report.sections = [(title, content if safe_text.is_safe(content, REPORT_LIMIT)
                        else safe_text.safe(content, REPORT_LIMIT)) for title, content in report.sections]


def _impl_flag(item: pytest.Item) -> str:
    """``--impl`` for a test of normbench's suites folder (where suites/conftest.py defines that alias)
    unless the run said ``--normbench-impl``; ``--normbench-impl`` elsewhere."""
    from normbench.suites import DIRECTORY

    in_suites = Path(item.path).resolve().is_relative_to(DIRECTORY)
    said = options.impl_given_as(item.config.option, default="--impl")
    return "--impl" if in_suites and said == "--impl" else "--normbench-impl"


class DeviationReport:
    """Tallies the known deviations of every test (in the xdist controller too), lists
    them at the end of the run, and under --normbench-strict fails a run in which a
    declared deviation did not occur."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tally = config.stash[TALLY]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "normbench_deviations", None)
        if record:
            self.tally.add(record)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker sees only its share; the controller decides
            return
        strict = settings.of(self.config).strict
        if strict and self.tally.stale() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        lines = self.tally.lines()
        if lines:
            strict = settings.of(self.config).strict
            terminalreporter.section("normbench known deviations" + (
                " (--normbench-strict: reported as failures)" if strict else ""))
            for line in lines:
                terminalreporter.line(line)


class PropertyReport:
    """Tallies the properties every test measured (from its report's ``user_properties``, so in the xdist
    controller too) and lists, at the end of the run, each backend's violated ones, one line each."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: (backend, property) -> [tests measured, tests violated, the first violation "case: detail"]
        self.tally: dict[tuple[str, str], list] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        from normbench.check import measurement

        record = measurement.of_report(report)
        backend = record.backend
        for name, verdict in record.properties.items():
            if backend is None:
                continue
            entry = self.tally.setdefault((backend, name), [0, 0, ""])
            entry[0] += 1
            if verdict != "yes":
                entry[1] += 1
                detail = verdict.removeprefix("no: ").split("; ")[0]
                entry[2] = entry[2] or f"{record.case or report.nodeid}: {detail}"

    def lines(self) -> list[str]:
        required = settings.of(self.config).require
        out = []
        for (backend, name), (measured, violated, first) in sorted(self.tally.items()):
            if violated:
                how = "required: these tests failed" if name in required else \
                    f"reported, not required: --normbench-require={name} makes it a failure"
                out.append(f"{backend}: not {name} in {violated} of {measured} tests measuring it ({how}); "
                           f"first: {first}")
        return out

    def pytest_terminal_summary(self, terminalreporter) -> None:
        lines = self.lines()
        if lines:
            terminalreporter.section("normbench properties violated")
            for line in lines:
                terminalreporter.line(line)
