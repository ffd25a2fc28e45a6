"""A run folder packed to carry back from a GPU slot (issue 29): at most 8 files of at most 16 MB each, a manifest
with each file's size and SHA-256, results that read back as the report reads them; what does not fit is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from normbench.core.storage import ResultsError
from normbench.report import bundle
from tests.plugins import ROOT

FEW = ["-k", "test_forward and float32 and family_rows and not rms and not add- and hidden33"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real run, packed by normbench run --bundle as it ends."""
    tmp = tmp_path_factory.mktemp("bundle")
    out = subprocess.run([sys.executable, "-m", "normbench", "run", "--impl=numpy", f"--out={tmp}", "--run-id=r1",
                          f"--bundle={tmp / 'carry'}", "-n", "1", "--shape=16384x256", "--dtype=float32",
                          "--direction=forward", *FEW], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return tmp


def test_a_run_packs_itself_into_a_checked_bundle(run):
    manifest = bundle.check_bundle(run / "carry")
    files = {e["file"] for e in manifest["files"]}
    assert {"environment.json", "conformance.csv", "report.html"} <= files and len(files) + 1 <= bundle.MAX_FILES
    assert manifest["run"] == "r1" and manifest["left_out"] == []
    assert all(e["bytes"] <= bundle.MAX_FILE_BYTES and len(e["sha256"]) == 64 for e in manifest["files"])


def test_a_large_results_file_travels_gzipped_and_reads_back(run, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "MAX_FILE_BYTES", 2000)
    (run / "r1" / "run.log").write_text("x" * 100)
    bundle.write_bundle(run / "r1", tmp_path / "b", log=run / "r1" / "run.log")
    names = {e["file"] for e in bundle.check_bundle(tmp_path / "b")["files"]}
    assert "conformance.csv.gz" in names and "run.log" in names
    left = json.loads((tmp_path / "b" / "manifest.json").read_text())["left_out"]
    assert any(entry["file"] == "report.html" and "even gzipped" in entry["why"] for entry in left)


def test_no_more_files_than_a_slot_returns(run, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "MAX_FILES", 3)
    bundle.write_bundle(run / "r1", tmp_path / "b")
    manifest = bundle.check_bundle(tmp_path / "b")
    assert len(manifest["files"]) == 2 and manifest["left_out"]
    assert all("at most 3 files" in entry["why"] for entry in manifest["left_out"])


def test_a_damaged_bundle_or_a_used_folder_is_one_message(run, tmp_path):
    bundle.write_bundle(run / "r1", tmp_path / "b")
    with (tmp_path / "b" / "environment.json").open("a") as f:
        f.write(" ")
    with pytest.raises(ResultsError, match="size or SHA-256 is not the manifest's"):
        bundle.check_bundle(tmp_path / "b")
    with pytest.raises(ResultsError, match="exists and is not an empty folder"):
        bundle.write_bundle(run / "r1", tmp_path / "b")
    with pytest.raises(ResultsError, match="is not a run folder"):
        bundle.write_bundle(tmp_path, tmp_path / "c")


def normbench(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "normbench", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_a_used_bundle_folder_is_refused_before_the_run_claims_a_folder(tmp_path):
    (tmp_path / "carry").mkdir()
    (tmp_path / "carry" / "old.txt").write_text("an earlier bundle")
    out = normbench("run", "--impl=numpy", f"--out={tmp_path / 'runs'}", "--run-id=r2",
                    f"--bundle={tmp_path / 'carry'}", *FEW)
    assert out.returncode == 2 and "exists and is not an empty folder" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, no folder claimed: the slot is not spent


def _edit_manifest(folder, change):
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, message", [
    (lambda b: (b / "conformance.csv").write_text((b / "conformance.csv").read_text().replace("passed", "failed", 1)),
     "size or SHA-256 is not the manifest's"),
    (lambda b: (b / "manifest.json").write_text("{not json"), "cannot read .*manifest.json"),
    (lambda b: _edit_manifest(b, lambda m: m.pop("files")), "field files is missing"),
    (lambda b: _edit_manifest(b, lambda m: m.update(files="conformance.csv")), "field files is"),
    (lambda b: _edit_manifest(b, lambda m: m["files"][0].update(bytes="12")), r"field files\[0\].bytes"),
    (lambda b: _edit_manifest(b, lambda m: m["files"][0].update(file="../r1/environment.json")), "no file of a bundle"),
    (lambda b: (b / "conformance.json").write_text("[]"), "not in its manifest"),
    (lambda b: ((b / "environment.json").unlink(), (b / "environment.json").symlink_to(b.parent / "r1" /
                                                                                         "environment.json")),
     "is a link"),
])
def test_a_damaged_bundle_is_refused_by_the_report_and_the_check(run, tmp_path, damage, message):
    bundle.write_bundle(run / "r1", tmp_path / "b")
    damage(tmp_path / "b")
    with pytest.raises(ResultsError, match=message):
        bundle.check_bundle(tmp_path / "b")
    out = normbench("report", tmp_path / "b", "-o", tmp_path / "report.html")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "report.html").exists()


