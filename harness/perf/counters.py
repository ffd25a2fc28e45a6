"""DRAM bytes a Triton backend's kernels move on a GPU, measured by Nsight Compute, beside the bytes the interpreter
counted for the same launches and the byte model: the test of the traffic claims (``reports/traffic-h100``).

``normbench run`` does it on a GPU when ``ncu`` is on the PATH and a Triton backend runs on CUDA (``normbench counters``
alone). For each item (operation, direction, shape) of :func:`items`:

1. **counted**: the launches are counted in the Triton interpreter (:func:`normbench.perf.traffic.count_direction`),
   in a child process with ``TRITON_INTERPRET=1``, with *this* GPU's launch configuration (its SM count, L2 and
   compute capability: :func:`profile_of`), so the counted launches are the ones the GPU runs; that gives each
   direction's kernels, in order, and their unique bytes;
2. **measured**: one child process runs every item once on the GPU under ``ncu --metrics dram__bytes_read.sum,
   dram__bytes_write.sum``, profiling only those kernels (by name); ncu flushes the caches before each profiled kernel
   (its default ``--cache-control all``), so each launch is measured cold, as the counter models it. A backward item
   runs its forward first (for the saved statistics), so its records are the forward's kernels, then the backward's;
   the records are matched to the items in order, **by name**: a kernel the count did not predict is an error, never
   a silent misattribution;
3. the row: measured read and write bytes, counted unique bytes, the byte model's bytes, and ``measured / model`` and
   ``measured / counted``.

A missing ``ncu`` or a profiler that refuses (``ERR_NVGPUCTRPERM``: the counters are reserved to administrators)
is one line of :class:`CountersUnavailable`; the run says it and goes on. Counts, never speeds. Child processes'
entry point: ``python -m normbench.perf.counters count|target ITEMS.json ...`` (:func:`main`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from normbench.core import storage
from normbench.core.exceptions import NormbenchError
from normbench.core.storage import Column, Schema
from normbench.perf.roofline import direction_bytes

#: what Nsight Compute is asked for: DRAM bytes read and written by a kernel
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
#: the shapes measured, from the GPU sweep (bf16): the row kernel at a middle and a large hidden size, and the looped
#: kernel (hidden 65536)
SHAPES: tuple[tuple[int, int, str], ...] = ((32768, 4096, "bfloat16"), (8192, 16384, "bfloat16"),
                                            (8192, 65536, "bfloat16"))
NORMS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
DIRECTIONS = ("forward", "backward")
#: ncu's units of bytes (decimal, as it prints them)
_BYTE_UNITS = {"byte": 1, "kbyte": 10**3, "mbyte": 10**6, "gbyte": 10**9, "tbyte": 10**12,
               "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}


class CountersUnavailable(NormbenchError):
    """The counters cannot be measured here (no ncu, a profiler that refuses, no CUDA Triton backend): said, not fatal."""


@dataclass(frozen=True)
class Item:
    """One measurement: an operation's direction on a (rows, hidden) x of ``dtype``."""

    norm: str
    direction: str
    rows: int
    hidden: int
    dtype: str

    def label(self) -> str:
        return f"{self.norm} {self.direction} {self.dtype} {self.rows}x{self.hidden}"


def items(norms: Sequence[str] = NORMS, shapes: Sequence[tuple[int, int, str]] = SHAPES,
          directions: Sequence[str] = DIRECTIONS) -> list[Item]:
    """Every (operation, shape, direction), operations outermost."""
    return [Item(norm, d, rows, hidden, dtype) for norm in norms for rows, hidden, dtype in shapes for d in directions]


def ncu() -> str | None:
    """Nsight Compute's command line, if on the PATH (``$NCU`` names another)."""
    return shutil.which(os.environ.get("NCU", "ncu"))


