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
from dataclasses import dataclass
from typing import Any

import numpy as np

from normbench.core.exceptions import InvalidInput

CACHES: tuple[str, ...] = ("cold", "warm")
#: IQR / median above which a result is flagged as having a wide spread
WIDE_SPREAD = 0.10
#: the cold-cache flush buffer is this many times the last-level cache
FLUSH_MULTIPLE = 2
#: a CUDA flush buffer is at least this large (Triton's do_bench uses 256 MB for a 50 MB L2)
CUDA_MIN_FLUSH_BYTES = 256 << 20

Op = Callable[[], Any]
Sync = Callable[[Any], None]


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
    return count >= options.max_samples or time.perf_counter() - started >= options.max_time_s


def _calls_per_sample(estimate_s: float, options: TimingOptions) -> int:
    if options.cache == "cold" or estimate_s <= 0:
        return 1
    return max(1, min(10_000, math.ceil(options.min_sample_s / estimate_s)))


class HostTimer:
    """``perf_counter_ns`` around each call (or batch of calls) and its synchronize.

    ``flush`` (cold cache) runs before every sample, outside it.
    """

    name = "perf_counter_ns"

    def __init__(self, flush: Callable[[], None] | None) -> None:
        self.flush = flush

    def _one(self, op: Op, sync: Sync, calls: int, cold: bool) -> tuple[float, Any]:
        if cold and self.flush is not None:
            self.flush()
        start = time.perf_counter_ns()
        for _ in range(calls):
            out = op()
        sync(out)
        return (time.perf_counter_ns() - start) / 1e9 / calls, out

    def measure(self, op: Op, sync: Sync, options: TimingOptions) -> Timing:
        cold = options.cache == "cold" and self.flush is not None  # no flush for this device: say warm
        if cold:
            calls = 1
        else:  # untimed sizing calls; the fastest, as a busy machine only slows calls down
            calls = _calls_per_sample(min(self._one(op, sync, 1, cold)[0] for _ in range(3)), options)
        samples: list[float] = []
        started = time.perf_counter()
        while not _stop(len(samples), started, options):
            sample, _ = self._one(op, sync, calls, cold)
            samples.append(sample)
        return Timing(tuple(samples), self.name, "cold" if cold else "warm", calls)


class CudaEventTimer:
    """CUDA events around each launch (cold) or each batch of launches (warm),
    queued back to back, one synchronize per batch of samples.

    The op must launch its work on torch's current stream (torch and Triton
    do) and must not synchronize. ``torch`` is imported lazily; tests pass a
    stand-in module with ``cuda.Event`` and ``cuda.synchronize``.
    Untested on hardware in normbench's CI, which has no GPU.
    """

    name = "cuda-events"

    def __init__(self, device: str, flush_bytes: int | None = None, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module
        self.torch = torch_module
        self.device = device
        self._flush = CudaL2Flush(device, torch_module, flush_bytes)

    def _batch(self, op: Op, count: int, calls: int, cold: bool) -> list[float]:
        event = lambda: self.torch.cuda.Event(enable_timing=True)
        pairs = [(event(), event()) for _ in range(count)]
        for start, end in pairs:
            if cold:
                self._flush()
            start.record()
            for _ in range(calls):
                op()
            end.record()
        self.torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) / 1e3 / calls for start, end in pairs]

    def measure(self, op: Op, sync: Sync, options: TimingOptions) -> Timing:
        cold = options.cache == "cold"
        calls = 1 if cold else _calls_per_sample(min(self._batch(op, 3, 1, cold)), options)  # untimed sizing batch
        samples: list[float] = []
        started = time.perf_counter()
        batch = options.min_samples
        while not _stop(len(samples), started, options):
            samples += self._batch(op, min(batch, options.max_samples - len(samples)), calls, cold)
        return Timing(tuple(samples), self.name, options.cache, calls)


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
