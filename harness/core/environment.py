"""What a reader needs to reproduce a number: machine, libraries, commit, command; and how the run ended.

Read without importing heavy frameworks: library versions come from package
metadata, GPUs from ``nvidia-smi`` when it exists, torch's thread count only if
torch is already imported. Written as ``environment.json`` in the run folder,
and merged (never overwritten) when another session of the same run adds to it (``normbench run``'s
throughput session after its conformance one; a second *run* into a folder holding results is
refused, :mod:`normbench.core.run_folder`).

Its fields are :data:`ENVIRONMENT_FIELDS` (checked at load by :func:`read_environment`);
``status`` (:data:`STATUS_FIELDS`) says whether the run is ``running``, ``finished`` or was
``interrupted``, why, when, and how far it got (:func:`mark_status` writes it).

>>> env = environment(run_id="r1", command=["normbench", "run"])
>>> env["schema"], env["run_id"], env["command"]
('normbench.environment', 'r1', 'normbench run')
"""

from __future__ import annotations

import datetime
import importlib.metadata
import itertools
import json
import os
import platform
import secrets
import shlex
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normbench import __version__
from normbench.core import provenance
from normbench.core.files import write_atomic
from normbench.core.machine import cpu_model, cpu_threads, last_level_cache
from normbench.core.storage import (
    Field,
    ResultsError,
    boolean,
    check_document,
    exists,
    integer,
    list_of,
    mapping,
    nullable,
    number,
    one_of,
    read_document,
    record,
    text,
)

ENVIRONMENT = "normbench.environment"
ENVIRONMENT_FILE = "environment.json"
LIBRARIES = ("numpy", "ml_dtypes", "pandas", "pytest", "pytest-benchmark", "torch", "jax", "jaxlib", "triton")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES")

#: a run's states: ``running`` (written when it starts), ``finished``, ``interrupted`` (with the reason)
STATES = ("running", "finished", "interrupted")
#: the ``status`` record of environment.json
STATUS_FIELDS = record({"state": one_of(*STATES), "at": text(), "done": integer(0)},
                       {"reason": nullable(text()), "total": nullable(integer(0)), "rows": mapping(integer(0))})
def _thread_value(value: Any, where: str) -> None:
    if not (isinstance(value, (str, int, float)) or isinstance(value, list)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ValueError(where, "a string, a number or a list of numbers", value)


_CEILING = record({"gbps": number(low=0.0, low_open=True)},
                  {"device": text(), "median_s": number(low=0.0), "q1_s": number(low=0.0), "q3_s": number(low=0.0),
                   "n": integer(0), "buffer_bytes": integer(0), "cache_bytes": integer(0), "cache_source": text(),
                   "method": text(), "buffer_ok": boolean()})
#: environment.json, version 1: every field but ``schema`` and ``schema_version`` may be absent
ENVIRONMENT_FIELDS = record({}, {
    "run_id": text(), "started": text(), "host": text(), "command": text(), "cwd": text(), "normbench": text(),
    "git_commit": text(), "normbench_source": mapping(Field("a JSON value", lambda v, w: None)),
    "python": text(), "platform": text(), "cpu_model": text(),
    "threads": mapping(Field("a string, a number or a list of numbers", _thread_value)),
    "last_level_cache": record({}, {"bytes": nullable(integer(0)), "source": text()}),
    "gpus": list_of(mapping(text())), "libraries": mapping(text()), "ceilings": mapping(_CEILING),
    "backends": mapping(record({}, {"version": nullable(text()), "device": nullable(text())})),
    "skipped_backends": mapping(text()), "not_timed": mapping(text()), "runtime_notes": mapping(text()),
    "sessions": list_of(text()),
    "budget": record({"seconds": number(low=0.0), "tests_start_until": text()}),
    "rehearsal": boolean(),
    "counters": record({"state": one_of("measured", "not measured")}, {"reason": text(), "rows": integer(0)}),
    "status": STATUS_FIELDS,
})
_FIX = f"correct or remove that field (the file was edited or damaged), or re-run to write a new {ENVIRONMENT_FILE}"

_ISSUED = itertools.count()


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    """``20261101T150102Z-myhost-4711-0a3f``: UTC time first (ids sort by start), then the host, this
    process's id and a suffix unique to the call (a count in this process and random digits), so two
    runs never share a folder, on one machine or many, in the same second or not.

    >>> a, b = new_run_id(), new_run_id()
    >>> a != b and a[:8] == b[:8] and a[8] == "T"
    True
    """
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in socket.gethostname())[:40].strip("-_") or "host"
    return f"{stamp}-{host}-{os.getpid()}-{next(_ISSUED):x}{secrets.token_hex(2)}"


