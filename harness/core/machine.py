"""What this machine has: its CPU model, the cores this process may use, the last-level cache,
and the memory still available to this process.

Read from the operating system without importing any framework; used by the
environment record (:mod:`normbench.core.environment`), the ceiling's buffer size
(:mod:`normbench.perf.roofline`), and the check that a case fits in memory
before its arrays are made (:func:`check_fits`).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from normbench.core.exceptions import NormbenchError

MIB = 1 << 20
#: when the cache size cannot be read: larger than most CPUs' LLC (recorded as assumed)
ASSUMED_CACHE_BYTES = 256 << 20


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# -- the last-level cache ------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSize:
    """The last-level cache this process's cores share, and where the number came from."""

    bytes: int
    source: str


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"266240K"`` (sysfs), ``"32 MiB"`` or ``"1048576"`` as bytes.

    >>> parse_size("266240K"), parse_size("32 MiB")
    (272629760, 33554432)
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a cache size: {text!r}")
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2].upper()]


def _sysfs_cache(root: Path, cpus: set[int]) -> CacheSize | None:
    """The highest-level data or unified cache in sysfs, times the number of
    distinct instances of it among ``cpus`` (one per socket or CCX)."""
    best: tuple[int, int, str] | None = None  # (level, size, index name)
    for index in sorted((root / "cpu0" / "cache").glob("index*")):
        try:
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            level, size = int((index / "level").read_text()), parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if best is None or level > best[0]:
            best = (level, size, index.name)
    if best is None:
        return None
    level, size, name = best
    instances = set()
    for cpu in cpus:
        try:
            instances.add((root / f"cpu{cpu}" / "cache" / name / "shared_cpu_list").read_text().strip())
        except OSError:
            pass
    count = max(1, len(instances))
    where = f"{root}/cpu*/cache/{name}: L{level} {size // 1024} KiB"
    return CacheSize(size * count, where + (f" x {count} instances" if count > 1 else ""))


