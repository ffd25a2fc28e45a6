"""environment.json's normbench commit: normbench's own, from its PEP 610 record, never the
commit of a git repository that merely contains the virtualenv (normbench.core.provenance)."""

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