def device_name(device: str) -> str:
    """The model behind a backend's device string: the CPU model, or the GPU
    name a CUDA backend puts in parentheses (``cuda:0 (NVIDIA H100)``)."""
    if device.strip().lower().startswith("cpu"):
        return cpu_model()
    if "(" in device and device.endswith(")"):
        return device[device.index("(") + 1:-1]
    return device


def library_versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


#: what nvidia-smi is asked of each GPU; the last two need a driver of 2021 or later (asked again without them
#: where an older one refuses)
GPU_FIELDS = ("name", "driver_version", "memory.total", "clocks.max.sm", "clocks.max.mem", "pci.bus_id", "compute_cap",
              "compute_mode")


#: seconds nvidia-smi may take to answer (a hung driver keeps it waiting for ever)
GPU_QUERY_TIMEOUT_S = 20.0


def gpus() -> list[dict[str, str]]:
    """Each GPU nvidia-smi lists (name, driver, memory, clocks, compute capability and mode), with, where this
    process has imported torch and it sees CUDA, the SM count and the CUDA runtime torch was built with."""
    return gpu_query()[0]


def gpu_query() -> tuple[list[dict[str, str]], str]:
    """:func:`gpus`, and why it found none: nvidia-smi not on the PATH, not answering within
    :data:`GPU_QUERY_TIMEOUT_S`, failing (its exit status and first line), or listing none ("" when GPUs were
    found). Its output is read as UTF-8, a byte that is not replaced, never a UnicodeDecodeError."""
    found: list[dict[str, str]] = []
    why = ""
    for fields in (GPU_FIELDS, GPU_FIELDS[:-2]):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                                 capture_output=True, text=True, encoding="utf-8", errors="replace",
                                 timeout=GPU_QUERY_TIMEOUT_S)
        except FileNotFoundError:
            return [], "nvidia-smi is not on the PATH"
        except subprocess.TimeoutExpired:
            return [], f"nvidia-smi did not answer within {GPU_QUERY_TIMEOUT_S:g} s: a hung driver or GPU?"
        except (OSError, subprocess.SubprocessError) as exc:
            return [], f"nvidia-smi could not be run: {exc}"
        if out.returncode == 0:
            found = [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.stdout.splitlines()
                     if line.strip()]
            why = "" if found else "nvidia-smi lists none"
            break
        said = next((line.strip() for line in (out.stderr + out.stdout).splitlines() if line.strip()), "")
        why = f"nvidia-smi failed with exit status {out.returncode}" + (f": {said[:200]}" if said else "")
    torch = sys.modules.get("torch")
    try:
        cuda = torch is not None and torch.cuda.is_available()
        for i, gpu in enumerate(found if cuda else []):
            if i < torch.cuda.device_count():
                gpu["sm_count"] = str(torch.cuda.get_device_properties(i).multi_processor_count)
                gpu["cuda_runtime"] = str(torch.version.cuda or "")
    except Exception:  # a broken CUDA setup must not cost the run its environment record
        pass
    return found, why


def environment(run_id: str, command: Sequence[str] | None = None) -> dict[str, Any]:
    """The environment of this process, as a JSON-ready dict."""
    cache = last_level_cache()
    origin = provenance.source()
    threads: dict[str, Any] = {"cpus_usable": cpu_threads(), "cpus_total": os.cpu_count()}
    threads.update({k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ})
    if "torch" in sys.modules:
        threads["torch_threads"] = sys.modules["torch"].get_num_threads()
    if hasattr(os, "getloadavg"):  # other processes competing for the cores skew CPU timings
        threads["load_average_1_5_15min"] = [round(v, 2) for v in os.getloadavg()]
    return {
        "schema": ENVIRONMENT, "schema_version": 1, "run_id": run_id, "started": now_utc(),
        "host": socket.gethostname(), "command": shlex.join(command if command is not None else sys.argv),
        "cwd": os.getcwd(), "normbench": __version__, "git_commit": origin.commit_label(),
        "normbench_source": origin.as_dict(),
        "python": sys.version.split()[0], "platform": platform.platform(),
        "cpu_model": cpu_model(), "threads": threads,
        "last_level_cache": {"bytes": cache.bytes, "source": cache.source},
        "gpus": gpus(), "libraries": library_versions(), "ceilings": {},
    }


def backends_record(selection: Any) -> dict[str, Any]:
    """The run's backends as plain data for ``environment.json`` (a :class:`normbench.core.registry.Selection`):
    ``backends`` (name -> library version and device), ``skipped_backends`` (name -> why it did not
    run), ``not_timed`` (name -> its ``timing_note``: it ran the conformance suites only) and
    ``runtime_notes`` (name -> its ``runtime_note``: what its runtime computes differently from the device
    it stands for, e.g. the Triton interpreter).

    >>> from types import SimpleNamespace as B
    >>> triton = B(name="triton", device="interpreter", timing_note="interpreted", library_version=lambda: "3.0")
    >>> backends_record(B(backends=[triton], skipped=[("flax", "flax is not installed")]))["not_timed"]
    {'triton': 'interpreted'}
    """
    return {
        "backends": {b.name: {"version": b.library_version(), "device": b.device} for b in selection.backends},
        "skipped_backends": dict(selection.skipped),
        "not_timed": {b.name: b.timing_note for b in selection.backends if getattr(b, "timing_note", None)},
        "runtime_notes": {b.name: b.runtime_note for b in selection.backends if getattr(b, "runtime_note", None)},
    }


