"""``--untrusted`` (normbench.core.remote): a backend created and run in a worker process of its own.

The judge's process never imports the plugin; the plugin's tricks on the clock or the verifier change only the
worker; the same checks judge it (a cheater in a worker is refused as in process, an honest backend passes); a
worker that crashes is an error of that call, never of the judge."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

import normbench
from normbench import get_registry
from normbench.check import conformance
from normbench.check.conformance import ConformanceError
from normbench.core import cases, remote
from normbench.perf import timing
from tests.test_cheaters import CASE, runner

CHEATERS = '''
import ctypes, sys
from tests import cheaters

sys.modules.setdefault("normbench_remote_marker", type(sys)("normbench_remote_marker"))  # imported here

class PatchesTheVerifier(cheaters.PatchesTheVerifier):
    name = "remote-patches-the-verifier"

class PatchesTheClock(cheaters.PatchesTheClock):
    name = "remote-patches-the-clock"

class Crashes(cheaters.Cheater):
    name = "remote-crashes"
    def layer_norm(self, *args, **kwargs):
        ctypes.string_at(0)
'''


@pytest.fixture
def untrusted(installed_plugins, monkeypatch):
    installed_plugins.module("remote_cheaters", CHEATERS)
    installed_plugins.distribution({"remote-patches-the-verifier": "remote_cheaters:PatchesTheVerifier",
                                    "remote-patches-the-clock": "remote_cheaters:PatchesTheClock",
                                    "remote-crashes": "remote_cheaters:Crashes"}, dist="acme-remote")
    monkeypatch.setenv("PYTHONPATH", installed_plugins.env["PYTHONPATH"])  # the workers find the plugins too
    monkeypatch.setenv("NORMBENCH_PLUGIN_TIMEOUT", "60")
    started = []
    yield lambda name: started.append(remote.start(name)) or started[-1]
    for backend in started:
        backend.close()


def test_the_judge_never_imports_the_plugin_and_the_worker_computes(untrusted):
    [backend] = normbench.refresh().select("remote-patches-the-verifier", create=remote.start).backends
    try:
        assert "remote_cheaters" not in sys.modules and "normbench_remote_marker" not in sys.modules
        assert isinstance(backend, remote.RemoteBackend) and backend.name == "remote-patches-the-verifier"
        assert type(backend).library_version() == type(get_registry().create("numpy")).library_version()
    finally:
        backend.close()


def test_an_honest_backend_in_a_worker_passes_the_same_checks(untrusted):
    backend = untrusted("numpy")
    inputs = cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0)
    conformance.check_forward(backend, inputs)
    conformance.check_backward(backend, inputs, cases.make_dy(inputs.case, 0))
    for direction in ("forward", "backward", "forward+backward"):
        row = runner().measure(backend, CASE, direction).row
        assert row["verdict"] == "ok", row["message"]


def test_a_cheater_in_a_worker_cannot_reach_the_judge(untrusted):
    """The verifier patched, zeros returned: the worker's copy of the verifier is patched, the judge's is not."""
    backend = untrusted("remote-patches-the-verifier")
    row = runner().measure(backend, CASE, "forward").row
    assert row["verdict"] == "wrong-before" and "> bound" in row["message"], row
    clock = untrusted("remote-patches-the-clock")
    assert runner().measure(clock, CASE, "forward").row["verdict"] == "ok"  # its slow clock is the worker's own
    assert timing.clock_tampering() is None
    with pytest.raises(ConformanceError):
        conformance.check_forward(backend, cases.make_inputs(cases.Case("t", (8, 64), (64,), "float32"), 0))


def test_a_worker_that_crashes_is_an_error_of_that_call(untrusted):
    backend = untrusted("remote-crashes")
    row = runner().measure(backend, CASE, "forward").row
    assert row["verdict"] == "error" and "worker process ended (signal 11)" in row["message"], row


def test_the_pipe_costs_tens_of_microseconds_a_call(untrusted):
    """What --untrusted adds to each sample (docs/throughput.md quotes it): one message and its answer."""
    backend = untrusted("numpy")
    x = backend.asarray(np.zeros((1, 8), np.float32))
    backend.synchronize()
    start = time.perf_counter()
    for _ in range(200):
        backend.synchronize()
    per_call = (time.perf_counter() - start) / 200
    assert x is not None and per_call < 5e-3, per_call
