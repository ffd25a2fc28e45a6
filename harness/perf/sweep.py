"""The throughput sweep a run measures, and the filters that narrow it.

The cases are :func:`normbench.core.cases.throughput_cases` (the GPU sweep on CUDA
devices, the CPU sweep elsewhere, the GPU sweep shrunk for a rehearsal) times
:data:`normbench.perf.roofline.DIRECTIONS`.
``--direction``, ``--dtype`` and ``--shape`` (``normbench run``) or their
``--normbench-*`` forms (pytest) keep a subset; their values are parsed by
:mod:`normbench.front.options`, where a value outside the valid ones is a usage error
that lists them.

>>> Filters(dtypes=("float32",)).keep(cases.THROUGHPUT_CPU_CASES[0], "forward")
True
"""

from __future__ import annotations

from dataclasses import dataclass

from normbench.core import cases
from normbench.core.cases import Case
from normbench.perf.roofline import DIRECTIONS


def sweep_shapes() -> tuple[str, ...]:
    """Every shape of the CPU and GPU sweeps, as ``ROWSxHIDDEN``."""
    return tuple(dict.fromkeys(cases.shape_name(c) for c in cases.THROUGHPUT_CPU_CASES + cases.THROUGHPUT_GPU_CASES))


@dataclass(frozen=True)
class Filters:
    """Which directions, dtypes, shapes and normalizations to keep; None keeps all. ``rehearsal``: the GPU sweep
    shrunk (``normbench run --rehearsal``) on every device."""

    directions: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    shapes: tuple[str, ...] | None = None
    norms: tuple[str, ...] | None = None
    rehearsal: bool = False

    def keep(self, case: Case, direction: str) -> bool:
        return ((self.directions is None or direction in self.directions)
                and (self.dtypes is None or case.dtype in self.dtypes)
                and (self.shapes is None or cases.shape_name(case) in self.shapes)
                and (self.norms is None or case.norm in self.norms))

    def pairs(self, device: str) -> list[tuple[Case, str]]:
        """The (case, direction) pairs of the sweep for ``device`` that pass the filters."""
        return [(case, d) for case in cases.throughput_cases(device, self.rehearsal) for d in DIRECTIONS
                if self.keep(case, d)]
