"""The four floating dtypes normbench knows, by name: host types and roundoff.

One source of truth for dtype names (``"float64"``, ``"float32"``, ``"float16"``,
``"bfloat16"``), their NumPy host types (bfloat16 as ``ml_dtypes.bfloat16``) and
their unit roundoff u (half an ulp at 1.0), which the error model uses.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

_HOST = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}

#: unit roundoff u = 2**-(mantissa bits + 1)
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}
#: float64's unit roundoff 2**-53, the u of float64 arithmetic (the oracle's, and the
#: paper checks' own sums and products): ``UNIT_ROUNDOFF["float64"]`` under a short name
U64: float = UNIT_ROUNDOFF["float64"]

#: the spacing of subnormal numbers (the smallest positive value): below the
#: smallest normal, rounding errs by up to half of this, absolutely
SUBNORMAL_SPACING = {
    "float64": 2.0**-1074,
    "float32": 2.0**-149,
    "float16": 2.0**-24,
    "bfloat16": 2.0**-133,
}


def host_dtype(name: str) -> np.dtype:
    """The NumPy dtype that holds ``name`` on the host.

    >>> host_dtype("bfloat16").name
    'bfloat16'
    """
    try:
        return _HOST[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}") from None


def dtype_name(dtype: np.dtype) -> str:
    """The normbench name of a NumPy dtype (inverse of :func:`host_dtype`)."""
    for name, host in _HOST.items():
        if np.dtype(dtype) == host:
            return name
    raise ValueError(f"unsupported dtype {np.dtype(dtype)!s}; expected one of {', '.join(DTYPES)}")


def accumulation_roundoff(name: str) -> float:
    """u_acc: the roundoff of the accumulation a correct kernel uses for ``name``.

    float64 inputs must be computed in float64; every narrower dtype in float32
    (a kernel accumulating in half precision is a defect, not a tolerance).
    """
    return UNIT_ROUNDOFF["float64"] if name == "float64" else UNIT_ROUNDOFF["float32"]


def default_rms_eps(name: str) -> float:
    """The eps an RMSNorm uses when given ``eps=None``: what ``torch.nn.functional.rms_norm`` does,
    the machine epsilon of its computation dtype (float64's for float64 inputs, float32's for every
    narrower one). torch's documentation says ``torch.finfo(x.dtype).eps``, which for bfloat16 would
    be 2**-7, not 2**-23; its code (the decomposition in ``torch/_decomp/decompositions.py``: "if eps
    is None: ... torch.finfo(torch.float32).eps" for a float32 computation dtype) and its results on
    torch 2.13 (F.rms_norm of bfloat16 rows of 1e-3 gives 0.945, not 0.011) use the computation
    dtype's, and normbench follows the code, so that torch passes and a kernel ported from the
    documentation shows the difference.

    >>> default_rms_eps("bfloat16") == default_rms_eps("float32") == 2.0**-23, default_rms_eps("float64") == 2.0**-52
    (True, True)
    """
    return 2.0 * accumulation_roundoff(name)
