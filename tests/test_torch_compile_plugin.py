"""The example plugin ``torch-compile`` (examples/normbench-torch-compile): its registration, its light
import, a forward and a backward that agree with NumPy, and the proof that what it measures is Inductor's
compiled code, never eager PyTorch: torch.compile falls back to eager silently once a function hits Dynamo's recompile limit
(8 per code object), which would make every test of this backend a false pass of ATen's kernels.
Skipped where torch is not installed; the first compilation of a process takes about a minute.
"""

import importlib.util

import pytest

if importlib.util.find_spec("normbench_torch_compile") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("the plugin is not installed: pip install -e examples/normbench-torch-compile (with torch)",
                allow_module_level=True)

import numpy as np  # noqa: E402

from normbench import get_registry  # noqa: E402
from normbench.kit.testing import imported_frameworks  # noqa: E402

pytestmark = pytest.mark.slow  # Inductor compiles C++ (seconds a signature, a minute for the first)


@pytest.fixture(scope="module")
def compiled():
    backend = get_registry().create("torch-compile")
    backend.set_threads(1)
    return backend


def _code(fn):
    """The code object Dynamo caches the compiled frames of ``fn`` (a torch.compile'd function) on."""
    return fn._torchdynamo_orig_callable.__code__


def _entries(fn):
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return _debug_get_cache_entry_list(_code(fn))


def test_registered_by_the_plugin_distribution():
    registry = get_registry()
    plugin = registry.plugin("torch-compile")
    assert (plugin.distribution, plugin.target) == ("normbench-torch-compile",
                                                    "normbench_torch_compile.backends:TorchCompileBackend")
    cls = registry.load_class("torch-compile")
    assert cls.name == "torch-compile" and registry.availability("torch-compile")
    assert cls.operations == ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm")
    assert cls.has_backward and cls.strided


def test_importing_the_module_does_not_import_torch():
    """Importing the plugin, and ``normbench list`` (every installed backend's class), import none of them."""
    assert imported_frameworks("normbench_torch_compile.backends", ('torch',)) == []


def test_forward_and_backward_agree_with_numpy_and_run_inductor_kernels(compiled):
    from torch._dynamo.utils import counters

    rng = np.random.default_rng(0)
    x, w, b, dy = (rng.standard_normal(s).astype(np.float32) for s in ((6, 10), (10,), (10,), (6, 10)))
    inductor = lambda: counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"]
    before = inductor()
    y = compiled.to_numpy(compiled.layer_norm(*(compiled.asarray(a) for a in (x,)), (10,), compiled.asarray(w),
                                              compiled.asarray(b), 1e-5))
    x64 = x.astype(np.float64)
    xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, xhat * w + b, atol=1e-5)
    args = (compiled.asarray(x), (10,), compiled.asarray(w), compiled.asarray(b), 1e-5)
    _, (dx, dw, db) = compiled.forward_backward("layer_norm", args, (compiled.asarray(dy),))
    np.testing.assert_allclose(compiled.to_numpy(db), dy.sum(0), rtol=1e-5)
    np.testing.assert_allclose(compiled.to_numpy(dw), (dy * xhat).sum(0), rtol=1e-4, atol=1e-5)
    assert np.abs(compiled.to_numpy(dx).sum(1)).max() < 1e-4
    # Inductor compiled (or loaded from its cache) a graph for the forward, and the joint forward+backward
    assert inductor() - before >= 2
    for fn in compiled.compiled.values():
        assert _entries(fn), "a signature ran without a compiled frame"


def test_each_signature_has_its_own_cache_so_no_limit_is_shared():
    """More signatures than Dynamo's recompile limit: every one is compiled (its own code object, its own entry)."""
    import torch

    compiled = get_registry().create("torch-compile")
    rng = np.random.default_rng(1)
    before = len(compiled.compiled)
    for eps in (1e-5, 1e-6, 1e-3, 0.1, 1e-12):
        for affine in ((True, True), (True, False), (False, True)):
            x = rng.standard_normal((3, 7)).astype(np.float32)
            w, b = (compiled.asarray(rng.standard_normal(7).astype(np.float32)) if on else None for on in affine)
            compiled.layer_norm(compiled.asarray(x), (7,), w, b, eps)
    fns = list(compiled.compiled.values())[before:]
    assert len(fns) == 15 > torch._dynamo.config.recompile_limit
    assert len({id(_code(f)) for f in fns}) == 15 and all(len(_entries(f)) == 1 for f in fns)


