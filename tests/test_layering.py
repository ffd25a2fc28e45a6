"""The package's layering (docs/architecture.md), read from the source of every module:
which room may import which, nothing imports the CLI or the pytest plugin, and no
import cycle at module level. Lazy imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import normbench
import normbench.impls
import normbench.suites

ROOTS = {"normbench": Path(normbench.__file__).parent, "normbench.impls": Path(normbench.impls.__file__).parent,
         "normbench.suites": Path(normbench.suites.__file__).parent}
#: never imported by anything: entry points only
ENTRY_POINTS = {"normbench.front.cli", "normbench.front.pytest_plugin"}
#: room -> the rooms it may import
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


def room(module: str) -> str:
    """``normbench.check.oracle`` -> "check"; the package itself and its ``__main__`` -> "front"."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("core", "kit", "check", "paper", "perf", "report", "front", "impls"):
        return parts[1]
    if module == "normbench.suites":
        return "core"  # its __init__ only says where the suites live
    if len(parts) > 1 and parts[1] == "suites":
        return "suites"
    return "core" if module == "normbench" else "front"


def module_files() -> dict[str, Path]:
    found = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "normbench" and parts and parts[0] in ("impls", "suites"):
                continue
            found[".".join([package, *parts])] = path
    return found


def imports(path: Path, known: set[str], module_level_only: bool = False) -> set[str]:
    """The normbench modules ``path`` imports (``from normbench import cases`` -> normbench.core.cases)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "normbench"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "normbench":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return out


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if target == module:
                continue
            if target in ENTRY_POINTS and module != "normbench.__main__":
                found.append(f"{module} imports {target}: nothing imports the CLI or the pytest plugin")
            elif room(target) not in ALLOWED[room(module)]:
                found.append(f"{module} ({room(module)}) imports {target} ({room(target)})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


@pytest.fixture(scope="module")
def files():
    return module_files()


def test_every_room_imports_only_the_rooms_below_it(files):
    graph = {m: imports(p, set(files)) for m, p in files.items()}
    assert {room(m) for m in files} >= {"core", "kit", "check", "paper", "perf", "report", "impls", "front", "suites"}
    assert violations(graph) == []


def test_no_import_cycle_at_module_level(files):
    graph = {m: imports(p, set(files), module_level_only=True) - {m} for m, p in files.items()}
    assert cycles(graph) == []


@pytest.mark.parametrize("module, target", [
    ("normbench.check.conformance", "normbench.perf.timing"),
    ("normbench.paper.table1", "normbench.perf.roofline"),
    ("normbench.perf.verify", "normbench.paper.layer"),
    ("normbench.core.cases", "normbench.check.oracle"),
    ("normbench.report.render", "normbench.front.cli"),
    ("normbench.impls.numpy_ref", "normbench.check.oracle"),
    ("normbench.suites.test_forward", "normbench.front.pytest_plugin"),
])
def test_the_check_fails_on_a_crossing(module, target):
    assert violations({module: {target}}), f"{module} -> {target} must be refused"


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
