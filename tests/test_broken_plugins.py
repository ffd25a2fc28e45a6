"""Broken plugins through the surfaces users meet: ``normbench list``, the header of
``pytest suites/ --impl=all`` and ``normbench test``. Each kind of breakage is reported with
the plugin's distribution and a fix, and the other backends keep working (a working
plugin of the same distribution included). tests/test_registry.py covers the same
kinds through the registry's API.
"""

import subprocess
import sys

import pytest

from normbench import __version__
from normbench.suites import DIRECTORY as SUITES
from tests.plugins import ROOT, pytest_command

BROKEN = '''
from normbench import Backend
from tests.mutants import Fp32Kernel


class RaisesInAvailability(Fp32Kernel):
    name = "raises-availability"

    @classmethod
    def availability(cls):
        raise RuntimeError("probe crashed")


class NotABackend:
    name = "not-a-backend"


class Abstract(Backend):
    name = "abstract"


class BadDtypes(Fp32Kernel):
    name = "bad-dtypes"
    dtypes = ("fp16",)


class BadDeviations(Fp32Kernel):
    name = "bad-deviations"
    known_deviations = ["*-offset1e4"]


class Good(Fp32Kernel):
    name = "acme-good"


class Clone(Fp32Kernel):
    name = "acme-good"
'''

DIST = "acme-kernels"
#: entry-point name -> what the report must say about it (besides the distribution and "Fix:")
BROKEN_NAMES = {
    "import-fails": "failed to import: ModuleNotFoundError: No module named 'no_such_module_for_normbench'",
    "raises-availability": "availability() raised RuntimeError: probe crashed",
    "not-a-backend": "is not a normbench.Backend subclass",
    "Bad Name": "backend name 'Bad Name' from distribution acme-kernels is not valid",
    "abstract": "it does not implement asarray, to_numpy (abstract in normbench.Backend)",
    "bad-dtypes": "dtypes = ('fp16',) is not a non-empty sequence of float64, float32, float16, bfloat16",
    "bad-deviations": "known_deviations must map test patterns to reasons",
}
CLASH = "backend name 'acme-good' is claimed by several distributions: acme-clone (broken_plugins:Clone), acme-kernels"


@pytest.fixture(scope="module")
def plugins(make_plugins):
    targets = {"import-fails": "no_such_module_for_normbench:Backend", "raises-availability": "RaisesInAvailability",
               "not-a-backend": "NotABackend", "Bad Name": "Good", "abstract": "Abstract", "bad-dtypes": "BadDtypes",
               "bad-deviations": "BadDeviations", "acme-good": "Good"}
    plugins = make_plugins({n: t if ":" in t else f"broken_plugins:{t}" for n, t in targets.items()}, dist=DIST,
                           modules={"broken_plugins": BROKEN})
    plugins.distribution({"acme-good": "broken_plugins:Clone", "numpy": "broken_plugins:Good"}, dist="acme-clone")
    return plugins


@pytest.fixture(scope="module")
def env(plugins):
    return plugins.env


def lines_about(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if f"'{name}'" in line]


def assert_reported(text: str) -> None:
    """Every broken plugin has a line naming it, its distribution, what is wrong and the fix."""
    for name, what in BROKEN_NAMES.items():
        about = lines_about(text, name)
        assert any(what in line and DIST in line and "Fix:" in line for line in about), (name, about or text[-3000:])


def test_normbench_list(env):
    out = subprocess.run([sys.executable, "-m", "normbench", "list"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert_reported(out.stdout)
    assert CLASH in out.stdout and "backend name 'numpy' is claimed by several distributions" in out.stdout
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line and not line.startswith("problem:")}
    assert " yes " in rows["numpy"] and f"normbench {__version__}" in rows["numpy"]
    assert " yes " in rows["acme-good"] and "acme-clone 0.0.0" in rows["acme-good"]
    for name in ("import-fails", "raises-availability", "not-a-backend", "abstract", "bad-dtypes", "bad-deviations"):
        assert "no: broken plugin (see below)" in rows[name], rows[name]


@pytest.mark.e2e
def test_pytest_impl_all_header(env):
    out = subprocess.run(pytest_command(str(SUITES / "test_forward.py"), "--impl=all", "--collect-only",
                                        "-k", "float32-rows5-hidden1000-offset3 and (numpy or acme-good) and not rms "
                                              "and not add-"),
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    header = [line for line in out.stdout.splitlines() if line.startswith("normbench")]
    assert_reported("\n".join(line for line in header if line.startswith("normbench: skipped")))
    assert any(line.startswith("normbench: warning: ") and CLASH in line for line in header), header
    assert "test_forward[numpy-float32-rows5-hidden1000-offset3]>" in out.stdout
    assert "test_forward[acme-good-float32-rows5-hidden1000-offset3]>" in out.stdout


@pytest.mark.e2e
def test_normbench_test_runs_the_others_and_names_a_broken_one(plugins, env, runner):
    result = runner.command("normbench.front.cli", "test", "-n", "0", "--impl=numpy,acme-good",
                            "-k", "test_forward and float32-rows5-hidden1000-offset3 and not rms and not add-", plugins=plugins,
                            timeout=300)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=2)
    assert "normbench: warning: " + CLASH in result.stdout.str()
    run = [sys.executable, "-m", "normbench", "test", "-n", "0"]
    for name in ("import-fails", "not-a-backend", "abstract", "bad-dtypes", "bad-deviations", "raises-availability"):
        out = subprocess.run([*run, f"--impl={name}", "--collect-only"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 4, (name, out.stdout[-2000:])
        assert BROKEN_NAMES[name] in out.stderr and DIST in out.stderr and "Fix:" in out.stderr, (name, out.stderr)
        assert "Traceback" not in out.stderr
