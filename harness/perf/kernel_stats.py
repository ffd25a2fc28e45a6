"""Static checks of compiled Triton kernels for a GPU, on a machine without one.

For each compiled kernel (a ``triton.compile`` result for ``sm_90`` or ``sm_80``,
built without a device by Triton's ahead-of-time API) this reads:

* **registers** per thread and **spill** bytes, from ``ptxas -v`` (the ptxas
  Triton bundles) run on the kernel's PTX;
* **shared memory** per CTA, from the compiled kernel's metadata (what Triton
  allocates for reductions and layout conversions);
* **resident CTAs and warps per SM**, estimated from those and the GPU's
  limits (:class:`normbench.perf.traffic.GPUProfile`: 64K registers allocated
  per warp in units of 256, 2048 threads, 32 CTAs, the shared memory per SM),
  and capped by the programs the launch gives each SM
  (``ceil(programs / SMs)``): ``resident_warps`` is what can actually be in
  flight, ``capacity_warps`` what the resources would allow;
* the **widths of global accesses**: every ``ld.global``/``st.global`` in the
  PTX by bytes per thread (a ``v4.b32`` is 16 bytes, the widest).

An estimate from the compiler's output, never a measurement: it says nothing
about time. The kernels come from a *kernel provider*, a module that knows how
its backend launches: a function ``compiled_kernels(rows, hidden, dtype, arch,
sm_count)`` returning ``(kernel name, label, compiled kernel, programs)`` for
every launch of a forward and a backward (normbench's own:
``normbench.impls.triton.compile_check``). A provider that also has RMSNorm kernels takes
``norm="rms_norm"`` as a keyword (LayerNorm, the default, is asked for without it, so a
LayerNorm-only provider needs nothing). Run::

    normbench kernel-stats --kernels normbench.impls.triton.compile_check --gpu h100 \\
        --out reports/traffic-h100/kernels-sm90.csv
    normbench kernel-stats --norm rms_norm --gpu h100 --out kernels-rms-sm90.csv
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normbench.core import storage
from normbench.core.exceptions import NormbenchError
from normbench.core.storage import Column, Schema
from normbench.kit.triton import ptxas_usage
from normbench.perf.traffic import COUNTED_DTYPES, TRAFFIC, TRAFFIC_FILE, GPUProfile

_ACCESS = re.compile(r"\b(ld|st)\.global((?:\.[A-Za-z0-9_:]+)*?)(?:\.v(\d))?\.([bfsu])(\d+)\b")


def access_widths(ptx: str) -> tuple[Counter, Counter]:
    """(loads, stores): how many ``ld.global``/``st.global`` instructions of each width in bytes.

    >>> access_widths("ld.global.v4.b32 {%r1,%r2,%r3,%r4}, [%rd1]; @%p st.global.b16 [%rd2], %rs1;")
    (Counter({16: 1}), Counter({2: 1}))
    """
    loads, stores = Counter(), Counter()
    for op, _mods, vec, _kind, bits in _ACCESS.findall(ptx):
        (loads if op == "ld" else stores)[int(vec or 1) * int(bits) // 8] += 1
    return loads, stores


def occupancy(registers: int, shared_bytes: int, num_warps: int, gpu: GPUProfile) -> tuple[int, str]:
    """(CTAs of ``num_warps`` warps that fit on one SM, the resource that limits them).

    >>> from normbench.perf.traffic import GPUS
    >>> occupancy(74, 8192, 16, GPUS["h100"])
    (1, 'registers')
    >>> occupancy(64, 8192, 16, GPUS["h100"])
    (2, 'registers')
    """
    per_warp = math.ceil(max(registers, 1) * 32 / gpu.register_granularity) * gpu.register_granularity
    limits = {
        "threads": gpu.max_threads_per_sm // (32 * num_warps),
        "registers": gpu.registers_per_sm // (per_warp * num_warps),
        "ctas": gpu.max_ctas_per_sm,
        # the driver reserves 1 KiB of shared memory per CTA
        "shared memory": gpu.shared_bytes_per_sm // (shared_bytes + 1024),
    }
    limit = min(limits, key=lambda k: (limits[k], k != "registers"))
    return limits[limit], limit


def kernel_stats(compiled: Any, gpu: GPUProfile, arch: int, programs: int) -> dict:
    """The static facts of one compiled kernel launched as ``programs`` programs on ``gpu``."""
    ptx = compiled.asm["ptx"]
    registers, spills = ptxas_usage(ptx, arch)
    num_warps = int(compiled.metadata.num_warps)
    shared = int(compiled.metadata.shared)
    ctas, limited_by = occupancy(registers, shared, num_warps, gpu)
    per_sm = math.ceil(programs / gpu.sm_count)
    if per_sm < ctas:
        limited_by = "grid"
    loads, stores = access_widths(ptx)
    fmt = lambda c: " ".join(f"{w}B:{n}" for w, n in sorted(c.items(), reverse=True))
    return {
        "gpu": gpu.name, "arch": f"sm_{arch}", "num_warps": num_warps, "programs": programs,
        "registers": registers, "spill_bytes": spills, "shared_bytes": shared, "ctas_per_sm": ctas,
        "capacity_warps": ctas * num_warps, "resident_warps": min(ctas, per_sm) * num_warps,
        "limited_by": limited_by, "load_widths": fmt(loads), "store_widths": fmt(stores),
        "widest_load": max(loads, default=0), "widest_store": max(stores, default=0),
    }


def _compiled_kernels(provider: Any, norm: str):
    """``provider.compiled_kernels``, asked for ``norm``'s kernels (see the module doc)."""
    if norm == "layer_norm":
        return provider.compiled_kernels
    if "norm" not in inspect.signature(provider.compiled_kernels).parameters:
        raise NormbenchError(f"{getattr(provider, '__name__', provider)}.compiled_kernels takes no norm keyword: it "
                             f"provides LayerNorm kernels only, not {norm}")
    return lambda *args: provider.compiled_kernels(*args, norm=norm)


