"""The documentation's promises that code can check: the generated references cover every
setting and command, and what the pages name (commands, metrics, layers) exists.

`mkdocs build --strict` (in the test command) checks links, anchors and the navigation.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import docs_hooks
import docs_reference
import pytest
from embedstream.cli import build_parser
from embedstream.ops.metrics import METRIC_NAMES
from embedstream.settings import FIELDS, TOOL_VARIABLES, Group, shown_default, spec
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def every_page() -> dict[str, str]:
    return {p.relative_to(DOCS).as_posix(): p.read_text("utf-8") for p in DOCS.rglob("*.md")}


def commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


# --------------------------------------------------------------------------- the README


def test_the_readme_is_a_short_overview_with_the_quick_start() -> None:
    assert len(README.splitlines()) <= 200
    for command in (
        "pip install '.[embedded]' && embedstream demo",
        "bash ops/test.sh",
        "pip install '.[embedded,local-model,pgvector]' pgserver && embedstream demo --rag",
        "pip install '.[docs]' && mkdocs serve",
    ):
        assert f"\n{command}\n" in README, command


def test_the_readmes_links_into_the_docs_resolve() -> None:
    """The README is read on GitHub, where the site's strict build does not check it: every
    relative link names a file of the repository, and an anchor a heading of that page."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#([\w-]+))?\)", README)
    assert {path for path, _ in links if path.startswith("docs/")} >= {"docs/index.md"}
    for path, anchor in links:
        if "://" in path:
            continue
        assert (ROOT / path).is_file(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text("utf-8"), re.M)
            slugs = {re.sub(r"[^\w\s-]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, (path, anchor)


def test_the_home_page_shows_the_readmes_overview() -> None:
    assert "<!-- readme: overview -->" in page("index.md").splitlines()
    overview = docs_hooks.readme_part("overview", README)
    assert "Kafka text events in, embeddings out." in overview
    assert "](docs/" not in overview and "](concepts/batching.md)" in overview
    with pytest.raises(PluginError, match="no part 'nope'"):
        docs_hooks.readme_part("nope", README)


# --------------------------------------------------------------------------- configuration


def test_the_configuration_page_asks_for_the_generated_tables() -> None:
    assert "<!-- generated: settings -->" in page("reference/configuration.md").splitlines()


def test_the_settings_reference_has_every_setting_in_its_group_in_order() -> None:
    text = docs_reference.settings_reference()
    parts = re.split(r"^## (.+) \{ #[\w-]+ \}$", text, flags=re.M)
    tables = {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}
    assert list(tables) == [group.value for group in Group]
    for group in Group:
        names = re.findall(r'^\| <a id="(\w+)"></a>`\1` \|', tables[group.value], re.M)
        assert names == [n for n in FIELDS if spec(n).group is group], group


def test_each_setting_row_shows_its_variable_default_and_help() -> None:
    text = docs_reference.settings_reference()
    rows = {m.group(1): m.group(0) for m in re.finditer(r'^\| <a id="(\w+)">.*$', text, re.M)}
    assert set(rows) == set(FIELDS)
    for name, row in rows.items():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert cells[1].startswith(f"`EMBEDSTREAM_{name.upper()}`"), cells
        shown = shown_default(name)
        assert cells[2] == (shown if shown in ("unset", "empty") else f"`{shown}`"), cells
        assert spec(name).help.split(" ")[0] in cells[4]
        if spec(name).secret:
            assert f"`EMBEDSTREAM_{name.upper()}_FILE`" in cells[1]
    assert "≥ 0 and ≤ 60,000" in rows["max_wait_ms"]
    assert "`float`, `base64`" in rows["encoding_format"]
    assert "(or `OPENAI_API_KEY`)" in rows["api_key"]


# --------------------------------------------------------------------------- command line


def test_the_command_line_page_asks_for_the_generated_reference() -> None:
    assert "<!-- generated: cli -->" in page("reference/cli.md").splitlines()


def test_the_commands_table_names_every_command() -> None:
    table = set(re.findall(r"^\| \[`embedstream (\w+)", page("reference/cli.md"), re.M))
    assert table == set(commands())


def test_the_cli_reference_has_every_command_and_its_own_options() -> None:
    text = docs_reference.cli_reference()
    sections = re.split(r"^## `embedstream (\w+)`$", text, flags=re.M)
    by_name = {sections[i]: sections[i + 1] for i in range(1, len(sections), 2)}
    assert list(by_name) == list(commands())
    for name, parser in commands().items():
        section = by_name[name]
        for action in parser._actions:
            flags = [o for o in action.option_strings if o not in ("-h", "--help")]
            if not flags:
                continue
            listed = f"`{flags[0]}" in section
            if action.dest in FIELDS:  # or taken as a setting: linked to its row or group
                group = docs_reference.group_anchor(spec(action.dest).group)
                listed |= f"configuration.md#{action.dest})" in section
                listed |= f"configuration.md#{group})" in section or "every setting" in section
            assert listed, (name, flags)


def test_every_command_the_docs_name_exists() -> None:
    """A command named in a code span or a shell line of any page (or the README) is one the
    parser has: a renamed or removed command cannot linger in the docs."""
    named = set()
    for text in [README, *every_page().values()]:
        named |= set(re.findall(r"`embedstream ([a-z]+)", text))
        for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.M | re.S):
            named |= set(re.findall(r"(?:^|&& |\| )embedstream ([a-z]+)", block, re.M))
    assert named and named <= set(commands())


# --------------------------------------------------------------------------- operations


def test_the_metrics_page_has_a_row_for_every_metric_and_no_other() -> None:
    rows = re.findall(r"^\| `(embedstream_\w+)` \|", page("operations/metrics.md"), re.M)
    assert len(rows) == len(set(rows))
    assert set(rows) == METRIC_NAMES


def test_every_metric_the_docs_name_exists() -> None:
    """A metric named anywhere (a renamed one would linger in prose or a query) exists; a
    name the pages share with a metric family's samples (_bucket, _count, _sum) counts."""
    named = set()
    for text in [README, *every_page().values()]:
        named |= set(re.findall(r"`(embedstream_[a-z_]+)", text))
    families = {re.sub(r"_(bucket|count|sum)$", "", name) for name in named}
    assert families and families <= METRIC_NAMES, families - METRIC_NAMES


# --------------------------------------------------------------------------- development


def test_the_development_page_names_every_layer_and_tier() -> None:
    """The layer table lists every package and top-level module of embedstream (and nothing
    that is gone), and each test tier it describes is a folder."""
    text = page("development.md")
    table = text[: text.index("Tests come in three tiers")]
    first_cells = re.findall(r"^\| (`[^|]+)\|", table, re.M)
    listed = {name.rstrip("/") for cell in first_cells for name in re.findall(r"`([\w./]+)`", cell)}
    package = ROOT / "stream" / "embedstream"
    present = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.name for p in package.glob("*.py") if not p.stem.startswith("__")}
    assert listed == present
    for tier in ("unit", "integration", "e2e"):
        assert f"`tests/{tier}/`" in text and (ROOT / "tests" / tier).is_dir()
    assert "--fast" in text


