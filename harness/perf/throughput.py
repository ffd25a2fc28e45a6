"""Measure one throughput case: verify, warm up, time, verify again, judge, every call made the same way.

For one backend, case and direction, :meth:`ThroughputRunner.measure`

1. runs the backend's optional ``warmup(x, normalized_shape, weight, bias, eps)`` hook (compilation, autotuning);
2. makes every call of the op through one call site (:class:`normbench.perf.timing.Calls`): the first, whose
   output must pass the oracle under the error model (else verdict ``wrong-before``, and nothing is timed), then
   ``TimingOptions.warmup`` calls, the timed samples (cold cache by default) and one final call, whose output must
   pass again and whose inputs must be unmodified (else ``wrong-after``). Before every call but the first, outside
   its sample, its inputs are the case's rows in an order drawn from the OS's entropy (:class:`Judged`): no cache
   keyed on the arrays, their shape or their contents answers it. After a call, outside its sample, the
   judge decides at random whether to verify it (:data:`JUDGED_PER_CASE`), so a backend cannot tell a timed call
   from a judged one; each judged output is a copy, of the backend's own array type, sharing no memory with
   anything it must not (:mod:`normbench.perf.verify`), judged against its own inputs;
3. after the loop: the clocks are the ones normbench started with, the verifier's functions too
   (:func:`tampering`), the samples agreed with the second clock (:class:`normbench.perf.timing.ClockError`), and
   ``to_numpy`` of the outputs took no longer than of a plain array of the same shape by more than the op itself
   (work deferred into the conversion, outside the timed call): else verdict ``error``, naming what;
4. computes GB/s from the byte model (:mod:`normbench.perf.roofline`) and the median;
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
import secrets
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
from normbench.core.interrupts import backend_raised, pytest_outcome
from normbench.core.storage import Column, Schema, new_row
from normbench.perf import timing as timing_module
from normbench.perf.roofline import BYTE_MODELS, Ceiling, device_key, direction_bytes, last_level_cache, measure_ceiling
from normbench.perf.timing import Calls, ClockError, Timing, TimingOptions, make_timer, ready
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


def prepare(backend: Backend, reference: Reference, direction: str, order: np.ndarray | None = None,
            writable: bool = False) -> Prepared:
    """The timed op of ``direction``, which does exactly what the byte model counts: the forward;
    the backward alone (its forward and autograd graph made here, untimed, through the backend's
    ``prepare_backward``; a backend that cannot separate them has its backward timed, and
    modelled, with its forward: :func:`model_direction`); or exactly one forward and one backward
    (``forward_backward``). Every operation's arguments are built from its entry (``Operation.arguments``); a fused
    operation's backward takes what its forward wrote (``residual_out``: ``Operation.backward_args_from``), so
    without a ``prepare_backward`` hook its forward runs here first, untimed. ``order``: the case's rows in that
    order (:meth:`normbench.perf.verify.Reference.reordered`). A NumPy array handed over is read-only (unless
    ``writable``: the diagnosis of a write, :func:`_written_input`): a backend that writes into its input fails at the
    write, even where it would undo the write before returning."""
    case = reference.case
    norm = operations.of(case.norm)
    hosts, own = reference.reordered(order), reference.hosts  # reordered rows are new arrays; the reference's own
    protect = (lambda n: n) if writable else conformance.read_only  # arrays (all, or weight and bias) are copied
    native = {name: None if a is None or (direction == "forward" and name in norm.cotangents)
              else protect(backend.asarray(a.copy() if a is own[name] else a)) for name, a in hosts.items()}
    args = case.arguments(native)
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


#: a case verified on every row (every CPU sweep case) has every call judged; a larger one (every GPU sweep case:
#: its outputs are gigabytes) has the first and the last, and call t after the first with probability
#: min(1, JUDGED_PER_CASE / t), drawn after it returned: about JUDGED_PER_CASE * (1 + ln n) of n calls, no call ever
#: safe (a backend wrong on a fraction f of them escapes with probability about n ** -(JUDGED_PER_CASE * f))
JUDGED_PER_CASE = 2
#: work deferred into ``to_numpy`` is refused where a judged output's conversion exceeds a plain array's by more
#: than this many times the timed median, and by :data:`DEFERRED_SLACK_S`
DEFERRED_FACTOR = 2.0
DEFERRED_SLACK_S = 5e-3


class Judged:
    """The calls of one measurement (:class:`normbench.perf.timing.Calls`): before each call but the first, new
    inputs (the case's rows in a secret order, :meth:`Reference.draw_order`); after each, outside its
    sample, the judgement: every call of a case verified on every row; of a larger one the first and the last, every
    other with probability ``min(1, JUDGED_PER_CASE / t)``, drawn when it has returned. :attr:`stage` says which kind
    of call failed."""

    def __init__(self, backend: Backend, reference: Reference, direction: str, options: TimingOptions) -> None:
        self.backend, self.reference, self.direction = backend, reference, direction
        self.random = secrets.SystemRandom()
        self.verifier = Verifier(backend, reference, direction)
        self.order = None
        self.prepared = prepare(backend, reference, direction)
        self.plan = Calls(self.before, self.after, leading=1 + options.warmup, trailing=1)
        self.stage = "wrong-before"
        self.judged = 0

    def op(self) -> Any:
        """The call: the op of the current inputs (one call site for every call)."""
        return self.prepared.op()

    def before(self, index: int) -> None:
        if index:
            self.order = self.reference.draw_order()
            self.prepared = None  # the last inputs go first: a GPU case's are gigabytes
            self.prepared = prepare(self.backend, self.reference, self.direction, self.order)

    def after(self, index: int, outputs: Any) -> None:
        last = self.plan.made > self.plan.leading and self.plan.trailing_now
        every = self.reference.rows is None
        if not (every or index == 0 or last or self.random.random() < JUDGED_PER_CASE / index):
            return
        self.stage = "wrong-before" if index == 0 else "wrong-after"
        what = ("the first call (verified before timing)" if index == 0 else "the last call (after timing)" if last
                else f"call {index} (a warm-up or timed call, judged after it returned)")
        try:
            self.verifier.check(outputs, self.prepared.native, self.prepared.written, self.order, every_row=last)
            self.verifier.check_inputs(self.prepared.native, self.prepared.written, self.order)
        except ConformanceError as exc:
            reordered = (" (its inputs: the case's rows reordered at random; the rows named here are the case's)"
                         if self.order is not None else "")
            raise ConformanceError(f"{what}{reordered}: {exc}") from None
        self.judged += 1

    def deferred_work(self, median_s: float) -> str | None:
        """Work the op left to ``to_numpy`` (outside its timed call), or None: bringing every judged call's outputs
        to the host (``to_numpy`` and a copy) took longer than bringing plain arrays of theirs, made by the backend's
        own ``asarray``, by more than :data:`DEFERRED_FACTOR` times the op's median (and :data:`DEFERRED_SLACK_S`)."""
        conversions = self.verifier.conversions
        if not conversions or not self.verifier.verified:
            return None
        natives = [self.backend.asarray(np.array(a)) for a in self.verifier.verified if a is not None]
        plain = []
        for _ in range(3):  # the least of three: a busy machine only slows a conversion down
            started = timing_module._perf_counter()
            for native in natives:
                np.array(self.backend.to_numpy(native), copy=True)
            plain.append(timing_module._perf_counter() - started)
        excess = min(conversions) - min(plain)
        if excess > DEFERRED_FACTOR * median_s + DEFERRED_SLACK_S:
            return (f"to_numpy of the outputs took {min(conversions):.3g} s at the least over {len(conversions)} judged "
                    f"calls, {excess:.3g} s more than of plain arrays of their shapes, while the op itself took "
                    f"{median_s:.3g} s: work deferred into the conversion, outside the timed call")
        return None


#: what the judge relies on that a backend in the same process could replace: each must be what it was when
#: normbench started (``tampering``)
def _judges() -> dict[str, Any]:
    from normbench.check import worst

    return {"Verifier.check": Verifier.check, "Verifier.every_row": Verifier.every_row,
            "Verifier.check_inputs": Verifier.check_inputs, "conformance.host_array": conformance.host_array,
            "conformance.check_forward_values": conformance.check_forward_values,
            "worst.worst_violation": worst.worst_violation, "ThroughputRunner.measure": ThroughputRunner.measure,
            "Judged.after": Judged.after}


def tampering(captured: dict[str, Any]) -> str | None:
    """What a backend replaced of the clocks (:func:`normbench.perf.timing.clock_tampering`) or of the judge's own
    functions since ``captured`` (:func:`_judges` when the runner was made), or None."""
    clocks = timing_module.clock_tampering()
    if clocks:
        return clocks
    for name, function in _judges().items():
        if captured.get(name) is not function:
            return f"normbench's {name} was replaced after normbench started"
    return None


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


def _written_input(backend: Backend, reference: Reference, direction: str, error: str) -> str:
    """The failure of a backend whose write into a read-only input failed (``error``, NumPy's words): one call more on
    writable copies names the input it writes, as the conformance checks do (``Handover.call``)."""
    said = f"handed read-only, the write failed where it was made ({error})"
    try:
        prepared = prepare(backend, reference, direction, writable=True)
        prepared.op()
        backend.synchronize()
        Verifier(backend, reference, direction).check_inputs(prepared.native, prepared.written)
    except ConformanceError as named:
        return f"{named}; {said}"
    except Exception:  # it fails otherwise on writable copies: the write is what it did first
        pass
    return (f"{backend.name} {reference.case.id}: the {direction} wrote into an input it was handed, and undid the "
            f"write before returning; {said}. A backend must not write into its arguments")


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
    #: the judge's functions as they were when the runner was made (:func:`tampering`)
    _judges: dict = field(default_factory=lambda: _judges())
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

    def measure(self, backend: Backend, case: Case, direction: str) -> Measurement:
        """Verify, time, verify again and judge one case, every call made the same way (the module doc); never
        raises for a backend's fault."""
        row = self.base_row(backend, case, direction)
        sync = lambda out: (backend.synchronize(), ready(out))
        judged = None
        try:
            reference = self._reference(case)
            judged = Judged(backend, reference, direction, self.options)
            operations.of(case.norm).warmup(backend, judged.prepared.args)
            ceiling = self.ceiling(backend.device)
            timing = self._timer(device_key(backend.device), backend.timed_by_cuda_events).measure(
                judged.op, sync, self.options, judged.plan)
            refused = tampering(self._judges) or judged.deferred_work(timing.median_s)
            if refused:
                return Measurement({**row, "verdict": "error", "message": f"refused: {refused}"})
        except ConformanceError as exc:
            return Measurement({**row, "verdict": judged.stage if judged else "wrong-before", "message": str(exc)})
        except ClockError as exc:
            return Measurement({**row, "verdict": "error", "message": f"refused: {tampering(self._judges) or exc}"})
        except Exception as exc:  # a backend may fail in any way; the run goes on
            if conformance.wrote_read_only(exc) and judged is not None:
                return Measurement({**row, "verdict": judged.stage,
                                    "message": _written_input(backend, judged.reference, direction, str(exc))})
            return Measurement({**row, "verdict": "error", "message": _error(exc)})
        except (SystemExit, KeyboardInterrupt) as exc:  # raised by the backend, not by a signal: still its result
            if not backend_raised(exc):
                raise
            return Measurement({**row, "verdict": "error", "message": f"the backend raised {_error(exc)}"})
        except BaseException as exc:  # pytest.skip()/xfail() from inside a call: the backend deciding its verdict
            decided = pytest_outcome(exc)
            if not decided:
                raise
            return Measurement({**row, "verdict": "error",
                                "message": f"the backend called {decided}() inside its call ({_error(exc)}): what it "
                                           f"cannot run is said through its operations, dtypes and limits, before "
                                           f"the call"})
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
        notes += list(timing.notes)
        if timing.flat:
            notes.append(f"flagged: an IQR of exactly 0 over {timing.n} samples (a clock that does not tick, or a time "
                         f"that does not depend on the work)")
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
