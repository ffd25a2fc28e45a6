"""``normbench run`` and ``normbench test``: the suites run by pytest on a :class:`~normbench.front.plan.Plan`.

``normbench run`` is the main job, in a claimed run folder (:mod:`normbench.core.run_folder`): it prints what it
will do (the folder, the seeds, each backend as it is created, how many tests and cases the suites collect),
runs the conformance suites (pytest-xdist workers, so that a backend crashing the process ends one worker),
then the throughput suite (one worker, one case at a time), writes every finished test at once, and ends with a
summary and the report. SIGINT and SIGTERM end it but keep what ran and mark the folder interrupted
(``environment.json``'s ``status``). ``normbench test`` runs the suites on the plan, nothing more.

The plan's values reach each pytest session as values (:class:`~normbench.front.plan.PlanPlugin`); the pytest
arguments built here say only which suites, how many workers, and what the user added.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from normbench.core.registry import describe
from normbench.front import options
from normbench.front.plan import Plan, PlanPlugin
from normbench.suites import DIRECTORY as SUITES_DIRECTORY

INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED
#: with ``--bundle``, the run's output, copied into its folder (and carried in the bundle)
RUN_LOG = "run.log"
#: pytest's own arguments every session of a run takes
_QUIET_PYTEST = ["-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning"]


def _say(line: str) -> None:
    print(line, flush=True)


def pytest_args(plan: Plan, extra: Sequence[str], workers: bool = True, isolated: int = 0) -> list[str]:
    """pytest arguments for the suites; ``isolated`` (the number of backends): run the tests in
    worker processes even with ``-n 0`` (one worker), so that a backend crashing the process ends
    only its worker, and let xdist replace as many workers as the quarantine can need."""
    out = [str(SUITES_DIRECTORY), *_QUIET_PYTEST]
    if workers and (plan.workers != "0" or isolated):
        n = worker_count(plan)
        out += ["-n", n]
        if isolated:
            from normbench.front.isolation import CRASH_LIMIT

            count = int(n) if n.isdigit() else (os.cpu_count() or 1)
            out.append(f"--max-worker-restart={CRASH_LIMIT * isolated + 4 * count}")
    return out + list(extra)


def worker_count(plan: Plan) -> str:
    """``-n`` for the conformance suites: the plan's (at least one worker), never more than the tests counted
    (``-n 30`` for 5 tests started 30 processes)."""
    n = plan.workers if plan.workers != "0" else "1"
    if plan.tests is not None:
        n = str(max(1, min(int(n) if n.isdigit() else (os.cpu_count() or 1), plan.tests)))
    return n


def conformance_args(plan: Plan, extra: Sequence[str], workers: bool = True, isolated: int = 0) -> list[str]:
    """pytest arguments for the conformance suites: every suite file but the throughput one."""
    ignore = f"--ignore={SUITES_DIRECTORY / 'test_throughput.py'}"
    return pytest_args(plan, ["-q", "--no-header", ignore, *extra], workers, isolated)


def throughput_args(extra: Sequence[str] = ()) -> list[str]:
    """pytest arguments for the throughput suite: one worker process (a crash ends only it; cases are
    still timed one at a time); quiet, so that its progress lines are all it writes per case (no
    ``[ nn%]``: the classic console style). Its folder and filters come with the plan."""
    return [str(SUITES_DIRECTORY / "test_throughput.py"), *_QUIET_PYTEST, "-n", "1", "-q", "--no-header",
            "--benchmark-quiet", "-o", "console_output_style=classic", *extra]


def cmd_test(plan: Plan, extra: Sequence[str]) -> int:
    """``normbench test``: the suites on the plan's backends, through pytest (extra arguments go to pytest)."""
    import pytest

    return int(pytest.main(pytest_args(plan, extra), plugins=[PlanPlugin(plan, plan.options())]))


def exit_code(codes: list[int]) -> int:
    """The first failure's exit code; 5 (nothing collected) only if nothing ran anywhere."""
    failing = [c for c in codes if c not in (0, 5)]
    return failing[0] if failing else (5 if codes and all(c == 5 for c in codes) else 0)


