"""Backward kernels: dx from the saved statistics, dweight and dbias without atomics.

LayerNorm, with ``xhat = (x - mean) * rstd`` (mean and rstd saved by the forward, never
recomputed) and ``g = dy * weight``::

    dx      = rstd * (g - (xhat * mean(g * xhat) + mean(g)))   per row
    dweight = sum over rows of dy * xhat
    dbias   = sum over rows of dy

RMSNorm, with ``xhat = x * rstd`` (rstd saved by the forward)::

    dx      = rstd * (g - xhat * mean(g * xhat))                per row
    dweight = sum over rows of dy * xhat

One body per path (``backward_rows``, ``backward_looped``) serves both through its
``CENTERED`` flag; ``layer_norm_*`` and ``rms_norm_*`` are thin entry points with their
own arguments, and ``layer_norm_reduce_partials`` (which only sums partial rows) is
launched by both.

dweight and dbias are column sums over all M rows. A *persistent* grid of
programs each walks a contiguous range of rows, keeps ACC partial sums in
registers, and writes them once to row ``pid`` of a ``(programs, N)`` buffer;
``layer_norm_reduce_partials`` then sums that buffer's rows in a fixed order
(rows too long for registers: ``backward_looped``, whole rows per
program in chunks, partial rows in memory).
No atomics, no locks: the result is bit-identical from run to run.

The fused operations' backward (``add_layer_norm_*``, ``add_rms_norm_*``) is the same body with
``HAS_DRES``: x is the forward's ``residual_out``, and ``dsum = dresidual_out + dx`` is formed in
ACC and rounded once, where dx alone would be stored (the gradient of both x and the residual).

Layout as in the forward: x and dy through row strides (dy's may be 0, a
broadcast row), contiguous columns; dx written contiguous; 64-bit row offsets.
"""

from normbench.kit.triton import ensure_mode

ensure_mode()  # before @triton.jit below decides compiled vs interpreted

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_to_partial(PARTIAL, cols, again, mask, value):
    """``PARTIAL[cols] += value`` where ``mask``; the old value is read only where ``again``
    (a program's first row or tile starts its partial sums)."""
    previous = tl.load(PARTIAL + cols, mask=again, other=0.0)
    tl.store(PARTIAL + cols, previous + value, mask=mask)


