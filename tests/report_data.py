"""Synthetic run folders for the report tests: written through normbench.core.storage like a real run.

Speeds come from a simple formula (nothing here claims to be a measurement);
``hostile`` names a backend, a host and messages with markup, to prove that
everything is escaped.
"""

from __future__ import annotations

import json
from pathlib import Path

from normbench.check import outcomes
from normbench.core import storage
from normbench.perf.roofline import BYTE_MODELS, direction_bytes
from normbench.perf.throughput import THROUGHPUT

HOSTILE = "<script>alert(1)</script>"
HIDDENS = (256, 2048, 16384)


def throughput_rows(run_id: str, backends: dict[str, float], ceiling: float = 20.0, host: str = "ci",
                    errors: tuple[str, ...] = ()) -> list[dict]:
    """Rows for each backend (name -> fraction of the ceiling), forward and backward, float32,
    and error rows for the backends in ``errors``."""
    rows = []
    for direction in ("forward", "backward"):
        for hidden in HIDDENS:
            m = (1 << 22) // hidden
            nbytes = direction_bytes(m, hidden, "float32", direction)
            common = dict(run_id=run_id, host=host, device="cpu", device_name="Test CPU", direction=direction,
                          dtype="float32", param_dtype="float32", rows=m, hidden=hidden, shape=f"{m}x{hidden}",
                          byte_model=BYTE_MODELS[direction], bytes=nbytes, ceiling_gbps=ceiling, seed=0, n=10)
            for name, fraction in backends.items():
                gbps = ceiling * fraction * (1 + hidden / 65536)
                median = nbytes / gbps / 1e9
                rows.append(storage.new_row(THROUGHPUT, backend=name, backend_version="1.0", median_s=median, min_s=median,
                                            q1_s=median, q3_s=median, iqr_s=0.0, rel_spread=0.0, gbps=gbps,
                                            pct_of_ceiling=100 * gbps / ceiling, verdict="ok", **common))
            for name in errors:
                rows.append(storage.new_row(THROUGHPUT, backend=name, verdict="error", message=f"RuntimeError: {HOSTILE}",
                                            **common))
    return rows


def conformance_rows(run_id: str, backends: list[str]) -> list[dict]:
    """A pass, a failure with a diagnosis, a known deviation and a skip per backend."""
    rows = []
    for name in backends:
        for case, outcome, message in (
                ("float32-rows5-hidden31-offset3", "passed", ""),
                ("float16-rows5-hidden32-offset3", "failed", f"y[4, 5] = 1.5, float64 reference 1.6 > bound {HOSTILE}"),
                ("float64-rows5-hidden1-offset3", "xfailed", "known: fp16 accumulation"),
                ("float64-rows5-hidden2-offset3", "skipped", "float64 not supported")):
            rows.append(storage.new_row(outcomes.CONFORMANCE, run_id=run_id, backend=name, suite="test_forward.py",
                                        test="test_forward", case=case, outcome=outcome, message=message,
                                        nodeid=f"suites/test_forward.py::test_forward[{name}-{case}]"))
    return rows


def environment(run_id: str, host: str = "ci") -> dict:
    return {"schema": "normbench.environment", "schema_version": 1, "run_id": run_id, "host": host,
            "command": f"normbench run --impl=numpy,torch {HOSTILE}", "cpu_model": "Test CPU", "gpus": [],
            "libraries": {"numpy": "2.0"}, "ceilings": {"cpu": {"gbps": 20.0, "method": "numpy.copyto",
                                                                "buffer_bytes": 1 << 30, "n": 20}}}


def write_run(folder: Path, run_id: str, backends: dict[str, float], *, host: str = "ci",
              errors: tuple[str, ...] = (), throughput: bool = True, conformance: bool = True,
              env: bool = True) -> Path:
    """A run folder like ``normbench run`` writes (any part may be left out)."""
    folder.mkdir(parents=True, exist_ok=True)
    if throughput:
        storage.save(folder, storage.frame(throughput_rows(run_id, backends, host=host, errors=errors), THROUGHPUT), THROUGHPUT)
    if conformance:
        rows = conformance_rows(run_id, list(backends) + list(errors))
        storage.save(folder, storage.frame(rows, outcomes.CONFORMANCE), outcomes.CONFORMANCE)
    if env:
        (folder / "environment.json").write_text(json.dumps(environment(run_id, host)))
    return folder
