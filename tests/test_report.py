"""The HTML report: contents, escaping, offline, partial runs, bad input (the browser test is test_report_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from normbench.core.storage import ResultsError
from normbench.report import load_result_sets, render_html, survey, write_report
from tests.plugins import ROOT
from tests.report_data import HOSTILE, write_run


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "r1", "r1", {"numpy": 0.1, "torch": 0.3, HOSTILE: 0.2}, errors=("broken",))


def html_of(*folders, baseline="torch"):
    return render_html(load_result_sets(list(folders)), baseline)


def test_a_report_has_every_section(run):
    html = html_of(run)
    for heading in ("At a glance", "Environment", "Byte model", "Throughput", "Speedup against torch",
                    "Conformance", "Failures, with their diagnosis", "Known deviations (xfail)", "Skipped, by reason"):
        assert f"{heading}</h2>" in html or f"{heading}</h3>" in html, heading
    assert html.count("<polyline") == 2 * 3  # forward and backward, one line per backend with correct rows
    assert "ceiling 20 GB/s" in html and "% of ceiling" in html
    assert "M*N*e_x (read x)" in html  # the byte model beside the numbers
    assert "known: fp16 accumulation" in html and "float64 reference 1.6" in html
    assert "No correct throughput row at all for: broken" in html


def test_speedups_are_against_the_chosen_baseline(run):
    html = html_of(run, baseline="numpy")
    section = html[html.index("Speedup against numpy"):html.index("<h2>Conformance")]
    assert "3.00x" in section and "2.00x" in section  # torch 0.3 and the hostile 0.2 over numpy's 0.1
    missing = html_of(run, baseline="nothing")
    assert "the baseline &#39;nothing&#39; has no correct throughput rows" in missing


def test_no_external_resource_of_any_kind(run):
    html = html_of(run)
    for pattern in (r"https?:", r"//cdn", r"<link", r"\bsrc\s*=", r"@import", r"url\("):
        assert not re.search(pattern, html, re.IGNORECASE), pattern
    assert "<script>" not in html and "Content-Security-Policy" in html


def test_every_string_from_results_is_escaped(run):
    """A backend, a host, a command and messages carrying markup render as text (this fails with autoescape off)."""
    html = html_of(run)
    assert HOSTILE not in html
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"<title>{escaped}</title>" in html  # the SVG line's tooltip
    assert re.search(r"<title>" + re.escape(escaped) + r" \[", html) or f"{escaped}</text>" in html  # legend label
    assert f"<td>{escaped}</td>" in html  # tables
    assert f"normbench run --impl=numpy,torch {escaped}" in html  # environment
    data = html[html.index('id="normbench-data">') + 20:html.index("</script>")]
    assert "<" not in data and json.loads(data)[0]["throughput"]  # the embedded JSON cannot close its element


def test_several_result_sets_render_side_by_side(tmp_path):
    a = write_run(tmp_path / "a", "run-a", {"numpy": 0.1, "torch": 0.3}, host="host-a")
    b = write_run(tmp_path / "b", "run-b", {"numpy": 0.2, "torch": 0.4}, host="host-b")
    html = html_of(a, b)
    assert html.count("<polyline") == 2 * 4  # lines per (backend, result set)
    assert "torch [run-a (host-a)]" in html and "torch [run-b (host-b)]" in html
    assert 'stroke-dasharray="6 3"' in html  # the second set is dashed


@pytest.mark.parametrize("parts, stated", [
    ({"throughput": False}, "No throughput was measured: this result set holds no throughput rows"),
    ({"conformance": False}, "No conformance rows in this result set"),
    ({"env": False}, "Missing: the environment"),
    ({"throughput": False, "conformance": False}, "Missing: throughput results"),
])
def test_a_partial_run_renders_and_says_what_is_missing(tmp_path, parts, stated):
    folder = write_run(tmp_path / "p", "p", {"numpy": 0.1}, **parts)
    assert stated in html_of(folder)


#: a finding as long as the survey's: an unbroken token and a command far wider than a table cell
LONG_FINDING = dict(zip(survey.FINDING_FIELDS, (
    "torch", "PyTorch", "2.13.0+cpu", "layer_norm", "float16, bfloat16", "defect",
    "The CPU kernel stores the saved statistics in the input dtype " * 4 + "x" * 300,
    "968x the bound: dx = 0.0221 where float64 gives 0.000327 " * 3,
    "pytest 'suites/test_backward.py::test_backward[torch-bfloat16-rows65537-hidden8-offset3-" + "y" * 200 + "]' "
    "--impl=torch --normbench-seed=0 --normbench-strict",
    "aten/src/ATen/native/cpu/layer_norm_kernel.cpp " * 10)))


def survey_set(folder, findings=(LONG_FINDING,), throughput=False):
    """A conformance run (no throughput rows, as a survey) with judged findings beside its rows."""
    write_run(folder, folder.name, {"numpy": 0.1, "torch": 0.3}, throughput=throughput)
    survey.write_findings(folder / survey.FINDINGS_FILE, list(findings))
    return folder


def h2s(html):
    return re.findall(r"<h2[^>]*>(.*?)</h2>", html)


def test_a_set_without_throughput_opens_with_its_findings_and_no_empty_throughput_section(tmp_path):
    """A survey is conformance only: its findings come first, before any result, and the throughput sections (at a
    glance, byte model, throughput, speedups) are left out, with one line at the top saying why."""
    html = html_of(survey_set(tmp_path / "survey"))
    assert h2s(html) == ["Findings (1)", "Environment", "Conformance", "Data"]
    assert html.count("No throughput was measured") == 1
    assert html.index("No throughput was measured") < html.index('<h2 id="findings">')
    for gone in ("At a glance", "Byte model", "Throughput", "Speedup against", "No correct throughput row",
                 "No throughput rows in any result set"):
        assert gone not in html, gone
    findings = html[html.index('<h2 id="findings">'):html.index("<h2>Environment")]
    assert '<table class="findings">' in findings and "x" * 300 in findings  # all of it, in the first section
    assert "<summary>evidence</summary>aten/src/ATen" in findings  # the evidence folded under the finding
    conformance = html[html.index("<h2>Conformance"):]
    assert '<table class="findings">' not in conformance and 'href="#findings"' in conformance


def test_findings_come_first_in_a_report_with_throughput_too(tmp_path):
    """With throughput rows the throughput sections stay, after the findings; a second set without any says so in
    its own place, not with an empty table."""
    measured = survey_set(tmp_path / "measured", throughput=True)
    bare = write_run(tmp_path / "bare", "bare", {"numpy": 0.1}, throughput=False)
    html = html_of(measured, bare)
    assert h2s(html)[:3] == ["Findings (1)", "At a glance", "Environment"]
    assert {"Byte model", "Throughput", "Speedup against torch", "Conformance"} <= set(h2s(html))
    assert "No throughput was measured: " not in html  # the one-line summary is for a report without any
    assert html.count("No throughput was measured in this result set.") == 2  # bare's at-a-glance and speedups


def test_the_findings_table_is_as_wide_as_the_page(tmp_path):
    """Fixed layout at the page's width, every cell breaking long words: no finding widens the page."""
    html = html_of(survey_set(tmp_path / "survey"))
    css = html[html.index("<style>"):html.index("</style>")]
    assert "table.findings{table-layout:fixed;width:100%}" in css
    assert "table.findings td{overflow-wrap:anywhere" in css
    assert '<table class="findings"><colgroup><col class="n">' in html


