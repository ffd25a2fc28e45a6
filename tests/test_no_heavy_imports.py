"""`import harness`, the pytest plugin, loading every backend class and
`normbench list` must not import torch, jax or triton (array-api-compat's
test_no_dependencies, in a subprocess so this process's imports do not count)."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "jax", "jaxlib", "triton", "flax")

PROGRAMS = {
    "import harness": "import harness",
    "pytest plugin": "import harness.pytest_plugin",
    "backend classes": "import harness\nr = harness.get_registry()\nfor n in r.names:\n    r.load_class(n); r.availability(n)",
    "normbench list": "from harness.cli import main\nmain(['list'])",
    "throughput modules": "import harness.timing, harness.roofline, harness.results, harness.throughput, "
                          "harness.pytest_throughput, harness.sweep, harness.summary, harness.environment",
    "report modules": "import harness.report, harness.report.sources, harness.report.shape, harness.report.svg, "
                      "harness.report.render",
}


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_no_heavy_imports(program):
    check = f"{program}\nimport sys\nprint('HEAVY:', sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY: []" in out.stdout, f"{program!r} imported a heavy framework: {out.stdout.splitlines()[-1]}"
