"""The suites cost less without checking less (issue 14, item 5).

* A forward case calls the backend's forward twice, not four times: once for y and the
  statistics together (``Backend.layer_norm_with_statistics``), once more through
  ``layer_norm`` for determinism, which also proves the two give the same y.
* A case's identities judge the backward its ``test_backward`` just ran
  (``conformance.recent_backward``), and run it again when anything differs: the backend,
  the case, the seed, or a bit or a stride of dy, x, weight or bias.
* The suites order each case's identities right after its value checks.
* Conformance tests run every backend with ``--normbench-threads`` threads (default 1),
  throughput with the library's own, and the header says so.
"""

from __future__ import annotations

import numpy as np
import pytest

from normbench.check import conformance, identities
from normbench.core import cases
from normbench.front import options, threads
from tests.mutants import Fp32Kernel

CASE = next(c for c in cases.BACKWARD_CASES if c.id == "float32-rows7-hidden100-uniform9")
OTHER = next(c for c in cases.BACKWARD_CASES if c.id == "float32-rows7-hidden100-uniform9-weightonly")


class Counting(Fp32Kernel):
    """A correct kernel that counts its calls by entry point."""

    name = "counting"

    def __init__(self):
        self.calls: list[str] = []

    def layer_norm(self, *args):
        self.calls.append("layer_norm")
        return super().layer_norm(*args)

    def layer_norm_statistics(self, *args):
        self.calls.append("statistics")
        return super().layer_norm_statistics(*args)

    def layer_norm_backward(self, *args):
        self.calls.append("backward")
        return super().layer_norm_backward(*args)


class OneCall(Counting):
    """Gives y and the statistics from one call, as torch's and our Triton backend do."""

    def layer_norm_with_statistics(self, x, normalized_shape, weight, bias, eps):
        self.calls.append("with_statistics")
        return Fp32Kernel.layer_norm(self, x, normalized_shape, weight, bias, eps), \
            Fp32Kernel.layer_norm_statistics(self, x, normalized_shape, weight, bias, eps)


class OneCallOtherY(OneCall):
    """Breaks the contract: its combined call returns a y other than layer_norm's."""

    def layer_norm_with_statistics(self, x, normalized_shape, weight, bias, eps):
        y, stats = super().layer_norm_with_statistics(x, normalized_shape, weight, bias, eps)
        y = y.copy()
        y.flat[0] = np.nextafter(y.flat[0], np.float32(np.inf))  # one ulp, within the bound
        return y, stats


def test_forward_case_runs_the_forward_twice():
    backend = OneCall()
    conformance.check_forward(backend, cases.make_inputs(CASE, 0))
    assert backend.calls == ["with_statistics", "layer_norm"]


def test_default_hook_still_checks_statistics_and_determinism():
    backend = Counting()
    run = conformance.run_forward(backend, cases.make_inputs(CASE, 0))
    assert run.statistics is not None and backend.calls == ["layer_norm", "statistics"]
    backend.calls.clear()
    conformance.check_forward(backend, cases.make_inputs(CASE, 0))
    assert backend.calls == ["layer_norm", "statistics", "layer_norm"]


def test_combined_y_must_be_layer_norms():
    with pytest.raises(conformance.ConformanceError, match="layer_norm_with_statistics must return layer_norm's y"):
        conformance.check_forward(OneCallOtherY(), cases.make_inputs(CASE, 0))


def _backward_then_identities(backend, case, seed=0, dy=None):
    inputs = cases.make_inputs(case, seed)
    dy = cases.make_dy(case, seed) if dy is None else dy
    conformance.check_backward(backend, inputs, dy)
    backend.calls.clear()
    identities.check_identities(backend, cases.make_inputs(case, seed), dy)
    return backend.calls


def test_identities_reuse_the_value_checks_backward():
    # only the other-x run of the dbias check calls the backend (the case has a bias)
    assert _backward_then_identities(Counting(), CASE) == ["backward"]


