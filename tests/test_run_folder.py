"""A run folder has one writer (issue 13, items 2, 4, 11): unique run ids, safe folder names,
one lock per folder, released when its process ends, re-entrant and inherited, and a folder
holding results is never written by a second run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from normbench.core import run_folder
from normbench.core.environment import new_run_id
from normbench.core.run_folder import CLAIM_VARIABLE, LOCK_FILE, RunFolderError, claim, holder
from normbench.core.storage import RESULT_FILES
from tests.plugins import ROOT


def python(code: str, env_claim: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; without ``env_claim`` it does not inherit this process's claim."""
    env = dict(os.environ)
    if not env_claim:
        env.pop(CLAIM_VARIABLE, None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, **kwargs)


def test_run_ids_are_unique_within_a_second_and_sort_by_time():
    ids = [new_run_id() for _ in range(200)]
    assert len(set(ids)) == len(ids)
    assert all(run_folder.RUN_ID.match(i) for i in ids)
    assert sorted(ids, key=lambda i: i[:16]) == ids  # the UTC time comes first
    out = python("from normbench.core.environment import new_run_id; print(new_run_id())")
    assert out.returncode == 0 and out.stdout.strip() not in ids  # another process, the same second


@pytest.mark.parametrize("run_id", ["../escape", "/abs/olute", "a/b", "a\\b", "", ".hidden", "a..b", "..", "x" * 201,
                                    "sp ace", None])
def test_a_run_id_that_is_not_one_plain_folder_name_is_refused(tmp_path, run_id):
    out = tmp_path / "reports"
    with pytest.raises(RunFolderError, match=r"run id .*names one folder.* Fix: omit --run-id"):
        claim(out, run_id)
    assert not (tmp_path / "escape").exists() and not out.exists()


def test_a_link_leading_out_of_the_output_folder_is_refused(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "reports" / "r1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunFolderError, match="leads out of"):
        claim(tmp_path / "reports", "r1")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("name", [*RESULT_FILES, "traffic.csv", "kernels-sm90.csv"])
def test_a_folder_holding_results_is_refused(tmp_path, name):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / name).write_text("")
    with pytest.raises(RunFolderError, match=r"already holds the results of a run \(" + name.replace(".", r"\.")
                       + r"\); a run folder is written by one run. Fix: omit --run-id for a fresh one"):
        claim(tmp_path, "r1")
    assert holder(tmp_path / "r1") is None  # refused: nothing stays locked


def test_an_empty_folder_or_one_a_run_left_without_rows_is_used(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "environment.json").write_text("{}")
    with claim(tmp_path, "r1") as run:
        assert run.path == (tmp_path / "r1").resolve() and run.held
    with claim(tmp_path, "fresh") as run:
        assert run.path.is_dir()


def test_the_same_process_claims_again_and_releases_with_the_last_claim(tmp_path):
    first = claim(tmp_path, "r1")
    second = claim(tmp_path, "r1")
    assert second is first and holder(tmp_path / "r1") == os.getpid()
    assert os.environ[CLAIM_VARIABLE] == f"{os.getpid()}:{first.path}"
    second.release()
    assert holder(tmp_path / "r1") == os.getpid()  # the first claim still holds it
    first.release()
    first.release()  # idempotent
    assert holder(tmp_path / "r1") is None and CLAIM_VARIABLE not in os.environ


CLAIM_IN_CHILD = """
    import sys
    from normbench.core.run_folder import claim, RunFolderError
    try:
        run = claim({out!r}, "r1")
    except RunFolderError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    print("inherited" if run.inherited else "owner")
"""


def test_a_second_writer_is_told_who_holds_the_folder(tmp_path):
    with claim(tmp_path, "r1"):
        out = python(CLAIM_IN_CHILD.format(out=str(tmp_path)))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"is being written by another normbench run (pid {os.getpid()} on " in out.stderr
    assert "A run folder has one writer. Fix: wait for that run to end, or choose another --run-id" in out.stderr


def test_a_child_of_the_owner_inherits_the_claim(tmp_path):
    with claim(tmp_path, "r1"):
        out = python(CLAIM_IN_CHILD.format(out=str(tmp_path)), env_claim=True)
        assert out.returncode == 0 and out.stdout.strip() == "inherited", out.stderr
        assert holder(tmp_path / "r1") == os.getpid()  # the child's release did not unlock the owner's folder
    out = python(CLAIM_IN_CHILD.format(out=str(tmp_path)), env_claim=True)  # the owner let go: a normal claim
    assert out.stdout.strip() == "owner", out.stderr


def test_a_killed_writer_leaves_no_lock(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from normbench.core.run_folder import claim
        claim({str(tmp_path)!r}, "r1")
        print("claimed", flush=True)
        time.sleep(60)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != CLAIM_VARIABLE})
    try:
        assert child.stdout.readline().strip() == "claimed"
        assert holder(tmp_path / "r1") == child.pid
        with pytest.raises(RunFolderError, match=f"pid {child.pid} on"):
            claim(tmp_path, "r1")
    finally:
        child.kill()
        child.wait()
    assert holder(tmp_path / "r1") is None
    with claim(tmp_path, "r1") as run:
        assert run.held


def test_without_fcntl_the_lock_file_is_created_exclusively(tmp_path, monkeypatch):
    monkeypatch.setattr(run_folder, "fcntl", None)
    with claim(tmp_path, "r1") as run:
        assert (run.path / LOCK_FILE).read_text().split()[0] == str(os.getpid())
    assert not (tmp_path / "r1" / LOCK_FILE).exists()  # released: removed
    (tmp_path / "r1" / LOCK_FILE).write_text("4711 otherhost 2026-11-01T12:00:00+00:00\n")
    with pytest.raises(RunFolderError, match=r"pid 4711 on otherhost since 2026-11-01T12:00:00\+00:00.*if no run is "
                                             r"writing there, remove .*\.normbench\.lock"):
        claim(tmp_path, "r1")
