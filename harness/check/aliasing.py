"""Outputs that share memory with what they must not: an input, an earlier call's output, the harness's arrays.

A backend must return new arrays. One that returns the same buffer every call (a persistent output
buffer, by design or by a cache) makes a comparison of two calls compare a buffer with itself: a
determinism check passes a nondeterministic kernel, and a verifier that keeps the host view of the first
output and compares it with the last sees no change whatever the timed calls wrote. So every output the
harness judges is a copy taken when it is handed over (``normbench.check.handover.host_array``), and before that copy
its memory is compared with what it must not overlap (:class:`Extents`): the message says which.

Where an array lives is read from the array's own protocol, never from the backend: NumPy's
``byte_bounds``, a tensor's ``data_ptr`` and strides (PyTorch), ``__cuda_array_interface__``, JAX's
``unsafe_buffer_pointer``. An array whose memory cannot be told (another framework's type) is not
compared; an array kept alive here can never have its memory reused by an honest allocator, so an
overlap is never an accident.

>>> import numpy as np
>>> a = np.zeros((4, 8), np.float32)
>>> Extents().add("the input x", a).overlapping(a[1:])
'the input x'
>>> Extents().add("the input x", a).overlapping(np.zeros(3)) is None
True
"""

from __future__ import annotations

from typing import Any

import numpy as np


def extent(array: Any) -> tuple[str, int, int] | None:
    """``(space, first byte, past the last byte)`` of the memory ``array`` spans, or None where it cannot be told
    (an empty array spans nothing). ``space`` is ``host`` for NumPy arrays and CPU tensors (one address space),
    else the device."""
    try:
        if isinstance(array, np.ndarray):
            if array.size == 0:
                return None
            low, high = _byte_bounds(array)
            return "host", int(low), int(high)
        data_ptr = getattr(array, "data_ptr", None)
        if callable(data_ptr) and hasattr(array, "stride") and hasattr(array, "element_size"):  # a torch.Tensor
            return _strided("host" if str(array.device) == "cpu" else str(array.device), int(data_ptr()),
                            tuple(array.shape), tuple(array.stride()), int(array.element_size()))
        interface = getattr(array, "__cuda_array_interface__", None)
        if isinstance(interface, dict):
            item = np.dtype(interface["typestr"]).itemsize
            shape = tuple(interface["shape"])
            strides = interface.get("strides")
            elements = tuple(s // item for s in strides) if strides else _contiguous(shape)
            return _strided("cuda", int(interface["data"][0]), shape, elements, item)
        pointer = getattr(array, "unsafe_buffer_pointer", None)  # a JAX array on one device
        if callable(pointer):
            nbytes = int(array.nbytes)
            if nbytes == 0:
                return None
            devices = array.devices() if callable(getattr(array, "devices", None)) else ()
            device = next(iter(devices), None)
            space = "host" if device is None or getattr(device, "platform", "cpu") == "cpu" else str(device)
            start = int(pointer())
            return space, start, start + nbytes
    except Exception:  # a deleted buffer, a sharded array, a protocol half implemented: cannot be told
        return None
    return None


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    bounds = getattr(np.lib, "array_utils", None)
    return (bounds.byte_bounds if bounds is not None else np.byte_bounds)(array)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _strided(space: str, start: int, shape: tuple, strides: tuple, itemsize: int) -> tuple[str, int, int] | None:
    """The span of a strided array of ``itemsize``-byte elements from ``start`` (strides in elements)."""
    if any(s == 0 for s in shape):
        return None
    low = high = 0
    for size, stride in zip(shape, strides):
        step = (size - 1) * stride * itemsize
        low, high = (low + step, high) if step < 0 else (low, high + step)
    return space, start + low, start + high + itemsize


class Extents:
    """Named memory spans an output must not overlap. Holding the arrays keeps them alive: their memory is never
    handed to another array meanwhile, so an overlap is the backend's doing."""

    def __init__(self) -> None:
        self._held: list[tuple[str, Any, tuple[str, int, int]]] = []

    def add(self, what: str, array: Any) -> Extents:
        """Hold ``array`` (an input, an earlier output, the harness's own) as ``what`` ("the input x")."""
        span = extent(array)
        if span is not None:
            self._held.append((what, array, span))
        return self

    def overlapping(self, array: Any) -> str | None:
        """What ``array`` shares memory with (the first held that it overlaps), or None."""
        span = extent(array)
        if span is None:
            return None
        space, low, high = span
        for what, _, (other_space, other_low, other_high) in self._held:
            if space == other_space and low < other_high and other_low < high:
                return what
        return None


def aliasing_message(backend_name: str, what: str, shared: str) -> str:
    """The one wording of an output that shares memory with ``shared``."""
    return (f"{backend_name}: the output {what} aliases {shared} (they share memory): a backend must return a new "
            f"array from every call; a persistent or cached output buffer makes two calls' results one, so that no "
            f"comparison of them (determinism, a timed call against the verified one) can see what either computed")