def profile_of(device_index: int = 0):
    """The :class:`~normbench.perf.traffic.GPUProfile` of a CUDA device, from torch's view of it."""
    import torch

    from normbench.perf.traffic import GPUProfile

    props = torch.cuda.get_device_properties(device_index)
    extra = {k: getattr(props, a) for k, a in (("shared_bytes_per_sm", "shared_memory_per_multiprocessor"),
                                               ("max_shared_bytes_per_cta", "shared_memory_per_block_optin"),
                                               ("registers_per_sm", "regs_per_multiprocessor"),
                                               ("max_threads_per_sm", "max_threads_per_multi_processor"))
             if getattr(props, a, None)}
    return GPUProfile(props.name, props.multi_processor_count, props.major * 10 + props.minor,
                      getattr(props, "L2_cache_size", 50 << 20), **extra)


# -- the two child processes ------------------------------------------------------------------------------------


def _read_items(path: str) -> list[Item]:
    return [Item(**entry) for entry in json.loads(Path(path).read_text())]


def _count(items_path: str, gpu_path: str, out_path: str, backend_name: str) -> None:
    """Child: each item's launches counted in the interpreter with the GPU's launch configuration."""
    from normbench.core.registry import get_registry
    from normbench.perf.traffic import GPUProfile, count_direction, emulated_gpu

    backend = get_registry().create(backend_name)
    gpu = GPUProfile(**json.loads(Path(gpu_path).read_text()))
    out = []
    with emulated_gpu(gpu):
        for item in _read_items(items_path):
            launches = count_direction(backend, item.rows, item.hidden, item.dtype, item.direction, norm=item.norm)
            out.append({"kernels": [launch.kernel for launch in launches],
                        "launch_bytes": [launch.unique for launch in launches],
                        "unique_bytes": sum(launch.unique for launch in launches)})
    Path(out_path).write_text(json.dumps(out))


