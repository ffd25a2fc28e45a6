"""Register backends as a plugin would, without installing anything.

Writes ``<dist>-0.0.0.dist-info`` with an ``entry_points.txt`` under a folder
(the pandas plotting-backend test trick); put that folder on ``sys.path`` or
``PYTHONPATH`` and ``importlib.metadata`` finds the entry points. A test gets such
a folder, a :class:`PluginFolder`, from the fixtures of tests/conftest.py:
``make_plugins`` (any scope, for subprocesses), ``plugin_folder``, and
``installed_plugins`` / ``install_plugins`` (on this process's sys.path).
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def write_dist_info(folder: Path, entry_points: dict[str, str], dist: str = "normbench-test-plugins",
                    group: str = "normbench.backends") -> Path:
    info = folder / f"{dist.replace('-', '_')}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.0\n")
    lines = [f"[{group}]"] + [f"{name} = {target}" for name, target in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return folder


class PluginFolder:
    """A folder of fake installed distributions and the modules their entry points name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: the modules written here, by name
        self.modules: list[str] = []
        #: the distributions written here, by name
        self.distributions: list[str] = []

    def module(self, name: str, source: str) -> str:
        """Write the module ``name`` (dots make packages) with ``source``; returns ``name``."""
        file = self.path.joinpath(*name.split(".")).with_suffix(".py")
        file.parent.mkdir(parents=True, exist_ok=True)
        for package in list(file.relative_to(self.path).parents)[:-1]:
            (self.path / package / "__init__.py").touch()
        file.write_text(textwrap.dedent(source))
        self.modules.append(name)
        importlib.invalidate_caches()
        return name

    def distribution(self, entry_points: dict[str, str], dist: str = "normbench-test-plugins",
                     group: str = "normbench.backends") -> str:
        """A fake installed distribution ``dist`` registering ``entry_points`` (name -> "module:attr")."""
        write_dist_info(self.path, entry_points, dist=dist, group=group)
        self.distributions.append(dist)
        importlib.invalidate_caches()
        return dist

    @property
    def env(self) -> dict[str, str]:
        """The environment for a subprocess that sees these plugins (and tests/)."""
        return subprocess_env(self.path)


def subprocess_env(*paths: Path) -> dict[str, str]:
    """The current environment with ``paths`` (and tests/) first on PYTHONPATH."""
    env = dict(os.environ)
    parts = [str(p) for p in paths] + [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def counts(stdout: str) -> dict[str, int]:
    """The outcomes on pytest's summary line, parsed by pytest itself, e.g. ``{"passed": 1, "xfailed": 1}``
    (deselected left out), for a pytest run that pytester does not start: one in a real installed
    environment (a fresh venv, a user's project). Elsewhere use the ``runner`` fixture's ``assert_outcomes``."""
    nouns = pytest.RunResult.parse_summary_nouns(stdout.splitlines())
    return {word: n for word, n in nouns.items() if word != "deselected"}




def outcomes_by_backend(junit_xml: Path, backends: list[str]) -> dict[str, Counter]:
    """Per backend: Counter of passed/failed/skipped, and the failing test names under "failures"."""
    result: dict[str, Counter] = defaultdict(Counter)
    names = sorted(backends, key=len, reverse=True)
    for case in ET.parse(junit_xml).iter("testcase"):
        param = case.get("name", "").partition("[")[2]
        backend = next((b for b in names if param == f"{b}]" or param.startswith(f"{b}-")), None)
        if backend is None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            result[backend]["failed"] += 1
            result[backend][f"caught by {case.get('name').partition('[')[0]}"] += 1
        elif case.find("skipped") is not None:
            result[backend]["skipped"] += 1
        else:
            result[backend]["passed"] += 1
    return result
