"""Compile the kernels for a real GPU on a machine without one: a CI check and a tuning aid.

The interpreter runs kernels as NumPy, so it cannot show what only the compiler
rejects (types, layouts, register pressure). This compiles each kernel at the
configurations ``heuristics`` picks for M = 8192 rows and the given hidden
sizes, the way a launch specializes it (16-byte aligned pointers; sizes that
are multiples of 16 marked so), down to a cubin with ptxas, and reports the
registers and spill bytes ptxas prints::

    python -m normbench.impls.triton.compile_check --arch 90                 # H100, every size, dtype and norm
    python -m normbench.impls.triton.compile_check --arch 80 --hidden 1000,65536 --dtypes bfloat16
    python -m normbench.impls.triton.compile_check --norms rms_norm          # RMSNorm's kernels only
    python -m normbench.impls.triton.compile_check --norms add_rms_norm      # the fused add + RMSNorm's
    python -m normbench.impls.triton.compile_check --norms add_rms_norm_quant --qdtype float8_e5m2


Every operation: LayerNorm's kernels (``layer_norm_*``) and RMSNorm's (``rms_norm_*``, the
same bodies with CENTERED off, no bias), their fused forms with the residual add
(``add_layer_norm_*``, ``add_rms_norm_*``: HAS_RESIDUAL, HAS_DRES; the residual in x's
dtype), and the partial-sum reduction all launch; and the four with a quantized output
(``*_quant``, ``*_dynamic_quant``: their forward kernels with QUANT, for ``--qdtype``, float8_e4m3fn by default).

It exits 1 if any configuration fails to compile (spills are reported, not
failed: a tuning pass reads them). It sets ``TRITON_INTERPRET=0`` for itself.
It uses Triton's ahead-of-time API (``triton.compile`` on an ``ASTSource``),
the one ``triton/tools/compile.py`` uses, present in Triton 3.0 to 3.9.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

from normbench.impls.triton import heuristics
from normbench.kit.triton import ptxas_usage

ROWS = 8192
#: an H100 SXM
TARGET = heuristics.Target(sm_count=132)
HIDDEN = (1, 8, 33, 128, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


@dataclass(frozen=True)
class Variant:
    """One kernel at one configuration: ``constexprs`` plus the dtypes of its pointers."""

    kernel: str
    x: str  # dtype of x, dy, y, dx
    params: str  # dtype of weight, bias, dweight, dbias
    n: int
    num_warps: int
    constexprs: tuple[tuple[str, object], ...]

    @property
    def label(self) -> str:
        shown = {k: v for k, v in self.constexprs if k.startswith("BLOCK") or k in ("PARTIALS_IN_MEMORY", "QUANT")}
        flags = [k for k, value in self.constexprs if value is False and k != "PARTIALS_IN_MEMORY"]
        absent = f", no {'/'.join(flags)}" if flags else ""
        return f"{self.kernel}[{self.x}/{self.params}, N={self.n}, warps={self.num_warps}, {shown}{absent}]"


#: weight/bias presence: (HAS_WEIGHT, HAS_BIAS, COMPUTE_DX, COMPUTE_DW, COMPUTE_DB)
AFFINES = {"wb": (True, True, True, True, True), "none": (False, False, True, False, False),
           "dweight-only": (True, False, False, True, False)}
#: RMSNorm's (no bias): the first is the one the kernel-stats sweep compiles
RMS_AFFINES = {"w": (True, False, True, True, False), "none": (False, False, True, False, False),
               "dweight-only": (True, False, False, True, False)}
NORMS = ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
#: the four with a quantized output (a static scale, or one per row): their forward kernels alone, storing codes
QUANT_NORMS = tuple(f"{norm}_quant" for norm in NORMS) + tuple(f"{norm}_dynamic_quant" for norm in NORMS)
#: the operations whose kernels take a bias (LayerNorm's, plain and fused, quantized or not)
CENTERED = tuple(n for n in NORMS + QUANT_NORMS if n.startswith(("layer_norm", "add_layer_norm")))


def affines(norm: str = "layer_norm") -> dict[str, tuple[bool, ...]]:
    """The weight/bias cases compiled for ``norm``, the full one first."""
    if norm not in NORMS + QUANT_NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS + QUANT_NORMS)}, not {norm!r}")
    return AFFINES if norm in CENTERED else RMS_AFFINES


def variants(n: int, x: str, params: str, affine: str = "wb", rows: int = ROWS,
             target: heuristics.Target = TARGET, norm: str = "layer_norm",
             qdtype: str = "float8_e4m3fn") -> list[Variant]:
    """Every kernel the wrappers launch for ``rows`` x n inputs of these dtypes, ``affine`` and ``norm`` (a
    quantized one's codes in ``qdtype``)."""
    return [v for v, _ in _launches(n, x, params, affine, rows, target, norm, qdtype)]


def _launches(n: int, x: str, params: str, affine: str, rows: int, target: heuristics.Target,
              norm: str = "layer_norm", qdtype: str = "float8_e4m3fn") -> list[tuple[Variant, int]]:
    """Each kernel a forward and a backward launch (a quantized operation's forward alone), with its number of
    programs."""
    acc_bytes = 8 if x == "float64" else 4
    has_w, has_b, dx, dw, db = affines(norm)[affine]
    if norm in CENTERED:
        flags = (("HAS_WEIGHT", has_w), ("HAS_BIAS", has_b))
        grads = (("HAS_WEIGHT", has_w), ("COMPUTE_DX", dx), ("COMPUTE_DW", dw), ("COMPUTE_DB", db))
    else:  # RMSNorm's kernels take no bias flags
        flags = (("HAS_WEIGHT", has_w),)
        grads = (("HAS_WEIGHT", has_w), ("COMPUTE_DX", dx), ("COMPUTE_DW", dw))
    out = []
    f = heuristics.forward_config(rows, n, acc_bytes, target)
    name = f"{norm}_forward_looped" if f.looped else f"{norm}_forward_rows"
    block = (("BLOCK_N", f.block_n),) if f.looped else (("BLOCK_M", f.block_m), ("BLOCK_N", f.block_n))
    if norm in QUANT_NORMS:
        from normbench.impls.triton.forward_kernels import QUANT_FORMATS

        flags += (("QUANT", QUANT_FORMATS[qdtype]),)
        return [(Variant(name, x, params, n, f.num_warps, flags + block), math.prod(f.grid))]
    out.append((Variant(name, x, params, n, f.num_warps, flags + block), math.prod(f.grid)))
    b = heuristics.backward_config(rows, n, acc_bytes, target, 2 if x in ("float16", "bfloat16") else acc_bytes)
    if b.looped:
        out.append((Variant(f"{norm}_backward_looped", x, params, n, b.num_warps, grads + (("BLOCK_N", b.block_n),)),
                    b.programs))
    else:
        out.append((Variant(f"{norm}_backward_rows", x, params, n, b.num_warps,
                            grads + (("BLOCK_M", b.block_m), ("BLOCK_N", b.block_n),
                                     ("PARTIALS_IN_MEMORY", b.partials_in_memory))), b.programs))
    if dw or db:  # one reduction kernel for both normalizations
        r = heuristics.reduce_config(b.programs, n, target)
        out.append((Variant("layer_norm_reduce_partials", x, params, n, r.num_warps,
                            (("COMPUTE_DW", dw), ("COMPUTE_DB", db), ("BLOCK_P", r.block_p), ("BLOCK_N", r.block_n))),
                    math.prod(r.grid)))
    return out


def compiled_kernels(rows: int, hidden: int, dtype: str, arch: int, sm_count: int,
                     norm: str = "layer_norm") -> list[tuple[str, str, object, int]]:
    """The kernel-provider protocol of ``normbench.perf.kernel_stats``: every launch of a
    forward and a backward of ``norm`` (weight and bias, RMSNorm's weight, in x's dtype) on a
    GPU of ``sm_count`` SMs, as ``(kernel, label, compiled kernel, programs)``."""
    os.environ["TRITON_INTERPRET"] = "0"
    target = heuristics.Target(sm_count=sm_count)
    affine = next(iter(affines(norm)))
    return [(v.kernel, v.label, compile_variant(v, arch), programs)
            for v, programs in _launches(hidden, dtype, dtype, affine, rows, target, norm)]


#: the row strides, which Triton specializes to the constant 1 for N = 1 and marks divisible by 16 where N is
ROW_STRIDES = ("N", "stride_x_row", "stride_dy_row", "stride_r_row", "stride_dres_row")
#: pointer arguments that a launch passes as None when the flag is False
_ABSENT_WHEN = {"W": "HAS_WEIGHT", "B": "HAS_BIAS", "DX": "COMPUTE_DX", "DW_PARTIAL": "COMPUTE_DW",
                "DW": "COMPUTE_DW", "DB_PARTIAL": "COMPUTE_DB", "DB": "COMPUTE_DB"}


def _arg_type(arg: str, v: Variant) -> str:
    """The Triton signature type of a kernel argument, from its naming convention."""
    acc = "fp64" if v.x == "float64" else "fp32"
    if arg in ("X", "Y", "DY", "DX", "R", "RES_OUT", "DRES"):  # the residual stream in x's dtype here
        return "*" + TRITON_TYPES[v.x]
    if arg in ("W", "B", "DW", "DB"):
        return "*" + TRITON_TYPES[v.params]
    if arg in ("MEAN", "RSTD", "SUMS", "DW_PARTIAL", "DB_PARTIAL"):
        return "*" + acc
    if arg == "SCALES":  # a dynamic quantization's row scales
        return "*fp32"
    if arg == "Q":  # the codes: float8 as its bytes (QUANT 1, 2), or int8 (3)
        return "*i8" if dict(v.constexprs)["QUANT"] == 3 else "*u8"
    return "i64" if arg in ("eps_bits", "scale_bits", "ub_bits") else "i32"


def _specialized(arg: str, v: Variant, flags: dict) -> tuple[bool, object]:
    """Whether a launch makes ``arg`` a constant, and its value: absent pointers are None,
    and Triton specializes integers equal to 1 (N = 1 rows, whose row strides are 1)."""
    if arg in _ABSENT_WHEN and not flags.get(_ABSENT_WHEN[arg], True):
        return True, None
    if v.n == 1 and arg in ROW_STRIDES:
        return True, 1
    return False, None


def compile_variant(v: Variant, arch: int):
    """``triton.compile`` one variant for ``sm_<arch>``; returns the compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from normbench.impls.triton import backward_kernels, forward_kernels

    fn = getattr(forward_kernels if "forward" in v.kernel else backward_kernels, v.kernel)
    constexprs = dict(v.constexprs, ACC=forward_kernels.accumulator(v.x == "float64"))
    signature, attrs = {}, {}
    for i, arg in enumerate(fn.arg_names):
        constant, value = _specialized(arg, v, constexprs)
        if constant:
            constexprs[arg] = value
        if arg in constexprs:
            signature[arg] = "constexpr"
            continue
        signature[arg] = _arg_type(arg, v)
        if signature[arg].startswith("*") or (arg in ROW_STRIDES and v.n % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": v.num_warps})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normbench.impls.triton.compile_check", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x10. Default: %(default)r")
    parser.add_argument("--hidden", default=",".join(map(str, HIDDEN)), help="hidden sizes. Default: %(default)s")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32,float64",
                        help="x dtypes (bfloat16 also runs with float32 parameters). Default: %(default)s")
    parser.add_argument("--norms", default=",".join(NORMS + QUANT_NORMS), help="operations. Default: %(default)s")
    parser.add_argument("--qdtype", default="float8_e4m3fn",
                        help="the quantized operations' codes: float8_e4m3fn, float8_e5m2 or int8. Default: %(default)s")
    args = parser.parse_args(argv)
    norms = args.norms.split(",")
    if any(norm not in NORMS + QUANT_NORMS for norm in norms):
        parser.error(f"--norms: give some of {', '.join(NORMS + QUANT_NORMS)}, separated by commas")
    os.environ["TRITON_INTERPRET"] = "0"
    from normbench.kit.triton import ensure_mode

    if ensure_mode().interpreter:
        print("compile_check: the kernels were already set to the interpreter in this process", file=sys.stderr)
        return 2
    from normbench.impls.triton.forward_kernels import QUANT_FORMATS

    if args.qdtype not in QUANT_FORMATS:
        parser.error(f"--qdtype: give one of {', '.join(QUANT_FORMATS)}")
    pairs = [(d, d) for d in args.dtypes.split(",")] + ([("bfloat16", "float32")] if "bfloat16" in args.dtypes else [])
    failures = 0
    for n, norm in ((int(h), norm) for h in args.hidden.split(",") for norm in norms):
        # every dtype pair with weight and bias; the other weight/bias cases with the first pair
        full, *others = affines(norm)
        runs = [(x, params, full) for x, params in pairs] + [(*pairs[0], a) for a in others]
        for x, params, affine in runs:
            for v in variants(n, x, params, affine, norm=norm, qdtype=args.qdtype):
                try:
                    registers, spills = ptxas_usage(compile_variant(v, args.arch).asm["ptx"], args.arch)
                except Exception as exc:  # report every failure, then exit 1
                    failures += 1
                    print(f"FAIL {v.label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                    continue
                print(f"ok   {v.label}: {registers} registers, {spills} bytes spilled")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
