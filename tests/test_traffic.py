"""The traffic counter (normbench.perf.traffic): exact counts on hand-written kernels, the
sample-and-extrapolate path equal to running every program, and a refusal where the
programs differ. (Our kernels' pinned ratios: tests/test_traffic_triton.py.)"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("triton") is None:  # never import triton before the mode is chosen
    pytest.skip("triton is not installed (pip install 'normbench[triton]')", allow_module_level=True)
torch = pytest.importorskip("torch")

from normbench.kit.triton import ensure_mode  # noqa: E402

if not ensure_mode().interpreter:
    pytest.skip("the traffic counter runs kernels in the Triton interpreter", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.front.cli import main  # noqa: E402
from normbench.perf import traffic  # noqa: E402

H100 = traffic.GPUS["h100"]


@triton.jit
def _read_twice_write_once(X, Y, N, BLOCK: tl.constexpr):
    """Program p: reads row p twice (the second masked to its first half), writes it once."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    a = tl.load(X + row * N + cols, mask=mask, other=0.0)
    b = tl.load(X + row * N + cols, mask=cols < N // 2, other=0.0)
    tl.store(Y + row * N + cols, a + b, mask=mask)


@triton.jit
def _uneven(X, Y, N, BLOCK: tl.constexpr):
    """Program p reads p + 1 elements of row 0: no program moves what the next one does."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols, mask=cols <= pid, other=0.0)
    tl.store(Y + pid * N + cols, x, mask=cols < N)


@triton.jit
def _read_own_write(P, BLOCK: tl.constexpr):
    """Writes a block, then reads it back: the read is of this program's own write."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(P + offs, offs.to(tl.float32))
    tl.store(P + offs, tl.load(P + offs) * 2)


@pytest.mark.parametrize("sample", [True, False])
def test_requested_and_unique_bytes_of_a_hand_written_kernel(sample):
    rows, n = 10, 100
    x, y = torch.zeros(rows, n), torch.empty(rows, n)
    with traffic.record(sample=sample) as rec:
        _read_twice_write_once[(rows,)](x, y, n, BLOCK=128)
    (launch,) = rec.launches
    assert launch.kernel == "_read_twice_write_once" and launch.grid == (rows, 1, 1)
    assert launch.programs_run == (4 if sample else rows)
    xa, ya = launch.args["X"], launch.args["Y"]
    assert (xa.requested_read, xa.unique_read, xa.requested_write) == (rows * (n + n // 2) * 4, rows * n * 4, 0)
    assert (ya.requested_write, ya.unique_write, ya.requested_read) == (rows * n * 4, rows * n * 4, 0)
    if not sample:
        assert torch.equal(y, x + x)


def test_programs_that_differ_are_not_extrapolated():
    x, y = torch.zeros(64), torch.empty(20, 32)
    with pytest.raises(traffic.TrafficError, match="cannot be extrapolated"):
        with traffic.record() as rec:
            _uneven[(20,)](x, y, 32, BLOCK=32)
    with traffic.record(sample=False) as rec:
        _uneven[(20,)](x, y, 32, BLOCK=32)
    assert rec.launches[0].args["X"].requested_read == sum(p + 1 for p in range(20)) * 4
    assert rec.launches[0].args["X"].unique_read == 20 * 4


def test_a_read_of_the_programs_own_write_is_not_unique_traffic():
    p = torch.empty(8 * 16)
    with traffic.record() as rec:
        _read_own_write[(8,)](p, BLOCK=16)
    a = rec.launches[0].args["P"]
    assert (a.requested_read, a.unique_read, a.requested_write, a.unique_write) == (512, 0, 1024, 512)


def test_outside_the_block_nothing_is_recorded_and_the_interpreter_is_restored():
    x, y = torch.ones(3, 8), torch.empty(3, 8)
    with traffic.record() as rec:
        pass
    _read_twice_write_once[(3,)](x, y, 8, BLOCK=8)
    assert rec.launches == [] and torch.equal(y, x + torch.tensor([1.0] * 4 + [0.0] * 4))


# Every kernel path of ours, at shapes small enough to run every program: the sampled
# count (4 programs, extrapolated) equals the full count, byte for byte.
PATHS = {
    "rows": (128, 256, "bfloat16"),  # forward rows (16 rows per program), persistent backward
    "rows-partials-in-memory": (64, 1024, "bfloat16"),  # the backward's partial rows read back per tile
    "looped-backward": (8, 16384, "float32"),  # backward past the row-in-registers limit
    "looped-forward": (8, 32768, "float32"),  # forward in chunks
}


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", PATHS.values(), ids=PATHS.keys())
def test_sampled_counts_equal_running_every_program(shape, norm):
    backend = get_registry().create("triton")
    with traffic.emulated_gpu(H100):
        for direction in ("forward", "backward"):
            sampled = traffic.count_direction(backend, *shape, direction, norm=norm)
            full = traffic.count_direction(backend, *shape, direction, sample=False, norm=norm)
            assert sum(launch.programs_run for launch in sampled) < sum(launch.programs_run for launch in full)
            assert [(la.kernel, la.grid, la.args) for la in sampled] == [(la.kernel, la.grid, la.args) for la in full]


def test_a_traffic_row_has_the_schema_and_the_byte_model():
    backend = get_registry().create("triton")
    rows = traffic.traffic_rows(backend, "triton", [(128, 256, "bfloat16")], H100)
    assert [r["direction"] for r in rows] == ["forward", "backward"]
    for row in rows:
        assert tuple(row) == traffic.ROW_FIELDS
        assert row["ratio"] == round(row["unique_bytes"] / row["model_bytes"], 5)
        assert row["sm_count"] == 132 and row["normalization"] == "layernorm"
    # forward: x read, y written once; weight and bias read once (unique) by every program (requested)
    fwd = rows[0]
    assert fwd["model_bytes"] == 2 * 128 * 256 * 2 + 2 * 256 * 2
    assert fwd["unique_bytes"] == fwd["model_bytes"] + 2 * 128 * 4  # plus the saved mean and rstd


def test_an_rms_norm_traffic_row_has_its_own_byte_model():
    """RMSNorm with weight: no bias, rstd alone; the forward writes rstd beyond the inference model."""
    backend = get_registry().create("triton")
    rows = traffic.traffic_rows(backend, "triton", [(128, 256, "bfloat16")], H100, norm="rms_norm")
    for row in rows:
        assert tuple(row) == traffic.ROW_FIELDS and row["normalization"] == "rmsnorm"
        assert row["ratio"] == round(row["unique_bytes"] / row["model_bytes"], 5)
    fwd, bwd = rows
    assert fwd["model_bytes"] == 2 * 128 * 256 * 2 + 256 * 2  # x, y, weight
    assert fwd["unique_bytes"] == fwd["model_bytes"] + 128 * 4  # plus the saved rstd
    assert fwd["kernels"] == "rms_norm_forward_rows"
    assert bwd["model_bytes"] == 3 * 128 * 256 * 2 + 2 * 256 * 2 + 128 * 4  # x, dy, dx; weight, dweight; rstd
    assert bwd["kernels"] == "rms_norm_backward_rows+layer_norm_reduce_partials"


def test_a_backend_without_rms_norm_is_refused_by_the_cli(capsys, monkeypatch):
    from normbench.impls.triton.backend import TritonBackend

    monkeypatch.setattr(TritonBackend, "operations", ("layer_norm",))
    assert main(["traffic", "--norm", "rms_norm", "--shapes", "4x8"]) == 2
    assert "implements layer_norm only, not rms_norm" in capsys.readouterr().err
