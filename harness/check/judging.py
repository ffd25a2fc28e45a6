"""What every judge of an output shares: the reference it judges against (:func:`reference`, computed before the
backend is called, from the inputs as the harness made them) and the failure it raises (:func:`fail_beyond`: the
worst element beyond its bound, the row's conditioning, the known bug hypotheses that explain it)."""

from __future__ import annotations

import numpy as np

from normbench.check import fused, hypotheses, oracle
from normbench.check.worst import ConformanceError, Worst, worst_violation
from normbench.core.backend import Backend
from normbench.core.cases import Inputs


def reference(inputs: Inputs) -> oracle.Forward:
    """The oracle's forward of ``inputs`` (a fused case's: of its ``residual_out``, :func:`normbench.check.fused.normalized`).
    The oracle copies what it reads, so the reference shares no memory with the arrays a backend is handed:
    :func:`check_forward` and :func:`check_backward` compute it before calling the backend, from the inputs as the
    harness made them."""
    case = inputs.case
    x = fused.normalized(inputs).x
    return oracle.forward(x, case.normalized_shape, inputs.weight, inputs.bias, case.eps_value, case.norm,
                          case.weight_offset)


def describe(what: str, worst: Worst, inputs: Inputs, backend: Backend, ref: oracle.Forward | None,
             notes: tuple[str, ...] = ()) -> str:
    """A diagnosis: the worst element of ``what``, the bound, the row's conditioning
    (when ``ref`` is given and the index is a row's), and ``notes``, one line each."""
    lines = [
        f"{backend.name} {inputs.case.id} (seed {inputs.seed}): {what}[{worst.where}] = {worst.value:.9g}, "
        f"float64 reference {worst.reference:.9g}, |error| {worst.error:.3g} {worst.excess()}; {worst.out_of_bound()}",
    ]
    if ref is not None and ref.x.shape[0] and len(worst.index) >= 1:
        row = worst.index[0]
        lines.append(f"  row {row}: mean {ref.mean[row]:.6g}, sigma {np.sqrt(ref.var[row]):.3g}, "
                     f"eps {inputs.case.eps_value:g}, N {ref.x.shape[1]}, dtype {inputs.case.dtype}, "
                     f"params {inputs.case.params} ({inputs.case.affine})")
    lines += [f"  {note}" for note in notes]
    lines.append(f"  inputs: normbench.core.cases.make_inputs(<case {inputs.case.id}>, seed={inputs.seed})")
    return "\n".join(lines)


def fail_beyond(what: str, got, ref_values, bound, inputs, backend, ref, notes: tuple[str, ...] = (), *,
          dy: np.ndarray | None = None, bound_for=None) -> None:
    """Raise a :class:`ConformanceError` describing the worst element of ``what`` out of
    ``bound``, with the known bug hypotheses that explain it (computed only then: the
    passing path costs one comparison). ``bound_for(dtype)``: the same bound in another
    dtype's precision, for hypotheses about precision; ``dy``: for backward outputs."""
    __tracebackhide__ = True
    worst = worst_violation(got, ref_values, bound)
    if worst is not None:
        explanation = hypotheses.explain(what, got, bound, inputs, dy=dy, bound_for=bound_for,
                                         runtime_note=getattr(backend, "runtime_note", None),
                                         failing_ratio=worst.ratio)
        raise ConformanceError(describe(what, worst, inputs, backend, ref, explanation + tuple(notes)))


def context(backend: Backend, inputs: Inputs) -> str:
    return f"{backend.name} {inputs.case.id} (seed {inputs.seed}): "