@triton.jit
def backward_rows(DY, DRES, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, stride_dres_row,
                  stride_x_row, M, N, tiles_per_program, HAS_DRES: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                  COMPUTE_DX: tl.constexpr, COMPUTE_DW: tl.constexpr, COMPUTE_DB: tl.constexpr, CENTERED: tl.constexpr,
                  ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PARTIALS_IN_MEMORY: tl.constexpr):
    """The body of ``layer_norm_backward_rows`` (CENTERED) and ``rms_norm_backward_rows`` (not:
    no mean, no mean(g) term, no dbias; MEAN and DB_PARTIAL are None), and of their fused forms
    (HAS_DRES: dresidual_out added to dx before it is stored; otherwise DRES is None).

    Persistent: contiguous tiles of BLOCK_M whole rows; each tile's column sums are added
    to partial sums in registers, or (PARTIALS_IN_MEMORY) to this program's partial rows."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(ACC)
    partial = pid.to(tl.int64) * N  # this program's row of the partial buffers
    dw_acc = tl.zeros((BLOCK_N,), ACC)
    db_acc = tl.zeros((BLOCK_N,), ACC)
    first = pid * tiles_per_program
    for tile in range(first, first + tiles_per_program):
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < M  # the last program's last tiles may lie past M
        mask = row_mask[:, None] & col_mask[None, :]
        rows = rows.to(tl.int64)
        x = tl.load(X + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = tl.load(DY + rows[:, None] * stride_dy_row + cols[None, :], mask=mask, other=0.0).to(ACC)
        if CENTERED:
            mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        if CENTERED:
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        else:
            xhat = tl.where(mask, x * rstd[:, None], 0.0)
        if COMPUTE_DX:
            g = dy
            if HAS_WEIGHT:
                g = dy * w[None, :]
            mean_gx = tl.sum(g * xhat, axis=1) / N
            if CENTERED:
                mean_g = tl.sum(g, axis=1) / N
                dx = (g - (xhat * mean_gx[:, None] + mean_g[:, None])) * rstd[:, None]
            else:
                dx = (g - xhat * mean_gx[:, None]) * rstd[:, None]
            if HAS_DRES:
                dx += tl.load(DRES + rows[:, None] * stride_dres_row + cols[None, :], mask=mask, other=0.0).to(ACC)
            tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        dw_tile = tl.sum(dy * xhat, axis=0)  # this tile's column sums
        db_tile = tl.sum(dy, axis=0)
        if PARTIALS_IN_MEMORY:  # added to the program's partial rows (in L1/L2): fewer registers
            # the replicas of a column's sum live in several threads: the one that reads a
            # partial back need not be the one that wrote it, so a barrier orders the two
            tl.debug_barrier()
            again = cols < tl.where(tile > first, N, 0)  # the first tile starts the sums
            if COMPUTE_DW:
                dw_prev = tl.load(DW_PARTIAL + partial + cols, mask=again, other=0.0)
                tl.store(DW_PARTIAL + partial + cols, dw_prev + dw_tile, mask=col_mask)
            if COMPUTE_DB:
                db_prev = tl.load(DB_PARTIAL + partial + cols, mask=again, other=0.0)
                tl.store(DB_PARTIAL + partial + cols, db_prev + db_tile, mask=col_mask)
        else:  # kept in registers, written once at the end
            dw_acc += dw_tile
            db_acc += db_tile
    if not PARTIALS_IN_MEMORY:
        if COMPUTE_DW:
            tl.store(DW_PARTIAL + partial + cols, dw_acc, mask=col_mask)
        if COMPUTE_DB:
            tl.store(DB_PARTIAL + partial + cols, db_acc, mask=col_mask)


@triton.jit
def backward_looped(DY, DRES, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, stride_dres_row,
                    stride_x_row, M, N, rows_per_program, HAS_DRES: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                    COMPUTE_DX: tl.constexpr, COMPUTE_DW: tl.constexpr, COMPUTE_DB: tl.constexpr,
                    CENTERED: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """The body of ``layer_norm_backward_looped`` (CENTERED) and ``rms_norm_backward_looped`` (not:
    one row sum instead of two, no dbias; MEAN and DB_PARTIAL are None), and of their fused forms
    (HAS_DRES: dresidual_out, read once in pass 2, added to dx before it is stored).

    Rows too long for registers: persistent programs, each walking contiguous whole rows.
    For each row, pass 1 walks it in chunks for the row means dx needs;
    pass 2 walks it again (its chunks still in L1/L2: one row of x and dy per
    program), writes dx, and adds the row's dweight/dbias terms to this
    program's row of the partial buffers (read back from L2; the program's
    first row writes it without reading). x and dy leave DRAM once, in one
    launch; the partial rows are written once per program. Fixed order, no
    atomics: bit-identical run to run.
    """
    pid = tl.program_id(0)
    first = pid * rows_per_program
    partial = pid.to(tl.int64) * N
    for r in range(first, tl.minimum(first + rows_per_program, M)):
        row = tl.cast(r, tl.int64)
        x_row = X + row * stride_x_row
        dy_row = DY + row * stride_dy_row
        if CENTERED:
            mean = tl.load(MEAN + row)
        rstd = tl.load(RSTD + row)
        if COMPUTE_DX:
            acc_gx = tl.zeros((BLOCK_N,), ACC)
            if CENTERED:
                acc_g = tl.zeros((BLOCK_N,), ACC)
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                mask = cols < N
                x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
                g = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC)
                if HAS_WEIGHT:
                    g = g * tl.load(W + cols, mask=mask, other=0.0).to(ACC)
                if CENTERED:
                    acc_gx += g * tl.where(mask, (x - mean) * rstd, 0.0)
                    acc_g += g
                else:  # mean(g * xhat) = rstd * mean(g * x); padded lanes add 0 * 0
                    acc_gx += g * x
            if CENTERED:
                mean_gx = tl.sum(acc_gx, axis=0) / N
                mean_g = tl.sum(acc_g, axis=0) / N
            else:
                mean_gx = tl.sum(acc_gx, axis=0) * rstd / N
        # each partial value is written and read back by the same thread (1-D chunks, 8 values
        # per thread, no replicas); the barrier makes that ordering not depend on the layout
        tl.debug_barrier()
        read_partials = tl.where(r > first, N, 0)  # the program's first row starts its partial sums
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            again = cols < read_partials
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC)
            if CENTERED:
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            else:  # nothing below sums across lanes: padded lanes are never stored
                xhat = x * rstd
            if not CENTERED:
                # RMSNorm adds its dweight term first: dy and xhat then die before g and dx live
                # (in dx's order, ptxas spilled 12-24 bytes in this loop for bf16, sm_80 and sm_90)
                if COMPUTE_DW:
                    add_to_partial(DW_PARTIAL + partial, cols, again, mask, dy * xhat)
            if COMPUTE_DX:
                g = dy
                if HAS_WEIGHT:
                    g = dy * tl.load(W + cols, mask=mask, other=0.0).to(ACC)
                if CENTERED:
                    dx = (g - (xhat * mean_gx + mean_g)) * rstd
                else:
                    dx = (g - xhat * mean_gx) * rstd
                if HAS_DRES:
                    dx += tl.load(DRES + row * stride_dres_row + cols, mask=mask, other=0.0).to(ACC)
                tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=mask)
            if CENTERED:
                if COMPUTE_DW:
                    add_to_partial(DW_PARTIAL + partial, cols, again, mask, dy * xhat)
            if COMPUTE_DB:
                add_to_partial(DB_PARTIAL + partial, cols, again, mask, dy)


# -- the kernels: LayerNorm and RMSNorm, one body each ---------------------------------------


@triton.jit
def layer_norm_backward_rows(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    MEAN,  # *mean (M,), ACC dtype, saved by the forward
    RSTD,  # *rstd (M,), ACC dtype, saved by the forward
    DX,  # *dx: contiguous (M, N), x's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program writes row pid of dweight partial sums
    DB_PARTIAL,  # *(programs, N) ACC: the same for dbias
    stride_dy_row,  # elements between consecutive rows of dy (0: one row broadcast)
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row
    tiles_per_program,  # this program walks row tiles [pid, pid + 1) * tiles_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # next power of two >= N: whole rows in registers
    PARTIALS_IN_MEMORY: tl.constexpr,  # partial sums in this program's partial rows, not registers
):
    """Persistent: contiguous tiles of BLOCK_M whole rows; each tile's column sums are added
    to partial sums in registers, or (PARTIALS_IN_MEMORY) to this program's partial rows."""
    backward_rows(DY, None, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, 0, stride_x_row, M, N,
                  tiles_per_program, False, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, COMPUTE_DB, True, ACC, BLOCK_M, BLOCK_N,
                  PARTIALS_IN_MEMORY)


