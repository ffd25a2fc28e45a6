"""The plugin author's workflow, end to end, with nothing from this checkout on sys.path:
build the normbench wheel and the example plugin's wheel, install both into a fresh
virtual environment (their dependencies from the package index), and, from an empty
folder, list the backends and run a few suite cases on the plugin's backend.

Slow (a fresh venv with jax and flax: minutes): marked ``slow``, deselected in CI
(``-m "not slow"``); run it with ``tox -e workflow`` or ``pytest tests/test_plugin_workflow.py``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normbench import __version__
from tests.plugins import ROOT, counts

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
CASES = "test_forward and not rms and not add- and (float32-rows8-hidden1000-offset1e3 or bfloat16-rows5-hidden1000-offset3)"


def sh(*args: str | Path, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER", "VIRTUAL_ENV")}
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(map(str, args))}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_install_the_wheels_list_and_run_the_suites_on_the_plugin(tmp_path):
    wheels, elsewhere = tmp_path / "wheels", tmp_path / "elsewhere"
    elsewhere.mkdir()
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, ROOT, ROOT / "examples" / "normbench-flax",
       cwd=tmp_path)
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert [n.split("-")[0] for n in built] == ["normbench", "normbench_flax"], built
    sh(sys.executable, "-m", "venv", tmp_path / "venv", cwd=tmp_path)
    python, normbench = tmp_path / "venv" / "bin" / "python", tmp_path / "venv" / "bin" / "normbench"
    sh(python, "-m", "pip", "install", "-q", *sorted(wheels.glob("*.whl")), cwd=tmp_path)

    where = sh(python, "-c", "import normbench.suites, normbench_flax; print(normbench.__file__, normbench.suites.__file__)",
               cwd=elsewhere).stdout
    assert str(ROOT) not in where and "site-packages" in where, where

    listing = sh(normbench, "list", cwd=elsewhere).stdout
    rows = {line.split()[0]: line for line in listing.splitlines()[1:] if line and not line.startswith("problem")}
    for name in ("flax", "flax-stable"):
        assert "normbench-flax 0.1.0" in rows[name] and " yes " in rows[name], listing
    assert " yes " in rows["numpy"] and "problem:" not in listing, listing

    stable = sh(normbench, "test", "--impl=flax-stable", "-n", "0", "-k", CASES, cwd=elsewhere).stdout
    assert counts(stable) == {"passed": 2}, stable[-3000:]
    assert f"normbench {__version__}: backends flax-stable (" in stable, stable[:2000]

    default = subprocess.run([normbench, "test", "--impl=flax", "-n", "0", "-k", CASES, "--normbench-strict"],
                             cwd=elsewhere, capture_output=True, text=True, timeout=900)
    assert default.returncode == 1 and counts(default.stdout) == {"failed": 1, "passed": 1}, default.stdout[-3000:]
    assert "test_forward[flax-float32-rows8-hidden1000-offset1e3]" in default.stdout and "> bound" in default.stdout
