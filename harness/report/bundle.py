"""A run folder packed to carry back from a machine whose files are lost when its slot ends.

A GPU node lent for minutes may return at most a few files, each of limited size (:data:`MAX_FILES`,
:data:`MAX_FILE_BYTES`). :func:`write_bundle` copies what a run folder holds into one folder within those limits:
``environment.json``, the results as CSV (gzipped where larger than the limit: the loader reads ``.csv.gz``),
``report.html``, the traffic table, the counters' table (``normbench.perf.counters``), the run's log where one is given, and
``manifest.json`` (each file's size, SHA-256 and what it is; what was left out, and why). The bundle is then
read back with the loader (every results file valid, or the bundle is refused), so what travels is a run folder
``normbench report`` renders as it is.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from normbench import __version__
from normbench.core import provenance, storage
from normbench.core.files import write_atomic
from normbench.core.storage import ResultsError

#: what a slot returns at most: files, and bytes per file
MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20
MANIFEST = "manifest.json"
#: what a bundle may hold, in the order it is filled (the manifest always), and what each is
WANTED = (("environment.json", "the run's environment: machine, GPU, libraries, command, status, budget"),
          ("conformance.csv", "the conformance suites' outcomes, a row per test"),
          ("throughput.csv", "the throughput suite's rows, a row per case and direction"),
          ("report.html", "the run's report, self-contained"),
          ("traffic.csv", "bytes each Triton launch moved, counted in the interpreter (normbench traffic)"),
          ("counters.csv", "DRAM bytes ncu measured for the Triton kernels, beside the counted and the byte model's"),
          ("run.log", "what the run printed"))


def write_bundle(folder: str | os.PathLike, out: str | os.PathLike, log: str | os.PathLike | None = None) -> Path:
    """Pack run folder ``folder`` (and ``log``) into the new folder ``out``; returns the manifest's path."""
    folder, out = Path(folder), Path(out)
    if not storage.exists(folder / "environment.json"):
        raise ResultsError(f"{folder} is not a run folder (no environment.json). Fix: give the folder `normbench run` "
                           f"wrote, reports/<run-id>")
    if storage.exists(out) and (not out.is_dir() or any(out.iterdir())):
        raise ResultsError(f"{out} exists and is not an empty folder; a bundle is written into a new one. Fix: give "
                           f"another --out")
    sources = {name: folder / name for name, _ in WANTED if name != "run.log"}
    for name in ("conformance.csv", "throughput.csv"):
        if not storage.exists(sources[name]) and storage.exists(folder / f"{name}.gz"):
            sources[name] = folder / f"{name}.gz"
    if log is not None:
        if not storage.exists(log):
            raise ResultsError(f"no log at {log}. Fix: give the file the run's output went to")
        sources["run.log"] = Path(log)
    kernels = sorted(folder.glob("kernels-*.csv"))
    out.mkdir(parents=True, exist_ok=True)
    entries, left = [], []
    what = dict(WANTED)
    for name, source in [*sources.items(), *((p.name, p) for p in kernels)]:
        if not storage.exists(source):
            continue
        if len(entries) >= MAX_FILES - 1:  # the manifest is the last file
            left.append({"file": name, "why": f"a bundle holds at most {MAX_FILES} files"})
            continue
        data = storage.read_bytes(source, 1 << 34)
        target = source.name
        if len(data) > MAX_FILE_BYTES and not target.endswith(".gz"):
            data, target = gzip.compress(data, mtime=0), f"{target}.gz"
        if len(data) > MAX_FILE_BYTES:
            left.append({"file": name, "why": f"{len(data):,} bytes even gzipped, above {MAX_FILE_BYTES:,}"})
            continue
        write_atomic(out / target, data)
        entries.append({"file": target, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "what": what.get(name.removesuffix(".gz"), "kernel statistics of our Triton kernels")})
    origin = provenance.source()
    manifest = {"schema": "normbench.bundle", "schema_version": 1, "run": folder.name,
                "normbench": __version__, "git_commit": origin.commit_label(), "files": entries, "left_out": left,
                "limits": {"files": MAX_FILES, "bytes_per_file": MAX_FILE_BYTES}}
    path = write_atomic(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    check_bundle(out)
    return path


def check_bundle(out: str | os.PathLike) -> dict:
    """The bundle's manifest, after checking it: the limits kept, every file there with its size and SHA-256, and
    every results file valid to the loader (a ResultsError otherwise)."""
    from normbench.check.outcomes import CONFORMANCE
    from normbench.perf.counters import COUNTERS, COUNTERS_FILE
    from normbench.perf.throughput import THROUGHPUT

    out = Path(out)
    manifest = json.loads(storage.read_bytes(out / MANIFEST, MAX_FILE_BYTES))
    files = sorted(p.name for p in out.iterdir())
    listed = sorted([e["file"] for e in manifest["files"]] + [MANIFEST])
    if files != listed or len(files) > MAX_FILES:
        raise ResultsError(f"{out}: the bundle holds {files}, its manifest lists {listed} (at most {MAX_FILES})")
    for entry in manifest["files"]:
        data = storage.read_bytes(out / entry["file"], MAX_FILE_BYTES)
        if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ResultsError(f"{out / entry['file']}: its size or SHA-256 is not the manifest's (damaged in transit?)")
    for schema in (CONFORMANCE, THROUGHPUT):
        if any(storage.exists(out / f"{schema.stem}.{ext}") for ext in ("csv", "csv.gz")):
            storage.load(out, schema)  # read as the report reads it
    if storage.exists(out / COUNTERS_FILE):
        storage.load(out / COUNTERS_FILE, COUNTERS)
    return manifest
