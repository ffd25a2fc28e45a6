"""Our kernels' traffic, counted (normbench.perf.traffic) with an H100's launch configuration,
equals the byte model plus exactly what ``heuristics.traffic_beyond_model`` names (the saved
statistics, the partial-sum buffers): x, dy, y, dx, weight and bias each leave or reach
DRAM once per direction. With that formula, tests/test_triton_heuristics.py pins every
shape of the GPU sweep at the traffic floor and checks the published table."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("triton") is None:  # never import triton before the mode is chosen
    pytest.skip("triton is not installed (pip install 'normbench[triton]')", allow_module_level=True)
torch = pytest.importorskip("torch")

from normbench.impls.triton.runtime import ensure_mode  # noqa: E402

if not ensure_mode().interpreter:
    pytest.skip("the traffic counter runs kernels in the Triton interpreter", allow_module_level=True)

from normbench import get_registry  # noqa: E402
from normbench.impls.triton import heuristics  # noqa: E402
from normbench.perf import traffic  # noqa: E402
from normbench.perf.roofline import direction_bytes  # noqa: E402

H100 = traffic.GPUS["h100"]
TARGET = heuristics.Target(H100.sm_count)

#: every kernel path, small enough to count in seconds (the formula's terms do not depend on size)
SHAPES = {
    "rows-half": (256, 256, "bfloat16"),  # forward rows, backward rows, partial sums in registers
    "rows-half-partials-in-memory": (96, 1024, "float16"),  # partial sums read back per tile
    "rows-fp32": (200, 1000, "float32"),  # backward rows with per-column accumulators, padded columns
    "looped-backward": (140, 8192, "float16"),  # the looped backward from 8192 half values
    "looped-backward-fp32-chunks": (9, 20000, "float32"),  # several chunks, one ragged
    "looped-forward": (6, 32768, "float32"),  # the forward in chunks
    "fp64": (64, 100, "float64"),  # fp64 statistics: wider than the model's fp32
}


@pytest.fixture(scope="module")
def triton_backend():
    return get_registry().create("triton")


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_unique_traffic_is_the_byte_model_plus_the_documented_extra(triton_backend, shape):
    rows, hidden, dtype = shape
    acc = 8 if dtype == "float64" else 4
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    with traffic.emulated_gpu(H100):
        for direction in ("forward", "backward"):
            launches = traffic.count_direction(triton_backend, rows, hidden, dtype, direction)
            unique = sum(launch.unique for launch in launches)
            extra = heuristics.traffic_beyond_model(rows, hidden, acc, TARGET, direction, itemsize)
            assert unique == direction_bytes(rows, hidden, dtype, direction) + extra, direction
            for launch in launches:  # no tensor of the model is read or written twice from DRAM
                for name in ("X", "DY", "Y", "DX"):
                    if name in launch.args:
                        assert launch.args[name].unique == rows * hidden * itemsize, (launch.kernel, name)


def test_the_looped_backward_is_one_launch_and_a_reduction(triton_backend):
    """x and dy leave DRAM once: the row sums and dx come from one launch (issue 14 measured
    1.70x the model when two launches read them)."""
    with traffic.emulated_gpu(H100):
        launches = traffic.count_direction(triton_backend, 140, 16384, "bfloat16", "backward")
    assert [launch.kernel for launch in launches] == ["layer_norm_backward_looped", "layer_norm_reduce_partials"]
    main = launches[0]
    assert main.grid[0] == heuristics.backward_config(140, 16384, 4, TARGET, 2).programs
    # a program re-reads its row from cache: requested bytes of x are twice the unique ones
    assert main.args["X"].requested_read == 2 * main.args["X"].unique_read


def test_the_counter_sees_the_gpu_configuration_not_the_interpreters(triton_backend):
    rows, hidden = 4096, 256
    with traffic.emulated_gpu(H100):
        (launch,) = traffic.count_direction(triton_backend, rows, hidden, "float32", "forward")
    gpu, interpreter = (heuristics.forward_config(rows, hidden, 4, t) for t in (TARGET, heuristics.Target.interpreted()))
    assert launch.grid == (*gpu.grid, 1, 1) != (*interpreter.grid, 1, 1)
