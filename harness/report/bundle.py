"""A run folder packed to carry back from a machine whose files are lost when its slot ends.

A GPU node lent for minutes may return at most a few files, each of limited size (:data:`MAX_FILES`,
:data:`MAX_FILE_BYTES`). :func:`write_bundle` copies what a run folder holds into one folder within those limits:
``environment.json``, the results as CSV (gzipped where larger than the limit: the loader reads ``.csv.gz``),
``report.html``, the traffic table, the counters' table (``normbench.perf.counters``), the kernel statistics
(``kernels-*.csv``), the run's log where one is given (always as ``run.log``, whatever its own name), and
``manifest.json`` (each file's size, SHA-256 and what it is; what was left out, and why).

Checked both ways. When written: every file is read back as the report reads it, and one that does not read
(or a link in the run folder, which is never followed: a bundle carries the run's own files) is left out with the
reason; the bundle is built in a hidden folder beside ``out`` and renamed into place only when whole, so a failure
leaves nothing that blocks the retry. When read (:func:`check_manifest`, by ``normbench report`` and
``normbench survey`` on any folder holding a ``manifest.json``): the manifest is valid, no file is a link, and
every file the reader uses is listed with its size and SHA-256; :func:`check_bundle` checks all of it and loads
every results file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from normbench import __version__
from normbench.core import provenance, storage
from normbench.core.files import write_atomic
from normbench.core.storage import ResultsError, integer, list_of, record, text

#: what a slot returns at most: files, and bytes per file
MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "normbench.bundle"
MANIFEST_VERSION = 1
MANIFEST_FIELDS = record({
    "run": text(),
    "files": list_of(record({"file": text(), "bytes": integer(0), "sha256": text(), "what": text()})),
    "left_out": list_of(record({"file": text(), "why": text()})),
})
RUN_LOG = "run.log"
#: what a bundle may hold, in the order it is filled (the manifest always), and what each is
WANTED = (("environment.json", "the run's environment: machine, GPU, libraries, command, status, budget"),
          ("conformance.csv", "the conformance suites' outcomes, a row per test"),
          ("throughput.csv", "the throughput suite's rows, a row per case and direction"),
          ("report.html", "the run's report, self-contained"),
          ("traffic.csv", "bytes each Triton launch moved, counted in the interpreter (normbench traffic)"),
          ("counters.csv", "DRAM bytes ncu measured for the Triton kernels, beside the counted and the byte model's"),
          (RUN_LOG, "what the run printed"))
KERNELS_WHAT = "static estimates of our Triton kernels (normbench kernel-stats)"
_FIX = "pack the run folder again (normbench bundle RUN --out NEW), or read the run folder itself"


def check_out(out: str | os.PathLike) -> Path:
    """``out`` as a bundle's folder: new, or an empty folder (a ResultsError otherwise). ``normbench run --bundle``
    asks before the run, so a used folder is said before the slot is spent, not after."""
    out = Path(out)
    if storage.exists(out) and (not out.is_dir() or any(out.iterdir())):
        raise ResultsError(f"{out} exists and is not an empty folder; a bundle is written into a new one. Fix: give "
                           f"another --out (or --bundle), or remove it")
    return out


def _sources(folder: Path, log: Path | None) -> list[tuple[str, Path, str]]:
    """(name in the bundle, where it is, what it is) for every file to pack, in the order of :data:`WANTED`."""
    found = []
    for name, what in WANTED:
        source = log if name == RUN_LOG else folder / name
        if source is None:
            continue
        if name.endswith(".csv") and not os.path.lexists(source) and os.path.lexists(folder / f"{name}.gz"):
            source = folder / f"{name}.gz"
            name = f"{name}.gz"
        if os.path.lexists(source):
            found.append((name, source, what))
    from normbench.perf.kernel_stats import KERNEL_STATS_PATTERN

    found += [(p.name, p, KERNELS_WHAT) for p in sorted(folder.glob(KERNEL_STATS_PATTERN))]
    return found


def _read_back(path: Path) -> None:
    """Read ``path`` as the report reads a file of its name (a ResultsError if it does not read)."""
    from normbench.check.outcomes import CONFORMANCE
    from normbench.core.environment import ENVIRONMENT_FILE, read_environment
    from normbench.perf.counters import COUNTERS, COUNTERS_FILE
    from normbench.perf.kernel_stats import schema_of_counts_file
    from normbench.perf.throughput import THROUGHPUT

    stem = path.name.split(".")[0]
    schema = {"conformance": CONFORMANCE, "throughput": THROUGHPUT}.get(stem)
    if path.name == ENVIRONMENT_FILE:
        read_environment(path)
    elif path.name == COUNTERS_FILE:
        storage.load(path, COUNTERS)
    elif schema is not None or schema_of_counts_file(path) is not None:
        storage.load(path, schema or schema_of_counts_file(path))


def _pack(sources: Iterable[tuple[str, Path, str]], into: Path, folder: Path) -> tuple[list[dict], list[dict]]:
    """Copy ``sources`` into ``into``: the manifest's entries, and what was left out with why."""
    entries: list[dict] = []
    left: list[dict] = []
    for name, source, what in sources:
        if source.parent == folder and os.path.islink(source):
            left.append({"file": name, "why": f"a link (to {os.readlink(source)}): a bundle carries the run folder's "
                                              f"own files, never what a link points at"})
            continue
        if len(entries) >= MAX_FILES - 1:  # the manifest is the last file
            left.append({"file": name, "why": f"a bundle holds at most {MAX_FILES} files"})
            continue
        data = storage.read_bytes(source, 1 << 34)
        target = name
        if len(data) > MAX_FILE_BYTES and not target.endswith(".gz"):
            data, target = gzip.compress(data, mtime=0), f"{target}.gz"
        if len(data) > MAX_FILE_BYTES:
            left.append({"file": name, "why": f"{len(data):,} bytes even gzipped, above {MAX_FILE_BYTES:,}"})
            continue
        write_atomic(into / target, data)
        try:
            _read_back(into / target)
        except ResultsError as exc:
            os.unlink(into / target)
            left.append({"file": name, "why": f"it does not read back: {storage.clip(str(exc))}"})
            continue
        entries.append({"file": target, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "what": what})
    return entries, left


