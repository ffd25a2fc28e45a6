"""Plain-text output: a table of rows, and throughput summaries (a progress line per case, a table per run).

>>> row = {"backend": "numpy", "direction": "forward", "dtype": "float32", "shape": "64x256", "verdict": "ok",
...        "gbps": 2.5, "pct_of_ceiling": 12.5, "ceiling_gbps": 20.0, "n": 10, "rel_spread": 0.04,
...        "wide_spread": False, "median_s": 1e-4, "message": ""}
>>> progress_line(row, 1, 3)
'[1/3] numpy forward float32 64x256: 2.5 GB/s, 12.5% of 20 GB/s (median 100 us, n=10, IQR 4%)'
>>> progress_line({**row, "normalization": "rms_norm"}, 2, 3).split(":")[0]
'[2/3] numpy RMSNorm forward float32 64x256'
>>> progress_line({**row, "normalization": "add_rms_norm"}, 3, 3).split(":")[0]
'[3/3] numpy Add+RMSNorm forward float32 64x256'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from normbench.core import operations


def _seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def progress_line(row: dict[str, Any], index: int, total: int) -> str:
    """One line per measured case, for long sweeps."""
    normalization = row.get("normalization") or "layer_norm"  # LayerNorm's lines as they always were
    norm = "" if normalization == "layer_norm" else f" {operations.of(normalization).label}"
    where = f"[{index}/{total or '?'}] {row['backend']}{norm} {row['direction']} {row['dtype']} {row['shape']}"
    if row["verdict"] != "ok":
        first = (row.get("message") or "").splitlines()[:1]
        return f"{where}: {row['verdict'].upper()}: {first[0] if first else ''}"
    wide = ", WIDE SPREAD" if row["wide_spread"] else ""
    return (f"{where}: {row['gbps']:.3g} GB/s, {row['pct_of_ceiling']:.1f}% of {row['ceiling_gbps']:.3g} GB/s "
            f"(median {_seconds(row['median_s'])}, n={row['n']}, IQR {100 * row['rel_spread']:.0f}%{wide})")


def table(rows: list[list[str]]) -> str:
    """Rows of cells (the first one the header) as plain text: each column padded to its
    widest cell, two spaces between columns, no trailing spaces.

    >>> print(table([["backend", "ok"], ["numpy", "yes"], ["torch", "no: not installed"]]))
    backend  ok
    numpy    yes
    torch    no: not installed
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def throughput_table(rows: Any) -> str:
    """Per backend x direction x dtype: cases ok, GB/s and % of ceiling (median
    over shapes, with the range), and how many had a wide spread."""
    import pandas as pd

    from normbench.perf.roofline import DIRECTIONS

    df = pd.DataFrame(rows) if not isinstance(rows, pd.DataFrame) else rows
    if df.empty:
        return "no throughput case ran"
    order = {d: i for i, d in enumerate(DIRECTIONS)}
    cells = [["backend", "direction", "dtype", "ok", "GB/s median (range)", "% of ceiling (range)", "wide", "not ok"]]
    keys = sorted(df.groupby(["backend", "direction", "dtype"]).groups, key=lambda k: (k[0], order.get(k[1], 9), k[2]))
    for backend, direction, dtype in keys:
        part = df[(df.backend == backend) & (df.direction == direction) & (df.dtype == dtype)]
        ok = part[part.verdict == "ok"]
        bad = ", ".join(f"{v} {n}" for v, n in part[part.verdict != "ok"].verdict.value_counts().items())
        if ok.empty:
            speed = pct = "-"
        else:
            speed = f"{ok.gbps.median():.3g} ({ok.gbps.min():.3g}-{ok.gbps.max():.3g})"
            pct = f"{ok.pct_of_ceiling.median():.1f} ({ok.pct_of_ceiling.min():.1f}-{ok.pct_of_ceiling.max():.1f})"
        cells.append([backend, direction, dtype, f"{len(ok)}/{len(part)}", speed, pct,
                      str(int(ok.wide_spread.sum())), bad or "-"])
    return table(cells)


def ceiling_lines(ceilings: Iterable[Any]) -> list[str]:
    """``ceiling cpu: 39.7 GB/s (...)`` for each measured ceiling (Ceiling objects or their dicts)."""
    from normbench.perf.roofline import Ceiling

    lines = []
    for c in ceilings:
        if isinstance(c, dict):
            c = Ceiling(**{k: v for k, v in c.items() if k != "buffer_ok"})
        lines.append(f"ceiling {c.describe()}")
    return lines