@pytest.mark.parametrize("change", ["backend", "case", "seed", "dy bits", "x layout"])
def test_identities_run_the_backward_again_when_anything_differs(change):
    backend = Counting()
    inputs, dy = cases.make_inputs(CASE, 0), cases.make_dy(CASE, 0)
    conformance.check_backward(backend, inputs, dy)
    backend.calls.clear()
    judged = backend
    if change == "backend":
        judged = Counting()
    elif change == "case":
        inputs, dy = cases.make_inputs(OTHER, 0), cases.make_dy(OTHER, 0)
    elif change == "seed":
        inputs, dy = cases.make_inputs(CASE, 1), cases.make_dy(CASE, 1)
    elif change == "dy bits":
        dy = dy.copy()
        dy.flat[0] = np.nextafter(dy.flat[0], np.float32(np.inf))
    elif change == "x layout":
        wide = np.zeros((inputs.x.shape[0], 2 * inputs.x.shape[1]), inputs.x.dtype)
        wide[:, ::2] = inputs.x
        inputs = cases.Inputs(inputs.case, inputs.seed, wide[:, ::2], inputs.weight, inputs.bias)
    identities.check_identities(judged, inputs, dy)
    assert judged.calls[0] == "backward" and judged.calls.count("backward") == 2 - (inputs.bias is None)


def test_a_failing_value_check_still_leaves_its_run_to_the_identities():
    class Scaled(Counting):
        def layer_norm_backward(self, *args):
            dx, dw, db = super().layer_norm_backward(*args)
            return dx, (dw * np.float32(1.5)).astype(dw.dtype), db  # dweight wrong, dx right

    backend = Scaled()
    inputs, dy = cases.make_inputs(CASE, 0), cases.make_dy(CASE, 0)
    with pytest.raises(conformance.ConformanceError, match="dweight"):
        conformance.check_backward(backend, inputs, dy)
    backend.calls.clear()
    identities.check_identities(backend, inputs, dy)
    assert backend.calls == ["backward"]


def test_suites_order_each_cases_identities_after_its_value_checks(pytester_items):
    names = [item.name for item in pytester_items if item.originalname.startswith("test_backward")]
    values = [n for n in names if n.startswith("test_backward[")]
    assert values, "no test_backward collected"
    for name in values:
        i = names.index(name)
        twin = "test_backward_identities" + name.removeprefix("test_backward")
        if twin in names:
            assert names[i + 1] == twin, f"{twin} does not follow {name}"


@pytest.fixture
def pytester_items(tmp_path):
    """The suites' backward tests on numpy, two seeds, as pytest collects and orders them."""
    from normbench.suites import DIRECTORY

    collected = []

    class Grab:
        def pytest_collection_finish(self, session):
            collected.extend(session.items)

    code = pytest.main([str(DIRECTORY / "test_backward.py"), "--collect-only", "-q", "-p", "no:cacheprovider",
                        "--impl=numpy", "--normbench-seed=0,1", "-p", "no:xdist"], plugins=[Grab()])
    assert code == 0
    return collected


class Threaded(Counting):
    name = "threaded"

    def __init__(self):
        super().__init__()
        self.threads = 8

    def set_threads(self, threads):
        self.threads = 8 if threads is None else threads
        return self.threads


def test_threads_option_and_description():
    assert options.parse_threads("1") == 1 and options.parse_threads(" Library ") is None
    for bad in ("0", "-1", "many", ""):
        with pytest.raises(Exception, match="threads"):
            options.parse_threads(bad)
    backend, plain = Threaded(), Counting()
    assert threads.describe([backend, plain], 1) == "threaded 1; counting: no setting (the library's own)"
    assert backend.threads == 1
    assert threads.apply(backend, None) == 8 and threads.apply(plain, 2) is None


def test_conformance_tests_pin_threads_and_throughput_restores_them():
    torch = pytest.importorskip("torch")
    from normbench import get_registry

    backend = get_registry().create("torch")
    before = backend.set_threads(None)
    try:
        assert backend.set_threads(1) == 1 and torch.get_num_threads() == 1
        assert backend.set_threads(None) == before
    finally:
        backend.set_threads(None)


def test_suites_set_threads_before_each_conformance_test(monkeypatch):
    from normbench.front import pytest_plugin
    from normbench.impls.numpy_ref import NumpyBackend
    from normbench.suites import DIRECTORY

    seen, header = [], []

    class Header:
        def pytest_collection_finish(self, session):
            header.extend(pytest_plugin._header(session.config))
            seen.clear()  # the header sets them too; from here on, only the tests

    monkeypatch.setattr(NumpyBackend, "set_threads", lambda self, n: seen.append(n) or n, raising=False)
    code = pytest.main([str(DIRECTORY / "test_forward.py"), "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "--impl=numpy", "--normbench-threads=3", "-k",
                        "test_forward and float32-rows7-hidden100 and not rms and not add-"],
                       plugins=[Header()])
    assert code == 0
    assert "normbench: threads in the conformance suites: numpy 3" in header
    assert seen == [3] * 10  # before each of the 10 tests