def skipped_lines(selection) -> list[str]:
    """The backends left out (with the reason), those not timed (with their timing_note) and
    those whose runtime computes differently from the device they stand for (their runtime_note)."""
    lines = [f"skipped: {name}: {reason}" for name, reason in selection.skipped]
    return lines + [f"not timed: {b.name}: {b.timing_note} (the conformance suites ran on it)"
                    for b in selection.backends if b.timing_note] + [
        f"runtime note: {b.name}: {b.runtime_note}" for b in selection.backends if b.runtime_note]


def header(plan: Plan, run_id: str, folder) -> None:
    """Print what the run will do before it does it, and create the backends (``plan.select``): folder, seeds,
    each backend as it is created (version and device), the skipped ones and why (:func:`counts` then says how
    many tests and cases the suites collect)."""
    say = _say
    say(f"normbench run {run_id}")
    say(f"  output:      {folder}/" + (" (report.html too)" if plan.report else ""))
    say(f"  seeds:       {options.format_seeds(plan.seeds)}" + (" (throughput: the first)" if len(plan.seeds) > 1 else ""))
    say(f"  suites:      {', '.join(plan.suites)}")
    if plan.budget is not None:
        say(f"  budget:      {plan.budget:g} s: tests start until {_utc(plan.stop_at)} (the last "
            f"{budget_reserve(plan.budget):g} s are the summary's and the report's); the throughput suite first, "
            f"triton and torch first, bf16 first")
    if plan.rehearsal:
        say("  rehearsal:   the GPU sweep's cases shrunk to a few rows, timed briefly, the ceiling on a small buffer: "
            "proves the run's path, measures nothing")
    say(f"  backends:    --impl={plan.impl}, creating each (imports its framework)...")
    shown = set()

    def created(name: str, result) -> None:
        shown.add(name)
        if isinstance(result, str):
            say(f"    {name}: skipped: {result}")
        else:
            say(f"    {describe(result)}" + (f"; not timed: {result.timing_note}" if result.timing_note else ""))
            if result.runtime_note:
                say(f"      runtime note: {result.runtime_note}")

    selection = plan.select(progress=created)
    for name, reason in selection.skipped:
        if name not in shown:  # a plugin problem, found before any backend was created
            say(f"    {name}: skipped: {reason}")
    for message in selection.warnings:
        say(f"  warning: {message}")
    if selection.backends:
        from normbench.front import threads

        say(f"  threads:     conformance: {threads.describe(selection.backends, plan.threads)}"
            + ("; throughput: each library's own" if "throughput" in plan.suites else ""))
        if "conformance" in plan.suites:
            say(f"  properties:  required: {options.format_require(plan.require)} (the others are reported, "
                f"not failures)")


def counts(plan: Plan, run_id: str, extra: Sequence[str]) -> int | None:
    """How many conformance tests and throughput cases the suites collect (the end of the header): their sum, or
    None where a suite could not be collected. The conformance count caps its workers (``plan.tests``)."""
    from normbench.front.runner import collect

    say, selection, total = _say, plan.selection, 0
    if "conformance" in plan.suites:
        found = collect(conformance_args(plan, extra, workers=False), PlanPlugin(plan, plan.options()))
        if found.code == INTERRUPTED:  # pytest.main swallowed a Ctrl-C or SIGTERM: the run stops here
            raise KeyboardInterrupt
        skips = f", {sum(found.skips.values())} more collected to skip (the summary says why)" if found.skips else ""
        if found.code not in (0, 5):  # the run's own session reports the problem in full
            last = found.output.strip().splitlines()[-1:]
            say(f"  conformance: could not be collected (pytest exit {found.code}): "
                + (last[0] if last else "pytest's message is above"))
            total = None
        else:
            plan.tests = found.runs
            workers = "one worker process" if worker_count(plan) == "1" else f"-n {worker_count(plan)}"
            say(f"  conformance: {found.runs} tests{skips}; {workers}")
            total += found.runs
    if "throughput" in plan.suites:
        found = collect(throughput_args(extra), PlanPlugin(plan, plan.options(run_id=run_id)))
        if found.code == INTERRUPTED:
            raise KeyboardInterrupt
        timed = [b.name for b in selection.backends if not b.timing_note]
        untimed = [b.name for b in selection.backends if b.timing_note]
        say(f"  throughput:  {found.runs} case{'s' if found.runs != 1 else ''} on {', '.join(timed) or 'no backend'}, "
            f"one at a time" + (f" ({', '.join(untimed)}: not timed, see above)" if untimed else ""))
        total = None if total is None or found.code not in (0, 5) else total + found.runs
    return total


