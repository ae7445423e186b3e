"""What the reference shows of each setting: its variable, its default and the values it takes,
as text. The documentation site's configuration reference and ``--help`` read it, so neither can
drift from the field table.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.errors import env_var
from embedstream.settings.fields import FIELDS, spec
from embedstream.settings.types import Group, literal_choices

_KINDS = {"int": "integer", "float": "number", "bool": "true or false", "str": "text"}
_OPERATORS = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}


@dataclass(frozen=True)
class ReferenceRow:
    """One setting as the reference shows it."""

    name: str
    group: Group
    env: str  # EMBEDSTREAM_<NAME>
    alt_env: str | None  # a variable other tools already use (OPENAI_API_KEY)
    default: str  # as written in a file or a variable; "unset" or "empty" otherwise
    choices: tuple[str, ...] | None  # the allowed values of a choice
    kind: str  # "integer", "number", "text", "true or false" or "choice"
    bounds: str  # "> 0 and ≤ 3,600"; empty when unbounded
    help: str
    secret: bool


def reference_rows() -> list[ReferenceRow]:
    """Every setting, in the order of the field table (groups appear in that order too)."""
    return [_row(name) for name in FIELDS]


def shown_default(name: str) -> str:
    """A setting's default as a user would write it: ``unset``, ``empty``, ``true``, ``50.0``."""
    default = FIELDS[name].default
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return str(default).lower()
    if default == "":
        return "empty"
    return str(default)


def _row(name: str) -> ReferenceRow:
    s = spec(name)
    kind_name = str(FIELDS[name].type).removesuffix(" | None")
    choices = literal_choices(kind_name)
    bounds = [
        f"{_OPERATORS[op]} {_number(limit)}"
        for op, limit in (("gt", s.gt), ("ge", s.ge), ("lt", s.lt), ("le", s.le))
        if limit is not None
    ]
    return ReferenceRow(
        name=name,
        group=s.group,
        env=env_var(name),
        alt_env=s.alt_env,
        default=shown_default(name),
        choices=choices,
        kind="choice" if choices else _KINDS[kind_name],
        bounds=" and ".join(bounds),
        help=s.help,
        secret=s.secret,
    )


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