CHROMIUM = os.environ.get("NORMBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
#: measures, once loaded, how wide the page and the findings table are (allowed by its hash, as in test_report_browser)
WIDTH_PROBE = ("window.addEventListener('load', () => { const t = document.querySelector('table.findings'); "
               "const out = document.createElement('pre'); out.id = 'probe'; out.textContent = JSON.stringify("
               "{page: document.documentElement.scrollWidth, viewport: window.innerWidth, "
               "table: t.getBoundingClientRect().right}); document.body.appendChild(out); });")


@pytest.mark.e2e
@pytest.mark.skipif(not CHROMIUM, reason="no chromium (see tests/test_report_browser.py)")
def test_in_a_browser_no_finding_widens_the_page(tmp_path):
    html = html_of(survey_set(tmp_path / "survey"))
    digest = base64.b64encode(hashlib.sha256(WIDTH_PROBE.encode()).digest()).decode()
    html = html.replace("script-src 'none'", f"script-src 'sha256-{digest}'").replace(
        "</head>", f"<script>{WIDTH_PROBE}</script></head>")
    page = tmp_path / "probed.html"
    page.write_text(html)
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S)
    assert found, f"the probe did not run:\n{out.stderr[-3000:]}"
    measured = json.loads(found.group(1).replace("&quot;", '"'))
    assert measured["page"] <= measured["viewport"] and measured["table"] <= measured["viewport"], measured


def test_a_single_file_is_a_result_set(run):
    html = html_of(run / "throughput.csv")
    assert "<polyline" in html and "Missing: conformance results" in html


