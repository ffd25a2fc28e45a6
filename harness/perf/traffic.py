"""Traffic accounting for Triton backends: the bytes each launch moves, counted in the interpreter.

Without a GPU nothing can be timed, but what a kernel asks of memory can be
counted exactly. This module runs a backend's Triton kernels in the Triton
interpreter with the *launch configuration of a chosen GPU* (its SM count) and
records every ``tl.load`` and ``tl.store`` (masked lanes excluded), per launch
and per kernel argument:

* **requested** bytes: every unmasked lane of every load and store, re-reads
  included: what the kernel asks of L1;
* **unique** bytes: per launch, the distinct addresses read plus the distinct
  addresses written; an address read after the same program wrote it is not
  counted again as a read. This is the DRAM traffic of a launch *if* every
  re-read inside a launch hits a cache (L1 or the 50 MB L2 of an H100) and
  nothing survives in L2 from one launch to the next. It is a model, not a
  measurement: a working set larger than L2 makes the real traffic larger,
  and an output read by the next launch while still in L2 makes it smaller.

``ratio = unique / byte model`` (``normbench.perf.roofline``): a kernel at ratio r
cannot exceed 1/r of the copy ceiling. These are counts, never speeds.

LayerNorm (with weight and bias) by default; ``norm="rms_norm"`` (``--norm rms_norm``)
counts a backend's RMSNorm (with weight) against RMSNorm's byte model, and ``add_layer_norm`` and
``add_rms_norm`` the residual add fused in (the residual in x's dtype, read and written as the
byte model counts it): the same counter, cases and rows, through ``normbench.core.operations``.

Cheap and exact for GPU-sized cases. The interpreter runs a grid's programs
one after another in NumPy, so an 8192 x 65536 case would take hours. The
counter runs only a sample of each launch's programs along grid axis 0
(programs 0, 1, 2 and the last; every program of axes 1 and 2) on
uninitialized inputs (the counter counts addresses, not values, so pages no
sampled program touches are never materialized), and extrapolates: programs
1 to P-2 are taken to move what program 1 moves (requested), and each to add
as many new unique bytes as program 1 adds to program 0. This is exact when
the programs of axis 0 split the rows (or columns) evenly and share only
what all of them share (the weight), which is how row-parallel and
persistent kernels are written; the counter *checks* it on program 2
(same requested bytes, same new unique bytes as program 1) and refuses to
extrapolate when it does not hold (:class:`TrafficError`). Data-dependent
addresses or control flow would defeat it; ``sample=False`` runs every program.

GPU launch configuration: inside :func:`emulated_gpu`, ``NORMBENCH_EMULATED_SM_COUNT``
is set and ``torch.cuda.get_device_properties`` answers with the GPU's
``multi_processor_count`` (and L2 size, shared memory, registers), so a
backend's launch heuristics can pick the configuration they would pick on
that GPU while running in the interpreter (normbench's own Triton backend
reads the variable; a plugin should read either).

Run (the published table; see docs/triton-kernels.md)::

    normbench traffic --impl triton --gpu h100 --out reports/traffic-h100/traffic.csv
    normbench traffic --impl triton --gpu h100 --norm rms_norm --out traffic-rms.csv

The module imports neither torch nor triton until it runs a case.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normbench.core import storage
from normbench.core.dtypes import DTYPES
from normbench.core.exceptions import NormbenchError
from normbench.core.operations import NAMES
from normbench.core.storage import Column, Schema
from normbench.perf.roofline import BYTE_MODELS, direction_bytes

#: the environment variable a backend's launch heuristics read for the emulated GPU's SM count
EMULATED_SM_COUNT_ENV = "NORMBENCH_EMULATED_SM_COUNT"
#: launches with at most this many programs along grid axis 0 run every program
SAMPLE_ALL_BELOW = 7
#: the ``normalization`` column's value per operation (LayerNorm's, "layernorm", predates normbench.core.operations'
#: names): the name with "_norm" joined and the other underscores as hyphens (``add_rms_norm_quant``: add-rmsnorm-quant)
NORMALIZATION_COLUMN = {name: name.replace("_norm", "norm").replace("_", "-") for name in NAMES}
#: the codes a quantized operation's traffic is counted with (one byte each, whichever format)
COUNTED_QDTYPE = "float8_e4m3fn"
#: what a ratio means, printed with every table
RATIO_NOTE = ("ratio = unique bytes / byte model: counted in the Triton interpreter with the GPU's launch "
              "configuration; re-reads inside a launch are assumed to hit L1/L2 (modelled, not measured); "
              "not a speed")


class TrafficError(NormbenchError):
    """The counter cannot count this launch exactly (see the module doc)."""


@dataclass(frozen=True)
class GPUProfile:
    """What launch heuristics and occupancy estimates read about a GPU (from its public data sheet)."""

    name: str
    sm_count: int
    arch: int  # compute capability x10
    l2_bytes: int
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    max_threads_per_sm: int = 2048
    max_ctas_per_sm: int = 32
    shared_bytes_per_sm: int = 228 * 1024
    max_shared_bytes_per_cta: int = 227 * 1024
    #: registers are allocated per warp in units of this many
    register_granularity: int = 256


GPUS: dict[str, GPUProfile] = {
    "h100": GPUProfile("NVIDIA H100 SXM5", 132, 90, 50 * 1024 * 1024),
    "h200": GPUProfile("NVIDIA H200 SXM", 132, 90, 50 * 1024 * 1024),
    "a100": GPUProfile("NVIDIA A100 SXM4", 108, 80, 40 * 1024 * 1024, shared_bytes_per_sm=164 * 1024,
                       max_shared_bytes_per_cta=163 * 1024),
}


# -- counting one launch -------------------------------------------------------------------


@dataclass
class _Access:
    """One program's accesses to one argument in one direction ("read" or "write")."""

    requested: int = 0
    addresses: list = field(default_factory=list)  # arrays of element addresses
    elsize: int = 0

    def unique(self) -> np.ndarray:
        return _unique(np.concatenate(self.addresses)) if self.addresses else np.zeros(0, np.uint64)


