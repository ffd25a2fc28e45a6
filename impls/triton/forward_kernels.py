"""Forward kernels: LayerNorm ``y = (x - mean) * rstd * weight + bias``, saving ``mean`` and
``rstd``; RMSNorm ``y = x * rstd * weight`` with ``rstd = 1/sqrt(mean(x^2) + eps)``, saving ``rstd``.

One body per path (``forward_rows``, ``forward_looped``) serves both: its ``CENTERED``
flag subtracts the mean (LayerNorm) or not (RMSNorm); the kernels, ``layer_norm_*`` and
``rms_norm_*``, are thin entry points that call it with their own arguments (RMSNorm has
no bias and no mean), so launches, traffic and compiler reports name what they compute.

Statistics accumulate in ``ACC`` (fp32; fp64 for float64 x), two-pass for LayerNorm: the
mean first, then the variance of the centred values, so large row means do
not cancel (the one-pass E[x^2] - E[x]^2 does). RMSNorm's mean(x^2) has nothing
to cancel: one pass. Masked (padded) lanes load 0 and are excluded from the
centred sum (they add 0 to x^2), so they never enter the statistics.

The fused operations (``add_layer_norm``, ``add_rms_norm``) run the same bodies with
``HAS_RESIDUAL``: each element's ``x + residual`` is formed in ACC (exact, or one rounding:
two half-precision or fp32 values summed in fp32, then rounded to the residual's dtype, is
one correct rounding, as fp32 has more than twice their precision plus two bits), stored
as ``residual_out`` in the residual's dtype, and the *stored* value is normalized: what the
unfused composition computes (docs/fused.md: either convention passes).

The quantized operations (``*_quant``: docs/quantized.md) run the same bodies again with ``QUANT``
(:data:`QUANT_FORMATS`): y, still in ACC, is multiplied by the float32 scale's correctly rounded reciprocal and
stored as its code in the format (:func:`quantize`: saturate, then round to nearest even, in integer and fp32
arithmetic that is exact), one byte per element, where the plain kernels store y.

Layout: x is read through a row stride (``X + row*stride_x_row + col``; any
stride, 0 included); its columns are contiguous (the wrapper in
``normbench.impls.triton.launch`` copies other layouts). y is written contiguous.
Row offsets are 64-bit, so rows*N above 2**31 is safe.

Importing this module decorates the kernels, so it first settles compiled vs
interpreted kernels (``normbench.kit.triton``); the launch wrappers import it
lazily, on the first launch.
"""

from normbench.kit.triton import ensure_mode

ensure_mode()  # before @triton.jit below decides compiled vs interpreted

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


def accumulator(fp64: bool) -> tl.dtype:
    """The ACC dtype: fp64 for float64 inputs, fp32 for every narrower one."""
    return tl.float64 if fp64 else tl.float32


@triton.jit
def float_from_bits(bits, ACC: tl.constexpr):
    """eps (and a quantized output's scale) travels as the bits of a float64 in an integer argument: Triton passes
    Python floats as fp32 (and the interpreter keeps them Python floats, rounding float literals to fp32), which
    would round eps for float64 inputs."""
    return bits.to(tl.int64).to(tl.float64, bitcast=True).to(ACC)


@triton.jit
def divide(a, b, ACC: tl.constexpr):
    """``a / b`` correctly rounded: fp32 ``/`` compiles to ``div.full.f32`` on NVIDIA GPUs, within 2 ulp. For the
    statistics that is too coarse on constant rows: a mean 1 ulp off at 2e4 (0.002) leaves a variance of 4e-6
    beside eps 1e-5, rstd 15% off and xhat 0.5 where it is 0. ``b``: a count (``N`` may be the constant 1)."""
    if ACC == tl.float64:
        quotient = a / b  # fp64 division is IEEE-rounded
    else:
        quotient = tl.div_rn(a, tl.zeros_like(a) + b)
    return quotient


