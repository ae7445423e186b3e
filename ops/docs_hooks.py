"""The documentation site's hooks (mkdocs.yml ``hooks:``): what the site takes from outside docs/.

- A line ``<!-- generated: NAME -->`` in a page becomes ``docs_reference.GENERATED[NAME]()``,
  read from the code at build time (the configuration and command-line references, the
  tooling's variables); an unknown NAME fails the build.
- A line ``<!-- readme: NAME -->`` becomes the README's lines between ``<!-- start: NAME -->``
  and ``<!-- end: NAME -->`` (the overview on the home page: written once, shown in both), its
  links into ``docs/`` made relative to the site.
- The files under ``bench/results/`` (the plots ``embedstream bench --plots`` drew) are
  published at the same path in the site, and a page's link that climbs out of docs/ to one of
  them (the relative path that also works on GitHub) is pointed at that copy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
# The references describe this checkout's code, not a copy of embedstream installed elsewhere.
sys.path.insert(0, str(ROOT / "stream"))

import docs_reference  # noqa: E402  (needs the checkout's code on the path first)

PUBLISHED = "bench/results"  # repository folders the site carries, at the same path
_GENERATED = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
_README = re.compile(r"^<!-- readme: ([\w-]+) -->$", re.M)
_PUBLISHED_LINK = re.compile(r"\]\(((?:\.\./)+)(" + re.escape(PUBLISHED) + r"/[^)\s]+)\)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path in sorted((ROOT / PUBLISHED).rglob("*")):
        if path.is_file():
            uri = path.relative_to(ROOT).as_posix()
            files.append(File(uri, str(ROOT), config.site_dir, config.use_directory_urls))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    uri = page.file.src_uri

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in docs_reference.GENERATED:
            raise PluginError(f"{uri}: no generated part named {name!r}")
        return docs_reference.GENERATED[name]()

    def readme(match: re.Match[str]) -> str:
        return readme_part(match.group(1), (ROOT / "README.md").read_text(encoding="utf-8"))

    markdown = _README.sub(readme, _GENERATED.sub(generated, markdown))
    return published_links(markdown, uri)


def readme_part(name: str, readme: str) -> str:
    """The README's part ``name``, its links into docs/ relative to the site's root (the part
    goes on a page at the root: the home page)."""
    start, end = f"<!-- start: {name} -->\n", f"\n<!-- end: {name} -->"
    if start not in readme or end not in readme:
        raise PluginError(f"README.md has no part {name!r} (between {start.strip()} and {end})")
    part = readme[readme.index(start) + len(start) : readme.index(end)]
    return part.replace("](docs/", "](")


def published_links(markdown: str, uri: str) -> str:
    """Links from page ``uri`` out of docs/ into a published folder, as links to its copy in
    the site: one ``../`` fewer than from the repository (docs/ is the site's root)."""
    depth = uri.count("/")

    def shorten(match: re.Match[str]) -> str:
        ups, target = match.group(1), match.group(2)
        if len(ups) // 3 != depth + 1:  # not the path to the repository's root: left to fail
            return match.group(0)
        return "](" + "../" * depth + target + ")"

    return _PUBLISHED_LINK.sub(shorten, markdown)
