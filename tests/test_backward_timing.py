"""The throughput suite times only what the byte model counts: a backward alone (its forward and
autograd graph prepared outside the timed op), a training step as exactly one forward and one
backward, and a backward that cannot be separated from its forward is modelled, and said to be,
forward-training+backward, never mixed (issue 14, item 1)."""

import pytest

from normbench import get_registry
from normbench.core import cases
from normbench.perf.roofline import BYTE_MODELS, direction_bytes
from normbench.perf.throughput import ThroughputRunner, model_direction, prepare
from normbench.perf.timing import TimingOptions
from normbench.perf.verify import Reference
from tests.mutants import Fp32Kernel

CASE = cases.Case("t", (16, 256), (256,), "float32")


class Counting(Fp32Kernel):
    """A correct kernel that counts its forwards; its backward runs a forward first, like autograd."""

    name = "counting"
    backward_includes_forward = True

    def __init__(self):
        self.forwards = self.backwards = 0

    def layer_norm(self, *args):
        self.forwards += 1
        return super().layer_norm(*args)

    def layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps):
        self.layer_norm(x, normalized_shape, weight, bias, eps)  # the graph's forward
        self.backwards += 1
        return super().layer_norm_backward(dy, x, normalized_shape, weight, bias, eps)

    def forward_backward(self, op, args, cotangents):
        y = self.layer_norm(*args)
        self.backwards += 1
        return y, Fp32Kernel.layer_norm_backward(self, *cotangents, *args)


class Separable(Counting):
    name = "separable"

    def prepare_backward(self, op, args, cotangents):
        self.layer_norm(*args)

        def backward():
            self.backwards += 1
            return Fp32Kernel.layer_norm_backward(self, *cotangents, *args)

        return backward


class OldCounting(Counting):
    """:class:`Counting` in normbench 0.2's spelling (LayerNorm's own hooks): deprecated, still honoured."""

    name = "old-counting"

    def forward_backward(self, dy, x, normalized_shape, weight, bias, eps):
        y = self.layer_norm(x, normalized_shape, weight, bias, eps)
        self.backwards += 1
        return y, Fp32Kernel.layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps)


class OldSeparable(OldCounting):
    name = "old-separable"

    def prepare_backward(self, dy, x, normalized_shape, weight, bias, eps):
        self.layer_norm(x, normalized_shape, weight, bias, eps)

        def backward():
            self.backwards += 1
            return Fp32Kernel.layer_norm_backward(self, dy, x, normalized_shape, weight, bias, eps)

        return backward


def calls(backend, direction, times=3):
    op = prepare(backend, Reference(CASE, 0), direction).op
    before = (backend.forwards, backend.backwards)
    for _ in range(times):
        op()
    return backend.forwards - before[0], backend.backwards - before[1]


SPELLINGS = pytest.mark.parametrize("counting, separable", [(Counting, Separable), (OldCounting, OldSeparable)],
                                    ids=["hooks", "normbench-0.2-hooks"])


@SPELLINGS
def test_a_prepared_backward_is_timed_without_its_forward(counting, separable):
    backend = separable()
    assert backend.separates_backward() and model_direction(backend, "backward") == "backward"
    assert calls(backend, "backward") == (0, 3)  # the one forward ran in prepare, untimed


@SPELLINGS
def test_a_training_step_is_exactly_one_forward_and_one_backward(counting, separable):
    assert calls(separable(), "forward+backward") == (3, 3)
    assert calls(counting(), "forward+backward") == (3, 3)  # not two forwards per step


@SPELLINGS
def test_a_backward_that_cannot_be_separated_is_modelled_with_its_forward(counting, separable):
    backend = counting()
    assert not backend.separates_backward() and calls(backend, "backward") == (3, 3)
    runner = ThroughputRunner(TimingOptions(min_samples=3, max_time_s=0), ceiling_bytes=16 << 20)
    row = runner.measure(backend, CASE, "backward").row
    assert row["verdict"] == "ok", row["message"]
    assert row["byte_model"] == BYTE_MODELS["forward+backward"] and "timed with its forward" in row["message"]
    assert row["bytes"] == direction_bytes(16, 256, "float32", "forward+backward", "float32")
    separable = runner.measure(separable(), CASE, "backward").row
    assert separable["byte_model"] == BYTE_MODELS["backward"] and "timed with its forward" not in separable["message"]


