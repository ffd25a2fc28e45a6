"""Known deviations (harness/core/deviations.py): the file format, the backend attribute,
the matching rules, the tally, that every shipped entry still names existing tests, and
(with torch installed) that the plugin reports a matching failure as xfailed and
--normbench-strict as failed. tests/test_known_deviations.py runs them through pytest."""

import importlib.util

import pytest

from normbench.core import cases, deviations
from normbench.core.deviations import Subject
from normbench.core.exceptions import NormbenchError, PluginError
from normbench.kit.triton import INTERPRETER_DEVICE
from normbench.suites import DIRECTORY as SUITES
from normbench.suites.test_backward import IDENTITY_CASES
from normbench.suites.test_forward import ISOLATION_CASES

TESTS = {"test_forward": cases.FORWARD_CASES, "test_rows_independent": ISOLATION_CASES,
         "test_backward": cases.BACKWARD_CASES, "test_backward_identities": IDENTITY_CASES,
         "test_finite_differences": cases.GRADCHECK_CASES,
         "test_throughput": cases.THROUGHPUT_CPU_CASES + cases.THROUGHPUT_GPU_CASES}


SUBJECT = Subject("torch", "cpu", "test_backward[torch-bfloat16-rows5-hidden8-offset3]",
                  "bfloat16-rows5-hidden8-offset3", "hidden")


def test_parse_keeps_a_regex_with_bars_and_numbers_lines():
    text = "# comment\n\ntorch | cpu | test_backward[torch-*] | \\): (dweight|dbias)\\[ | half accumulation\n"
    (entry,) = deviations.parse(text, "known.txt")
    assert (entry.backend, entry.device, entry.test, entry.reason, entry.source) == (
        "torch", "cpu", "test_backward[torch-*]", "half accumulation", "known.txt:3")
    assert entry.explains(SUBJECT, "torch bfloat16-rows5-hidden8-offset3 (seed 0): dbias[3] = 1", False)
    assert not entry.explains(SUBJECT, "torch bfloat16-rows5-hidden8-offset3 (seed 0): dx[0, 3] = 1", True)
    on_gpu = Subject("torch", "cuda:0 (NVIDIA H100)", "test_backward[torch-x]")
    assert not entry.covers(on_gpu) and not entry.explains(on_gpu, "(seed 0): dbias[0]", True)


@pytest.mark.parametrize("pattern", ["test_backward[torch-bfloat16-*]", "test_backward[bfloat16-*]",
                                     "bfloat16-*-offset3", "hidden", "*hidden8*"])
def test_a_pattern_matches_the_test_id_with_or_without_backend_the_case_id_or_the_family(pattern):
    (entry,) = deviations.parse(f"torch | * | {pattern} | . | why")
    assert entry.covers(SUBJECT)


@pytest.mark.parametrize("pattern", ["test_forward[*]", "float32-*", "dist", "test_backward[numpy-*]"])
def test_a_pattern_that_names_something_else_does_not_match(pattern):
    (entry,) = deviations.parse(f"torch | * | {pattern} | . | why")
    assert not entry.covers(SUBJECT)
    (other,) = deviations.parse(f"numpy | * | {pattern} | . | why")
    assert not other.covers(SUBJECT)


def test_the_bare_test_id_drops_only_the_backend():
    subject = Subject("flax", "cpu", "test_forward[flax-float32-rows8-hidden1000-offset1e3]")
    assert subject.names[1] == "test_forward[float32-rows8-hidden1000-offset1e3]"
    stable = Subject("flax-stable", "cpu", "test_forward[flax-stable-float32-rows8-hidden1000-offset1e3]")
    assert stable.names[1] == "test_forward[float32-rows8-hidden1000-offset1e3]"
    (entry,) = deviations.parse("flax | * | test_forward[stable-*] | . | why")
    assert not entry.covers(stable)


class Declares:
    name = "mine"
    known_deviations = {"*-offset1e4": "one-pass variance", "test_backward*[*float16-*] | \\): dx\\[": "dx in half"}


def test_a_backend_declares_patterns_and_optional_message_regexes():
    plain, with_regex = deviations.from_backend(Declares)
    assert (plain.backend, plain.device, plain.test, plain.message, plain.reason) == (
        "mine", "*", "*-offset1e4", None, "one-pass variance")
    assert plain.source == 'mine.known_deviations["*-offset1e4"]' and plain.origin == "mine.known_deviations"
    assert (with_regex.test, with_regex.message.pattern) == ("test_backward*[*float16-*]", "\\): dx\\[")
    subject = Subject("mine", "cpu", "test_forward[mine-float32-rows8-hidden1000-offset1e4]",
                      "float32-rows8-hidden1000-offset1e4", "dist")
    # without a regex: only what the suites' checks find, never a crash
    assert plain.explains(subject, "mine ...: y[0, 1] = 5 ...", check_failure=True)
    assert not plain.explains(subject, "RuntimeError: kernel crashed", check_failure=False)
    half = Subject("mine", "cpu", "test_backward_identities[mine-bfloat16-rows5-hidden2-offset3]")
    assert with_regex.explains(half, "mine bfloat16-rows5-hidden2-offset3 (seed 0): dx[1, 0] = 0", True)
    assert not with_regex.explains(half, "mine bfloat16-rows5-hidden2-offset3 (seed 0): dweight[1] = 0", True)
    assert deviations.from_backend(type("Nothing", (), {"name": "none"})) == []