#: under a budget, a suite's session is not started with less than this left before tests stop starting: its
#: workers' start (imports, collection) takes seconds of it, and it would end past the budget having run nothing
SESSION_MIN_S = 15.0
#: under a budget, the counters' share, taken off the throughput sweep's time: at most this, a quarter of the budget
COUNTERS_RESERVE_S = 120.0
#: without a budget, the counters' time limit; an operation's measurement is not started with less than
#: COUNTERS_MIN_S left
COUNTERS_TIMEOUT_S = 600.0
COUNTERS_MIN_S = 15.0


def budget_reserve(budget: float) -> float:
    """Seconds of a ``--budget`` kept for the run's end (status, summary, report): a tenth, 10 s to 60 s."""
    return min(60.0, max(10.0, 0.1 * budget))


def cmd_run(plan: Plan, extra: Sequence[str], argv: Sequence[str]) -> int:
    """The main job, in a claimed run folder: one writer, checked before anything is measured. Every finished
    test is written at once; SIGINT and SIGTERM end the run but keep what ran, and the run still ends with
    its status, summary and report (written with further signals held off: :func:`interrupts.deferred`)."""
    from normbench.core.environment import new_run_id
    from normbench.core.exceptions import NormbenchError
    from normbench.core.interrupts import deferred
    from normbench.core.registry import get_registry
    from normbench.core.run_folder import claim
    from normbench.front.runner import refused_arguments

    if plan.budget is not None:  # from the command's start; the summary and report get the end of the budget
        plan.stop_at = time.time() + plan.budget - budget_reserve(plan.budget)
    run_id = plan.run_id or new_run_id()
    get_registry().names_in(plan.impl)  # a bad --impl is a usage error before any folder exists
    if plan.bundle:  # a used --bundle folder is said now, not after the run (in a GPU slot, its one chance)
        from normbench.report.bundle import check_out

        check_out(plan.bundle)
    refused = refused_arguments(extra)  # so are pytest arguments pytest refuses
    if refused:
        raise NormbenchError(f"pytest refuses the arguments normbench run passes on to it ({' '.join(extra)}): "
                             f"{refused.rstrip('.')}. Fix: `normbench run --help` lists normbench's options; others go to pytest")
    with claim(plan.out, run_id) as run, _removed_if_unused(run), _signals_end_the_run(), \
            _teed(run.path / RUN_LOG if plan.bundle else None):
        main = _MainJob(plan, extra, argv, run.path, run_id)
        try:
            header(plan, run_id, run.path)
            main.expected = counts(plan, run_id, extra)
            main.suites()
        except KeyboardInterrupt:  # between the suites' sessions (which keep their own results)
            from normbench.core.interrupts import last_signal

            main.interrupted = main.interrupted or last_signal() or "KeyboardInterrupt"
        with deferred(lambda line: print(f"\nnormbench: {line}", file=sys.stderr, flush=True)):
            return main.finish()


@contextlib.contextmanager
def _removed_if_unused(run):
    """A run that ends in an error before it wrote anything (a backend not available, a pytest collection it cannot
    start) removes its folder, which holds only its lock file and log: no empty locked folder per failed try."""
    try:
        yield
    except BaseException:
        run.remove_if_unused(also=(RUN_LOG,))
        raise


