"""Launch heuristics: block sizes, warps and grids, in plain Python (no torch, no triton).

The same for LayerNorm and RMSNorm: one kernel body per path serves both (see
``forward_kernels``), and one configuration per size; ``compile_check`` and
``normbench kernel-stats --norm rms_norm`` compile both (docs/triton-kernels.md has
their registers: no spill in the GPU sweep on sm_90 or sm_80).

These are starting points, chosen from PERFORMANCE.md ("What makes the fast
ones fast") and register arithmetic, not yet tuned on a GPU; every number that
a tuning pass should revisit is a named constant here. The kernels take all of
them as arguments (``tl.constexpr`` where they shape registers), so tuning
never touches kernel code.

Forward (``forward_config``):

* **row in registers** when the padded row ``BLOCK_N = next_pow2(N)`` holds at
  most ``FUSED_MAX_BYTES`` of accumulators (16384 fp32 values, 8192 fp64): one
  read of x, two-pass statistics in registers, one write of y. For small rows
  a program takes ``BLOCK_M`` rows at once, about ``TILE_BYTES`` of accumulators, so
  each program still moves enough bytes to hide memory latency.
* **looped** beyond that: one program per row walks it in ``CHUNK_BYTES``
  chunks twice (statistics, then y); the second read mostly hits L2.

Backward (``backward_config``), from the saved mean and rstd:

* **row in registers** up to ``BACKWARD_FUSED_MAX_BYTES`` (it holds x, dy,
  xhat, g and the partial sums): a *persistent* grid of at most
  ``PROGRAMS_PER_SM`` programs per SM; each walks a contiguous range of row
  tiles, writes dx, and keeps dweight/dbias partial sums in registers, written
  once per program to a ``(programs, N)`` buffer (or added to that
  buffer's row after each tile for half inputs of 512-2048 columns, see
  ``BackwardConfig.partials_in_memory``) that ``reduce_config``'s
  kernel sums in a fixed order (no atomics: bit-identical run to run). More
  programs are added when needed so that none walks more than sqrt(tiles)
  tiles: each dweight/dbias value is then a sum with sequential chains of
  about sqrt(M) additions, within the error model's k(M) = 16 + 2*sqrt(M).
* **looped** beyond that: ``LOOPED_PROGRAMS_PER_SM`` persistent programs per
  SM, each walking contiguous whole rows in ``BACKWARD_CHUNK_BYTES`` chunks,
  twice per row (row sums, then dx and the partial sums); the second walk
  reads the row from L1/L2, so x and dy leave DRAM once. The partial rows
  live in memory (read back from L2), one per program: ``8*N*programs``
  bytes written and read again by the reduction, the traffic beyond the byte
  model, hence one program (of up to ``LOOPED_MAX_WARPS`` warps) per SM.

Warps: about ``ELEMENTS_PER_THREAD`` values per thread (16-byte loads of half
types), between 1 and ``MAX_WARPS``.

Under the Triton interpreter (``Target.interpreter``) every program is an
iteration of a Python loop costing milliseconds, and there are no SMs or
registers: ``INTERPRETER_SM_COUNT`` stands in for the SMs (small, but several
programs and the partial reduction still run), and row tiles and the
reduction's column blocks are wider (``INTERPRETER_TILE_BYTES``,
``INTERPRETER_REDUCE_BLOCK_N``); backward row tiles hold at most sqrt(M) rows,
because the interpreter sums a tile's rows sequentially (a GPU, as a tree). Which path a size takes (row in registers or
looped) and its chunk sizes stay the GPU's, so the interpreter runs the code
the GPU runs; ``normbench.impls.triton.compile_check`` compiles the GPU's exact configurations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the most accumulator bytes of one padded row kept in registers (forward)
FUSED_MAX_BYTES = 64 * 1024
#: the same for the backward, which keeps more values live per element
BACKWARD_FUSED_MAX_BYTES = 16 * 1024
#: the accumulator bytes of one chunk of a looped row
CHUNK_BYTES = 16 * 1024
#: accumulator bytes per program for short rows (several rows per program): 4096 fp32 values
TILE_BYTES = 16 * 1024
ELEMENTS_PER_THREAD = 8
MAX_WARPS = 16
#: the forward's whole rows of 16384 values take 32 warps (16 per thread: 74 registers
#: at 16 warps left one CTA per SM in bf16)
FORWARD_MAX_WARPS = 32
#: persistent backward programs per SM
PROGRAMS_PER_SM = 2
#: half inputs with padded rows in this range keep the backward's partial sums in memory
#: (``BackwardConfig.partials_in_memory``): in registers they need 74-86 registers
PARTIALS_IN_MEMORY_MIN = 512
PARTIALS_IN_MEMORY_MAX = 2048
#: the looped backward: one program per SM (its partial rows, 8*N bytes each, are the
#: traffic beyond the byte model), of up to 32 warps, walking rows in chunks of this many
#: accumulator bytes (8192 fp32 values: 8 per thread, 16-byte loads of half types)
LOOPED_PROGRAMS_PER_SM = 1
LOOPED_MAX_WARPS = 32
BACKWARD_CHUNK_BYTES = 32 * 1024
#: under the interpreter: the stand-in SM count, and values per row tile
INTERPRETER_SM_COUNT = 4
INTERPRETER_TILE_BYTES = 256 * 1024
#: sequential chains this short are always within the error model (see _chain_limit)
CHAIN_MIN = 4
#: the partial-sum reduction's tile: partial rows by columns
REDUCE_BLOCK_P = 32
REDUCE_BLOCK_N = 128
#: its columns per program under the interpreter, where each program costs milliseconds of Python
INTERPRETER_REDUCE_BLOCK_N = 4096


@dataclass(frozen=True)
class Target:
    """Where the kernels run: a GPU's SM count, or the interpreter."""

    sm_count: int
    interpreter: bool = False

    @classmethod
    def interpreted(cls) -> Target:
        return cls(INTERPRETER_SM_COUNT, True)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def warps_for(elements: int, most: int = MAX_WARPS) -> int:
    """Warps for a program holding ``elements`` values: ELEMENTS_PER_THREAD each, 1..``most``."""
    return max(1, min(most, next_pow2(cdiv(elements, 32 * ELEMENTS_PER_THREAD))))


