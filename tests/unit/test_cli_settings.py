"""Settings on the command line: `run --help` grouped with help and defaults, flags for the
Kafka connection on every command that talks to Kafka."""

from __future__ import annotations

import argparse
import re

import pytest
from embedstream.cli import build_parser
from embedstream.settings import FIELDS, Group, spec
from embedstream.settings.flags import CONNECTION_SETTINGS, settings_from_args


def _subparser(name: str) -> argparse.ArgumentParser:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def _help(name: str) -> str:
    # A wide terminal, so every help text sits on its flag's line.
    return _subparser(name).format_help()


def _sections(text: str) -> dict[str, str]:
    """Help text by section heading (``Kafka settings:`` ...)."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_run_help_groups_every_setting_with_its_help_and_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    sections = _sections(_help("run"))
    headings = [h for h in sections if h.endswith(" settings")]
    assert headings == [f"{group.value} settings" for group in Group]
    for name in FIELDS:
        entries = _entries(sections[f"{spec(name).group.value} settings"])
        entry = entries["--" + name.replace("_", "-")]
        assert " ".join(spec(name).help.split()) in entry, name
        assert "(default: " in entry, name


def _entries(body: str) -> dict[str, str]:
    """Each option's help entry (its flag line and continuation lines), whitespace squeezed."""
    entries: dict[str, str] = {}
    for chunk in re.split(r"\n(?=  --)", body):
        flag = chunk.split()[0].rstrip(",")
        entries[flag] = " ".join(chunk.split())
    return entries


def test_run_help_usage_is_short() -> None:
    assert len(_subparser("run").format_usage()) < 200


@pytest.mark.parametrize("command", ["topics", "produce", "consume", "verify"])
def test_kafka_commands_take_the_connection_settings(command: str) -> None:
    text = _help(command)
    for name in CONNECTION_SETTINGS:
        assert "--" + name.replace("_", "-") in text, (command, name)


def test_flags_become_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.environ", {})
    ns = build_parser().parse_args(
        ["run", "--max-wait-ms", "12.5", "--no-ssl-check-hostname", "--log-level", "debug"]
    )
    settings = settings_from_args(ns, list(FIELDS))
    assert (settings.max_wait_ms, settings.ssl_check_hostname, settings.log_level) == (
        12.5,
        False,
        "DEBUG",
    )
    ns = build_parser().parse_args(["run"])
    assert settings_from_args(ns, list(FIELDS)).ssl_check_hostname is True


def test_help_says_what_embedstream_is_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from embedstream.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")  # a plain terminal: the line must fit it
    description = build_parser().format_help().split("\n\n")[1]
    assert description == (
        "Kafka text events in, embeddings out, batched for any OpenAI-compatible API."
    )
