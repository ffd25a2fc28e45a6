"""Measure one throughput case: verify, warm up, time, verify again, judge.

For one backend, case and direction, :meth:`ThroughputRunner.measure`

1. converts the inputs once and runs the op; its output must pass the oracle
   under the error model (else verdict ``wrong-before``, and nothing is timed);
2. warms up: the backend's optional ``warmup(x, normalized_shape, weight,
   bias, eps)`` hook, then the op ``TimingOptions.warmup`` more times, untimed;
3. times the op (:mod:`normbench.perf.timing`, cold cache by default);
4. runs the op once more: its output must be bit-identical to the verified
   one or pass the oracle again, and the inputs must be unmodified (else
   ``wrong-after``);
5. computes GB/s from the byte model (:mod:`normbench.perf.roofline`) and the median;
   above the ceiling by more than :data:`ABOVE_CEILING_MARGIN`, the ceiling is
   measured again (once per device) and, if still above, the verdict is
   ``above-ceiling``: a result faster than the device can move its bytes is
   an error (cached outputs, skipped work), never a speed.

An exception from the backend (``SystemExit``, and a ``KeyboardInterrupt`` that no signal
caused, included) is verdict ``error`` with its message. Only an
``ok`` row carries ``gbps`` and ``pct_of_ceiling``.

Example (numpy, one small case, a 64 MiB ceiling buffer)::

    >>> from normbench import get_registry
    >>> from normbench.core import cases
    >>> from normbench.perf.timing import TimingOptions
    >>> runner = ThroughputRunner(TimingOptions(min_samples=3, max_time_s=0), ceiling_bytes=64 << 20)
    >>> case = cases.Case("t", (64, 256), (256,), "float32")
    >>> row = runner.measure(get_registry().create("numpy"), case, "forward").row
    >>> row["verdict"], row["bytes"], row["gbps"] > 0
    ('ok', 133120, True)
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.check import conformance
from normbench.check.conformance import ConformanceError
from normbench.check.outcomes import CRASHED, TIMEOUT
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, shape_name
from normbench.core.environment import device_name, now_utc
from normbench.core.interrupts import backend_raised
from normbench.core.storage import Column, Schema, new_row
from normbench.perf.roofline import BYTE_MODELS, Ceiling, device_key, direction_bytes, last_level_cache, measure_ceiling
from normbench.perf.timing import Timing, TimingOptions, make_timer, ready
from normbench.perf.verify import Reference, Verifier

VERDICTS: tuple[str, ...] = ("ok", "wrong-before", "wrong-after", "above-ceiling", "error")
#: a median faster than the ceiling by more than this factor is an error. The
#: ceiling is itself a median of a noisy measurement, and a kernel at the
#: ceiling may land a few percent above it; skipping work lands far above.
ABOVE_CEILING_MARGIN = 1.10


@dataclass
class Prepared:
    """A case's inputs converted once (from copies of the reference's), and the op a timer calls."""

    #: the backend's arrays by name (``Reference.hosts``' names: x, a fused operation's residual, weight, bias, dy,
    #: dresidual_out; None for one this direction does not hand over), and any output of the backend's that the
    #: timed op is handed back (a fused backward's ``residual_out``)
    native: dict[str, Any]
    #: the forward's arguments (``Operation.arguments``), for the ``warmup`` hook
    args: tuple
    op: Callable[[], Any]
    #: the harness's copies of the outputs in :attr:`native`, taken when the backend wrote them
    written: dict[str, Any] = field(default_factory=dict)


def prepare(backend: Backend, reference: Reference, direction: str) -> Prepared:
    """The timed op of ``direction``, which does exactly what the byte model counts: the forward;
    the backward alone (its forward and autograd graph made here, untimed, through the backend's
    ``prepare_backward``; a backend that cannot separate them has its backward timed, and
    modelled, with its forward: :func:`model_direction`); or exactly one forward and one backward
    (``forward_backward``). Every operation's arguments are built from its entry (``Operation.arguments``); a fused
    operation's backward takes what its forward wrote (``residual_out``: ``Operation.backward_args_from``), so
    without a ``prepare_backward`` hook its forward runs here first, untimed."""
    case = reference.case
    norm = operations.of(case.norm)
    native = {name: None if a is None or (direction == "forward" and name in norm.cotangents)
              else backend.asarray(a.copy()) for name, a in reference.hosts.items()}
    args = norm.arguments({p: native[p] for p in norm.params if p in native}, normalized_shape=case.normalized_shape,
                          eps=case.eps)
    cotangents = tuple(native[name] for name in norm.cotangents)
    written: dict[str, Any] = {}
    if direction == "forward":
        op = lambda: norm.forward(backend, args)
    elif direction == "backward":
        prepared = norm.prepare_backward(backend, args, cotangents)
        if prepared is not None:
            op = lambda: norm.gradient_tuple(prepared())
        else:
            backward_args = _backward_arguments(backend, case, args, native, written)
            op = lambda: norm.gradient_tuple(norm.backward(backend, backward_args, cotangents))
    else:
        def op():
            y, grads = norm.forward_backward(backend, args, cotangents)
            return y, norm.gradient_tuple(grads)
    return Prepared(native, args, op, written)


def _backward_arguments(backend: Backend, case: Case, args: tuple, native: dict[str, Any],
                        written: dict[str, Any]) -> tuple:
    """The backward entry point's arguments: the forward's, or for an operation whose backward takes what its forward
    wrote (a fused one's ``residual_out``) those outputs of one untimed forward, added to ``native`` and, as the harness's
    copies, to ``written`` (the backward must not write into them either)."""
    norm = operations.of(case.norm)
    if not norm.backward_params:
        return args
    outputs = conformance.fused_outputs(backend, case, norm, norm.forward(backend, args))  # (y, residual_out), or why not
    backend.synchronize()
    for name, value in zip(norm.outputs, outputs):
        if name in norm.backward_parameters:
            native[name] = value
            written[name] = np.array(backend.to_numpy(value))
    return norm.backward_args_from(args, outputs)


def model_direction(backend: Backend, direction: str, norm: str = "layer_norm") -> str:
    """The direction whose byte model a measurement of ``direction`` is judged by: a backward that
    cannot be timed without its forward (``Backend.separates_backward``) is forward+backward's.

    >>> from normbench import get_registry
    >>> model_direction(get_registry().create("numpy"), "backward")
    'backward'
    """
    return "forward+backward" if direction == "backward" and not backend.separates_backward(norm) else direction


@dataclass
class Measurement:
    """One results row (:data:`THROUGHPUT_COLUMNS`) and the samples behind it."""

    row: dict[str, Any]
    timing: Timing | None = None

    @property
    def ok(self) -> bool:
        return self.row["verdict"] == "ok"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass
class ThroughputRunner:
    """Measures cases one after another, with one ceiling and one timer per device.

    ``ceiling_bytes`` overrides the ceiling's copy buffer (default 4x the
    last-level cache), ``flush_bytes`` the cold-cache flush's (default the
    last-level cache); ``measure_ceiling`` and ``make_timer`` may be replaced
    (tests use a fixed ceiling and a synthetic clock).
    """

    options: TimingOptions = field(default_factory=TimingOptions)
    ceiling_bytes: int | None = None
    flush_bytes: int | None = None
    seed: int = 0
    run_id: str = ""
    measure_ceiling: Callable[[str, int | None], Ceiling] = measure_ceiling
    make_timer: Callable[[str, int, bool], Any] = make_timer
    ceilings: dict[str, Ceiling] = field(default_factory=dict)
    _confirmed: set = field(default_factory=set)
    _timers: dict = field(default_factory=dict)
    _last: Reference | None = None

    def ceiling(self, device: str) -> Ceiling:
        key = device_key(device)
        if key not in self.ceilings:
            self.ceilings[key] = self.measure_ceiling(key, self.ceiling_bytes)
        return self.ceilings[key]

    def _timer(self, key: str, events: bool):
        """The timer of device ``key``; ``events``: the backend's work is on torch's stream (CUDA events see it)."""
        if (key, events) not in self._timers:
            self._timers[key, events] = self.make_timer(key, self.flush_bytes or last_level_cache().bytes, events)
        return self._timers[key, events]

    def base_row(self, backend: Backend, case: Case, direction: str) -> dict[str, Any]:
        """The row of ``case`` before it is measured: what was to be measured, where, with which byte model."""
        modelled = model_direction(backend, direction, case.norm)
        return new_row(THROUGHPUT, run_id=self.run_id, time=now_utc(), host=socket.gethostname(), device=backend.device,
                       device_name=device_name(backend.device), backend=backend.name,
                       backend_version=type(backend).library_version(), normalization=case.norm,
                       direction=direction, dtype=case.dtype,
                       param_dtype=case.params, rows=case.rows, hidden=case.hidden, shape=shape_name(case),
                       case_id=case.id, seed=self.seed, byte_model=BYTE_MODELS[modelled],
                       bytes=direction_bytes(case.rows, case.hidden, case.dtype, modelled, case.params,
                                             weight=case.affine in ("wb", "w"), bias=case.affine in ("wb", "b"),
                                             norm=case.norm, residual_dtype=case.residual_type),
                       cache=self.options.cache)

    def _reference(self, case: Case) -> Reference:
        """The reference of ``case``, reused while the same case is measured in
        another direction or on another backend (the sweep keeps them together)."""
        if self._last is None or self._last.case != case or self._last.seed != self.seed:
            self._last = None  # let the old one go first: a GPU case's oracle is gigabytes
            self._last = Reference(case, self.seed)
        return self._last

    def _warm_up(self, backend: Backend, case: Case, prepared: Prepared, sync: Callable[[Any], None]) -> None:
        """The backend's ``warmup`` hook (compilation, autotuning), then the op, untimed."""
        operations.of(case.norm).warmup(backend, prepared.args)
        for _ in range(self.options.warmup):
            sync(prepared.op())

    def measure(self, backend: Backend, case: Case, direction: str) -> Measurement:
        """Verify, time, verify again and judge one case; never raises for a backend's fault."""
        row = self.base_row(backend, case, direction)
        sync = lambda out: (backend.synchronize(), ready(out))
        stage = "wrong-before"
        try:
            reference = self._reference(case)
            prepared = prepare(backend, reference, direction)
            verifier = Verifier(backend, reference, direction, prepared.native, written=prepared.written)
            verifier.check(prepared.op())
            self._warm_up(backend, case, prepared, sync)
            ceiling = self.ceiling(backend.device)
            timing = self._timer(device_key(backend.device), backend.timed_by_cuda_events).measure(
                prepared.op, sync, self.options)
            stage = "wrong-after"
            verifier.check(prepared.op())
            verifier.check_inputs()
        except ConformanceError as exc:
            return Measurement({**row, "verdict": stage, "message": str(exc)})
        except Exception as exc:  # a backend may fail in any way; the run goes on
            return Measurement({**row, "verdict": "error", "message": _error(exc)})
        except (SystemExit, KeyboardInterrupt) as exc:  # raised by the backend, not by a signal: still its result
            if not backend_raised(exc):
                raise
            return Measurement({**row, "verdict": "error", "message": f"the backend raised {_error(exc)}"})
        return Measurement(self._judge(row, timing, ceiling, backend.device, reference.sampled), timing)

    def _judge(self, row: dict[str, Any], timing: Timing, ceiling: Ceiling, device: str,
               sampled: str = "") -> dict[str, Any]:
        row = {**row, "timer": timing.timer, "cache": timing.cache, "calls_per_sample": timing.calls_per_sample,
               **timing.statistics()}
        gbps = row["bytes"] / timing.median_s / 1e9 if timing.median_s > 0 else math.inf
        key = device_key(device)
        if gbps > ceiling.gbps * ABOVE_CEILING_MARGIN and key not in self._confirmed:
            self._confirmed.add(key)  # measure once more before calling it an error
            again = self.measure_ceiling(key, self.ceiling_bytes)
            ceiling = self.ceilings[key] = max(ceiling, again, key=lambda c: c.gbps)
        row.update(ceiling_gbps=ceiling.gbps, fits_in_cache=row["bytes"] <= ceiling.cache_bytes)
        if gbps > ceiling.gbps * ABOVE_CEILING_MARGIN:
            return {**row, "verdict": "above-ceiling", "message": (
                f"measured {gbps:.3g} GB/s, {gbps / ceiling.gbps:.2f}x the copy-bandwidth ceiling {ceiling.gbps:.3g} "
                f"GB/s: faster than the device can move the byte model's {row['bytes']} bytes, so an output is "
                f"cached or work is skipped; recorded as an error, not a speed")}
        notes = []
        if row["direction"] == "backward" and row["byte_model"] != BYTE_MODELS["backward"]:
            notes.append("timed with its forward (the backend cannot run its backward alone: no prepare_backward), "
                         "so bytes and byte model are forward-training+backward's")
        if timing.wide:
            notes.append(f"wide spread: IQR is {100 * timing.rel_spread:.0f}% of the median (a busy machine?)")
        if not ceiling.buffer_ok:
            notes.append("the ceiling's buffer was below 4x the last-level cache")
        if sampled:
            notes.append(sampled)
        return {**row, "verdict": "ok", "gbps": gbps, "pct_of_ceiling": 100 * gbps / ceiling.gbps,
                "message": "; ".join(notes)}


