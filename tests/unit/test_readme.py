"""The README's promises that code can check: its settings table and its commands."""

from __future__ import annotations

import re
from pathlib import Path

from embedstream.cli import build_parser
from embedstream.ops.metrics import METRIC_NAMES
from embedstream.settings import FIELDS, TOOL_VARIABLES, Group, reference_rows, spec

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def test_settings_table_matches_the_code() -> None:
    table = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^\| `(\w+)` \| `(EMBEDSTREAM_\w+)`[^|]*\| ([^|]+) \|", README, re.M)
    }
    expected = {name: (env.split(" ")[0], default) for name, env, default, _ in reference_rows()}
    assert set(table) == set(expected)
    for name, (env, default) in expected.items():
        assert table[name][0] == env
        shown = table[name][1].strip()
        assert shown in (f"`{default}`", "unset", "empty"), (name, shown, default)


def test_settings_tables_follow_the_groups_of_the_code() -> None:
    section = README[README.index("## Configuration") : README.index("## Connecting to a managed")]
    parts = re.split(r"^#### (.+)$", section, flags=re.M)
    tables = {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}
    assert list(tables) == [group.value for group in Group]
    for group in Group:
        names = re.findall(r"^\| `(\w+)` \|", tables[group.value], re.M)
        assert names == [n for n in FIELDS if spec(n).group is group], group


def test_tool_variables_are_documented() -> None:
    for name in TOOL_VARIABLES:
        assert f"`{name}`" in README, name


def test_every_documented_command_exists() -> None:
    commands = set(re.findall(r"^\| `embedstream (\w+)", README, re.M))
    import argparse

    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert commands == set(sub.choices)


def test_every_metric_is_documented() -> None:
    documented = set(re.findall(r"`(embedstream_[a-z_]+)", README))
    assert documented >= METRIC_NAMES


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
