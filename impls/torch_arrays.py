"""Host NumPy arrays to torch tensors and back, keeping the layout.

Shared by the torch-based backends (``normbench.impls.torch_native``, ``normbench.impls.triton``): the tensor rebuilt on
the device has the host view's shape, strides, storage offset and stride-0
broadcasts (``normbench.layout.decompose``), so layout bugs reach the kernel.
torch is passed in, never imported here at module level.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from normbench.layout import decompose


def from_host(torch: Any, host: np.ndarray, device: Any) -> Any:
    """``host`` (bfloat16 as ``ml_dtypes.bfloat16``) as a tensor on ``device`` with the same layout."""
    flat, shape, strides, offset = decompose(host)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only (broadcast) buffers
        if flat.dtype.name == "bfloat16":
            base = torch.from_numpy(flat.view(np.uint16)).view(torch.bfloat16)
        else:
            base = torch.from_numpy(flat)
    return base.to(device, copy=True).as_strided(shape, strides, offset)


def to_host(torch: Any, tensor: Any) -> np.ndarray:
    """A tensor back as a NumPy array (bfloat16 as ``ml_dtypes.bfloat16``)."""
    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16).reshape(t.shape)
    return t.numpy()