def test_the_development_page_lists_the_tooling_variables() -> None:
    assert "<!-- generated: tool-variables -->" in page("development.md").splitlines()
    table = docs_reference.tool_variables()
    assert re.findall(r"^\| `(EMBEDSTREAM_\w+)` \|", table, re.M) == list(TOOL_VARIABLES)


def test_the_public_api_the_library_guide_uses_is_importable_and_complete() -> None:
    import embedstream

    for name in embedstream.__all__:
        assert getattr(embedstream, name) is not None
    assert "from embedstream import BatchingClient" in page("guides/library.md")
    assert embedstream.BatchingClient.__module__ == "embedstream.engine.client"
    assert embedstream.__version__ != "0+unknown"  # the installed distribution's version


# --------------------------------------------------------------------------- the hooks


@pytest.mark.parametrize(
    ("uri", "link", "site"),
    [
        ("benchmarks/bound.md", "../../bench/results/a/p.png", "../bench/results/a/p.png"),
        ("index.md", "../bench/results/a/p.png", "bench/results/a/p.png"),
        ("benchmarks/bound.md", "../bench/results/a/p.png", "../bench/results/a/p.png"),
    ],
)
def test_links_to_the_benchmark_results_point_at_the_sites_copy(
    uri: str, link: str, site: str
) -> None:
    """The path that works on GitHub (out of docs/ to the repository) becomes the one that works
    in the site; any other path is left alone, for the strict build to refuse."""
    assert docs_hooks.published_links(f"![plot]({link})", uri) == f"![plot]({site})"


def test_an_unknown_generated_part_fails_the_build() -> None:
    class FakeFile:
        src_uri = "x.md"

    class FakePage:
        file = FakeFile()

    with pytest.raises(PluginError, match="no generated part named 'nope'"):
        docs_hooks.on_page_markdown("<!-- generated: nope -->", FakePage(), None, None)  # type: ignore[arg-type]
