"""``normbench preflight``: in seconds, what a run on this machine will use, and one line for what is missing.

Made for a GPU node reached for a short slot (docs/usage.md): before a minute of it goes to a run that cannot
work, say normbench's version and commit, whether its own dependencies are installed (a wheel installed with
``--no-deps`` brings none), each GPU (name, memory, SM count, clocks, compute capability and mode, driver, CUDA),
the libraries' versions, whether Triton can build its CUDA launcher here (Triton 3.6 compiles it with the system C
compiler against Python's headers; newer ones need neither), whether Nsight Compute is there for the DRAM counters,
and each of normbench's backends as created here, with its device. Without ``--cpu`` a CUDA GPU is required: none seen
is the error. Every check is a :class:`Check`; the first that fails ends the command with exit status 2,
after everything was printed.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from normbench import __version__
from normbench.core import environment, provenance, safe_text

#: the backends of normbench that a GPU run measures, in the order they are tried
GPU_BACKENDS = ("torch", "triton", "jax")


@dataclass(frozen=True)
class Check:
    """One thing a run needs: what, what was found, and (if missing) the fix."""

    what: str
    found: str
    problem: str = ""

    def line(self) -> str:
        return f"  {'ok ' if not self.problem else 'NO '} {self.what}: {safe_text.safe(self.found)}"


def dependencies() -> Check:
    """normbench's own requirements (its metadata's, extras aside), each installed: a wheel installed with
    ``--no-deps`` brings none of them."""
    import importlib.metadata
    import re

    try:
        required = importlib.metadata.requires("normbench") or []
    except importlib.metadata.PackageNotFoundError:
        return Check("normbench's dependencies", "not checked: normbench is not installed as a distribution (a "
                                                 "source tree on sys.path)")
    found, missing = [], []
    for requirement in required:
        if "extra ==" in requirement:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement)
    if missing:
        return Check("normbench's dependencies", ", ".join(found) or "none",
                     f"normbench needs {', '.join(missing)}, not installed here. Fix: bring their wheels and "
                     f"pip install --no-index --no-deps them (docs/gpu-node.md)")
    return Check("normbench's dependencies", ", ".join(found))


def profiler() -> Check:
    """Nsight Compute, which the run's DRAM counters need (never a problem: without it the run says so and goes on)."""
    from normbench.perf.counters import ncu

    found = ncu()
    return Check("ncu (Nsight Compute: the run's DRAM counters)", found or "not on the PATH: the counters will not be "
                                                                       "measured, the rest of the run will")


def c_compiler() -> Check:
    """The C compiler Triton 3.6 builds its CUDA launcher with, found as Triton finds it: ``$CC`` run as it is (a
    program on the PATH or a path; set but empty or blank, it names nothing Triton can run), else gcc, else clang."""
    what = "C compiler (Triton <= 3.6 builds its CUDA launcher with it)"
    if "CC" in os.environ:
        cc = os.environ["CC"]
        found = shutil.which(cc) if cc.strip() else None
        if found:
            return Check(what, found)
        return Check(what, f"$CC={cc!r} is no program",
                     f"CC is set to {cc!r}, which names no program on the PATH, and Triton runs $CC, "
                     f"as it is, as its compiler. Fix: unset CC, or set it to a compiler (e.g. CC=gcc)")
    found = next((shutil.which(n) for n in ("gcc", "clang") if shutil.which(n)), None)
    if found:
        return Check(what, found)
    return Check(what, "none on the PATH",
                 "no C compiler ($CC, gcc or clang) on the PATH, which Triton 3.6 needs to build its CUDA "
                 "launcher. Fix: install gcc (apt install gcc), or set CC")