@triton.jit
def rstd_from_var(var, eps, ACC: tl.constexpr):
    """``1 / sqrt(var + eps)`` with correctly rounded operations: the GPUs' fast
    fp32 sqrt and division err by a few ulp, more than the statistics' error
    model allows on constant rows. It is one value per row, so it costs nothing."""
    if ACC == tl.float64:
        rstd = 1.0 / tl.sqrt(var + eps)  # fp64 sqrt and division are IEEE-rounded
    else:
        rstd = tl.div_rn(1.0, tl.sqrt_rn(var + eps))
    return rstd


@triton.jit
def apply_affine(xhat, W, B, cols, col_mask, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                 ACC: tl.constexpr):
    """``xhat * weight + bias`` (either may be absent), parameters read at ``cols``."""
    y = xhat
    if HAS_WEIGHT:
        y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(ACC)
    if HAS_BIAS:
        y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(ACC)
    return y


#: the quantized formats the kernels store (``QUANT``), by ``normbench.core.quantized`` name; 0: y itself
QUANT_FORMATS = {"float8_e4m3fn": 1, "float8_e5m2": 2, "int8": 3}


@triton.jit
def float8_code(v, MBITS: tl.constexpr, EMIN: tl.constexpr, FMAX: tl.constexpr):
    """:func:`quantize` for a float8 format of MBITS mantissa bits, smallest normal exponent EMIN, maximum FMAX."""
    bits = v.to(tl.int32, bitcast=True)
    magnitude = tl.minimum(tl.where(v == v, tl.abs(v), 0.0), FMAX)
    exponent = tl.maximum((magnitude.to(tl.int32, bitcast=True) >> 23) - 127, EMIN)
    to_integer = ((127 + MBITS - exponent) << 23).to(tl.float32, bitcast=True)  # 2**(MBITS - exponent), exact
    steps = ((magnitude * to_integer + 8388608.0) - 8388608.0).to(tl.int32)  # rounded to nearest even: 2**23
    code = (((exponent - EMIN) << MBITS) + steps) | ((bits >> 24) & 0x80)
    return tl.where(v == v, code, 0x7F)  # NaN: exponent and mantissa all ones (both formats)


@triton.jit
def quantize(v, QUANT: tl.constexpr):
    """The code of ``saturate(round_to_nearest_even(v))`` for fp32 ``v``, as int32: a float8 format's bits
    (QUANT 1, e4m3fn, or 2, e5m2; NaN stays NaN) or the int8 value (QUANT 3; NaN gives 0).

    Computed, not converted: the Triton interpreter's fp32 -> float8 conversion is not this function on a CPU
    (1.0625 gives 1.125, 464 NaN, 500 256: docs/quantized.md), so the same arithmetic runs there and on a GPU, where
    the few integer operations per element hide under the memory traffic. Float8: ``|v|`` clamped to the format's
    maximum, its binary exponent ``e`` read from the bits (at least the format's smallest normal exponent, which
    makes subnormal codes the same formula), ``|v| * 2**(m - e)`` (exact: a power of two) lies in [0, 2**(m+1)] and
    is rounded to an integer by adding and subtracting 2**23 (fp32 addition rounds to nearest even; exact below
    2**22); the code is ``((e - emin) << m) + that``, a carry into the next binade included, with v's sign bit."""
    if QUANT == 3:
        clamped = tl.minimum(tl.maximum(tl.where(v == v, v, 0.0), -128.0), 127.0)
        code = ((clamped + 12582912.0) - 12582912.0).to(tl.int32)  # 1.5 * 2**23: rounds |v| < 2**22 to an integer
    elif QUANT == 1:  # e4m3fn: 3 mantissa bits, smallest normal exponent -6, max 448
        code = float8_code(v, 3, -6, 448.0)
    else:  # e5m2: 2 mantissa bits, smallest normal exponent -14, max 57344
        code = float8_code(v, 2, -14, 57344.0)
    return code


