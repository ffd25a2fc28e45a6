"""Backends for the properties beyond tolerance (``tests/test_properties.py``): correct within
the error model's bounds, but not bit-for-bit what a deterministic-inference user needs.

``BatchVariant`` computes a batch of one row with another "kernel" that rounds y one ulp
(of fp32) up: every row computed alone differs from the same row in a batch by one ulp,
far inside the bound. It is batch-variant, not wrong: it passes every check by default,
is recorded as not batch-invariant, and fails ``--normbench-require=batch-invariant``.
"""

from __future__ import annotations

import numpy as np

from tests.mutants import Fp32Kernel


class BatchVariant(Fp32Kernel):
    """A kernel chosen by batch size: one row is rounded one fp32 ulp up."""

    name = "mutant-batch-variant"
    dtypes = ("float32",)

    def normalize(self, x32, mean, rstd, eps):
        y = super().normalize(x32, mean, rstd, eps)
        return np.nextafter(y, np.float32(np.inf)) if y.shape[0] == 1 else y