@pytest.mark.parametrize("declared, why", [
    (["*-offset1e4"], "must map test patterns to reasons"),
    ({"*-offset1e4": ""}, "must map test patterns to reasons"),
    ({"": "reason"}, "must map test patterns to reasons"),
    ({" | dx": "reason"}, "must map test patterns to reasons"),
    ({"*": 3}, "must map test patterns to reasons"),
    ({"* | (unclosed": "reason"}, "bad message regex '(unclosed'"),
])
def test_a_malformed_declaration_says_what_and_how_to_fix_it(declared, why):
    cls = type("Broken", (), {"name": "broken", "known_deviations": declared})
    with pytest.raises(PluginError, match="backend 'broken'") as info:
        deviations.from_backend(cls)
    assert why in str(info.value) and "Fix: write e.g. known_deviations = {" in str(info.value)


def test_the_tally_lists_what_occurred_and_what_did_not():
    tally = deviations.Tally()
    tally.add({"covers": {"a.txt:1": "one", "a.txt:2": "two"}, "explains": "a.txt:1"})
    tally.add({"covers": {"a.txt:1": "one", "a.txt:2": "two"}, "explains": None})
    tally.add({})
    assert tally.stale() == ["a.txt:2"]
    assert tally.lines() == ["known deviation in 1 of 2 tests: a.txt:1\n    one",
                             "declared deviation did not occur in the 2 tests it covers (remove it?): a.txt:2\n    two"]


def test_record_credits_the_first_entry_that_explains_a_failure():
    entries = deviations.parse("torch | * | hidden | dx | first\ntorch | * | *offset3 | . | second\n", "k")
    record = deviations.record(entries, SUBJECT, failed=True, message="(seed 0): dweight[0] = 1")
    assert record == {"covers": {"k:1": "first", "k:2": "second"}, "explains": "k:2"}
    assert deviations.record(entries, SUBJECT, failed=False)["explains"] is None


def test_a_missing_deviations_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(NormbenchError, match="known-deviations file .*nope.txt' does not exist"):
        deviations.load(tmp_path / "nope.txt")


@pytest.mark.parametrize("text, message", [
    ("torch | cpu | test_x | reason only", "expected 'backend | device glob | test-id glob | message regex | reason'"),
    ("torch | cpu | test_x | (unclosed | reason", "bad message regex"),
])
def test_bad_entries_name_the_line(text, message):
    with pytest.raises(NormbenchError, match=message):
        deviations.parse("# header\n" + text, "known.txt")


def test_globs_match_brackets_literally():
    assert deviations.glob_match("test_backward[torch-*]", "test_backward[torch-float16-rows1-hidden3-offset3]")
    assert not deviations.glob_match("test_backward[torch-*]", "test_backward_identities[torch-a]")
    assert deviations.glob_match("test_backward*[torch-*-biasonly]", "test_backward_identities[torch-a-biasonly]")


#: the devices the built-in backends report on a machine without a GPU (torch, jax: the CPU; triton: its interpreter)
DEVICES_HERE = ("cpu", INTERPRETER_DEVICE)


def test_every_shipped_entry_names_existing_tests():
    entries = deviations.load(SUITES / deviations.FILENAME)
    assert entries, "suites/known_deviations.txt is missing or empty"
    for entry in entries:
        subjects = [Subject(entry.backend, device, f"{test}[{entry.backend}-{c.id}]", c.id, c.family)
                    for device in DEVICES_HERE for test, case_list in TESTS.items() for c in case_list]
        assert any(entry.covers(s) for s in subjects), f"{entry.source} matches no test ({entry.test}); remove or fix it"


@pytest.mark.e2e
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_known_deviation_is_xfailed_and_strict_fails_it(runner):
    args = [str(SUITES / "test_backward.py"), "--impl=torch", "-q", "-rx",
            "-k", "test_backward and bfloat16-rows1025-hidden33-offset3 and not add-"]
    result = runner.pytest(*args)
    assert result.parseoutcomes().get("xfailed") == 1, result.stdout.str()[-2000:]
    assert "known deviation (suites/known_deviations.txt:" in result.stdout.str()
    strict = runner.pytest(*args, "--normbench-strict")
    assert strict.ret == 1 and strict.parseoutcomes().get("failed") == 1 and "dx[" in strict.stdout.str()
