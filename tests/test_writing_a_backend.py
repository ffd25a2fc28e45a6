"""docs/writing-a-backend.md's torch RMSNorm backend, built from the page alone: its package laid out as the
page's tree says, its files as written, registered as its pyproject.toml says; it imports only public names
and passes the suites (issue 26: a backend written from the page, against the public names only)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from normbench.kit.testing import imported_frameworks, junit_outcomes
from tests.plugins import ROOT, counts, pytest_command, subprocess_env
from tests.test_doctests import markdown_example

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

SECTION = "A complete torch RMSNorm backend"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the page's backend wraps torch")


def build(tmp_path: Path) -> tuple[str, Path]:
    """The page's package under ``tmp_path`` (tests/test_doctests.py lays it out): (backend name, the folder to put
    on the path)."""
    return markdown_example(tmp_path, SECTION)


def test_the_page_backend_imports_only_public_names(tmp_path):
    _, folder = build(tmp_path)
    tree = ast.parse((folder / "my_rms" / "backend.py").read_text(encoding="utf-8"))
    used = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {m for m in used if m.startswith("normbench")} == {"normbench.kit", "normbench.kit.torch"}


def test_the_page_backend_is_lazy(tmp_path):
    name, folder = build(tmp_path)
    env = subprocess_env(folder)
    assert imported_frameworks("my_rms.backend", ("torch",), env=env) == []


@pytest.mark.e2e
def test_the_page_backend_passes_the_suites(tmp_path):
    name, folder = build(tmp_path)
    junit = tmp_path / "junit.xml"
    out = __import__("subprocess").run(
        pytest_command(str(ROOT / "suites"), f"--normbench-impl={name}", "-n", "2", "--normbench-seed=0", "-q",
                       f"--junitxml={junit}"),
        cwd=tmp_path, env=subprocess_env(folder), capture_output=True, text=True, timeout=1200)
    found = counts(out.stdout)
    assert out.returncode == 0 and "failed" not in found and found.get("passed", 0) > 150, out.stdout[-3000:]
    outcomes = junit_outcomes(junit)
    ran = [t for t, (outcome, _) in outcomes.items() if outcome == "passed"]
    assert ran and all(f"[{name}-rms-" in t for t in ran), "only RMSNorm's cases run"
    skipped = {message for outcome, message in outcomes.values() if outcome == "skipped"}
    assert any(f"{name} implements rms_norm only, not layer_norm" in m for m in skipped), skipped