def normbench(*args):
    return subprocess.run([sys.executable, "-m", "normbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def put(name, text, give_folder=False):
    """A maker writing ``text`` to ``name`` in the test folder; it returns the file (or the folder)."""
    def make(folder):
        (folder / name).write_text(text)
        return folder if give_folder else folder / name
    return make


NEWER = json.dumps({"schema": "normbench.throughput", "schema_version": 99, "rows": []})


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "absent", "no results at {path}"),
    (put("throughput.json", ""), "cannot read {path}"),
    (put("throughput.json", '{"rows": ['), "cannot read {path}"),
    (put("conformance.csv", ""), "cannot read {path}"),
    (put("environment.json", "[]", True), "{path}/environment.json is not a normbench"),
    (lambda d: d, "{path} holds no normbench results"),
    (put("throughput.json", NEWER, True), "{path}/throughput.json has normbench.throughput schema version 99, newer"),
], ids=["missing", "empty", "corrupt", "empty-csv", "not-environment", "empty-folder", "newer-schema"])
def test_bad_input_is_one_line_naming_the_file(tmp_path, make, message):
    path = make(tmp_path)
    out = normbench("report", str(path), "-o", str(tmp_path / "out.html"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert message.format(path=path).split("{")[0] in out.stderr, out.stderr
    assert not (tmp_path / "out.html").exists()


def test_report_command_writes_the_file(run, tmp_path):
    out = normbench("report", str(run), "-o", str(tmp_path / "sub" / "r.html"), "--baseline", "numpy")
    assert out.returncode == 0, out.stderr
    assert "Speedup against numpy" in (tmp_path / "sub" / "r.html").read_text()


def test_results_are_read_as_data_only(tmp_path):
    """A pickle named like a results file is refused; no loader is handed it."""
    (tmp_path / "throughput.pkl").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ResultsError, match="not a normbench results file"):
        write_report([tmp_path / "throughput.pkl"], tmp_path / "out.html")


def test_a_saved_table1_is_shown(run):
    out = normbench("table1", "--no-recurrent", f"--save={run}")
    assert out.returncode == 0, out.stderr
    document = json.loads((run / "table1.json").read_text())
    assert document["schema"] == "normbench.table1" and document["schema_version"] == 2
    html = html_of(run)
    section = html[html.index("Table 1 of the paper, measured"):]
    assert "Weight matrix re-scaling" in section and "Layer norm" in section and "(paper:" not in section
    assert "RMSNorm *" in section and "normbench's measurement against normbench's own derivation" in section


def test_a_saved_table1_is_never_written_over(tmp_path):
    (tmp_path / "table1.json").write_text("{}")
    out = normbench("table1", "--no-recurrent", f"--save={tmp_path}")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "table1.json exists, an earlier measurement; it is never written over" in out.stderr
    assert (tmp_path / "table1.json").read_text() == "{}"
    (tmp_path / "file").write_text("")
    out = normbench("table1", "--no-recurrent", f"--save={tmp_path / 'file'}")
    assert out.returncode == 2 and "is a file, not a folder" in out.stderr


def test_fused_throughput_rows_get_panels_of_their_own_with_their_byte_model(tmp_path):
    """A fused operation's rows (docs/fused.md) are panels of their own, labelled with the operation, beside the plain
    ones, and the byte model shows its formula (the residual read, residual_out written)."""
    from normbench.core import storage
    from normbench.perf.roofline import direction_bytes
    from normbench.perf.throughput import THROUGHPUT
    from normbench.report import shape
    from tests.report_data import throughput_rows

    folder = write_run(tmp_path / "f", "f", {"numpy": 0.1, "torch": 0.3})
    plain = storage.load(folder, THROUGHPUT)
    fused = [{**row, "normalization": "add_rms_norm", "case_id": "add-rms-" + str(row["case_id"] or "x"),
              "bytes": direction_bytes(row["rows"], row["hidden"], "float32", row["direction"], norm="add_rms_norm")}
             for row in throughput_rows("f", {"numpy": 0.1, "torch": 0.3})]
    rows = plain.to_dict("records") + fused
    storage.save(folder, storage.frame(rows, THROUGHPUT), THROUGHPUT)
    sets = load_result_sets([folder])
    titles = [f"{p.direction} {p.dtype}" for p in shape.throughput_panels(sets)]
    assert titles == ["forward float32", "backward float32", "forward float32, Add+RMSNorm",
                      "backward float32, Add+RMSNorm"], titles
    assert any("Add+RMSNorm: " in formula and "residual_out" in formula for _, _, formula in shape.byte_models(sets))
    html = render_html(sets, "torch")
    assert html.count("<polyline") == 2 * 2 * 2  # two operations, two directions, a line per backend
