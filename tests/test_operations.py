"""Operations as units (normbench.core.operations): every room reads an operation's entry and nothing
else; RMSNorm beside LayerNorm shares one set of case families, one way to call a backend, and
LayerNorm-only backends are unaffected (their RMSNorm cases skip, saying why); normbench 0.2's
per-normalization hooks keep working, deprecated, with a warning naming the new spelling."""

import warnings

import numpy as np
import pytest

from normbench import Backend
from normbench.check import conformance, hypotheses, oracle
from normbench.core import cases, operations
from normbench.core.backend import hook
from normbench.core.exceptions import InvalidInput
from normbench.impls.numpy_ref import NumpyBackend
from normbench.perf import roofline


def test_every_rmsnorm_case_is_named_as_one_and_has_no_bias():
    rms = [c for c in cases.FORWARD_CASES + cases.BACKWARD_CASES + cases.GRADCHECK_CASES if c.norm == "rms_norm"]
    assert rms and all(c.id.startswith("rms-") and c.affine in ("w", "none") for c in rms)
    assert not any(c.id.startswith("rms-") for c in cases.FORWARD_CASES if c.norm == "layer_norm")


@pytest.mark.parametrize("listing", ["FORWARD_CASES", "BACKWARD_CASES", "GRADCHECK_CASES"])
def test_both_normalizations_run_every_case_family(listing):
    """Every shared family runs for every operation; RMSNorm adds its variants (per-head, Gemma's offset) and the
    fused operations their residuals, each on top of its plain operation's families."""
    by_norm = {n: {c.family for c in cases.CASE_LISTS[listing] if c.norm == n} for n in operations.NAMES}
    rms_only = {"heads", "gemma"} if listing != "GRADCHECK_CASES" else set()
    assert by_norm["layer_norm"] == by_norm["rms_norm"] - rms_only
    if listing != "GRADCHECK_CASES":  # the fused operations have no finite-difference cases
        assert by_norm["add_layer_norm"] == by_norm["layer_norm"] | {"residual"}
        assert by_norm["add_rms_norm"] == by_norm["rms_norm"] | {"residual"}


def test_an_rmsnorm_case_refuses_a_bias_and_takes_eps_none():
    with pytest.raises(InvalidInput, match="RMSNorm has no bias"):
        cases.Case("x", (2, 4), (4,), "float32", affine="b", norm="rms_norm")
    with pytest.raises(InvalidInput, match="eps must be a finite number"):
        cases.Case("x", (2, 4), (4,), "float32", eps=None)  # LayerNorm has no default eps
    case = cases.Case("x", (2, 4), (4,), "bfloat16", eps=None, norm="rms_norm")
    assert case.id == "rms-bfloat16-rows2-hidden4-normal-epsdefault" and case.eps_value == 2.0**-23


def test_the_oracle_is_layernorm_without_centring():
    rng = np.random.default_rng(0)
    x, w = 3 + rng.standard_normal((4, 9)), rng.standard_normal(9)
    ref = oracle.forward(x, (9,), w, None, 1e-5, norm="rms_norm")
    r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ref.y, x * r * w, rtol=1e-14)
    dy = rng.standard_normal((4, 9))
    grads = oracle.backward(dy, ref)
    # the closed form against a central difference of the exact function, row by row
    v = rng.standard_normal((4, 9))
    h = 1e-6
    f = lambda z: (dy * (z / np.sqrt((z * z).mean(axis=1, keepdims=True) + 1e-5) * w)).sum()
    assert abs((f(x + h * v) - f(x - h * v)) / (2 * h) - (grads.dx * v).sum()) < 1e-7
    np.testing.assert_allclose(grads.dweight, (dy * x * r).sum(axis=0), rtol=1e-13)


class LayerNormOnly(NumpyBackend):
    name = "lnonly"
    operations = ("layer_norm",)


def test_a_layernorm_only_backend_skips_rmsnorm_cases_saying_why():
    case = next(c for c in cases.FORWARD_CASES if c.norm == "rms_norm")
    reason = conformance.skip_reason(LayerNormOnly(), case)
    assert "lnonly implements layer_norm only, not rms_norm" in reason
    assert "declare operations = ('layer_norm', 'rms_norm') and define rms_norm(x, normalized_shape, weight, eps)" in reason


