"""docs/architecture.md is true to the code where a test can check it: every module of each room is listed
in that room and nothing listed is missing from it, every command of ``normbench`` is listed, and its import
rules are the ones tests/test_layering.py enforces."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from normbench.front.cli import parser
from tests.test_layering import ALLOWED, module_files, room

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def listed_rooms(page: str = PAGE) -> dict[str, set[str]]:
    """The rooms drawn in the page's map and the module files each lists (``core/ ... operations.py``)."""
    block = page.split("## Rooms", 1)[1].split("```", 2)[1]
    rooms: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        head = re.match(r"^  ([a-z]+)/\s", line)
        if head:
            current = rooms.setdefault(head.group(1), set())
            continue
        entry = re.match(r"^    ([a-z0-9_]+\.py)\b", line)
        if entry and current is not None:
            current.add(entry.group(1))
        elif not line.startswith("     "):
            current = None if not line.startswith("    ") else current
    return rooms


def test_every_module_is_listed_in_its_room_and_nothing_else_is():
    modules: dict[str, set[str]] = {}
    for name, path in module_files().items():
        r = room(name)
        if name.startswith("normbench.") and name.split(".")[1] == r and r not in ("impls", "suites"):
            modules.setdefault(r, set()).add(path.name)
    without_inits = lambda rooms: {r: names - {"__init__.py"} for r, names in rooms.items()}
    assert without_inits(listed_rooms()) == without_inits(modules)


def test_every_command_is_listed():
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    listed = PAGE.split("The commands (`normbench --help`):", 1)[1].split(".", 1)[0]
    assert {c.strip() for c in listed.replace("\n", " ").split(",")} == set(sub.choices)


def test_the_import_rules_are_the_enforced_ones():
    table = PAGE.split("## Which way imports go", 1)[1].split("\n\n", 2)[1]
    rules = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rules[cells[0]] = {r.strip() for r in cells[1].split(",")}
    assert rules == ALLOWED


def test_the_map_check_sees_a_module_left_out_or_put_in_the_wrong_room():
    rooms = listed_rooms()
    assert "plan.py" not in listed_rooms(PAGE.replace("\n    plan.py ", "\n    # plan.py "))["front"]
    moved = PAGE.replace("\n    plan.py ", "\n    layout.py ", 1)
    assert listed_rooms(moved) != rooms and "plan.py" in rooms["front"]
