"""What this machine has: its CPU model, the cores this process may use, the last-level cache.

Read from the operating system without importing any framework; used by the
environment record (:mod:`normbench.environment`) and the ceiling's buffer size
(:mod:`normbench.perf.roofline`).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