@triton.jit
def rms_norm_backward_rows(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype, saved by the forward
    DX,  # *dx: contiguous (M, N), x's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program writes row pid of dweight partial sums
    stride_dy_row,  # elements between consecutive rows of dy (0: one row broadcast)
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row
    tiles_per_program,  # this program walks row tiles [pid, pid + 1) * tiles_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # next power of two >= N: whole rows in registers
    PARTIALS_IN_MEMORY: tl.constexpr,  # partial sums in this program's partial rows, not registers
):
    """RMSNorm: ``layer_norm_backward_rows`` without the mean, the mean(g) term and dbias."""
    backward_rows(DY, None, X, W, None, RSTD, DX, DW_PARTIAL, None, stride_dy_row, 0, stride_x_row, M, N,
                  tiles_per_program, False, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, False, False, ACC, BLOCK_M, BLOCK_N,
                  PARTIALS_IN_MEMORY)


@triton.jit
def layer_norm_backward_looped(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    MEAN,  # *mean (M,), ACC dtype
    RSTD,  # *rstd (M,), ACC dtype
    DX,  # *dx: contiguous (M, N), x's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program's row of dweight partial sums
    DB_PARTIAL,  # *(programs, N) ACC: the same for dbias
    stride_dy_row,  # elements between consecutive rows of dy
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row
    rows_per_program,  # program pid walks rows [pid, pid + 1) * rows_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: each row is walked in chunks of BLOCK_N
):
    """Rows too long for registers: persistent programs, each walking contiguous whole rows
    twice in chunks (see backward_looped)."""
    backward_looped(DY, None, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, 0, stride_x_row, M, N,
                    rows_per_program, False, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, COMPUTE_DB, True, ACC, BLOCK_N)


