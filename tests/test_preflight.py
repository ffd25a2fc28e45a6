"""``normbench preflight``: what a run on this machine will use, in seconds, and one line for what is missing
(issue 29: a GPU node's short slot must not go to a run that cannot work)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from normbench.front import preflight
from tests.plugins import ROOT


def normbench(*args):
    return subprocess.run([sys.executable, "-m", "normbench", "preflight", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_cpu_rehearsal_says_what_it_found_and_is_ready():
    out = normbench("--cpu", "--impl=numpy")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "normbench preflight (CPU rehearsal):" and lines[-1] == "preflight: ready"
    assert any(line.startswith("  ok  normbench: 0.") for line in lines)
    assert any(line.startswith("  ok  libraries: ") and "numpy " in line for line in lines)
    assert "  ok  backend numpy: cpu (" in out.stdout


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be visible here")
def test_without_a_gpu_a_gpu_run_is_one_line_after_the_checks():
    out = normbench("--impl=numpy")
    assert out.returncode == 2
    [line] = out.stderr.splitlines()
    assert line.startswith("normbench: error: no CUDA GPU is visible. Fix: run on the GPU node") and "--cpu" in line
    assert "  NO  GPU: none seen" in out.stdout and "  NO  backend numpy: cpu" in out.stdout  # everything printed first


def test_an_unknown_backend_is_one_line():
    out = normbench("--cpu", "--impl=nope")
    assert out.returncode == 2 and out.stderr.startswith("normbench: error: unknown backend 'nope'")


def test_what_triton_36_needs_to_build_its_launcher_is_checked(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = preflight.c_compiler()
    assert missing.problem.startswith("no C compiler ($CC, gcc or clang) on the PATH")
    (tmp_path / "cc").write_text("#!/bin/sh\n")
    (tmp_path / "cc").chmod(0o755)
    assert preflight.c_compiler().problem  # Triton looks for gcc and clang, never cc
    (tmp_path / "gcc").write_text("#!/bin/sh\n")
    (tmp_path / "gcc").chmod(0o755)
    assert preflight.c_compiler().found == str(tmp_path / "gcc") and not preflight.c_compiler().problem
    monkeypatch.setattr(preflight.sysconfig, "get_paths", lambda: {"include": str(tmp_path / "none")})
    assert "Python's headers are missing" in preflight.python_headers().problem
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "Python.h").write_text("")
    assert not preflight.python_headers().problem


@pytest.mark.parametrize("cc, said", [
    ("   ", "$CC='   ' is no program"),  # issue 45: an IndexError traceback
    ("", "$CC='' is no program"),
    ("gcc -m64", "$CC='gcc -m64' is no program"),  # Triton runs $CC as one program's name
])
def test_a_cc_triton_cannot_run_is_the_problem_it_will_be(monkeypatch, tmp_path, cc, said):
    (tmp_path / "gcc").write_text("#!/bin/sh\n")
    (tmp_path / "gcc").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", cc)
    check = preflight.c_compiler()
    assert check.found == said and check.problem.startswith(f"CC is set to {cc!r}, which names no program")
    assert "Fix: unset CC" in check.problem
    monkeypatch.setenv("CC", "gcc")
    assert preflight.c_compiler().found == str(tmp_path / "gcc") and not preflight.c_compiler().problem


def fake_smi(tmp_path, monkeypatch, script: bytes):
    smi = tmp_path / "nvidia-smi"
    smi.write_bytes(b"#!/bin/sh\n" + script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


def test_an_nvidia_smi_printing_bytes_that_are_not_utf8_is_read_not_a_traceback(tmp_path, monkeypatch):
    """Issue 45: a byte that is not UTF-8 was a UnicodeDecodeError traceback in preflight, and in run before any
    test, leaving an empty folder."""
    fake_smi(tmp_path, monkeypatch, b"printf 'NVIDIA \\377H200, 570.86, 143771 MiB, 1980 MHz, 3201 MHz, 0:19:0.0, 9.0, "
                                   b"Default\\n'\n")
    [gpu], why = preflight.environment.gpu_query()
    assert gpu["name"] == "NVIDIA \ufffdH200" and gpu["compute_cap"] == "9.0" and why == ""
    out = subprocess.run([sys.executable, "-m", "normbench", "preflight", "--impl=numpy"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env=os.environ)
    assert "Traceback" not in out.stderr and "  ok  GPU 0: NVIDIA \ufffdH200; " in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("script, why", [
    (b"exec sleep 30\n", "nvidia-smi did not answer within 0.5 s: a hung driver or GPU?"),  # issue 45: "lists none"
    (b"echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9\n",
     "nvidia-smi failed with exit status 9: NVIDIA-SMI has failed because it could not communicate with the NVIDIA "
     "driver."),
    (b"exit 0\n", "nvidia-smi lists none"),
])
def test_no_gpu_says_why_nvidia_smi_found_none(tmp_path, monkeypatch, script, why):
    fake_smi(tmp_path, monkeypatch, script)
    monkeypatch.setattr(preflight.environment, "GPU_QUERY_TIMEOUT_S", 0.5)
    assert preflight.environment.gpu_query() == ([], why)
    [check] = preflight.gpus(require=True)
    assert check.found.startswith(f"none seen ({why}; torch.cuda.is_available(): ") and check.problem


def test_each_gpu_is_said_with_what_a_reference_run_records(monkeypatch):
    gpu = {"name": "NVIDIA H200", "memory.total": "143771 MiB", "sm_count": "132", "compute_cap": "9.0",
           "driver_version": "570.86", "cuda_runtime": "12.8"}
    monkeypatch.setattr(preflight.environment, "gpu_query", lambda: ([gpu], ""))
    [check] = preflight.gpus(require=True)
    assert not check.problem and check.found.startswith("NVIDIA H200; memory.total 143771 MiB, sm_count 132")
    assert "compute_cap 9.0" in check.found and "cuda_runtime 12.8" in check.found
    [numpy] = preflight.backends(("numpy",), require_gpu=True)
    assert numpy.problem == ("backend numpy runs on cpu, not on the GPU. Fix: install a CUDA build of its "
                             "framework")


def test_a_dependency_a_no_deps_install_did_not_bring_is_the_problem(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.requires
    monkeypatch.setattr(importlib.metadata, "requires",
                        lambda name: [*real(name), "no-such-package-xyz>=1.0", "torch>=2.1; extra == \"torch\""])
    check = preflight.dependencies()
    assert check.problem == ("normbench needs no-such-package-xyz>=1.0, not installed here. Fix: bring their wheels "
                             "and pip install --no-index --no-deps them (docs/gpu-node.md)")
    assert check.found.startswith("numpy ") and "torch" not in check.found
    monkeypatch.setattr(importlib.metadata, "requires", real)
    assert not preflight.dependencies().problem


def test_nsight_compute_is_said_never_required(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    check = preflight.profiler()
    assert not check.problem and check.found.startswith("not on the PATH: the counters will not be measured")
    (tmp_path / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "ncu").chmod(0o755)
    assert preflight.profiler().found == str(tmp_path / "ncu")
