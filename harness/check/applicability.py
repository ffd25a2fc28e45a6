"""Which cases apply to a backend: what it declares (operations, dtypes, strided arrays, a backward, options, per-head
weights), its documented limits per operation (:class:`normbench.core.backend.Limits`) and the elements it affords.
A case outside them is skipped with the reason, before any call; never failed."""

from __future__ import annotations

from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case


def skip_reason(backend: Backend, case: Case, *, backward: bool = False) -> str | None:
    """Why ``case`` does not apply to ``backend`` (None when it does)."""
    missing = operations.missing_reason(backend, case.norm)
    if missing:
        return missing
    for dtype in dict.fromkeys((case.dtype, case.params)):
        if dtype not in backend.dtypes:
            return f"backend {backend.name!r} does not support {dtype} (it declares {', '.join(backend.dtypes)})"
    if case.layout != "contiguous" and not backend.strided:
        return f"backend {backend.name!r} has no strided arrays (strided = False), so layout {case.layout} does not apply"
    if case.dy_broadcast and not backend.strided:
        return (f"backend {backend.name!r} has no strided arrays (strided = False), so a stride-0 (broadcast) dy "
                f"does not apply")
    if backward and not backend.has_backward:
        return f"backend {backend.name!r} has no backward (has_backward = False)"
    option_problem = operations.of(case.norm).option_problem(backend, case.options, backward)
    if option_problem:
        return option_problem
    if case.per_head and not backend.per_head_weights:
        return (f"backend {backend.name!r} takes a weight of normalized_shape only (per_head_weights = False), so one "
                f"weight per head, of shape {case.weight_shape}, does not apply")
    limit_problem = backend.limits_for(case.norm).case_problem(
        len(case.shape), case.eps_value, case.layout, case.dy_broadcast, case.hidden, dtype=case.dtype,
        residual_dtype=case.residual_type, param_dtype=case.params if case.affine != "none" else None,
        qdtype=case.qdtype, scale_ub=case.scale_ub, normalized_dims=len(case.normalized_shape))
    if limit_problem:
        return f"outside backend {backend.name!r}'s documented limits: {limit_problem}"
    limit = backend.max_elements
    if limit is not None and case.rows * case.hidden > limit:
        return (f"case has {case.rows * case.hidden:,} elements, more than backend {backend.name!r} affords on "
                f"{backend.device} (max_elements = {limit:,})")
    return None