# -- the throughput results schema: one row per (backend, case, direction), written by ThroughputRunner -----------

#: no device moves a petabyte per second: a larger speed is a broken row
MAX_GBPS = 1e6
#: a correct row stays near its ceiling (ABOVE_CEILING_MARGIN); far above is broken
MAX_PERCENT = 1e6
SECONDS: dict[str, Any] = {"low": 0.0, "high": 1e6}
SPEED: dict[str, Any] = {"low": 0.0, "high": MAX_GBPS}

#: a throughput row's verdicts: only ``ok`` is a speed
VERDICTS = ("ok", "wrong-before", "wrong-after", "above-ceiling", "error", CRASHED, TIMEOUT)

#: the throughput schema's columns
THROUGHPUT_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (2)"),
    Column("run_id", "str", "the run this row belongs to (also the folder name)"),
    Column("time", "str", "when the row was measured, ISO 8601 UTC"),
    Column("host", "str", "the machine's host name"),
    Column("device", "str", "where the backend computed, as it reports it (e.g. cpu, cuda:0 (NVIDIA H100))"),
    Column("device_name", "str", "the CPU or GPU model"),
    Column("backend", "str", "the backend name (--impl)"),
    Column("backend_version", "str", "the version of the library it wraps"),
    Column("normalization", "str", "the operation: layer_norm, rms_norm, or one with the residual add fused in, "
                                   "add_layer_norm or add_rms_norm (normbench.core.operations; docs/fused.md). Version 2",
           choices=operations.NAMES),
    Column("direction", "str", "forward, backward or forward+backward"),
    Column("dtype", "str", "the dtype of x, y, dy and dx (a fused operation's residual stream has x's dtype unless "
                           "its case_id says otherwise: residualfloat32)"),
    Column("param_dtype", "str", "the dtype of weight and bias"),
    Column("rows", "int", "M, the number of rows", low=1),
    Column("hidden", "int", "N, the normalized size", low=1),
    Column("shape", "str", "x's shape, ROWSxHIDDEN"),
    Column("case_id", "str", "the normbench.core.cases id of the case"),
    Column("seed", "int", "the seed of the inputs (normbench.core.cases.make_inputs)", low=0),
    Column("byte_model", "str", "forward-inference, backward or forward-training+backward (normbench.perf.roofline)"),
    Column("bytes", "int", "the bytes the byte model says the direction must move", low=1),
    Column("cache", "str", "cold (last-level cache flushed before every sample) or warm"),
    Column("timer", "str", "perf_counter_ns or cuda-events"),
    Column("calls_per_sample", "int", "calls averaged in one sample (1 with a cold cache)", low=0),
    Column("n", "int", "the number of samples", low=0),
    Column("median_s", "float", "median seconds per call", **SECONDS),
    Column("q1_s", "float", "first quartile, seconds", **SECONDS),
    Column("q3_s", "float", "third quartile, seconds", **SECONDS),
    Column("iqr_s", "float", "interquartile range, seconds", **SECONDS),
    Column("min_s", "float", "fastest sample, seconds", **SECONDS),
    Column("max_s", "float", "slowest sample, seconds", **SECONDS),
    Column("rel_spread", "float", "IQR / median", low=0.0, infinite_is_empty=True),
    Column("wide_spread", "bool", "rel_spread above normbench.perf.timing.WIDE_SPREAD: read the speed with care"),
    Column("gbps", "float", "bytes / median / 1e9; empty unless verdict is ok", **SPEED),
    Column("ceiling_gbps", "float", "the device's copy bandwidth measured in this run", low=0.0,
           low_open=True, high=MAX_GBPS),
    Column("pct_of_ceiling", "float", "100 * gbps / ceiling_gbps; empty unless verdict is ok", low=0.0,
           high=MAX_PERCENT),
    Column("fits_in_cache", "bool", "bytes <= the last-level cache: cold timing matters most here"),
    Column("verdict", "str", "ok, wrong-before, wrong-after, above-ceiling or error (normbench.perf.throughput); "
                             "crashed or timeout when the case's process died or ran out of time", choices=VERDICTS),
    Column("message", "str", "why the verdict is not ok, and any note on an ok row"),
)



def _ok_row_is_a_speed(row: dict[str, Any]) -> str | None:
    if row["verdict"] != "ok":
        return None
    for name in ("gbps", "median_s", "ceiling_gbps", "pct_of_ceiling"):
        if row[name] is None or not row[name] > 0:
            return f"a row with verdict ok needs {name} > 0 (got {'empty' if row[name] is None else repr(row[name])})"
    return None


#: the throughput schema's version: 2 added ``normalization`` (RMSNorm); version 1 files are migrated as LayerNorm's,
#: the only normalization normbench measured then
THROUGHPUT_VERSION = 2
THROUGHPUT = Schema("normbench.throughput", THROUGHPUT_VERSION, "throughput", THROUGHPUT_COLUMNS,
                    rules=(_ok_row_is_a_speed,), migrations={1: lambda df: df.assign(normalization="layer_norm")})
