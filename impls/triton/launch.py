"""Launch wrappers: check tensors, pick a configuration (``heuristics``), run the kernels.

Plain tensors in and out, no autograd (``normbench.impls.triton.autograd`` adds it).
LayerNorm: :func:`forward` returns ``(y, mean, rstd)``; :func:`backward` takes them back.
RMSNorm: :func:`rms_forward` returns ``(y, rstd)``; :func:`rms_backward` takes rstd back.
The residual add fused in: :func:`add_forward` returns ``(y, residual_out, mean, rstd)`` and
:func:`add_backward` takes ``dresidual_out`` and the forward's ``residual_out`` and returns
``(dsum, dweight, dbias)``; :func:`add_rms_forward` and :func:`add_rms_backward` the same for RMSNorm.
The output quantized for the next matrix multiply (docs/quantized.md): :func:`quant_forward` returns the codes
``q`` of ``y / scale`` (a float8 or int8 tensor) and, with the residual add fused in, ``residual_out``;
:func:`dynamic_quant_forward` the codes, one float32 scale per row, and residual_out.
All go through the same checks, layouts, heuristics and launch code (``_forward``, ``_backward``);
only the kernel names and their argument lists differ.

Layouts. x (and dy) are viewed as ``(rows, N)`` with ``reshape``, which keeps
any view whose leading dims collapse to one row stride (slices such as
``x[::2]``, ``x[:, 1:]``, ``x[1:]``, and stride-0 broadcasts of dy) and copies
the rare layouts whose leading dims do not. The kernels then read rows through
that stride. Columns must be contiguous for 16-byte vector loads, so an input
whose last dim is strided (a transposed x) is copied with ``.contiguous()``
first: on a GPU that copy is itself a fast transpose. y and dx are always new
contiguous tensors with x's shape, as ``torch.nn.functional.layer_norm`` returns.

Devices. Every tensor must be on the device the kernels run on: CUDA when they
are compiled, CPU under the Triton interpreter (``normbench.kit.triton``);
anything else is a ``ValueError`` that says where to move it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
from collections.abc import Iterator, Sequence

import torch

from normbench.impls.triton import heuristics
from normbench.kit.triton import ensure_mode

#: the dtypes the kernels read and write (statistics in fp32, fp64 for float64)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@functools.lru_cache(maxsize=1)
def _kernels():
    """The kernel modules, imported on the first launch (after the mode is settled)."""
    from normbench.impls.triton import backward_kernels, forward_kernels

    return forward_kernels, backward_kernels


def eps_bits(eps: float) -> int:
    """``eps`` as the bits of a float64, the way the kernels receive it."""
    return struct.unpack("<q", struct.pack("<d", float(eps)))[0]


def statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation (and saved statistics) dtype for inputs of ``dtype``."""
    return torch.float64 if dtype == torch.float64 else torch.float32


#: under the interpreter, launch with a GPU's configuration of this many SMs (set by
#: ``normbench.perf.traffic.emulated_gpu`` to count a GPU launch's traffic)
EMULATED_SM_COUNT_ENV = "NORMBENCH_EMULATED_SM_COUNT"


def _target(device: torch.device) -> heuristics.Target:
    """What the heuristics need to know about the device."""
    if device.type != "cuda":
        emulated = os.environ.get(EMULATED_SM_COUNT_ENV, "").strip()
        return heuristics.Target(int(emulated)) if emulated else heuristics.Target.interpreted()
    return _cuda_target(device)


@functools.cache
def _cuda_target(device: torch.device) -> heuristics.Target:
    """A CUDA device's (queried once, at its first launch)."""
    return heuristics.Target(torch.cuda.get_device_properties(device).multi_processor_count)


def _check_tensor(what: str, t: torch.Tensor, device: torch.device | None, label: str = "LayerNorm") -> None:
    mode = ensure_mode()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        raise TypeError(f"{what} has dtype {t.dtype}; the Triton {label} kernels support {names}")
    if t.device.type != mode.torch_device:
        fix = "x.cpu()" if mode.interpreter else "x.cuda()"
        raise ValueError(f"{what} is on {t.device}, but the Triton kernels run on {mode.description} here "
                         f"({mode.reason}); move it with {fix.replace('x', what, 1)}")
    if device is not None and t.device != device:
        raise ValueError(f"{what} is on {t.device} but x is on {device}; put every tensor on one device")


