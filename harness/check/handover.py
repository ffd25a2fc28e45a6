"""Calling a backend: the arrays it is handed and what it gives back.

:class:`Handover` keeps the harness's own copy of every argument and, right after the call, fails a backend that
wrote into one (``layer_norm modified its input x in place``) before anything is computed from it; its
:meth:`Handover.call` is the one call site of the conformance checks (a backend that decides its own test's outcome
with ``pytest.skip()`` inside it fails there). :func:`host_array` takes an output back as a host copy, checked for
its shape, dtype and memory shared with what it must not share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normbench.check.aliasing import Extents, aliasing_message
from normbench.check.worst import ConformanceError
from normbench.core.backend import Backend
from normbench.core.dtypes import dtype_name, host_dtype
from normbench.core.interrupts import pytest_outcome
from normbench.core.safe_text import safe


def host_array(what: str, got, backend: Backend, shape, dtype: str | None = None, *,
               exact_shape: bool = True, avoid: Extents | None = None) -> np.ndarray:
    """A backend's output ``got`` as a NumPy host array (in the dtype it holds): a copy, taken now, that nothing the
    backend does later can change; or :class:`ConformanceError` naming ``what`` and the backend when it is not what
    was asked. ``avoid``: what the output must not share memory with (:mod:`normbench.check.aliasing`: the inputs,
    the harness's arrays, an earlier call's outputs); the output is added to it, so that the call's next output
    must not share memory with this one either.

    How strict, explicitly: ``exact_shape`` True: its shape must be ``shape``; False:
    any shape of as many elements, reshaped to ``shape``. ``dtype`` (a normbench dtype
    name): its dtype must be that one; None: any. Finiteness is never checked here:
    the comparisons judge non-finite values.

    >>> from normbench import get_registry
    >>> numpy = get_registry().create("numpy")
    >>> host_array("y", numpy.asarray(np.zeros((2, 3), np.float32)), numpy, (2, 3), "float32").shape
    (2, 3)
    >>> host_array("y", numpy.asarray(np.zeros((2, 3))), numpy, (6,), exact_shape=False).shape
    (6,)
    >>> host_array("y", numpy.asarray(np.zeros(3)), numpy, (2, 3))
    Traceback (most recent call last):
    ...
    normbench.check.worst.ConformanceError: numpy: y has shape (3,), expected (2, 3)
    """
    __tracebackhide__ = True
    if got is None:
        raise ConformanceError(f"{backend.name}: {what} is None, expected an array of shape {tuple(shape)}")
    shared = avoid.overlapping(got) if avoid is not None else None
    if shared:
        raise ConformanceError(aliasing_message(backend.name, what, shared))
    try:
        view = np.asarray(backend.to_numpy(got))
    except Exception as exc:
        raise ConformanceError(f"{backend.name}: {what}: to_numpy failed on {type(got).__name__}: {exc}") from exc
    shared = avoid.overlapping(view) if avoid is not None else None
    if shared:
        raise ConformanceError(aliasing_message(backend.name, what, shared))
    if avoid is not None:
        avoid.add(f"its own output {what}", got)
    host = np.array(view, copy=True)  # the output as it is now: a buffer reused or written later changes no verdict
    if not exact_shape:
        if host.size != int(np.prod(shape, dtype=np.int64)):
            raise ConformanceError(f"{backend.name}: {what} has shape {tuple(host.shape)}, expected {tuple(shape)} "
                                   f"(or any shape of as many elements)")
        host = host.reshape(shape)
    elif tuple(host.shape) != tuple(shape):
        raise ConformanceError(f"{backend.name}: {what} has shape {tuple(host.shape)}, expected {tuple(shape)}")
    if dtype is not None and host.dtype != host_dtype(dtype):
        try:
            got_name = dtype_name(host.dtype)
        except ValueError:
            got_name = str(host.dtype)
        raise ConformanceError(f"{backend.name}: {what} has dtype {got_name}, expected {dtype}")
    return host


# -- what a backend is handed: its arrays, the harness's pristine copies, and the check ------------------


@dataclass
class Handover:
    """The arrays the harness hands a backend for one call: each converted with ``asarray``
    (:attr:`native`, what the backend gets) and, taken before that, the harness's own copy of it
    (:attr:`pristine`, contiguous, never handed to anyone). After the call, :meth:`check` converts each
    native array back with ``to_numpy`` and compares it with its copy, bitwise, a NaN equal to a NaN: a
    backend that wrote into an argument fails right there, naming the argument, before any reference is
    computed from it (a NumPy backend's ``asarray`` may return the host array itself, so a write into
    the argument is a write into the harness's inputs). The one place the check is written:
    :func:`run_forward` and :func:`run_backward`, and so every check built on them, hand their arrays over
    on one, as should anything else that calls a backend to judge it.

    >>> from normbench import get_registry
    >>> numpy = get_registry().create("numpy")
    >>> handed = Handover.of(numpy, x=np.zeros((2, 3), np.float32), weight=None)
    >>> handed["x"].flags.writeable  # a NumPy array is handed read-only: a write fails where it is made (call)
    False
    >>> handed["x"].base[1, :2] = np.nan  # what a backend must not do, through the memory underneath
    >>> handed.check("layer_norm")
    Traceback (most recent call last):
    ...
    normbench.check.worst.ConformanceError: layer_norm modified its input x in place (2 of 6 elements changed); \
a backend must not write into its arguments
      first at x[1, 0]: 0 before the call, nan after
    """

    backend: Backend
    #: the arguments' names, in the order given
    names: tuple[str, ...]
    #: the backend's arrays (None for an absent argument)
    native: tuple
    #: the harness's copies, taken before ``asarray`` (None for an absent argument)
    pristine: tuple

    @classmethod
    def of(cls, backend: Backend, **hosts: np.ndarray | None) -> Handover:
        """Copy each host array, then convert it with ``backend.asarray`` (None stays None); a native array that is
        a NumPy array (a NumPy backend's, which may be the host array itself) is handed read-only, so that a write
        into it fails where it is made (:meth:`call`), even one the backend would undo before returning."""
        pristine = tuple(None if a is None else a.copy() for a in hosts.values())
        native = tuple(None if a is None else read_only(backend.asarray(a)) for a in hosts.values())
        return cls(backend, tuple(hosts), native, pristine)

    def call(self, entry: str, context: str, function, *arguments: tuple):
        """``function(*arguments)``, the call of ``entry`` on this handover's arrays (each of ``arguments`` a tuple
        holding some of :attr:`native`). A write into a read-only input fails there (NumPy's ValueError): the call
        is then made once more on writable copies, to name the input it writes, and that is the failure (a backend
        that undid its write before returning is told so)."""
        __tracebackhide__ = True
        try:
            return function(*arguments)
        except ValueError as exc:
            if not wrote_read_only(exc):
                raise
            said = f"handed read-only, the write failed where it was made ({exc})"
        except BaseException as exc:
            decided = pytest_outcome(exc)
            if not decided:
                raise
            raise ConformanceError(f"{context}{entry} called {decided}() inside its call ({safe(str(exc), 500)}): a "
                                   f"backend says what it cannot run through its operations, dtypes and limits "
                                   f"(normbench.Limits, checked before the call), never by deciding the test's "
                                   f"outcome itself") from None
        writable = tuple(None if n is None or not isinstance(n, np.ndarray) else np.array(n, order="K")
                         for n in self.native)
        swap = {id(n): w for n, w in zip(self.native, writable) if w is not None}
        again = Handover(self.backend, self.names, tuple(w if w is not None else n
                                                          for n, w in zip(self.native, writable)), self.pristine)
        try:
            function(*(tuple(swap.get(id(a), a) for a in args) for args in arguments))
            self.backend.synchronize()
            again.check(entry, context)
        except ConformanceError as named:
            raise ConformanceError(f"{named}; {said}") from None
        except Exception:  # it fails otherwise on writable copies: the write is what it did first
            pass
        raise ConformanceError(f"{context}{entry} wrote into an input it was handed, and undid the write before "
                               f"returning; {said}. A backend must not write into its arguments") from None

    def __getitem__(self, name: str):
        """The backend's array of the argument ``name``."""
        return self.native[self.names.index(name)]

    def extents(self) -> Extents:
        """What the call's outputs must not share memory with: the arguments and the harness's copies of them."""
        held = Extents()
        for name, native, pristine in zip(self.names, self.native, self.pristine):
            held.add(f"the input {name}", native).add(f"the harness's copy of the input {name}", pristine)
        return held

    def check(self, entry: str, context: str = "") -> None:
        """After the call of ``entry``: each argument still holds the bits it was handed (a NaN equal to a
        NaN), or :class:`ConformanceError` ``<context>layer_norm modified its input x in place (12 of 1,600
        elements changed); a backend must not write into its arguments`` and the first changed element.
        Costs one ``to_numpy`` and one comparison per argument."""
        __tracebackhide__ = True
        for name, before, native in zip(self.names, self.pristine, self.native):
            if before is None:
                continue
            try:
                after = np.asarray(self.backend.to_numpy(native))
            except Exception as exc:
                raise ConformanceError(f"{context}{entry}'s input {name}: to_numpy failed after the call on "
                                       f"{type(native).__name__}: {exc}") from exc
            change = changed(before, after)
            if change is None:
                continue
            head = f"{context}{entry} modified its input {name} in place"
            tail = "a backend must not write into its arguments"
            if isinstance(change, str):
                raise ConformanceError(f"{head} ({change}); {tail}")
            count, at = int(change.sum()), np.unravel_index(int(np.argmax(change)), change.shape)
            where = ", ".join(map(str, at))
            raise ConformanceError(f"{head} ({count:,} of {before.size:,} elements changed); {tail}\n"
                                   f"  first at {name}[{where}]: {number_text(before[at])} before the call, "
                                   f"{number_text(np.ascontiguousarray(after)[at])} after")


def changed(before: np.ndarray, after: np.ndarray) -> np.ndarray | str | None:
    """Where ``after`` holds other bits than ``before``, a NaN equal to any NaN: None where nowhere, else a
    boolean mask of their shape (or, when their shapes or dtypes differ, that in words).

    >>> changed(np.float32([1, np.nan, 3]), np.float32([1, -np.nan, 3])) is None
    True
    >>> changed(np.float32([1, 0, 3]), np.float32([1, -0.0, 4])).tolist()
    [False, True, True]
    """
    if before.shape != after.shape or before.dtype != after.dtype:
        return (f"it was handed with shape {tuple(before.shape)}, dtype {before.dtype}, and has shape "
                f"{tuple(after.shape)}, dtype {after.dtype} after the call")
    before, after = np.ascontiguousarray(before), np.ascontiguousarray(after)
    if before.dtype.itemsize not in (1, 2, 4, 8):
        return None if before.tobytes() == after.tobytes() else np.ones(before.shape, dtype=bool)
    unsigned = np.dtype(f"u{before.dtype.itemsize}")
    differ = before.view(unsigned) != after.view(unsigned)
    if not differ.any():
        return None
    if before.dtype.kind in "fV":  # floats, and ml_dtypes' bfloat16
        with np.errstate(all="ignore"):
            differ &= ~(np.isnan(before.astype(np.float64)) & np.isnan(after.astype(np.float64)))
    return differ if differ.any() else None


def wrote_read_only(exc: BaseException) -> bool:
    """NumPy's error for a write into a read-only array: a backend wrote into an input handed to it read-only."""
    return isinstance(exc, ValueError) and "read-only" in str(exc)


def read_only(native):
    """``native`` as the backend gets it: a NumPy array as a read-only view of itself (the harness's own array, which
    a NumPy backend's ``asarray`` may return, keeps its flags); any other array type as it is."""
    if not isinstance(native, np.ndarray):
        return native
    view = native.view()
    view.flags.writeable = False
    return view


def number_text(v) -> str:
    try:
        return f"{float(v):.9g}"
    except (TypeError, ValueError):
        return repr(v)


def extents_to_avoid(handed: Handover, earlier) -> Extents:
    """What a call's outputs must not share memory with: its inputs, the harness's copies, ``earlier``'s outputs."""
    avoid = handed.extents()
    if earlier is not None:
        for name, output in earlier.outputs:
            avoid.add(f"the previous call's output {name}", output)
    return avoid
