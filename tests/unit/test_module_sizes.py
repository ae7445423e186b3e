"""Modules stay small enough to read in one sitting: one job each, at most MAX_LINES lines.

Covers the shipped packages (embedstream, embedsim) and the shared helpers the e2e tests
build on; a module that grows past the bound is split along its seams, not allowed here.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
CHECKED = ("stream/embedstream", "stream/embedsim", "tests/e2e/chaos*.py")


def _modules() -> list[Path]:
    found: list[Path] = []
    for pattern in CHECKED:
        if pattern.endswith(".py"):
            found.extend(ROOT.glob(pattern))
        else:
            found.extend((ROOT / pattern).rglob("*.py"))
    return sorted(found)


def test_the_checked_folders_hold_modules() -> None:
    names = {p.name for p in _modules()}
    assert {"app.py", "processor.py", "chunker.py", "chaos.py"} <= names, sorted(names)[:20]


def test_no_module_is_over_the_bound() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in _modules()
    }
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert over == {}, f"split these along their seams (at most {MAX_LINES} lines): {over}"
