"""Known failures: the file format, the matching rules, that every shipped entry still
names existing tests, and (with torch installed) that the plugin reports a matching
failure as xfailed and --normbench-strict as failed."""

import importlib.util
import subprocess

import pytest

from harness import cases, known_failures
from harness.exceptions import NormbenchError
from harness.runner import suites_dir
from suites.test_backward import IDENTITY_CASES
from suites.test_forward import ISOLATION_CASES
from tests.plugins import ROOT, pytest_command, subprocess_env

TESTS = {"test_forward": cases.FORWARD_CASES, "test_rows_independent": ISOLATION_CASES,
         "test_backward": cases.BACKWARD_CASES, "test_backward_identities": IDENTITY_CASES,
         "test_finite_differences": cases.GRADCHECK_CASES,
         "test_throughput": cases.THROUGHPUT_CPU_CASES + cases.THROUGHPUT_GPU_CASES}


def test_parse_keeps_a_regex_with_bars_and_numbers_lines():
    text = "# comment\n\ntorch | cpu | test_backward[torch-*] | \\): (dweight|dbias)\\[ | half accumulation\n"
    (entry,) = known_failures.parse(text)
    assert (entry.backend, entry.device, entry.test, entry.reason, entry.line) == (
        "torch", "cpu", "test_backward[torch-*]", "half accumulation", 3)
    assert entry.matches("torch", "cpu", "test_backward[torch-bfloat16-rows5-hidden8-offset3]",
                         "torch bfloat16-rows5-hidden8-offset3 (seed 0): dbias[3] = 1")
    assert not entry.matches("torch", "cpu", "test_backward[torch-bfloat16-rows5-hidden8-offset3]",
                             "torch bfloat16-rows5-hidden8-offset3 (seed 0): dx[0, 3] = 1")
    assert not entry.matches("torch", "cuda:0 (NVIDIA H100)", "test_backward[torch-x]", "(seed 0): dbias[0]")


@pytest.mark.parametrize("text, message", [
    ("torch | cpu | test_x | reason only", "expected 'backend | device glob | test-id glob | message regex | reason'"),
    ("torch | cpu | test_x | (unclosed | reason", "bad message regex"),
])
def test_bad_entries_name_the_line(text, message):
    with pytest.raises(NormbenchError, match=message):
        known_failures.parse("# header\n" + text, "known.txt")


def test_globs_match_brackets_literally():
    assert known_failures.glob_match("test_backward[torch-*]", "test_backward[torch-float16-rows1-hidden3-offset3]")
    assert not known_failures.glob_match("test_backward[torch-*]", "test_backward_identities[torch-a]")
    assert known_failures.glob_match("test_backward*[torch-*-biasonly]", "test_backward_identities[torch-a-biasonly]")


def test_every_shipped_entry_names_existing_tests():
    entries = known_failures.load(suites_dir() / known_failures.FILENAME)
    assert entries, "suites/known_failures.txt is missing or empty"
    for entry in entries:
        ids = [f"{test}[{entry.backend}-{c.id}]" for test, case_list in TESTS.items() for c in case_list]
        assert any(known_failures.glob_match(entry.test, i) for i in ids), (
            f"known_failures.txt:{entry.line} matches no test ({entry.test}); remove or fix it")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_known_failure_is_xfailed_and_strict_fails_it():
    args = [str(suites_dir() / "test_backward.py"), "--impl=torch", "-q", "-rx",
            "-k", "test_backward and bfloat16-rows1025-hidden33-offset3"]
    out = subprocess.run(pytest_command(*args), cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                         timeout=600)
    assert "1 xfailed" in out.stdout, out.stdout[-2000:]
    assert "known failure (suites/known_failures.txt:" in out.stdout
    strict = subprocess.run(pytest_command(*args, "--normbench-strict"), cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=600)
    assert strict.returncode == 1 and "1 failed" in strict.stdout and "dbias[" in strict.stdout
