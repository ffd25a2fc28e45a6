"""Fixtures shared by the tests: fake plugins, registered the way an installed one is.

A fake plugin is a folder holding ``<dist>-0.0.0.dist-info`` (METADATA and an
``entry_points.txt``; the pandas plotting-backend test trick) beside the plugin's
modules. ``importlib.metadata`` finds its entry points once the folder is on
``sys.path`` (:func:`installed_plugins`, in this process) or on ``PYTHONPATH``
(:attr:`PluginFolder.env`, for a subprocess). Nothing is pip-installed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import normbench
from tests.plugins import ROOT, PluginFolder

try:
    import fcntl
except ImportError:  # pragma: no cover (not POSIX: each xdist worker computes for itself)
    fcntl = None

pytest_plugins = ["pytester"]


MakePlugins = Callable[..., PluginFolder]


def _make(folder: Path, entry_points: dict[str, str] | None, dist: str, modules: dict[str, str] | None) -> PluginFolder:
    plugins = PluginFolder(folder)
    for name, source in (modules or {}).items():
        plugins.module(name, source)
    if entry_points:
        plugins.distribution(entry_points, dist=dist)
    return plugins


@pytest.fixture(scope="session")
def make_plugins(tmp_path_factory) -> MakePlugins:
    """``make_plugins(entry_points, dist=..., modules={name: source})``: a new :class:`PluginFolder`
    holding one distribution and these modules, for subprocesses (its ``env``). Usable from
    fixtures of any scope."""

    def make(entry_points: dict[str, str] | None = None, dist: str = "normbench-test-plugins",
             modules: dict[str, str] | None = None) -> PluginFolder:
        return _make(tmp_path_factory.mktemp("plugins"), entry_points, dist, modules)

    return make


@pytest.fixture
def plugin_folder(tmp_path) -> PluginFolder:
    """An empty :class:`PluginFolder` under this test's tmp_path."""
    return PluginFolder(tmp_path)


@pytest.fixture
def install_plugins() -> Iterator[Callable[[PluginFolder], PluginFolder]]:
    """``install_plugins(folder)``: put a :class:`PluginFolder` on this process's ``sys.path``, so
    its distributions' entry points are installed for ``importlib.metadata`` (``normbench.refresh()``
    shows them in the global registry). After the test sys.path is restored, the modules
    imported from the folders are forgotten and the global registry is refreshed without them
    (checked: none of their backends is left, and numpy still is)."""
    folders: list[PluginFolder] = []

    def install(folder: PluginFolder) -> PluginFolder:
        mp.syspath_prepend(str(folder.path))
        folders.append(folder)
        return folder

    with pytest.MonkeyPatch.context() as mp:
        yield install
    for folder in folders:
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").is_relative_to(folder.path):
                del sys.modules[name]
    importlib.invalidate_caches()
    restored = normbench.refresh()
    fakes = {dist for folder in folders for dist in folder.distributions}
    assert not [n for n in restored.names if restored.plugin(n).distribution in fakes], "a fake plugin outlived its test"
    assert "numpy" in restored.names


@pytest.fixture
def installed_plugins(plugin_folder, install_plugins) -> PluginFolder:
    """An empty :class:`PluginFolder` under tmp_path, installed in this process (:func:`install_plugins`)."""
    return install_plugins(plugin_folder)


@pytest.fixture(scope="session")
def once_per_run(tmp_path_factory, worker_id) -> Callable[[str, Callable[[], object]], object]:
    """``once_per_run(key, compute)``: ``compute()`` once per pytest run, even under pytest-xdist
    (each worker has its own module- and session-scoped fixtures, so an expensive one, a whole
    suite in a subprocess, would otherwise run on every worker that gets one of its tests).
    The first worker to ask computes it under a lock and stores it as JSON; the others read
    that. ``compute`` must return JSON data."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root  # the workers' basetemps share this run's folder

    def get(key: str, compute: Callable[[], object]) -> object:
        stored = root / f"once-{key}.json"
        with open(root / f"once-{key}.lock", "w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            if stored.exists():
                return json.loads(stored.read_text())
            data = compute()
            stored.write_text(json.dumps(data))
            return data

    return get


class Runner:
    """pytest, or a command, in a subprocess through pytester, from the checkout's root with the
    checkout (and a :class:`PluginFolder`, if given) on PYTHONPATH; each returns a ``pytest.RunResult``:
    ``ret``, ``stdout``/``stderr`` (``.str()``, ``.lines``, ``fnmatch_lines``), ``parseoutcomes()``,
    ``assert_outcomes(passed=..., xfailed=...)`` (every outcome not named must be 0)."""

    def __init__(self, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pytester, self.monkeypatch = pytester, monkeypatch

    def pytest(self, *args: str, plugins: PluginFolder | None = None, timeout: float = 600) -> pytest.RunResult:
        """``pytest *args`` (pytester adds a --basetemp of its own)."""
        with self._plugins_on_path(plugins):
            return self.pytester.runpytest_subprocess(*args, timeout=timeout)

    def command(self, *args: str, plugins: PluginFolder | None = None, timeout: float = 600) -> pytest.RunResult:
        """``python -m *args``, e.g. ``command("normbench.front.cli", "test", ...)``."""
        with self._plugins_on_path(plugins):
            return self.pytester.run(sys.executable, "-m", *args, timeout=timeout)

    @contextlib.contextmanager
    def _plugins_on_path(self, plugins: PluginFolder | None) -> Iterator[None]:
        with self.monkeypatch.context() as mp:
            if plugins is not None:
                mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins.path), os.environ.get("PYTHONPATH")])))
            yield


@pytest.fixture
def runner(pytester, monkeypatch) -> Runner:
    """A :class:`Runner`: pytest or a command in a subprocess, its outcomes parsed by pytest itself."""
    monkeypatch.chdir(ROOT)  # pytester puts the current directory first on PYTHONPATH: the checkout, for tests.*
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    return Runner(pytester, monkeypatch)
