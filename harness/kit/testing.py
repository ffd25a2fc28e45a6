"""What a plugin's own tests need, installed with normbench (docs/writing-a-backend.md, "Testing your plugin").

Three proofs a plugin's test file makes, each one call:

* :func:`imported_frameworks`: importing the plugin's module, and ``normbench list``, import none of its
  heavy frameworks (``normbench list`` reads every plugin's class attributes, and must stay light);
* :func:`run_doctests`: the examples in the plugin's docstrings run as written;
* :func:`run_suite_tests`: chosen tests of normbench's suites run on the plugin's backend in a subprocess (a
  fresh process: a framework's global state, or a crash, cannot leak into the plugin's test run), with their
  outcomes read back from pytest's JUnit XML (:func:`junit_outcomes`): how a plugin proves that a finding it
  declares as a known deviation still fails under ``--normbench-strict`` and is declared without it.

For example (what ``examples/normbench-flax``'s tests do)::

    from normbench.kit.testing import imported_frameworks, run_doctests, run_suite_tests

    def test_importing_the_plugin_imports_no_framework():
        assert imported_frameworks("normbench_flax.backends", ("flax", "jax")) == []

    def test_doctests():
        import normbench_flax.backends
        assert run_doctests(normbench_flax.backends).failed == 0

    def test_the_finding_still_fails(tmp_path):
        out, results = run_suite_tests("flax", ["test_forward[{}-float32-rows8-hidden1000-offset1e3]"],
                                       tmp_path / "junit.xml", "--normbench-strict")
        assert results["test_forward[flax-float32-rows8-hidden1000-offset1e3]"][0] == "failure"
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

#: what ``normbench list`` does to every installed backend: import its class and ask its availability
LISTING = """
from normbench import NormbenchError, get_registry
registry = get_registry()
for name in registry.names:
    try:
        registry.load_class(name), registry.availability(name)
    except NormbenchError:
        pass
"""


def imported_frameworks(module: str, frameworks: Sequence[str], *, listing: bool = True,
                        env: Mapping[str, str] | None = None) -> list[str]:
    """The ``frameworks`` (top-level module names, e.g. ``("flax", "jax")``) that ``import module`` and, with
    ``listing``, ``normbench list`` (which loads every installed plugin's class) leave imported, in a fresh
    Python process: [] when the plugin is lazy, as it must be.

    >>> imported_frameworks("normbench.kit", ("torch", "jax"), listing=False)
    []
    """
    code = (f"import importlib, json, sys\nimportlib.import_module({module!r})\n"
            + (LISTING if listing else "")
            + f"print(json.dumps(sorted(m for m in {list(frameworks)!r} if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env=None if env is None else dict(env))
    if out.returncode != 0:
        raise AssertionError(f"importing {module} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_doctests(module: ModuleType, *, verbose: bool = False) -> doctest.TestResults:
    """The doctests of ``module`` (its docstrings' ``>>>`` examples), run as written, with ``...`` matching anything and
    runs of whitespace equal; ``.failed`` is 0 when they pass."""
    return doctest.testmod(module, verbose=verbose, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)


def suite_file(test: str) -> Path:
    """The file of normbench's installed suites that defines the test function ``test`` (``test_forward``:
    ``.../normbench/suites/test_forward.py``)."""
    from normbench.suites import DIRECTORY

    name = test.split("[")[0]
    for path in sorted(DIRECTORY.glob("test_*.py")):
        if re.search(rf"^def {re.escape(name)}\(", path.read_text(encoding="utf-8"), flags=re.M):
            return path
    raise ValueError(f"no suite defines {name!r}; the suites are {sorted(p.name for p in DIRECTORY.glob('test_*.py'))}")


def junit_outcomes(junit_xml: str | os.PathLike) -> dict[str, tuple[str, str]]:
    """Per test name in a JUnit XML file: its outcome ("passed", "failure", "error" or "skipped", a declared
    known deviation included) and the message."""
    results = {}
    for case in ET.parse(junit_xml).iter("testcase"):
        found = [(e.tag, e.get("message", "")) for e in case if e.tag in ("failure", "error", "skipped")]
        results[case.get("name")] = found[0] if found else ("passed", "")
    return results


def run_suite_tests(backend: str, tests: Sequence[str], junit: str | os.PathLike, *args: str, seed: int = 0,
                    env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
                    timeout: float = 600) -> tuple[subprocess.CompletedProcess, dict[str, tuple[str, str]]]:
    """pytest in a subprocess on these tests of normbench's suites for ``backend`` (ids with ``{}`` for the
    backend's name, e.g. ``test_forward[{}-float32-rows8-hidden1000-offset1e3]``), one seed, ``args`` passed on
    (``--normbench-strict``): the finished process, and per test its outcome and message (:func:`junit_outcomes`).
    An empty ``tests`` runs every suite test (conformance only) on the backend."""
    from normbench.suites import DIRECTORY

    ids = [f"{suite_file(t)}::{t.format(backend)}" for t in tests] or [str(DIRECTORY)]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *ids, f"--normbench-impl={backend}", "-rx",
               f"--normbench-seed={seed}", f"--junitxml={junit}", *args]
    out = subprocess.run(command, cwd=cwd, env=None if env is None else dict(env), capture_output=True, text=True,
                         timeout=timeout)
    return out, junit_outcomes(junit) if Path(junit).is_file() else {}