def test_hitting_the_recompile_limit_raises_instead_of_running_eager(compiled):
    """With the limit at 1, a second size class of one signature must recompile: fullgraph=True makes that an
    error (FailOnRecompileLimitHit), where a plain torch.compile would quietly run F.layer_norm eagerly."""
    import torch
    from torch._dynamo.exc import FailOnRecompileLimitHit

    backend = get_registry().create("torch-compile")
    x = np.random.default_rng(2).standard_normal((4, 9)).astype(np.float32)
    with torch._dynamo.config.patch(recompile_limit=1):
        backend.layer_norm(backend.asarray(x), (9,), None, None, 1e-5)
        with pytest.raises(FailOnRecompileLimitHit, match="fullgraph=True"):
            backend.layer_norm(backend.asarray(x[:1]), (9,), None, None, 1e-5)  # size 1: specialized, a recompile


def test_rms_norm_default_eps_is_torchs(compiled):
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    y = compiled.to_numpy(compiled.rms_norm(compiled.asarray(x), (16,), None, None))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + np.finfo(np.float32).eps),
                               rtol=2e-6)


def test_finding_half_precision_backward_uses_mean_and_rstd_saved_in_half(compiled):
    """The declared dx finding still fails, by far, and is explained bit for bit: a float32 backward with the
    forward's mean and rstd rounded to bfloat16 (what the compiled forward saves) gives the compiled dx."""
    import torch

    from normbench.check import conformance
    from normbench.core import cases

    # the signature's first compilation specializes on its hidden size (normalized_shape is a Python tuple); a
    # later size recompiles with the size dynamic, the kernel the suites mostly run. That kernel saves mean and
    # rstd in bfloat16; the one specialized to N = 2 recomputes them in float32 (and passes): compile another
    # size first, as a suite run does
    warm = next(c for c in cases.BACKWARD_CASES if c.id == "bfloat16-rows7-hidden100-uniform9")
    warm_inputs = cases.make_inputs(warm, 0)
    compiled.layer_norm_backward(*(compiled.asarray(a) for a in (cases.make_dy(warm, 0), warm_inputs.x)), (100,),
                                 compiled.asarray(warm_inputs.weight), compiled.asarray(warm_inputs.bias), warm.eps)
    case = next(c for c in cases.BACKWARD_CASES if c.id == "bfloat16-rows5-hidden2-offset3")
    inputs, dy = cases.make_inputs(case, 0), cases.make_dy(case, 0)
    with pytest.raises(conformance.ConformanceError, match=r"\): dx\[") as info:
        conformance.check_backward(compiled, inputs, dy)
    assert float(str(info.value).split("(")[2].split("x)")[0]) >= 100, str(info.value)
    dx = compiled.layer_norm_backward(*(compiled.asarray(a) for a in (dy, inputs.x)), (2,),
                                      compiled.asarray(inputs.weight), compiled.asarray(inputs.bias), case.eps)[0]
    x = torch.from_numpy(inputs.x.astype(np.float32))
    g = torch.from_numpy(dy.astype(np.float32) * inputs.weight.astype(np.float32))
    mean = x.mean(1, keepdim=True)
    rstd = torch.rsqrt(((x - mean) ** 2).mean(1, keepdim=True) + case.eps)
    mean, rstd = mean.bfloat16().float(), rstd.bfloat16().float()
    xhat = (x - mean) * rstd
    model = rstd * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True))
    assert torch.equal(dx, model.bfloat16())


def test_finding_a_numpy_float64_eps_goes_stale_in_the_compiled_graph():
    """The declared re-scaling finding: two numpy.float64 eps in a row, and one result is computed with the
    other's eps (a Python float eps is right; see the class's known_deviations)."""
    import torch
    import torch.nn.functional as F

    backend = get_registry().create("torch-compile")
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((4, 16)))
    errors = []
    for eps in (np.float64(1.165), np.float64(1e-6)):
        y = backend.layer_norm(x, (16,), None, None, eps)
        errors.append((y - F.layer_norm(x, (16,), None, None, float(eps))).abs().max().item())
    assert max(errors) > 0.1, errors  # stale eps: y off by O(1); fixed upstream if this fails
    y = backend.layer_norm(x, (16,), None, None, 1e-6)
    assert (y - F.layer_norm(x, (16,), None, None, 1e-6)).abs().max().item() < 1e-12
