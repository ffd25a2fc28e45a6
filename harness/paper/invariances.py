"""Table 1 of the paper (§5.1): six transformations of a layer, and whether each
normalization's output is invariant to them, measured.

A transformation maps a layer (x, W; see ``normbench.paper.layer``) to a changed one.
The paper's claims, row by row (True: invariant), are :data:`PAPER_TABLE1`.

**The comparison.** A normalizer returns its output with a bound on its distance
from the exact normalization of the exact summed inputs (``normbench.paper.normalizations``:
the error model's forward bound plus the effect of rounding the summed inputs to
the tested dtype). So for two layers whose exact outputs are equal,
``|h' - h| <= bound' + bound`` must hold everywhere: that is *invariant*. A change
of at least :data:`FAR` times that bound somewhere (the worst element's
``|h' - h|/(bound' + bound)``) is *not invariant* (the paper's "No"), far enough
above it that no rounding could explain it. Anything in between is "unclear" and
agrees with neither claim.

**Re-centering.** Adding c to every unit of a case is exact in float64 and leaves
layer norm unchanged, but the shifted summed inputs are rounded at magnitude |c|
and the kernel's mean and centering err relative to |c|: both bound terms grow as
|c|/sigma, the error model's ``k(N)*u_acc*|w|*(|a| + mean|a|)/sigma_eps`` and the
rounding's ``|w|*u*(|a| + mean|a| + |xhat|*rms(a))/sigma_eps`` (``normbench.check.sensitivity``).
NUMERICS.md measures ~17*u*|c|/sigma for correct two-pass kernels; a one-pass
variance loses ``u*(c/sigma)^2`` of the variance and fails at |c| ~ 1e3 sigma in fp32.

**RMSNorm** (normbench's row, not the paper's: :data:`RMS_TABLE1`, derived there). The same
normalizers, comparison and verdicts with ``norm="rms_norm"``: its bound is the error model's
RMSNorm bound (no mean term) plus the rounding's effect without ``mean(a)``. Its "No" cells are
measured, as batch and weight norm's are: under re-centering h moves by O(1) (a/rms(a) against
(a + c)/rms(a + c)) while the bound stays ~u relative, so the weakest instance is far above FAR
even in bfloat16, where SHIFT is only 4 sigma (normbench's numpy backend, seeds 0..19: at least 74x
the bound under either re-centering, 46x under weight-vector re-scaling; ~4e5x in fp32). Its
"Invariant" cells can come close to the bound (0.975x in fp16): a summed input near 0, scaled by
0.0029, rounds to an fp16 subnormal, and with nothing centred that rounding alone moves y_i by
``|w_i|*p_i*r``, which the bound's first-order term states exactly.

**eps.** With eps > 0, ``LN_eps(delta*a) = LN_{eps/delta^2}(a)`` exactly (and the
same for batch norm), but ``LN_eps(delta*a) != LN_eps(a)``: the naive pair differs
by O(1) at delta = 1e-3, eps = 1e-5. So when a transformation scales the summed
inputs of some rows by delta, the untransformed side is computed with
eps/delta^2 for those rows (a single row alone, when only one row is scaled).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from normbench.check.conformance import ConformanceError
from normbench.check.worst import ratios, worst_violation
from normbench.core.backend import Backend, Limits
from normbench.core.cases import Case
from normbench.core.exceptions import InvalidInput
from normbench.paper.layer import Layer, make_layer
from normbench.paper.normalizations import BackendRowLayerNorm, LayerNormalizer, Normalized, Normalizer

#: a change this many times the bound is "not invariant"
FAR = 10.0
#: re-scaling factors: 3*2**k keeps the summed inputs exact and covers [1e-3, 1e3]
SCALES = (3 * 2.0**-10, 3.0, 3 * 2.0**8)
#: the factors a backend with a documented eps range may use instead (same form, 3*2**k)
CANDIDATE_SCALES = tuple(3 * 2.0**k for k in range(-10, 9))
#: the per-case constant added by weight-matrix re-centering, in units of the summed
#: inputs' sigma (~1): as large as the dtype allows while the shifted summed inputs
#: keep >= 6 bits of their variation (u*shift <= 2**-6); 2**10 ~ 1e3 in fp32 and fp64,
#: where a one-pass variance loses everything
SHIFT = {"float64": 2.0**10, "float32": 2.0**10, "float16": 2.0**5, "bfloat16": 2.0**2}
#: weight-vector re-scaling factor (of one unit, or of one slice of units)
VECTOR_SCALE = 12.0
#: dataset re-centering: this constant is added to every input of every case
DATA_SHIFT = 2.0

METHODS = ("batch", "weight", "layer")
#: the rows normbench measures: the paper's three, and RMSNorm's, which the paper does not have
ALL_METHODS = (*METHODS, "rms")
METHOD_TITLES = {"batch": "Batch norm", "weight": "Weight norm", "layer": "Layer norm", "rms": "RMSNorm *"}


@dataclass(frozen=True)
class Instance:
    """One transformed layer. ``row_scale`` (M,): the factor by which the transformation
    scales each row's summed inputs, when it is a scaling (for the eps rule), else None."""

    label: str
    layer: Layer
    row_scale: np.ndarray | None = None


