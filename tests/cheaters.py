"""Backends that cheat their grader, one trick each, as kernels written to be accepted have (../shared/ADVERSARIAL.md).

Each computes LayerNorm with NumPy (the reference backend's code) and adds one mechanism that has fooled a harness in
public, or that an honest kernel has by accident; ``tests/test_cheaters.py`` requires each to end as a failed check
or a non-``ok`` throughput row whose message names what it did (:data:`NAMED`).
"""

from __future__ import annotations

import threading
import time
import traceback

import numpy as np

from normbench.impls.numpy_ref import NumpyBackend
from tests.synthetic import spend


class Cheater(NumpyBackend):
    """LayerNorm by the reference backend's code; each subclass changes one thing."""

    name = "cheater"
    operations = ("layer_norm",)

    def right(self, x, normalized_shape, weight, bias, eps):
        return NumpyBackend.layer_norm(self, x, normalized_shape, weight, bias, eps)


class OneOutputBuffer(Cheater):
    """Every call writes its (right) y into one persistent buffer and returns it: a comparison of two calls compares
    the buffer with itself (a harness that kept the first output's view saw no change whatever later calls wrote)."""

    name = "cheater-one-output-buffer"
    buffer = None

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = self.right(x, normalized_shape, weight, bias, eps)
        if self.buffer is None or self.buffer.shape != y.shape:
            self.buffer = np.empty_like(y)
        self.buffer[...] = y
        return self.buffer


class NondeterministicOneBuffer(OneOutputBuffer):
    """A nondeterministic kernel (a last-bit difference in one element on every other call) writing into one buffer:
    two calls compared through the buffer are always equal."""

    name = "cheater-nondeterministic-one-buffer"
    calls = 0

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = super().layer_norm(x, normalized_shape, weight, bias, eps)
        self.calls += 1
        if self.calls % 2 == 0:
            flat = y.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf)
        return y


class CacheByIdentity(Cheater):
    """A copy of an earlier output, for the same input objects: the timed calls were lookups (GPU MODE
    reference-kernels PR #102). Counts its hits: with new inputs for every call it has none (it is then honest)."""

    name = "cheater-cache-by-identity"

    def __init__(self) -> None:
        self.cache: dict = {}
        self.hits = 0

    def key(self, x, weight, bias):
        return id(x), id(weight), id(bias)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        key = self.key(x, weight, bias)
        if key in self.cache:
            self.hits += 1
        else:
            self.cache[key] = self.right(x, normalized_shape, weight, bias, eps)
        return self.cache[key].copy()


class CacheByShape(Cheater):
    """A copy of the first output for every input of its shape (reference-kernels PR #104)."""

    name = "cheater-cache-by-shape"
    cache: dict = {}

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if x.shape not in self.cache:
            self.cache = {x.shape: self.right(x, normalized_shape, weight, bias, eps)}
        return self.cache[x.shape].copy()


