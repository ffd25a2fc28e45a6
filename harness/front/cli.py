"""``normbench``: list backends, check one case, run the suites.

    normbench list [--probe]          the installed backends and whether they run here
    normbench check --impl torch --shape 64x1000 --dtype bfloat16 --dist offset1e3
    normbench test --impl NAME [PYTEST ARGS]   the suites on NAME, from an installed normbench
    normbench run [--impl all]        the main job: every suite on every available backend,
                                      results in reports/<run-id>/ (with report.html), and a summary
    normbench table1 [--impl NAME]    the paper's Table 1 (and §3.1) measured, beside the paper's
    normbench report RESULTS... [-o FILE]   the HTML report of one or more runs (default: into the first run's folder)
    normbench survey --out DIR RUNS...           many environments' conformance runs merged, with judged findings
    normbench traffic --impl triton --gpu h100   bytes each Triton launch moves, / the byte model (interpreter)
    normbench kernel-stats --gpu h100            registers, spills, occupancy of the kernels compiled for sm_90

Every user error prints one line ``normbench: error: ...`` with the fix and exits 2.
Slow steps (creating a backend imports its framework) print a progress line to stderr
first. This module parses the command line and dispatches; ``run`` and ``test`` are
:mod:`normbench.front.run` (on a :class:`~normbench.front.plan.Plan`, parsed once),
``traffic`` and ``kernel-stats`` :mod:`normbench.front.counts`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from normbench import __version__
from normbench.core import safe_text, vetting
from normbench.core.exceptions import NormbenchError, UnknownBackend
from normbench.core.registry import ALL, describe, get_registry
from normbench.front import counts, options


def progress(message: str) -> None:
    """One line on stderr, at once: what a slow step is doing (stdout keeps the results)."""
    print(f"normbench: {message}", file=sys.stderr, flush=True)


def cmd_list(args: argparse.Namespace) -> int:
    """List the backends. Plugins are third-party code that may hang or end the process while
    loading, so the listing runs in a child process watched as :mod:`normbench.core.vetting` watches
    its trials: a plugin that hangs there for ``--plugin-timeout`` seconds, or ends the child, is left
    out with a problem line saying so, and the listing is made again without it."""
    if args.in_process:
        return _list_backends(args)
    import os
    import tempfile

    problems: list[str] = []
    limit = (vetting.check_timeout(args.plugin_timeout, f"--plugin-timeout={args.plugin_timeout:g}")
             if args.plugin_timeout is not None else vetting.timeout_s())
    with tempfile.TemporaryDirectory(prefix="normbench-list-") as folder:
        progress_file = os.path.join(folder, "loading")
        while True:
            command = [sys.executable, "-m", "normbench", "list", "--in-process", f"--progress-file={progress_file}",
                       *(["--probe"] if args.probe else []), *(f"--left-out={name}" for name in args.left_out),
                       *(f"--problem={p}" for p in problems)]
            listing = os.path.join(folder, "listing")
            with open(listing, "w", encoding="utf-8") as sink:  # a file, not a pipe: a long listing never blocks
                watched = vetting.watch(command, progress_file, limit, stdout=sink, stderr=None)  # progress lines
            out = vetting.read_text(listing)
            if watched.returncode == 0 or watched.loading in args.left_out:
                sys.stdout.write(out)
                return watched.returncode if watched.returncode >= 0 else 1
            if not watched.loading:  # before the first plugin (entry-point discovery), or after the last
                sys.stdout.write(out)
                where = ("before Python had started normbench (a start-up that takes longer than "
                         f"{vetting.STARTUP_S:g} s is ended)" if not watched.started else
                         f"outside any one plugin (a hang in entry-point discovery ends after {2 * limit:g} s)")
                raise NormbenchError(f"listing the backends ended with exit status {watched.returncode} {where}. "
                                     f"Fix: `python -m normbench.front.cli list --in-process` shows the traceback")
            problems.append(vetting.problem(watched, limit, "It is left out of this list. "))
            args.left_out.append(watched.loading)
            os.remove(progress_file)


def _list_backends(args: argparse.Namespace) -> int:
    def loading(name: str, provider: str = "") -> None:
        if args.progress_file:
            from normbench.core.files import write_atomic

            write_atomic(args.progress_file, f"{name}\t{provider}" if name else "")

    loading("")  # started (core.vetting.watch): entry-point discovery and the plugins' limits count from here
    registry = get_registry()
    rows = [["name", "provided by", "library", "available", "operations", "dtypes", "device", "backward"]]
    problems = [p.message for p in registry.problems] + list(args.problem)

    for name in registry.names:
        plugin = registry.plugin(name)
        if name in args.left_out:
            rows.append([name, plugin.provider, "", "no: left out (see below)", "", "", "", ""])
            continue
        loading(name, plugin.provider)
        try:
            cls = registry.load_class(name)
            available = registry.availability(name)
        except NormbenchError as exc:
            problems.append(str(exc))
            rows.append([name, plugin.provider, "", "no: broken plugin (see below)", "", "", "", ""])
            continue
        device = cls.devices
        status = "yes" if available else f"no: {available.reason}"
        if args.probe and available:
            progress(f"probing {name} (creating it imports its framework)...")
            try:
                device = registry.create(name).device
            except NormbenchError as exc:
                status = f"no: {exc}"
        rows.append([name, plugin.provider, cls.library_version() or "-", status, ",".join(cls.operations),
                     ",".join(cls.dtypes), device,
                     "yes" if cls.has_backward else "no"])
    loading("")
    from normbench.report.text import table

    print(table([[safe_text.safe(cell, 200) for cell in row] for row in rows]))  # a plugin's own text, escaped
    for message in problems:
        print(f"problem: {safe_text.safe(message)}")
    return 0


#: seconds one backend's ``normbench check`` may take (the suites' own limit per test)
CHECK_TIMEOUT_S = 300.0
#: ``normbench check --in-process``'s exit status for a backend that cannot run the case (it said why)
_CHECK_SKIPPED = 3


def cmd_check(args: argparse.Namespace) -> int:
    """Check one case on each backend ``--impl`` names (``all``: every one that runs here); exit 1
    if any fails. A backend that cannot run the case says why; if none can, that is an error.
    Each backend is checked in a child process of its own: one that ends the process (a segfault)
    or runs past ``--timeout`` is a CRASH or TIMEOUT line for it, and the others are checked."""
    case = _check_case(args)
    if args.in_process:
        return _check_in_process(args, case)
    import tempfile

    from normbench.core import machine

    machine.check_fits(machine.check_case_bytes(case.shape, case.dtype),  # before allocating (or importing) anything
                       f"checking {case.dtype} x of shape {'x'.join(map(str, case.shape))}")
    names = get_registry().names_in(args.impl)
    everything = args.impl.strip() == ALL
    command = [sys.executable, "-m", "normbench", *args.argv]  # the last --impl given wins
    checked = failed = 0
    for name in names:
        with tempfile.TemporaryDirectory(prefix="normbench-check-") as folder:
            started = os.path.join(folder, "started")
            child = subprocess.Popen([*command, f"--impl={name}", "--in-process", f"--progress-file={started}",
                                      *(["--skip-unavailable"] if everything else [])])
            code, ready = _wait_for_check(child, started, args.timeout)
        if code == _CHECK_SKIPPED:  # it said why
            continue
        if code == 2:  # it said the error (the backend named is not available, ...)
            return 2
        checked += 1
        failed += code != 0
        where = f"{name} {case.id} (seed {args.seed})"
        if code is None and not ready:
            print(f"TIMEOUT {where}: the backend was not ready to compute within {_check_startup_s():g} s (starting "
                  f"Python, importing its framework, creating it)", flush=True)
        elif code is None:
            print(f"TIMEOUT {where}: no result within {args.timeout:g} s (--timeout)", flush=True)
        elif code < 0:
            print(f"CRASH {where}: the backend ended the process with signal {vetting.signal_name(-code)}", flush=True)
        elif code != 1 and code != 0:
            print(f"CRASH {where}: the backend ended the process with exit status {code}", flush=True)
    if not checked:
        raise NormbenchError(f"cannot check {case.id}: no selected backend can run it (the reasons are above)")
    return 1 if failed else 0


def _check_startup_s() -> float:
    """How long a check's child may take before it starts on the case: Python's start-up and the backend's
    creation (a plugin's own limit bounds that), neither of which ``--timeout`` counts."""
    return vetting.STARTUP_S + vetting.timeout_s()


def _wait_for_check(child, started: str, timeout: float) -> tuple[int | None, bool]:
    """Wait for a check's child: its exit status (None if it was ended for taking too long) and whether it had
    started on the case (created ``started``). ``timeout`` (0: none) counts from that start, so that a busy
    machine's slow start-up is never a backend's TIMEOUT."""
    import time

    launched, ready_at = time.monotonic(), None
    while True:
        try:
            return child.wait(timeout=0.05), ready_at is not None or os.path.exists(started)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if ready_at is None and os.path.exists(started):
            ready_at = now
        limit_passed = (now - launched > _check_startup_s() if ready_at is None else
                        timeout and now - ready_at > timeout)
        if limit_passed:
            child.kill()
            child.wait()
            return None, ready_at is not None


def _check_case(args: argparse.Namespace):
    from normbench.core import cases

    normalized = args.normalized_shape or args.shape[-1:]
    from normbench.core import operations

    op = operations.of(args.norm)
    if not op.has_bias and args.affine in ("wb", "b"):
        raise NormbenchError(f"--affine={args.affine}: {op.label} has no bias, so affine must be 'w' or 'none' "
                             f"(the default for --norm={op.name} is w)")
    affine = args.affine or ("wb" if op.has_bias else "w")
    quantized = {"static": "_quant", "dynamic": "_dynamic_quant"}
    for option, value, wanted, alternative in (
            ("--qdtype", args.qdtype, op.quant, f"give --norm={op.name}{quantized['static']}"),
            ("--scale", args.scale, op.quant == "static",
             "a dynamic quantization computes its own scales (--scale-ub bounds them)" if op.quant else
             f"give --norm={op.name}{quantized['static']}"),
            ("--scale-ub", args.scale_ub, op.quant == "dynamic",
             "a static quantization's scale is --scale" if op.quant else
             f"give --norm={op.name}{quantized['dynamic']}"),
            ("--residual", args.residual, op.fuses, f"give --norm=add_{op.name}"),
            ("--residual-dtype", args.residual_dtype, op.fuses, f"give --norm=add_{op.name}")):
        if value is not None and not wanted:
            raise NormbenchError(f"{option}={value}: --norm={op.name} does not take it ({op.label}). Fix: "
                                 f"{alternative}")
    quant = {} if not op.quant else {"qdtype": args.qdtype or DEFAULT_QDTYPE, "scale_ub": args.scale_ub,
                                     "scale": (args.scale or DEFAULT_SCALE) if op.quant == "static" else None}
    return cases.Case("check", args.shape, normalized, args.dtype, args.dist, args.eps, affine,
                      args.param_dtype, args.layout, norm=args.norm, residual=args.residual,
                      residual_dtype=args.residual_dtype, **quant)


#: ``normbench check``'s quantized format and static scale where none is given
DEFAULT_QDTYPE, DEFAULT_SCALE = "float8_e4m3fn", 1.0


def _check_in_process(args: argparse.Namespace, case) -> int:
    """The check of one backend (the child of :func:`cmd_check`): exit 0 pass, 1 fail, 3 cannot run it."""
    from normbench.check import conformance
    from normbench.core import cases

    progress(f"creating backend {args.impl} (imports its framework)...")
    try:
        [backend] = get_registry().select(args.impl).backends
    except NormbenchError as exc:
        if not args.skip_unavailable:  # a backend named: that it cannot run is the error
            raise
        print(f"SKIP {args.impl}: {safe_text.safe(exc)}")  # one backend of --impl=all
        return _CHECK_SKIPPED
    reason = conformance.skip_reason(backend, case)
    if reason:
        print(f"SKIP {backend.name} {case.id}: {safe_text.safe(reason)}")
        return _CHECK_SKIPPED
    inputs = cases.make_inputs(case, args.seed)
    progress(f"checking {case.id} (seed {args.seed}) on {describe(backend)} against the float64 oracle...")
    if args.progress_file:  # started on the case: the parent's --timeout counts from here
        from normbench.core.files import write_atomic

        write_atomic(args.progress_file, "")
    try:
        conformance.check_forward(backend, inputs)
    except conformance.ConformanceError as exc:
        print(f"FAIL {safe_text.safe(exc)}")
        return 1
    except Exception as exc:  # the backend's own exception: its verdict, not a traceback of the harness
        print(f"FAIL {backend.name} {case.id} (seed {args.seed}): the backend raised "
              f"{type(exc).__name__}: {safe_text.safe(exc)}")
        return 1
    print(f"PASS {backend.name} {case.id} (seed {args.seed}): within the error model's bound")
    return 0


def _one_backend(spec: str):
    """The single backend ``--impl`` names for table1, or a usage error naming the known ones."""
    registry = get_registry()
    names = ", ".join(registry.names) or "none"
    if spec == ALL or "," in spec:
        raise NormbenchError(f"--impl={spec}: table1 measures one backend's layer norm; choose one of: {names}")
    try:
        return registry.select(spec).backends[0]
    except UnknownBackend:
        raise
    except NormbenchError as exc:
        raise NormbenchError(f"--impl={spec}: {exc}. Known backends: {names}; `normbench list` shows which run here") from None


def cmd_table1(args: argparse.Namespace) -> int:
    """Measure Table 1 (float64 oracles; the layer-norm and RMSNorm rows on --impl if given, each where it declares
    that normalization) and §3.1 (on --impl's LayerNorm if it has one); exit 1 on disagreement."""
    from normbench.core import operations
    from normbench.paper import invariances, table1
    from normbench.paper.normalizations import BackendRowLayerNorm, OracleRowLayerNorm

    if args.save:  # before measuring: a measured table is never written over, nor measured for nothing
        _check_save(args.save)
    rows = table1.oracle_rows()
    row_norm = OracleRowLayerNorm()
    for flag, value in (("dtype", args.dtype), ("eps", args.eps)):
        if value is not None and not args.impl:
            raise NormbenchError(f"--{flag}={value} needs --impl: without it the layer-norm row is the float64 oracle "
                                 f"(with eps 0)")
    if args.impl:
        progress(f"creating backend {args.impl} (imports its framework)...")
        backend = _one_backend(args.impl)
        dtype = args.dtype or ("float32" if "float32" in backend.dtypes else backend.dtypes[0])
        if dtype not in backend.dtypes:
            raise NormbenchError(f"--dtype={dtype}: backend {backend.name!r} supports {', '.join(backend.dtypes)}; "
                                 f"choose one of those")
        eps = 1e-5 if args.eps is None else args.eps
        # each row the backend declares runs on it; the other stays the float64 oracle's (and §3.1, LayerNorm's)
        on_backend = [m for m, norm in table1.BACKEND_ROWS.items() if operations.missing_reason(backend, norm) is None]
        for method in on_backend:
            rows[method] = table1.layer_norm_row(BackendRowLayerNorm(backend, dtype, table1.BACKEND_ROWS[method]), eps)
        if "layer" in on_backend:
            row_norm = rows["layer"].normalizer.row_norm
        else:
            progress(f"{operations.missing_reason(backend, 'layer_norm')}: the layer-norm row and §3.1 stay the float64 "
                     f"oracle's")
    measured = ", ".join(f"{invariances.METHOD_TITLES[m]}: {row.normalizer.label}" for m, row in rows.items()
                         if m in table1.BACKEND_ROWS)
    progress(f"measuring Table 1 ({len(rows)} rows; {measured}; seed {args.seed})...")
    cells = table1.measure_table(rows, args.seed)
    print(table1.render_table(cells, rows, args.seed), flush=True)
    ok = all(cell.agrees for cell in cells.values())
    held = None
    if not args.no_recurrent:
        progress("measuring §3.1: an RNN and an LSTM, with and without layer norm, their weights re-scaled...")
        text, held = table1.render_recurrent(table1.run_recurrent(row_norm, row_norm.dtype, args.seed), row_norm.label, 0.0)
        print(f"\n{text}")
        ok = ok and held
    if args.save:
        _save_table1(args, table1.to_document(cells, rows, args.seed, shlex.join(["normbench", *args.argv]), held))
    return 0 if ok else 1


def _check_save(folder: str) -> None:
    """``--save`` may name a new folder, or one without a ``table1.json``: an earlier measurement is never replaced."""
    from pathlib import Path

    path = Path(folder) / "table1.json"
    if Path(folder).exists() and not Path(folder).is_dir():
        raise NormbenchError(f"--save={folder} is a file, not a folder. Fix: give a folder (a run folder, or a new one)")
    if path.exists():
        raise NormbenchError(f"--save={folder}: {path} exists, an earlier measurement; it is never written over. "
                             f"Fix: give another folder, or move that file away first")


def _save_table1(args: argparse.Namespace, document: dict) -> None:
    import json
    from pathlib import Path

    from normbench.core.files import write_atomic

    path = Path(args.save) / "table1.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(document, indent=1, allow_nan=False) + "\n")
    except (OSError, ValueError) as exc:
        raise NormbenchError(f"--save={args.save}: cannot write {path}: {exc}") from None
    print(f"\nsaved: {path} (normbench report {args.save} shows it)")


def parser() -> argparse.ArgumentParser:
    from normbench.core.cases import AFFINES, DISTRIBUTIONS, LAYOUTS, RESIDUALS
    from normbench.core.dtypes import DTYPES
    from normbench.core.operations import NAMES as NORM_NAMES
    from normbench.core.quantized import QDTYPES

    top = argparse.ArgumentParser(prog="normbench", description="LayerNorm conformance and throughput harness.")
    top.add_argument("--version", action="version", version=f"normbench {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list installed backends and whether they can run here")
    p.add_argument("--probe", action="store_true",
                   help="create each available backend to show its actual device (imports its framework)")
    p.add_argument("--plugin-timeout", type=options.parse_seconds, default=None, metavar="SECONDS",
                   help="how long one backend may take to load (or, with --probe, to be created) before it is left "
                        "out as hanging. Default: the environment variable NORMBENCH_PLUGIN_TIMEOUT, else 60 (every "
                        "command that loads plugins keeps to it)")
    # the listing itself runs in a child process (cmd_list); these are how the parent talks to it
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--progress-file", help=argparse.SUPPRESS)
    p.add_argument("--left-out", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--problem", action="append", default=[], help=argparse.SUPPRESS)

    p = sub.add_parser("check", help="check one case on each backend --impl names against the oracle")
    p.add_argument("--impl", required=True, metavar="NAME", type=options.parse_impl,
                   help="the backend (see `normbench list`)")
    p.add_argument("--shape", required=True, type=options.parse_array_shape, metavar="AxB", help="x's shape, e.g. 64x1000")
    p.add_argument("--normalized-shape", type=options.parse_array_shape, metavar="AxB",
                   help="the trailing dims to normalize. Default: the last dim of --shape")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="Default: %(default)r")
    p.add_argument("--param-dtype", choices=DTYPES, help="weight/bias dtype. Default: --dtype")
    p.add_argument("--dist", choices=sorted(DISTRIBUTIONS), default="normal", help="Default: %(default)r")
    p.add_argument("--eps", type=options.parse_eps, default=1e-5, help="Default: %(default)r")
    p.add_argument("--affine", choices=AFFINES,
                   help="weight and bias, weight only, bias only, none. Default: wb (rms_norm: w, it has no bias)")
    p.add_argument("--norm", choices=NORM_NAMES, default="layer_norm",
                   help="the normalization to check. Default: %(default)r")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous", help="Default: %(default)r")
    p.add_argument("--qdtype", choices=QDTYPES, help=f"a quantized operation's format (--norm=*_quant). Default: "
                                                     f"{DEFAULT_QDTYPE}")
    p.add_argument("--scale", type=options.parse_scale, metavar="S",
                   help=f"a static quantization's scale (the code is y / S, rounded and saturated; --norm=*_quant "
                        f"without _dynamic). Default: {DEFAULT_SCALE:g}")
    p.add_argument("--scale-ub", type=options.parse_scale, metavar="UB",
                   help="a dynamic quantization's upper bound on each row's absmax (--norm=*_dynamic_quant). "
                        "Default: none")
    p.add_argument("--residual", choices=RESIDUALS,
                   help="a fused residual add's residual (--norm=add_*): another draw of x's distribution ('same'), "
                        "a standard normal one or zeros. Default: same")
    p.add_argument("--residual-dtype", choices=DTYPES,
                   help="the residual's dtype (--norm=add_*; e.g. float32 beside a bfloat16 x). Default: --dtype")
    p.add_argument("--seed", type=options.parse_seed, default=0, help="Default: %(default)r")
    p.add_argument("--timeout", type=options.parse_seconds, default=CHECK_TIMEOUT_S, metavar="SECONDS",
                   help="how long one backend's check may take before it is a TIMEOUT (0: no limit), counted from "
                        "the moment it starts on the case (starting Python and creating the backend have a limit of "
                        "their own). Default: %(default)r")
    # each backend is checked in a child process (cmd_check); these are how the parent talks to it
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--skip-unavailable", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--progress-file", help=argparse.SUPPRESS)  # created when the child starts on the case

    for name, helptext in (("test", "run the suites with pytest (extra arguments go to pytest)"),
                           ("run", "the main job: the conformance and throughput suites on the backends, "
                                   "results in a folder, and a summary")):
        p = sub.add_parser(name, help=helptext)
        options.add_impl_option(p.add_argument, prefix="")
        options.add_seed_option(p.add_argument, prefix="")
        options.add_threads_option(p.add_argument, prefix="")
        options.add_require_option(p.add_argument, prefix="")
        options.add_untrusted_option(p.add_argument, prefix="")
        p.add_argument("-n", "--workers", default="auto", metavar="N", type=options.parse_workers,
                       help="pytest-xdist workers for conformance ('0' for none; throughput always runs alone). "
                            "Default: %(default)r")
    _run_options(p)
    _add_table1(sub)
    _add_report(sub)
    _add_survey(sub)
    counts.add_parsers(sub)  # counts and compiler estimates, never speeds
    _add_preflight(sub)
    _add_bundle(sub)
    return top


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suites", type=options.parse_suites, default=options.SUITES, metavar="LIST",
                   help=f"which suites: {', '.join(options.SUITES)}. Default: both")
    options.add_throughput_options(p.add_argument, prefix="")
    p.add_argument("--no-report", dest="report", action="store_false",
                   help="do not write report.html into the run folder. Default: write it")
    p.add_argument("--baseline", default="torch", metavar="NAME",
                   help="the report's speedup baseline backend. Default: %(default)r")
    p.add_argument("--bundle", default=None, metavar="DIR",
                   help="at the end (finished, interrupted or out of budget), also pack the run folder into DIR: at "
                        "most 8 files of 16 MB with a manifest (normbench bundle). Default: none")
    p.add_argument("--budget", type=options.parse_budget, default=None, metavar="SECONDS",
                   help="the whole run's time limit: the throughput suite first (triton and torch, then jax, then the "
                        "rest; bf16 first), then conformance; a test not started when the budget is spent is 'not "
                        "run', and the run ends with its summary and report within it. Default: no limit")


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="render results (run folders or their files) as one self-contained HTML file")
    p.add_argument("results", nargs="+", metavar="RESULTS",
                   help="run folders (reports/<run-id>) or their throughput/conformance .json/.csv, environment.json "
                        "or table1.json files, or traffic folders (traffic.csv, kernels-*.csv: normbench traffic and "
                        "kernel-stats); several render side by side")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="Default: report.html in the first run folder (beside the results), or in the folder "
                        "of the first file given")
    p.add_argument("--baseline", default="torch", metavar="NAME",
                   help="the backend speedups are measured against. Default: %(default)r")


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from normbench.report import write_report

    output = args.output
    if output is None:  # beside the results, never into the current folder (a checkout's source tree)
        first = Path(args.results[0])
        output = (first if first.is_dir() else first.parent) / "report.html"
    path = write_report(args.results, output, args.baseline)
    print(f"report: {path}")
    return 0


