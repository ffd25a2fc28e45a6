"""A plugin written for normbench 0.2 keeps working unchanged (issue 26): its module paths
(``normbench.backend``, ``normbench.dtypes``, ``normbench.impls.torch_arrays``), ``normalizations``,
the autograd mixin's ``_graph`` / ``_rms_graph`` and the per-normalization hooks. The backend below is
normbench 0.2's own ``torch`` backend as it was, under another name; the suites give it, test for
test, the verdicts they give today's ``torch`` backend, and each old spelling warns, naming the new one."""

from __future__ import annotations

import importlib.util
import subprocess
import warnings
from collections import Counter

import pytest

from normbench.kit.testing import junit_outcomes
from tests.plugins import ROOT, pytest_command

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the 0.2 plugin wraps torch")

#: normbench 0.2's torch backend (impls/torch_native.py at 0.2.0), renamed, with a 0.2-style warmup and RMSNorm hooks
PLUGIN = '''
from normbench import Backend
from normbench.backend import device_label
from normbench.dtypes import default_rms_eps
from normbench.impls.torch_arrays import AutogradBackward, autograd_graph, from_host, set_threads, to_host


class OldTorch(AutogradBackward, Backend):
    name = "old-torch"
    description = "normbench 0.2's torch backend, as a 0.2 plugin"
    normalizations = ("layer_norm", "rms_norm")
    strided = True
    requires = ("torch",)
    backward_includes_forward = True

    def __init__(self):
        import torch

        self.torch = torch
        self._device = torch.device("cpu")
        self.device = device_label("cpu")
        self.eps_default = default_rms_eps("float32")

    def asarray(self, host):
        return from_host(self.torch, host, self._device)

    def to_numpy(self, native):
        return to_host(self.torch, native)

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return self.torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)

    def layer_norm_statistics(self, x, normalized_shape, weight, bias, eps):
        _, mean, rstd = self.torch.ops.aten.native_layer_norm(x, list(normalized_shape), weight, bias, eps)
        return mean, rstd

    def layer_norm_with_statistics(self, x, normalized_shape, weight, bias, eps):
        y, mean, rstd = self.torch.ops.aten.native_layer_norm(x, list(normalized_shape), weight, bias, eps)
        return y, (mean, rstd)

    def set_threads(self, threads):
        return set_threads(self.torch, threads)

    def _graph(self, x, normalized_shape, weight, bias, eps):
        return autograd_graph(self.torch, self.torch.nn.functional.layer_norm, x, normalized_shape, weight, bias, eps)

    def warmup(self, x, normalized_shape, weight, bias, eps):
        self.layer_norm(x, normalized_shape, weight, bias, eps)

    def rms_norm(self, x, normalized_shape, weight, eps):
        return self.torch.nn.functional.rms_norm(x, list(normalized_shape), weight, eps)

    def _rms_graph(self, x, normalized_shape, weight, eps):
        rms_norm = lambda x_, ns, w, _bias, e: self.torch.nn.functional.rms_norm(x_, list(ns), w, e)
        return autograd_graph(self.torch, rms_norm, x, normalized_shape, weight, None, eps)

    def warmup_rms_norm(self, x, normalized_shape, weight, eps):
        self.rms_norm(x, normalized_shape, weight, eps)
'''


@pytest.fixture
def old_plugin(make_plugins):
    folder = make_plugins()
    folder.module("old_plugin", PLUGIN)
    folder.distribution({"old-torch": "old_plugin:OldTorch"}, dist="old-torch-plugin")
    return folder


def test_a_0_2_plugin_loads_with_a_warning_for_each_old_spelling(old_plugin, monkeypatch):
    import sys

    from normbench.core.moved import MOVED

    monkeypatch.syspath_prepend(str(old_plugin.path))
    for old in MOVED:  # each old path warns when first imported in a process: make this the first
        monkeypatch.delitem(sys.modules, old, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import old_plugin as module
    said = " | ".join(str(w.message) for w in caught if issubclass(w.category, DeprecationWarning))
    for old, new in (("normbench.backend moved", "normbench.core.backend"), ("normbench.dtypes moved", ""),
                     ("normbench.impls.torch_arrays moved", "normbench.kit.torch"),
                     ("normalizations = (...)", "operations = ('layer_norm', 'rms_norm')"),
                     ("warmup(x, normalized_shape, weight, bias, eps)", "warmup(self, op, args)"),
                     ("warmup_rms_norm(x, normalized_shape, weight, eps)", "warmup(self, op, args)")):
        assert old in said and new in said, (old, said)
    backend = module.OldTorch()
    assert backend.operations == ("layer_norm", "rms_norm") and backend.separates_backward("rms_norm")


@pytest.mark.e2e
def test_the_suites_give_a_0_2_plugin_todays_verdicts(old_plugin, tmp_path):
    """float32 cases on seed 0, under --normbench-strict (torch's declared deviations count as failures, so both
    backends are judged alike): the same outcome for every test (of the operations and options 0.2 knew: not the
    fused operations, not the quantized outputs, not Gemma's weight_offset, not one weight per head, which a 0.2
    plugin skips, saying so)."""
    junit = tmp_path / "junit.xml"
    out = subprocess.run(pytest_command(str(ROOT / "suites"), "--normbench-impl=torch,old-torch", "-n", "2", "-q",
                                        "-k", "float32 and not add- and not q- and not weightoffset and not perhead",
                                        "--normbench-seed=0", "--normbench-strict", f"--junitxml={junit}"),
                         cwd=ROOT, env=old_plugin.env, capture_output=True, text=True, timeout=1200)
    outcomes = junit_outcomes(junit)
    assert outcomes, out.stdout[-3000:] + out.stderr[-3000:]
    torch = {t.replace("[torch-", "[", 1): o for t, (o, _) in outcomes.items() if "[torch-" in t}
    old = {t.replace("[old-torch-", "[", 1): o for t, (o, _) in outcomes.items() if "[old-torch-" in t}
    assert set(torch) == set(old) and len(torch) > 300
    differ = {t: (torch[t], old[t]) for t in torch if torch[t] != old[t]}
    assert not differ, differ
    assert Counter(old.values())["passed"] > 300
