"""A layer as the paper's §5.1 models it: summed inputs ``a = x @ W``, normalized.

``x`` holds one training case per row (M rows, D inputs); column j of ``W``
(D, N) is the incoming weight vector of hidden unit j; the N units are the
layer's ``normalized_shape``. The gain and bias (eq. 5) have that shape.

The summed inputs are *exact* in float64: x lies on a 2**-6 grid and W on a
2**-10 grid with small magnitudes, and every Table 1 transformation keeps such
grids (a scale 3*2**k, a dyadic shift), so every product and partial sum of
``x @ W`` is an integer multiple of a power of two below 2**53.
:func:`exact_product` proves this for each product it returns. Invariances
then hold exactly for the float64 summed inputs: the only roundings left are
the tested dtype's and the kernel's own, which the bounds account for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from normbench.core.cases import Case, rng_for
from normbench.core.dtypes import host_dtype

#: inputs per training case (D)
INPUT_DIM = 32
#: x is a multiple of X_GRID, W of W_GRID (powers of two, see the module doc)
X_GRID = 2.0**-6
W_GRID = 2.0**-10
_EXACT = 2.0**53


def _grid_exponent(v: np.ndarray) -> int:
    """The smallest p >= 0 with v * 2**p integral (v finite float64)."""
    for p in range(0, 1075):
        scaled = np.ldexp(v, p)
        if np.array_equal(scaled, np.round(scaled)):
            return p
    raise AssertionError("unreachable: every finite float64 is a multiple of 2**-1074")


def exact_product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` in float64, checked to be exact (every product and partial sum
    an integer times 2**-(px + pw) below 2**53 in magnitude).

    Raises AssertionError (a harness bug, not a backend's) when it cannot be.
    """
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    px, pw = _grid_exponent(x), _grid_exponent(w)
    magnitude = np.abs(np.ldexp(x, px)) @ np.abs(np.ldexp(w, pw))
    if magnitude.size and not float(magnitude.max()) < _EXACT / 2:
        raise AssertionError(f"x @ W is not exact in float64: integer magnitudes reach {magnitude.max():.3g} "
                             f"on grids 2**-{px} and 2**-{pw}; keep the layer's values on coarser grids")
    return x @ w


@dataclass(frozen=True)
class Layer:
    """x (M, D) and W (D, N) in float64; gain and bias of ``normalized_shape`` (host arrays of the param dtype)."""

    x: np.ndarray
    w: np.ndarray
    gain: np.ndarray
    bias: np.ndarray
    normalized_shape: tuple[int, ...]

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    @property
    def hidden(self) -> int:
        return self.w.shape[1]

    def summed_inputs(self) -> np.ndarray:
        """``a = x @ W``, (M, N) float64, exact (see :func:`exact_product`)."""
        return exact_product(self.x, self.w)

    def with_(self, **changes) -> Layer:
        """A copy with some fields replaced (``layer.with_(w=3 * layer.w)``)."""
        return replace(self, **changes)

    def take_rows(self, rows) -> Layer:
        """The same layer on a subset of the training cases."""
        return replace(self, x=self.x[np.asarray(rows)])


def make_layer(case: Case, seed: int) -> Layer:
    """The layer of an invariance case: ``case.rows`` training cases, ``case.hidden`` units.

    x is half-normal (the non-negative outputs of a ReLU layer below) and W ~ N(0, 1/D),
    so the summed inputs have sigma ~ 1 and row means that differ between cases.
    Gains are +-uniform(0.5, 2) (never near 0, so a change of xhat shows in y), biases N(0, 1);
    both rounded to the case's parameter dtype. Every case of one shape and seed has the
    same x, W and (before rounding) gain and bias, whatever its dtype and eps.
    """
    # keyed by the shape alone: every dtype, eps and parameter dtype sees the same layer
    rng = rng_for(Case(case.family, case.shape, case.normalized_shape, "float64"), seed, "layer")
    d = INPUT_DIM
    x = np.round(np.abs(rng.standard_normal((case.rows, d))) / X_GRID) * X_GRID
    w = np.round(rng.standard_normal((d, case.hidden)) / np.sqrt(d) / W_GRID) * W_GRID
    pdt = host_dtype(case.params)
    gain = (rng.choice([-1.0, 1.0], case.normalized_shape) * rng.uniform(0.5, 2.0, case.normalized_shape)).astype(pdt)
    bias = rng.standard_normal(case.normalized_shape).astype(pdt)
    return Layer(x, w, gain, bias, tuple(case.normalized_shape))