def write_bundle(folder: str | os.PathLike, out: str | os.PathLike, log: str | os.PathLike | None = None) -> Path:
    """Pack run folder ``folder`` (and ``log``) into the new folder ``out``; returns the manifest's path. Nothing is
    left at ``out`` unless the whole bundle is."""
    folder = Path(folder)
    if not storage.exists(folder / "environment.json"):
        raise ResultsError(f"{folder} is not a run folder (no environment.json). Fix: give the folder `normbench run` "
                           f"wrote, reports/<run-id>")
    out = check_out(out)
    if log is not None and not storage.exists(log):
        raise ResultsError(f"no log at {log}. Fix: give the file the run's output went to")
    if log is not None and not Path(log).is_file():
        raise ResultsError(f"--log {log} is not a file. Fix: give the file the run's output went to")
    sources = _sources(folder, None if log is None else Path(log))
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    try:
        entries, left = _pack(sources, staging, folder)
        origin = provenance.source()
        manifest = {"schema": MANIFEST_SCHEMA, "schema_version": MANIFEST_VERSION, "run": folder.name,
                    "normbench": __version__, "git_commit": origin.commit_label(), "files": entries, "left_out": left,
                    "limits": {"files": MAX_FILES, "bytes_per_file": MAX_FILE_BYTES}}
        write_atomic(staging / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        check_manifest(staging)
        if out.is_dir():
            out.rmdir()  # empty (check_out): replaced by the whole bundle
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out / MANIFEST


def check_manifest(out: str | os.PathLike, only: Iterable[str] | None = None) -> dict:
    """The manifest of the bundle ``out``, after checking it: valid, no file in the bundle a link, every file listed
    there with its size and SHA-256, none there that is not listed, and the limits kept. ``only``: the names a reader
    uses (``normbench report``, which writes its own ``report.html`` into the folder): only those are held to the
    manifest, and a file among them that is there but not listed is refused (added after packing)."""
    out = Path(out)
    path = out / MANIFEST
    if os.path.islink(path):
        raise ResultsError(f"{path} is a link: a bundle's manifest is its own file. Fix: {_FIX}")
    manifest = storage.read_document(path, MANIFEST_SCHEMA, MANIFEST_VERSION, MANIFEST_FIELDS, _FIX)
    listed: dict[str, dict] = {}
    for entry in manifest["files"]:
        name = entry["file"]
        if name in (MANIFEST, "", ".", "..") or Path(name).name != name or name in listed:
            raise ResultsError(f"{path}: its files name {storage.quoted(name)}, which is no file of a bundle (a plain "
                               f"name, listed once, not the manifest). Fix: {_FIX}")
        listed[name] = entry
    there = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    for name in there:
        if os.path.islink(out / name):
            raise ResultsError(f"{out / name} is a link (to {os.readlink(out / name)}): a bundle holds its own files. "
                               f"Fix: {_FIX}")
    wanted = set(listed if only is None else only)
    unlisted = [name for name in there if name not in listed and (only is None or name in wanted)]
    if unlisted:
        raise ResultsError(f"{out}: {', '.join(unlisted)} {'is' if len(unlisted) == 1 else 'are'} not in its "
                           f"manifest (added after the bundle was packed?). Fix: {_FIX}")
    if only is None and len(there) + 1 > MAX_FILES:
        raise ResultsError(f"{out}: the bundle holds {len(there) + 1} files, more than {MAX_FILES}. Fix: {_FIX}")
    for name, entry in listed.items():
        if name not in wanted:
            continue
        if not storage.exists(out / name):
            raise ResultsError(f"{out / name}: listed in the manifest, but not there (lost in transit?). Fix: {_FIX}")
        data = storage.read_bytes(out / name, MAX_FILE_BYTES, _FIX)
        if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ResultsError(f"{out / name}: its size or SHA-256 is not the manifest's (damaged in transit?). "
                               f"Fix: {_FIX}")
    return manifest


def check_bundle(out: str | os.PathLike) -> dict:
    """The bundle's manifest, after checking it (:func:`check_manifest`) and loading every results file in it as the
    report does (a ResultsError otherwise)."""
    from normbench.check.outcomes import CONFORMANCE
    from normbench.perf.throughput import THROUGHPUT

    out = Path(out)
    manifest = check_manifest(out)
    for schema in (CONFORMANCE, THROUGHPUT):
        if any(storage.exists(out / f"{schema.stem}.{ext}") for ext in ("csv", "csv.gz")):
            storage.load(out, schema)  # read as the report reads it
    for entry in manifest["files"]:
        if entry["file"].split(".")[0] not in (CONFORMANCE.stem, THROUGHPUT.stem):
            _read_back(out / entry["file"])
    return manifest


def left_out_notes(manifest: dict) -> list[str]:
    """What a reader of the bundle is told about the files it does not hold."""
    return [f"The bundle left out {storage.quoted(e['file'])}: {e['why']}." for e in manifest["left_out"]]


def left_out_lines(path: str | os.PathLike) -> list[str]:
    """What the manifest at ``path`` says was left out, a line each, escaped for a terminal."""
    from normbench.core.safe_text import safe

    manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    return [safe(f"  left out: {e['file']}: {e['why']}") for e in manifest["left_out"]]