def _add_survey(sub) -> None:
    from normbench.report.survey import FINDING_FIELDS

    p = sub.add_parser("survey", help="merge conformance runs of many libraries (one run folder per environment) "
                                      "with their judged findings into one folder, its report and findings page")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run folders written by `normbench run --suites=conformance`")
    p.add_argument("--runs-in", nargs="*", default=[], metavar="DIR",
                   help="folders whose every subfolder is such a run folder (the --out the runs wrote into)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the survey folder: conformance.csv, environment.json, findings.csv, findings.md, report.html")
    p.add_argument("--findings", nargs="*", default=[], metavar="FILE",
                   help="findings files, or folders of them (*.csv; header: " + ",".join(FINDING_FIELDS)
                        + "); their rows must name backends of the runs. Default: none")
    p.add_argument("--no-report", dest="report", action="store_false", help="do not write report.html")


def cmd_survey(args: argparse.Namespace) -> int:
    from pathlib import Path

    from normbench.report.survey import write_survey

    command = shlex.join(["normbench", *args.argv])
    written = write_survey(args.out, args.runs, args.findings, command, runs_in=args.runs_in)
    if args.report:
        from normbench.report import write_report

        written.append(write_report([args.out], Path(args.out) / "report.html", baseline="numpy"))
    for path in written:
        print(f"wrote {path}")
    return 0


