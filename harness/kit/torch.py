"""The kit for torch-based backends: host NumPy arrays to torch tensors and back, keeping the layout
(:func:`from_host`, :func:`to_host`), torch's thread count (:func:`set_threads`), and
:class:`AutogradBackend`, the base of a backend whose backward is torch autograd's.

Public (docs/writing-a-backend.md): normbench's own ``torch`` and ``triton`` backends use it as the
torch-based example plugins do. A tensor rebuilt on the device has the host view's shape, strides,
storage offset and stride-0 broadcasts (:func:`normbench.kit.layout.decompose`), so layout bugs reach
the kernel. torch is passed in, never imported here at module level.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from normbench.core import operations
from normbench.core.backend import Backend
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
    """A tensor back as a NumPy array (bfloat16 as ``ml_dtypes.bfloat16``, float8 as ``ml_dtypes.float8_e4m3fn`` and
    ``float8_e5m2``)."""
    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16).reshape(t.shape)
    float8 = {getattr(torch, name, None): name for name in ("float8_e4m3fn", "float8_e5m2")}
    if t.dtype in float8:
        import ml_dtypes

        return t.contiguous().view(torch.uint8).numpy().view(getattr(ml_dtypes, float8[t.dtype])).reshape(t.shape)
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


class AutogradBackend(Backend):
    """A torch-based backend whose backward is autograd's: what a PyTorch user runs. A subclass sets
    ``self.torch`` (the torch module, in ``__init__``) and defines its operations' entry points; this base
    gives their backward entry points (``layer_norm_backward``, ``rms_norm_backward``), the training step
    and the backward prepared for timing alone (the forward and the graph built first, the callable only
    differentiates, the graph retained), each through :meth:`graph`; a fused operation's backward
    (``add_rms_norm_backward``) differentiates its own forward at ``x = residual_out`` (:meth:`fused_backward`).
    The graph is the entry point's own
    forward unless :meth:`autograd_forward` says otherwise (a Triton backend whose entry point launches
    its kernel directly differentiates its autograd function instead). Used by the ``torch`` and
    ``triton`` backends and by the torch-based example plugins."""

    #: its work runs on torch's current CUDA stream: CUDA events time it on a GPU
    timed_by_cuda_events = True

    backward_includes_forward = True  # autograd: the graph comes from a forward (prepare_backward separates them)

    def autograd_forward(self, op: str, args: tuple, **options: Any) -> Any:
        """The forward of ``op`` that autograd differentiates, on ``args`` whose arrays require grad (and a case's
        keyword ``options``): by default the operation's entry point."""
        return getattr(self, op)(*args, **options)

    def graph(self, op: str, args: tuple, wrt: tuple[str, ...] | None = None, **options: Any) -> tuple[Any, list]:
        """Run :meth:`autograd_forward` on leaves that require grad: ``(y, leaves)``, the graph ready for
        :func:`gradients` (a None leaf for an absent weight or bias), leaves in the gradients' order (``wrt``: the
        parameters they are, default the operation's ``differentiable``); ``options``: a case's keyword options
        (RMSNorm's ``weight_offset``), handed to the forward only when given."""
        operation = operations.of(op)
        args = list(args)
        leaves = []
        for name in wrt or operation.differentiable:
            i = operation.params.index(name)
            leaf = None if args[i] is None else args[i].detach().requires_grad_(True)
            args[i] = leaf
            leaves.append(leaf)
        with self.torch.enable_grad():
            y = (self.autograd_forward(op, tuple(args), **options) if options
                 else self.autograd_forward(op, tuple(args)))
        return y, leaves

    def step_graph(self, op: str, args: tuple) -> tuple[Any, list]:
        """The graph a training step (and a backward prepared for timing) differentiates, on the forward's ``args``:
        :meth:`graph`; a fused operation's against its residual in x's place, whose gradient is dsum in the
        residual's dtype, what ``add_rms_norm_backward`` returns (x's is the same sum cast to x's dtype by the add's
        backward: with a float32 residual and half x, not dsum)."""
        operation = operations.of(op)
        if not operation.fuses:
            return self.graph(op, args)
        return self.graph(op, args, wrt=("residual",) + operation.differentiable[1:])

    def prepare_backward(self, op, args, cotangents):
        y, leaves = self.step_graph(op, args)
        return lambda: self._differentiate(y, leaves, cotangents, retain_graph=True)

    def forward_backward(self, op, args, cotangents):
        y, leaves = self.step_graph(op, args)
        grads = self._differentiate(y, leaves, cotangents)
        return (tuple(o.detach() for o in y) if isinstance(y, (tuple, list)) else y.detach()), grads

    def _differentiate(self, outputs: Any, leaves: list, cotangents: tuple, retain_graph: bool = False) -> tuple:
        """The gradients of ``outputs`` (one tensor, or a fused operation's ``(y, residual_out)``, each cotangent cast
        to its output's dtype) against ``cotangents``, one per leaf (None for a None leaf)."""
        if not isinstance(outputs, (tuple, list)):
            return gradients(self.torch, outputs, leaves, cotangents[0], retain_graph)
        grads = iter(self.torch.autograd.grad(list(outputs), [t for t in leaves if t is not None],
                                              [c.to(o.dtype) for o, c in zip(outputs, cotangents)],
                                              retain_graph=retain_graph))
        return tuple(next(grads) if t is not None else None for t in leaves)

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        return self.forward_backward("layer_norm", (x, normalized_shape, weight, bias, eps), (dy,))[1]

    def rms_norm_backward(self, dy, x, normalized_shape, weight, eps, **options):
        """RMSNorm's backward; ``options``: its keyword options (``weight_offset``), where the forward takes them."""
        if not options:
            return self.forward_backward("rms_norm", (x, normalized_shape, weight, eps), (dy,))[1]
        y, leaves = self.graph("rms_norm", (x, normalized_shape, weight, eps), **options)
        return self._differentiate(y, leaves, (dy,))

    def fused_backward(self, op: str, cotangents: tuple, residual_out: Any, rest: tuple, **options: Any) -> tuple:
        """A fused operation's backward through autograd: its own forward on ``x = residual_out`` and a zero
        residual (their sum is residual_out, exactly), differentiated against ``(dy, dresidual_out)``: x's gradient
        is ``dresidual_out + dx``, dsum (``rest``: the arguments after x and the residual)."""
        outputs, leaves = self.graph(op, (residual_out, self.torch.zeros_like(residual_out), *rest), **options)
        return self._differentiate(outputs, leaves, cotangents)

    def add_layer_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, bias, eps):
        return self.fused_backward("add_layer_norm", (dy, dresidual_out), residual_out,
                                   (normalized_shape, weight, bias, eps))

    def add_rms_norm_backward(self, dy, dresidual_out, residual_out, normalized_shape, weight, eps, **options):
        return self.fused_backward("add_rms_norm", (dy, dresidual_out), residual_out, (normalized_shape, weight, eps),
                                   **options)


class AutogradBackward(AutogradBackend):
    """normbench 0.2's autograd mixin, kept for plugins that still use it: its subclasses give their graphs as
    ``_graph(x, normalized_shape, weight, bias, eps)`` and ``_rms_graph(x, normalized_shape, weight, eps)``,
    each ``(y, leaves)`` from :func:`autograd_graph`. New code subclasses :class:`AutogradBackend`."""

    def graph(self, op, args, wrt=None):
        own = {"layer_norm": "_graph", "rms_norm": "_rms_graph"}.get(op)
        if own is not None and callable(getattr(self, own, None)):
            y, leaves = getattr(self, own)(*args)
            return y, leaves[:len(operations.of(op).differentiable)]
        return super().graph(op, args, wrt)


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
