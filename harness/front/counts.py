"""``normbench traffic`` and ``normbench kernel-stats``: counts and compiler estimates, never speeds.

* ``normbench traffic --impl triton --gpu h100``: the bytes each launch of a Triton backend's kernels moves
  under a GPU's launch configuration, counted in the Triton interpreter, over the byte model
  (:mod:`normbench.perf.traffic`);
* ``normbench kernel-stats --gpu h100``: registers, spills, occupancy and access widths of kernels compiled
  for a GPU without one (:mod:`normbench.perf.kernel_stats`).

Both print a line per row as it comes and write the rows as CSV with ``--out``; their results schemas are
``normbench.traffic`` and ``normbench.kernel_stats``. A user error is one line with the fix, as for every
command (``normbench.front.cli``).
"""

from __future__ import annotations

import argparse
import os
import time

from normbench.core.exceptions import NormbenchError

#: the traffic counter covers these directions (the byte model's forward-inference and backward)
COUNTED_DIRECTIONS = ("forward", "backward")


def check_out(out: str | None, kind: str) -> None:
    """``--out`` of ``traffic`` (``kind`` "traffic") or ``kernel-stats`` ("kernels"), checked before anything is
    counted: a ``.csv`` file, never one of a run folder's own files (``conformance.csv``, ``environment.json``,
    ``report.html``, ...) nor the other command's (a kernel-stats table is ``kernels-*.csv``, the report reads it by
    that name; a traffic table is not), and not in a run's folder while that run holds it."""
    from pathlib import Path

    from normbench.core.environment import ENVIRONMENT_FILE
    from normbench.core.run_folder import holder
    from normbench.core.storage import RESULT_FILES
    from normbench.perf.counters import COUNTERS_FILE
    from normbench.perf.kernel_stats import KERNEL_STATS_PATTERN
    from normbench.report.bundle import MANIFEST, RUN_LOG
    from normbench.report.sources import TABLE1_FILE
    from normbench.report.survey import FINDINGS_FILE

    if out is None:
        return
    path = Path(out)
    fix = "Fix: --out DIR/" + ("traffic.csv" if kind == "traffic" else "kernels-sm90.csv")
    if path.is_dir() or path.suffix != ".csv":
        raise NormbenchError(f"--out {out}: the rows are written as one .csv file. {fix}")
    owned = {*RESULT_FILES, ENVIRONMENT_FILE, COUNTERS_FILE, MANIFEST, RUN_LOG, TABLE1_FILE, FINDINGS_FILE}
    if path.name in owned:
        raise NormbenchError(f"--out {out}: {path.name} is a run folder's own file, never written over by `normbench "
                             f"{'traffic' if kind == 'traffic' else 'kernel-stats'}`. {fix}")
    if path.match(KERNEL_STATS_PATTERN) != (kind == "kernels"):
        why = ("kernel statistics are read from files named kernels-*.csv" if kind == "kernels" else
               "kernels-*.csv is read as kernel statistics, which traffic rows are not")
        raise NormbenchError(f"--out {out}: {why}. {fix}")
    pid = holder(path.parent) if path.parent.is_dir() else None
    if pid is not None and pid != os.getpid():
        raise NormbenchError(f"--out {out}: the run in {path.parent} is still writing there (pid {pid}). Fix: wait "
                             f"for it to end, or give another folder")


