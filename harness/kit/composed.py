"""Quantized entry points composed from a backend's own parts, written once for every backend that asks.

A backend whose library has no fused normalize-and-quantize kernel can still be judged on the quantized
operations as its users compose them: its normalization's y, then a quantizer. Subclass :class:`QuantizedFromParts`
and define the quantizer (:meth:`~QuantizedFromParts.quantize_given` for a given scale,
:meth:`~QuantizedFromParts.quantize_computed` for scales the kernel computes); every quantized operation
(``normbench.core.operations``: ``*_quant``, ``*_dynamic_quant``) whose base the backend declares and whose entry
point it does not write itself gets one, composed by the operation's parts: the base operation's entry point
(:meth:`~QuantizedFromParts.quantizable`: override it to quantize another y, the NumPy reference's float64 one), y
quantized, and the base's other outputs (a fused operation's ``residual_out``) after the codes (and scales).

Such an entry point is a composition, not the library's own kernel: say so in the backend's ``description``.

>>> import numpy as np
>>> class Rounding(QuantizedFromParts):
...     def rms_norm(self, x, normalized_shape, weight, eps):
...         return x
...     def quantize_given(self, y, scale, qdtype):
...         return np.rint(y / scale)
>>> Rounding().rms_norm_quant(np.array([[1.0, 2.6]]), (2,), None, None, 0.5, "int8")
array([[2., 5.]])
>>> import inspect; str(inspect.signature(Rounding.rms_norm_quant))
'(self, x, normalized_shape, weight, eps, scale, qdtype)'
"""

from __future__ import annotations

import inspect
from typing import Any

from normbench.core import operations


class QuantizedFromParts:
    """The quantized operations' entry points from the base operation's and a quantizer (the module doc)."""

    def quantizable(self, base: operations.Operation, args: tuple) -> tuple[Any, tuple]:
        """``(y, rest)``: the y to quantize and the base operation's other outputs, from its entry point on ``args``."""
        out = base.forward(self, args)
        return (out[0], tuple(out[1:])) if len(base.outputs) > 1 else (out, ())

    def quantize_given(self, y: Any, scale: float, qdtype: str) -> Any:
        """The codes of ``y`` for one given scale: ``saturate(round_to_nearest_even(y / scale))`` in ``qdtype``."""
        raise NotImplementedError(f"{type(self).__name__} defines no quantize_given(y, scale, qdtype)")

    def quantize_computed(self, y: Any, normalized_shape: tuple[int, ...], qdtype: str, scale_ub: float | None
                          ) -> tuple[Any, Any]:
        """``(codes, scales)`` of ``y`` with one scale per row computed from its absolute maximum (docs/quantized.md)."""
        raise NotImplementedError(f"{type(self).__name__} defines no quantize_computed(y, normalized_shape, qdtype, "
                                  f"scale_ub)")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for op in operations.OPERATIONS:
            if op.epilogue is not None and not hasattr(cls, op.entry):  # one it writes itself, or inherits, is kept
                setattr(cls, op.entry, _composed(op))


def _composed(op: operations.Operation):
    """``op``'s entry point: the base's, y quantized as ``op``'s epilogue says, the base's other outputs after."""
    base = operations.of(op.quantizes)
    epilogue = op.epilogue

    def entry(self, *args):
        values = dict(zip(op.params, args))
        y, rest = self.quantizable(base, base.arguments({p: values[p] for p in base.params}))
        if epilogue.given:
            codes = (self.quantize_given(y, values["scale"], values["qdtype"]),)
        else:
            codes = tuple(self.quantize_computed(y, values["normalized_shape"], values["qdtype"], values["scale_ub"]))
        out = codes + rest
        return out[0] if len(out) == 1 else out

    entry.__name__ = entry.__qualname__ = op.entry
    entry.__doc__ = f"{op.signature()}: composed, {base.entry}'s y quantized ({op.label})"
    entry.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in op.params])
    return entry