def test_the_operation_calls_the_backends_rmsnorm_and_gives_its_gradients():
    backend = NumpyBackend()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    args = operations.RMS_NORM.arguments(x=x, normalized_shape=(8,), weight=w, bias=None, eps=1e-6)
    y = operations.RMS_NORM.forward(backend, args)
    np.testing.assert_array_equal(y, backend.rms_norm(x, (8,), w, 1e-6))
    dx, dweight = operations.RMS_NORM.backward(backend, args, (x,))
    assert dx.shape == x.shape and dweight.shape == (8,)
    assert operations.RMS_NORM.gradient_tuple((dx, dweight))[2] is None  # the checks' one code path
    with pytest.raises(InvalidInput, match="RMSNorm has no bias"):
        operations.RMS_NORM.arguments(x=x, normalized_shape=(8,), weight=w, bias=w, eps=1e-6)


def test_normbench_check_takes_the_normalization(capfd):
    from normbench.front.cli import main

    assert main(["check", "--impl=numpy", "--shape=4x100", "--norm=rms_norm", "--dtype=bfloat16"]) == 0
    assert "PASS numpy rms-bfloat16-rows4-hidden100-normal (seed 0)" in capfd.readouterr().out  # the check's child
    assert main(["check", "--impl=numpy", "--shape=4x100", "--norm=rms_norm", "--affine=wb"]) == 2
    assert "--affine=wb: RMSNorm has no bias, so affine must be 'w' or 'none'" in capfd.readouterr().err


@pytest.mark.parametrize("op", operations.OPERATIONS, ids=str)
def test_an_entry_is_whole_and_every_room_can_read_it(op):
    """What each room reads of an operation exists: its case families (and they give cases), its
    hypotheses, every byte-model variant, its signature's pieces, the oracle on its facts."""
    inference_only = bool(op.quant)  # a quantized output: forward only, judged code by code (docs/quantized.md)
    for suite in ("forward", "backward", "gradcheck"):
        assert all(f in cases.FAMILIES for f in getattr(op.families, suite))
        if suite == "forward" or suite == "backward" and not inference_only or op.families.gradcheck:
            assert cases.suite_cases(op, suite) and all(c.norm == op.name for c in cases.suite_cases(op, suite))
    assert (not op.hypotheses if inference_only else op.hypotheses) and all(k in hypotheses.BY_KEY for k in op.hypotheses)
    assert set(op.traffic) == ({"forward-inference"} if inference_only else set(roofline.VARIANTS))
    assert not inference_only or (not op.gradients and not op.families.backward and op.quantizes)
    assert len(op.cotangents) == (0 if inference_only else len(op.outputs)) and len(op.gradients) == len(op.differentiable)
    assert set(op.differentiable) <= set(op.params) and op.params[0] == "x"
    assert set(op.backward_parameters) <= set(op.params) | set(op.outputs)
    assert ("bias" in op.params) == op.has_bias and op.error_terms
    x = np.random.default_rng(0).standard_normal((2, 5))
    assert np.isfinite(oracle.forward(x, (5,), None, None, 1e-5, op.name).y).all()


def test_the_byte_model_is_counted_from_the_entrys_terms():
    """Each variant's bytes are the sum of its terms: LayerNorm's forward-inference for 8 x 4 in bfloat16 with
    fp32 parameters is x and y (2 * 32 * 2) and weight and bias (2 * 4 * 4); RMSNorm drops the bias and a statistic."""
    assert roofline.model_bytes("layer_norm", "forward-inference", 8, 4, "bfloat16", "float32") == 2 * 32 * 2 + 2 * 4 * 4
    assert roofline.model_bytes("rms_norm", "forward-training", 8, 4, "bfloat16", "float32") == 2 * 32 * 2 + 4 * 4 + 8 * 4
    assert roofline.statistics_per_row("layer_norm") == 2 and roofline.statistics_per_row("rms_norm") == 1
    assert "(write rstd)" in roofline.formula("rms_norm", "forward-training") and "mean" not in roofline.formula(
        "rms_norm", "backward")


class Hooks(NumpyBackend):
    """The current spelling: one hook each, the operation first."""

    name = "hooks"
    seen: list

    def warmup(self, op, args):
        self.seen.append(("warmup", op, len(args)))

    def prepare_backward(self, op, args, cotangents):
        self.seen.append(("prepare", op, len(args)))
        return lambda: getattr(self, f"{op}_backward")(*cotangents, *args)