def parse_shape_list(text: str) -> list[tuple[int, int, str]]:
    """``sweep`` (the GPU throughput sweep) or ``ROWSxHIDDEN[:DTYPE],...`` (an argparse type: a bad value is one
    usage message).

    >>> parse_shape_list("8192x1024:float16,4x8")
    [(8192, 1024, 'float16'), (4, 8, 'bfloat16')]
    """
    from normbench.core.dtypes import DTYPES
    from normbench.perf.traffic import gpu_sweep_shapes

    if text == "sweep":
        return gpu_sweep_shapes()
    shapes = []
    for item in text.split(","):
        size, _, dtype = item.partition(":")
        m, x, n = size.partition("x")
        dtype = dtype or "bfloat16"
        if not (x and m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0) or dtype not in DTYPES:
            raise argparse.ArgumentTypeError(f"{item!r}: give 'sweep' or ROWSxHIDDEN[:DTYPE] items separated by "
                                             f"commas, e.g. 8192x1024:bfloat16 (dtypes: {', '.join(DTYPES)})")
        shapes.append((int(m), int(n), dtype))
    return shapes


def parse_counted_directions(text: str) -> list[str]:
    chosen = [d.strip() for d in text.split(",")]
    if not chosen or any(d not in COUNTED_DIRECTIONS for d in chosen):
        raise argparse.ArgumentTypeError(f"{text!r}: give forward, backward or forward,backward")
    return chosen


def parse_arch(text: str) -> int:
    """A compute capability times ten, 50 to 199 (``90`` for sm_90)."""
    if not (text.isdigit() and 50 <= int(text) <= 199):
        raise argparse.ArgumentTypeError(f"{text!r}: give a compute capability times ten, e.g. 90 for sm_90 or 80 "
                                         f"for sm_80")
    return int(text)


def needs(*modules: str, what: str) -> None:
    """One error line, with the fix, when a module ``what`` needs is not installed."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise NormbenchError(f"{what} needs {' and '.join(missing)}, not installed. Fix: pip install "
                             f"'normbench[triton]' (it brings torch and triton)")


def add_parsers(sub) -> None:
    """The two commands' parsers, as subcommands of ``normbench``."""
    from normbench.core import operations
    from normbench.perf.traffic import GPUS

    p = sub.add_parser("traffic", help="count the bytes a Triton backend's kernels move under a GPU's launch "
                                       "configuration, in the interpreter (docs/triton-kernels.md)",
                       description=__doc__.split("\n")[0])
    p.add_argument("--impl", default="triton", help="a backend whose kernels are Triton. Default: %(default)s")
    p.add_argument("--gpu", default="h100", choices=sorted(GPUS), help="launch configuration. Default: %(default)s")
    p.add_argument("--shapes", default="sweep", type=parse_shape_list,
                   help="'sweep' (the GPU throughput sweep) or ROWSxHIDDEN:DTYPE,... Default: %(default)s")
    p.add_argument("--directions", type=parse_counted_directions,
                   help="forward,backward (an inference-only operation's: forward). Default: every one it has")
    p.add_argument("--norm", default="layer_norm", choices=operations.NAMES,
                   help="LayerNorm with weight and bias, or RMSNorm with weight, plain, fused or quantized. "
                        "Default: %(default)s")
    p.add_argument("--all-programs", action="store_true", help="run every program (slow), no extrapolation")
    p.add_argument("--out", help="write the rows as CSV here")

    p = sub.add_parser("kernel-stats", help="registers, spills, occupancy and access widths of kernels compiled for "
                                            "a GPU (sm_90, sm_80) without one", description=__doc__.split("\n")[0])
    p.add_argument("--kernels", default="normbench.impls.triton.compile_check",
                   help="the kernel provider module (normbench.perf.kernel_stats). Default: %(default)s")
    p.add_argument("--gpu", default="h100", choices=sorted(GPUS))
    p.add_argument("--arch", type=parse_arch, help="compute capability x10 (sm_90: 90). Default: the GPU's")
    p.add_argument("--shapes", default="sweep", type=parse_shape_list, help="'sweep' or ROWSxHIDDEN:DTYPE,...")
    p.add_argument("--norm", default="layer_norm", choices=operations.NAMES,
                   help="which normalization's kernels. Default: %(default)s")
    p.add_argument("--out", help="write the rows as CSV here")


