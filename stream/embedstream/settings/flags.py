"""Settings as command-line flags, grouped as in the configuration reference, each with its help
and default.

Everything comes from the settings' metadata in :mod:`embedstream.settings`; a flag left out is
``None`` and so does not override the file or the environment.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from embedstream.settings import (
    FIELDS,
    Group,
    Settings,
    choices,
    load_settings,
    shown_default,
    spec,
)

# What a command that only talks to Kafka (topics, produce, consume, verify) can be given.
CONNECTION_SETTINGS: tuple[str, ...] = (
    "bootstrap_servers",
    "client_id",
    "connect_timeout_s",
    *(name for name in FIELDS if spec(name).group in (Group.TOPICS, Group.SECURITY)),
)


def add_settings_flags(parser: argparse.ArgumentParser, names: Iterable[str]) -> None:
    """``--config`` and one ``--<name>`` per setting, in one argument group per settings group."""
    wanted = set(names)
    parser.add_argument("--config", type=Path, help="TOML file of settings")
    for group in Group:
        members = [n for n in FIELDS if n in wanted and spec(n).group is group]
        if not members:
            continue
        section = parser.add_argument_group(f"{group.value} settings")
        for name in members:
            _add_flag(section, name)


def _add_flag(section: argparse._ArgumentGroup, name: str) -> None:
    f = FIELDS[name]
    flag = "--" + name.replace("_", "-")
    kind = str(f.type)
    help_text = f"{spec(name).help} (default: {shown_default(name)})"
    if spec(name).secret:
        help_text += " A flag is visible to other local users (ps); prefer the _FILE variable."
    if kind == "bool":
        section.add_argument(
            flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text
        )
        return
    metavar = None
    allowed = choices(name)
    if allowed:
        metavar = "|".join(allowed)
    elif kind in ("int", "float"):
        metavar = kind.upper()
    section.add_argument(flag, dest=name, default=None, metavar=metavar, help=help_text)


def settings_from_args(
    ns: argparse.Namespace,
    names: Sequence[str],
    env: Mapping[str, str] | None = None,
    **extra: Any,
) -> Settings:
    """Settings from the parsed flags (over the environment, over ``--config``)."""
    overrides = {name: getattr(ns, name, None) for name in names}
    overrides.update(extra)
    source = os.environ if env is None else env
    return load_settings(env=source, file=ns.config, overrides=overrides)


def given_flags(ns: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The settings of ``names`` given as flags on this command line (None: not given)."""
    return {name: value for name in names if (value := getattr(ns, name, None)) is not None}


def as_flags(given: Mapping[str, Any], accepted: Iterable[str]) -> list[str]:
    """``given`` flags (as `given_flags` read them) written back as a command line, for the
    settings a command ``accepted``: what a supervised child is started with."""
    wanted = set(accepted)
    argv: list[str] = []
    for name, value in given.items():
        if name not in wanted:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv
