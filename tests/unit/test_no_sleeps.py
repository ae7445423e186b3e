"""No unit test waits a fixed span of real time: it waits on the fake clock or on the event it
expects. A sleep of more than one turn of the loop is allowed only in a module that runs on
`VirtualLoop`, where sleeps are timers that take no real time."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent


def _real_time_sleeps(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if node.func.attr != "sleep" or not isinstance(owner, ast.Name):
            continue
        if owner.id not in ("asyncio", "time"):
            continue
        one_turn = (
            owner.id == "asyncio"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == 0
        )
        if not one_turn:
            lines.append(node.lineno)
    return lines


def test_unit_tests_sleep_no_real_time() -> None:
    found = {
        path.name: lines
        for path in sorted(UNIT.glob("*.py"))
        if (lines := _real_time_sleeps(path)) and "VirtualLoop" not in path.read_text()
    }
    assert found == {}


def test_the_check_finds_a_fixed_sleep(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import asyncio\nasync def f():\n    await asyncio.sleep(0)\n"
                      "    await asyncio.sleep(0.01)\n")  # fmt: skip
    assert _real_time_sleeps(sample) == [4]
