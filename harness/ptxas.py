"""What ``ptxas -v`` says about one kernel's PTX: registers per thread and spilled bytes.

Shared by the kernels' own compile check (``normbench.impls.triton.compile_check``) and the
static estimates of any Triton backend's kernels (``normbench.perf.kernel_stats``). Uses the
ptxas bundled with Triton, so it needs no GPU and no CUDA toolkit.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile


def ptxas_usage(ptx: str, arch: int) -> tuple[int, int]:
    """(registers per thread, spill store + spill load bytes) of one kernel's PTX compiled for ``sm_<arch>``
    (``sm_90a`` from 90 on); -1 registers when ptxas does not say."""
    from triton.backends.nvidia.compiler import get_ptxas

    suffix = "a" if arch >= 90 else ""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        log = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}{suffix}", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    registers = re.search(r"Used (\d+) registers", log)
    spilled = sum(int(m) for m in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return (int(registers[1]) if registers else -1), spilled