@dataclass(frozen=True)
class Transformation:
    """A column of Table 1: its title, the paper's claims and how to build its instances."""

    key: str
    title: str
    paper: dict[str, bool]
    build: Callable[..., list[Instance]]   # (layer, dtype, scales=SCALES)
    #: whether it re-scales summed inputs by the factors (and so runs eps/delta^2)
    rescales: bool = False


def _matrix_rescaling(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    return [Instance(f"W -> {d:g}*W", layer.with_(w=d * layer.w), np.full(layer.rows, d)) for d in scales]


def _matrix_recentering(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    """W' = W + gamma 1^T: gamma added to every unit's incoming weights adds the case's
    constant gamma.x (about SHIFT * 0.8, different per case) to all its summed inputs."""
    out = []
    for sign in (1.0, -1.0):
        gamma = sign * SHIFT[dtype] / layer.x.shape[1]
        out.append(Instance(f"W -> W + gamma 1^T, gamma = {gamma:g}", layer.with_(w=layer.w + gamma)))
    return out


def _vector_units(layer: Layer) -> list[tuple[str, np.ndarray]]:
    """Unit 0, and a proper slice of the units: with a multi-dim normalized_shape the
    units [0, ...] (a normalization over the trailing dims only is invariant to
    re-scaling them), else the first half."""
    n, shape = layer.hidden, layer.normalized_shape
    block = n // shape[0] if len(shape) > 1 else max(n // 2, 1)
    return [("unit 0", np.arange(1)), (f"units 0..{block - 1}", np.arange(block))]


def _vector_rescaling(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    out = []
    for what, units in _vector_units(layer):
        w = layer.w.copy()
        w[:, units] *= VECTOR_SCALE
        out.append(Instance(f"w_j -> {VECTOR_SCALE:g}*w_j for {what}", layer.with_(w=w)))
    return out


def _data_rescaling(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    return [Instance(f"x -> {d:g}*x", layer.with_(x=d * layer.x), np.full(layer.rows, d)) for d in scales]


def _data_recentering(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    return [Instance(f"x -> x + {c:g}", layer.with_(x=layer.x + c)) for c in (DATA_SHIFT, -DATA_SHIFT)]


def single_case_row(layer: Layer) -> int:
    """The training case that single-case re-scaling scales."""
    return layer.rows // 2


def _case_rescaling(layer: Layer, dtype: str, scales: tuple[float, ...] = SCALES) -> list[Instance]:
    row = single_case_row(layer)
    out = []
    for d in scales:
        x = layer.x.copy()
        x[row] *= d
        scale = np.ones(layer.rows)
        scale[row] = d
        out.append(Instance(f"x[{row}] -> {d:g}*x[{row}]", layer.with_(x=x), scale))
    return out


def _claims(batch: bool, weight: bool, layer: bool) -> dict[str, bool]:
    return {"batch": batch, "weight": weight, "layer": layer}


#: the columns of Table 1, in the paper's order, with the paper's claims
TRANSFORMATIONS: dict[str, Transformation] = {t.key: t for t in (
    Transformation("weight_matrix_rescaling", "Weight matrix re-scaling", _claims(True, True, True), _matrix_rescaling,
                   True),
    Transformation("weight_matrix_recentering", "Weight matrix re-centering", _claims(False, False, True),
                   _matrix_recentering),
    Transformation("weight_vector_rescaling", "Weight vector re-scaling", _claims(True, True, False), _vector_rescaling),
    Transformation("dataset_rescaling", "Dataset re-scaling", _claims(True, False, True), _data_rescaling, True),
    Transformation("dataset_recentering", "Dataset re-centering", _claims(True, False, False), _data_recentering),
    Transformation("single_case_rescaling", "Single training case re-scaling", _claims(False, False, True),
                   _case_rescaling, True),
)}
#: Table 1 as printed in the paper: method -> column -> invariant?
PAPER_TABLE1: dict[str, dict[str, bool]] = {m: {k: t.paper[m] for k, t in TRANSFORMATIONS.items()} for m in METHODS}
#: RMSNorm's row, normbench's derivation (the paper has no RMSNorm row). h = g*a/rms(a), per training case, rms
#: over the units, no mean subtracted. Weight-matrix re-scaling (a -> delta*a), dataset re-scaling (the same) and
#: single-case re-scaling (one case's a -> delta*a) scale a case's a and its rms together: invariant, with eps/delta^2
#: as for LayerNorm. Weight-matrix re-centering adds gamma.x, a constant per case, to every unit of the case, and
#: dataset re-centering adds c*sum_i W_ij, a constant per unit: nothing subtracts either, so both change h (LayerNorm
#: is invariant to the first because it subtracts the case's mean). Weight-vector re-scaling scales one unit's a_j: it
#: changes that case's rms, so every unit's h changes: not invariant, as for LayerNorm.
RMS_TABLE1: dict[str, bool] = {"weight_matrix_rescaling": True, "weight_matrix_recentering": False,
                               "weight_vector_rescaling": False, "dataset_rescaling": True,
                               "dataset_recentering": False, "single_case_rescaling": True}


@dataclass(frozen=True)
class Deviation:
    """|h' - h| and its bound for one instance (both (M, N))."""

    instance: Instance
    change: np.ndarray
    bound: np.ndarray

    @property
    def ratios(self) -> np.ndarray:
        """change / bound per element (``normbench.check.worst.ratios``)."""
        return ratios(self.change, self.bound)

    @property
    def ratio(self) -> float:
        """The worst element's change / bound."""
        return float(self.ratios.max()) if self.change.size else 0.0

    @property
    def max_change(self) -> float:
        c = self.change[np.isfinite(self.change)]
        return float(c.max()) if c.size == self.change.size and c.size else float("inf")

    @property
    def verdict(self) -> str:
        """"Invariant" (within the bound everywhere), "No" (FAR times above it somewhere)
        or "unclear" (in between, or a non-finite output: a change must be measured)."""
        r = self.ratio
        if not np.isfinite(self.change).all():
            return "unclear"
        return "Invariant" if r <= 1.0 else ("No" if r >= FAR else "unclear")


def reference_side(norm: Normalizer, layer: Layer, instance: Instance, eps: float) -> Normalized:
    """The untransformed layer's output, with eps/delta^2 on rows the instance scales by delta."""
    scale = instance.row_scale
    if scale is None or eps == 0 or np.all(scale == 1):
        return norm(layer, eps)
    if np.all(scale == scale[0]):
        return norm(layer, eps / scale[0] ** 2)
    if not norm.rowwise:
        raise InvalidInput(f"{norm.method} norm with eps = {eps:g} has no exact counterpart of re-scaling only "
                           f"some rows; measure it with eps = 0")
    whole = norm(layer, eps)
    h, bound = whole.h.copy(), whole.bound.copy()
    for row in np.flatnonzero(scale != 1):
        alone = norm(layer.take_rows([row]), eps / scale[row] ** 2)
        h[row], bound[row] = alone.h[0], alone.bound[0]
    return Normalized(h, bound)


def compare(norm: Normalizer, layer: Layer, instance: Instance, eps: float) -> Deviation:
    """``|norm(transformed) - norm(layer)|`` against the sum of both sides' bounds."""
    after = norm(instance.layer, eps)
    before = reference_side(norm, layer, instance, eps)
    with np.errstate(invalid="ignore"):
        change = np.abs(after.h - before.h)
    return Deviation(instance, np.where(np.isnan(change), np.inf, change), after.bound + before.bound)


def measure(norm: Normalizer, layer: Layer, key: str, dtype: str, eps: float,
            scales: tuple[float, ...] = SCALES) -> list[Deviation]:
    """Every instance of column ``key`` for one normalizer (re-scaling by ``scales``)."""
    return [compare(norm, layer, inst, eps) for inst in TRANSFORMATIONS[key].build(layer, dtype, scales)]


def rescaling_factors(limits: Limits, eps: float) -> tuple[tuple[float, ...], str | None]:
    """The re-scaling factors to use with a backend of documented ``limits`` at ``eps``, and why
    there are none (else None). The method compares ``LN_eps(delta*a)`` with ``LN_(eps/delta^2)(a)``,
    so eps/delta^2 must be an eps the library accepts: each factor of :data:`SCALES` whose
    eps/delta^2 is outside the range is replaced by the factor of :data:`CANDIDATE_SCALES` on
    the same side of 1 nearest to it whose eps/delta^2 is inside (a library that refuses
    eps > 1e-3 runs delta = 0.1875, not 0.0029, whose eps/delta^2 is 1.165 at eps = 1e-5), or
    dropped when there is none.

    >>> from normbench.core.backend import Limits
    >>> rescaling_factors(Limits(eps=(0.0, 1e-3)), 1e-5)
    ((0.1875, 3.0, 768.0), None)
    >>> rescaling_factors(Limits(eps=(1e-5, 1e-5)), 1e-5)[1]
    'no re-scaling factor keeps eps/delta^2 inside the documented range [1e-05, 1e-05] (eps 1e-05)'
    """
    if eps == 0 or limits.eps_problem(eps) is not None:
        return (SCALES, None) if eps == 0 else ((), limits.eps_problem(eps))
    chosen = []
    for d in SCALES:
        side = [c for c in CANDIDATE_SCALES if (c < 1) == (d < 1) and c != 1 and limits.eps_problem(eps / c**2) is None]
        if side:
            best = min(side, key=lambda c: abs(np.log(c / d)))
            if best not in chosen:
                chosen.append(best)
    if not chosen:
        low, high = limits.eps
        return (), (f"no re-scaling factor keeps eps/delta^2 inside the documented range [{low:g}, {high:g}] "
                    f"(eps {eps:g})")
    return tuple(chosen), None


def skip_reason(backend: Backend, case: Case, key: str) -> str | None:
    """Why column ``key`` cannot be measured on ``backend`` for ``case`` within its documented limits."""
    if not TRANSFORMATIONS[key].rescales:
        return None
    _, reason = rescaling_factors(backend.limits_for(case.norm), case.eps)
    return f"{backend.name} documents limits {reason}" if reason else None


def verdict(deviations: list[Deviation]) -> str:
    """One cell: "Invariant" if every instance is, "No" if every instance changes FAR above its bound."""
    verdicts = {d.verdict for d in deviations}
    return verdicts.pop() if len(verdicts) == 1 and "unclear" not in verdicts else "unclear"


def expected(method: str, key: str) -> str:
    """The paper's cell as a verdict string (for "rms", normbench's derivation, :data:`RMS_TABLE1`)."""
    claims = RMS_TABLE1 if method == "rms" else PAPER_TABLE1[method]
    return "Invariant" if claims[key] else "No"


def _explain(key: str, d: Deviation, eps: float, want: str, name: str = "layer norm") -> str:
    """Why the instance ``d`` disagrees with the paper's layer-norm cell (or normbench's RMSNorm cell) ``want``."""
    title = TRANSFORMATIONS[key].title.lower()
    source = "Table 1" if name == "layer norm" else "normbench's Table 1 row for it"
    if not np.isfinite(d.change).all():
        bad = np.argwhere(~np.isfinite(d.change))[0]
        return f"{d.instance.label} gave a non-finite output at y[{bad[0]}, {bad[1]}]"
    if want == "No":
        return (f"{name} is not invariant to {title} ({source}), but under {d.instance.label} its output changed by "
                f"at most {d.ratio:.3g}x the bound (largest change {d.max_change:.3g}); a change of at least {FAR:g}x "
                f"is required. A normalization whose statistics are not each training case's over the whole layer "
                f"(batch axis, trailing dims only) is invariant here")
    worst = worst_violation(d.change, 0.0, d.bound, match_nonfinite=False)
    row = worst.index[0]
    text = (f"{name} is invariant to {title} ({source}), but {d.instance.label} changed y[{worst.where}] by "
            f"{worst.error:.3g} {worst.excess()}; {worst.out_of_bound()}")
    scale = d.instance.row_scale
    if scale is not None and eps > 0:
        text += (f"; compared with eps/delta^2 on the re-scaled rows, as LN_eps(delta*a) = LN_(eps/delta^2)(a) "
                 f"(delta {scale[row]:g})" if scale[row] != 1 else
                 f"; row {row} was not re-scaled: re-scaling another training case must not change it")
    return text


def check_column(backend: Backend, case: Case, seed: int, key: str) -> list[Deviation]:
    """The backend's layer norm agrees with the paper's Table 1 cell for column ``key`` (an RMSNorm case:
    with normbench's RMSNorm row, :data:`RMS_TABLE1`) on every instance; raises :class:`ConformanceError`
    with a diagnosis otherwise."""
    __tracebackhide__ = True
    reason = skip_reason(backend, case, key)
    if reason:
        raise InvalidInput(f"{case.id}: {reason}; skip it (normbench.paper.invariances.skip_reason)")
    norm = LayerNormalizer(BackendRowLayerNorm(backend, case.dtype, case.norm))
    layer = make_layer(case, seed)
    scales, _ = rescaling_factors(backend.limits_for(case.norm), case.eps)
    deviations = measure(norm, layer, key, case.dtype, case.eps, scales)
    want = expected(norm.method, key)
    name = "layer norm" if norm.method == "layer" else "RMSNorm"
    for d in deviations:
        if d.verdict != want:
            raise ConformanceError(f"{backend.name} {case.id} (seed {seed}): {_explain(key, d, case.eps, want, name)}")
    return deviations
