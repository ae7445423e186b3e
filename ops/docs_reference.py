"""The documentation site's generated parts, as Markdown, read from the code at build time: the
configuration reference (the settings' field table), the command-line reference (the parser)
and the test tooling's variables. ``docs_hooks.py`` puts them where a page asks for them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

from embedstream.cli import build_parser
from embedstream.settings import FIELDS, TOOL_VARIABLES, Group, ReferenceRow, reference_rows, spec


def group_anchor(group: Group) -> str:
    """The anchor of a group's heading (apart from the settings' own, which are their names)."""
    return group.name.lower() + "-settings"


def settings_reference() -> str:
    """One table per group, in the order of ``embedstream run --help``; each setting's row has
    its name as anchor (``configuration.md#max_wait_ms``)."""
    rows = reference_rows()
    parts = []
    for group in Group:
        members = [row for row in rows if row.group is group]
        parts.append(f"## {group.value} {{ #{group_anchor(group)} }}\n")
        parts.append("| setting | environment | default | values | meaning |")
        parts.append("|---|---|---|---|---|")
        parts += [_setting_line(row) for row in members]
        parts.append("")
    return "\n".join(parts)


def _setting_line(row: ReferenceRow) -> str:
    env = f"`{row.env}`"
    if row.secret:
        env += f" or `{row.env}_FILE`"
    if row.alt_env:
        env += f" (or `{row.alt_env}`)"
    default = row.default if row.default in ("unset", "empty") else f"`{row.default}`"
    if row.choices:
        values = ", ".join(f"`{choice}`" for choice in row.choices)
    else:
        values = " ".join(part for part in (row.kind, row.bounds) if part)
    cells = [f'<a id="{row.name}"></a>`{row.name}`', env, default, values, _text(row.help)]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def tool_variables() -> str:
    """The table of the non-setting ``EMBEDSTREAM_*`` variables the tooling reads."""
    lines = ["| variable | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {_text(meaning)} |" for name, meaning in TOOL_VARIABLES.items()]
    return "\n".join(lines) + "\n"


def cli_reference() -> str:
    """A section per command, in the parser's order: its description, its usage, its own
    arguments with their help, and the settings it takes as flags (linked to their rows)."""
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return "\n".join(_command_section(name, sub) for name, sub in commands.choices.items())


def _command_section(name: str, sub: argparse.ArgumentParser) -> str:
    own = [a for a in sub._actions if not _is_settings_flag(a) and a.dest != "help"]
    settings = [a.dest for a in sub._actions if _is_settings_flag(a) and a.dest in FIELDS]
    lines = [f"## `embedstream {name}`\n", _text(sub.description or ""), ""]
    lines += ["```text", _usage(sub, own, bool(settings)), "```", ""]
    for title, actions in _titled_groups(sub, own):
        if title:
            lines += [f"**{_text(title)}**", ""]
        formatter = sub.formatter_class(prog=sub.prog)
        for action in actions:
            invocation = formatter._format_action_invocation(action)
            lines.append(f"- `{invocation}`: {_text(_help(sub, action))}")
        lines.append("")
    if settings:
        lines += [_settings_sentence(settings), ""]
    return "\n".join(lines)


def _usage(sub: argparse.ArgumentParser, own: list[argparse.Action], settings: bool) -> str:
    """The usage line without the settings' flags (they are summarised after it)."""
    if sub.usage:
        return "embedstream " + sub.usage.removeprefix("embedstream ")
    width = 100
    formatter = argparse.HelpFormatter(prog=sub.prog, width=width)
    formatter.add_usage(None, own, [], prefix="")
    lines = formatter.format_help().strip().split("\n")
    if settings:
        more = "[--<setting> VALUE ...]"
        if len(lines[-1]) + 1 + len(more) <= width:
            lines[-1] += " " + more
        else:
            lines.append(" " * (len(sub.prog) + 1) + more)
    return "\n".join(lines)


def _titled_groups(
    sub: argparse.ArgumentParser, own: list[argparse.Action]
) -> Iterator[tuple[str, list[argparse.Action]]]:
    """The command's own arguments by argument group; the default groups untitled."""
    for group in sub._action_groups:
        actions = [a for a in group._group_actions if a in own]
        if actions:
            untitled = group.title in ("positional arguments", "options")
            yield ("" if untitled else group.title or ""), actions


def _help(sub: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = sub.formatter_class(prog=sub.prog)
    text = formatter._get_help_string(action) or ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return text % dict(params, prog=sub.prog)


def _is_settings_flag(action: argparse.Action) -> bool:
    """A flag add_settings_flags made: --config, or a setting's own (its help is the spec's)."""
    if action.dest == "config":
        return True
    return action.dest in FIELDS and (action.help or "").startswith(spec(action.dest).help)


def _settings_sentence(names: list[str]) -> str:
    """``--config FILE`` and the settings a command takes: whole groups by name, else each."""
    taken = set(names)
    parts = []
    for group in Group:
        members = [n for n in FIELDS if spec(n).group is group]
        chosen = [n for n in members if n in taken]
        if chosen and chosen == members:
            parts.append(f"every [{group.value}]({_link(group_anchor(group))}) setting")
        else:
            parts += [f"[`--{n.replace('_', '-')}`]({_link(n)})" for n in chosen]
    if len(parts) == len(Group) and all(p.startswith("every") for p in parts):
        listed = "every setting (see [Configuration](configuration.md))"
    else:
        listed = ", ".join(parts)
    return (
        "**Settings** (flags win over the environment and the `--config` TOML file): "
        f"{listed}, as `--<name>` with dashes (a switch: `--<name>` or `--no-<name>`)."
    )


def _link(anchor: str) -> str:
    return f"configuration.md#{anchor}"


def _text(text: str) -> str:
    """Plain help text made safe for Markdown (no stray emphasis or HTML), its `code` kept."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
    return "`".join(parts)


GENERATED: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "cli": cli_reference,
    "tool-variables": tool_variables,
}