#: every command and what runs it (``run`` and ``test`` take pytest's extra arguments too)
COMMANDS = ("list", "check", "test", "run", "table1", "report", "survey", "traffic", "kernel-stats", "preflight",
            "bundle")


def _add_bundle(sub) -> None:
    p = sub.add_parser("bundle", help="pack a run folder into at most 8 files of at most 16 MB each, with a manifest "
                                      "(what a GPU slot can carry back)")
    p.add_argument("run", metavar="RUN", help="the run folder, reports/<run-id>")
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder for the bundle")
    p.add_argument("--log", metavar="FILE", help="the run's output, saved beside it as run.log. Default: none")


def cmd_bundle(args: argparse.Namespace) -> int:
    from normbench.report.bundle import left_out_lines, write_bundle

    manifest = write_bundle(args.run, args.out, args.log)
    print(f"bundle: {manifest.parent}/ ({manifest.name} lists its files)")
    for line in left_out_lines(manifest):
        print(line)
    return 0


def _add_preflight(sub) -> None:
    p = sub.add_parser("preflight", help="in seconds, what a run here will use (GPU, CUDA, libraries, backends) and "
                                         "one line for what is missing; for a GPU node before its slot is spent")
    p.add_argument("--cpu", action="store_true",
                   help="a rehearsal on a CPU: no GPU required, the backends may run on the CPU")
    p.add_argument("--impl", metavar="NAMES", default=None,
                   help="the backends to create, separated by commas. Default: torch,triton,jax")


