"""Static checks of compiled kernels (normbench.perf.kernel_stats): PTX access widths, the
occupancy estimate, and our kernels compiled for sm_90 at shapes of the GPU sweep (no
spills, 16-byte accesses, at least 32 resident warps per SM), LayerNorm's and RMSNorm's."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import types

import pytest

from normbench.core.exceptions import NormbenchError
from normbench.perf.kernel_stats import STATS_COLUMNS, access_widths, occupancy, stats_rows
from normbench.perf.traffic import GPUS

H100, A100 = GPUS["h100"], GPUS["a100"]


def test_access_widths_count_vectors_and_predicated_accesses():
    ptx = """
        @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
        ld.global.L1::evict_last.v2.b32 { %r5, %r6 }, [ %rd2 + 0 ];
        @%p2 ld.global.b32 { %r7 }, [ %rd3 + 0 ];
        st.global.v4.b32 [ %rd4 + 0 ], { %r1, %r2, %r3, %r4 };
        @%p3 st.global.b16 [ %rd5 + 0 ], { %rs1 };
        ld.shared.v4.b32 { %r1, %r2, %r3, %r4 }, [ %r9 + 0 ];
    """
    loads, stores = access_widths(ptx)
    assert loads == {16: 1, 8: 1, 4: 1} and stores == {16: 1, 2: 1}


@pytest.mark.parametrize("registers,warps,smem,gpu,want", [
    (74, 16, 8192, H100, (1, "registers")),  # issue 14: 16 warps at 71-121 registers, one CTA
    (64, 16, 8192, H100, (2, "registers")),  # 64 x 32 x 16 x 2 = the 64K register file
    (24, 16, 64, H100, (4, "threads")),  # 2048 threads per SM
    (32, 4, 100 * 1024, H100, (2, "shared memory")),  # 228 KiB per SM, 1 KiB reserved per CTA
    (32, 4, 100 * 1024, A100, (1, "shared memory")),  # 164 KiB
    (16, 1, 0, H100, (32, "ctas")),  # at most 32 CTAs
])
def test_occupancy_estimate(registers, warps, smem, gpu, want):
    assert occupancy(registers, smem, warps, gpu) == want


def test_a_provider_without_a_norm_keyword_is_refused_for_rms_norm():
    """A LayerNorm-only provider (compiled_kernels without ``norm``) is asked for LayerNorm as
    before, and refused, saying why, for RMSNorm."""

    def compiled_kernels(rows, hidden, dtype, arch, sm_count):
        return []

    LayerNormOnly = types.ModuleType("plugin.kernels")
    LayerNormOnly.compiled_kernels = compiled_kernels

    assert stats_rows(LayerNormOnly, [(8, 8, "float32")], H100, 90) == []
    with pytest.raises(NormbenchError, match="plugin.kernels.compiled_kernels takes no norm keyword: it provides "
                                             "LayerNorm kernels only, not rms_norm"):
        stats_rows(LayerNormOnly, [(8, 8, "float32")], H100, 90, norm="rms_norm")


@pytest.mark.e2e
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_our_kernels_compiled_for_sm90_have_no_spills_and_fill_the_sms(tmp_path, norm):
    """The issue-14 configurations, compiled in a fresh process: the looped backward (1 CTA of
    32 warps per SM), the bf16 forward at 16384 (32 warps), the fp32 backward rows at 1024 and
    8192 (were 1 CTA of 16 warps at 74 and 121 registers); RMSNorm's kernels at the same shapes
    (its looped backward adds its dweight term before dx: in dx's order ptxas spilled in bf16)."""
    out = tmp_path / "kernels-sm90.csv"
    shapes = "8192x16384:bfloat16,65536x1024:float32,8192x8192:float32,8192x65536:float16"
    run = subprocess.run([sys.executable, "-m", "normbench", "kernel-stats", "--gpu", "h100", "--shapes", shapes,
                          "--norm", norm, "--out", str(out)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "TRITON_DEFAULT_FP_FUSION": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == ("schema_version", *STATS_COLUMNS)  # the file as the schema writes it
    kernels = {(r["kernel"], int(r["hidden"])) for r in rows}
    assert {(f"{norm}_backward_looped", 16384), (f"{norm}_forward_rows", 16384),
            (f"{norm}_backward_rows", 1024), (f"{norm}_backward_looped", 8192),
            (f"{norm}_forward_looped", 65536)} <= kernels
    for r in rows:
        assert int(r["spill_bytes"]) == 0, r["label"]
        if r["kernel"] != "layer_norm_reduce_partials":  # a small grid (hidden/128 programs)
            assert int(r["resident_warps"]) >= 32, r["label"]
            assert (int(r["widest_load"]), int(r["widest_store"])) == (16, 16), r["label"]
