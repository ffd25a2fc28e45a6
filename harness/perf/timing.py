"""Device-aware timers: warm-up, cold caches, many samples, honest statistics.

A timer measures an ``op`` (a zero-argument callable that launches the work
and returns its outputs) and returns a :class:`Timing`, one sample per call:

* CPU (:class:`HostTimer`): ``time.perf_counter_ns`` around each call and
  the backend's synchronize (JAX dispatches asynchronously; its arrays are
  also waited on with ``block_until_ready``).
* CUDA (:class:`CudaEventTimer`): a pair of CUDA events around each launch,
  queued back to back with no synchronize in between; one synchronize per
  batch of samples, so neither the host clock nor a synchronize is in a sample.
  Only for a backend whose work runs on torch's current stream
  (``Backend.timed_by_cuda_events``); any other on a CUDA device (JAX) is timed by
  the host clock around its synchronize (:func:`make_timer`).

Cold cache (the default): before every sample the last-level cache is flushed:
on the CPU by a read-modify-write of a buffer twice its size (a plain write may use
non-temporal stores that bypass the cache and evict nothing); on a CUDA device by a
read of a buffer of at least 256 MB (a write would leave dirty lines whose write-back
the timed kernel pays). Warm cache:
no flush, and calls are batched so a sample lasts at least ``min_sample_s``.
Warm-up is the caller's job (:mod:`normbench.perf.throughput` runs the backend's
``warmup`` hook and the op a few times untimed first), so compilation and
autotuning never enter a sample.

Statistics: median, quartiles, IQR, min, max and n. A result whose IQR exceeds
:data:`WIDE_SPREAD` of its median is flagged ``wide``, never hidden or dropped.

Every call is made the same way (:class:`Calls`): the calls before the samples (the verification
and the warm-up), the sampled ones and the final one go through one call site, each with its cold
flush and with :attr:`Calls.before` and :attr:`Calls.after` run outside its sample (the throughput
judge changes the inputs there and judges outputs it picks after the fact), so that nothing a
backend can see tells a timed call from a judged one. The clocks are the ones this module captured
when it was imported (:data:`CLOCKS`): a backend that replaces ``time.perf_counter_ns`` is named by
:func:`clock_tampering`, never believed; the host timer reads each sample on a second clock too
(``time.monotonic_ns``), and samples the two clocks disagree on are refused (:class:`ClockError`).

Example, timing a NumPy op on the CPU::

    >>> import numpy as np
    >>> x = np.ones(1 << 16)
    >>> t = HostTimer(flush=None).measure(lambda: x.sum(), lambda out: None,
    ...                                   TimingOptions(cache="warm", min_samples=5, max_time_s=0.01))
    >>> t.n >= 5 and t.min_s <= t.median_s <= t.max_s
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.core.exceptions import InvalidInput

CACHES: tuple[str, ...] = ("cold", "warm")
#: IQR / median above which a result is flagged as having a wide spread
WIDE_SPREAD = 0.10
#: a Timing of at least this many samples with an IQR of exactly 0 is flagged (:attr:`Timing.flat`)
FLAT_SAMPLES = 10
#: the cold-cache flush buffer is this many times the last-level cache
FLUSH_MULTIPLE = 2
#: a CUDA flush buffer is at least this large (Triton's do_bench uses 256 MB for a 50 MB L2)
CUDA_MIN_FLUSH_BYTES = 256 << 20

Op = Callable[[], Any]
Sync = Callable[[Any], None]

#: the clocks normbench times with, as they were when it was imported: ``time.perf_counter_ns`` (the samples),
#: ``time.monotonic_ns`` (the second clock), ``time.perf_counter`` (the sampling's time limit)
CLOCKS: dict[str, Callable[[], Any]] = {"perf_counter_ns": time.perf_counter_ns, "monotonic_ns": time.monotonic_ns,
                                         "perf_counter": time.perf_counter}
_perf_counter_ns, _monotonic_ns, _perf_counter = CLOCKS["perf_counter_ns"], CLOCKS["monotonic_ns"], CLOCKS["perf_counter"]
#: the second clock's bracket around a sample may exceed it by this fraction of the bracket, plus
#: :data:`CLOCK_SLACK_NS`, in the median over the samples (their reads are a few instructions apart; a busy machine
#: that pre-empts the process between them stretches a few brackets, not the median)
CLOCK_TOLERANCE = 0.10
CLOCK_SLACK_NS = 50_000


class ClockError(Exception):
    """The clock a sample was read on cannot be believed: replaced, or disagreeing with the second clock."""


def clock_tampering() -> str | None:
    """What replaced a clock this module times with since it was imported (``time.perf_counter_ns``, this module's
    own references to it), or None when every one is the function captured then."""
    import sys

    here = sys.modules[__name__]
    for name, captured in CLOCKS.items():
        if getattr(time, name) is not captured:
            return f"time.{name} was replaced (by {_origin(getattr(time, name))}) after normbench started"
        if getattr(here, f"_{name}") is not captured:
            return f"normbench.perf.timing's own {name} was replaced (by {_origin(getattr(here, f'_{name}'))})"
    return None


def _origin(function: Any) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}.{getattr(function, '__qualname__', type(function).__name__)}"


@dataclass
class Calls:
    """How a timer makes its calls, every one the same way: ``leading`` calls first (the verification, the warm-up),
    then the samples, then ``trailing`` calls (the final check), none of whose times is recorded; before each call,
    outside its sample, ``before(index)``; after it, outside its sample, ``after(index, outputs)`` (the index counts
    every call from 0)."""

    before: Callable[[int], None] = lambda index: None
    after: Callable[[int, Any], None] = lambda index, outputs: None
    leading: int = 0
    trailing: int = 0
    #: calls made so far
    made: int = field(default=0, init=False)
    #: the timer is making the trailing calls (the samples are done)
    trailing_now: bool = field(default=False, init=False)

    def call(self, op: Op, sync: Sync, start: Callable[[], None], stop: Callable[[], None], calls: int = 1) -> Any:
        """One call (or a batch of ``calls``): ``before``, ``start``, the op, its sync, ``stop``, then ``after``."""
        index = self.made
        self.made += 1
        self.before(index)
        start()
        for _ in range(calls):
            out = op()
        sync(out)
        stop()
        self.after(index, out)
        return out


@dataclass(frozen=True)
class TimingOptions:
    """How to sample: cache state, how many samples, how long.

    Sampling stops when at least ``min_samples`` are taken and either
    ``max_time_s`` of wall time has passed or ``max_samples`` are taken.
    """

    cache: str = "cold"
    warmup: int = 1
    min_samples: int = 10
    max_samples: int = 200
    max_time_s: float = 1.0
    min_sample_s: float = 1e-3

    def __post_init__(self) -> None:
        if self.cache not in CACHES:
            raise InvalidInput(f"unknown cache mode {self.cache!r}; expected one of {', '.join(CACHES)}")
        if not (isinstance(self.min_samples, int) and 3 <= self.min_samples <= self.max_samples):
            raise InvalidInput(f"min_samples must be an integer from 3 to max_samples ({self.max_samples}), "
                               f"got {self.min_samples!r}; a median and quartiles need at least 3 samples")
        if not (isinstance(self.warmup, int) and self.warmup >= 0):
            raise InvalidInput(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if not (math.isfinite(self.max_time_s) and self.max_time_s >= 0):
            raise InvalidInput(f"max_time_s must be a finite number >= 0, got {self.max_time_s!r}")


@dataclass(frozen=True)
class Timing:
    """Samples of one op, seconds per call, and their statistics."""

    samples: tuple[float, ...]
    timer: str
    cache: str
    calls_per_sample: int = 1
    #: what the timer could not do, for the row's message (a defence not available on this machine)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a Timing needs at least one sample")

    def _q(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.samples, dtype=np.float64), q))

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median_s(self) -> float:
        return self._q(50)

    @property
    def q1_s(self) -> float:
        return self._q(25)

    @property
    def q3_s(self) -> float:
        return self._q(75)

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def min_s(self) -> float:
        return float(min(self.samples))

    @property
    def max_s(self) -> float:
        return float(max(self.samples))

    @property
    def rel_spread(self) -> float:
        """IQR / median."""
        median = self.median_s
        return self.iqr_s / median if median > 0 else math.inf

    @property
    def wide(self) -> bool:
        return self.rel_spread > WIDE_SPREAD

    @property
    def flat(self) -> bool:
        """An IQR of exactly 0 over at least :data:`FLAT_SAMPLES` samples: no real clock reads work so evenly."""
        return self.n >= FLAT_SAMPLES and self.iqr_s == 0

    def statistics(self) -> dict[str, float | int | bool]:
        return {"n": self.n, "median_s": self.median_s, "q1_s": self.q1_s, "q3_s": self.q3_s,
                "iqr_s": self.iqr_s, "min_s": self.min_s, "max_s": self.max_s,
                "rel_spread": self.rel_spread, "wide_spread": self.wide}


def ready(outputs: Any) -> None:
    """Wait for every array in ``outputs`` that can be waited on (JAX's ``block_until_ready``)."""
    for out in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        if isinstance(out, (tuple, list)):
            ready(out)
        elif hasattr(out, "block_until_ready"):
            out.block_until_ready()


class CpuFlush:
    """Evicts the CPU caches: a read-modify-write of ``nbytes`` (regular loads
    and stores, so every line passes through the cache)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self._buffer = np.zeros(self.nbytes, dtype=np.uint8)

    def __call__(self) -> None:
        np.add(self._buffer, 1, out=self._buffer)


def _stop(count: int, started: float, options: TimingOptions) -> bool:
    if count < options.min_samples:
        return False
    return count >= options.max_samples or _perf_counter() - started >= options.max_time_s


def _calls_per_sample(estimate_s: float, options: TimingOptions) -> int:
    if options.cache == "cold" or estimate_s <= 0:
        return 1
    return max(1, min(10_000, math.ceil(options.min_sample_s / estimate_s)))


class HostTimer:
    """``perf_counter_ns`` around each call (or batch of calls) and its synchronize, and ``monotonic_ns`` as a second
    clock: a sample the two disagree on by more than :data:`CLOCK_TOLERANCE` is a :class:`ClockError`.

    ``flush`` (cold cache) runs before every call, outside its sample.
    """

    name = "perf_counter_ns"

    def __init__(self, flush: Callable[[], None] | None) -> None:
        self.flush = flush

    def _one(self, op: Op, sync: Sync, calls: int, cold: bool, plan: Calls,
             brackets: list[tuple[int, int]] | None = None) -> float:
        """One sample, seconds per call; its (perf_counter_ns, monotonic_ns bracket) pair appended to ``brackets``."""
        if cold and self.flush is not None:
            self.flush()
        stamps: list[int] = []
        start = lambda: stamps.extend((_monotonic_ns(), _perf_counter_ns()))
        stop = lambda: stamps.extend((_perf_counter_ns(), _monotonic_ns()))
        plan.call(op, sync, start, stop, calls)
        second, first, last, second_last = stamps
        if brackets is not None:
            brackets.append((last - first, second_last - second))
        return (last - first) / 1e9 / calls

    @staticmethod
    def _check_clocks(brackets: list[tuple[int, int]]) -> None:
        """The samples against the second clock that brackets each: never longer than their bracket, and in the
        median not shorter by more than :data:`CLOCK_TOLERANCE` (a clock that discounts the calls)."""
        longer = [(s, b) for s, b in brackets if s > b + CLOCK_SLACK_NS]
        gaps = sorted(b - s for s, b in brackets)
        spans = sorted(b for _, b in brackets)
        if longer:
            s, b = longer[0]
            raise ClockError(f"a sample read {s} ns on perf_counter_ns, longer than the {b} ns monotonic_ns read "
                             f"around it: the clock normbench times with does not tell the time")
        if gaps and gaps[len(gaps) // 2] > CLOCK_TOLERANCE * spans[len(spans) // 2] + CLOCK_SLACK_NS:
            raise ClockError(f"the samples read {gaps[len(gaps) // 2]} ns less (median) on perf_counter_ns than on "
                             f"monotonic_ns around them: the clock normbench times with does not count the calls' "
                             f"time")

    def measure(self, op: Op, sync: Sync, options: TimingOptions, plan: Calls | None = None) -> Timing:
        plan = plan if plan is not None else Calls()
        cold = options.cache == "cold" and self.flush is not None  # no flush for this device: say warm
        sizing = [self._one(op, sync, 1, cold, plan) for _ in range(plan.leading)]
        if cold:
            calls = 1
        else:  # the leading calls and untimed sizing calls; the fastest, as a busy machine only slows calls down
            sizing += [self._one(op, sync, 1, cold, plan) for _ in range(max(0, 3 - len(sizing)))]
            calls = _calls_per_sample(min(sizing), options)
        samples: list[float] = []
        brackets: list[tuple[int, int]] = []
        started = _perf_counter()
        while not _stop(len(samples), started, options):
            samples.append(self._one(op, sync, calls, cold, plan, brackets))
        plan.trailing_now = True
        for _ in range(plan.trailing):
            self._one(op, sync, 1, cold, plan)
        self._check_clocks(brackets)
        return Timing(tuple(samples), self.name, "cold" if cold else "warm", calls)


class CudaEventTimer:
    """CUDA events around each launch (cold) or each batch of launches (warm), one host wait per batch of samples.

    What a sample sees: the end event is recorded after a device-wide synchronize that follows the launch (inside
    the sample), so work the op queued on any stream, a side stream included, ends before the sample does (a few
    microseconds of the synchronize's own latency enter each sample; the smallest GPU sweep case takes hundreds).
    Before each launch, outside its sample, the persisting-L2 lines are reset (:func:`reset_persisting_l2`): an
    access policy window that pins the inputs in L2 does not survive to the next sample. The op must launch its
    work on the device (torch and Triton do). ``torch`` is imported lazily; tests pass a stand-in module with
    ``cuda.Event`` and ``cuda.synchronize``. Untested on hardware in normbench's CI, which has no GPU.
    """

    name = "cuda-events"

    def __init__(self, device: str, flush_bytes: int | None = None, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module
        self.torch = torch_module
        self.device = device
        self._flush = CudaL2Flush(device, torch_module, flush_bytes)
        self._reset_l2 = reset_persisting_l2(torch_module)
        self.notes = () if self._reset_l2 is not _NO_RESET else (
            "the persisting-L2 reset was not available (no CUDA runtime found to call cudaCtxResetPersistingL2Cache):"
            " an access policy window could keep inputs in L2 between samples",)

    def _batch(self, op: Op, count: int, calls: int, cold: bool, plan: Calls) -> list[float]:
        event = lambda: self.torch.cuda.Event(enable_timing=True)
        pairs = [(event(), event()) for _ in range(count)]
        outputs = []
        synchronize = lambda: self.torch.cuda.synchronize(self.device)

        def stop(end) -> None:
            synchronize()  # device-wide: every stream's work is in the sample
            end.record()

        for start, end in pairs:
            if cold:
                self._flush()
            self._reset_l2()
            plan_now = Calls(plan.before, lambda index, out: outputs.append((index, out)))
            plan_now.made, plan_now.trailing_now = plan.made, plan.trailing_now
            plan_now.call(op, lambda out: None, start.record, lambda end=end: stop(end), calls)
            plan.made = plan_now.made
        synchronize()
        for index, out in outputs:  # after the batch's samples: outputs judged outside every sample
            plan.after(index, out)
        return [start.elapsed_time(end) / 1e3 / calls for start, end in pairs]

    def measure(self, op: Op, sync: Sync, options: TimingOptions, plan: Calls | None = None) -> Timing:
        plan = plan if plan is not None else Calls()
        cold = options.cache == "cold"
        sizing = self._batch(op, plan.leading, 1, cold, plan) if plan.leading else []
        if not cold:  # the leading calls and an untimed sizing batch
            sizing += self._batch(op, max(0, 3 - len(sizing)), 1, cold, plan) if len(sizing) < 3 else []
        calls = 1 if cold else _calls_per_sample(min(sizing), options)
        samples: list[float] = []
        started = _perf_counter()
        batch = options.min_samples
        while not _stop(len(samples), started, options):
            samples += self._batch(op, min(batch, options.max_samples - len(samples)), calls, cold, plan)
        plan.trailing_now = True
        if plan.trailing:
            self._batch(op, plan.trailing, 1, cold, plan)
        return Timing(tuple(samples), self.name, options.cache, calls, self.notes)


def reset_persisting_l2(torch_module: Any) -> Callable[[], None]:
    """A function that resets the device's persisting-L2 lines (``cudaCtxResetPersistingL2Cache``, through the CUDA
    runtime torch loaded), so that no access policy window a backend set keeps its inputs in L2 from one sample to
    the next (llm.c PR #851: 3.5 TB/s on an 864 GB/s card); a no-op where there is no CUDA runtime to call (a
    stand-in torch, a CPU machine)."""
    import ctypes

    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"):
        try:
            reset = ctypes.CDLL(name).cudaCtxResetPersistingL2Cache  # torch's own, when it has loaded one
        except (OSError, AttributeError):
            continue
        return lambda: reset() and None
    return _NO_RESET


def _NO_RESET() -> None:
    """No CUDA runtime to call: the rows say so (``CudaEventTimer.notes``)."""


class CudaL2Flush:
    """The cold-cache flush of a CUDA device: a read of a buffer of ``nbytes`` (default :data:`FLUSH_MULTIPLE`
    times the L2, at least :data:`CUDA_MIN_FLUSH_BYTES`), queued on torch's stream. A read evicts the L2
    without dirtying it (zeroing the buffer left up to 50 MB of dirty lines, whose write-back the timed kernel
    then paid, about 10 % of the smallest cases); the buffer is written once, when it is made. ``sync``: then
    wait for the device, as the host clock needs (:func:`make_timer`)."""

    def __init__(self, device: str, torch_module: Any, nbytes: int | None = None, sync: bool = False) -> None:
        self.device, self.torch, self.nbytes, self.sync = device, torch_module, nbytes, sync
        self._buffer = None

    def __call__(self) -> None:
        torch = self.torch
        if self._buffer is None:
            nbytes = self.nbytes
            if nbytes is None:
                l2 = int(getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0) or 0)
                nbytes = max(FLUSH_MULTIPLE * l2, CUDA_MIN_FLUSH_BYTES)
            self._buffer = torch.empty(int(nbytes), dtype=torch.uint8, device=self.device).zero_()
        self._buffer.max()
        if self.sync:
            torch.cuda.synchronize(self.device)


def make_timer(device: str, cache_bytes: int, events: bool = True,
               torch_module: Any = None) -> HostTimer | CudaEventTimer:
    """The timer for a device key (see :func:`normbench.perf.roofline.device_key`) and a backend: on ``cuda:N``,
    CUDA events for a backend whose work is on torch's stream (``events``, ``Backend.timed_by_cuda_events``),
    else the host clock around the backend's synchronize (events on torch's stream would time dispatch gaps
    while XLA runs on a stream of its own), cold by a read flush through torch where torch is installed; the
    host clock elsewhere, with a cold-cache flush of :data:`FLUSH_MULTIPLE` times ``cache_bytes`` on the CPU."""
    if device.startswith("cuda"):
        if events:
            return CudaEventTimer(device, torch_module=torch_module)
        if torch_module is None:
            try:
                import torch as torch_module
            except ImportError:  # no torch to flush with: timed warm, and the rows say so
                return HostTimer(None)
        return HostTimer(CudaL2Flush(device, torch_module, sync=True))
    if device == "cpu":
        return HostTimer(CpuFlush(FLUSH_MULTIPLE * cache_bytes))
    return HostTimer(None)


class ReplayClock:
    """Replays measured samples through a tool that times with a clock of its
    own: pytest-benchmark calls ``now()``, the target, ``now()``; the target
    (:meth:`advance`) moves the clock by the next sample, so the tool records
    exactly the samples this module measured::

        @pytest.mark.benchmark(timer=replay_clock)
        def test(benchmark):
            REPLAY.load(timing.samples)
            benchmark.pedantic(REPLAY.advance, rounds=timing.n)
    """

    def __init__(self) -> None:
        self._now = 0.0
        self._pending: list[float] = []

    def now(self) -> float:
        return self._now

    def load(self, samples: tuple[float, ...] | list[float]) -> None:
        self._pending = list(samples)

    def advance(self) -> None:
        self._now += self._pending.pop(0)


REPLAY = ReplayClock()


def replay_clock() -> float:
    """:data:`REPLAY`'s time, as pytest-benchmark's ``timer`` (its name shows in ``--benchmark-json``)."""
    return REPLAY.now()
