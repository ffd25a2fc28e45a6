"""A run folder packed to carry back from a GPU slot (issue 29): at most 8 files of at most 16 MB each, a manifest
with each file's size and SHA-256, results that read back as the report reads them; what does not fit is named."""

from __future__ import annotations

import json
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