class CacheByFingerprint(CacheByIdentity):
    """A copy of an earlier output for inputs of the same fingerprint, the first and last elements and a sum of
    the first half (flashinfer-bench-starter-kit #21): contents a cache can key on cheaply."""

    name = "cheater-cache-by-fingerprint"

    def key(self, x, weight, bias):
        flat = np.asarray(x).reshape(-1)
        return x.shape, float(flat[0]), float(flat[-1]), flat[: flat.size // 2].sum().item()


class HalfTheRowsLater(Cheater):
    """Right on its first call (the pre-check), then the first half of the rows only, the rest zeros: what a
    harness that judges only the calls around the timing loop accepts."""

    name = "cheater-half-the-rows-later"
    calls = 0

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        self.calls += 1
        if self.calls == 1:
            return self.right(x, normalized_shape, weight, bias, eps)
        rows = x.reshape(-1, x.shape[-1])
        y = np.zeros_like(rows)
        half = len(rows) // 2
        y[:half] = self.right(rows[:half], normalized_shape, weight, bias, eps)
        return y.reshape(x.shape)


class StaleRows(Cheater):
    """Every call computes its first half of the rows and leaves the rest as the previous call's answer, in fresh
    memory: a buffer the allocator refilled with an earlier (right, but other) result (the "AI CUDA Engineer")."""

    name = "cheater-stale-rows"
    last = None

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        if self.last is None or self.last.shape != x.shape:
            self.last = self.right(x, normalized_shape, weight, bias, eps)
            return self.last.copy()
        rows = x.reshape(-1, x.shape[-1])
        y = self.last.reshape(rows.shape).copy()
        half = len(rows) // 2
        y[:half] = self.right(rows[:half], normalized_shape, weight, bias, eps)
        self.last = y.reshape(x.shape)
        return self.last.copy()


class KnowsItIsTimed(Cheater):
    """Right when a verifier is on the call stack, zeros otherwise: what a harness that verifies from its own call
    site, and times from another, accepts."""

    name = "cheater-knows-it-is-timed"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        stack = " ".join(frame.name for frame in traceback.extract_stack())
        if "check" in stack or "verif" in stack.lower() or "_warm_up" in stack:
            return self.right(x, normalized_shape, weight, bias, eps)
        return np.zeros_like(x)


class LazyOutput(Cheater):
    """Returns a wrapper that computes y when it is read: the work happens in the checker, outside the timed call
    (reference-kernels #162)."""

    name = "cheater-lazy-output"

    class Lazy:
        def __init__(self, compute) -> None:
            self.compute = compute

        def __array__(self, dtype=None, copy=None):
            return np.asarray(self.compute(), dtype=dtype)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self.Lazy(lambda: self.right(x, normalized_shape, weight, bias, eps))

    def to_numpy(self, native):
        return np.asarray(native)


class DeferredIntoToNumpy(Cheater):
    """Returns a plain array at once and does the work, 30 ms of it, when ``to_numpy`` is asked for it: a plain type,
    so only the conversion's time shows it."""

    name = "cheater-deferred-into-to-numpy"
    pending: dict = {}

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = np.empty_like(x)
        self.pending[id(y)] = (y, lambda: self.right(x, normalized_shape, weight, bias, eps))
        return y

    def to_numpy(self, native):
        if id(native) in self.pending:
            y, compute = self.pending.pop(id(native))
            spend(30e-3)
            y[...] = compute()
        return np.asarray(native)


class SideThread(Cheater):
    """Returns at once and writes y from a background thread 50 ms later (work no timer of the call sees: kernelbot
    PR #374's side stream, on a CPU)."""

    name = "cheater-side-thread"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = np.zeros_like(x)

        def later():
            time.sleep(0.05)
            y[...] = self.right(x, normalized_shape, weight, bias, eps)

        threading.Thread(target=later, daemon=True).start()
        return y


class PatchesTheClock(Cheater):
    """Replaces ``time.perf_counter_ns`` (and normbench's own reference to it) with a clock that runs at a tenth of
    the speed: every sample a tenth of its time (reference-kernels #162: rank 1 with a score of 0.000)."""

    name = "cheater-patches-the-clock"
    originals: dict = {}

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        from normbench.perf import timing

        if not self.originals:
            real = time.perf_counter_ns
            self.originals = {"time": real, "timing": timing._perf_counter_ns}
            slow = lambda: real() // 10
            time.perf_counter_ns = slow
            timing._perf_counter_ns = slow
        return self.right(x, normalized_shape, weight, bias, eps)

    def restore(self) -> None:
        from normbench.perf import timing

        if self.originals:
            time.perf_counter_ns, timing._perf_counter_ns = self.originals["time"], self.originals["timing"]


class PatchesTheVerifier(Cheater):
    """Replaces the verifier's check with one that accepts anything, then returns zeros."""

    name = "cheater-patches-the-verifier"
    original = None

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        from normbench.perf import verify

        if self.original is None:
            self.original = verify.Verifier.check
            verify.Verifier.check = lambda *args, **kwargs: None
        return np.zeros_like(x)

    def restore(self) -> None:
        from normbench.perf import verify

        if self.original is not None:
            verify.Verifier.check = self.original


class WritesInputAndUndoes(Cheater):
    """Uses x as scratch space and puts it back before returning: an input check after the call sees nothing."""

    name = "cheater-writes-input-and-undoes"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        saved = np.array(x)
        x[...] = 0
        x[...] = saved
        return self.right(saved, normalized_shape, weight, bias, eps)


class AliasesItsInput(Cheater):
    """Computes y into x's own memory (the write goes through a second array over the same buffer, so no read-only
    flag stops it) and returns that: an output that aliases its input."""

    name = "cheater-aliases-its-input"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        y = self.right(x, normalized_shape, weight, bias, eps)
        base = x
        while isinstance(base.base, np.ndarray):
            base = base.base
        scratch = np.ndarray(x.shape, x.dtype, buffer=base.data if base.flags.writeable else np.array(base).data)
        scratch[...] = y
        return scratch if base.flags.writeable else np.asarray(x)


class SkipsWhatItWouldFail(Cheater):
    """Calls ``pytest.skip()`` from inside its call where it would fail (here: everywhere): a harness that counts a
    skip as nothing passes a kernel whose every case it skipped (issue 45: the verdict was PASS)."""

    name = "cheater-skips-what-it-would-fail"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        import pytest

        pytest.skip("this shape is not supported")


class XfailsWhatItWouldFail(Cheater):
    """The same with ``pytest.xfail()``: its failures would read as known deviations, and the verdict PASS."""

    name = "cheater-xfails-what-it-would-fail"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        import pytest

        pytest.xfail("a known deviation")


#: each cheater, the throughput verdicts it may end with, and words its message must hold: the mechanism named
NAMED: dict[type[Cheater], tuple[tuple[str, ...], tuple[str, ...]]] = {
    OneOutputBuffer: (("wrong-after",), ("aliases the output y of an earlier call",)),
    CacheByShape: (("wrong-after",), ("rows reordered at random",)),
    HalfTheRowsLater: (("wrong-after",), ("> bound",)),
    StaleRows: (("wrong-after",), ("rows reordered at random", "> bound")),
    KnowsItIsTimed: (("wrong-before", "wrong-after"), ("> bound",)),
    LazyOutput: (("wrong-before",), ("not the array type the backend's asarray makes", "lazy or deferred")),
    DeferredIntoToNumpy: (("error",), ("work deferred into the conversion",)),
    SideThread: (("wrong-before",), ("> bound",)),
    PatchesTheClock: (("error",), ("time.perf_counter_ns was replaced",)),
    PatchesTheVerifier: (("error",), ("Verifier.check was replaced",)),
    WritesInputAndUndoes: (("wrong-before",), ("wrote into an input it was handed, and undid the write",)),
    AliasesItsInput: (("wrong-before",), ("aliases the input x",)),
    SkipsWhatItWouldFail: (("error",), ("the backend called pytest.skip() inside its call",)),
    XfailsWhatItWouldFail: (("error",), ("the backend called pytest.xfail() inside its call",)),
}
#: cheaters the inputs defeat instead: every call's inputs are new objects with new contents, so their caches never
#: hit, they compute every call, and their speed is an honest one
DEFEATED: tuple[type[CacheByIdentity], ...] = (CacheByIdentity, CacheByFingerprint)