def cmd_traffic(args: argparse.Namespace) -> int:
    from normbench.core import operations
    from normbench.core.registry import get_registry
    from normbench.perf.traffic import GPUS, RATIO_NOTE, traffic_rows, write_csv

    check_out(args.out, "traffic")
    needs("torch", "triton", what="normbench traffic (it counts Triton launches in the interpreter)")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    backend = get_registry().select(args.impl).backends[0]
    if "triton" not in backend.requires:
        raise NormbenchError(f"--impl={args.impl}: {backend.name} has no Triton kernels to count (it does not require "
                             f"triton). Fix: name a backend whose kernels are Triton, e.g. --impl=triton")
    missing = operations.missing_reason(backend, args.norm)
    if missing:
        raise NormbenchError(f"traffic: {missing}")
    has_backward = bool(operations.of(args.norm).cotangents)
    directions = args.directions or (("forward", "backward") if has_backward else ("forward",))
    if "backward" in directions and not has_backward:
        raise NormbenchError(f"traffic: {args.norm} has no backward (inference only). Fix: --directions forward")
    gpu = GPUS[args.gpu]
    norm = "" if args.norm == "layer_norm" else f" {args.norm}"
    print(f"# {args.impl}{norm} with the launch configuration of {gpu.name} ({gpu.sm_count} SMs); {RATIO_NOTE}")

    def show(row: dict) -> None:
        print(f"{row['direction']:9} {row['dtype']:9} {row['rows']:>7}x{row['hidden']:<6} ratio {row['ratio']:.4f} "
              f"(requested {row['requested_ratio']:.3f}) {row['kernels']}", flush=True)

    start = time.monotonic()
    rows = traffic_rows(backend, args.impl, args.shapes, gpu, directions, not args.all_programs, show, args.norm)
    print(f"# {len(rows)} rows in {time.monotonic() - start:.0f} s")
    if args.out:
        write_csv(rows, args.out)
    return 0


def cmd_kernel_stats(args: argparse.Namespace) -> int:
    import importlib

    from normbench.perf.kernel_stats import KERNEL_STATS, stats_rows
    from normbench.perf.traffic import GPUS, write_csv

    check_out(args.out, "kernels")
    needs("triton", what="normbench kernel-stats (it compiles Triton kernels)")
    os.environ["TRITON_INTERPRET"] = "0"  # compile, whatever the machine
    gpu = GPUS[args.gpu]
    arch = args.arch or gpu.arch
    try:
        provider = importlib.import_module(args.kernels)  # a kernel provider named on the command line
    except ImportError as exc:
        raise NormbenchError(f"--kernels={args.kernels}: cannot import it ({exc}). Fix: name a kernel provider "
                             f"module (normbench.perf.kernel_stats), e.g. normbench.impls.triton.compile_check") from None
    if not callable(getattr(provider, "compiled_kernels", None)):
        raise NormbenchError(f"--kernels={args.kernels} has no compiled_kernels(rows, hidden, dtype, arch, sm_count): "
                             f"it is not a kernel provider. Fix: name one, e.g. normbench.impls.triton.compile_check")
    norm = "" if args.norm == "layer_norm" else f", {args.norm}"
    print(f"# static estimates for {gpu.name} ({gpu.sm_count} SMs), sm_{arch}{norm}: compiler output, not speeds")

    def show(r: dict) -> None:
        print(f"{r['label']}: {r['registers']} regs, {r['spill_bytes']} B spilled, {r['shared_bytes']} B smem, "
              f"{r['resident_warps']} resident warps/SM ({r['limited_by']}), loads {r['load_widths']}, "
              f"stores {r['store_widths']}", flush=True)

    start = time.monotonic()
    rows = stats_rows(provider, args.shapes, gpu, arch, show, args.norm)
    print(f"# {len(rows)} kernels in {time.monotonic() - start:.0f} s")
    if args.out:
        write_csv(rows, args.out, KERNEL_STATS)
    return 0