class _MainJob:
    """What ``normbench run`` has done so far, so that however the suites end (finished, interrupted
    between sessions or inside one) :meth:`finish` records the status, prints the summary and writes the
    report from it."""

    def __init__(self, plan: Plan, extra: Sequence[str], argv: Sequence[str], folder: Path, run_id: str) -> None:
        self.plan, self.extra, self.argv, self.folder, self.run_id = plan, extra, argv, folder, run_id
        self.codes: list[int] = []
        self.collectors: list = []
        self.sinks: list[_Sink] = []
        self.sections: list[str] = []
        #: the tests the header counted (a run stopped before its suites says "0 of N")
        self.expected: int | None = None
        self.interrupted = ""
        self.problems: list[str] = []
        #: the suites a spent budget left unstarted
        self.unstarted: list[str] = []

    def suites(self) -> None:
        """Both suites, in the plan's order (under a budget the throughput suite first: the reference run's most
        valuable rows), each only while the budget lasts; one not started is said, its tests counted not run."""
        from normbench.core.environment import backends_record, environment, write_environment

        plan = self.plan
        env = environment(self.run_id, ["normbench", *self.argv])
        env.update(backends_record(plan.selection))
        if plan.budget is not None:
            env["budget"] = {"seconds": plan.budget, "tests_start_until": _utc(plan.stop_at)}
        if plan.rehearsal:
            env["rehearsal"] = True
        write_environment(self.folder, env)
        self._status("running")
        counters = self._counters_backend()
        stop_at = plan.stop_at
        for suite in sorted(plan.suites, key=lambda s: s != "throughput") if plan.budget else plan.suites:
            if self.interrupted:
                break
            if plan.stop_at is not None and time.time() >= plan.stop_at - SESSION_MIN_S:
                self.unstarted.append(suite)
                continue
            if suite == "conformance":
                self._conformance()
                continue
            if counters is not None and stop_at is not None:  # the counters' time comes off the sweep's
                plan.stop_at = stop_at - min(COUNTERS_RESERVE_S, 0.25 * plan.budget)
            try:
                self._throughput()
            finally:
                plan.stop_at = stop_at
            if counters is not None and not self.interrupted:
                self._counters(counters)

    def _counters_backend(self):
        """The Triton backend on CUDA whose kernels the counters measure after the throughput suite (``ncu`` on the
        PATH); None, said in the environment, where there is none."""
        from normbench.perf import counters

        if "throughput" not in self.plan.suites or self.plan.selection is None:
            return None
        backend = next((b for b in self.plan.selection.backends
                        if "triton" in b.requires and b.device.startswith("cuda")), None)
        why = ("no Triton backend runs on CUDA here" if backend is None else
               None if counters.ncu() else "ncu (Nsight Compute) is not on the PATH")
        if why:
            self._record({"counters": {"state": "not measured", "reason": why}})
            if self.plan.rehearsal or any(b.device.startswith("cuda") for b in self.plan.selection.backends):
                self.sections.append(f"counters (DRAM bytes by ncu): not measured: {why}")
            return None
        return backend

    def _record(self, fields: dict) -> None:
        """Set fields of the run's environment.json; a folder that cannot take them is said at the end."""
        from normbench.core.environment import update_environment
        from normbench.core.storage import ResultsError

        try:
            update_environment(self.folder, fields)
        except ResultsError as exc:
            self.problems.append(f"{', '.join(fields)} could not be recorded: {exc}")

    def _counters(self, backend) -> None:
        """DRAM bytes of the Triton kernels measured by ncu beside the interpreter's count and the byte model
        (:mod:`normbench.perf.counters`), an operation at a time (a slot cut short keeps those measured), into
        ``counters.csv``; a profiler that refuses is said, not fatal."""
        import tempfile

        from normbench.core.exceptions import NormbenchError
        from normbench.perf import counters

        deadline = time.time() + COUNTERS_TIMEOUT_S if self.plan.stop_at is None else self.plan.stop_at
        print(f"\nnormbench: DRAM counters: ncu on {backend.name}'s kernels, {len(counters.items())} directions of "
              f"{len(counters.NORMS)} operations (until {_utc(deadline)})", flush=True)
        rows, problem = [], None
        with tempfile.TemporaryDirectory(prefix="normbench-counters-") as scratch:
            for norm in counters.NORMS:
                if time.time() > deadline - COUNTERS_MIN_S:
                    problem = f"the time ran out before {norm}"
                    break
                try:
                    rows += counters.measure(counters.items(norms=(norm,)), counters.profile_of(),
                                             Path(scratch) / norm, backend=backend.name, timeout=deadline - time.time())
                except NormbenchError as exc:  # ncu missing or refusing, out of time, records that do not match
                    problem = f"{norm}: {exc}"
                    break
                except Exception as exc:  # noqa: BLE001 (a slot is not lost to the counters: said, the run goes on)
                    problem = f"{norm}: {type(exc).__name__}: {exc} (a normbench bug: please report it)"
                    break
        record: dict = {"state": "measured" if rows else "not measured", "rows": len(rows)}
        if problem:
            record["reason"] = problem
        if rows:
            counters.write_csv(rows, self.folder / counters.COUNTERS_FILE)
            self.sections.append("\n".join([f"counters: DRAM bytes measured by ncu ({counters.COUNTERS_FILE})"
                                             + (f"; stopped: {problem}" if problem else ""),
                                             *counters.table_lines(rows)]))
        else:
            self.sections.append(f"counters (DRAM bytes by ncu): not measured: {problem}")
        self._record({"counters": record})

    def _conformance(self) -> None:
        from normbench.check.outcomes import CONFORMANCE
        from normbench.core import storage
        from normbench.front.runner import Collector, run_pytest, summary

        plan, folder, run_id = self.plan, self.folder, self.run_id
        print("\nnormbench: conformance suites", flush=True)
        sink = _Sink(storage.ResultsWriter(folder, run_id, CONFORMANCE), run_id,
                     reopen=lambda: storage.ResultsWriter(folder, run_id, CONFORMANCE))
        self.sinks.append(sink)
        collector = Collector(sink=sink)
        self.collectors.append(collector)
        code, outcomes = run_pytest(conformance_args(plan, self.extra, isolated=len(plan.selection.backends)),
                                    PlanPlugin(plan, plan.options()), collector)
        self.codes.append(code)
        self.sections.append("normbench conformance summary\n" + summary(outcomes, interrupted=collector.interrupted))
        self.interrupted = collector.interrupted

    def _throughput(self) -> None:
        from normbench.front.runner import Collector, run_pytest

        plan, folder, run_id = self.plan, self.folder, self.run_id
        print(f"\nnormbench: throughput suite, results in {folder}/", flush=True)
        collector = Collector()
        self.collectors.append(collector)
        code, _ = run_pytest(throughput_args(self.extra), PlanPlugin(plan, plan.options(run_id=run_id)), collector)
        self.codes.append(code)
        self.sections.append(_throughput_report(folder))
        self.interrupted = collector.interrupted

    def finish(self) -> int:
        """Close the journals, record the status, print the summary and write the report; the exit status."""
        from normbench.check.outcomes import NOT_RUN
        from normbench.core.interrupts import last_signal

        for sink in self.sinks:
            sink.close()
        outcomes = [o for c in self.collectors for o in c.outcomes]
        done = sum(1 for o in outcomes if o.outcome != NOT_RUN)
        total = len(outcomes) if self.collectors else self.expected
        budget = self._budget_spent(outcomes)
        if (self.interrupted or budget) and self.expected is not None:  # tests never handed to a worker: not run
            total = max(total or 0, self.expected)
        self._status("interrupted" if self.interrupted else "finished",
                     self.interrupted or last_signal() or budget or None, done, total, self._rows())
        report = list(self.sections)
        skipped = skipped_lines(self.plan.selection) if self.plan.selection is not None else []
        if skipped:
            report.append("\n".join(skipped))
        if self.interrupted:
            of = f" of {total}" if total is not None else ""
            report.append(f"INTERRUPTED ({self.interrupted}) after {done}{of} tests: what ran is in {self.folder}/")
        elif budget:
            report.append(f"BUDGET SPENT: {budget}; {done} of {total} tests ran, the others are 'not run'")
        with contextlib.suppress(OSError):  # a terminal gone (SIGHUP): the status, report and bundle are still written
            print("\n" + "\n\n".join(report) + f"\n\nresults: {self.folder}/", flush=True)
        if self.plan.report:
            _run_report(self.folder, self.plan.baseline)
        if self.plan.bundle:
            self._bundle()
        problems = self.problems + [s.problem() for s in self.sinks if s.error is not None]
        for problem in problems:
            print(f"normbench: error: {problem}", file=sys.stderr)
        if problems:
            return 2
        return INTERRUPTED if self.interrupted and not self.codes else exit_code(self.codes)

    def _bundle(self) -> None:
        """Pack the run folder (``--bundle``); a bundle that cannot be written is said at the end."""
        from normbench.core.storage import ResultsError
        from normbench.report.bundle import left_out_lines, write_bundle

        with contextlib.suppress(OSError):  # a terminal gone (SIGHUP) takes no bundle with it
            sys.stdout.flush()
            sys.stderr.flush()
        log = self.folder / RUN_LOG
        try:
            manifest = write_bundle(self.folder, self.plan.bundle, log=log if log.is_file() else None)
        except (ResultsError, OSError) as exc:
            self.problems.append(f"the bundle was not written: {exc}")
            return
        with contextlib.suppress(OSError):
            print(f"bundle: {manifest.parent}/", flush=True)
            for line in left_out_lines(manifest):
                print(line, flush=True)

    def _budget_spent(self, outcomes) -> str:
        """What a spent ``--budget`` left undone, for the status and the summary ("" if nothing)."""
        from normbench.check.outcomes import NOT_RUN

        if self.plan.budget is None:
            return ""
        skipped = sum(1 for o in outcomes if o.outcome == NOT_RUN and "time budget" in o.message)
        if not (skipped or self.unstarted):
            return ""
        where = [f"{skipped} tests not started"] if skipped else []
        where += [f"the {suite} suite not started" for suite in self.unstarted]
        return f"the time budget of {self.plan.budget:g} s was spent ({', '.join(where)})"

    def _rows(self) -> dict[str, int]:
        """The rows the run wrote into each results file (the conformance rows it could not write count: the loader
        then says they are missing from the folder); what the loader holds the folder to."""
        from normbench.check.outcomes import CONFORMANCE
        from normbench.core import storage
        from normbench.perf.throughput import THROUGHPUT

        rows = {}
        for schema in (CONFORMANCE, THROUGHPUT):
            try:
                rows[schema.stem] = len(storage.load(self.folder, schema)) if storage.exists(
                    self.folder / schema.file_name()) else 0
            except storage.ResultsError:
                return {}  # a file it cannot read back: no count rather than a wrong one (the loader says why)
        rows[CONFORMANCE.stem] += sum(len(s.unsaved) for s in self.sinks)
        return rows

    def _status(self, state: str, reason: str | None = None, done: int = 0, total: int | None = None,
                rows: dict[str, int] | None = None) -> None:
        """Record the run's status; a folder that cannot take it (a full disk) is said at the end, not raised."""
        from normbench.core.environment import mark_status
        from normbench.core.storage import ResultsError

        try:
            mark_status(self.folder, state, reason, done, total, rows or None)
        except ResultsError as exc:
            self.problems.append(f"the run's status ({state}) could not be recorded: {exc}")