def test_a_bundle_reads_again_after_its_report_is_rendered_into_it(run, tmp_path):
    bundle.write_bundle(run / "r1", tmp_path / "b")
    for _ in range(2):  # the report.html written by the first is not one the report reads
        out = normbench("report", tmp_path / "b")
        assert out.returncode == 0, out.stderr[-2000:]


def test_links_in_a_run_folder_are_not_followed_and_bad_counts_files_stay_behind(run, tmp_path):
    folder = tmp_path / "r1"
    folder.mkdir()
    for name in ("environment.json", "conformance.csv"):
        (folder / name).write_bytes((run / "r1" / name).read_bytes())
    (folder / "kernels-x.csv").symlink_to("/etc/passwd")
    (folder / "kernels-y.csv").write_text("not,a,kernel,table\n1,2,3,4\n")
    manifest = json.loads(bundle.write_bundle(folder, tmp_path / "b").read_text())
    names = {e["file"] for e in manifest["files"]}
    why = {e["file"]: e["why"] for e in manifest["left_out"]}
    assert names == {"environment.json", "conformance.csv"}
    assert "a link (to /etc/passwd)" in why["kernels-x.csv"] and "does not read back" in why["kernels-y.csv"]
    bundle.check_bundle(tmp_path / "b")
    out = normbench("report", tmp_path / "b")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "kernels-y.csv" in (tmp_path / "b" / "report.html").read_text()  # the reader is told what stayed behind
    printed = normbench("bundle", folder, "--out", tmp_path / "c")
    assert printed.returncode == 0 and "left out: kernels-x.csv: a link" in printed.stdout, printed.stdout


def test_the_log_travels_as_run_log_whatever_its_name_and_a_bad_one_leaves_nothing(run, tmp_path):
    log = tmp_path / "environment.json"
    log.write_text("what the run printed\n")
    bundle.write_bundle(run / "r1", tmp_path / "b", log=log)
    assert (tmp_path / "b" / "run.log").read_text() == "what the run printed\n"
    assert (tmp_path / "b" / "environment.json").read_bytes() == (run / "r1" / "environment.json").read_bytes()
    with pytest.raises(ResultsError, match="is not a file"):
        bundle.write_bundle(run / "r1", tmp_path / "c", log=tmp_path)
    assert not (tmp_path / "c").exists()
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    with pytest.raises(ResultsError):
        bundle.write_bundle(run / "r1", tmp_path / "c", log=fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "environment.json", "pipe.log"]  # no partial bundle
    bundle.write_bundle(run / "r1", tmp_path / "c", log=log)  # the retry is not blocked
    bundle.check_bundle(tmp_path / "c")
