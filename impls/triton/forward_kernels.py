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
def eps_from_bits(eps_bits, ACC: tl.constexpr):
    """eps travels as the bits of a float64 in an integer argument: Triton passes
    Python floats as fp32 (and the interpreter rounds float literals to fp32),
    which would round eps for float64 inputs."""
    return eps_bits.to(tl.int64).to(tl.float64, bitcast=True).to(ACC)


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


@triton.jit
def add_residual(x, R, RES_OUT, r_offsets, out_offsets, mask, ACC: tl.constexpr):
    """``residual_out = x + residual``: the sum formed in ACC, stored rounded to RES_OUT's dtype (the
    residual's), and returned as stored (in ACC), the value the normalization then reads."""
    total = x + tl.load(R + r_offsets, mask=mask, other=0.0).to(ACC)
    stored = total.to(RES_OUT.dtype.element_ty)
    tl.store(RES_OUT + out_offsets, stored, mask=mask)
    return stored.to(ACC)


@triton.jit
def forward_rows(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits,
                 HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, CENTERED: tl.constexpr,
                 ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The body of ``layer_norm_forward_rows`` (CENTERED) and ``rms_norm_forward_rows`` (not), and of
    their fused ``add_*`` forms (HAS_RESIDUAL): BLOCK_M whole rows per program, each read once and held
    in registers. Without CENTERED the row is not centred (``centered`` is x itself: padded lanes load
    0), so ``var`` is mean(x^2), and no mean is saved (MEAN and B are None). With HAS_RESIDUAL the row
    normalized is ``residual_out`` (:func:`add_residual`); otherwise R and RES_OUT are None."""
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
    rstd = rstd_from_var(var, eps_from_bits(eps_bits, ACC), ACC)
    y = apply_affine(centered * rstd[:, None], W, B, cols[None, :], col_mask[None, :], HAS_WEIGHT, HAS_BIAS, ACC)
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
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
def forward_looped(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits,
                   HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                   CENTERED: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """The body of ``layer_norm_forward_looped`` (CENTERED) and ``rms_norm_forward_looped``, and of
    their fused ``add_*`` forms (HAS_RESIDUAL): one row per program, too long for registers, walked
    twice in chunks.

    Pass 1, CENTERED: each chunk's mean and sum of squared deviations (two-pass, in
    registers), merged into the row's with Chan, Golub and LeVeque's pairwise update, as
    stable as the two-pass formula. Not CENTERED: x^2 summed into a chunk-sized vector (each
    lane a chain of N/BLOCK_N additions), reduced once. Pass 2 reads the row again (mostly
    from L2) and writes y. With HAS_RESIDUAL, pass 1 reads x and the residual and writes
    ``residual_out``; pass 2 reads ``residual_out`` back, this program's own writes (one
    tensor instead of two), after a barrier.
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
        rstd = rstd_from_var(divide(m2, N, ACC), eps_from_bits(eps_bits, ACC), ACC)
        tl.store(MEAN + row, mean)
    else:
        squares = tl.zeros((BLOCK_N,), ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = row_chunk(x_row, r_row, out_row, cols, cols < N, HAS_RESIDUAL, ACC)
            squares += x * x
        rstd = rstd_from_var(divide(tl.sum(squares, axis=0), N, ACC), eps_from_bits(eps_bits, ACC), ACC)
    tl.store(RSTD + row, rstd)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # pass 2 reads residual_out: every store of pass 1 before any load of it
        x_row = out_row
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
        if CENTERED:
            xhat = (x - mean) * rstd
        else:
            xhat = x * rstd
        y = apply_affine(xhat, W, B, cols, mask, HAS_WEIGHT, HAS_BIAS, ACC)
        tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """BLOCK_M whole rows per program, each read once and held in registers."""
    forward_rows(X, None, Y, None, W, B, MEAN, RSTD, stride_x_row, 0, M, N, eps_bits, False, HAS_WEIGHT, HAS_BIAS, True,
                 ACC, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def rms_norm_forward_rows(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous, any float dtype; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype: 1 / sqrt(mean(x^2) + eps), saved for the backward
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row (the product of normalized_shape)
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """RMSNorm: ``layer_norm_forward_rows`` without the mean and the bias."""
    forward_rows(X, None, Y, None, W, None, None, RSTD, stride_x_row, 0, M, N, eps_bits, False, HAS_WEIGHT, False, False,
                 ACC, BLOCK_M, BLOCK_N)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """One row per program, too long for registers, walked twice in chunks (see forward_looped)."""
    forward_looped(X, None, Y, None, W, B, MEAN, RSTD, stride_x_row, 0, N, eps_bits, False, HAS_WEIGHT, HAS_BIAS, True,
                   ACC, BLOCK_N)


@triton.jit(do_not_specialize=["eps_bits"])
def rms_norm_forward_looped(
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    Y,  # *y: contiguous (M, N), x's dtype
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype
    stride_x_row,  # elements between consecutive rows of x
    N,  # elements per row
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """RMSNorm: ``layer_norm_forward_looped`` without the mean and the bias."""
    forward_looped(X, None, Y, None, W, None, None, RSTD, stride_x_row, 0, N, eps_bits, False, HAS_WEIGHT, False, False,
                   ACC, BLOCK_N)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """``residual_out = x + residual``, then ``layer_norm_forward_rows`` on it."""
    forward_rows(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, True, HAS_WEIGHT,
                 HAS_BIAS, True, ACC, BLOCK_M, BLOCK_N)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # next power of two >= N: the whole row in registers
):
    """``residual_out = x + residual``, then ``rms_norm_forward_rows`` on it."""
    forward_rows(X, R, Y, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, M, N, eps_bits, True, HAS_WEIGHT,
                 False, False, ACC, BLOCK_M, BLOCK_N)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """``residual_out = x + residual`` in pass 1, then ``layer_norm_forward_looped``'s pass 2 on it."""
    forward_looped(X, R, Y, RES_OUT, W, B, MEAN, RSTD, stride_x_row, stride_r_row, N, eps_bits, True, HAS_WEIGHT,
                   HAS_BIAS, True, ACC, BLOCK_N)


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
    eps_bits,  # eps as float64 bits (see eps_from_bits)
    HAS_WEIGHT: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: the row is walked in chunks of BLOCK_N
):
    """``residual_out = x + residual`` in pass 1, then ``rms_norm_forward_looped``'s pass 2 on it."""
    forward_looped(X, R, Y, RES_OUT, W, None, None, RSTD, stride_x_row, stride_r_row, N, eps_bits, True, HAS_WEIGHT,
                   False, False, ACC, BLOCK_N)
