"""A backend that writes into its arguments is told so, naming the argument, and nothing else.

A NumPy backend's ``asarray`` may hand the harness's own host array to the kernel, so a kernel that writes
into x (normalizes it in place, poisons it with NaN) or into dy (zeroes it, scales it by the weight) used to
change the inputs the float64 reference is computed from, and failed with a wrong diagnosis (``float64
reference nan``, a dx "far" from a reference of the wrong dy). Now every call the checks make hands its
arrays over on ``normbench.check.conformance.Handover``: the harness keeps its own copy of each, and right
after the call a written-over argument fails with ``layer_norm modified its input x in place (12 of 1,600
elements changed); a backend must not write into its arguments``, before any reference or output is judged.

The mutants (``tests/mutants.py``, ``tests/rms_mutants.py``) compute right outputs and then write into one
argument each. In this process, every check that calls a backend (forward values and determinism, rows
computed alone, backward values, the backward identities) must say that of them; the correct controls pass
the same checks (never cry wolf). The e2e tests run the forward and backward suites on the mutants as plugins
(as ``tests/test_mutants.py`` does) and read every failure's message.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from normbench.check import backward, conformance, identities
from normbench.check.conformance import ConformanceError, Handover
from normbench.core import cases, operations
from normbench.suites import DIRECTORY as SUITES
from tests import mutants, rms_mutants
from tests.plugins import ROOT, pytest_command

#: forward mutants -> the argument each writes into
FORWARD_WRITERS = {mutants.NormalizesInputInPlace: "x", mutants.PoisonsInput: "x",
                   rms_mutants.ScalesInputInPlace: "x"}
#: backward mutants -> the argument each writes into
BACKWARD_WRITERS = {mutants.ZeroesDy: "dy", mutants.BackwardNormalizesInput: "x", rms_mutants.ScalesDyInPlace: "dy"}
CONTROLS = {"layer_norm": mutants.Fp32Kernel, "rms_norm": rms_mutants.RmsKernel}
#: the cases each check runs here, by their LayerNorm ids (an RMSNorm mutant gets the ``rms-`` twin): contiguous,
#: strided (a transposed, a column-sliced, a stepped layout), half precision, a NaN-poisoned row
FORWARD_IDS = ("float32-rows5-hidden33-offset3", "float32-rows16-hidden100-offset3-transposed",
               "bfloat16-rows16-hidden100-offset3-colslice", "float16-rows6-hidden64-poisoned")
BACKWARD_IDS = ("float32-rows7-hidden100-uniform9", "float32-rows16-hidden100-offset3-step2",
                "bfloat16-rows5-hidden33-offset3")


def operation(backend_class) -> str:
    return "rms_norm" if issubclass(backend_class, rms_mutants.RmsKernel) else "layer_norm"


def case_of(ids: tuple[str, ...], all_cases: list[cases.Case], op: str) -> list[cases.Case]:
    """The cases of ``op`` among ``all_cases`` with these LayerNorm ids (checked: each is there)."""
    prefix = "rms-" if op == "rms_norm" else ""
    by_id = {c.id: c for c in all_cases}
    return [by_id[prefix + i] for i in ids]


def assert_names(error: pytest.ExceptionInfo, entry: str, argument: str) -> None:
    message = str(error.value)
    assert f"{entry} modified its input {argument} in place (" in message, message
    assert "a backend must not write into its arguments" in message, message
    assert f"first at {argument}[" in message, message
    assert "float64 reference" not in message and "reference nan" not in message, message


FORWARD = [pytest.param(m, arg, i, id=f"{m.name}-{i}") for m, arg in FORWARD_WRITERS.items() for i in FORWARD_IDS]
BACKWARD = [pytest.param(m, arg, i, id=f"{m.name}-{i}") for m, arg in BACKWARD_WRITERS.items() for i in BACKWARD_IDS]


@pytest.mark.parametrize("mutant, argument, case_id", FORWARD)
def test_forward_checks_name_the_written_input(mutant, argument, case_id):
    op = operation(mutant)
    (case,) = case_of((case_id,), cases.FORWARD_CASES, op)
    entry = conformance.forward_entry(mutant(), operations.of(op), statistics=True)
    with pytest.raises(ConformanceError) as error:
        conformance.check_forward(mutant(), cases.make_inputs(case, 0))
    assert_names(error, entry, argument)
    with pytest.raises(ConformanceError) as error:  # y alone, as the determinism and isolation checks call it
        conformance.run_forward(mutant(), cases.make_inputs(case, 0), statistics=False)
    assert_names(error, op, argument)


@pytest.mark.parametrize("mutant, argument", FORWARD_WRITERS.items(), ids=[m.name for m in FORWARD_WRITERS])
def test_rows_independent_names_the_written_input(mutant, argument):
    op = operation(mutant)
    (case,) = case_of(("float32-rows65-hidden33-offset3",), cases.FORWARD_CASES, op)
    with pytest.raises(ConformanceError) as error:
        conformance.check_rows_independent(mutant(), cases.make_inputs(case, 0))
    assert_names(error, op, argument)


@pytest.mark.parametrize("mutant, argument, case_id", BACKWARD)
def test_backward_checks_name_the_written_input(mutant, argument, case_id):
    op = operations.of(operation(mutant))
    (case,) = case_of((case_id,), cases.BACKWARD_CASES, op.name)
    with pytest.raises(ConformanceError) as error:
        conformance.check_backward(mutant(), cases.make_inputs(case, 0), cases.make_dy(case, 0))
    assert_names(error, op.backward_entry, argument)
    with pytest.raises(ConformanceError) as error:  # the identities' own runs (no run of check_backward's to reuse)
        backward._last_backward.clear()
        identities.check_identities(mutant(), cases.make_inputs(case, 0), cases.make_dy(case, 0))
    assert_names(error, op.backward_entry, argument)


@pytest.mark.parametrize("op", CONTROLS)
def test_correct_kernels_pass_the_same_checks(op):
    """Never cry wolf: the controls, which the mutants are copies of, pass every check above."""
    control = CONTROLS[op]()
    for case in case_of(FORWARD_IDS, cases.FORWARD_CASES, op):
        conformance.check_forward(control, cases.make_inputs(case, 0))
    for case in case_of(("float32-rows65-hidden33-offset3",), cases.FORWARD_CASES, op):
        conformance.check_rows_independent(control, cases.make_inputs(case, 0))
    for case in case_of(BACKWARD_IDS, cases.BACKWARD_CASES, op):
        conformance.check_backward(control, cases.make_inputs(case, 0), cases.make_dy(case, 0))
        backward._last_backward.clear()
        identities.check_identities(control, cases.make_inputs(case, 0), cases.make_dy(case, 0))


def test_the_reference_is_computed_from_the_inputs_as_made():
    """The oracle shares no memory with the arrays a backend is handed, float64 ones included: a reference
    taken before a call cannot change during it."""
    (case,) = [c for c in cases.FORWARD_CASES
               if c.dtype == "float64" and c.id.startswith("float64-rows5-hidden33-")][:1]
    inputs = cases.make_inputs(case, 0)
    ref = conformance.reference(inputs)
    before = ref.y.copy()
    inputs.x[...] = np.nan
    inputs.weight[...] = np.nan
    assert not np.shares_memory(ref.x, inputs.x) and not np.shares_memory(ref.weight, inputs.weight)
    assert np.array_equal(ref.y, before)


def test_a_nan_written_over_a_nan_is_no_change():
    """Bitwise, a NaN equal to any NaN (a backend's round trip may change a payload); -0.0 is not 0.0."""
    handed = Handover.of(mutants.Fp32Kernel(), x=np.float32([[np.nan, 1.0, 0.0]]), dy=None)
    assert not handed["x"].flags.writeable  # handed read-only; the writes below go through the memory underneath
    handed["x"].base[0, 0] = -np.nan
    handed.check("layer_norm")
    handed["x"].base[0, 2] = -0.0
    with pytest.raises(ConformanceError, match=r"modified its input x in place \(1 of 3 elements changed\)"):
        handed.check("layer_norm")


# -- the suites, as a user runs them: every failure of a mutant says what it wrote into ----------------------


def failures(junit_xml, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Per backend: ``(test name, failure text)`` of each failed test."""
    result: dict[str, list[tuple[str, str]]] = {n: [] for n in names}
    for case in ET.parse(junit_xml).iter("testcase"):
        param = case.get("name", "").partition("[")[2]
        backend = next((b for b in sorted(names, key=len, reverse=True)
                        if param == f"{b}]" or param.startswith(f"{b}-")), None)
        failed = case.find("failure")
        if failed is None:
            failed = case.find("error")
        if backend is not None and failed is not None:
            result[backend].append((case.get("name"), f"{failed.get('message', '')}\n{failed.text or ''}"))
    return result


def run_suite(suite: str, writers: dict, make_plugins, tmp_path) -> dict[str, list[tuple[str, str]]]:
    plugins = make_plugins({m.name: f"{m.__module__}:{m.__name__}" for m in writers}, dist="normbench-input-writers")
    xml = tmp_path / f"{suite}.xml"
    names = [m.name for m in writers]
    proc = subprocess.run(
        pytest_command(str(SUITES / f"test_{suite}.py"), f"--normbench-impl={','.join(names)}", "-q", "-n", "2",
                       f"--junitxml={xml}", "--normbench-seed=0", "--normbench-maxfail=1"),
        cwd=ROOT, env=plugins.env, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), (f"the {suite} suite did not run (exit {proc.returncode}):\n"
                                       f"{proc.stdout[-3000:]}")
    return failures(xml, names)


@pytest.mark.e2e
@pytest.mark.parametrize("suite, writers", [("forward", FORWARD_WRITERS), ("backward", BACKWARD_WRITERS)])
def test_suites_name_the_written_input(suite, writers, make_plugins, tmp_path):
    """Each mutant fails its suite (it stops at its first failure per worker), and every failure says which
    argument it wrote into, never a reference's value."""
    entries = {"forward": lambda m: operation(m), "backward": lambda m: f"{operation(m)}_backward"}[suite]
    found = run_suite(suite, writers, make_plugins, tmp_path)
    for mutant, argument in writers.items():
        assert found[mutant.name], f"{mutant.name} passed the {suite} suite"
        for test, text in found[mutant.name]:
            assert f"modified its input {argument} in place (" in text, f"{test}:\n{text[-3000:]}"
            assert entries(mutant) in text.partition(" modified its input")[0], f"{test}:\n{text[-3000:]}"
            assert "float64 reference" not in text, f"{test}:\n{text[-3000:]}"


@pytest.mark.e2e
def test_invariance_suite_names_the_written_input(make_plugins, tmp_path):
    """The paper's claims call the entry points too (Table 1's layers, §3.1's networks, §5.2's gradients):
    each mutant fails the invariance suite, every failure saying which argument it wrote into."""
    writers = {**FORWARD_WRITERS, **BACKWARD_WRITERS}
    found = run_suite("invariances", writers, make_plugins, tmp_path)
    for mutant, argument in writers.items():
        assert found[mutant.name], f"{mutant.name} passed the invariance suite"
        for test, text in found[mutant.name]:
            assert f"modified its input {argument} in place (" in text, f"{test}:\n{text[-3000:]}"
