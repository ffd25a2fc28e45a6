"""Host NumPy arrays to torch tensors and back, keeping the layout; and the autograd plumbing.

Shared by the torch-based backends (``normbench.impls.torch_native``, ``normbench.impls.triton``): the tensor rebuilt on
the device has the host view's shape, strides, storage offset and stride-0
broadcasts (``normbench.kit.layout.decompose``), so layout bugs reach the kernel.
torch is passed in, never imported here at module level.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from normbench.kit.layout import decompose


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


def autograd_graph(torch: Any, layer_norm: Any, x: Any, normalized_shape, weight: Any, bias: Any, eps: float | None):
    """Run ``layer_norm`` (``F.layer_norm``, our Triton autograd function, or an RMSNorm called with the
    same arguments and bias None) on leaves that require grad: ``(y, leaves)``, the graph ready for
    :func:`gradients` (None leaves where weight or bias is None)."""
    leaves = [t.detach().requires_grad_(True) if t is not None else None for t in (x, weight, bias)]
    with torch.enable_grad():
        y = layer_norm(leaves[0], normalized_shape, leaves[1], leaves[2], eps)
    return y, leaves


def gradients(torch: Any, y: Any, leaves: list, dy: Any, retain_graph: bool = False) -> tuple:
    """``(dx, dweight, dbias)`` of ``y`` against ``dy`` (None where a leaf is None); ``retain_graph``
    keeps the graph for another call (a backward timed alone, many times over one forward)."""
    grads = iter(torch.autograd.grad(y, [t for t in leaves if t is not None], dy, retain_graph=retain_graph))
    return tuple(next(grads) if t is not None else None for t in leaves)


class AutogradBackward:
    """The backward of a torch-based backend through autograd, for LayerNorm and RMSNorm: what a PyTorch user
    runs. A backend class lists it before :class:`normbench.Backend` and gives ``self.torch`` and the graph,
    ``_graph(x, normalized_shape, weight, bias, eps)`` (and, with RMSNorm, ``_rms_graph(x, normalized_shape,
    weight, eps)``), each ``(y, leaves)`` from :func:`autograd_graph` on its own forward; this gives the
    backward, the training step, and the backward prepared for timing alone (the forward and the graph built
    first, the callable only differentiates, graph retained). Used by the ``torch`` and ``triton`` backends and
    by the torch-based example plugins."""

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self.forward_backward(dy, x, normalized_shape, weight, bias, eps)[1]

    def prepare_backward(self, dy, x, normalized_shape, weight, bias, eps):
        y, leaves = self._graph(x, normalized_shape, weight, bias, eps)
        return lambda: gradients(self.torch, y, leaves, dy, retain_graph=True)

    def forward_backward(self, dy, x, normalized_shape, weight, bias, eps):
        y, leaves = self._graph(x, normalized_shape, weight, bias, eps)
        return y.detach(), gradients(self.torch, y, leaves, dy)

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        return self.rms_norm_forward_backward(dy, x, normalized_shape, weight, eps)[1]

    def prepare_rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
        y, leaves = self._rms_graph(x, normalized_shape, weight, eps)
        return lambda: gradients(self.torch, y, leaves, dy, retain_graph=True)[:2]

    def rms_norm_forward_backward(self, dy, x, normalized_shape, weight, eps):
        y, leaves = self._rms_graph(x, normalized_shape, weight, eps)
        return y.detach(), gradients(self.torch, y, leaves, dy)[:2]


#: torch's own intra-op thread count, read before normbench first changed it
_LIBRARY_THREADS: list[int] = []


def set_threads(torch: Any, threads: int | None) -> int:
    """torch's CPU intra-op threads set to ``threads`` (None: torch's own count, as it was before
    normbench first set it); the count now in effect. Process-wide, as ``torch.set_num_threads`` is."""
    if not _LIBRARY_THREADS:
        _LIBRARY_THREADS.append(torch.get_num_threads())
    wanted = _LIBRARY_THREADS[0] if threads is None else threads
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return torch.get_num_threads()