def cmd_preflight(args: argparse.Namespace) -> int:
    from normbench.front.preflight import cmd_preflight as run

    return run(args)


def _add_table1(sub) -> None:
    from normbench.core.dtypes import DTYPES

    p = sub.add_parser("table1", help="measure the paper's Table 1 (and §3.1) and print it beside the paper's")
    p.add_argument("--impl", metavar="NAME", type=options.parse_impl,
                   help="measure the layer-norm row on this backend (see `normbench list`). "
                                                   "Default: the float64 oracle")
    p.add_argument("--dtype", choices=DTYPES, help="the backend's dtype. Default: float32 if it supports it")
    p.add_argument("--eps", type=options.parse_eps, help="the backend's eps (the oracles use 0). Default: 1e-05")
    p.add_argument("--seed", type=options.parse_seed, default=0, help="Default: %(default)r")
    p.add_argument("--no-recurrent", action="store_true", help="skip the §3.1 RNN and LSTM section")
    p.add_argument("--save", metavar="DIR", help="also write the measured table as DIR/table1.json (e.g. a run "
                                                 "folder, for `normbench report`). Default: not saved")


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if extra and args.command not in ("test", "run"):
        parser().error(f"unrecognized arguments: {' '.join(extra)}")
    if options.xdist_worker_argument(extra):
        parser().error(f"{options.xdist_worker_argument(extra)}: pytest-xdist's own worker options are not passed on "
                       f"(they would start workers past -n's cap). Fix: give the count as normbench's -n N (at most "
                       f"{options.WORKERS_PER_CORE} per usable CPU core), or 'auto'")
    try:
        vetting.discard_foreign()  # before any process is started: a verdict no ancestor made is not passed on
        vetting.timeout_s()  # a bad NORMBENCH_PLUGIN_TIMEOUT is one message before anything runs
        if args.command in ("test", "run"):
            from normbench.front import run
            from normbench.front.plan import Plan

            plan = Plan.from_args(args)
            return run.cmd_test(plan, extra) if args.command == "test" else run.cmd_run(plan, extra, args.argv)
        return {"list": cmd_list, "check": cmd_check, "report": cmd_report, "table1": cmd_table1, "survey": cmd_survey,
                "traffic": counts.cmd_traffic, "kernel-stats": counts.cmd_kernel_stats,
                "preflight": cmd_preflight, "bundle": cmd_bundle}[args.command](args)
    except NormbenchError as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
