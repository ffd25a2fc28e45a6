"""A backend's own text, whatever it holds, cannot break a run (issue 45): its exception messages with a ``\\r``, a
megabyte, a lone surrogate, terminal escape sequences or a spreadsheet formula are stored escaped and clipped, shown
escaped, and the run's files stay loadable by normbench itself (``normbench.core.safe_text``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from normbench.check.outcomes import CONFORMANCE
from normbench.core import safe_text, storage
from tests.plugins import ROOT

HOSTILE = "downloading 50%\rdownloading 100%\x1b]0;owned\x07\x1b[2J bad byte \udcff "
TEXT_PLUGINS = {"hostile_text": f'''
from tests.mutants import Fp32Kernel

class HostileText(Fp32Kernel):
    name = "hostile-text"
    def layer_norm(self, *args, **kwargs):
        raise RuntimeError({HOSTILE!r} + "x" * 5_000_000)

class EscapesInVersion(Fp32Kernel):
    name = "escapes-in-version"
    @classmethod
    def library_version(cls):
        return "\x1b]0;owned\x07\x1b[2J1.0"

class FormulaText(Fp32Kernel):
    name = "formula-text"
    def layer_norm(self, *args, **kwargs):
        raise RuntimeError("=HYPERLINK(\\"http://example.invalid\\")")
'''}
FEW = ["-k", "test_forward and float32 and family_rows and not rms and not add- and hidden33"]


def test_safe_text_escapes_clips_and_is_stable():
    text = safe_text.safe(HOSTILE + "x" * 5_000_000)
    assert len(text) <= safe_text.LIMIT and text.encode("utf-8")
    assert "\\r" in text and "\\x1b" in text and "\\udcff" in text and "\x1b" not in text and "\r" not in text
    assert "clipped: 5,000,0" in text
    assert safe_text.safe(text) == text and safe_text.cell(safe_text.cell("=1")) == "'=1"
    assert safe_text.safe("two\nlines\tand a tab") == "two\nlines\tand a tab"


def test_a_row_with_hostile_text_is_stored_and_loads_back(tmp_path):
    """Before: the ``\\r`` was written unquoted and the loader refused the file as not normbench's; a 5 MB message was
    refused as a line too long; a lone surrogate could not be encoded."""
    with storage.ResultsWriter(tmp_path, "r1", CONFORMANCE) as writer:
        writer.add(storage.new_row(CONFORMANCE, run_id="r1", backend="b", test="test_forward", outcome="failed",
                                   message=HOSTILE + "x" * 5_000_000))
        writer.add(storage.new_row(CONFORMANCE, run_id="r1", backend="b", test="test_backward", outcome="failed",
                                   message="=cmd|' /C calc'!A0"))
    df = storage.load(tmp_path, CONFORMANCE)
    assert len(df) == 2
    first, second = df["message"]
    assert first.startswith("downloading 50%\\rdownloading 100%\\x1b]0;owned") and len(first) <= safe_text.LIMIT
    assert second == "'=cmd|' /C calc'!A0"


@pytest.mark.e2e
def test_a_run_whose_backend_raises_hostile_text_ends_with_its_results_loadable(make_plugins, tmp_path):
    """Before: the lone surrogate was an xdist INTERNALERROR (every test "not run", exit status 0), the ``\\r`` made
    conformance.csv unloadable (no report, survey or bundle), the escapes reached the terminal raw."""
    env = make_plugins({"hostile-text": "hostile_text:HostileText", "formula-text": "hostile_text:FormulaText"},
                       dist="acme-text", modules=TEXT_PLUGINS).env
    out = subprocess.run([sys.executable, "-m", "normbench", "run", "--suites=conformance", f"--out={tmp_path}",
                          "--run-id=r1", "--impl=numpy,hostile-text,formula-text", "-n", "2", *FEW], cwd=ROOT,
                         env=env, capture_output=True, timeout=600)
    said = (out.stdout + out.stderr).decode("utf-8", "replace")
    assert out.returncode == 1, said[-3000:]
    assert "INTERNALERROR" not in said and b"\x1b]0;owned" not in out.stdout + out.stderr, said[-3000:]
    assert len(said) < 2_000_000, len(said)  # never the 5 MB message whole
    df = storage.load(tmp_path / "r1", CONFORMANCE)
    mine = df[df["backend"] == "hostile-text"]
    assert len(mine) > 0 and (mine["outcome"] == "failed").all(), mine[["outcome", "message"]]
    assert mine["message"].str.contains("downloading 50%\\rdownloading 100%", regex=False).all()
    assert (mine["message"].str.len() <= safe_text.LIMIT).all()
    formula = df[df["backend"] == "formula-text"]["message"]
    assert len(formula) > 0 and not formula.str.match(r"[=+\-@]").any()
    assert (df[df["backend"] == "numpy"]["outcome"] == "passed").all()
    report = subprocess.run([sys.executable, "-m", "normbench", "report", str(tmp_path / "r1")], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr


@pytest.fixture(scope="module")
def hostile(make_plugins):
    return make_plugins({"hostile-text": "hostile_text:HostileText", "escapes-in-version": "hostile_text:EscapesInVersion"},
                        dist="acme-hostile", modules=TEXT_PLUGINS).env


@pytest.mark.e2e
def test_check_on_a_backend_that_raises_is_one_fail_line(hostile):
    """Before: a traceback, exit status 1 and no FAIL line."""
    out = subprocess.run([sys.executable, "-m", "normbench", "check", "--impl=hostile-text", "--shape=8x16"], cwd=ROOT,
                         env=hostile, capture_output=True, timeout=300)
    said = (out.stdout + out.stderr).decode("utf-8", "replace")
    lines = out.stdout.decode("utf-8", "replace").splitlines()
    assert out.returncode == 1 and "Traceback" not in said, said[-3000:]
    assert lines[0].startswith("FAIL hostile-text float32-rows8-hidden16-normal (seed 0): the backend raised "
                               "RuntimeError: downloading 50%\\rdownloading 100%"), lines[0][:300]
    assert b"\x1b" not in out.stdout and len(lines[0]) <= safe_text.LIMIT + 200


@pytest.mark.e2e
def test_list_shows_a_plugins_text_escaped(hostile):
    out = subprocess.run([sys.executable, "-m", "normbench", "list"], cwd=ROOT, env=hostile, capture_output=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert b"\x1b" not in out.stdout and b"\\x1b]0;owned" in out.stdout, out.stdout