@triton.jit
def static_inverse(scale_bits, ACC: tl.constexpr):
    """The correctly rounded reciprocal of a static float32 scale (its float64 bits: :func:`float_from_bits`), in
    ACC: what y is multiplied by before it is quantized."""
    if ACC == tl.float64:
        inverse = 1.0 / float_from_bits(scale_bits, tl.float64)
    else:
        inverse = tl.div_rn(1.0, float_from_bits(scale_bits, tl.float32))
    return inverse


@triton.jit
def dynamic_scale(absmax, ub_bits, QUANT: tl.constexpr, ACC: tl.constexpr):
    """A dynamic row scale, float32: ``max(min(absmax, scale_ub) / qmax, 1 / (qmax * 512))`` (vLLM's CUDA kernels'
    floor: an all-zero row divides by a positive number), the division correctly rounded in ACC, then rounded to
    float32 once; ``ub_bits`` the float64 bits of scale_ub, +inf for none."""
    if QUANT == 1:
        top = 448.0
    elif QUANT == 2:
        top = 57344.0
    else:
        top = 127.0
    bounded = tl.minimum(absmax, float_from_bits(ub_bits, ACC))
    return tl.maximum(divide(bounded, top, ACC), 1.0 / (top * 512.0)).to(tl.float32)


@triton.jit
def dynamic_inverse(scale, ACC: tl.constexpr):
    """The correctly rounded reciprocal, in ACC, of the float32 scale a dynamic row stores: the codes are those of
    y divided by the scale the next matrix multiply dequantizes with."""
    if ACC == tl.float64:
        inverse = 1.0 / scale.to(tl.float64)
    else:
        inverse = tl.div_rn(tl.zeros_like(scale) + 1.0, scale)
    return inverse