def _read_old(path: Path) -> dict[str, Any]:
    """The environment an earlier session wrote, or {} when there is none or it is unreadable (it is replaced)."""
    try:
        return read_environment(path)
    except ResultsError:
        return {}


def write_environment(folder: str | os.PathLike, env: dict[str, Any]) -> Path:
    """Write ``environment.json``, keeping what an earlier session of the run wrote
    (its command and start time, its status, and whatever this session does not say)
    and merging the ceilings. A folder that cannot be written is one ResultsError."""
    path = Path(folder) / ENVIRONMENT_FILE
    merged = dict(env)
    old = _read_old(path) if path.exists() else {}
    if old:
        merged = {**old, **env, **{k: old[k] for k in ("started", "command", "cwd") if k in old}}
        merged["ceilings"] = {**old.get("ceilings", {}), **env.get("ceilings", {})}
        if old.get("command") and old.get("command") != env.get("command"):
            merged["sessions"] = list(dict.fromkeys([*old.get("sessions", []), env["command"]]))
    return _write(path, merged)


def update_environment(folder: str | os.PathLike, fields: dict[str, Any]) -> Path:
    """Set top-level ``fields`` of the run's ``environment.json`` (``counters``), the rest kept."""
    path = Path(folder) / ENVIRONMENT_FILE
    return _write(path, {**read_environment(path), **fields})


def _write(path: Path, document: dict[str, Any]) -> Path:
    check_document(document, ENVIRONMENT_FIELDS, f"the environment to write to {path}", "this is a normbench bug: "
                   "please report it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, json.dumps(document, indent=1, default=str) + "\n")
    except OSError as exc:
        from normbench.core.storage import _fix_disk

        raise ResultsError(f"cannot write {path}: {exc.strerror or exc}. Fix: {_fix_disk(exc)}") from None


def read_environment(path: str | os.PathLike) -> dict[str, Any]:
    """``environment.json`` (a path to it, or its run folder), every field checked: one ResultsError
    naming the file and the field otherwise."""
    path = Path(path)
    if path.is_dir():
        path = path / ENVIRONMENT_FILE
    if not exists(path):  # a link loop or an unreadable file is a ResultsError naming it, not "no file"
        raise ResultsError(f"no {ENVIRONMENT_FILE} at {path}. Fix: give a run folder written by `normbench run`")
    return read_document(path, ENVIRONMENT, 1, ENVIRONMENT_FIELDS, _FIX)


def status_record(state: str, reason: str | None = None, done: int = 0, total: int | None = None,
                  rows: dict[str, int] | None = None) -> dict[str, Any]:
    """The ``status`` record: ``state`` (one of :data:`STATES`), ``reason`` (``"SIGTERM"``, ``"KeyboardInterrupt"``,
    ``"backend crashed"``; None when there is none), ``at`` (now, ISO 8601 UTC), ``done`` (tests or cases
    finished), ``total`` (how many there were to do; None when unknown) and, at the end of a run, ``rows``:
    how many rows the run wrote into each results file (``{"conformance": 1636}``), which the loader holds the
    files to.

    >>> status_record("interrupted", "SIGTERM", done=3, total=10)["state"]
    'interrupted'
    """
    document = {"state": state, "reason": reason, "at": now_utc(), "done": done, "total": total,
                **({} if rows is None else {"rows": rows})}
    check_document(document, STATUS_FIELDS, "the status to record", f"state is one of {', '.join(STATES)}; done and "
                   f"total are counts")
    return document


def mark_status(folder: str | os.PathLike, state: str, reason: str | None = None, done: int = 0,
                total: int | None = None, rows: dict[str, int] | None = None) -> Path:
    """Record the run's status in ``<folder>/environment.json`` (rewritten whole, the rest kept; a minimal
    document if there is none yet): :func:`status_record`'s arguments. A bad argument or a folder that
    cannot be written is one ResultsError.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = mark_status(folder, "running", total=12)
    >>> read_environment(folder)["status"]["state"]
    'running'
    """
    path = Path(folder) / ENVIRONMENT_FILE
    status = status_record(state, reason, done, total, rows)
    document = read_environment(path) if path.exists() else {"schema": ENVIRONMENT, "schema_version": 1,
                                                              "run_id": path.parent.name}
    return _write(path, {**document, "status": status})