def python_headers() -> Check:
    """Python.h, against which Triton 3.6 builds its launcher."""
    header = Path(sysconfig.get_paths().get("include", "")) / "Python.h"
    if header.is_file():
        return Check("Python headers (Triton <= 3.6 compiles against them)", str(header))
    return Check("Python headers (Triton <= 3.6 compiles against them)", f"no {header}",
                 f"Python's headers are missing ({header}), which Triton 3.6 needs to build its CUDA launcher. "
                 f"Fix: install python{sys.version_info.major}.{sys.version_info.minor}-dev")


def gpus(require: bool) -> list[Check]:
    """Each GPU nvidia-smi and torch see (``environment.gpu_query``); none, said with why, is a problem when
    ``require``."""
    found, why = environment.gpu_query()
    if not found:
        torch = sys.modules.get("torch")
        cuda = bool(torch is not None and torch.cuda.is_available())
        return [Check("GPU", f"none seen ({why}; torch.cuda.is_available(): {cuda})",
                      "no CUDA GPU is visible. Fix: run on the GPU node (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
                      "or add --cpu to rehearse on a CPU" if require else "")]
    keys = ("memory.total", "sm_count", "clocks.max.sm", "clocks.max.mem", "compute_cap", "compute_mode",
            "driver_version", "cuda_runtime", "pci.bus_id")
    return [Check(f"GPU {i}", f"{gpu.get('name', '?')}; " + ", ".join(f"{k} {gpu[k]}" for k in keys if k in gpu))
            for i, gpu in enumerate(found)]


def backends(names: tuple[str, ...], require_gpu: bool) -> list[Check]:
    """Each backend created here, with its device; one that cannot run, or runs off the GPU when one is required,
    is a problem naming why."""
    from normbench.core.exceptions import NormbenchError
    from normbench.core.registry import get_registry

    out = []
    for name in names:
        try:
            backend = get_registry().create(name)
        except NormbenchError as exc:
            out.append(Check(f"backend {name}", "not available", str(exc)))
            continue
        device = backend.device
        off_gpu = require_gpu and not device.startswith("cuda")
        out.append(Check(f"backend {name}", f"{device} ({type(backend).library_version() or 'version unknown'})",
                         f"backend {name} runs on {device}, not on the GPU. Fix: install a CUDA build of its "
                         f"framework" if off_gpu else ""))
    return out


def checks(cpu: bool, names: tuple[str, ...] = GPU_BACKENDS) -> list[Check]:
    """Every check, in the order they are printed (torch first: it says what CUDA it sees)."""
    origin = provenance.source()
    found = [Check("normbench", f"{__version__}, {origin.kind}" + (f", commit {origin.commit_label()}"
                                                                  if origin.commit else ""))]
    libraries = environment.library_versions()
    found.append(dependencies())
    found.append(Check("libraries", ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())) or "none"))
    if "torch" in libraries:
        try:
            import torch  # noqa: F401  (so that the GPU checks read its CUDA view)
        except Exception as exc:  # a broken CUDA install: say it, the checks below say what it costs
            found.append(Check("torch import", f"failed: {type(exc).__name__}: {exc}",
                               f"torch does not import: {exc}. Fix: repair the torch installation"))
    found += gpus(require=not cpu)
    if "triton" in libraries and not cpu:
        found += [c_compiler(), python_headers()]
    found.append(profiler())
    return found + backends(names, require_gpu=not cpu)


def cmd_preflight(args) -> int:
    """Print every check; exit 2 with the first problem (one line), 0 when the run can go."""
    from normbench.core.exceptions import NormbenchError
    from normbench.core.registry import get_registry

    names = tuple(get_registry().names_in(args.impl)) if args.impl else GPU_BACKENDS  # an unknown name: one line
    found = checks(args.cpu, names)
    print(f"normbench preflight ({'CPU rehearsal' if args.cpu else 'GPU run'}):")
    for check in found:
        print(check.line(), flush=True)
    problems = [c.problem for c in found if c.problem]
    if problems:
        more = f" (and {len(problems) - 1} more above)" if len(problems) > 1 else ""
        raise NormbenchError(problems[0] + more)
    print("preflight: ready")
    return 0