def _old_hooks_class():
    class OldHooks(NumpyBackend):
        """normbench 0.2's spelling: LayerNorm's hooks with its own parameters, RMSNorm's under their own names."""

        name = "old-hooks"
        normalizations = ("layer_norm", "rms_norm")
        seen: list

        def warmup(self, x, normalized_shape, weight, bias, eps):
            self.seen.append(("warmup", "layer_norm", eps))

        def warmup_rms_norm(self, x, normalized_shape, weight, eps):
            self.seen.append(("warmup", "rms_norm", eps))

        def prepare_rms_norm_backward(self, dy, x, normalized_shape, weight, eps):
            self.seen.append(("prepare", "rms_norm", eps))
            return lambda: self.rms_norm_backward(dy, x, normalized_shape, weight, eps)

    return OldHooks


def _case_args(op):
    case = next(c for c in cases.BACKWARD_CASES if c.norm == op.name and c.affine in ("wb", "w"))
    inputs = cases.make_inputs(case, 0)
    args = op.arguments(x=inputs.x, normalized_shape=case.normalized_shape, weight=inputs.weight, bias=inputs.bias,
                        eps=case.eps)
    return args, (cases.make_dy(case, 0),)


#: the hooks' spellings (the fused operations, which normbench 0.2 did not know, have the current one only)
PLAIN = (operations.LAYER_NORM, operations.RMS_NORM)


def test_the_hooks_take_the_operation():
    backend = Hooks()
    backend.seen = []
    for op in PLAIN:
        args, cotangents = _case_args(op)
        op.warmup(backend, args)
        grads = op.prepare_backward(backend, args, cotangents)()
        assert len(grads) == len(op.gradients) and op.separates_backward(backend)
    assert backend.seen == [("warmup", "layer_norm", 5), ("prepare", "layer_norm", 5), ("warmup", "rms_norm", 4),
                            ("prepare", "rms_norm", 4)]


def test_normbench_0_2_hooks_keep_working_with_a_warning_naming_the_new_spelling():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = _old_hooks_class()
    said = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any("normalizations = (...) is normbench 0.2's spelling" in s and "operations = ('layer_norm', 'rms_norm')" in s
               for s in said), said
    assert any("warmup(x, normalized_shape, weight, bias, eps)" in s and "write warmup(self, op, args)" in s for s in said)
    assert any("prepare_rms_norm_backward(dy, x, normalized_shape, weight, eps)" in s
               and "write prepare_backward(self, op, args, cotangents)" in s for s in said)
    assert old.operations == ("layer_norm", "rms_norm")
    backend = old()
    backend.seen = []
    for op in PLAIN:
        args, cotangents = _case_args(op)
        op.warmup(backend, args)
        grads = op.prepare_backward(backend, args, cotangents)
        if op.name == "rms_norm":
            assert len(grads()) == 2
        else:
            assert grads is None  # it prepared nothing for LayerNorm: the default
    assert backend.seen == [("warmup", "layer_norm", 1e-5), ("warmup", "rms_norm", args[-1]), ("prepare", "rms_norm",
                                                                                               args[-1])]


def test_the_most_derived_definition_of_a_hook_wins_per_operation():
    """A subclass in the old spelling overriding LayerNorm's warmup leaves its base's hook for RMSNorm in place."""
    class Base(Hooks):
        name = "base"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Old(Base):
            name = "old"

            def warmup(self, x, normalized_shape, weight, bias, eps):
                self.seen.append(("old warmup", "layer_norm"))

    assert hook(Old, "warmup", "layer_norm").defined_by is Old and hook(Old, "warmup", "layer_norm").legacy
    assert hook(Old, "warmup", "rms_norm").defined_by is Hooks
    assert hook(NumpyBackend, "warmup", "rms_norm").defined_by is Backend and hook(NumpyBackend, "warmup",
                                                                                   "rms_norm").is_default


def test_an_instance_narrowing_its_0_2_normalizations_is_honoured():
    """A 0.2 plugin that narrowed ``self.normalizations`` in ``__init__`` (a library release without RMSNorm)."""
    backend = NumpyBackend()
    backend.normalizations = ("layer_norm",)
    assert operations.implemented(backend) == ("layer_norm",)
    assert operations.missing_reason(backend, "rms_norm") is not None
    assert operations.implemented(NumpyBackend) == tuple(op.name for op in operations.OPERATIONS)
