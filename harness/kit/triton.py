"""Where the Triton kernels run: compiled on a CUDA device, or the Triton interpreter on CPU.

Triton decides when a kernel is *decorated* (``@triton.jit``, at the import of
the module that defines it) whether it becomes a compiled kernel or an
interpreted one, by reading the environment variable ``TRITON_INTERPRET``. So
the choice must be made before our kernel modules are imported, and it holds
for the rest of the process. :func:`ensure_mode` makes it, once:

* ``TRITON_INTERPRET=1`` in the environment: the interpreter (the user asked for it);
* ``TRITON_INTERPRET=0`` (or any other set value): compiled kernels, even where
  no CUDA device exists (launches then fail with Triton's own error);
* unset: compiled kernels when ``torch.cuda.is_available()``, else the
  interpreter, and ``TRITON_INTERPRET=1`` is set for this process.

Triton's own language helpers (``tl.sum``, ...) are ``@triton.jit`` functions
too, decorated when triton is first imported: a process that imported triton
before the interpreter was chosen cannot interpret kernels, and
:func:`ensure_mode` says so (set ``TRITON_INTERPRET=1`` in the environment, or
create the backend before importing triton).

For a Triton-based backend (normbench's ``triton``, the Liger-Kernel example plugin) the kit also
holds what the interpreter changes, to say in the backend's attributes (:data:`TIMING_NOTE`,
:data:`RUNTIME_NOTE`, :func:`interpreter_max_elements`, :data:`INTERPRETER_DEVICE`), and what
``ptxas`` says of a compiled kernel's registers and spills, without a GPU (:func:`ptxas_usage`).

Nothing here runs at import time: ``import normbench.kit.triton`` imports
neither torch nor triton. The kernel modules call :func:`ensure_mode` first
thing, and are themselves imported lazily on the first launch, so importing
the backend, the autograd function or the layer touches no GPU driver.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ENV = "TRITON_INTERPRET"
#: the device string of an interpreted backend, for ``normbench list --probe``
INTERPRETER_DEVICE = "interpreter (CPU; not for timing)"
#: an interpreted backend's ``timing_note``: why the throughput suite does not time it
TIMING_NOTE = "Triton interpreter on CPU: timings are meaningless"
#: an interpreted backend's ``runtime_note``: what the interpreter computes differently from a GPU (a failure that
#: the interpreter explains says "explained by the runtime, not the kernel"; ``normbench run`` prints it)
RUNTIME_NOTE = ("Triton interpreter on CPU: it computes bfloat16 arithmetic on raw bit patterns and converts "
                "fp32 to bfloat16 by truncation (0.57 -> 0.56640625, where a GPU rounds to 0.5703125), so a bfloat16 "
                "result can fail here for reasons that do not exist on a GPU")
#: the environment variable that sets an interpreted backend's ``max_elements`` (0: no cap)
MAX_ELEMENTS_ENV = "NORMBENCH_TRITON_MAX_ELEMENTS"


def interpreter_max_elements(default: int) -> int | None:
    """An interpreted backend's ``max_elements``: :data:`MAX_ELEMENTS_ENV` if set (0: no cap), else ``default``.
    The interpreter runs a grid's programs one after another in NumPy: a GPU-sized case would take hours."""
    value = os.environ.get(MAX_ELEMENTS_ENV, "").strip()
    if not value:
        return default
    try:
        limit = int(value)
    except ValueError:
        raise ValueError(f"{MAX_ELEMENTS_ENV}={value!r} is not an integer; use a number of elements, "
                         f"or 0 for no cap") from None
    return limit if limit > 0 else None


@dataclass(frozen=True)
class Mode:
    """The process-wide choice: ``interpreter`` True runs every kernel in the
    Triton interpreter on CPU tensors; False compiles them for ``torch_device``."""

    interpreter: bool
    torch_device: str  # "cpu" or "cuda"
    reason: str  # why this mode, for messages

    @property
    def description(self) -> str:
        return INTERPRETER_DEVICE if self.interpreter else self.torch_device


@functools.lru_cache(maxsize=1)
def ensure_mode() -> Mode:
    """Choose compiled or interpreted kernels for this process (see the module doc).

    Call it before importing triton anywhere our kernels will be defined; it is
    cached, so the first call decides.
    """
    setting = os.environ.get(ENV)
    if setting is not None and setting.strip() == "1":
        return Mode(True, "cpu", f"{ENV}=1 is set")
    if setting is not None:
        return Mode(False, "cuda", f"{ENV}={setting} is set")
    import torch

    if torch.cuda.is_available():
        return Mode(False, "cuda", "a CUDA device is present")
    if _triton_imported_compiled():
        raise RuntimeError(f"no CUDA device is present, so the Triton kernels must run in the interpreter, but "
                           f"triton was imported before {ENV}=1 was set; set {ENV}=1 in the environment, or "
                           f"import normbench.impls.triton (and create its backend) before triton")
    os.environ[ENV] = "1"
    return Mode(True, "cpu", f"no CUDA device is present, so {ENV}=1 was set for this process")


def _triton_imported_compiled() -> bool:
    """Whether triton is already imported with compiled ``@triton.jit`` helpers."""
    if "triton" not in sys.modules:
        return False
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return isinstance(getattr(tl.standard, "sum", None), JITFunction)


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