@dataclass(frozen=True)
class ForwardConfig:
    """How the forward launches. ``looped``: one row per program in ``block_n`` chunks."""

    looped: bool
    block_m: int  # rows per program
    block_n: int  # the padded row, or one chunk of it
    num_warps: int
    grid: tuple[int, ...]


def _row_tile(rows: int, block_n: int, acc_bytes: int, target: Target) -> int:
    """Rows per program for a row of ``block_n`` padded values (a power of two)."""
    tile = (INTERPRETER_TILE_BYTES if target.interpreter else TILE_BYTES) // acc_bytes
    return max(1, min(tile // block_n, next_pow2(rows)))


def forward_config(rows: int, n: int, acc_bytes: int, target: Target) -> ForwardConfig:
    """The forward launch for ``rows`` rows of ``n`` values, accumulating in ``acc_bytes`` (4 or 8)."""
    rows = max(rows, 1)
    block_n = next_pow2(n)
    if block_n * acc_bytes <= FUSED_MAX_BYTES:
        block_m = _row_tile(rows, block_n, acc_bytes, target)
        return ForwardConfig(False, block_m, block_n, warps_for(block_m * block_n, FORWARD_MAX_WARPS),
                             (cdiv(rows, block_m),))
    chunk = min(block_n, CHUNK_BYTES // acc_bytes)
    return ForwardConfig(True, 1, chunk, warps_for(chunk), (rows,))


@dataclass(frozen=True)
class BackwardConfig:
    """How the backward launches.

    Row in registers: ``programs`` persistent programs, each walking
    ``tiles_per_program`` tiles of ``block_m`` rows. Looped: ``programs``
    persistent programs, each walking ``tiles_per_program`` whole rows in
    chunks of ``block_n`` columns.
    """

    looped: bool
    block_m: int
    block_n: int
    num_warps: int
    programs: int  # rows of the partial-sum buffer
    tiles_per_program: int  # row tiles (row in registers) or rows (looped) per program
    column_chunks: int  # always 1 (programs own whole rows)
    #: row in registers: each tile's dweight/dbias column sums are added to partial sums in
    #: registers, or to the program's partial rows in memory, read back from L1/L2: half
    #: inputs of 512 to 2048 columns (63-64 registers instead of 74-86, two 16-warp CTAs per
    #: SM), at the price of 2*N*4 bytes read and written per tile in L1/L2
    partials_in_memory: bool = False


def _chain_limit(units: int) -> int:
    """The longest sequential chain of additions allowed over ``units`` terms: about
    sqrt(units), so that a dweight/dbias value stays a blocked sum, whose error the
    error model bounds by k(M) = 16 + 2*sqrt(M) (short chains are always fine)."""
    return max(CHAIN_MIN, math.isqrt(units))


def _units_per_program(units: int, programs: int) -> int:
    """Row tiles (or rows) per persistent program: ``units`` spread over ``programs``,
    but no more than the chain limit."""
    return max(1, min(cdiv(units, min(units, programs)), _chain_limit(units)))


def backward_config(rows: int, n: int, acc_bytes: int, target: Target, x_bytes: int = 4) -> BackwardConfig:
    """The backward launch for ``rows`` rows of ``n`` values of ``x_bytes`` bytes each."""
    rows, programs = max(rows, 1), max(1, target.sm_count * PROGRAMS_PER_SM)
    block_n = next_pow2(n)
    if block_n * acc_bytes <= BACKWARD_FUSED_MAX_BYTES:
        block_m = _row_tile(rows, block_n, acc_bytes, target)
        if target.interpreter:  # there tl.sum over a tile's rows is a sequential NumPy sum
            block_m = min(block_m, 1 << (_chain_limit(rows).bit_length() - 1))
        tiles = cdiv(rows, block_m)
        per_program = _units_per_program(tiles, programs)
        return BackwardConfig(False, block_m, block_n, warps_for(block_m * block_n), cdiv(tiles, per_program),
                              per_program, 1,
                              x_bytes < 4 and PARTIALS_IN_MEMORY_MIN <= block_n <= PARTIALS_IN_MEMORY_MAX)
    chunk = min(block_n, BACKWARD_CHUNK_BYTES // acc_bytes)
    per_program = _units_per_program(rows, max(1, target.sm_count * LOOPED_PROGRAMS_PER_SM))
    warps = min(LOOPED_MAX_WARPS, next_pow2(cdiv(chunk, 32 * ELEMENTS_PER_THREAD)))
    return BackwardConfig(True, 1, chunk, warps, cdiv(rows, per_program), per_program, 1)


@dataclass(frozen=True)
class ReduceConfig:
    """The final dweight/dbias reduction over the ``programs`` rows of partial sums."""

    block_p: int
    block_n: int
    num_warps: int
    grid: tuple[int, ...]


def reduce_config(programs: int, n: int, target: Target) -> ReduceConfig:
    """The reduction of ``programs`` rows of ``n`` partial sums."""
    block_p = min(REDUCE_BLOCK_P, next_pow2(programs))
    block_n = min(INTERPRETER_REDUCE_BLOCK_N if target.interpreter else REDUCE_BLOCK_N, next_pow2(n))
    return ReduceConfig(block_p, block_n, warps_for(block_p * block_n), (cdiv(n, block_n),))


#: the normalizations the kernels compute, and per normalization (saved statistics per row,
#: partial-sum buffers of the backward): LayerNorm saves mean and rstd and sums dweight and
#: dbias; RMSNorm saves rstd and sums dweight. The fused operations (the residual add first) save and sum what
#: their normalization does: the residual, residual_out, dresidual_out and dsum each move once, as the byte model says.
#: The quantized ones (``*_quant``, ``*_dynamic_quant``: a forward alone) save their normalization's statistics; their
#: codes (and row scales) move once.
NORMALIZATIONS = {"layer_norm": (2, 2), "rms_norm": (1, 1), "add_layer_norm": (2, 2), "add_rms_norm": (1, 1)}
NORMALIZATIONS.update({f"{norm}{quant}": (statistics, 0) for norm, (statistics, _) in list(NORMALIZATIONS.items())
                       for quant in ("_quant", "_dynamic_quant")})


def traffic_beyond_model(rows: int, n: int, acc_bytes: int, target: Target, direction: str, x_bytes: int = 4,
                         norm: str = "layer_norm") -> int:
    """The unique bytes our kernels move beyond the byte model (``normbench.perf.roofline``, with
    weight and bias for LayerNorm, weight for RMSNorm), as ``normbench.perf.traffic`` counts them
    (re-reads inside a launch cached):

    * forward: the saved statistics, ``2*rows*acc_bytes`` (mean and rstd; RMSNorm's rstd alone:
      ``rows*acc_bytes``), which the inference model does not count;
    * backward: the partial-sum buffers, each ``programs x n`` accumulators written by the
      main kernel and read by the reduction (LayerNorm's dweight and dbias:
      ``4*programs*n*acc_bytes``; RMSNorm's dweight: ``2*programs*n*acc_bytes``), and
      statistics wider than the model's fp32 (fp64: 4 more bytes per statistic and row).

    Everything else (x, dy, y, dx, weight, bias, dweight, dbias) leaves or reaches DRAM
    once. ``tests/test_traffic_triton.py`` checks this against the counter.
    """
    if norm not in NORMALIZATIONS:
        raise ValueError(f"norm must be one of {', '.join(NORMALIZATIONS)}, not {norm!r}")
    statistics, buffers = NORMALIZATIONS[norm]
    if direction == "forward":
        return statistics * rows * acc_bytes
    if direction == "backward":
        programs = backward_config(rows, n, acc_bytes, target, x_bytes).programs
        return 2 * buffers * programs * n * acc_bytes + statistics * rows * (acc_bytes - 4)
    raise ValueError(f"direction must be forward or backward, not {direction!r}")
