"""environment.json's normbench commit: normbench's own, from its PEP 610 record, never the
commit of a git repository that merely contains the virtualenv (normbench.core.provenance)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from normbench import __version__
from normbench.core import environment, provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git_repo(path):
    path.mkdir(parents=True, exist_ok=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def package_in(folder):
    init = folder / "harness" / "__init__.py"
    init.parent.mkdir(parents=True)
    init.write_text("")
    return init


def test_a_venv_inside_a_users_project_does_not_report_the_projects_commit(tmp_path):
    project = tmp_path / "project"
    git_repo(project)
    installed = project / ".venv" / "lib" / "site-packages" / "normbench" / "__init__.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("")
    (project / "dirty.txt").write_text("x")
    source = provenance.from_direct_url(None, installed)  # installed from a wheel: no PEP 610 record
    assert source.commit == "" and source.commit_label() == "" and source.kind == "wheel or index"


def test_an_editable_checkout_reports_its_own_head(tmp_path):
    checkout = tmp_path / "normbench"
    init = package_in(checkout)
    head = git_repo(checkout)
    record = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    source = provenance.from_direct_url(record, init)
    assert (source.kind, source.commit, source.dirty) == ("editable checkout", head, False)
    (checkout / "harness" / "__init__.py").write_text("# changed\n")
    assert provenance.from_direct_url(record, init).commit_label() == f"{head} (with uncommitted changes)"


def test_an_editable_folder_inside_another_repository_has_no_commit(tmp_path):
    outer = tmp_path / "outer"
    git_repo(outer)
    folder = outer / "vendored" / "normbench"
    init = package_in(folder)
    source = provenance.from_direct_url({"url": folder.as_uri(), "dir_info": {"editable": True}}, init)
    assert source.kind == "editable checkout" and source.commit == ""


def test_an_editable_record_for_another_copy_is_not_trusted(tmp_path):
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    package_in(checkout)
    git_repo(checkout)
    imported = package_in(elsewhere)
    source = provenance.from_direct_url({"url": checkout.as_uri(), "dir_info": {"editable": True}}, imported)
    assert source.commit == "" and "not the imported copy" in source.kind


def test_vcs_and_folder_installs():
    vcs = {"url": "https://example.invalid/normbench.git", "vcs_info": {"vcs": "git", "commit_id": "0123abc"}}
    assert provenance.from_direct_url(vcs, Path("x")).commit == "0123abc"
    folder = provenance.from_direct_url({"url": "file:///src/normbench", "dir_info": {}}, Path("x"))
    assert (folder.kind, folder.commit) == ("local folder", "")


def test_environment_records_version_and_source():
    env = environment.environment("r1", ["normbench", "run"])
    assert env["normbench"] == __version__
    assert set(env["normbench_source"]) == {"kind", "location", "commit", "dirty"}
    assert env["git_commit"] == provenance.source().commit_label()


def test_the_environment_records_each_gpu_with_compute_capability_mode_and_sm_count(tmp_path, monkeypatch):
    """What a GPU reference run must say of its GPU (issue 29): compute capability and mode from nvidia-smi; SM count
    and CUDA runtime from torch where it is imported. A fake nvidia-smi and a stand-in torch, as no GPU is here."""
    import sys
    import types

    from normbench.core import environment

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in *compute_cap*) echo 'NVIDIA H100 80GB HBM3, 570.86, 81559 MiB, 1980 MHz, "
                   "2619 MHz, 00000000:19:00.0, 9.0, Default';; *) exit 9;; esac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                 get_device_properties=lambda i: types.SimpleNamespace(multi_processor_count=132))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.8")))
    [gpu] = environment.gpus()
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["compute_cap"] == "9.0" and gpu["compute_mode"] == "Default"
    assert gpu["sm_count"] == "132" and gpu["cuda_runtime"] == "12.8"
    smi.write_text("#!/bin/sh\ncase \"$1\" in *compute_cap*) exit 9;; *) echo 'Tesla V100, 450.1, 16 GiB, 1530 MHz, "
                   "877 MHz, 0:1:0.0';; esac\n")
    [old] = environment.gpus()  # an older driver refuses the new fields: asked again without them
    assert old["name"] == "Tesla V100" and "compute_cap" not in old and old["sm_count"] == "132"
