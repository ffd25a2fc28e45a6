"""normbench installs next to anything: one top-level import package in the wheel, and a
user's project with its own ``harness``/``suites`` packages and its own ``--impl`` option
keeps working with normbench installed (issue: one import package)."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.plugins import ROOT, counts

pytestmark = pytest.mark.e2e
NORMBENCH = Path(sys.executable).parent / "normbench"


def test_the_wheel_installs_one_top_level_package(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = tmp_path.glob("normbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = [t for t in top if t.endswith(".dist-info")]
    assert top == {"normbench", *dist_info} and len(dist_info) == 1, sorted(top)
    for shipped in ("normbench/suites/test_forward.py", "normbench/suites/conftest.py",
                    "normbench/suites/known_deviations.txt", "normbench/impls/triton/backend.py",
                    "normbench/check/oracle.py", "normbench/report/templates/report.html.j2", "normbench/py.typed"):
        assert shipped in names, shipped
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info[0]}/entry_points.txt").decode()
    assert "normbench.front.pytest_plugin" in entry_points and "normbench.impls.numpy_ref:NumpyBackend" in entry_points
    assert "harness" not in entry_points.replace("normbench", "")


@pytest.fixture
def users_project(tmp_path):
    """A project with its own harness/ and suites/ packages and a conftest.py that defines --impl."""
    project = tmp_path / "project"
    for package in ("harness", "suites"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"WHOSE = 'the user {package}'\n")
    (project / "harness" / "pytest_plugin.py").write_text("")
    (project / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--impl', default='mine')\n")
    (project / "suites" / "test_mine.py").write_text(
        "import harness, suites\n\n"
        "def test_mine(request):\n"
        "    assert request.config.getoption('impl') == 'fast'\n"
        "    assert harness.WHOSE == 'the user harness' and suites.WHOSE == 'the user suites'\n")
    return project


def test_a_users_project_with_its_own_harness_suites_and_impl_runs_its_tests(users_project):
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--impl=fast", "-q"],
                         cwd=users_project, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert counts(out.stdout) == {"passed": 1}, out.stdout[-2000:]


@pytest.mark.skipif(not NORMBENCH.exists(), reason=f"the normbench script is not installed next to {sys.executable}")
def test_normbench_test_from_a_users_project_runs_normbenchs_suites(users_project):
    out = subprocess.run([str(NORMBENCH), "test", "--impl=numpy", "-n", "0", "-q", "-k", "test_forward and hidden1000"],
                         cwd=users_project, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    outcome = counts(out.stdout)
    assert outcome["passed"] > 10 and set(outcome) == {"passed"} and "test_mine" not in out.stdout, out.stdout[-2000:]
