"""The byte model and the ceiling: what an operation must move, and how fast this device moves bytes.

The byte model (PERFORMANCE.md, one model applied identically to every backend) counts the
tensors each direction of an operation must read and write, as its entry lists them
(``normbench.core.operations``: ``Operation.traffic``): an extent of M*N, N, M or M*N/G elements (M rows,
N hidden) times an element size, e_x (x's dtype), e_w and e_b (the parameters', 0 for a missing
weight or bias), or 4 (fp32 statistics). For LayerNorm:

* forward, training: ``M*N*e_x + M*N*e_y + N*(e_w + e_b) + 2*M*4`` (fp32 mean, rstd written)
* forward, inference: the same without ``2*M*4``
* backward: ``2*M*N*e_x`` (x, dy) ``+ M*N*e_x`` (dx) ``+ N*e_w`` (weight)
  ``+ 2*M*4`` (mean, rstd read) ``+ N*(e_w + e_b)`` (dweight, dbias written)

RMSNorm's is the same with no bias and one statistic, rstd, instead of two (:func:`formula` writes
any operation's from its terms). The fused operations (``add_layer_norm``, ``add_rms_norm``) add the
residual stream in its own dtype, e_r: the forward reads the residual and writes residual_out
(``2*M*N*e_r``), the backward reads dresidual_out and residual_out (in place of x) and writes dsum
in place of dx (docs/fused.md says why both are counted).

The throughput directions use it so: ``forward`` times the operation's entry point
(``Backend.layer_norm``), which returns y only, so it is the inference model; ``backward`` is the backward
model; ``forward+backward`` is a training forward plus the backward. Traffic an
implementation adds (re-reads, partial buffers) is never counted: it shows as a
lower fraction of the ceiling.

The ceiling is the device's copy bandwidth, ``2*bytes/time`` of a copy of a
buffer at least 4x the last-level cache, median of 20 runs, measured in the
same run as the cases it judges. On the CPU the copy runs on one thread and on
every core this process may use (NumPy releases the GIL), each run is the
fastest of 3 back-to-back copies (so another process preempting a copy does
not lower the ceiling), and the faster median is the ceiling; on CUDA it is
``Tensor.copy_`` timed with CUDA events (device time: nothing preempts it).

>>> forward_bytes(8192, 4096, "bfloat16", training=True)
134299648
>>> DIRECTIONS
('forward', 'backward', 'forward+backward')
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from normbench.core import operations
from normbench.core.dtypes import host_dtype
from normbench.core.exceptions import NormbenchError
from normbench.core.machine import MIB, CacheSize, cpu_threads, last_level_cache

DIRECTIONS: tuple[str, ...] = ("forward", "backward", "forward+backward")
#: the byte-model variant each direction uses (recorded in every results row)
BYTE_MODELS: dict[str, str] = {"forward": "forward-inference", "backward": "backward",
                               "forward+backward": "forward-training+backward"}
#: the variants an operation's entry lists its traffic for; forward-training+backward is the sum of the last two
VARIANTS: tuple[str, ...] = ("forward-inference", "forward-training", "backward")
#: statistics are fp32 whatever the input dtype: 4 bytes each (LayerNorm's mean and rstd)
STAT_BYTES = 4
_ELEMENT_WORDS = {"x": "e_x", "residual": "e_r", "weight": "e_w", "bias": "e_b", "fp32": "4", "q": "1"}


def formula(norm: str | operations.Operation, variant: str) -> str:
    """The byte model of ``norm``'s ``variant`` as a formula, its terms named (reports show it beside the numbers).

    >>> formula("rms_norm", "forward-inference")
    'M*N*e_x (read x) + N*e_w (read weight) + M*N*e_x (write y)'
    """
    op = operations.of(norm)
    if variant == "forward-training+backward":
        return f"the training forward, {formula(op, 'forward-training')}, plus the backward"
    return " + ".join(f"{t.extent}*{_ELEMENT_WORDS[t.element]} ({'read' if t.access == 'read' else 'write'} {t.tensor})"
                      for t in op.traffic[variant])


#: LayerNorm's byte-model variants as formulas (PERFORMANCE.md)
BYTE_MODEL_FORMULAS: dict[str, str] = {v: formula("layer_norm", v) for v in (*VARIANTS[::2], "forward-training+backward")}
#: the ceiling's copy buffer is at least this many times the last-level cache
CACHE_MULTIPLE = 4
CEILING_REPEATS = 20
#: on the CPU, each run is the fastest of this many back-to-back copies: a copy
#: preempted by another process (a busy machine) must not lower the ceiling, and
#: with a buffer 4x the cache a repeat gains nothing from it
COPIES_PER_RUN = 3


def model_bytes(norm: str | operations.Operation, variant: str, rows: int, hidden: int, dtype: str,
                param_dtype: str | None = None, *, weight: bool = True, bias: bool = True,
                residual_dtype: str | None = None) -> int:
    """The bytes ``norm``'s ``variant`` (:data:`VARIANTS`) must move for M = ``rows``, N = ``hidden``, x in
    ``dtype``, the parameters in ``param_dtype`` (default: ``dtype``), where they are present, and a fused
    operation's residual stream in ``residual_dtype`` (default: ``dtype``).

    >>> model_bytes("layer_norm", "backward", 2, 3, "float32")  # x, dy, dx: 3*24; weight, dweight, dbias: 36; mean, rstd: 16
    124
    >>> model_bytes("add_rms_norm", "forward-inference", 2, 3, "bfloat16", residual_dtype="float32")  # x, y: 24; residual: 48
    78
    """
    op = operations.of(norm)
    e, ep = host_dtype(dtype).itemsize, host_dtype(param_dtype or dtype).itemsize
    element = {"x": e, "residual": host_dtype(residual_dtype or dtype).itemsize, "weight": ep if weight else 0,
               "bias": ep if bias and op.has_bias else 0, "fp32": STAT_BYTES, "q": 1}
    group = op.epilogue.group(hidden) if op.epilogue is not None else None  # G of a per-block scale's M*N/G
    return sum(t.elements(rows, hidden, group) * element[t.element] for t in op.traffic[variant])


def statistics_per_row(norm: str = "layer_norm") -> int:
    """The fp32 statistics a training forward saves per row: mean and rstd (LayerNorm), rstd (RMSNorm)."""
    op = operations.of(norm)
    return sum(1 for t in op.traffic["forward-training"] if t.element == "fp32" and t.access == "written")


def forward_bytes(rows: int, hidden: int, dtype: str, param_dtype: str | None = None, *,
                  weight: bool = True, bias: bool = True, training: bool = False, norm: str = "layer_norm",
                  residual_dtype: str | None = None) -> int:
    """Bytes a forward must move: read x, write y, read weight and bias, and
    (training) write the fp32 mean and rstd (RMSNorm: no bias, rstd alone).

    >>> forward_bytes(2, 3, "float32", weight=False, bias=False)
    48
    >>> forward_bytes(2, 3, "float32", training=True, norm="rms_norm")  # 48 + 3*4 (weight) + 2*4 (rstd)
    68
    """
    variant = "forward-training" if training else "forward-inference"
    return model_bytes(norm, variant, rows, hidden, dtype, param_dtype, weight=weight, bias=bias,
                       residual_dtype=residual_dtype)


def backward_bytes(rows: int, hidden: int, dtype: str, param_dtype: str | None = None, *,
                   weight: bool = True, bias: bool = True, norm: str = "layer_norm",
                   residual_dtype: str | None = None) -> int:
    """Bytes a backward must move: read x and dy, write dx, read weight, read
    mean and rstd, write dweight and dbias (RMSNorm: rstd alone, no dbias).

    >>> backward_bytes(2, 3, "float32"), backward_bytes(2, 3, "float32", norm="rms_norm")
    (124, 104)
    """
    return model_bytes(norm, "backward", rows, hidden, dtype, param_dtype, weight=weight, bias=bias,
                       residual_dtype=residual_dtype)


def direction_bytes(rows: int, hidden: int, dtype: str, direction: str, param_dtype: str | None = None, *,
                    weight: bool = True, bias: bool = True, norm: str = "layer_norm",
                    residual_dtype: str | None = None) -> int:
    """The byte model of one throughput direction (see :data:`BYTE_MODELS`)."""
    kw = {"weight": weight, "bias": bias, "norm": norm, "residual_dtype": residual_dtype}
    if direction == "forward":
        return forward_bytes(rows, hidden, dtype, param_dtype, **kw)
    if direction == "backward":
        return backward_bytes(rows, hidden, dtype, param_dtype, **kw)
    if direction == "forward+backward":
        return (forward_bytes(rows, hidden, dtype, param_dtype, training=True, **kw)
                + backward_bytes(rows, hidden, dtype, param_dtype, **kw))
    raise NormbenchError(f"unknown direction {direction!r}; expected one of {', '.join(DIRECTIONS)}")


# -- the ceiling ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceiling:
    """A measured copy bandwidth: ``gbps = 2*buffer_bytes/median_s/1e9``."""

    device: str
    gbps: float
    median_s: float
    q1_s: float
    q3_s: float
    n: int
    buffer_bytes: int
    cache_bytes: int
    cache_source: str
    method: str

    @property
    def buffer_ok(self) -> bool:
        """Whether the buffer met the rule (at least 4x the last-level cache)."""
        return self.buffer_bytes >= CACHE_MULTIPLE * self.cache_bytes

    def as_dict(self) -> dict:
        return {**asdict(self), "buffer_ok": self.buffer_ok}

    def describe(self) -> str:
        note = "" if self.buffer_ok else f"; below the {CACHE_MULTIPLE}x-cache rule"
        return (f"{self.device}: {self.gbps:.1f} GB/s ({self.method}, {self.buffer_bytes / MIB:.0f} MiB buffer = "
                f"{self.buffer_bytes / max(self.cache_bytes, 1):.1f}x the {self.cache_bytes / MIB:.0f} MiB "
                f"last-level cache, median of {self.n}{note})")


def device_key(device: str) -> str:
    """``"cuda:0 (NVIDIA H100)"`` -> ``"cuda:0"``; ``"cpu"`` -> ``"cpu"``: which ceiling applies.

    >>> device_key("cuda:1 (NVIDIA H200)"), device_key("cuda"), device_key("cpu")
    ('cuda:1', 'cuda:0', 'cpu')
    """
    first = (device or "cpu").strip().lower().split(" ")[0]
    if first.startswith("cuda"):
        return first if ":" in first else "cuda:0"
    if first.startswith("cpu"):
        return "cpu"
    return first


def _quartiles(samples: list[float]) -> tuple[float, float, float]:
    q1, med, q3 = np.percentile(np.asarray(samples, dtype=np.float64), [25, 50, 75])
    return float(med), float(q1), float(q3)


def _cpu_copy_samples(src: np.ndarray, dst: np.ndarray, threads: int, repeats: int) -> list[float]:
    """``repeats`` runs, each the fastest of :data:`COPIES_PER_RUN` back-to-back copies."""
    from concurrent.futures import ThreadPoolExecutor

    n = src.size
    parts = [slice(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    copy_part = lambda s: np.copyto(dst[s], src[s])
    samples = []
    with ThreadPoolExecutor(threads) as pool:
        def copy() -> float:
            start = time.perf_counter_ns()
            if threads == 1:
                np.copyto(dst, src)
            else:
                list(pool.map(copy_part, parts))
            return (time.perf_counter_ns() - start) / 1e9

        copy()  # warm-up
        for _ in range(repeats):
            samples.append(min(copy() for _ in range(COPIES_PER_RUN)))
    return samples


def measure_cpu_ceiling(buffer_bytes: int | None = None, repeats: int = CEILING_REPEATS,
                        cache: CacheSize | None = None) -> Ceiling:
    """Copy bandwidth of this CPU on a buffer of ``buffer_bytes`` (default 4x the LLC)."""
    cache = cache or last_level_cache()
    nbytes = int(buffer_bytes or max(CACHE_MULTIPLE * cache.bytes, 64 * MIB))
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)  # written, so its pages exist before timing
    best: tuple[float, list[float], int] | None = None
    for threads in sorted({1, cpu_threads()}):
        samples = _cpu_copy_samples(src, dst, threads, repeats)
        median = _quartiles(samples)[0]
        if best is None or median < best[0]:
            best = (median, samples, threads)
    del src, dst
    median, samples, threads = best
    med, q1, q3 = _quartiles(samples)
    return Ceiling("cpu", 2 * nbytes / med / 1e9, med, q1, q3, len(samples), nbytes, cache.bytes, cache.source,
                   f"numpy.copyto on {threads} thread{'s' if threads > 1 else ''}")


def measure_cuda_ceiling(device: str, buffer_bytes: int | None = None, repeats: int = CEILING_REPEATS) -> Ceiling:
    """Copy bandwidth of a CUDA device: ``Tensor.copy_`` timed with CUDA events
    (untested on hardware in normbench's CI, which has no GPU)."""
    import torch

    dev = torch.device(device)
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    nbytes = int(buffer_bytes or max(CACHE_MULTIPLE * l2, 1 << 30))
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
    dst.copy_(src)  # warm-up
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        dst.copy_(src)
        end.record()
    torch.cuda.synchronize(dev)
    samples = [start.elapsed_time(end) / 1e3 for start, end in events]
    del src, dst
    med, q1, q3 = _quartiles(samples)
    name = torch.cuda.get_device_name(dev)
    return Ceiling(device, 2 * nbytes / med / 1e9, med, q1, q3, len(samples), nbytes, l2,
                   f"torch.cuda.get_device_properties: {name} L2", "Tensor.copy_ timed with CUDA events")


def measure_ceiling(device: str, buffer_bytes: int | None = None, repeats: int = CEILING_REPEATS) -> Ceiling:
    """The copy-bandwidth ceiling of ``device`` (a :func:`device_key`)."""
    key = device_key(device)
    if key == "cpu":
        return measure_cpu_ceiling(buffer_bytes, repeats)
    if key.startswith("cuda"):
        return measure_cuda_ceiling(key, buffer_bytes, repeats)
    raise NormbenchError(f"no ceiling measurement for device {device!r}: normbench measures 'cpu' and 'cuda:N'. "
                         f"Fix: report the device as one of those in the backend's `device` attribute")