@triton.jit
def store_y(Y, offsets, y, mask, inverse, QUANT: tl.constexpr, ACC: tl.constexpr):
    """Store y in Y's dtype, or with QUANT the code (:func:`quantize`) of ``y * inverse``, the scale's reciprocal
    (:func:`static_inverse`, :func:`dynamic_inverse`; broadcast against y), the product in ACC rounded to fp32 once;
    ``inverse`` is None without QUANT."""
    if QUANT == 0:
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)
    else:
        tl.store(Y + offsets, quantize((y * inverse).to(tl.float32), QUANT).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def add_residual(x, R, RES_OUT, r_offsets, out_offsets, mask, ACC: tl.constexpr):
    """``residual_out = x + residual``: the sum formed in ACC, stored rounded to RES_OUT's dtype (the
    residual's), and returned as stored (in ACC), the value the normalization then reads."""
    total = x + tl.load(R + r_offsets, mask=mask, other=0.0).to(ACC)
    stored = total.to(RES_OUT.dtype.element_ty)
    tl.store(RES_OUT + out_offsets, stored, mask=mask)
    return stored.to(ACC)


@triton.jit
def forward_rows(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, scale_bits, SCALES,
                 HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, CENTERED: tl.constexpr,
                 QUANT: tl.constexpr, DYNAMIC: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    """The body of ``layer_norm_forward_rows`` (CENTERED) and ``rms_norm_forward_rows`` (not), and of
    their fused ``add_*`` forms (HAS_RESIDUAL): BLOCK_M whole rows per program, each read once and held
    in registers. Without CENTERED the row is not centred (``centered`` is x itself: padded lanes load
    0), so ``var`` is mean(x^2), and no mean is saved (MEAN and B are None). With HAS_RESIDUAL the row
    normalized is ``residual_out`` (:func:`add_residual`); otherwise R and RES_OUT are None. With QUANT, Y holds
    codes (:func:`store_y`) of ``y / scale``: scale_bits a static scale's bits, or with DYNAMIC the bits of scale_ub
    and the row scales stored in SCALES (:func:`dynamic_scale`, from the row's absmax in registers); otherwise
    scale_bits and SCALES are None."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < M
    col_mask = cols < N
    mask = row_mask[:, None] & col_mask[None, :]
    rows = rows.to(tl.int64)
    x = tl.load(X + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0).to(ACC)
    if HAS_RESIDUAL:
        x = add_residual(x, R, RES_OUT, rows[:, None] * stride_r_row + cols[None, :], rows[:, None] * N + cols[None, :],
                         mask, ACC)
    if CENTERED:
        mean = divide(tl.sum(x, axis=1), N, ACC)
        centered = tl.where(mask, x - mean[:, None], 0.0)
    else:
        centered = x
    var = divide(tl.sum(centered * centered, axis=1), N, ACC)
    rstd = rstd_from_var(var, float_from_bits(eps_bits, ACC), ACC)
    y = apply_affine(centered * rstd[:, None], W, B, cols[None, :], col_mask[None, :], HAS_WEIGHT, HAS_BIAS, ACC)
    if QUANT != 0 and DYNAMIC:
        scale = dynamic_scale(tl.max(tl.where(mask, tl.abs(y), 0.0), axis=1), scale_bits, QUANT, ACC)
        tl.store(SCALES + rows, scale, mask=row_mask)
        inverse = dynamic_inverse(scale, ACC)[:, None]
    elif QUANT != 0:
        inverse = static_inverse(scale_bits, ACC)
    else:
        inverse = None
    store_y(Y, rows[:, None] * N + cols[None, :], y, mask, inverse, QUANT, ACC)
    if CENTERED:
        tl.store(MEAN + rows, mean, mask=row_mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def row_chunk(x_row, r_row, out_row, cols, mask, HAS_RESIDUAL: tl.constexpr, ACC: tl.constexpr):
    """Pass 1's chunk of the row to normalize: x, or with HAS_RESIDUAL the ``residual_out`` it stores."""
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
    if HAS_RESIDUAL:
        x = add_residual(x, r_row, out_row, cols, cols, mask, ACC)
    return x


@triton.jit
def chunk_y(x_row, cols, mask, mean, rstd, W, B, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
            CENTERED: tl.constexpr, ACC: tl.constexpr):
    """A looped row's y at ``cols``, from the row (x, or residual_out) and its statistics."""
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
    if CENTERED:
        xhat = (x - mean) * rstd
    else:
        xhat = x * rstd
    return apply_affine(xhat, W, B, cols, mask, HAS_WEIGHT, HAS_BIAS, ACC)


@triton.jit
def forward_looped(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits, scale_bits, SCALES,
                   HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                   CENTERED: tl.constexpr, QUANT: tl.constexpr, DYNAMIC: tl.constexpr, ACC: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    """The body of ``layer_norm_forward_looped`` (CENTERED) and ``rms_norm_forward_looped``, and of
    their fused ``add_*`` forms (HAS_RESIDUAL): one row per program, too long for registers, walked
    twice in chunks.

    Pass 1, CENTERED: each chunk's mean and sum of squared deviations (two-pass, in
    registers), merged into the row's with Chan, Golub and LeVeque's pairwise update, as
    stable as the two-pass formula. Not CENTERED: x^2 summed into a chunk-sized vector (each
    lane a chain of N/BLOCK_N additions), reduced once. Pass 2 reads the row again (mostly
    from L2) and writes y. With HAS_RESIDUAL, pass 1 reads x and the residual and writes
    ``residual_out``; pass 2 reads ``residual_out`` back, this program's own writes (one
    tensor instead of two), after a barrier. With QUANT, pass 2 stores codes (:func:`store_y`); with DYNAMIC too,
    a pass between them computes y for the row's absmax (the row again, from L2) and stores its scale.
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x_row
    if HAS_RESIDUAL:
        r_row = R + row * stride_r_row
        out_row = RES_OUT + row * N
    else:
        r_row = R
        out_row = RES_OUT
    if CENTERED:
        count = tl.zeros((), ACC)
        mean = tl.zeros((), ACC)
        m2 = tl.zeros((), ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            x = row_chunk(x_row, r_row, out_row, cols, mask, HAS_RESIDUAL, ACC)
            chunk_count = tl.minimum(N - start, BLOCK_N).to(ACC)
            chunk_mean = divide(tl.sum(x, axis=0), chunk_count, ACC)
            centered = tl.where(mask, x - chunk_mean, 0.0)
            total = count + chunk_count
            delta = chunk_mean - mean
            weight = divide(chunk_count, total, ACC)
            mean += delta * weight
            m2 += tl.sum(centered * centered, axis=0) + delta * delta * (count * weight)
            count = total
        rstd = rstd_from_var(divide(m2, N, ACC), float_from_bits(eps_bits, ACC), ACC)
        tl.store(MEAN + row, mean)
    else:
        squares = tl.zeros((BLOCK_N,), ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = row_chunk(x_row, r_row, out_row, cols, cols < N, HAS_RESIDUAL, ACC)
            squares += x * x
        rstd = rstd_from_var(divide(tl.sum(squares, axis=0), N, ACC), float_from_bits(eps_bits, ACC), ACC)
        mean = tl.zeros((), ACC)  # not read: RMSNorm's chunks are not centred (chunk_y)
    tl.store(RSTD + row, rstd)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # pass 2 reads residual_out: every store of pass 1 before any load of it
        x_row = out_row
    if QUANT != 0 and DYNAMIC:
        absmax = tl.zeros((BLOCK_N,), ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            y = chunk_y(x_row, cols, cols < N, mean, rstd, W, B, HAS_WEIGHT, HAS_BIAS, CENTERED, ACC)
            absmax = tl.maximum(absmax, tl.where(cols < N, tl.abs(y), 0.0))
        scale = dynamic_scale(tl.max(absmax, axis=0), scale_bits, QUANT, ACC)
        tl.store(SCALES + row, scale)
        inverse = dynamic_inverse(scale, ACC)
    elif QUANT != 0:
        inverse = static_inverse(scale_bits, ACC)
    else:
        inverse = None
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        y = chunk_y(x_row, cols, mask, mean, rstd, W, B, HAS_WEIGHT, HAS_BIAS, CENTERED, ACC)
        store_y(Y, row * N + cols, y, mask, inverse, QUANT, ACC)


# -- the kernels: LayerNorm and RMSNorm, one body each ---------------------------------------


@triton.jit(do_not_specialize=["eps_bits"])
def layer_norm_forward_rows(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous, any float dtype; read only if HAS_WEIGHT
    B,  # *bias (N,), contiguous, any float dtype; read only if HAS_BIAS
    MEAN,  # *mean (M,), ACC dtype: saved for the backward
    RSTD,  # *rstd (M,), ACC dtype: 1 / sqrt(var + eps), saved for the backward
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row (the product of normalized_shape)
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """BLOCK_M whole rows per program, each read once and held in registers."""
    forward_rows(X, None, Y, None, W, B, MEAN, RSTD, stride_x_row, 0, M, N, eps_bits, None, None, False, HAS_WEIGHT,
                 HAS_BIAS, True, 0, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def rms_norm_forward_rows(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous, any float dtype; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype: 1 / sqrt(mean(x^2) + eps), saved for the backward
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row (the product of normalized_shape)
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """RMSNorm: ``layer_norm_forward_rows`` without the mean and the bias."""
    forward_rows(X, None, Y, None, W, None, None, RSTD, stride_x_row, 0, M, N, eps_bits, None, None, False, HAS_WEIGHT,
                 False, False, 0, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def layer_norm_forward_looped(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    B,  # *bias (N,), contiguous; read only if HAS_BIAS
    MEAN,  # *mean (M,), ACC dtype
    RSTD,  # *rstd (M,), ACC dtype
    stride_x_row,  # elements between consecutive rows of x
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """One row per program, too long for registers, walked twice in chunks (see forward_looped)."""
    forward_looped(X, None, Y, None, W, B, MEAN, RSTD, stride_x_row, 0, N, eps_bits, None, None, False, HAS_WEIGHT,
                   HAS_BIAS, True, 0, False, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def rms_norm_forward_looped(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype
    stride_x_row,  # elements between consecutive rows of x
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """RMSNorm: ``layer_norm_forward_looped`` without the mean and the bias."""
    forward_looped(X, None, Y, None, W, None, None, RSTD, stride_x_row, 0, N, eps_bits, None, None, False, HAS_WEIGHT,
                   False, False, 0, False, ACC, BLOCK_N)


# -- the fused kernels: the residual added first, the same bodies with HAS_RESIDUAL --------------


@triton.jit(do_not_specialize=["eps_bits"])
def add_layer_norm_forward_rows(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    R,  # *residual: element (row, col) at R + row * stride_r_row + col, any float dtype
    Y,  # *y: contiguous (M, N), x's dtype
    RES_OUT,  # *residual_out: contiguous (M, N), the residual's dtype: x + residual, rounded once
    W,  # *weight (N,), contiguous, any float dtype; read only if HAS_WEIGHT
    B,  # *bias (N,), contiguous, any float dtype; read only if HAS_BIAS
    MEAN,  # *mean (M,) of residual_out, ACC dtype: saved for the backward
    RSTD,  # *rstd (M,), ACC dtype, saved for the backward
    stride_x_row,  # elements between consecutive rows of x
    stride_r_row,  # elements between consecutive rows of the residual
    M,  # number of rows
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """``residual_out = x + residual``, then ``layer_norm_forward_rows`` on it."""
    forward_rows(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, None, None, True,
                 HAS_WEIGHT, HAS_BIAS, True, 0, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def add_rms_norm_forward_rows(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    R,  # *residual: element (row, col) at R + row * stride_r_row + col, any float dtype
    Y,  # *y: contiguous (M, N), x's dtype
    RES_OUT,  # *residual_out: contiguous (M, N), the residual's dtype: x + residual, rounded once
    W,  # *weight (N,), contiguous, any float dtype; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype, saved for the backward
    stride_x_row,  # elements between consecutive rows of x
    stride_r_row,  # elements between consecutive rows of the residual
    M,  # number of rows
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """``residual_out = x + residual``, then ``rms_norm_forward_rows`` on it."""
    forward_rows(X, R, Y, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, None, None, True,
                 HAS_WEIGHT, False, False, 0, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def add_layer_norm_forward_looped(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    R,  # *residual: element (row, col) at R + row * stride_r_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    RES_OUT,  # *residual_out: contiguous (M, N), the residual's dtype
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    B,  # *bias (N,), contiguous; read only if HAS_BIAS
    MEAN,  # *mean (M,), ACC dtype
    RSTD,  # *rstd (M,), ACC dtype
    stride_x_row,  # elements between consecutive rows of x
    stride_r_row,  # elements between consecutive rows of the residual
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """``residual_out = x + residual`` in pass 1, then ``layer_norm_forward_looped``'s pass 2 on it."""
    forward_looped(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits, None, None, True,
                   HAS_WEIGHT, HAS_BIAS, True, 0, False, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def add_rms_norm_forward_looped(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    R,  # *residual: element (row, col) at R + row * stride_r_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    RES_OUT,  # *residual_out: contiguous (M, N), the residual's dtype
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype
    stride_x_row,  # elements between consecutive rows of x
    stride_r_row,  # elements between consecutive rows of the residual
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see float_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """``residual_out = x + residual`` in pass 1, then ``rms_norm_forward_looped``'s pass 2 on it."""
    forward_looped(X, R, Y, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, N, eps_bits, None, None, True,
                   HAS_WEIGHT, False, False, 0, False, ACC, BLOCK_N)


# -- the quantized kernels (``*_quant``): the same bodies storing y's codes (QUANT) in Q, one byte each -------------
# Q: contiguous (M, N), uint8 (a float8 tensor's bytes) or int8; scale_bits: the float32 scale's float64 bits.
# Every other argument as in the kernel of the same name without ``_quant``; the statistics are saved as there.


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def layer_norm_quant_forward_rows(X, Q, W, B, MEAN, RSTD, stride_x_row, M, N, eps_bits, scale_bits,
                                  HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                  ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``layer_norm_forward_rows`` storing ``Q(y / scale)``."""
    forward_rows(X, None, Q, None, W, B, MEAN, RSTD, stride_x_row, 0, M, N, eps_bits, scale_bits, None, False,
                 HAS_WEIGHT, HAS_BIAS, True, QUANT, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def rms_norm_quant_forward_rows(X, Q, W, RSTD, stride_x_row, M, N, eps_bits, scale_bits, HAS_WEIGHT: tl.constexpr,
                                QUANT: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``rms_norm_forward_rows`` storing ``Q(y / scale)``."""
    forward_rows(X, None, Q, None, W, None, None, RSTD, stride_x_row, 0, M, N, eps_bits, scale_bits, None, False,
                 HAS_WEIGHT, False, False, QUANT, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def layer_norm_quant_forward_looped(X, Q, W, B, MEAN, RSTD, stride_x_row, N, eps_bits, scale_bits,
                                    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                    ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """``layer_norm_forward_looped`` storing ``Q(y / scale)`` in pass 2."""
    forward_looped(X, None, Q, None, W, B, MEAN, RSTD, stride_x_row, 0, N, eps_bits, scale_bits, None, False,
                   HAS_WEIGHT, HAS_BIAS, True, QUANT, False, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def rms_norm_quant_forward_looped(X, Q, W, RSTD, stride_x_row, N, eps_bits, scale_bits, HAS_WEIGHT: tl.constexpr,
                                  QUANT: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """``rms_norm_forward_looped`` storing ``Q(y / scale)`` in pass 2."""
    forward_looped(X, None, Q, None, W, None, None, RSTD, stride_x_row, 0, N, eps_bits, scale_bits, None, False,
                   HAS_WEIGHT, False, False, QUANT, False, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def add_layer_norm_quant_forward_rows(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits,
                                      scale_bits, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                      ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_layer_norm_forward_rows`` storing ``Q(y / scale)``."""
    forward_rows(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, scale_bits, None, True,
                 HAS_WEIGHT, HAS_BIAS, True, QUANT, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def add_rms_norm_quant_forward_rows(X, R, Q, RES_OUT, W, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, scale_bits,
                                    HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_rms_norm_forward_rows`` storing ``Q(y / scale)``: vLLM's ``fused_add_rms_norm_static_fp8_quant``."""
    forward_rows(X, R, Q, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, scale_bits, None,
                 True, HAS_WEIGHT, False, False, QUANT, False, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def add_layer_norm_quant_forward_looped(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits,
                                        scale_bits, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                        ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_layer_norm_forward_looped`` storing ``Q(y / scale)`` in pass 2."""
    forward_looped(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits, scale_bits, None, True,
                   HAS_WEIGHT, HAS_BIAS, True, QUANT, False, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "scale_bits"])
def add_rms_norm_quant_forward_looped(X, R, Q, RES_OUT, W, RSTD, stride_x_row, stride_r_row, N, eps_bits, scale_bits,
                                      HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                      BLOCK_N: tl.constexpr):
    """``add_rms_norm_forward_looped`` storing ``Q(y / scale)`` in pass 2."""
    forward_looped(X, R, Q, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, N, eps_bits, scale_bits, None,
                   True, HAS_WEIGHT, False, False, QUANT, False, ACC, BLOCK_N)


# -- the dynamic quantized kernels (``*_dynamic_quant``): the same bodies with DYNAMIC, one scale per row ------------
# SCALES: (M,) float32, each row's scale; ub_bits: the float64 bits of scale_ub, +inf for none. Every other argument
# as in the static ``*_quant`` kernel of the same name.


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def layer_norm_dynamic_quant_forward_rows(X, Q, W, B, MEAN, RSTD, SCALES, stride_x_row, M, N, eps_bits, ub_bits,
                                          HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                          ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``layer_norm_forward_rows`` storing each row's scale and ``Q(y / scale)``."""
    forward_rows(X, None, Q, None, W, B, MEAN, RSTD, stride_x_row, 0, M, N, eps_bits, ub_bits, SCALES, False,
                 HAS_WEIGHT, HAS_BIAS, True, QUANT, True, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def rms_norm_dynamic_quant_forward_rows(X, Q, W, RSTD, SCALES, stride_x_row, M, N, eps_bits, ub_bits,
                                        HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``rms_norm_forward_rows`` storing each row's scale and ``Q(y / scale)``: vLLM's
    ``rms_norm_dynamic_per_token_quant``."""
    forward_rows(X, None, Q, None, W, None, None, RSTD, stride_x_row, 0, M, N, eps_bits, ub_bits, SCALES, False,
                 HAS_WEIGHT, False, False, QUANT, True, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def layer_norm_dynamic_quant_forward_looped(X, Q, W, B, MEAN, RSTD, SCALES, stride_x_row, N, eps_bits, ub_bits,
                                            HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, QUANT: tl.constexpr,
                                            ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """``layer_norm_forward_looped`` with the absmax pass, storing each row's scale and ``Q(y / scale)``."""
    forward_looped(X, None, Q, None, W, B, MEAN, RSTD, stride_x_row, 0, N, eps_bits, ub_bits, SCALES, False,
                   HAS_WEIGHT, HAS_BIAS, True, QUANT, True, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def rms_norm_dynamic_quant_forward_looped(X, Q, W, RSTD, SCALES, stride_x_row, N, eps_bits, ub_bits,
                                          HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                          BLOCK_N: tl.constexpr):
    """``rms_norm_forward_looped`` with the absmax pass, storing each row's scale and ``Q(y / scale)``."""
    forward_looped(X, None, Q, None, W, None, None, RSTD, stride_x_row, 0, N, eps_bits, ub_bits, SCALES, False,
                   HAS_WEIGHT, False, False, QUANT, True, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def add_layer_norm_dynamic_quant_forward_rows(X, R, Q, RES_OUT, W, B, MEAN, RSTD, SCALES, stride_x_row, stride_r_row,
                                              M, N, eps_bits, ub_bits, HAS_WEIGHT: tl.constexpr,
                                              HAS_BIAS: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_layer_norm_forward_rows`` storing each row's scale and ``Q(y / scale)``."""
    forward_rows(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, ub_bits, SCALES,
                 True, HAS_WEIGHT, HAS_BIAS, True, QUANT, True, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def add_rms_norm_dynamic_quant_forward_rows(X, R, Q, RES_OUT, W, RSTD, SCALES, stride_x_row, stride_r_row, M, N,
                                            eps_bits, ub_bits, HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr,
                                            ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_rms_norm_forward_rows`` storing each row's scale and ``Q(y / scale)``."""
    forward_rows(X, R, Q, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, ub_bits, SCALES,
                 True, HAS_WEIGHT, False, False, QUANT, True, ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def add_layer_norm_dynamic_quant_forward_looped(X, R, Q, RES_OUT, W, B, MEAN, RSTD, SCALES, stride_x_row,
                                                stride_r_row, N, eps_bits, ub_bits, HAS_WEIGHT: tl.constexpr,
                                                HAS_BIAS: tl.constexpr, QUANT: tl.constexpr, ACC: tl.constexpr,
                                                BLOCK_N: tl.constexpr):
    """``add_layer_norm_forward_looped`` with the absmax pass, storing each row's scale and ``Q(y / scale)``."""
    forward_looped(X, R, Q, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits, ub_bits, SCALES,
                   True, HAS_WEIGHT, HAS_BIAS, True, QUANT, True, ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits", "ub_bits"])
def add_rms_norm_dynamic_quant_forward_looped(X, R, Q, RES_OUT, W, RSTD, SCALES, stride_x_row, stride_r_row, N,
                                              eps_bits, ub_bits, HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr,
                                              ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """``add_rms_norm_forward_looped`` with the absmax pass, storing each row's scale and ``Q(y / scale)``."""
    forward_looped(X, R, Q, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, N, eps_bits, ub_bits, SCALES,
                   True, HAS_WEIGHT, False, False, QUANT, True, ACC, BLOCK_N)
