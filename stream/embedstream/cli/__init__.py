"""The `embedstream` command line: ``parser`` (commands, options, help) and ``commands``
(``main`` and what each command does)."""

from __future__ import annotations

from embedstream.cli.commands import main
from embedstream.cli.parser import build_parser, package_version

__all__ = ["build_parser", "main", "package_version"]