def _unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (a sort: NumPy 2's hashing np.unique is far slower here)."""
    a = np.sort(a, kind="stable")
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _isin_sorted(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """Which of ``values`` occur in ``sorted_unique``."""
    if not sorted_unique.size:
        return np.zeros(values.shape, bool)
    i = np.minimum(np.searchsorted(sorted_unique, values), sorted_unique.size - 1)
    return sorted_unique[i] == values


@dataclass
class ArgTraffic:
    """One kernel argument's traffic in one launch (extrapolated to the whole grid)."""

    requested_read: int = 0
    requested_write: int = 0
    unique_read: int = 0
    unique_write: int = 0

    @property
    def unique(self) -> int:
        return self.unique_read + self.unique_write

    @property
    def requested(self) -> int:
        return self.requested_read + self.requested_write


@dataclass
class Launch:
    """One kernel launch: its grid, the programs the counter ran, and each argument's traffic."""

    kernel: str
    grid: tuple[int, int, int]
    programs_run: int
    args: dict[str, ArgTraffic]

    @property
    def unique(self) -> int:
        return sum(a.unique for a in self.args.values())

    @property
    def requested(self) -> int:
        return sum(a.requested for a in self.args.values())

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


class _LaunchRecorder:
    """Collects one launch's accesses, per program of axis 0, argument and direction."""

    def __init__(self, kernel: str, regions: list[tuple[int, int, str]]):
        self.kernel = kernel
        regions = sorted(regions)
        self.starts = np.array([r[0] for r in regions], dtype=np.uint64)
        self.ends = np.array([r[1] for r in regions], dtype=np.uint64)
        self.names = [r[2] for r in regions]
        self.program = 0
        #: program -> (arg, direction) -> _Access
        self.accesses: dict[int, dict[tuple[str, str], _Access]] = defaultdict(dict)

    def _name(self, addresses: np.ndarray) -> str:
        i = int(np.searchsorted(self.starts, addresses[0], side="right")) - 1
        if i < 0 or addresses[0] >= self.ends[i]:
            raise TrafficError(f"{self.kernel}: an access at {int(addresses[0]):#x} lies in no tensor argument")
        if addresses.max() >= self.ends[i] or addresses.min() < self.starts[i]:
            raise TrafficError(f"{self.kernel}: one access spans several tensor arguments")
        return self.names[i]

    def record(self, direction: str, ptrs: np.ndarray, mask: np.ndarray, elsize: int) -> None:
        addresses = np.broadcast_to(ptrs, np.broadcast_shapes(ptrs.shape, mask.shape))
        addresses = addresses[np.broadcast_to(mask, addresses.shape)].astype(np.uint64, copy=False).ravel()
        if not addresses.size:
            return
        name = self._name(addresses)
        mine = self.accesses[self.program]
        acc = mine.setdefault((name, direction), _Access(elsize=elsize))
        if acc.elsize != elsize:
            raise TrafficError(f"{self.kernel}: argument {name} accessed with {acc.elsize}- and {elsize}-byte elements")
        acc.requested += addresses.size * elsize
        if direction == "read" and (name, "write") in mine:  # reads of this program's own writes: cached
            written = mine[(name, "write")]
            if len(written.addresses) > 1:
                written.addresses = [written.unique()]
            addresses = addresses[~_isin_sorted(addresses, written.addresses[0])]
        acc.addresses.append(addresses)

    def finish(self, grid: tuple[int, int, int], sampled: list[int]) -> Launch:
        """Extrapolate the sampled programs of axis 0 to the whole grid (see the module doc)."""
        keys = sorted({k for p in sampled for k in self.accesses[p]})
        total = grid[0]
        middle = [p for p in sampled if 0 < p < total - 1]
        skipped = total - len(sampled)
        args: dict[str, ArgTraffic] = defaultdict(ArgTraffic)
        for name, direction in keys:
            per = {p: self.accesses[p].get((name, direction), _Access()) for p in sampled}
            sets = {p: per[p].unique() for p in sampled}
            elsize = max(a.elsize for a in per.values())
            requested = sum(a.requested for a in per.values())
            union = _unique(np.concatenate([sets[p] for p in sampled]))
            unique = union.size
            if skipped:
                p1, p2 = middle[0], middle[1]
                new1 = int((~_isin_sorted(sets[p1], sets[0])).sum())
                new2 = int((~_isin_sorted(sets[p2], _unique(np.concatenate([sets[0], sets[p1]])))).sum())
                if per[p1].requested != per[p2].requested or new1 != new2:
                    raise TrafficError(
                        f"{self.kernel}: programs {p1} and {p2} move different {direction}s of {name} "
                        f"({per[p1].requested} vs {per[p2].requested} bytes requested, {new1 * elsize} vs "
                        f"{new2 * elsize} new unique bytes), so the grid cannot be extrapolated from a sample; "
                        f"count it with sample=False")
                requested += skipped * per[p1].requested
                unique += skipped * new1
            a = args[name]
            if direction == "read":
                a.requested_read, a.unique_read = requested, unique * elsize
            else:
                a.requested_write, a.unique_write = requested, unique * elsize
        return Launch(self.kernel, grid, len(sampled) * grid[1] * grid[2], dict(args))


def _sampled_programs(n: int, sample: bool) -> list[int]:
    if not sample or n < SAMPLE_ALL_BELOW:
        return list(range(n))
    return [0, 1, 2, n - 1]


# -- patching the interpreter ----------------------------------------------------------------


class Recording:
    """The launches recorded inside :func:`record`, in order."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []

    @property
    def unique(self) -> int:
        return sum(launch.unique for launch in self.launches)

    @property
    def requested(self) -> int:
        return sum(launch.requested for launch in self.launches)


def _interpreter():
    """Triton's interpreter module, checked for the internals the counter patches."""
    if os.environ.get("TRITON_INTERPRET", "").strip() != "1":
        raise TrafficError("the traffic counter needs the Triton interpreter: set TRITON_INTERPRET=1 before "
                           "triton is imported")
    from triton.runtime import interpreter as interp

    needed = ("GridExecutor", "InterpreterBuilder", "interpreter_builder", "_patch_lang", "_implicit_cvt",
              "_unwrap_tensor")
    missing = [n for n in needed if not hasattr(interp, n)]
    if missing or not hasattr(interp.GridExecutor, "_init_args_hst"):
        import triton

        raise TrafficError(f"this Triton ({triton.__version__}) interpreter lacks {', '.join(missing) or '_init_args_hst'}; "
                           f"the traffic counter supports Triton 3.x's interpreter")
    return interp


@contextlib.contextmanager
def record(sample: bool = True) -> Iterator[Recording]:
    """Count every interpreted Triton launch inside the block (see the module doc)."""
    interp = _interpreter()
    import inspect

    recording = Recording()
    state: dict[str, Any] = {"recorder": None}
    builder_cls, executor_cls = interp.InterpreterBuilder, interp.GridExecutor
    original_load, original_store = builder_cls.create_masked_load, builder_cls.create_masked_store
    original_call = executor_cls.__call__
    unsupported = [n for n in ("create_atomic_rmw", "create_atomic_cas", "create_descriptor_load",
                               "create_descriptor_store") if hasattr(builder_cls, n)]
    originals = {n: getattr(builder_cls, n) for n in unsupported}

    def elsize(ptrs) -> int:
        return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        if state["recorder"] is not None:
            state["recorder"].record("read", ptrs.data, mask.data, elsize(ptrs))
        return original_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        if state["recorder"] is not None:
            state["recorder"].record("write", ptrs.data, mask.data, elsize(ptrs))
        return original_store(self, ptrs, value, mask, cache_policy)

    def refuse(name):
        def op(self, *args, **kwargs):
            raise TrafficError(f"the traffic counter does not model {name.removeprefix('create_')} "
                               f"(atomics and tensor descriptors are not counted)")
        return op

    def call(self, *args_dev, **kwargs):
        argspec = inspect.getfullargspec(self.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
        for hook in self.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        patch_scope = interp._patch_lang(self.fn)
        try:
            call_args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
            regions = []
            for name, value in call_args.items():
                if name not in self.constexprs and hasattr(value, "data_ptr"):
                    storage = interp._unwrap_tensor(value).untyped_storage()
                    regions.append((storage.data_ptr(), storage.data_ptr() + max(storage.nbytes(), 1), name))
            call_args = {name: v if name in self.constexprs else interp._implicit_cvt(v) for name, v in call_args.items()}
            grid = self.grid(call_args) if callable(self.grid) else self.grid
            grid = tuple(grid) + (1,) * (3 - len(grid))
            interp.interpreter_builder.set_grid_dim(*grid)
            recorder = state["recorder"] = _LaunchRecorder(self.fn.__name__, regions)
            sampled = _sampled_programs(grid[0], sample)
            try:
                for x in sampled:
                    recorder.program = x
                    for y in range(grid[1]):
                        for z in range(grid[2]):
                            interp.interpreter_builder.set_grid_idx(x, y, z)
                            self.fn(**call_args)
            finally:
                state["recorder"] = None
            recording.launches.append(recorder.finish(grid, sampled))
        finally:
            patch_scope.restore()
        # CPU tensors are their own host copies: copy back only what is not
        if any(interp._unwrap_tensor(a).untyped_storage().data_ptr() != interp._unwrap_tensor(h).untyped_storage().data_ptr()
               for a, h in zip(args_dev, args_hst) if hasattr(a, "data_ptr")):
            self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    builder_cls.create_masked_load, builder_cls.create_masked_store = load, store
    executor_cls.__call__ = call
    for n in unsupported:
        setattr(builder_cls, n, refuse(n))
    try:
        yield recording
    finally:
        builder_cls.create_masked_load, builder_cls.create_masked_store = original_load, original_store
        executor_cls.__call__ = original_call
        for n, f in originals.items():
            setattr(builder_cls, n, f)


@contextlib.contextmanager
def emulated_gpu(gpu: GPUProfile) -> Iterator[None]:
    """Make launch heuristics see ``gpu`` while kernels run in the interpreter (see the module doc)."""
    import torch

    props = type("EmulatedDeviceProperties", (), {
        "name": gpu.name, "multi_processor_count": gpu.sm_count, "L2_cache_size": gpu.l2_bytes,
        "major": gpu.arch // 10, "minor": gpu.arch % 10, "regs_per_multiprocessor": gpu.registers_per_sm,
        "max_threads_per_multi_processor": gpu.max_threads_per_sm,
        "shared_memory_per_multiprocessor": gpu.shared_bytes_per_sm,
        "shared_memory_per_block_optin": gpu.max_shared_bytes_per_cta, "warp_size": 32})()
    saved_env = os.environ.get(EMULATED_SM_COUNT_ENV)
    saved_props = torch.cuda.get_device_properties
    os.environ[EMULATED_SM_COUNT_ENV] = str(gpu.sm_count)
    torch.cuda.get_device_properties = lambda device=None: props
    try:
        yield
    finally:
        torch.cuda.get_device_properties = saved_props
        if saved_env is None:
            os.environ.pop(EMULATED_SM_COUNT_ENV, None)
        else:
            os.environ[EMULATED_SM_COUNT_ENV] = saved_env


# -- one case, one direction -------------------------------------------------------------------


def _same_launch(a: Launch, b: Launch) -> bool:
    return (a.kernel, a.grid, a.unique, a.requested) == (b.kernel, b.grid, b.unique, b.requested)


def count_direction(backend: Any, rows: int, hidden: int, dtype: str, direction: str, *, eps: float = 1e-5,
                    sample: bool = True, norm: str = "layer_norm") -> list[Launch]:
    """The launches of one direction of a (rows, hidden) LayerNorm with weight and bias
    (``norm="rms_norm"``: an RMSNorm with weight; ``add_layer_norm``, ``add_rms_norm``: the fused
    operations, the residual in x's dtype; ``*_quant``, ``*_dynamic_quant``: their output quantized to
    :data:`COUNTED_QDTYPE`, with scale 1 or per-row scales, forward only).

    ``backend`` is a normbench Backend whose arrays are torch tensors on the CPU
    (any Triton backend under the interpreter). Inputs are uninitialized
    (``torch.empty``): only addresses are counted. ``backward`` runs the operation's backward
    entry point (``layer_norm_backward``; a fused one's on the ``residual_out`` its forward
    wrote, with one cotangent per output); launches it begins with that repeat the
    forward's (a backend whose backward reruns the forward, as an autograd one does) are
    not counted, as the byte model's backward does not count them.
    """
    import torch

    from normbench.core import operations

    operation = operations.of(norm)
    torch_dtype = getattr(torch, dtype)
    empty = lambda: torch.empty((rows, hidden), dtype=torch_dtype)
    weight = torch.ones(hidden, dtype=torch_dtype)
    bias = torch.zeros(hidden, dtype=torch_dtype) if operation.has_bias else None
    residual = empty() if "residual" in operation.params else None
    args = operation.arguments(x=empty(), residual=residual, normalized_shape=(hidden,), weight=weight, bias=bias,
                               eps=eps, scale=1.0 if "scale" in operation.params else None,
                               qdtype=COUNTED_QDTYPE if "qdtype" in operation.params else None)
    if direction == "backward" and not operation.cotangents:
        raise NormbenchError(f"{operation.label} has no backward (inference only): count its forward "
                             f"(--directions forward)")
    with record(sample) as forward:
        outputs = operation.forward(backend, args)
    if direction == "forward":
        return forward.launches
    if direction != "backward":
        raise NormbenchError(f"traffic is counted for forward and backward, not {direction!r}")
    cotangents = tuple(empty() for _ in operation.cotangents)
    with record(sample) as both:
        operation.backward(backend, operation.backward_args_from(args, outputs), cotangents)
    launches = list(both.launches)
    skip = 0
    while skip < min(len(forward.launches), len(launches)) and _same_launch(forward.launches[skip], launches[skip]):
        skip += 1
    return launches[skip if skip == len(forward.launches) else 0:]


def traffic_row(backend_name: str, launches: Sequence[Launch], rows: int, hidden: int, dtype: str, direction: str,
                gpu: GPUProfile, normalization: str | None = None, *, norm: str = "layer_norm") -> dict:
    """One results row (:data:`ROW_FIELDS` of :data:`TRAFFIC`) from a direction's launches
    of ``norm`` (against its byte model; ``normalization``, the column, defaults to
    :data:`NORMALIZATION_COLUMN` of it)."""
    model = direction_bytes(rows, hidden, dtype, direction, norm=norm)
    if normalization is None:
        normalization = NORMALIZATION_COLUMN[norm]
    unique = sum(launch.unique for launch in launches)
    requested = sum(launch.requested for launch in launches)
    parts = []
    for launch in launches:
        for name, a in sorted(launch.args.items()):
            parts.append(f"{launch.kernel}.{name}:{a.unique_read / model:.4f}r+{a.unique_write / model:.4f}w")
    return {
        "backend": backend_name, "normalization": normalization, "direction": direction, "dtype": dtype,
        "rows": rows, "hidden": hidden, "gpu": gpu.name, "sm_count": gpu.sm_count,
        "byte_model": BYTE_MODELS[direction], "model_bytes": model, "unique_bytes": unique,
        "requested_bytes": requested, "ratio": round(unique / model, 5),
        "requested_ratio": round(requested / model, 5), "launches": len(launches),
        "kernels": "+".join(launch.kernel for launch in launches),
        "programs_run": sum(launch.programs_run for launch in launches),
        "programs_total": sum(launch.programs for launch in launches), "breakdown": " ".join(parts),
    }


def traffic_rows(backend: Any, backend_name: str, shapes: Sequence[tuple[int, int, str]], gpu: GPUProfile,
                 directions: Sequence[str] = ("forward", "backward"), sample: bool = True,
                 progress: Callable[[dict], None] | None = None, norm: str = "layer_norm") -> list[dict]:
    """Traffic rows for ``(rows, hidden, dtype)`` shapes and directions of ``norm``, with ``gpu``'s
    launch configuration."""
    out = []
    with emulated_gpu(gpu):
        for rows, hidden, dtype in shapes:
            for direction in directions:
                launches = count_direction(backend, rows, hidden, dtype, direction, sample=sample, norm=norm)
                row = traffic_row(backend_name, launches, rows, hidden, dtype, direction, gpu, norm=norm)
                out.append(row)
                if progress:
                    progress(row)
    return out


def gpu_sweep_shapes() -> list[tuple[int, int, str]]:
    """(rows, hidden, dtype) of the GPU throughput sweep (``normbench.core.cases``), each once: every operation's
    sweep lists the same shapes (counted twice, a table held each row twice)."""
    from normbench.core.cases import THROUGHPUT_GPU_CASES

    return list(dict.fromkeys((c.rows, c.hidden, c.dtype) for c in THROUGHPUT_GPU_CASES))


def write_csv(rows: Sequence[dict], path: str | os.PathLike, schema: Schema | None = None) -> None:
    """``rows`` as a CSV file of ``schema`` (``normbench.traffic`` by default; ``normbench.kernel_stats`` too),
    validated field by field and written whole (:func:`normbench.core.storage.write_csv`; read it back with
    :func:`normbench.core.storage.load`)."""
    storage.write_csv(path, rows, schema or TRAFFIC)


# -- the traffic results schema: one row per (backend, shape, dtype, direction), written by main() ----------------

#: traffic rows count bytes, they do not time them: directions and byte models the counter covers
TRAFFIC_DIRECTIONS = ("forward", "backward")
#: the dtypes a traffic or kernel-stats row may name
COUNTED_DTYPES = DTYPES
#: no kernel worth publishing moves a thousand times the byte model: a larger ratio is a broken row
MAX_TRAFFIC_RATIO = 1000.0

#: the traffic schema's columns: bytes counted in the Triton interpreter with a GPU's launch configuration, never a speed
TRAFFIC_COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "int", "the schema version of this row (1)"),
    Column("backend", "str", "the backend whose Triton kernels were counted (--impl)"),
    Column("normalization", "str", "what the kernels compute (layernorm)"),
    Column("direction", "str", "forward or backward", choices=TRAFFIC_DIRECTIONS),
    Column("dtype", "str", "the dtype of x, y, dy and dx (weight and bias too)", choices=COUNTED_DTYPES),
    Column("rows", "int", "M, the number of rows", low=1),
    Column("hidden", "int", "N, the normalized size", low=1),
    Column("gpu", "str", "the GPU whose launch configuration the kernels were given (normbench.perf.traffic.GPUS)"),
    Column("sm_count", "int", "that GPU's SM count, as the launch heuristics saw it", low=1),
    Column("byte_model", "str", "forward-inference or backward (normbench.perf.roofline)",
           choices=("forward-inference", "backward")),
    Column("model_bytes", "int", "the bytes the byte model says the direction must move", low=1),
    Column("unique_bytes", "int", "distinct addresses read plus written, per launch, summed over launches: the DRAM "
                                  "traffic if every re-read inside a launch hits L1/L2 (modelled, not measured)", low=0),
    Column("requested_bytes", "int", "every unmasked lane of every load and store, re-reads included: what the kernels "
                                     "ask of L1", low=0),
    Column("ratio", "float", "unique_bytes / model_bytes, rounded to 5 decimals; never empty", low=0.0,
           high=MAX_TRAFFIC_RATIO),
    Column("requested_ratio", "float", "requested_bytes / model_bytes, rounded to 5 decimals; never empty", low=0.0,
           high=MAX_TRAFFIC_RATIO),
    Column("launches", "int", "kernel launches the direction made (a backward's repeat of the forward not counted)",
           low=1),
    Column("kernels", "str", "the launched kernels' names, in order, joined by +"),
    Column("programs_run", "int", "programs the interpreter ran (the rest extrapolated, checked on program 2)", low=1),
    Column("programs_total", "int", "programs of every launch's grid", low=1),
    Column("breakdown", "str", "per kernel argument: kernel.ARG:unique reads r + unique writes w, each / model_bytes"),
)



def _ratios_are_the_counts(row: dict[str, Any]) -> str | None:
    for name, part in (("ratio", "unique_bytes"), ("requested_ratio", "requested_bytes")):
        exact = row[part] / row["model_bytes"]
        if row[name] is None:
            return f"field {name} is empty; it must be {part} / model_bytes ({exact:.5f})"
        if abs(row[name] - exact) > 6e-6:  # rounded to 5 decimals, nothing more
            return (f"field {name} is {row[name]!r}, but {part} / model_bytes is {exact:.5f} ({row[part]} / "
                    f"{row['model_bytes']}): the counts and the ratio disagree")
    return None


def _requested_covers_unique(row: dict[str, Any]) -> str | None:
    if row["requested_bytes"] < row["unique_bytes"]:
        return (f"requested_bytes ({row['requested_bytes']}) is below unique_bytes ({row['unique_bytes']}): every "
                f"unique byte is requested at least once")
    if row["programs_run"] > row["programs_total"]:
        return f"programs_run ({row['programs_run']}) exceeds programs_total ({row['programs_total']})"
    if row["byte_model"] != ("forward-inference" if row["direction"] == "forward" else "backward"):
        return f"byte_model {row['byte_model']} is not the byte model of direction {row['direction']}"
    return None


TRAFFIC = Schema("normbench.traffic", 1, "traffic", TRAFFIC_COLUMNS,
                 rules=(_requested_covers_unique, _ratios_are_the_counts))
#: the file ``normbench traffic --out`` writes in a folder
TRAFFIC_FILE = "traffic.csv"
assert TRAFFIC_FILE in storage.COUNTS_FILES, "a run folder must refuse to be written over a traffic table"
#: the fields of a traffic row, in order: :data:`TRAFFIC_COLUMNS` less ``schema_version``, which the writer adds
ROW_FIELDS: tuple[str, ...] = tuple(c.name for c in TRAFFIC_COLUMNS if c.name != "schema_version")
