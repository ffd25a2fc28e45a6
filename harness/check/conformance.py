"""The forward checks: run a backend on a case and judge every output against the oracle under the error model.

Every check raises :class:`ConformanceError` with a diagnosis a kernel author
can act on: which output, the worst element (row, column), its value, the
reference, the bound, the case and seed (:mod:`normbench.check.judging`). The pytest plugin adds the one-line
reproduction command.

Every call of a backend (:func:`run_forward` here, ``run_backward`` in :mod:`normbench.check.backward`) hands it its
arrays through :class:`normbench.check.handover.Handover`, which keeps the harness's own copy of each and, right
after the call, fails a backend that wrote into one (``layer_norm modified its input x in place``) before anything
is computed from it. Which cases apply is :mod:`normbench.check.applicability`'s; what a test measures beyond its
verdict, :mod:`normbench.check.properties`'. The names of all of them are importable from here, as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from normbench.check import coherence, error_model, fused, oracle, quantized

# the names callers and plugins use through this module, in modules of their own jobs since (re-exported as X as X):
# applicability (which cases apply), handover (calling a backend), judging (the reference, a failure explained),
# properties (what a test measures beyond its verdict), backward (the backward checks)
from normbench.check.applicability import skip_reason as skip_reason
from normbench.check.backward import BackwardRun as BackwardRun
from normbench.check.backward import check_backward as check_backward
from normbench.check.backward import check_backward_deterministic as check_backward_deterministic
from normbench.check.backward import check_backward_values as check_backward_values
from normbench.check.backward import check_gradient as check_gradient
from normbench.check.backward import gradient_notes as gradient_notes
from normbench.check.backward import recent_backward as recent_backward
from normbench.check.backward import run_backward as run_backward
from normbench.check.handover import Handover, changed, extents_to_avoid, host_array, number_text
from normbench.check.handover import read_only as read_only
from normbench.check.handover import wrote_read_only as wrote_read_only
from normbench.check.judging import context, fail_beyond, reference
from normbench.check.judging import describe as describe
from normbench.check.properties import BATCH_INVARIANT, DETERMINISTIC, Properties, bit_differences, error_structure
from normbench.check.properties import CAUSES as CAUSES
from normbench.check.properties import DEFAULT_REQUIRED as DEFAULT_REQUIRED
from normbench.check.properties import ERROR_STRUCTURE as ERROR_STRUCTURE
from normbench.check.properties import MEASURED_DTYPES as MEASURED_DTYPES
from normbench.check.properties import PROPERTIES as PROPERTIES
from normbench.check.properties import RECORDED as RECORDED
from normbench.check.properties import histogram as histogram
from normbench.check.properties import same_bits as same_bits
from normbench.check.worst import ConformanceError, worst_violation
from normbench.core import operations
from normbench.core.backend import Backend
from normbench.core.cases import Case, Inputs


@dataclass
class ForwardRun:
    """What a backend produced for one case, as host arrays."""

    y: np.ndarray
    statistics: tuple[np.ndarray, np.ndarray] | None  # float64 (M,) each
    native: tuple  # the native (x, residual, weight, bias) handed to the backend (residual None: a plain one)
    originals: tuple  # copies of the host (x, residual, weight, bias), taken before the call (``Handover.pristine``)
    #: a fused operation's residual_out (the residual's dtype), else None
    residual_out: np.ndarray | None = None
    #: the backend's own output objects (y, a fused operation's residual_out), held so that a later call's outputs
    #: are checked not to share their memory (:mod:`normbench.check.aliasing`)
    outputs: tuple = ()


def forward_entry(backend: Backend, norm: operations.Operation, statistics: bool) -> str:
    """What :func:`run_forward` calls, for its messages: ``layer_norm``; with the statistics, the backend's own
    ``layer_norm_with_statistics`` where it defines one, else ``layer_norm`` and, where it defines them,
    ``layer_norm_statistics``."""
    if not statistics or not norm.statistics:
        return norm.entry
    both = f"{norm.name}_with_statistics"
    if getattr(type(backend), both, None) not in (None, getattr(Backend, both, None)):
        return both
    own = getattr(type(backend), norm.statistics_entry, None)
    return (norm.entry if own is None or own is getattr(Backend, norm.statistics_entry, None)
            else f"{norm.entry} or {norm.statistics_entry}")


def hand_over(backend: Backend, inputs: Inputs) -> tuple[Handover, tuple]:
    """The case's arrays handed over (:class:`Handover`) and the forward's ``args`` built on them: x (and a fused
    case's residual), normalized_shape, weight, bias, eps, and a quantized case's scale (its float32 value), qdtype and
    scale_ub; a parameter the operation does not take is left out."""
    case = inputs.case
    handed = Handover.of(backend, x=inputs.x, residual=inputs.residual, weight=inputs.weight, bias=inputs.bias)
    return handed, case.arguments({name: handed[name] for name in ("x", "residual", "weight", "bias")})


def run_forward(backend: Backend, inputs: Inputs, *, statistics: bool = True,
                earlier: ForwardRun | None = None) -> ForwardRun:
    """Convert inputs, run the forward once and bring results back: the operation's forward with its
    statistics (``Operation.forward_with_statistics``: LayerNorm's ``layer_norm_with_statistics``, y and the
    statistics from one call), or its entry point alone with ``statistics`` False (or an operation that
    saves none). The inputs are handed over on a :class:`Handover`: a backend that wrote into one fails
    here, before its outputs are read. Each output is a copy, and must not share memory with the inputs or
    with ``earlier``'s outputs (a run of the same case before this one)."""
    __tracebackhide__ = True
    case = inputs.case
    norm = operations.of(case.norm)
    handed, args = hand_over(backend, inputs)
    if statistics and not case.options:
        y, stats = handed.call(forward_entry(backend, norm, statistics), context(backend, inputs),
                               lambda a: norm.forward_with_statistics(backend, a), args)
    else:
        y, stats = handed.call(norm.entry, context(backend, inputs), lambda a: norm.forward(backend, a, case.options),
                               args), None
    backend.synchronize()
    handed.check(forward_entry(backend, norm, statistics), context(backend, inputs))
    avoid = extents_to_avoid(handed, earlier)
    if norm.fuses:
        y, out = fused_outputs(backend, case, norm, y)
        return ForwardRun(host_array("y", y, backend, case.shape, case.dtype, avoid=avoid), None, handed.native,
                          handed.pristine,
                          host_array("residual_out", out, backend, case.shape, case.residual_type, avoid=avoid),
                          outputs=(("y", y), ("residual_out", out)))
    y_host = host_array("y", y, backend, case.shape, case.dtype, avoid=avoid)
    if stats is None:
        return ForwardRun(y_host, None, handed.native, handed.pristine, outputs=(("y", y),))
    mean, rstd = (np.asarray(backend.to_numpy(s)) for s in stats)
    if mean.size != case.rows or rstd.size != case.rows:
        raise ConformanceError(f"{backend.name}: statistics have {mean.size} and {rstd.size} values, "
                               f"expected one per row ({case.rows})")
    as64 = (np.asarray(mean, dtype=np.float64).reshape(-1), np.asarray(rstd, dtype=np.float64).reshape(-1))
    return ForwardRun(y_host, as64, handed.native, handed.pristine, outputs=(("y", y),))


def fused_outputs(backend: Backend, case: Case, norm: operations.Operation, out) -> tuple:
    """A fused forward's ``(y, residual_out)``, or :class:`ConformanceError` saying what it returned instead."""
    __tracebackhide__ = True
    if not isinstance(out, (tuple, list)) or len(out) != len(norm.outputs):
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise ConformanceError(f"{backend.name} {case.id}: {norm.entry} returned {got}; it must return the tuple "
                               f"({', '.join(norm.outputs)}) (an in-place library: copy x and the residual first, "
                               f"docs/fused.md)")
    return tuple(out)


def check_residual_out(backend: Backend, inputs: Inputs, got: np.ndarray) -> None:
    """A fused forward's ``residual_out`` bit for bit: ``x + residual`` rounded once to the residual's dtype
    (``normbench.check.fused``), a NaN equal to any NaN."""
    __tracebackhide__ = True
    want = fused.residual_out(inputs)
    change = changed(want, np.ascontiguousarray(got))
    if change is None:
        return
    count, at = int(change.sum()), np.unravel_index(int(np.argmax(change)), change.shape)
    exact = fused.exact_sum(inputs)[at]
    dtype = inputs.case.residual_type
    truncated = "" if changed(fused.truncated_sum(inputs), np.ascontiguousarray(got)) is not None else (
        f"; every element is the exact sum truncated (rounded toward zero) to {dtype}: a conversion that drops the "
        f"low bits instead of rounding to nearest")
    raise ConformanceError(
        f"{context(backend, inputs)}residual_out[{', '.join(map(str, at))}] = {number_text(got[at])}, expected "
        f"{number_text(want[at])}: x + residual = {number_text(inputs.x[at])} + {number_text(inputs.residual[at])} "
        f"= {exact:.17g} "
        f"rounded once to {dtype} ({count:,} of {want.size:,} elements differ); residual_out is checked bit for bit, "
        f"one rounding of an exact sum (a sum not written, written unrounded, rounded twice, or of other operands)"
        f"{truncated}\n"
        f"  inputs: normbench.core.cases.make_inputs(<case {inputs.case.id}>, seed={inputs.seed})")


def check_forward_values(backend: Backend, inputs: Inputs, run: ForwardRun, ref: oracle.Forward | None = None) -> None:
    """y, and the statistics if exposed, within the error model's bounds (``ref``: the oracle's
    forward of ``inputs``, computed when not given); a fused case's ``residual_out`` bit for bit, first, and its y
    within the bound of the normalization of ``residual_out`` or of the unrounded sum (either convention is correct:
    ``normbench.check.fused``)."""
    __tracebackhide__ = True
    ref = reference(inputs) if ref is None else ref
    case = inputs.case
    y = oracle.rows_view(run.y, case.normalized_shape)
    if operations.of(case.norm).fuses:
        check_residual_out(backend, inputs, run.residual_out)
        bound = error_model.forward_bound(ref, case.dtype)
        if worst_violation(y, ref.y, bound) is None:
            return
        exact = fused.unrounded_reference(inputs)
        other = worst_violation(y, exact.y, error_model.forward_bound(exact, case.dtype))
        if other is None:  # it normalizes the unrounded sum: the other correct convention
            return
        note = (f"nor within the bound of the unrounded sum's normalization (the other correct convention): "
                f"y[{other.where}] off by {other.error:.3g}, {other.ratio:.3g}x its bound",)
        fail_beyond("y", y, ref.y, bound, fused.normalized(inputs), backend, ref, note,
              bound_for=lambda dtype: error_model.forward_bound(ref, dtype))
        return
    fail_beyond("y", y, ref.y, error_model.forward_bound(ref, case.dtype), inputs, backend, ref,
          bound_for=lambda dtype: error_model.forward_bound(ref, dtype))
    if run.statistics is not None:
        mean, rstd = run.statistics
        for what, got, want, bound in (("mean", mean, ref.mean, error_model.mean_bound),
                                       ("rstd", rstd, ref.rstd, error_model.rstd_bound)):
            fail_beyond(what, got[:, None], want[:, None], bound(ref, case.dtype)[:, None], inputs, backend, ref,
                  bound_for=lambda dtype, bound=bound: bound(ref, dtype)[:, None])


def check_deterministic(backend: Backend, inputs: Inputs, run: ForwardRun, properties: Properties | None = None) -> None:
    """``layer_norm`` on the same input gives the bits of ``run`` (``layer_norm_with_statistics``'s
    y: the same function, by the contract, or the same call twice): the property ``deterministic``,
    reported to ``properties`` (a failure when it is required, as it is by default)."""
    __tracebackhide__ = True
    properties = properties if properties is not None else Properties()
    again = run_forward(backend, inputs, statistics=False, earlier=run)  # copies, and not the first run's memory
    differs = bit_differences(run.y, again.y)
    if not differs and run.residual_out is not None:
        differs = bit_differences(run.residual_out, again.residual_out)
        differs = differs and f"{differs} (in residual_out)"
    detail = ""
    if differs:
        overridden = (inputs.case.norm == "layer_norm"
                      and type(backend).layer_norm_with_statistics is not Backend.layer_norm_with_statistics)
        detail = (f"the same input twice gave a different y: {differs}"
                  + ("; layer_norm_with_statistics must return layer_norm's y" if overridden else ""))
    properties.report(DETERMINISTIC, not differs, detail, backend, inputs)


def check_forward(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Every forward check of one case: inputs untouched (:class:`Handover`, right after the call, before
    anything is judged; the reference is computed before the call), values, statistics, shape and dtype; the property
    ``deterministic`` (reported to ``properties``; by default required); then, last,
    the structure of y's signed error (a common scale or offset per row, a rounding bias per case:
    :mod:`normbench.check.coherence`), so that a known deviation of that structure (the Triton
    interpreter's truncation to bfloat16) hides no other check. Given ``properties``, y's error structure
    (:func:`error_structure`) is recorded there first, before any check can fail."""
    __tracebackhide__ = True
    if operations.of(inputs.case.norm).epilogue is not None:  # a quantized output: judged code by code
        check_quantized_forward(backend, inputs, properties)
        return
    ref = reference(inputs)
    run = run_forward(backend, inputs)
    if properties is not None:
        properties.record(error_structure(ref, oracle.rows_view(run.y, inputs.case.normalized_shape),
                                          inputs.case.dtype))
    check_forward_values(backend, inputs, run, ref)
    check_deterministic(backend, inputs, run, properties)
    forward_coherence(backend, inputs, run.y, ref)


def forward_coherence(backend: Backend, inputs: Inputs, y: np.ndarray, ref: oracle.Forward) -> None:
    """y's signed error has no coherent structure (:func:`normbench.check.coherence.check_forward_coherence`); a
    fused operation's judged against the normalization of its stored sum, or of the unrounded one (either
    rounding of the sum is correct: docs/fused.md). The conformance suites and the throughput verifier both call
    this."""
    __tracebackhide__ = True
    if not operations.of(inputs.case.norm).fuses:
        coherence.check_forward_coherence(backend, inputs, y, ref)
        return
    try:
        coherence.check_forward_coherence(backend, fused.normalized(inputs), y, ref)
    except ConformanceError:  # a kernel that normalizes the unrounded sum is judged against that sum's normalization
        coherence.check_forward_coherence(backend, dataclasses.replace(inputs, x=fused.exact_sum(inputs)), y,
                                          fused.unrounded_reference(inputs))


# -- a quantized output (docs/quantized.md): run here, judged code by code by normbench.check.quantized ---------


def run_quantized(backend: Backend, inputs: Inputs) -> dict[str, np.ndarray]:
    """The backend's outputs of a quantized case as host arrays: ``q`` (x's shape, the format's host dtype),
    ``scales`` (computed: as many float32 per row as the operation's epilogue says) and ``residual_out`` (fused), its
    inputs handed over and checked untouched (:class:`Handover`)."""
    __tracebackhide__ = True
    case = inputs.case
    op = operations.of(case.norm)
    handed, args = hand_over(backend, inputs)
    out = handed.call(op.entry, context(backend, inputs), lambda a: op.forward(backend, a), args)
    backend.synchronize()
    handed.check(op.entry, context(backend, inputs))
    outputs = fused_outputs(backend, case, op, out) if len(op.outputs) > 1 else (out,)
    got = dict(zip(op.outputs, outputs))
    fmt = quantized.qformat(case.qdtype)
    avoid = handed.extents()
    host = {"q": host_array("q", got["q"], backend, case.shape, avoid=avoid)}
    if host["q"].dtype != fmt.host:
        raise ConformanceError(f"{backend.name}: q has dtype {host['q'].dtype}, expected {fmt.name}")
    if "scales" in got:
        per_row = op.epilogue.scales_per_row(case.hidden)
        host["scales"] = host_array("scales", got["scales"], backend, (case.rows * per_row,), "float32",
                                    exact_shape=False, avoid=avoid)
    if "residual_out" in got:
        host["residual_out"] = host_array("residual_out", got["residual_out"], backend, case.shape, case.residual_type,
                                          avoid=avoid)
    return host


def check_quantized_forward(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Every check of a quantized case: inputs untouched, residual_out bit for bit (fused), the codes (and the dynamic
    scales) as the module doc derives; then the property ``deterministic`` (q, scales and residual_out the same bits
    twice)."""
    __tracebackhide__ = True
    first = run_quantized(backend, inputs)
    if "residual_out" in first:
        check_residual_out(backend, inputs, first["residual_out"])
    head = context(backend, inputs)
    properties = properties if properties is not None else Properties()
    record = lambda codes: properties.record({"codes": codes})  # noqa: E731
    if operations.of(inputs.case.norm).epilogue.given:
        quantized.check_static(inputs, first["q"], head, record)
    else:
        quantized.check_dynamic(inputs, first["q"], first["scales"], head, record)
    again = run_quantized(backend, inputs)
    differs = next((f"{bit_differences(first[k], again[k])} (in {k})" for k in first
                    if bit_differences(first[k], again[k])), "")
    properties.report(DETERMINISTIC, not differs, differs and f"the same input twice gave different outputs: {differs}",
                      backend, inputs)


def check_rows_independent(backend: Backend, inputs: Inputs, properties: Properties | None = None) -> None:
    """Each of a few rows (the first, the middle, the last) computed alone agrees with the same row
    in the batch within twice the bound (each may deviate from the reference by one bound): a
    failure otherwise, always. The same runs, and one more (those rows in reverse order, a smaller
    batch in which each sits at another position), measure the property ``batch-invariant``: each
    row bit-identical to the batch's (NaN equal to NaN, whatever its payload), reported to
    ``properties`` (not required by default)."""
    __tracebackhide__ = True
    properties = properties if properties is not None else Properties()
    case = inputs.case
    if case.rows == 0:
        return
    ns = case.normalized_shape
    full = oracle.rows_view(run_forward(backend, inputs, statistics=False).y, ns)
    ref = reference(inputs)
    bound = error_model.forward_bound(ref, case.dtype)
    x_rows = inputs.x.reshape(-1, *ns)
    picked = sorted({0, case.rows // 2, case.rows - 1})

    def rows_of(order: list[int]) -> np.ndarray:
        sub = Inputs(Case(case.family, (len(order), *ns), ns, case.dtype, case.dist, case.eps, case.affine,
                          case.param_dtype, norm=case.norm), inputs.seed, x_rows[order].copy(), inputs.weight, inputs.bias)
        return oracle.rows_view(run_forward(backend, sub, statistics=False).y, ns)

    variants = []  # (how the row was computed, row, its result)
    for row in picked:
        variants.append((f"row {row} computed alone", row, rows_of([row])[0]))
    if len(picked) > 1:
        order = picked[::-1]
        batch = rows_of(order)
        variants += [(f"row {row} at position {pos} of a batch of {len(order)} (rows {order})", row, batch[pos])
                     for pos, row in enumerate(order)]
    differing = []
    for how, row, got in variants:
        worst = worst_violation(got, full[row], 2 * bound[row])
        if worst is not None:
            raise ConformanceError(
                f"{backend.name} {case.id} (seed {inputs.seed}): {how} differs from the same row in the batch "
                f"at column {worst.index[0]}: {worst.value:.9g} vs {worst.reference:.9g}, beyond twice the bound "
                f"{worst.bound:.3g}; a row's result must not depend on other rows")
        differs = bit_differences(full[row], got, nan_equal=True)
        if differs:
            differing.append(f"{how} differs from the batch's row {row}: {differs}")
    properties.report(BATCH_INVARIANT, not differing, "; ".join(differing), backend, inputs)
