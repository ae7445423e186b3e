"""The README's promises that code can check (the rest: test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

from embedstream.settings import TOOL_VARIABLES

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def test_tool_variables_are_documented() -> None:
    for name in TOOL_VARIABLES:
        assert f"`{name}`" in README, name


def test_the_public_api_is_importable_and_complete() -> None:
    import embedstream

    for name in embedstream.__all__:
        assert getattr(embedstream, name) is not None
    assert embedstream.BatchingClient.__module__ == "embedstream.engine.client"
    assert embedstream.__version__ != "0+unknown"  # the installed distribution's version


def test_the_development_section_names_every_layer_and_tier() -> None:
    """The layer table lists every package and top-level module of embedstream (and nothing
    that is gone), and each test tier it describes is a folder."""
    section = README[README.index("## Development") :]
    table = section[: section.index("Tests come in three tiers")]
    first_cells = re.findall(r"^\| (`[^|]+)\|", table, re.M)
    listed = {name.rstrip("/") for cell in first_cells for name in re.findall(r"`([\w./]+)`", cell)}
    package = Path(__file__).parents[2] / "stream" / "embedstream"
    present = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.name for p in package.glob("*.py") if not p.stem.startswith("__")}
    assert listed == present
    root = Path(__file__).parents[2] / "tests"
    for tier in ("unit", "integration", "e2e"):
        assert f"`tests/{tier}/`" in section and (root / tier).is_dir()
    assert "--fast" in section
