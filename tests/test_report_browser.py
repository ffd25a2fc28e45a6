"""The report in a real browser: headless Chromium loads it from a file, with no network.

A probe script is added to a copy of the report (the report itself has none,
and its Content-Security-Policy forbids scripts, so the probe is allowed by its
hash only). The probe records errors and alert() calls from the first moment,
then measures the drawn charts and writes what it found into the DOM, which
``--dump-dom`` returns. A screenshot of the report is saved next to it.
Chromium: Debian's ``chromium`` (``tests/ensure_chromium.sh``, run by ``tox -e core``,
installs it with apt in CI or with NORMBENCH_INSTALL_CHROMIUM=1), or ``$NORMBENCH_CHROMIUM``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from normbench.report import load_result_sets, render_html
from tests.report_data import HOSTILE, write_run

CHROMIUM = os.environ.get("NORMBENCH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not CHROMIUM, reason="no chromium: install Debian's chromium, set NORMBENCH_CHROMIUM, "
                                                      "or run NORMBENCH_INSTALL_CHROMIUM=1 tox -e core (tox installs it "
                                                      "with apt, as root; CI does this)")]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")

PROBE = """
window.__errors = []; window.__alerts = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
window.alert = m => window.__alerts.push(String(m));
const _error = console.error; console.error = (...a) => { window.__errors.push(a.join(' ')); _error(...a); };
window.addEventListener('load', () => {
  const lines = [...document.querySelectorAll('svg polyline')].map(p => {
    const b = p.getBBox(); const r = p.getBoundingClientRect();
    return {points: p.points.numberOfItems, w: b.width, h: b.height, rw: r.width, visible: r.width > 0 || r.height > 0};
  });
  const svgs = [...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width);
  const out = document.createElement('pre'); out.id = 'probe';
  out.textContent = JSON.stringify({lines, svgs, errors: window.__errors, alerts: window.__alerts,
    scripts: [...document.scripts].filter(s => !s.type || /javascript|module/.test(s.type)).length,
    text: document.body.innerText.includes(HOSTILE_JS)});
  document.body.appendChild(out);
});
""".replace("HOSTILE_JS", json.dumps(HOSTILE).replace("<", "\\u003c"))


def chromium(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout)


def with_probe(html: str) -> str:
    """The report with the probe as the first script, allowed by its hash in the report's own CSP."""
    digest = base64.b64encode(hashlib.sha256(PROBE.encode()).digest()).decode()
    assert "script-src 'none'" in html
    html = html.replace("script-src 'none'", f"script-src 'sha256-{digest}'")
    csp = html.index("<meta http-equiv=\"Content-Security-Policy\"")
    end = html.index(">", csp) + 1
    return f"{html[:end]}<script>{PROBE}</script>{html[end:]}"  # after the CSP: only its hash lets it run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    run = write_run(folder / "r1", "r1", {"numpy": 0.1, "torch": 0.3, HOSTILE: 0.2}, errors=("broken",))
    other = write_run(folder / "r2", "r2", {"numpy": 0.15, "torch": 0.35}, host="other")
    html = render_html(load_result_sets([run, other]))
    (folder / "report.html").write_text(html)
    (folder / "probed.html").write_text(with_probe(html))
    return folder


def test_the_charts_are_drawn_without_errors(report):
    out = chromium("--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
                   (report / "probed.html").as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S)
    assert found, f"the probe did not run:\n{out.stderr[-3000:]}"
    probe = json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert probe["errors"] == [] and probe["alerts"] == []
    assert probe["scripts"] == 1  # the probe alone (the data is JSON): the hostile backend name made no script
    assert probe["text"], "the hostile backend name is not shown as text"
    assert len(probe["lines"]) == 2 * 5  # forward and backward: 3 backends of r1 and 2 of r2
    for line in probe["lines"]:
        assert line["points"] == 3 and line["w"] > 100 and line["h"] >= 0 and line["rw"] > 100, line
    assert probe["svgs"] and min(probe["svgs"]) > 300
    console = [ln for ln in out.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "Refused" in ln]
    assert console == []


def test_a_screenshot_is_taken(report):
    shot = report / "report.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,2000", (report / "report.html").as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page is a few kB
