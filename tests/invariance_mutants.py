"""Mutants the invariance suite must catch: a correct fp32 kernel with one bug each.

Each subclasses :class:`tests.mutants.Fp32Kernel` (the control, which passes)
and names the check that must catch it. ``tests/test_invariance_mutants.py``
runs ``suites/test_invariances.py`` on all of them in a subprocess.
"""

from __future__ import annotations

import numpy as np

from tests.mutants import F32, Fp32Kernel


class BatchAxis(Fp32Kernel):
    """#16: statistics over the batch axis (per unit, over the rows): batch norm, not
    layer norm. Invariant where batch norm is (weight vector re-scaling, dataset
    re-centering), not where layer norm is (re-centering, single-case re-scaling)."""

    name = "mutant-batch-axis"

    def statistics(self, x32, eps):
        mean = x32.mean(axis=0, dtype=F32)
        centered = x32 - mean
        var = (centered * centered).mean(axis=0, dtype=F32)
        return mean, self.rstd(var, eps)

    def normalize(self, x32, mean, rstd, eps):
        return (x32 - mean) * rstd

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        return None


class LastDimStatistics(Fp32Kernel):
    """#16: a multi-dim normalized_shape normalized over its last dim only (statistics
    per trailing slice), the affine step still over the whole shape. Invariant to
    re-scaling one trailing slice's units, which layer norm is not."""

    name = "mutant-last-dim-statistics"

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape[-1:])
            mean, rstd = self.statistics(x32, eps)
            y = self.normalize(x32, mean, rstd, eps).reshape(-1, int(np.prod(normalized_shape)))
            w, b = self.params(weight, x), self.params(bias, x)
            y = y * (1 if w is None else w) + (0 if b is None else b)
            return self.write(y, x)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        return None


INVARIANCE_MUTANTS: list[type[Fp32Kernel]] = [BatchAxis, LastDimStatistics]
