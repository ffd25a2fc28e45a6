"""Every documentation example runs, as written.

* The ``>>>`` examples of every module of the normbench package (normbench,
  normbench.impls, normbench.suites): one test per module that has any. A module
  whose import needs a framework that is not installed here is skipped, saying so.
  (Not ``pytest --doctest-modules harness/``: that imports the modules under the
  folder's name, ``harness.x``, not ``normbench.x``.)
* The complete backend in the docstring of ``normbench.core.backend`` and the example
  package of docs/writing-a-backend.md: their code is read from the docstring and
  the markdown at test time, written out where its entry point (from the docstring,
  from the package's pyproject.toml) says, registered through a fake dist-info like
  an installed plugin, and run: the suites must pass on it, skipping only what it
  declares it lacks.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import pkgutil
import re
import sys
import textwrap
from pathlib import Path

import pytest

import normbench
import normbench.core.backend
import normbench.impls
import normbench.suites
from normbench.check import conformance
from normbench.core import operations
from tests.plugins import ROOT, PluginFolder

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

PACKAGES = (normbench, normbench.impls, normbench.suites)
WRITING_A_BACKEND = ROOT / "docs" / "writing-a-backend.md"


def modules_with_examples() -> list[str]:
    """Every module of the package whose source has a ``>>>`` (found without importing it)."""
    names = []
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            origin = importlib.util.find_spec(info.name).origin
            if origin and origin.endswith(".py") and ">>>" in Path(origin).read_text(encoding="utf-8"):
                names.append(info.name)
    return sorted(names)


MODULES = modules_with_examples()


def test_the_walk_finds_the_examples():
    """The walk reaches every folder of the package (not only normbench's own), so no example is forgotten."""
    assert {"normbench.core.cases", "normbench.perf.verify", "normbench.impls.triton.autograd"} <= set(MODULES), MODULES


class Runner(doctest.DocTestRunner):
    """Notes the frameworks an example needs that are not installed (its import fails)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.missing: set[str] = set()

    def report_unexpected_exception(self, out, test, example, exc_info):
        error = exc_info[1]
        if isinstance(error, ModuleNotFoundError) and error.name and error.name.partition(".")[0] != "normbench":
            self.missing.add(error.name.partition(".")[0])
        super().report_unexpected_exception(out, test, example, exc_info)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if not missing or missing == "normbench":
            raise
        pytest.skip(f"{name} imports {missing}, which is not installed")
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    runner = Runner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    for test in tests:
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    if runner.missing:
        pytest.skip(f"the examples of {name} import {', '.join(sorted(runner.missing))}, which is not installed")
    assert result.attempted > 0, f"{name} has a '>>>' but no doctest ran: is it in a docstring?"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}:\n{out.getvalue()}"


# -- the complete backend, in the Backend docstring and in docs/writing-a-backend.md --------------


def literal_block(text: str, after: str) -> str:
    """The reST literal block (``::`` then an indented block) that follows the first ``after`` in ``text``."""
    lines = text[text.index(after):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith((" ", "\t")) and block:
            break
        block.append(line)
    code = textwrap.dedent("\n".join(block)).strip("\n")
    assert code, f"no literal block after {after!r}"
    return code + "\n"


def fenced_blocks(markdown: str, section: str) -> list[tuple[str, str]]:
    """The fenced code blocks of one ``## section`` of a markdown file: (language, text)."""
    body = markdown.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```(\w*)\n(.*?)^```$", body, flags=re.S | re.M)


def docstring_example(folder) -> str:
    """The docstring's backend written as the module its entry point names, registered; returns the backend's name."""
    doc = normbench.core.backend.__doc__
    name, module, attr = re.search(r'``(\S+) = "(\w+):(\w+)"``', doc).groups()
    folder.module(module, literal_block(doc, "Example, a complete backend"))
    folder.distribution({name: f"{module}:{attr}"}, dist="my-docstring-backend")
    return name


def markdown_example(tmp_path, section: str = "A complete minimal backend") -> tuple[str, Path]:
    """The package of docs/writing-a-backend.md's ``section`` laid out as its tree says, its files as written, its
    pyproject.toml's entry points registered; returns the backend's name and the folder to put on the path."""
    blocks = fenced_blocks(WRITING_A_BACKEND.read_text(encoding="utf-8"), section)
    tree, files = blocks[0][1].split(), {}
    project = tmp_path / tree[0].rstrip("/")
    for path in tree[1:]:
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).touch()
    for _, text in blocks[1:]:
        first, _, rest = text.partition("\n")
        path = first.removeprefix("#").strip()
        assert path in tree[1:], f"a code block for {path}, not in the tree {tree}"
        (project / path).write_text(text)
        files[path] = text
    pyproject = tomllib.loads(files["pyproject.toml"])
    (where,) = pyproject["tool"]["setuptools"]["packages"]["find"]["where"]
    entry_points = pyproject["project"]["entry-points"]["normbench.backends"]
    (name,) = entry_points
    PluginFolder(project / where).distribution(entry_points, dist=pyproject["project"]["name"])
    return name, project / where


def test_the_docstring_backend_passes_a_case(installed_plugins):
    name = docstring_example(installed_plugins)
    backend = normbench.refresh().create(name)
    assert type(backend).__module__ == "my_pkg" and backend.dtypes == ("float64", "float32")
    for case in [c for c in normbench.core.cases.FORWARD_CASES if c.id.startswith("float32-rows8-hidden1000-")]:
        conformance.check_forward(backend, normbench.core.cases.make_inputs(case, 0))


def test_the_markdown_backend_passes_a_case(tmp_path, install_plugins):
    name, folder = markdown_example(tmp_path)
    install_plugins(PluginFolder(folder))
    backend = normbench.refresh().create(name)
    assert type(backend).__module__ == "my_kernels.backend"
    assert normbench.get_registry().plugin(name).distribution == "my-kernels"
    for case in [c for c in normbench.core.cases.FORWARD_CASES if c.id.startswith("float32-rows8-hidden1000-")]:
        conformance.check_forward(backend, normbench.core.cases.make_inputs(case, 0))


@pytest.mark.e2e
@pytest.mark.parametrize("example", ["docstring", "markdown"])
def test_the_suites_pass_on_the_example_backend(example, plugin_folder, pytester, monkeypatch):
    if example == "docstring":
        name, path = docstring_example(plugin_folder), plugin_folder.path
    else:
        name, path = markdown_example(plugin_folder.path)
    monkeypatch.setenv("PYTHONPATH", f"{path}:{ROOT}")
    result = pytester.runpytest_subprocess(str(ROOT / "suites"), f"--normbench-impl={name}", "-n", "2", "-rs",
                                           "--normbench-seed=0", "-p", "no:cacheprovider", timeout=1200)
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and "failed" not in outcomes and outcomes["passed"] >= 150, result.stdout.str()[-3000:]
    # skipped: only what it declares it lacks
    reasons = set(re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", result.stdout.str(), flags=re.M))
    lacks = {f"backend '{name}' does not support {d} (it declares float64, float32)" for d in ("float16", "bfloat16")}
    lacks.add(f"backend '{name}' has no backward (has_backward = False)")
    for op in operations.OPERATIONS[1:]:
        lacks.add(f"{name} implements layer_norm only, not {op.name} (declare operations = ('layer_norm', "
                  f"'{op.name}') and define {op.signature()} to add it)")
    unstrided = {r for r in reasons if r.startswith(f"backend '{name}' has no strided arrays (strided = False), so ")}
    assert lacks <= reasons and reasons - unstrided == lacks and unstrided, reasons