def check_inputs(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                 bias: torch.Tensor | None, label: str = "LayerNorm") -> tuple[int, ...]:
    """Validate types, dtypes, devices and shapes; returns normalized_shape as a tuple."""
    _check_tensor("x", x, None, label)
    shape = tuple(int(d) for d in ((normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape))
    if not shape or min(shape) < 1 or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"normalized_shape {shape} must be non-empty, positive, and x's trailing dims "
                         f"(x has shape {tuple(x.shape)})")
    for what, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            _check_tensor(what, p, x.device, label)
            if tuple(p.shape) != shape:
                raise ValueError(f"{what} has shape {tuple(p.shape)}; it must have normalized_shape {shape}")
    return shape


def rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as (rows, n) with contiguous columns (a view when possible; see the module doc)."""
    rows = t.reshape(-1, n)
    if n > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    return rows


def _param(p: torch.Tensor | None) -> torch.Tensor | None:
    return None if p is None else p.reshape(-1).contiguous()


@contextlib.contextmanager
def _launching(device: torch.device) -> Iterator[None]:
    """Launch on ``device``; under the interpreter, keep NumPy quiet about NaN and Inf
    inputs (they are legitimate: they must stay in their rows; a row of NaN has no absmax)."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            yield
        return
    import warnings

    import numpy as np

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "All-NaN slice encountered", RuntimeWarning)
        yield


