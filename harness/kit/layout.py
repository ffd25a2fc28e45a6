"""Describe a NumPy view as (buffer, shape, strides, offset) in elements.

Strided backends use this in ``asarray`` to rebuild the same view on their own
device, so transposed, sliced, offset and stride-0 inputs reach the kernel as
they are (the layout bugs of NUMERICS.md, class 9).
"""

from __future__ import annotations

import numpy as np


def _owner(a: np.ndarray) -> np.ndarray:
    """The array that owns a view's memory (through slices, transposes and broadcasts;
    ``as_strided`` and ``broadcast_to`` put a small wrapper object between the two)."""
    while True:
        base = a.base
        if isinstance(base, np.ndarray):
            a = base
        elif base is not None and isinstance(getattr(base, "base", None), np.ndarray):
            a = base.base
        else:
            return a


def decompose(view: np.ndarray) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], int]:
    """``(flat, shape, strides, offset)`` with ``flat`` a contiguous 1-D buffer such that
    ``as_strided(flat, shape, strides, offset)`` (strides and offset in elements) is ``view``.

    >>> import numpy as np
    >>> base = np.arange(12.0).reshape(3, 4)
    >>> flat, shape, strides, offset = decompose(base[1:, ::2])
    >>> shape, strides, offset
    ((2, 2), (4, 2), 4)
    """
    view = np.asarray(view)
    item = view.itemsize
    owner = _owner(view)
    if (owner.dtype.itemsize != item or not owner.flags.c_contiguous
            or any(s < 0 or s % item for s in view.strides)):
        flat = np.ascontiguousarray(view).reshape(-1)
        strides = tuple(int(s) for s in np.ascontiguousarray(view).strides)
        return flat, view.shape, tuple(s // item for s in strides), 0
    flat = owner.reshape(-1).view(view.dtype)
    offset_bytes = view.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    return flat, view.shape, tuple(int(s) // item for s in view.strides), int(offset_bytes) // item