class _Sink:
    """Writes each conformance outcome to the run folder as it arrives. A write that fails (a full disk)
    is said once and the run goes on (the summary still shows every test), keeping the rows it could not
    write; :meth:`close` writes them into the folder again (with a new writer from ``reopen``: space may
    have been freed meanwhile, as the message asks), and what still does not fit into a file in the
    system's temporary folder (:attr:`kept_in`), so that no finished test is lost."""

    def __init__(self, writer, run_id: str, reopen=None) -> None:
        self.writer, self.run_id, self.reopen = writer, run_id, reopen
        self.error = None
        self.unsaved: list[dict] = []
        #: where the rows that the run folder could not take were written in the end ("" if none)
        self.kept_in = ""

    def __call__(self, outcome) -> None:
        from normbench.front.runner import outcome_rows

        row = outcome_rows([outcome], self.run_id)[0]
        if self.error is not None or not self._try(self.writer.add, row):
            self.unsaved.append(row)

    def close(self) -> None:
        """Write the JSON snapshot, then the rows that could not be written (see the class)."""
        if self.error is None:
            self._try(self.writer.close)
            return
        if self.unsaved and self.reopen is not None:
            self._write_again()
        if self.unsaved:
            self._keep_elsewhere()

    def problem(self) -> str:
        """What the run's last lines say of a sink whose writes failed: the rows it could not write and where they
        are, or, where every row reached the journal and only its JSON snapshot failed, that nothing is missing."""
        if self.unsaved:
            return (f"{len(self.unsaved)} conformance results could not be written to the run folder ({self.error}); "
                    f"{self.kept_in}")
        journal = getattr(self.writer, "csv_path", "the run folder's conformance.csv")
        return (f"every conformance result is in {journal}, but writing beside it failed ({self.error}): its JSON "
                f"snapshot may be older than the journal, which the report and survey read to the end. Fix: free "
                f"space before the next run")

    def _write_again(self) -> None:
        from normbench.core.storage import ResultsError

        try:
            writer = self.reopen()
            while self.unsaved:
                writer.add(self.unsaved[0])
                self.unsaved.pop(0)
            writer.close()
        except ResultsError:
            return
        print(f"normbench: the rows that could not be written earlier are now in {writer.csv_path}", file=sys.stderr)
        self.error = None

    def _keep_elsewhere(self) -> None:
        import tempfile

        from normbench.check.outcomes import CONFORMANCE
        from normbench.core.storage import ResultsError, write_csv

        path = Path(tempfile.gettempdir()) / f"normbench-{self.run_id}-unsaved-conformance.csv"
        try:
            write_csv(path, self.unsaved, CONFORMANCE)  # the schema's own CSV: `normbench report` reads it
        except ResultsError as exc:
            self.kept_in = f"they could not be kept in {path} either ({exc}): they are lost"
        else:
            self.kept_in = f"they are in {path} (the run folder's conformance.csv holds the others)"

    def _try(self, write, *args) -> bool:
        from normbench.core.storage import ResultsError

        try:
            write(*args)
        except ResultsError as exc:
            if self.error is None:
                self.error = exc
                print(f"\nnormbench: error: {exc}. The run goes on (its summary shows every test), keeping the rows "
                      f"it could not write; free space now, and they are written at the end of the run",
                      file=sys.stderr, flush=True)
            return False
        return True