def forward(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
            bias: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the trailing ``normalized_shape`` dims: ``(y, mean, rstd)``, the
    statistics one per row in fp32 (fp64 for float64 x)."""
    return _forward(x, normalized_shape, weight, bias, eps, centered=True)


def rms_eps(eps: float | None, dtype: torch.dtype) -> float:
    """RMSNorm's eps: ``eps``, or for None ``normbench.core.dtypes.default_rms_eps`` (what
    ``torch.nn.functional.rms_norm`` uses: the accumulation dtype's machine epsilon)."""
    if eps is not None:
        return float(eps)
    from normbench.kit import default_rms_eps

    return default_rms_eps(str(dtype).removeprefix("torch."))


def rms_forward(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the trailing ``normalized_shape`` dims, ``y = x / sqrt(mean(x^2) + eps) * weight``:
    ``(y, rstd)``, rstd one per row in fp32 (fp64 for float64 x); ``eps=None`` as :func:`rms_eps`."""
    y, _, rstd = _forward(x, normalized_shape, weight, None, eps, centered=False)
    return y, rstd


def add_forward(x: torch.Tensor, residual: torch.Tensor, normalized_shape: Sequence[int],
                weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual`` (rounded once to the residual's dtype), then LayerNorm of it in x's
    dtype: ``(y, residual_out, mean, rstd)``, the statistics residual_out's, as :func:`forward` saves them."""
    y, mean, rstd, residual_out = _forward(x, normalized_shape, weight, bias, eps, centered=True, residual=residual)
    return y, residual_out, mean, rstd


def add_rms_forward(x: torch.Tensor, residual: torch.Tensor, normalized_shape: Sequence[int],
                    weight: torch.Tensor | None = None, eps: float | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual_out = x + residual``, then RMSNorm of it: ``(y, residual_out, rstd)`` (``eps`` as
    :func:`rms_forward`'s, of x's dtype)."""
    y, _, rstd, residual_out = _forward(x, normalized_shape, weight, None, eps, centered=False, residual=residual)
    return y, residual_out, rstd


def quant_forward(x: torch.Tensor, residual: torch.Tensor | None, normalized_shape: Sequence[int],
                  weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float | None, scale: float, qdtype: str,
                  centered: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LayerNorm (``centered``) or RMSNorm of x, or of ``residual_out = x + residual`` given a residual, its output
    stored as ``q = saturate(round_to_nearest_even(y / scale))`` in ``qdtype`` (``forward_kernels.QUANT_FORMATS``:
    float8_e4m3fn, float8_e5m2, int8; a float8 tensor or int8): ``(q, residual_out)``, residual_out None without a
    residual. ``scale`` is a positive finite float32."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite positive number (y is divided by it), got {scale!r}")
    q, _, residual_out = _quantized(x, residual, normalized_shape, weight, bias, eps, centered, qdtype, scale, None)
    return q, residual_out


def dynamic_quant_forward(x: torch.Tensor, residual: torch.Tensor | None, normalized_shape: Sequence[int],
                          weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float | None, qdtype: str,
                          scale_ub: float | None, centered: bool,
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`quant_forward` with one float32 scale per row, ``max(min(absmax(y_row), scale_ub) / qmax, 1 / (qmax *
    512))`` (``scale_ub`` None: no bound): ``(q, scales, residual_out)``, scales of x's leading shape."""
    if scale_ub is not None and not (isinstance(scale_ub, (int, float)) and scale_ub > 0):
        raise ValueError(f"scale_ub must be a positive number (the bound on a row's absmax) or None, got {scale_ub!r}")
    bound = math.inf if scale_ub is None else float(scale_ub)
    return _quantized(x, residual, normalized_shape, weight, bias, eps, centered, qdtype, None, bound)


def _quantized(x, residual, normalized_shape, weight, bias, eps, centered, qdtype, scale, scale_ub):
    """Either quantized forward: ``(q, scales or None, residual_out or None)``."""
    formats = _kernels()[0].QUANT_FORMATS
    if qdtype not in formats:
        raise ValueError(f"qdtype {qdtype!r} is not one the Triton kernels store; expected one of {', '.join(formats)}")
    quant = (float(scale), qdtype, False) if scale is not None else (scale_ub, qdtype, True)
    out = _forward(x, normalized_shape, weight, bias, eps, centered, residual, quant=quant)
    return out[0], out[-1], (out[3] if residual is not None else None)


def _check_like(what: str, t: torch.Tensor, x: torch.Tensor, like: str, label: str) -> None:
    """``t`` (the residual, dresidual_out) is a tensor of a supported dtype on x's device, of x's shape."""
    _check_tensor(what, t, x.device, label)
    if t.shape != x.shape:
        raise ValueError(f"{what} has shape {tuple(t.shape)}; it must have {like}'s shape {tuple(x.shape)}")


def _forward(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
             bias: torch.Tensor | None, eps: float | None, centered: bool, residual: torch.Tensor | None = None,
             quant: tuple[float, str, bool] | None = None):
    """Either forward: LayerNorm (``centered``: mean subtracted, bias) or RMSNorm (neither; mean None), of x or,
    given a ``residual``, of ``residual_out = x + residual``: ``(y, mean, rstd)``, and residual_out after them
    when a residual is given; given ``quant``, ``(scale, qdtype, False)`` or ``(scale_ub, qdtype, True)``, y is the
    codes of ``y / scale`` in qdtype, and the row scales (dynamic; else None) come last."""
    label = ("LayerNorm" if centered else "RMSNorm") if residual is None else ("add + LayerNorm" if centered
                                                                               else "add + RMSNorm")
    shape = check_inputs(x, normalized_shape, weight, bias, label)
    if residual is not None:
        _check_like("residual", residual, x, "x", label)
    if not centered:
        eps = rms_eps(eps, x.dtype)
    n = math.prod(shape)
    x2 = rows_view(x, n)
    m = x2.shape[0]
    acc = statistics_dtype(x.dtype if residual is None else torch.promote_types(x.dtype, residual.dtype))
    y = torch.empty((m, n), dtype=x.dtype if quant is None else getattr(torch, quant[1]), device=x.device)
    mean = torch.empty(m, dtype=acc, device=x.device) if centered else None
    rstd = torch.empty(m, dtype=acc, device=x.device)
    r2 = None if residual is None else rows_view(residual, n)
    residual_out = None if residual is None else torch.empty((m, n), dtype=residual.dtype, device=x.device)
    scales = torch.empty(m, dtype=torch.float32, device=x.device) if quant is not None and quant[2] else None
    if m:
        fk = _kernels()[0]
        cfg = heuristics.forward_config(m, n, acc.itemsize, _target(x.device))
        common = dict(HAS_WEIGHT=weight is not None, ACC=fk.accumulator(acc == torch.float64), BLOCK_N=cfg.block_n,
                      num_warps=cfg.num_warps)
        if centered:
            common["HAS_BIAS"] = bias is not None
            stats = (_param(weight), _param(bias), mean, rstd)
        else:
            stats = (_param(weight), rstd)
        name = ("layer_norm" if centered else "rms_norm") if residual is None else ("add_layer_norm" if centered
                                                                                   else "add_rms_norm")
        scale = ()
        out = y
        if quant is not None:  # the codes: a float8 tensor's bytes, or int8; the scale's (scale_ub's) bits after eps's
            name = f"{name}_dynamic_quant" if quant[2] else f"{name}_quant"
            scale, common["QUANT"] = (eps_bits(quant[0]),), fk.QUANT_FORMATS[quant[1]]
            out = y if y.dtype == torch.int8 else y.view(torch.uint8)
            if quant[2]:
                stats = (*stats, scales)
        looped, rows = getattr(fk, f"{name}_forward_looped"), getattr(fk, f"{name}_forward_rows")
        # the tensors, then the row strides: (x, y, ...stats, x's) or (x, residual, y, residual_out, ...stats, both)
        tensors, strides = ((x2, out), (x2.stride(0),)) if residual is None else (
            (x2, r2, out, residual_out), (x2.stride(0), r2.stride(0)))
        with _launching(x.device):
            if cfg.looped:
                looped[cfg.grid](*tensors, *stats, *strides, n, eps_bits(eps), *scale, **common)
            else:
                rows[cfg.grid](*tensors, *stats, *strides, m, n, eps_bits(eps), *scale, BLOCK_M=cfg.block_m, **common)
    lead = x.shape[:x.dim() - len(shape)]
    extra = () if quant is None else (None if scales is None else scales.view(lead),)
    if residual is None:
        return (y.view(x.shape), mean, rstd, *extra)
    return (y.view(x.shape), mean, rstd, residual_out.view(x.shape), *extra)


def _check_statistics(mean: torch.Tensor | None, rstd: torch.Tensor, rows: int, x: torch.Tensor,
                      inputs: torch.dtype) -> None:
    """mean and rstd are what a forward of ``inputs`` (its input dtype, promoted with the residual's) saved."""
    acc = statistics_dtype(inputs)
    for what, s in (("mean", mean), ("rstd", rstd)):
        if s is None and what == "mean":  # RMSNorm
            continue
        if s.dtype != acc or s.numel() != rows or s.device != x.device or not s.is_contiguous():
            raise ValueError(f"{what} must be the forward's saved statistics: {rows} contiguous {acc} values on "
                             f"{x.device}, got {s.numel()} {s.dtype} values on {s.device}")


def backward(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
             bias: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor, *, need_dx: bool = True,
             need_dweight: bool = True, need_dbias: bool = True,
             ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The vector-Jacobian product ``(dx, dweight, dbias)`` from the forward's saved
    ``mean`` and ``rstd``; None for what is absent (no weight/bias) or not needed."""
    return _backward(dy, x, normalized_shape, weight, bias, mean, rstd, need_dx, need_dweight, need_dbias)


def rms_backward(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                 rstd: torch.Tensor, *, need_dx: bool = True, need_dweight: bool = True,
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """RMSNorm's vector-Jacobian product ``(dx, dweight)`` from the forward's saved ``rstd``
    (:func:`rms_forward`); None for what is absent (no weight) or not needed."""
    dx, dw, _ = _backward(dy, x, normalized_shape, weight, None, None, rstd, need_dx, need_dweight, False)
    return dx, dw


def add_backward(dy: torch.Tensor, dresidual_out: torch.Tensor, residual_out: torch.Tensor,
                 normalized_shape: Sequence[int], weight: torch.Tensor | None, bias: torch.Tensor | None,
                 mean: torch.Tensor, rstd: torch.Tensor, *, need_dsum: bool = True, need_dweight: bool = True,
                 need_dbias: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """:func:`add_forward`'s vector-Jacobian product ``(dsum, dweight, dbias)``: ``dsum = dresidual_out + dx``
    (dx LayerNorm's at ``residual_out``, in its dtype), the gradient of both x and the residual."""
    return _backward(dy, residual_out, normalized_shape, weight, bias, mean, rstd, need_dsum, need_dweight,
                     need_dbias, dresidual_out)


def add_rms_backward(dy: torch.Tensor, dresidual_out: torch.Tensor, residual_out: torch.Tensor,
                     normalized_shape: Sequence[int], weight: torch.Tensor | None, rstd: torch.Tensor, *,
                     need_dsum: bool = True, need_dweight: bool = True,
                     ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """:func:`add_rms_forward`'s vector-Jacobian product ``(dsum, dweight)``."""
    dsum, dw, _ = _backward(dy, residual_out, normalized_shape, weight, None, None, rstd, need_dsum, need_dweight,
                            False, dresidual_out)
    return dsum, dw


def _backward(dy: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
              bias: torch.Tensor | None, mean: torch.Tensor | None, rstd: torch.Tensor, need_dx: bool,
              need_dweight: bool, need_dbias: bool, dresidual_out: torch.Tensor | None = None,
              ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Either backward: LayerNorm (``mean`` given) or RMSNorm (``mean`` None, no bias); given ``dresidual_out``,
    x is a fused forward's residual_out and the first gradient is ``dsum = dresidual_out + dx``."""
    label = "LayerNorm" if mean is not None else "RMSNorm"
    if dresidual_out is not None:
        label = f"add + {label}"
    shape = check_inputs(x, normalized_shape, weight, bias, label)
    like = "x" if dresidual_out is None else "residual_out"
    _check_like("dy", dy, x, like, label)
    if dresidual_out is not None:
        _check_like("dresidual_out", dresidual_out, x, like, label)
    n = math.prod(shape)
    x2, dy2 = rows_view(x, n), rows_view(dy, n)
    dres2 = None if dresidual_out is None else rows_view(dresidual_out, n)
    m = x2.shape[0]
    # a fused forward accumulated in x's and the residual's promoted dtype: dy has x's, residual_out the residual's
    _check_statistics(mean, rstd, m, x, x.dtype if dresidual_out is None else torch.promote_types(x.dtype, dy.dtype))
    need_dweight, need_dbias = need_dweight and weight is not None, need_dbias and bias is not None
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device) if need_dx else None
    param_grad = torch.empty if m else torch.zeros  # no rows: the sums are 0; else the reduction writes them
    dw = param_grad(n, dtype=weight.dtype, device=x.device) if need_dweight else None
    db = param_grad(n, dtype=bias.dtype, device=x.device) if need_dbias else None
    if m and (need_dx or need_dweight or need_dbias):
        _launch_backward(dy2, x2, _param(weight), mean, rstd, dx, dw, db, dres2)
    return (None if dx is None else dx.view(x.shape), None if dw is None else dw.view(shape),
            None if db is None else db.view(shape))


def _launch_backward(dy2: torch.Tensor, x2: torch.Tensor, w: torch.Tensor | None, mean: torch.Tensor | None,
                     rstd: torch.Tensor, dx: torch.Tensor | None, dw: torch.Tensor | None,
                     db: torch.Tensor | None, dres2: torch.Tensor | None = None) -> None:
    """Run the backward kernels on (rows, N) views; dx, dw, db are filled where not None.
    LayerNorm with ``mean``; RMSNorm without (``db`` is then None); the fused kernels with ``dres2``
    (dresidual_out: dx is then dsum)."""
    fk, bk = _kernels()
    m, n = x2.shape
    acc = rstd.dtype
    target = _target(x2.device)
    cfg = heuristics.backward_config(m, n, acc.itemsize, target, x2.element_size())
    partial = lambda out: None if out is None else torch.empty((cfg.programs, n), dtype=acc, device=x2.device)
    dw_partial, db_partial = partial(dw), partial(db)
    flags = dict(HAS_WEIGHT=w is not None, COMPUTE_DX=dx is not None, COMPUTE_DW=dw is not None,
                 ACC=fk.accumulator(acc == torch.float64), BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    if mean is not None:  # LayerNorm
        flags["COMPUTE_DB"] = db is not None
        name, stats, outputs = "layer_norm", (w, mean, rstd), (dx, dw_partial, db_partial)
    else:  # RMSNorm: no mean, no bias
        name, stats, outputs = "rms_norm", (w, rstd), (dx, dw_partial)
    if dres2 is None:
        tensors, strides = (dy2, x2), (dy2.stride(0), x2.stride(0))
    else:  # the fused kernels: dresidual_out after dy, its stride after dy's
        name = f"add_{name}"
        tensors, strides = (dy2, dres2, x2), (dy2.stride(0), dres2.stride(0), x2.stride(0))
    args = (*tensors, *stats, *outputs, *strides, m, n, cfg.tiles_per_program)
    with _launching(x2.device):
        if cfg.looped:
            getattr(bk, f"{name}_backward_looped")[(cfg.programs,)](*args, **flags)
        else:
            getattr(bk, f"{name}_backward_rows")[(cfg.programs,)](*args, BLOCK_M=cfg.block_m,
                                                                  PARTIALS_IN_MEMORY=cfg.partials_in_memory, **flags)
        if dw is not None or db is not None:  # one reduction kernel for both normalizations
            rc = heuristics.reduce_config(cfg.programs, n, target)
            bk.layer_norm_reduce_partials[rc.grid](dw_partial, db_partial, dw, db, cfg.programs, n,
                                                   COMPUTE_DW=dw is not None, COMPUTE_DB=db is not None,
                                                   ACC=flags["ACC"], BLOCK_P=rc.block_p, BLOCK_N=rc.block_n,
                                                   num_warps=rc.num_warps)
