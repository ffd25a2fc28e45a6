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
from collections.abc import Sequence
from pathlib import Path

from normbench.core.registry import describe
from normbench.front import options
from normbench.front.plan import Plan, PlanPlugin
from normbench.suites import DIRECTORY as SUITES_DIRECTORY

INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED
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
        n = plan.workers if plan.workers != "0" else "1"
        out += ["-n", n]
        if isolated:
            from normbench.front.isolation import CRASH_LIMIT

            count = int(n) if n.isdigit() else (os.cpu_count() or 1)
            out.append(f"--max-worker-restart={CRASH_LIMIT * isolated + 4 * count}")
    return out + list(extra)


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


def counts(plan: Plan, run_id: str, extra: Sequence[str]) -> None:
    """How many conformance tests and throughput cases the suites collect (the end of the header)."""
    from normbench.front.runner import collect

    say, selection = _say, plan.selection
    if "conformance" in plan.suites:
        found = collect(conformance_args(plan, extra, workers=False), PlanPlugin(plan, plan.options()))
        if found.code == INTERRUPTED:  # pytest.main swallowed a Ctrl-C or SIGTERM: the run stops here
            raise KeyboardInterrupt
        skips = f", {sum(found.skips.values())} more collected to skip (the summary says why)" if found.skips else ""
        workers = "one worker process" if plan.workers == "0" else f"-n {plan.workers}"
        if found.code not in (0, 5):  # the run's own session reports the problem in full
            last = found.output.strip().splitlines()[-1:]
            say(f"  conformance: could not be collected (pytest exit {found.code}): "
                + (last[0] if last else "pytest's message is above"))
        else:
            say(f"  conformance: {found.runs} tests{skips}; {workers}")
    if "throughput" in plan.suites:
        found = collect(throughput_args(extra), PlanPlugin(plan, plan.options(run_id=run_id)))
        if found.code == INTERRUPTED:
            raise KeyboardInterrupt
        timed = [b.name for b in selection.backends if not b.timing_note]
        untimed = [b.name for b in selection.backends if b.timing_note]
        say(f"  throughput:  {found.runs} case{'s' if found.runs != 1 else ''} on {', '.join(timed) or 'no backend'}, "
            f"one at a time" + (f" ({', '.join(untimed)}: not timed, see above)" if untimed else ""))


def cmd_run(plan: Plan, extra: Sequence[str], argv: Sequence[str]) -> int:
    """The main job, in a claimed run folder: one writer, checked before anything is measured. Every finished
    test is written at once; SIGINT and SIGTERM end the run but keep what ran and mark the folder interrupted."""
    from normbench.core.environment import new_run_id
    from normbench.core.registry import get_registry
    from normbench.core.run_folder import claim

    run_id = plan.run_id or new_run_id()
    get_registry().names_in(plan.impl)  # a bad --impl is a usage error before any folder exists
    with claim(plan.out, run_id) as run, _signals_end_the_run():  # a bad run id, another writer, results there
        try:
            header(plan, run_id, run.path)
            counts(plan, run_id, extra)
            return _run(plan, extra, argv, run.path, run_id)
        except KeyboardInterrupt:  # between the suites' sessions (which keep their own results)
            from normbench.core.environment import mark_status
            from normbench.core.interrupts import last_signal

            reason = last_signal() or "KeyboardInterrupt"
            mark_status(run.path, "interrupted", reason)
            print(f"\nINTERRUPTED ({reason}) before the suites finished; what ran is in {run.path}/", file=sys.stderr)
            return INTERRUPTED


def _run(plan: Plan, extra: Sequence[str], argv: Sequence[str], folder: Path, run_id: str) -> int:
    from normbench.check.outcomes import CONFORMANCE, NOT_RUN
    from normbench.core import storage
    from normbench.core.environment import backends_record, environment, mark_status, write_environment
    from normbench.core.interrupts import last_signal
    from normbench.front.runner import Collector, run_pytest, summary

    selection = plan.selection
    env = environment(run_id, ["normbench", *argv])
    env.update(backends_record(selection))
    write_environment(folder, env)
    mark_status(folder, "running")
    codes, report, collectors, sinks = [], [], [], []
    if "conformance" in plan.suites:
        print("\nnormbench: conformance suites", flush=True)
        sink = _Sink(storage.ResultsWriter(folder, run_id, CONFORMANCE), run_id)
        collector = Collector(sink=sink)
        try:
            code, outcomes = run_pytest(conformance_args(plan, extra, isolated=len(selection.backends)),
                                        PlanPlugin(plan, plan.options()), collector)
        finally:
            sink.close()
        collectors.append(collector)
        sinks.append(sink)
        codes.append(code)
        report.append("normbench conformance summary\n" + summary(outcomes, interrupted=collector.interrupted))
    if "throughput" in plan.suites and not any(c.interrupted for c in collectors):
        print(f"\nnormbench: throughput suite, results in {folder}/", flush=True)
        collector = Collector()
        code, _ = run_pytest(throughput_args(extra), PlanPlugin(plan, plan.options(run_id=run_id)), collector)
        collectors.append(collector)
        codes.append(code)
        report.append(_throughput_report(folder))
    interrupted = next((c.interrupted for c in collectors if c.interrupted), "")
    done = sum(1 for c in collectors for o in c.outcomes if o.outcome != NOT_RUN)
    total = sum(len(c.outcomes) for c in collectors)
    mark_status(folder, "interrupted" if interrupted else "finished", interrupted or last_signal() or None, done, total)
    skipped = skipped_lines(selection)
    if skipped:
        report.append("\n".join(skipped))
    if interrupted:
        report.append(f"INTERRUPTED ({interrupted}) after {done} of {total} tests: what ran is in {folder}/")
    print("\n" + "\n\n".join(report) + f"\n\nresults: {folder}/")
    unsaved = [s.error for s in sinks if s.error is not None]
    if plan.report:
        _run_report(folder, plan.baseline)
    if unsaved:
        print(f"normbench: error: conformance results were not all saved: {unsaved[0]}", file=sys.stderr)
        return 2
    return exit_code(codes)


class _Sink:
    """Writes each conformance outcome to the run folder as it arrives; a write that fails
    (a full disk) is said once and the run goes on (the summary still shows every test)."""

    def __init__(self, writer, run_id: str) -> None:
        self.writer, self.run_id, self.error = writer, run_id, None

    def __call__(self, outcome) -> None:
        from normbench.front.runner import outcome_rows

        if self.error is None:
            self._try(self.writer.add, outcome_rows([outcome], self.run_id)[0])

    def close(self) -> None:
        """Write the JSON snapshot; a failure is said once, like a failed row."""
        self._try(self.writer.close)

    def _try(self, write, *args) -> None:
        from normbench.core.storage import ResultsError

        try:
            write(*args)
        except ResultsError as exc:
            if self.error is None:
                self.error = exc
                print(f"\nnormbench: error: {exc}. The run goes on; its summary shows every test", file=sys.stderr)


@contextlib.contextmanager
def _signals_end_the_run():
    """SIGTERM ends the run as Ctrl-C does (KeyboardInterrupt: pytest stops, what ran is kept and
    marked), and is recorded, so the run's status says which signal ended it."""
    import signal

    from normbench.core.interrupts import note_signal

    def stop(signum, frame):
        note_signal(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
