"""`import normbench`, the pytest plugin, loading every backend class and
`normbench list` must not import torch, jax or triton (array-api-compat's
test_no_dependencies, in a subprocess so this process's imports do not count)."""

import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "jax", "jaxlib", "triton", "flax")

PROGRAMS = {
    "import normbench": "import normbench",
    "pytest plugin": "import normbench.front.pytest_plugin",
    "backend classes": "import normbench\nr = normbench.get_registry()\n"
                       "for n in r.names:\n    r.load_class(n); r.availability(n)",
    "normbench list": "from normbench.front.cli import main\nmain(['list'])",
    "throughput modules": "import normbench.perf.timing, normbench.perf.roofline, normbench.core.storage, "
                          "normbench.perf.throughput, normbench.front.pytest_throughput, normbench.perf.sweep, "
                          "normbench.report.text, normbench.core.environment",
    "report modules": "import normbench.report, normbench.report.sources, normbench.report.shape, normbench.report.svg, "
                      "normbench.report.render",
}


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_no_heavy_imports(program):
    check = f"{program}\nimport sys\nprint('HEAVY:', sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY: []" in out.stdout, f"{program!r} imported a heavy framework: {out.stdout.splitlines()[-1]}"


def test_no_normbench_process_lets_jax_preallocate_the_gpu():
    """JAX preallocates 75 % of a GPU in every process that imports it; normbench's parent and workers would starve
    torch or fail JAX's start (issue 29). ``import normbench`` sets the default; a user's own setting wins."""
    code = "import os, normbench; print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))"
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    said = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert said.stdout.strip() == "false", said.stderr
    mine = subprocess.run([sys.executable, "-c", code], env={**env, "XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
                          capture_output=True, text=True, timeout=60)
    assert mine.stdout.strip() == "true", mine.stderr