class _Tee:
    """A text stream that writes to ``stream`` and to ``copy``."""

    def __init__(self, stream, copy) -> None:
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.copy.flush()
        self.stream.flush()

    def __getattr__(self, name: str):  # fileno, isatty, encoding...: the terminal's
        return getattr(self.stream, name)


@contextlib.contextmanager
def _teed(path: Path | None):
    """With ``--bundle``, what the run prints also goes to ``run.log`` in its folder, which the bundle carries."""
    if path is None:
        yield
        return
    with open(path, "a", encoding="utf-8", errors="replace") as copy:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(sys.stdout, copy), _Tee(sys.stderr, copy)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _signals_end_the_run():
    """SIGTERM and SIGHUP (a dropped terminal or ssh connection) end the run as Ctrl-C does (KeyboardInterrupt:
    pytest stops, what ran is kept and marked), and are recorded, so the run's status says which signal ended it."""
    import signal

    from normbench.core.interrupts import ENDING, note_signal

    def stop(signum, frame):
        note_signal(signum)
        raise KeyboardInterrupt

    ending = [s for s in ENDING if s != signal.SIGINT]
    try:
        previous = {s: signal.signal(s, stop) for s in ending}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def _run_report(folder, baseline: str) -> None:
    """Write ``report.html`` into the run folder; a run whose results cannot render still ends normally."""
    from normbench.core.storage import ResultsError
    from normbench.report import write_report

    try:
        print(f"report: {write_report([folder], folder / 'report.html', baseline)}")
    except ResultsError as exc:
        print(f"normbench: no report: {exc}", file=sys.stderr)


def _throughput_report(folder) -> str:
    import json

    from normbench.core import storage
    from normbench.perf.throughput import THROUGHPUT
    from normbench.report.text import ceiling_lines, throughput_table

    try:
        df = storage.load(folder, THROUGHPUT)
    except storage.ResultsError:
        return "normbench throughput summary\nno throughput case ran"
    env = json.loads((folder / "environment.json").read_text())
    lines = ceiling_lines(env.get("ceilings", {}).values())
    return "normbench throughput summary\n" + throughput_table(df) + "".join(f"\n{line}" for line in lines)


def _utc(unix_time: float | None) -> str:
    import datetime

    return "" if unix_time is None else datetime.datetime.fromtimestamp(unix_time, datetime.timezone.utc).isoformat(
        timespec="seconds")