def last_level_cache(sysfs: Path = Path("/sys/devices/system/cpu")) -> CacheSize:
    """The CPU's last-level cache size: sysfs (Linux), else ``sysconf``, else
    ``sysctl`` (macOS), else :data:`ASSUMED_CACHE_BYTES` with the source saying so."""
    cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else {0}
    found = _sysfs_cache(sysfs, cpus) if sysfs.is_dir() else None
    if found:
        return found
    for name in ("SC_LEVEL4_CACHE_SIZE", "SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            value = os.sysconf(name)
        except (ValueError, OSError, AttributeError):
            continue
        if value and value > 0:
            return CacheSize(int(value), f"os.sysconf({name!r})")
    if sys.platform == "darwin":
        for key in ("hw.l3cachesize", "hw.l2cachesize"):
            try:
                out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout
                if out.strip().isdigit() and int(out) > 0:
                    return CacheSize(int(out), f"sysctl {key}")
            except (OSError, subprocess.SubprocessError):
                pass
    return CacheSize(ASSUMED_CACHE_BYTES, f"assumed {ASSUMED_CACHE_BYTES // MIB} MiB (the cache size could not be read)")


def cpu_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# -- memory --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySize:
    """Memory this process can still take, and where the number came from."""

    bytes: int
    source: str


#: a cgroup limit at or above this is "no limit" (cgroup v1 writes 2**63 rounded down to a page)
_NO_LIMIT = 1 << 60


def format_bytes(n: int | float) -> str:
    """Bytes in binary units, three significant digits (whole numbers from 1000 up).

    >>> format_bytes(512), format_bytes(1536), format_bytes(96 * 10**13), format_bytes(5 << 30), format_bytes(1 << 70)
    ('512 B', '1.5 KiB', '873 TiB', '5 GiB', '1,048,576 PiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if abs(n) < 1000 else f"{n:,.0f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _stat(path: Path, key: str) -> int:
    """One counter of a cgroup's ``memory.stat`` (0 if absent)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _meminfo(proc: Path) -> MemorySize | None:
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return MemorySize(parse_size(line.split(":", 1)[1].replace("kB", "K")),
                                  f"MemAvailable in {proc}/meminfo")
    except (OSError, ValueError):
        pass
    return None


def _cgroup_dirs(proc: Path, root: Path) -> list[tuple[Path, str]]:
    """The memory cgroup folders of this process (its own and their parents, whose limits apply
    too), with the version: ``"v2"`` (``memory.max``) or ``"v1"`` (``memory.limit_in_bytes``).
    Inside a container the paths of ``/proc/self/cgroup`` may not exist under ``root``; the
    mount's own top folder (the container's cgroup) is then what applies, and is always tried."""
    found: list[tuple[Path, str]] = []
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            base, version = root, "v2"
        elif "memory" in controllers.split(","):
            base, version = root / "memory", "v1"
        else:
            continue
        own = base / path.lstrip("/")
        found += [(folder, version) for folder in (own, *own.parents) if folder.is_relative_to(base)]
    found += [(root, "v2"), (root / "memory", "v1")]
    return list(dict.fromkeys(found))


def _cgroup(proc: Path, root: Path) -> MemorySize | None:
    """The least memory left under any cgroup limit of this process: limit minus usage, where
    usage does not count inactive file cache (the kernel reclaims it before it fails an allocation)."""
    best: MemorySize | None = None
    for folder, version in _cgroup_dirs(proc, root):
        if version == "v2":
            limit, usage = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
            cache = _stat(folder / "memory.stat", "inactive_file")
        else:
            limit, usage = _read_int(folder / "memory.limit_in_bytes"), _read_int(folder / "memory.usage_in_bytes")
            cache = _stat(folder / "memory.stat", "total_inactive_file")
        if limit is None or limit >= _NO_LIMIT:
            continue
        left = max(0, limit - max(0, (usage or 0) - cache))
        if best is None or left < best.bytes:
            name = "memory.max" if version == "v2" else "memory.limit_in_bytes"
            best = MemorySize(left, f"cgroup limit {format_bytes(limit)} ({folder}/{name}) less its usage")
    return best


def _sysconf() -> MemorySize | None:
    """Free physical pages (most Unix systems), else all physical memory (said so)."""
    for name, what in (("SC_AVPHYS_PAGES", "free physical memory"),
                       ("SC_PHYS_PAGES", "all physical memory (the free amount could not be read)")):
        try:
            pages, size = os.sysconf(name), os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            continue
        if pages > 0 and size > 0:
            return MemorySize(pages * size, f"{what}, os.sysconf({name!r})")
    return None


def available_memory(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> MemorySize | None:
    """The memory this process can still allocate, or None if it cannot be read.

    Linux: the least of ``MemAvailable`` (``/proc/meminfo``) and what every cgroup memory limit
    of this process (v1 or v2, its own and its parents') leaves. Elsewhere: ``os.sysconf``'s free
    physical memory (or, failing that, all of it). ``proc`` and ``cgroup_root`` are for tests.
    """
    found = [m for m in (_meminfo(proc), _cgroup(proc, cgroup_root)) if m is not None]
    if found:
        return min(found, key=lambda m: m.bytes)
    return _sysconf()


class TooLargeError(NormbenchError):
    """What was asked for needs more memory than this process has."""


#: read the machine (the default of :func:`check_fits`'s ``available``)
_READ = object()


def check_fits(nbytes: int, what: str, fix: str = "use a smaller --shape", *,
               available: MemorySize | None | object = _READ) -> None:
    """Raise :class:`TooLargeError` if ``nbytes`` are more than the memory available to this
    process (:func:`available_memory`, or ``available`` if given); the message says how much
    ``what`` needs, how much there is, and ``fix``. Does nothing if the memory cannot be read.

    >>> check_fits(3 << 40, "x of 10**12 floats", available=MemorySize(8 << 30, "test"))
    Traceback (most recent call last):
    normbench.core.machine.TooLargeError: x of 10**12 floats needs about 3 TiB of memory, but 8 GiB is available (test). Fix: ...
    """
    memory = available_memory() if available is _READ else available
    if isinstance(memory, MemorySize) and nbytes > memory.bytes:
        raise TooLargeError(f"{what} needs about {format_bytes(nbytes)} of memory, but {format_bytes(memory.bytes)} "
                            f"is available ({memory.source}). Fix: {fix}")


#: the bytes per element of each normbench dtype (:data:`normbench.core.dtypes.DTYPES`), without importing NumPy
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
#: float64 arrays of x's size that ``normbench check`` holds at its peak, forward and backward: the input drawn
#: in float64, the oracle's forward and VJP with their error bounds and terms, the backend's outputs as float64,
#: and the comparisons' errors and ratios. Measured on 2026-12-02 (peak RSS less a small case's, 4096x4096):
#: numpy 236, 229 and 217 bytes per element at float64, float32 and float16/bfloat16, torch 234 at float32,
#: where 9 and 4 said 88 and cases at 40-100 % of free memory passed the check and were killed (issue 45).
#: 30 and 4 hold every measured peak (236 at float32 in tests/test_bad_inputs.py) with 8-15 % to spare
CHECK_FLOAT64_COPIES = 30
#: copies of x in its own dtype: x, the untouched-input copy, the backend's x and its y
CHECK_INPUT_COPIES = 4


def check_case_bytes(shape: Sequence[int], dtype: str) -> int:
    """About the most memory ``normbench check`` takes for x of ``shape`` and ``dtype``:
    :data:`CHECK_FLOAT64_COPIES` float64 copies and :data:`CHECK_INPUT_COPIES` copies in
    ``dtype`` of every element (the oracle computes in float64).

    >>> check_case_bytes((8, 1024), "float32") == 8 * 1024 * (30 * 8 + 4 * 4)
    True
    """
    elements = 1
    for size in shape:
        elements *= int(size)
    return elements * (CHECK_FLOAT64_COPIES * 8 + CHECK_INPUT_COPIES * ITEMSIZE[dtype])