@pytest.mark.parametrize("name", ["torch", "triton", "jax"])
def test_built_in_autograd_backends_prepare_their_backward(name, monkeypatch):
    registry = get_registry()
    if not registry.availability(name):
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    backend = registry.create(name)
    assert backend.backward_includes_forward and backend.separates_backward()
    op = prepare(backend, Reference(CASE, 0), "backward").op
    forwards = []
    monkeypatch.setattr(backend, "layer_norm", lambda *a: forwards.append(a))
    if name == "torch":  # the graph's forward is F.layer_norm itself: count it there
        import torch

        original = torch.nn.functional.layer_norm
        monkeypatch.setattr(torch.nn.functional, "layer_norm", lambda *a, **k: forwards.append(a) or original(*a, **k))
    if name == "triton":  # the forward kernel's launch
        from normbench.impls.triton import launch

        original = launch.forward
        monkeypatch.setattr(launch, "forward", lambda *a, **k: forwards.append(a) or original(*a, **k))
    if name == "jax":  # the jitted functions that run a forward: only the VJP's application may run
        for jitted in ("residuals", "backward", "forward", "step"):
            monkeypatch.setitem(backend._compiled["layer_norm"], jitted, lambda *a, **k: forwards.append(a))
    first = [backend.to_numpy(g) for g in op()]
    again = [backend.to_numpy(g) for g in op()]
    backend.synchronize()
    assert not forwards and all((a == b).all() for a, b in zip(first, again))


@pytest.mark.parametrize("name", ["torch", "triton", "jax"])
def test_built_in_autograd_backends_prepare_their_rms_backward(name, monkeypatch):
    """The hook for RMSNorm, ``prepare_backward("rms_norm", ...)``: the forward once, then only the backward, same bits."""
    from normbench.core import operations

    registry = get_registry()
    if not registry.availability(name):
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    backend = registry.create(name)
    if operations.missing_reason(backend, operations.RMS_NORM):
        pytest.skip(operations.missing_reason(backend, operations.RMS_NORM))
    assert backend.separates_backward("rms_norm")
    case = cases.Case("t", (16, 256), (256,), "float32", norm="rms_norm")
    inputs = cases.make_inputs(case, 0)
    x, w, dy = (backend.asarray(a) for a in (inputs.x, inputs.weight, cases.make_dy(case, 0)))
    op = operations.RMS_NORM.prepare_backward(backend, (x, (256,), w, None), (dy,))
    forwards = []
    monkeypatch.setattr(backend, "rms_norm", lambda *a: forwards.append(a))
    if name == "torch":  # the graph's forward is F.rms_norm itself: count it there
        import torch

        original = torch.nn.functional.rms_norm
        monkeypatch.setattr(torch.nn.functional, "rms_norm", lambda *a, **k: forwards.append(a) or original(*a, **k))
    if name == "triton":  # the forward kernel's launch
        from normbench.impls.triton import launch

        original = launch.rms_forward
        monkeypatch.setattr(launch, "rms_forward", lambda *a, **k: forwards.append(a) or original(*a, **k))
    if name == "jax":  # the jitted functions that run a forward: only the VJP's application may run
        for jitted in ("residuals", "backward", "forward", "step"):
            monkeypatch.setitem(backend._compiled["rms_norm"], jitted, lambda *a, **k: forwards.append(a))
    first, again = op(), op()
    backend.synchronize()
    assert len(first) == 2 and not forwards
    assert all((backend.to_numpy(a) == backend.to_numpy(b)).all() for a, b in zip(first, again))