@triton.jit
def rms_norm_backward_looped(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    X,  # *x: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype
    DX,  # *dx: contiguous (M, N), x's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program's row of dweight partial sums
    stride_dy_row,  # elements between consecutive rows of dy
    stride_x_row,  # elements between consecutive rows of x
    M,  # number of rows
    N,  # elements per row
    rows_per_program,  # program pid walks rows [pid, pid + 1) * rows_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: each row is walked in chunks of BLOCK_N
):
    """RMSNorm: ``layer_norm_backward_looped`` without the mean, the mean(g) term and dbias."""
    backward_looped(DY, None, X, W, None, RSTD, DX, DW_PARTIAL, None, stride_dy_row, 0, stride_x_row, M, N,
                    rows_per_program, False, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, False, False, ACC, BLOCK_N)


@triton.jit
def add_layer_norm_backward_rows(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    DRES,  # *dresidual_out: element (row, col) at DRES + row * stride_dres_row + col
    X,  # *residual_out, the forward's: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    MEAN,  # *mean (M,), ACC dtype, saved by the forward
    RSTD,  # *rstd (M,), ACC dtype, saved by the forward
    DX,  # *dsum: contiguous (M, N), residual_out's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program writes row pid of dweight partial sums
    DB_PARTIAL,  # *(programs, N) ACC: the same for dbias
    stride_dy_row,  # elements between consecutive rows of dy
    stride_dres_row,  # elements between consecutive rows of dresidual_out
    stride_x_row,  # elements between consecutive rows of residual_out
    M,  # number of rows
    N,  # elements per row
    tiles_per_program,  # this program walks row tiles [pid, pid + 1) * tiles_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # next power of two >= N: whole rows in registers
    PARTIALS_IN_MEMORY: tl.constexpr,  # partial sums in this program's partial rows, not registers
):
    """``layer_norm_backward_rows`` writing ``dsum = dresidual_out + dx``."""
    backward_rows(DY, DRES, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, stride_dres_row, stride_x_row,
                  M, N, tiles_per_program, True, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, COMPUTE_DB, True, ACC, BLOCK_M,
                  BLOCK_N, PARTIALS_IN_MEMORY)


@triton.jit
def add_rms_norm_backward_rows(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    DRES,  # *dresidual_out: element (row, col) at DRES + row * stride_dres_row + col
    X,  # *residual_out, the forward's: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype, saved by the forward
    DX,  # *dsum: contiguous (M, N), residual_out's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program writes row pid of dweight partial sums
    stride_dy_row,  # elements between consecutive rows of dy
    stride_dres_row,  # elements between consecutive rows of dresidual_out
    stride_x_row,  # elements between consecutive rows of residual_out
    M,  # number of rows
    N,  # elements per row
    tiles_per_program,  # this program walks row tiles [pid, pid + 1) * tiles_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # next power of two >= N: whole rows in registers
    PARTIALS_IN_MEMORY: tl.constexpr,  # partial sums in this program's partial rows, not registers
):
    """``rms_norm_backward_rows`` writing ``dsum = dresidual_out + dx``."""
    backward_rows(DY, DRES, X, W, None, RSTD, DX, DW_PARTIAL, None, stride_dy_row, stride_dres_row, stride_x_row, M, N,
                  tiles_per_program, True, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, False, False, ACC, BLOCK_M, BLOCK_N,
                  PARTIALS_IN_MEMORY)


