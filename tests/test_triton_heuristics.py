"""The Triton launch heuristics are plain Python: every grid covers every row and
column, no program is left without work, and the interpreter takes the GPU's paths.
(No torch or triton needed.)"""

import math

import pytest

from normbench.cases import HIDDEN, ROWS
from normbench.impls.triton import heuristics as h

GPU = h.Target(sm_count=132)
SIZES = sorted(set(HIDDEN) | {5000, 20000, 100000, 1 << 20})
TARGETS = {"gpu": GPU, "interpreter": h.Target.interpreted()}


@pytest.mark.parametrize("acc_bytes", [4, 8])
@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
def test_forward_covers_every_row_once(target, acc_bytes):
    for n in SIZES:
        for rows in (*ROWS[1:], 8192, 65537):
            cfg = h.forward_config(rows, n, acc_bytes, target)
            assert cfg.looped == (h.next_pow2(n) * acc_bytes > h.FUSED_MAX_BYTES)
            assert cfg.looped or cfg.block_n >= n
            assert cfg.grid[0] * cfg.block_m >= rows > (cfg.grid[0] - 1) * cfg.block_m
            assert cfg.num_warps in (1, 2, 4, 8, 16)


@pytest.mark.parametrize("acc_bytes", [4, 8])
@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
def test_backward_programs_cover_every_row_and_none_is_idle(target, acc_bytes):
    for n in SIZES:
        for rows in (*ROWS[1:], 8192, 65537):
            cfg = h.backward_config(rows, n, acc_bytes, target)
            rows_per_program = cfg.tiles_per_program * cfg.block_m
            assert cfg.programs * rows_per_program >= rows > (cfg.programs - 1) * rows_per_program
            units = h.cdiv(rows, cfg.block_m)  # row tiles, or rows when looped
            # about the device's programs; more only to keep sequential chains short
            assert cfg.programs <= max(target.sm_count * h.PROGRAMS_PER_SM, 2 * math.isqrt(units) + 2)
            chain = cfg.tiles_per_program + (cfg.block_m if target.interpreter else 0)
            assert chain <= 2 * max(h.CHAIN_MIN, math.isqrt(rows)), "dweight/dbias sums must stay blocked"
            assert cfg.column_chunks * cfg.block_n >= n
            assert cfg.looped == (cfg.column_chunks > 1 or h.next_pow2(n) * acc_bytes > h.BACKWARD_FUSED_MAX_BYTES)
            r = h.reduce_config(cfg.programs, n, target)
            assert r.grid[0] * r.block_n >= n and r.block_p <= h.next_pow2(cfg.programs)


def test_interpreter_runs_the_gpus_code_paths():
    interpreter = TARGETS["interpreter"]
    for n in SIZES:
        for acc_bytes in (4, 8):
            gpu_f, int_f = h.forward_config(64, n, acc_bytes, GPU), h.forward_config(64, n, acc_bytes, interpreter)
            assert (gpu_f.looped, gpu_f.block_n) == (int_f.looped, int_f.block_n)
            gpu_b, int_b = h.backward_config(64, n, acc_bytes, GPU), h.backward_config(64, n, acc_bytes, interpreter)
            assert (gpu_b.looped, gpu_b.block_n) == (int_b.looped, int_b.block_n)


def test_row_in_registers_up_to_16k_fp32_values():
    assert not h.forward_config(8192, 16384, 4, GPU).looped
    assert h.forward_config(8192, 16385, 4, GPU).looped
    assert h.forward_config(8192, 8193, 8, GPU).looped
    small = h.forward_config(8192, 256, 4, GPU)
    assert small.block_m == h.TILE_BYTES // 4 // 256 and small.grid == (8192 * 256 * 4 // h.TILE_BYTES,)