def stats_rows(provider: Any, shapes: Sequence[tuple[int, int, str]], gpu: GPUProfile, arch: int,
               progress=None, norm: str = "layer_norm") -> list[dict]:
    """Stats rows for every launch ``provider.compiled_kernels`` names at each (rows, hidden, dtype),
    of ``norm``'s kernels (``layer_norm`` or ``rms_norm``)."""
    out = []
    compiled_kernels = _compiled_kernels(provider, norm)
    for rows, hidden, dtype in shapes:
        for kernel, label, compiled, programs in compiled_kernels(rows, hidden, dtype, arch, gpu.sm_count):
            row = {"kernel": kernel, "label": label, "dtype": dtype, "rows": rows, "hidden": hidden,
                   **kernel_stats(compiled, gpu, arch, programs)}
            out.append({k: row[k] for k in STATS_COLUMNS})
            if progress:
                progress(out[-1])
    return out


# -- the kernel-stats results schema: one row per launch, written by main() -------------------------------------

#: the widest global access one PTX instruction makes (a v4 of 64-bit values), bytes
MAX_ACCESS_BYTES = 32
#: the kernel-stats schema's columns: compiler output and occupancy estimates for a GPU, without one; never a speed
KERNEL_STATS_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("kernel", "str", "the Triton kernel's name"),
    Column("label", "str", "the kernel with its dtypes, N, warps and constexpr configuration"),
    Column("dtype", "str", "the dtype of x of the case launching it", choices=COUNTED_DTYPES),
    Column("rows", "int", "M, the number of rows of the case", low=1),
    Column("hidden", "int", "N, the normalized size of the case", low=1),
    Column("gpu", "str", "the GPU whose limits and SM count the estimate uses"),
    Column("arch", "str", "the compile target, sm_XY"),
    Column("num_warps", "int", "warps per CTA (program)", low=1, high=32),
    Column("programs", "int", "programs the launch's grid holds", low=1),
    Column("registers", "int", "registers per thread (ptxas -v)", low=0, high=255),
    Column("spill_bytes", "int", "spill stores plus spill loads, bytes (ptxas -v)", low=0),
    Column("shared_bytes", "int", "shared memory per CTA, bytes (Triton's metadata)", low=0, high=1 << 20),
    Column("ctas_per_sm", "int", "CTAs that fit on one SM by registers, threads, CTAs and shared memory", low=0,
           high=32),
    Column("capacity_warps", "int", "ctas_per_sm * num_warps: warps per SM the resources allow", low=0, high=64),
    Column("resident_warps", "int", "warps per SM in flight, also capped by the programs the grid gives each SM",
           low=0, high=64),
    Column("limited_by", "str", "what limits the resident CTAs: registers, threads, ctas, shared memory or grid",
           choices=("registers", "threads", "ctas", "shared memory", "grid")),
    Column("load_widths", "str", "ld.global instructions by bytes per thread, widest first: 16B:3 4B:2"),
    Column("store_widths", "str", "st.global instructions by bytes per thread, widest first"),
    Column("widest_load", "int", "the widest ld.global, bytes per thread (0: none)", low=0, high=MAX_ACCESS_BYTES),
    Column("widest_store", "int", "the widest st.global, bytes per thread (0: none)", low=0, high=MAX_ACCESS_BYTES),
)



