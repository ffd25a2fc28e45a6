"""The package's layering (docs/architecture.md), read from the source of every module, without holes:
which room may import which; nothing imports the CLI or the pytest plugin; no import cycle at any level
(a lazy import inside a function closes a cycle as surely as one at the top); the example plugins and the
built-in backends import public names only; the tests import modules that exist, never a moved path.

Every import is seen: ``import a.b``, ``from a import b``, relative imports (``from ..perf import timing``)
resolved against the importing module's package, imports inside functions, ``try:``, ``if`` and class
bodies, and ``importlib.import_module(...)`` / ``__import__(...)`` of a literal name (or of an f-string's
literal prefix: ``f"normbench.impls.triton.{name}"`` imports a module of that package). A dynamic import of
a name the source does not spell is allowed only where :data:`DYNAMIC` says why. Each rule has a case
below proving it fails on a crossing."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import normbench
import normbench.impls
import normbench.kit
import normbench.suites
from normbench.core.moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
ROOTS = {"normbench": Path(normbench.__file__).parent, "normbench.impls": Path(normbench.impls.__file__).parent,
         "normbench.suites": Path(normbench.suites.__file__).parent}
ROOMS = ("core", "kit", "check", "paper", "perf", "report", "front", "impls", "suites")
#: never imported by anything but ``python -m normbench``: entry points only
ENTRY_POINTS = {"normbench.front.cli", "normbench.front.pytest_plugin"}
#: room -> the rooms it may import (docs/architecture.md, "Which way imports go")
ALLOWED = {
    "core": {"core"},
    "kit": {"core", "kit"},
    "check": {"core", "check"},
    "paper": {"core", "check", "paper"},
    "perf": {"core", "kit", "check", "perf"},
    "report": {"core", "check", "paper", "perf", "report"},
    "impls": {"core", "kit", "impls"},
    "front": {"core", "kit", "check", "paper", "perf", "report", "front"},
    "suites": {"core", "check", "paper", "perf", "front"},
}
#: the imports of a name the source does not spell, each with why it must be dynamic
DYNAMIC = {
    "normbench.core.registry": "a plugin's module, named by its entry point",
    "normbench.core.moved": "normbench 0.2's module paths, answered with their new modules",
    "normbench.front.counts": "the kernel provider --kernels names on the command line",
}
#: what a backend's package (an example plugin, a built-in backend) may import of normbench: the package's public
#: names and the kit (docs/writing-a-backend.md, "The public kit")
PUBLIC_MODULES = {"normbench", "normbench.kit", "normbench.kit.torch", "normbench.kit.jax", "normbench.kit.triton",
                  "normbench.kit.layout", "normbench.kit.testing", "normbench.kit.composed"}


def room(module: str) -> str:
    """``normbench.check.oracle`` -> "check"; the package's ``__init__`` is core, ``python -m normbench`` front."""
    parts = module.split(".")
    if module == "normbench.suites":
        return "core"  # its __init__ only says where the suites live
    if len(parts) > 1 and parts[1] in ROOMS:
        return parts[1]
    return "front" if module == "normbench.__main__" else "core"


