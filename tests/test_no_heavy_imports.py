"""`import normbench`, the pytest plugin, loading every backend class and
`normbench list` must not import torch, jax or triton (array-api-compat's
test_no_dependencies, in a subprocess so this process's imports do not count)."""

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