def _widths(text: str) -> dict[int, int] | None:
    """``"16B:3 4B:2"`` as {16: 3, 4: 2}; None if it is not that form."""
    out = {}
    for part in text.split():
        width, colon, count = part.partition("B:")
        if not (colon and width.isdigit() and count.isdigit()):
            return None
        out[int(width)] = int(count)
    return out


def _stats_agree(row: dict[str, Any]) -> str | None:
    if not (row["arch"].startswith("sm_") and row["arch"][3:].isdigit()):
        return f"field arch is {row['arch']!r}, not sm_ and a compute capability x10 (sm_90)"
    if row["capacity_warps"] != row["ctas_per_sm"] * row["num_warps"]:
        return (f"capacity_warps ({row['capacity_warps']}) is not ctas_per_sm * num_warps "
                f"({row['ctas_per_sm']} * {row['num_warps']})")
    if row["resident_warps"] > row["capacity_warps"]:
        return f"resident_warps ({row['resident_warps']}) exceeds capacity_warps ({row['capacity_warps']})"
    for kind in ("load", "store"):
        widths = _widths(row[f"{kind}_widths"])
        if widths is None:
            return f"field {kind}_widths is {row[f'{kind}_widths']!r}, not WIDTHB:COUNT items (16B:3 4B:2)"
        if max(widths, default=0) != row[f"widest_{kind}"]:
            return (f"field widest_{kind} is {row[f'widest_{kind}']}, but the widest of {kind}_widths is "
                    f"{max(widths, default=0)}")
    return None





#: one CSV file per compile target, ``kernels-sm90.csv``, ``kernels-sm80.csv``
KERNEL_STATS_PATTERN = "kernels-*.csv"
KERNEL_STATS = Schema("normbench.kernel_stats", 1, "kernels", KERNEL_STATS_COLUMNS, rules=(_stats_agree,),
                      pattern=KERNEL_STATS_PATTERN)
assert KERNEL_STATS_PATTERN in storage.COUNTS_PATTERNS, "a run folder must refuse to be written over kernel stats"
#: the fields of a kernel-stats row, in order: :data:`KERNEL_STATS_COLUMNS` less ``schema_version``, which the writer adds
STATS_COLUMNS: tuple[str, ...] = tuple(c.name for c in KERNEL_STATS_COLUMNS if c.name != "schema_version")


def counts_files(folder: str | os.PathLike) -> list[Path]:
    """The traffic and kernel-stats files in ``folder``, traffic first, kernel stats by name."""
    folder = Path(folder)  # whatever is there by those names: the loader refuses what is not a regular file
    found = [folder / TRAFFIC_FILE] if storage.exists(folder / TRAFFIC_FILE) else []
    return found + sorted(folder.glob(KERNEL_STATS_PATTERN))


def schema_of_counts_file(path: str | os.PathLike) -> Schema | None:
    """:data:`TRAFFIC` or :data:`KERNEL_STATS` for a file named like one, else None."""
    path = Path(path)
    if path.name == TRAFFIC_FILE:
        return TRAFFIC
    if path.match(KERNEL_STATS_PATTERN):
        return KERNEL_STATS
    return None