@triton.jit
def add_layer_norm_backward_looped(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    DRES,  # *dresidual_out: element (row, col) at DRES + row * stride_dres_row + col
    X,  # *residual_out, the forward's: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    MEAN,  # *mean (M,), ACC dtype
    RSTD,  # *rstd (M,), ACC dtype
    DX,  # *dsum: contiguous (M, N), residual_out's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program's row of dweight partial sums
    DB_PARTIAL,  # *(programs, N) ACC: the same for dbias
    stride_dy_row,  # elements between consecutive rows of dy
    stride_dres_row,  # elements between consecutive rows of dresidual_out
    stride_x_row,  # elements between consecutive rows of residual_out
    M,  # number of rows
    N,  # elements per row
    rows_per_program,  # program pid walks rows [pid, pid + 1) * rows_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: each row is walked in chunks of BLOCK_N
):
    """``layer_norm_backward_looped`` writing ``dsum = dresidual_out + dx``."""
    backward_looped(DY, DRES, X, W, MEAN, RSTD, DX, DW_PARTIAL, DB_PARTIAL, stride_dy_row, stride_dres_row,
                    stride_x_row, M, N, rows_per_program, True, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, COMPUTE_DB, True,
                    ACC, BLOCK_N)


@triton.jit
def add_rms_norm_backward_looped(
    DY,  # *dy: element (row, col) at DY + row * stride_dy_row + col
    DRES,  # *dresidual_out: element (row, col) at DRES + row * stride_dres_row + col
    X,  # *residual_out, the forward's: element (row, col) at X + row * stride_x_row + col
    W,  # *weight (N,), contiguous; read only if HAS_WEIGHT
    RSTD,  # *rstd (M,), ACC dtype
    DX,  # *dsum: contiguous (M, N), residual_out's dtype; written only if COMPUTE_DX
    DW_PARTIAL,  # *(programs, N) ACC: this program's row of dweight partial sums
    stride_dy_row,  # elements between consecutive rows of dy
    stride_dres_row,  # elements between consecutive rows of dresidual_out
    stride_x_row,  # elements between consecutive rows of residual_out
    M,  # number of rows
    N,  # elements per row
    rows_per_program,  # program pid walks rows [pid, pid + 1) * rows_per_program
    HAS_WEIGHT: tl.constexpr,
    COMPUTE_DX: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_N: tl.constexpr,  # chunk size: each row is walked in chunks of BLOCK_N
):
    """``rms_norm_backward_looped`` writing ``dsum = dresidual_out + dx``."""
    backward_looped(DY, DRES, X, W, None, RSTD, DX, DW_PARTIAL, None, stride_dy_row, stride_dres_row, stride_x_row, M,
                    N, rows_per_program, True, HAS_WEIGHT, COMPUTE_DX, COMPUTE_DW, False, False, ACC, BLOCK_N)


@triton.jit
def layer_norm_reduce_partials(
    DW_PARTIAL,  # *(programs, N) ACC partial sums of dweight
    DB_PARTIAL,  # *(programs, N) ACC partial sums of dbias
    DW,  # *dweight (N,), weight's dtype; written only if COMPUTE_DW
    DB,  # *dbias (N,), bias's dtype; written only if COMPUTE_DB
    programs,  # rows of the partial buffers
    N,  # columns
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
    ACC: tl.constexpr,  # accumulation dtype
    BLOCK_P: tl.constexpr,  # partial rows per step
    BLOCK_N: tl.constexpr,  # columns per program
):
    """The second, small reduction: column sums of the partial buffers, in a fixed order."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    dw_acc = tl.zeros((BLOCK_P, BLOCK_N), ACC)
    db_acc = tl.zeros((BLOCK_P, BLOCK_N), ACC)
    for start in range(0, programs, BLOCK_P):
        prows = start + tl.arange(0, BLOCK_P)
        mask = (prows < programs)[:, None] & col_mask[None, :]
        offsets = prows.to(tl.int64)[:, None] * N + cols[None, :]
        if COMPUTE_DW:
            dw_acc += tl.load(DW_PARTIAL + offsets, mask=mask, other=0.0)
        if COMPUTE_DB:
            db_acc += tl.load(DB_PARTIAL + offsets, mask=mask, other=0.0)
    if COMPUTE_DW:
        tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)
    if COMPUTE_DB:
        tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_mask)
