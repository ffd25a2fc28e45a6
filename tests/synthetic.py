"""Synthetic backends and devices with known behaviour, for testing the timer and the judge.

``KnownCost`` is correct (the NumPy reference) and takes exactly ``cost``
seconds of wall time per call (it waits on the same clock the timer
reads), so a timer must report at least ``cost`` and not much more. The
others are wrong or too fast in the ways benchmark gaming is: zeros, a right
answer that turns wrong once timing starts, a cached output, an input
modified in place. ``FakeTorch`` is a stand-in for ``torch.cuda`` with a
simulated GPU timeline, so the CUDA timer's structure is tested without a GPU.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from normbench.impls.numpy_ref import NumpyBackend
from normbench.perf.roofline import Ceiling


def spend(seconds: float, start_ns: int | None = None) -> None:
    """Return once ``seconds`` have passed since ``start_ns`` (now if None) on the
    timer's clock, sleeping rather than spinning: a sleeper needs no CPU until
    it wakes, so other processes delay it far less than a busy loop (under
    three CPU hogs on two cores, the fastest of 20 was within 3 % of the cost
    sleeping, 60 % spinning)."""
    deadline = (time.perf_counter_ns() if start_ns is None else start_ns) + int(seconds * 1e9)
    remaining = deadline - time.perf_counter_ns()
    if remaining > 0:
        time.sleep(remaining / 1e9)
    while time.perf_counter_ns() < deadline:  # never early, whatever the sleep's clock
        pass


class KnownCost(NumpyBackend):
    """Correct, and every call lasts ``cost`` seconds; the first ``slow_calls``
    last ``first_cost`` (a JIT compiling). Counts calls and warmup-hook calls."""

    name = "known-cost"

    def __init__(self, cost: float = 3e-3, first_cost: float = 0.0, slow_calls: int = 0) -> None:
        self.cost, self.first_cost, self.slow_calls = cost, first_cost, slow_calls
        self.calls = 0
        self.warmups: list[tuple] = []

    def warmup(self, x, normalized_shape, weight, bias, eps):
        self.warmups.append((x.shape, normalized_shape, weight is not None, bias is not None, eps))

    def _spend(self, start_ns: int) -> None:
        self.calls += 1
        spend(self.first_cost if self.calls <= self.slow_calls else self.cost, start_ns)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        start = time.perf_counter_ns()
        y = super().layer_norm(x, normalized_shape, weight, bias, eps)
        self._spend(start)
        return y

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        start = time.perf_counter_ns()
        grads = super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)
        self._spend(start)
        return grads


class Erratic(KnownCost):
    """Every other call takes 4x the cost: the IQR is about the median."""

    name = "erratic"

    def _spend(self, start_ns: int) -> None:
        self.calls += 1
        spend(self.cost * (1 if self.calls % 2 else 4), start_ns)


class Pending:
    """An output whose work finishes on another thread (JAX-style ``block_until_ready``)."""

    def __init__(self, seconds: float) -> None:
        self._thread = threading.Thread(target=time.sleep, args=(seconds,))
        self._thread.start()

    def block_until_ready(self):
        self._thread.join()
        return self


class AsyncDispatch:
    """An op that returns at once while its work (``seconds``) runs on: a timer
    that does not wait for outputs would measure nearly nothing."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self):
        return Pending(self.seconds)


class Zeros(NumpyBackend):
    """Fast and wrong from the first call."""

    name = "zeros"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return np.zeros_like(x)


class RightThenZeros(NumpyBackend):
    """Right for the first ``good`` calls (the verification), zeros afterwards."""

    name = "right-then-zeros"
    good = 1

    def __init__(self) -> None:
        self.calls = 0

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        self.calls += 1
        return super().layer_norm(x, normalized_shape, weight, bias, eps) if self.calls <= self.good else np.zeros_like(x)


class CachesOutput(NumpyBackend):
    """Right values, computed once and returned from a cache: too fast to be real."""

    name = "caches-output"

    def __init__(self) -> None:
        self.cache = None

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if self.cache is None:
            self.cache = super().layer_norm(x, normalized_shape, weight, bias, eps)
        return self.cache


class ScribblesOnInput(NumpyBackend):
    """Right output every time (computed from a copy of the first x it saw),
    but it overwrites x after computing: only the input check can catch it."""

    name = "scribbles"

    def __init__(self) -> None:
        self.saved = None

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if self.saved is None:
            self.saved = x.copy()
        y = super().layer_norm(self.saved, normalized_shape, weight, bias, eps)
        x[...] = 0
        return y


class Raises(NumpyBackend):
    name = "raises"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        raise RuntimeError("kernel launch failed: out of shared memory")


def fixed_ceiling(gbps: float, cache_bytes: int = 1 << 20):
    """A ``measure_ceiling`` stand-in returning ``gbps``; ``.calls`` counts measurements."""
    def measure(device: str, buffer_bytes: int | None = None) -> Ceiling:
        measure.calls += 1
        return Ceiling(device, gbps, 1e-3, 1e-3, 1e-3, 20, 4 * cache_bytes, cache_bytes, "test", "fixed")
    measure.calls = 0
    return measure


# -- a stand-in for torch.cuda, with a simulated GPU timeline --------------------------------


class FakeGpu:
    """A GPU timeline: work is queued at the end of the timeline; events stamp it."""

    def __init__(self) -> None:
        self.clock_ms = 0.0
        self.log: list[str] = []
        self.synchronizes = 0

    def launch(self, what: str, ms: float) -> None:
        self.log.append(what)
        self.clock_ms += ms


class FakeEvent:
    def __init__(self, gpu: FakeGpu, enable_timing: bool = False) -> None:
        self.gpu, self.stamp = gpu, None

    def record(self) -> None:
        self.gpu.log.append("event")
        self.stamp = self.gpu.clock_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.stamp - self.stamp


class FakeTensor:
    def __init__(self, gpu: FakeGpu, nbytes: int) -> None:
        self.gpu, self.nbytes = gpu, nbytes

    def zero_(self):
        self.gpu.launch("fill", 1.0)  # a write of the whole buffer
        return self

    def max(self):
        self.gpu.launch("flush", 1.0)  # a read of the whole buffer, 1 ms: a flush must never land inside a sample
        return self


class FakeTorch:
    """Just enough of ``torch`` for :class:`normbench.perf.timing.CudaEventTimer`."""

    uint8 = "uint8"

    def __init__(self) -> None:
        self.gpu = FakeGpu()
        gpu = self.gpu

        class Cuda:
            @staticmethod
            def Event(enable_timing: bool = False) -> FakeEvent:
                return FakeEvent(gpu, enable_timing)

            @staticmethod
            def synchronize(device=None) -> None:
                gpu.synchronizes += 1
                gpu.log.append("synchronize")

            @staticmethod
            def get_device_properties(device):
                return type("Properties", (), {"L2_cache_size": 50 << 20})()

        self.cuda = Cuda

    def empty(self, nbytes: int, dtype=None, device=None) -> FakeTensor:
        return FakeTensor(self.gpu, nbytes)
