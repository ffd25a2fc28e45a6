"""What a reader needs to reproduce a number: machine, libraries, commit, command.

Read without importing heavy frameworks: library versions come from package
metadata, GPUs from ``nvidia-smi`` when it exists, torch's thread count only if
torch is already imported. Written as ``environment.json`` in the run folder,
and merged (never overwritten) when a second session adds to the same run.

>>> env = environment(run_id="r1", command=["normbench", "run"])
>>> env["schema"], env["run_id"], env["command"]
('normbench.environment', 'r1', 'normbench run')
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normbench import __version__, provenance
from normbench.files import write_atomic
from normbench.machine import cpu_model, cpu_threads, last_level_cache

ENVIRONMENT = "normbench.environment"
LIBRARIES = ("numpy", "ml_dtypes", "pandas", "pytest", "pytest-benchmark", "torch", "jax", "jaxlib", "triton")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES")


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    """``20261101T150102Z-hostname``: sortable, and unique per machine and second."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in socket.gethostname())[:40] or "host"
    return f"{stamp}-{host}"


def device_name(device: str) -> str:
    """The model behind a backend's device string: the CPU model, or the GPU
    name a CUDA backend puts in parentheses (``cuda:0 (NVIDIA H100)``)."""
    if device.strip().lower().startswith("cpu"):
        return cpu_model()
    if "(" in device and device.endswith(")"):
        return device[device.index("(") + 1:-1]
    return device


def _versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def _gpus() -> list[dict[str, str]]:
    fields = ("name", "driver_version", "memory.total", "clocks.max.sm", "clocks.max.mem", "pci.bus_id")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.stdout.splitlines() if line.strip()]


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
        "gpus": _gpus(), "libraries": _versions(), "ceilings": {},
    }


def backends_record(selection: Any) -> dict[str, Any]:
    """The run's backends as plain data for ``environment.json`` (a :class:`normbench.registry.Selection`):
    ``backends`` (name -> library version and device), ``skipped_backends`` (name -> why it did not
    run) and ``not_timed`` (name -> its ``timing_note``: it ran the conformance suites only).

    >>> from types import SimpleNamespace as B
    >>> triton = B(name="triton", device="interpreter", timing_note="interpreted", library_version=lambda: "3.0")
    >>> backends_record(B(backends=[triton], skipped=[("flax", "flax is not installed")]))["not_timed"]
    {'triton': 'interpreted'}
    """
    return {
        "backends": {b.name: {"version": b.library_version(), "device": b.device} for b in selection.backends},
        "skipped_backends": dict(selection.skipped),
        "not_timed": {b.name: b.timing_note for b in selection.backends if getattr(b, "timing_note", None)},
    }


def write_environment(folder: str | os.PathLike, env: dict[str, Any]) -> Path:
    """Write ``environment.json``, keeping what an earlier session of the run wrote
    (its command and start time, and whatever this session does not say) and merging
    the ceilings."""
    path = Path(folder) / "environment.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = dict(env)
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
        merged = {**old, **env, **{k: old[k] for k in ("started", "command", "cwd") if k in old}}
        merged["ceilings"] = {**old.get("ceilings", {}), **env.get("ceilings", {})}
        if old.get("command") and old.get("command") != env.get("command"):
            merged["sessions"] = list(dict.fromkeys([*old.get("sessions", []), env["command"]]))
    return write_atomic(path, json.dumps(merged, indent=1, default=str) + "\n")
