"""Mutants the invariance suite must catch: a correct fp32 kernel with one bug each.

Each subclasses :class:`tests.mutants.Fp32Kernel` (the control, which passes)
and names the check that must catch it. ``tests/test_invariance_mutants.py``
runs ``suites/test_invariances.py`` on all of them in a subprocess.

RMSNorm's (:data:`RMS_INVARIANCE_MUTANTS`) are ``tests.rms_mutants``' kernels, one
real bug each, against normbench's RMSNorm row of Table 1
(``normbench.paper.invariances.RMS_TABLE1``), with ``tests.rms_mutants.RmsKernel``
as their control: the mean subtracted (LayerNorm without bias shipped as RMSNorm)
turns the row's "No" under weight-matrix re-centering into "Invariant"; eps outside
the square root breaks ``RMS_eps(delta*a) = RMS_(eps/delta^2)(a)``, so every
re-scaling column with eps > 0.
"""

from __future__ import annotations

import numpy as np

from tests.mutants import F32, Fp32Kernel
from tests.rms_mutants import EpsOutsideSqrt, MeanSubtracted, RmsKernel


class BatchAxis(Fp32Kernel):
    """#16: statistics over the batch axis (per unit, over the rows): batch norm, not
    layer norm. Invariant where batch norm is (weight vector re-scaling, dataset
    re-centering), not where layer norm is (re-centering, single-case re-scaling)."""

    name = "mutant-batch-axis"
    has_backward = False  # its statistics are per column; the suite skips the gradient checks, saying why

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


class _Backward(Fp32Kernel):
    """The control's backward in overridable steps: ``dx_rows`` and ``dweight_terms``."""

    def dx_rows(self, g, xhat, rstd):
        mean_g = g.mean(axis=1, dtype=F32)[:, None]
        mean_gx = (g * xhat).mean(axis=1, dtype=F32)[:, None]
        return rstd[:, None] * (g - mean_g - xhat * mean_gx)

    def dweight_terms(self, dy32, xhat, centered):
        return dy32 * xhat

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        with np.errstate(all="ignore"):
            x32 = self.read(x, normalized_shape)
            mean, rstd = self.statistics(x32, eps)
            centered = x32 - mean[:, None]
            xhat = centered * rstd[:, None]
            dy32 = self.read(dy, normalized_shape)
            w = self.params(weight, x)
            dx = self.write(self.dx_rows(dy32 * w if w is not None else dy32, xhat, rstd), x)
            dw = None if weight is None else \
                self.dweight_terms(dy32, xhat, centered).sum(axis=0).reshape(weight.shape).astype(weight.dtype)
            db = None if bias is None else dy32.sum(axis=0).reshape(bias.shape).astype(bias.dtype)
            return dx, dw, db


class DxMeanDropped(_Backward):
    """#7: dx without the mean(g) term: sum(dx) = r*N*mean(g) != 0 (the shift identity)."""

    name = "mutant-dx-mean-dropped"

    def dx_rows(self, g, xhat, rstd):
        return rstd[:, None] * (g - xhat * (g * xhat).mean(axis=1, dtype=F32)[:, None])


class DxProjectionDropped(_Backward):
    """#7: dx without the xhat*mean(g*xhat) term (the scale identity)."""

    name = "mutant-dx-projection-dropped"

    def dx_rows(self, g, xhat, rstd):
        return rstd[:, None] * (g - g.mean(axis=1, dtype=F32)[:, None])


class DxWithoutRstd(_Backward):
    """dx missing its 1/sigma factor: dL/dW no longer scales by 1/delta when W -> delta*W (§5.2)."""

    name = "mutant-dx-without-rstd"

    def dx_rows(self, g, xhat, rstd):
        return super().dx_rows(g, xhat, np.ones_like(rstd))


class DweightUnnormalized(_Backward):
    """#6: dweight summed over dy*(x - mean), not dy*xhat: it grows with the input's scale (§5.2)."""

    name = "mutant-dweight-unnormalized"

    def dweight_terms(self, dy32, xhat, centered):
        return dy32 * centered


INVARIANCE_MUTANTS: list[type[Fp32Kernel]] = [BatchAxis, LastDimStatistics, DxMeanDropped, DxProjectionDropped,
                                              DxWithoutRstd, DweightUnnormalized]

#: the RMSNorm control, which passes normbench's RMSNorm row
RMS_CONTROL = RmsKernel
#: RMSNorm mutants -> the columns of normbench's RMSNorm row (``invariances.TRANSFORMATIONS`` keys) that catch them
RMS_INVARIANCE_MUTANTS: dict[type[RmsKernel], set[str]] = {
    MeanSubtracted: {"weight_matrix_recentering"},
    EpsOutsideSqrt: {"weight_matrix_rescaling", "dataset_rescaling", "single_case_rescaling"},
}
