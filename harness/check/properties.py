"""What a conformance test measures beyond its verdict: the properties beyond tolerance (deterministic,
batch-invariant), reported and required through :class:`Properties`, and the structure of the forward error
(:func:`error_structure`: histograms in ulps, the coherence ratios), recorded for the report, never a verdict.
Both travel in a pytest item's ``user_properties`` as one typed record (``normbench.check.measurement``), read
back by ``normbench.front.runner``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from normbench.check import coherence, measurement, oracle
from normbench.check.outcomes import HISTOGRAM_BINS, HISTOGRAM_WIDTH, Histogram
from normbench.check.worst import ConformanceError
from normbench.core.backend import Backend
from normbench.core.cases import Inputs

# -- properties beyond tolerance: determinism and batch invariance --------------------------

#: properties beyond the error model's tolerance that the suites measure on every backend: ``deterministic``
#: (the same input twice gives the same bits: forward y, backward dx, dweight and dbias) and ``batch-invariant``
#: (a row's output has the same bits whatever the batch size and its position in the batch)
DETERMINISTIC, BATCH_INVARIANT = "deterministic", "batch-invariant"
PROPERTIES: tuple[str, ...] = (DETERMINISTIC, BATCH_INVARIANT)
#: what is required unless ``--normbench-require`` says otherwise: determinism, which every check of
#: normbench has always required (a nondeterministic output fails); batch invariance is reported only
DEFAULT_REQUIRED: tuple[str, ...] = (DETERMINISTIC,)
#: what typically breaks each property, said when a required one is violated
CAUSES: dict[str, str] = {
    DETERMINISTIC: "atomics, or a split reduction whose partial sums are combined in an order that depends on "
                   "thread or block scheduling (float addition is not associative)",
    BATCH_INVARIANT: "a kernel, tiling, block size or split of the reduction chosen by the batch size (the number "
                     "of rows) or by a row's position, so the same row is summed in another order; or "
                     "nondeterminism (see the property deterministic)",
}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN payloads included), for determinism and untouched inputs."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@dataclass
class Properties:
    """Where the checks report the properties they measure, and which of them are required.

    :meth:`report` records a verdict, ``"yes"`` or ``"no: what differed"``, in :attr:`measured` (a test
    measuring a property twice keeps the first violation) and, when given, in ``sink`` (a pytest item's
    ``user_properties``, the test's :class:`normbench.check.measurement.Measurement` there: the plugin hands the
    suites one, and ``normbench.front.runner`` reads it back); a
    violated property that is ``required`` raises :class:`ConformanceError` saying which property,
    what differed and what typically causes it. Without one, the checks use ``Properties()``: the
    default requirements, recorded nowhere.

    >>> props = Properties(required=())
    >>> props.report(BATCH_INVARIANT, False, "row 0 computed alone differs", None, None)
    >>> props.measured
    {'batch-invariant': 'no: row 0 computed alone differs'}
    """

    required: tuple[str, ...] = DEFAULT_REQUIRED
    sink: list | None = None
    measured: dict[str, str] = field(default_factory=dict)
    #: measurements that are no verdicts (:func:`error_structure`'s columns), by conformance column name
    values: dict[str, str | float] = field(default_factory=dict)

    def record(self, values: dict[str, str | float]) -> None:
        """Keep ``values`` (conformance column -> value) in :attr:`values` and, when given, in ``sink``'s record,
        replacing earlier ones of the same names."""
        self.values.update(values)
        if self.sink is not None and values:
            measurement.update(self.sink, values=values)

    def report(self, name: str, holds: bool, detail: str, backend: Backend | None, inputs: Inputs | None) -> None:
        __tracebackhide__ = True
        if name not in PROPERTIES:
            raise ValueError(f"unknown property {name!r}; properties: {', '.join(PROPERTIES)}")
        verdict = "yes" if holds else f"no: {detail}"
        if self.measured.get(name, "yes") == "yes":
            self.measured[name] = verdict
            if self.sink is not None:
                measurement.update(self.sink, properties={name: verdict})
        if not holds and name in self.required:
            who = "" if backend is None or inputs is None else \
                f"{backend.name} {inputs.case.id} (seed {inputs.seed}): "
            raise ConformanceError(
                f"{who}required property {name} violated: {detail}\n"
                f"  typical cause: {CAUSES[name]}\n"
                f"  required by --normbench-require (default: {','.join(DEFAULT_REQUIRED)}); "
                f"--normbench-require=none records it as a property instead of failing")


# -- the structure of the forward error, recorded for the report (never a verdict) -----------------

#: the conformance columns a forward test records about y's error (:func:`error_structure`), in its record
#: (``normbench.check.measurement``), read back by ``normbench.front.runner``
ERROR_STRUCTURE: tuple[str, ...] = ("error_histogram", "nearest_histogram", "coherence_scale", "coherence_offset",
                                    "coherence_toward_zero", "coherence_downward")
#: every conformance column a test records as a measurement: the error structure, and a quantized output's codes
#: (``check_quantized_forward``: exact, allowed and wrong)
RECORDED: tuple[str, ...] = ERROR_STRUCTURE + ("codes",)
#: the output dtypes whose error is measured: not float64, whose oracle is itself float64 (its error in float64
#: ulps would be the oracle's own rounding as much as the kernel's)
MEASURED_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
#: coherence.Statistics.ratios() keys -> column (the scale's slope across rows counts as the scale)
_RATIO_COLUMNS = {"scale": "coherence_scale", "scale-slope": "coherence_scale", "offset": "coherence_offset",
                  "toward-zero": "coherence_toward_zero", "downward": "coherence_downward"}


def histogram(values: np.ndarray, bins: int = HISTOGRAM_BINS, width: float = HISTOGRAM_WIDTH) -> Histogram:
    """``values`` (finite, in ulps) counted in ``bins`` bins of ``width`` centred on 0, the rest below or above.

    >>> str(histogram(np.array([0.0, 0.05, -0.3, 0.5, 9.0]), bins=5, width=0.25))
    'b=5x0.25;u=0;o=1;c=0,1,2,0,1'
    """
    half = bins * width / 2
    index = np.floor((np.asarray(values, dtype=np.float64) + half) / width)
    inside = (index >= 0) & (index < bins)
    counts = np.bincount(index[inside].astype(np.int64), minlength=bins)
    return Histogram(width, int(np.count_nonzero(index < 0)), int(np.count_nonzero(index >= bins)),
                     tuple(int(c) for c in counts))


def error_structure(ref: oracle.Forward, y: np.ndarray, dtype: str) -> dict[str, str | float]:
    """What the report draws of ``y``'s error ((M, N) rows, the backend's output) against ``ref``, for an output
    dtype of :data:`MEASURED_DTYPES` (else nothing), as conformance columns:

    * ``error_histogram``: over the elements where y and y_ref are finite, ``(y - y_ref)*sign(y_ref)/ulp(y_ref)``
      (``coherence.ulp``: the output dtype's spacing at the reference; y_ref = 0 counts as positive), in
      :func:`histogram`'s bins (33 of 1/8 ulp centred on 0, the rest below or above). Signed toward zero, not
      downward: a truncating kernel's plain signed error is symmetric (positive outputs err down, negative ones
      up), its error toward zero is all on one side (-0.5 ulp on average);
    * ``nearest_histogram``: the same for ``coherence.round_nearest(y_ref, dtype)``, the reference rounded once
      to nearest: what a correct round-to-nearest kernel gives at best;
    * ``coherence_scale``, ``coherence_offset``, ``coherence_toward_zero``, ``coherence_downward``: each
      statistic's worst |value|/allowance (``coherence.forward_statistics(...).ratios()``), absent where it
      does not apply.

    Costs a pass over y for the histograms and one ``coherence.forward_statistics`` (which the coherence check
    computes again: it takes no precomputed statistics)."""
    if dtype not in MEASURED_DTYPES:
        return {}
    y64 = np.asarray(y, dtype=np.float64)
    out: dict[str, str | float] = {}
    with np.errstate(all="ignore"):
        finite = np.isfinite(y64) & np.isfinite(ref.y)
        if finite.any():
            exact = ref.y[finite]
            toward = np.where(exact < 0, -1.0, 1.0) / coherence.ulp(exact, dtype)
            out["error_histogram"] = str(histogram((y64[finite] - exact) * toward))
            out["nearest_histogram"] = str(histogram((coherence.round_nearest(exact, dtype) - exact) * toward))
    for key, ratio in coherence.forward_statistics(ref, y64, dtype).ratios().items():
        column = _RATIO_COLUMNS.get(key)
        if column is not None and np.isfinite(ratio):
            out[column] = max(float(f"{ratio:.4g}"), float(out.get(column, 0.0)))  # 4 digits: a ratio, not a datum
    return out


def bit_differences(a: np.ndarray, b: np.ndarray, nan_equal: bool = False) -> str:
    """How ``b``'s bits differ from ``a``'s, in words ("" when they do not): the elements and bits that
    differ and the largest difference in value. ``nan_equal``: a NaN equals a NaN, whatever its payload.

    >>> bit_differences(np.float32([1, 2, 3]), np.float32([1, np.nextafter(np.float32(2), np.float32(3)), 3]))
    '1 of 3 elements differ (1 bit), by at most 2.38e-07 (at [1])'
    """
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape {a.shape} dtype {a.dtype} vs shape {b.shape} dtype {b.dtype}"
    if not a.size or a.tobytes() == b.tobytes():
        return ""
    unsigned = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if unsigned is None:
        return "their bytes differ"
    xor = a.view(unsigned) ^ b.view(unsigned)
    differ = xor != 0
    if nan_equal and a.dtype.kind in "fcV":
        with np.errstate(all="ignore"):
            differ &= ~(np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    count = int(differ.sum())
    if not count:
        return ""
    bits = int(np.unpackbits(xor[differ].view(np.uint8)).sum())
    text = f"{count} of {a.size} elements differ ({bits} bit{'s' if bits != 1 else ''})"
    try:
        with np.errstate(all="ignore"):
            gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
        gap = np.where(differ & np.isfinite(gap), gap, -1.0)
        at = np.unravel_index(int(np.argmax(gap)), a.shape)
        if gap[at] >= 0:
            text += f", by at most {gap[at]:.3g} (at [{', '.join(map(str, at))}])"
    except (TypeError, ValueError):
        pass
    return text
