"""What ``normbench run`` says before, while and after it works (issue 18, items 3, 4 and 6).

Its header names the backends (version, device), suites, seeds and folder, the work
collected, and everything skipped with the reason; a backend whose ``timing_note``
says its timings mean nothing runs the conformance suites but is not timed, and the
header, the summary, environment.json and the report say why; the throughput phase
writes clean progress lines; results carry node ids relative to the suites and the
device strings ``normbench list --probe`` shows; ``normbench report RUN`` writes
beside the run. Fake plugins (NumPy underneath) keep it fast: no run here creates
torch, jax or triton except the one ``--impl=all`` run that the header tests share.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.check import outcomes
from normbench.core import storage
from normbench.front import cli
from normbench.front.runner import suite_nodeid
from normbench.perf.throughput import THROUGHPUT
from normbench.suites import DIRECTORY
from tests.plugins import ROOT

NOTE = "simulated accelerator: timings are meaningless"
PLUGIN = f'''
import numpy as np

from normbench.impls.numpy_ref import NumpyBackend


class Untimed(NumpyBackend):
    """Correct, and says its timings would mean nothing here."""
    name = "untimed"

    def __init__(self):
        self.timing_note = {NOTE!r}


class Ghost(NumpyBackend):
    """Never available: it needs a module that is not installed."""
    name = "ghost"
    requires = ("no_such_module_for_normbench",)
    install_hint = "pip install ghost-kernels"


class Wrong(NumpyBackend):
    """Returns zeros, a known deviation: its throughput case is xfailed."""
    name = "wrong"
    known_deviations = {{"test_throughput[wrong-*] | wrong-before": "returns zeros on purpose"}}

    def layer_norm(self, x, normalized_shape, weight, bias, eps):
        return np.zeros_like(x)
'''
ONE_CASE = ["--shape=256x16384", "--dtype=float32", "--direction=forward", "--norm=layer_norm", "--normbench-min-samples=3",
            "--normbench-max-time=0", "--normbench-ceiling-mib=64"]
PERCENT = re.compile(r"\[\s*\d+%\]")


def normbench(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def header(stdout: str) -> list[str]:
    """The lines before the first suite starts."""
    return stdout.split("\nnormbench: ", 1)[0].splitlines()


@pytest.fixture(scope="module")
def plugins(make_plugins):
    return make_plugins({"untimed": "fake_kernels:Untimed", "ghost": "fake_kernels:Ghost", "wrong": "fake_kernels:Wrong"},
                        dist="fake-kernels", modules={"fake_kernels": PLUGIN})


@pytest.fixture(scope="module")
def every_backend(plugins, tmp_path_factory):
    """``normbench run --impl=all`` (every backend installed here, the fakes too) on one family of
    numpy's conformance tests: the header is the point."""
    out_dir = tmp_path_factory.mktemp("runs")
    out = normbench("run", "--impl=all", "--suites=conformance", "-n", "0", f"--out={out_dir}", "--run-id=r1",
                    "--no-report", "-k", "numpy and family_multidim and not rms and not add-", env=plugins.env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, out_dir / "r1"


@pytest.fixture(scope="module")
def throughput_run(plugins, tmp_path_factory):
    """One throughput case on numpy (timed), untimed (its timing_note) and wrong (a known deviation)."""
    out_dir = tmp_path_factory.mktemp("runs")
    out = normbench("run", "--impl=numpy,untimed,wrong", "--suites=throughput", f"--out={out_dir}", "--run-id=r1",
                    *ONE_CASE, env=plugins.env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, out_dir / "r1"


@pytest.mark.e2e
def test_the_header_names_backends_suites_seeds_folder_and_the_work(every_backend):
    out, folder = every_backend
    lines = header(out.stdout)
    assert lines[0] == "normbench run r1"
    assert f"  output:      {folder}/" in lines and "  seeds:       0" in lines
    assert "  suites:      conformance" in lines
    assert f"    numpy ({importlib.metadata.version('numpy')}, cpu)" in lines
    assert f"    untimed ({importlib.metadata.version('numpy')}, cpu); not timed: {NOTE}" in lines
    ran = len(storage.load(folder, outcomes.CONFORMANCE))
    assert f"  conformance: {ran} tests; one worker process" in lines and ran > 0


@pytest.mark.e2e
def test_the_header_names_each_skipped_backend_with_its_reason(every_backend):
    out, folder = every_backend
    lines = header(out.stdout)
    reason = ("backend 'ghost' is not available: no_such_module_for_normbench is not installed; "
              "pip install ghost-kernels")
    assert f"    ghost: skipped: {reason}" in lines
    assert f"skipped: ghost: {reason}" in out.stdout.split("normbench conformance summary")[1]  # and the summary
    env = json.loads((folder / "environment.json").read_text())
    assert env["skipped_backends"]["ghost"] == reason and env["not_timed"]["untimed"] == NOTE
    if "triton" in env["backends"] and env["backends"]["triton"]["device"].startswith("interpreter"):
        assert "triton" in env["not_timed"]  # our own backend under its interpreter: conformance only
        assert any(line.startswith("    triton (") and line.endswith("not timed: Triton interpreter on CPU: "
                                                                      "timings are meaningless") for line in lines)


@pytest.mark.e2e
def test_list_probe_shows_the_device_strings_the_results_record(every_backend):
    out, folder = every_backend
    listed = normbench("list", "--probe", env=None)
    assert listed.returncode == 0
    assert "probing numpy" in listed.stderr  # a progress line per backend created
    rows = [line.split("  ") for line in listed.stdout.splitlines()[1:] if line and not line.startswith("problem:")]
    cells = {r[0].strip(): [c.strip() for c in r if c.strip()] for r in rows}
    recorded = json.loads((folder / "environment.json").read_text())["backends"]
    for name, info in recorded.items():
        if name in cells:
            assert info["device"] in cells[name], (name, info, cells[name])
            assert f"{name} ({info['version']}, {info['device']})" in out.stdout  # and the header
    # one form for the host CPU, whatever the framework numbers it ("cpu", never "cpu:0 (cpu)")
    assert not [d for d in (i["device"] for i in recorded.values()) if d.startswith("cpu") and d != "cpu"]


@pytest.mark.e2e
def test_a_backend_with_a_timing_note_is_skipped_by_the_throughput_suite_and_summarized(throughput_run):
    out, folder = throughput_run
    lines = header(out.stdout)
    assert f"    untimed ({importlib.metadata.version('numpy')}, cpu); not timed: {NOTE}" in lines
    assert "  throughput:  2 cases on numpy, wrong, one at a time (untimed: not timed, see above)" in lines
    rows = storage.load(folder, THROUGHPUT)
    assert set(rows.backend) == {"numpy", "wrong"}  # no row, not even an error, for the untimed backend
    assert set(rows.device) == {"cpu"}
    summary = out.stdout[out.stdout.index("normbench throughput summary"):]
    assert f"not timed: untimed: {NOTE} (the conformance suites ran on it)" in summary
    assert json.loads((folder / "environment.json").read_text())["not_timed"] == {"untimed": NOTE}
    assert NOTE in (folder / "report.html").read_text()


@pytest.mark.e2e
def test_pytest_skips_the_cases_of_a_backend_with_a_timing_note_with_that_reason(plugins, tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(DIRECTORY / "test_throughput.py"),
                          "--impl=untimed", "-rs", f"--normbench-out={tmp_path}", "--normbench-shape=256x16384",
                          "--normbench-norm=layer_norm",
                          "--normbench-dtype=float32"], cwd=ROOT, env=plugins.env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    assert f"not timed: {NOTE}" in out.stdout and "3 skipped" in out.stdout  # the three directions
    assert not any(tmp_path.iterdir())


@pytest.mark.e2e
def test_the_throughput_progress_lines_are_clean(throughput_run):
    out, _ = throughput_run
    phase = out.stdout[out.stdout.index("normbench: throughput suite"):out.stdout.index("normbench throughput summary")]
    progress = [line for line in phase.splitlines() if "forward float32 256x16384" in line]
    assert len(progress) == 2, phase
    assert progress[0].startswith("[1/2] numpy forward float32 256x16384: ")
    assert progress[1].startswith("[2/2] wrong forward float32 256x16384: WRONG-BEFORE: ")  # xfailed: no "x" before it
    assert not PERCENT.search(out.stdout), phase  # no "[ 50%]" from pytest's progress
    assert not [line for line in phase.splitlines() if re.match(r"^[.sxXFE]+(\[|$)", line)], phase
    assert "1 passed, 1 skipped, 1 xfailed" in phase


@pytest.mark.e2e
def test_conformance_nodeids_are_relative_to_the_suites_whatever_the_rootdir(tmp_path):
    """Installed (tox), the suites sit deep under the rootdir; here the rootdir is the checkout's parent."""
    out = normbench("run", "--impl=numpy", "--suites=conformance", "-n", "0", f"--out={tmp_path}", "--run-id=r1",
                    "--no-report", "-k", "test_forward and family_multidim and not rms and not add-", f"--rootdir={ROOT.parent}")
    assert out.returncode == 0, out.stdout[-3000:]
    nodeids = storage.load(tmp_path / "r1", outcomes.CONFORMANCE).nodeid
    assert len(nodeids) and all(n.startswith("suites/test_forward.py::test_forward[numpy-") for n in nodeids)


def test_suite_nodeid_drops_where_the_suites_are_installed(tmp_path):
    installed = f"{DIRECTORY.parent.name}/suites/test_backward.py::test_backward[numpy-x]"
    assert suite_nodeid(installed, DIRECTORY.parents[1]) == "suites/test_backward.py::test_backward[numpy-x]"
    outside = "::test_backward[numpy-x]"  # pytest's node id for a file outside the rootdir; its location says where
    location = str(DIRECTORY.joinpath("test_backward.py").relative_to(DIRECTORY.parents[1]))
    assert suite_nodeid(outside, DIRECTORY.parents[1], location) == "suites/test_backward.py::test_backward[numpy-x]"
    assert suite_nodeid("tests/test_cli.py::test_x", tmp_path) == "tests/test_cli.py::test_x"


@pytest.mark.e2e
def test_report_writes_beside_the_run_by_default(tmp_path, capsys, monkeypatch):
    run = shutil.copytree(ROOT / "reports" / "example-cpu", tmp_path / "example-cpu")
    (run / "report.html").unlink()
    monkeypatch.chdir(tmp_path / "..")  # never into the current folder
    assert cli.main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {run / 'report.html'}"
    assert "<svg" in (run / "report.html").read_text()
    assert cli.main(["report", str(run / "throughput.csv"), "-o", str(tmp_path / "elsewhere.html")]) == 0
    assert (tmp_path / "elsewhere.html").exists()


@pytest.mark.e2e
def test_check_and_table1_say_what_they_are_doing_on_stderr():
    out = normbench("check", "--impl=numpy", "--shape=8x4")
    assert out.returncode == 0 and out.stdout.startswith("PASS numpy")  # stdout keeps the result alone
    assert "normbench: creating backend numpy" in out.stderr and "normbench: checking float32-rows8-hidden4" in out.stderr
    out = normbench("table1", "--no-recurrent")
    assert out.returncode == 0 and "normbench: measuring Table 1" in out.stderr


def test_a_pytest_option_the_suites_cannot_use_is_one_line_before_any_run_folder(tmp_path):
    """Before: the header said the suite could not be collected, and a folder marked finished with 0 tests was left."""
    out = subprocess.run([str(Path(sys.executable).parent / "normbench"), "run", "--impl=numpy", "--suites=conformance",
                          f"--out={tmp_path}", "--no-report", "-n", "0", f"--normbench-deviations={tmp_path / 'none.txt'}"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout[-2000:]
    [line] = out.stderr.splitlines()
    assert line.startswith("normbench: error: pytest refuses the arguments normbench run passes on to it")
    assert "none.txt" in line and "Give an existing known-deviations file. Fix:" in line
    assert list(tmp_path.iterdir()) == [tmp_path / "none.txt"] or not any(tmp_path.iterdir())


@pytest.mark.e2e
def test_a_run_of_a_backend_not_available_leaves_no_folder(plugins, tmp_path):
    """Issue 45: each such try left an empty run folder holding only its lock file (and, with --bundle, its log).
    A folder that already holds a run's files is never removed."""
    out = normbench("run", "--impl=ghost", f"--out={tmp_path}", "--run-id=g", f"--bundle={tmp_path / 'b'}",
                    env=plugins.env)
    assert out.returncode == 2 and "backend 'ghost' is not available" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "conformance.csv").write_text("an earlier run's\n")
    out = normbench("run", "--impl=ghost", f"--out={tmp_path}", "--run-id=kept", env=plugins.env)
    assert out.returncode == 2 and (kept / "conformance.csv").read_text() == "an earlier run's\n"