def module_files() -> dict[str, Path]:
    found = {}
    for package, base in ROOTS.items():
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "normbench" and parts and parts[0] in ("impls", "suites"):
                continue
            found[".".join([package, *parts])] = path
    return found


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _literal_prefix(node: ast.AST) -> tuple[str, bool] | None:
    """The module name a call's first argument spells: ``("a.b", True)`` for a literal, ``("a.b.", False)`` for an
    f-string's literal prefix; None when nothing is literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value), False
    return None


def imports(source: str, module: str, package: str, known: set[str], module_level_only: bool = False,
            dynamic: list | None = None) -> set[str]:
    """The normbench modules ``source`` (the module ``module`` of package ``package``) imports, at every level (or,
    with ``module_level_only``, outside functions); ``dynamic`` collects the imports whose name is not spelled."""
    tree = ast.parse(source)
    out: set[str] = set()

    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or "?"

    def visit(node: ast.AST, in_function: bool) -> None:
        if module_level_only and in_function:
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "normbench")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] == "normbench":
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    out.add(sub if sub in known else base)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__") and node.args:
                spelled = _literal_prefix(node.args[0])
                if spelled is None or not spelled[0].startswith("normbench"):
                    if dynamic is not None and spelled is None:
                        dynamic.append((module, node.lineno))
                elif spelled[1]:
                    out.add(spelled[0])
                else:
                    out.add(resolve(spelled[0].rstrip(".")))
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def graph(files: dict[str, Path], module_level_only: bool = False, dynamic: list | None = None) -> dict[str, set[str]]:
    known = set(files)
    return {m: imports(p.read_text(encoding="utf-8"), m, _package(m, p), known, module_level_only, dynamic) - {m}
            for m, p in files.items()}


def violations(edges: dict[str, set[str]], known: set[str]) -> list[str]:
    found = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if target == module:
                continue
            if target not in known:
                found.append(f"{module} imports {target}, which is no module of normbench"
                             + (f" (moved to {MOVED[target]})" if target in MOVED else ""))
            elif target in ENTRY_POINTS and module != "normbench.__main__":
                found.append(f"{module} imports {target}: nothing imports the CLI or the pytest plugin")
            elif room(target) not in ALLOWED[room(module)]:
                found.append(f"{module} ({room(module)}) imports {target} ({room(target)})")
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def public_problems(source: str, where: str) -> list[str]:
    """What a backend package's ``source`` imports of normbench that is not public: a module outside
    :data:`PUBLIC_MODULES`, or a name with a leading underscore, or one a public module does not export."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in names:
            if module.split(".")[0] != "normbench":
                continue
            full = f"{module}.{name}" if name else module
            if full in PUBLIC_MODULES:
                continue
            if module not in PUBLIC_MODULES:
                problems.append(f"{where}:{node.lineno} imports {module}, not public (docs/writing-a-backend.md)")
            elif name.startswith("_") or not hasattr(importlib.import_module(module), name):
                problems.append(f"{where}:{node.lineno} imports {module}.{name}, not a public name")
    return problems


@pytest.fixture(scope="module")
def files():
    return module_files()


def test_every_room_imports_only_the_rooms_below_it(files):
    assert {room(m) for m in files} >= set(ROOMS)
    assert violations(graph(files), set(files)) == []


def test_no_import_cycle_at_any_level(files):
    assert cycles(graph(files)) == []


def test_a_dynamic_import_is_declared(files):
    found: list = []
    graph(files, dynamic=found)
    assert {m for m, _ in found} == set(DYNAMIC), found