def _target(items_path: str, backend_name: str) -> None:
    """Child (under ncu): every item once on the backend's device, a backward after its forward."""
    import torch

    from normbench.core import operations
    from normbench.core.registry import get_registry

    backend = get_registry().create(backend_name)
    device = torch.device(backend.device.split()[0] if backend.device.startswith("cuda") else "cpu")
    for item in _read_items(items_path):
        operation = operations.of(item.norm)
        dtype = getattr(torch, item.dtype)
        shape = (item.rows, item.hidden)
        tensor = lambda shape=shape, dtype=dtype: torch.randn(shape, dtype=dtype, device=device)
        args = operation.arguments(x=tensor(), residual=tensor() if "residual" in operation.params else None,
                                   normalized_shape=(item.hidden,),
                                   weight=torch.ones(item.hidden, dtype=dtype, device=device),
                                   bias=torch.zeros(item.hidden, dtype=dtype, device=device) if operation.has_bias
                                   else None, eps=1e-5)
        outputs = operation.forward(backend, args)
        if item.direction == "backward":
            cotangents = tuple(tensor() for _ in operation.cotangents)
            operation.backward(backend, operation.backward_args_from(args, outputs), cotangents)
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def main(argv: Sequence[str] | None = None) -> int:
    """``count ITEMS GPU OUT BACKEND`` or ``target ITEMS BACKEND``: the child processes of :func:`measure`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["count"] and len(argv) == 5:
        _count(*argv[1:])
    elif argv[:1] == ["target"] and len(argv) == 3:
        _target(*argv[1:])
    else:
        print("usage: python -m normbench.perf.counters count ITEMS GPU OUT BACKEND | target ITEMS BACKEND",
              file=sys.stderr)
        return 2
    return 0


# -- ncu's output -----------------------------------------------------------------------------------------------


def parse_ncu_csv(text: str) -> list[tuple[str, dict[str, float]]]:
    """ncu's ``--csv`` details page (a row per kernel and metric) as ``[(kernel, {metric: bytes})]`` in launch order
    (its ``ID``); ncu's own lines (``==PROF==``, ``==WARNING==``) around the table are skipped.

    >>> parse_ncu_csv('==PROF== Disconnected\\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\\n'
    ...               '"0","k","dram__bytes_read.sum","Mbyte","1,048.5"\\n"0","k","dram__bytes_write.sum","byte","512"')
    [('k', {'dram__bytes_read.sum': 1048500000.0, 'dram__bytes_write.sum': 512.0})]
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    table = [line for line in lines[start:] if line.startswith('"')]
    records: dict[int, tuple[str, dict[str, float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(table))):
        unit = row.get("Metric Unit", "").strip().lower()
        if row.get("Metric Name") not in NCU_METRICS:
            continue
        if unit not in _BYTE_UNITS:
            raise NormbenchError(f"ncu reported {row['Metric Name']} in {row.get('Metric Unit')!r}, not in bytes")
        value = float(row["Metric Value"].replace(",", "")) * _BYTE_UNITS[unit]
        name, metrics = records.setdefault(int(row["ID"]), (row["Kernel Name"], {}))
        metrics[row["Metric Name"]] = value
    return [records[i] for i in sorted(records)]


def _ncu_problem(text: str) -> str | None:
    """ncu's first ``==ERROR==`` line, if any."""
    found = re.search(r"^==ERROR==\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else None


def assign(work: Sequence[Item], counted: Sequence[dict], forward_kernels: Sequence[list[str]],
           records: Sequence[tuple[str, dict[str, float]]]) -> list[tuple[int, int]]:
    """Each item's measured (read, write) bytes: its records, in order, are its forward's kernels (for a backward:
    the forward run for the saved statistics, skipped) then its own, each matched by name."""
    out, at = [], 0
    for item, count, before in zip(work, counted, forward_kernels):
        skip = list(before) if item.direction == "backward" else []
        expected = skip + list(count["kernels"])
        got = [name for name, _ in records[at:at + len(expected)]]
        if got != expected:
            raise NormbenchError(f"ncu's records do not match the launches counted for {item.label()}: expected "
                                 f"{' '.join(expected)}, got {' '.join(got) or 'nothing'} (record {at} on)")
        mine = records[at + len(skip):at + len(expected)]
        out.append((round(sum(m.get(NCU_METRICS[0], 0.0) for _, m in mine)),
                    round(sum(m.get(NCU_METRICS[1], 0.0) for _, m in mine))))
        at += len(expected)
    if at != len(records):
        raise NormbenchError(f"ncu profiled {len(records) - at} kernel(s) more than the items launch: "
                             f"{' '.join(name for name, _ in records[at:])}")
    return out


# -- the measurement --------------------------------------------------------------------------------------------


def _child(args: list[str], env: dict[str, str], timeout: float, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        raise CountersUnavailable(f"{what} did not finish in {timeout:.0f} s") from None


def measure(work: Sequence[Item], gpu, folder: str | os.PathLike, *, backend: str = "triton",
            timeout: float = 600.0, ncu_path: str | None = None) -> list[dict]:
    """The counters' rows for ``work`` on ``gpu`` (a GPUProfile), their scratch files in ``folder``; raises
    :class:`CountersUnavailable` (one line) when ncu is missing or refuses, or time runs out."""
    import time

    ncu_path = ncu_path or ncu()
    if not ncu_path:
        raise CountersUnavailable("ncu (Nsight Compute) is not on the PATH: DRAM bytes not measured")
    deadline = time.monotonic() + timeout
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    work = list(work)
    forwards = [Item(i.norm, "forward", i.rows, i.hidden, i.dtype) for i in work]
    counting = list(dict.fromkeys(work + forwards))
    (folder / "items.json").write_text(json.dumps([asdict(i) for i in counting]))
    (folder / "measured-items.json").write_text(json.dumps([asdict(i) for i in work]))
    (folder / "gpu.json").write_text(json.dumps(asdict(gpu)))
    python = [sys.executable, "-m", "normbench.perf.counters"]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = _child([*python, "count", str(folder / "items.json"), str(folder / "gpu.json"), str(folder / "counted.json"),
                   backend], env, deadline - time.monotonic(), "counting the launches in the interpreter")
    if done.returncode != 0:
        raise CountersUnavailable(f"counting the launches in the interpreter failed: {_last_line(done)}")
    counts = dict(zip(counting, json.loads((folder / "counted.json").read_text())))
    kernels = sorted({k for c in counts.values() for k in c["kernels"]})
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    log = folder / "ncu.csv"
    done = _child([ncu_path, "--csv", "--log-file", str(log), "--metrics", ",".join(NCU_METRICS),
                   "--kernel-name", f"regex:^({'|'.join(map(re.escape, kernels))})$", "--target-processes", "all",
                   *python, "target", str(folder / "measured-items.json"), backend],
                  env, deadline - time.monotonic(), "ncu")
    text = log.read_text() if log.is_file() else ""
    problem = _ncu_problem(text + "\n" + done.stdout + "\n" + done.stderr)
    if problem or done.returncode != 0:
        raise CountersUnavailable(f"ncu failed (exit {done.returncode}): {problem or _last_line(done)}")
    measured = assign(work, [counts[i] for i in work], [counts[f]["kernels"] for f in forwards], parse_ncu_csv(text))
    return [row(item, counts[item], read, write, gpu.name) for item, (read, write) in zip(work, measured)]


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}, nothing printed"


def row(item: Item, counted: dict, read: int, write: int, gpu: str) -> dict[str, Any]:
    """One table row."""
    model = direction_bytes(item.rows, item.hidden, item.dtype, item.direction, norm=item.norm)
    measured = read + write
    return {"normalization": item.norm, "direction": item.direction, "dtype": item.dtype, "rows": item.rows,
            "hidden": item.hidden, "gpu": gpu, "kernels": "+".join(counted["kernels"]), "measured_read_bytes": read,
            "measured_write_bytes": write, "measured_bytes": measured, "counted_bytes": counted["unique_bytes"],
            "model_bytes": model, "measured_over_model": round(measured / model, 5),
            "measured_over_counted": round(measured / counted["unique_bytes"], 5) if counted["unique_bytes"] else None}


COUNTERS_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("normalization", "str", "the operation (normbench.core.operations)", choices=NORMS),
    Column("direction", "str", "forward or backward", choices=DIRECTIONS),
    Column("dtype", "str", "x's dtype (weight, bias and the residual too)"),
    Column("rows", "int", "M, the number of rows", low=1),
    Column("hidden", "int", "N, the normalized size", low=1),
    Column("gpu", "str", "the GPU measured (its launch configuration was the counter's)"),
    Column("kernels", "str", "the direction's kernels, in launch order, joined by +"),
    Column("measured_read_bytes", "int", "ncu's dram__bytes_read.sum over the direction's kernels", low=0),
    Column("measured_write_bytes", "int", "ncu's dram__bytes_write.sum over the direction's kernels", low=0),
    Column("measured_bytes", "int", "read + written, measured", low=0),
    Column("counted_bytes", "int", "unique bytes the interpreter counted for the same launches (normbench traffic)",
           low=0),
    Column("model_bytes", "int", "the byte model's bytes for the direction (normbench.perf.roofline)", low=1),
    Column("measured_over_model", "float", "measured_bytes / model_bytes, 5 decimals", low=0.0),
    Column("measured_over_counted", "float", "measured_bytes / counted_bytes, 5 decimals", low=0.0),
)


def _sums(r: dict[str, Any]) -> str | None:
    if r["measured_bytes"] != r["measured_read_bytes"] + r["measured_write_bytes"]:
        return "measured_bytes is not measured_read_bytes + measured_write_bytes"
    if abs(r["measured_over_model"] - r["measured_bytes"] / r["model_bytes"]) > 6e-6:
        return "measured_over_model is not measured_bytes / model_bytes"
    return None


COUNTERS = Schema("normbench.counters", 1, "counters", COUNTERS_COLUMNS, rules=(_sums,))
COUNTERS_FILE = "counters.csv"
assert COUNTERS_FILE in storage.COUNTS_FILES, "a run folder must refuse to be written over a counters table"


def write_csv(rows: Sequence[dict], path: str | os.PathLike) -> None:
    storage.write_csv(path, rows, COUNTERS)


def table_lines(rows: Sequence[dict]) -> list[str]:
    """The table as text: measured / counted / byte model, per item."""
    out = [f"{'operation':15} {'direction':9} {'shape':>12} {'measured/model':>14} {'measured/counted':>16}  kernels"]
    for r in rows:
        over_counted = f"{r['measured_over_counted']:.4f}" if r["measured_over_counted"] is not None else "-"
        out.append(f"{r['normalization']:15} {r['direction']:9} {r['rows']:>6}x{r['hidden']:<5} "
                   f"{r['measured_over_model']:>14.4f} {over_counted:>16}  {r['kernels']}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