def test_the_built_in_backends_import_public_names_only(files):
    problems = []
    for module, path in files.items():
        if room(module) == "impls":
            text = path.read_text(encoding="utf-8")
            own = ast.parse(text)
            foreign = "\n".join(ast.unparse(n) for n in ast.walk(own) if isinstance(n, (ast.Import, ast.ImportFrom))
                                and not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("normbench.impls"))
                                and not (isinstance(n, ast.Import) and n.names[0].name.startswith("normbench.impls")))
            problems += public_problems(foreign, str(path.relative_to(ROOT)))
    assert problems == []


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir()))
def test_an_example_plugin_imports_public_names_only(example):
    paths = sorted((ROOT / "examples" / example).rglob("*.py"))
    assert paths
    problems = [p for path in paths for p in public_problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert problems == []


def stale_imports(source: str, where: str, known: set[str]) -> list[str]:
    """What a test module imports of normbench that is no module, or a moved (normbench 0.2) path."""
    problems = []
    for target in imports(source, where, "tests", known | set(MOVED)):
        if target in MOVED:
            problems.append(f"{where} imports {target} (moved to {MOVED[target]})")
        elif target not in known:
            problems.append(f"{where} imports {target}, which is no module of normbench")
    return problems


def test_the_tests_import_modules_that_exist_never_a_moved_path(files):
    known = set(files) | {"normbench"}
    assert [p for path in sorted((ROOT / "tests").glob("*.py"))
            for p in stale_imports(path.read_text(encoding="utf-8"), path.name, known)] == []


def test_a_test_importing_a_moved_path_is_refused():
    assert stale_imports("from normbench.cases import make_inputs", "t.py", {"normbench", "normbench.core.cases"}) == [
        "t.py imports normbench.cases (moved to normbench.core.cases)"]


# -- each rule fails on a crossing ------------------------------------------------------------------------

KNOWN = {"normbench.check.conformance", "normbench.check.coherence", "normbench.perf.timing", "normbench.perf",
         "normbench.check", "normbench.core.cases", "normbench.front.cli", "normbench.paper.table1",
         "normbench.impls.numpy_ref", "normbench.suites.test_forward", "normbench.front.pytest_plugin"}


@pytest.mark.parametrize("module, source, target", [
    ("normbench.check.conformance", "from normbench.perf import timing", "normbench.perf.timing"),
    ("normbench.check.conformance", "from ..perf import timing", "normbench.perf.timing"),
    ("normbench.check.conformance", "import importlib\nimportlib.import_module('normbench.perf.timing')",
     "normbench.perf.timing"),
    ("normbench.check.conformance", "try:\n    import normbench.perf.timing\nexcept ImportError:\n    pass",
     "normbench.perf.timing"),
    ("normbench.check.conformance", "def f():\n    from normbench.perf import timing", "normbench.perf.timing"),
    ("normbench.core.cases", "__import__(f'normbench.check.{name}')", "normbench.check"),
    ("normbench.paper.table1", "from normbench.perf import timing", "normbench.perf.timing"),
    ("normbench.impls.numpy_ref", "from normbench.check import conformance", "normbench.check.conformance"),
    ("normbench.suites.test_forward", "from normbench.front import pytest_plugin", "normbench.front.pytest_plugin"),
    ("normbench.paper.table1", "from normbench.front.cli import main", "normbench.front.cli"),
])
def test_the_check_fails_on_a_crossing(module, source, target):
    found = imports(source, module, module.rpartition(".")[0], KNOWN)
    assert target in found, (source, found)
    assert violations({module: found}, KNOWN), f"{module} -> {target} must be refused"


def test_a_moved_path_is_refused():
    found = imports("from normbench.backend import Backend", "normbench.check.oracle", "normbench.check", KNOWN)
    assert violations({"normbench.check.oracle": found}, KNOWN) == [
        "normbench.check.oracle imports normbench.backend, which is no module of normbench (moved to "
        "normbench.core.backend)"]


def test_an_undeclared_dynamic_import_is_seen():
    found: list = []
    imports("import importlib\ndef f(name):\n    return importlib.import_module(name)", "normbench.check.x",
            "normbench.check", KNOWN, dynamic=found)
    assert found == [("normbench.check.x", 3)]


def test_the_cycle_check_finds_a_cycle_a_lazy_import_closes():
    edges = {"normbench.check.conformance": imports("def f():\n    from normbench.check import coherence",
                                                    "normbench.check.conformance", "normbench.check", KNOWN),
             "normbench.check.coherence": imports("from normbench.check import conformance",
                                                  "normbench.check.coherence", "normbench.check", KNOWN)}
    assert cycles(edges) == [["normbench.check.coherence", "normbench.check.conformance", "normbench.check.coherence"]]


@pytest.mark.parametrize("source, problem", [
    ("from normbench.impls.torch_native import TorchBackend", "imports normbench.impls.torch_native, not public"),
    ("from normbench.core.backend import device_label", "imports normbench.core.backend, not public"),
    ("from normbench.kit.torch import _LIBRARY_THREADS", "imports normbench.kit.torch._LIBRARY_THREADS, not a public"),
    ("from normbench import nothing_such", "imports normbench.nothing_such, not a public name"),
])
def test_a_backend_importing_a_private_name_is_refused(source, problem):
    assert any(problem in p for p in public_problems(source, "plugin.py")), public_problems(source, "plugin.py")


def test_public_names_pass():
    assert public_problems("from normbench import Backend, Limits\nfrom normbench.kit import device_label\n"
                           "from normbench.kit.torch import AutogradBackend\nimport normbench.kit.jax", "plugin.py") == []
