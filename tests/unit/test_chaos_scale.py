"""The chaos runs' size: short unless asked for the long form, and a typo is named."""

from __future__ import annotations

import pytest

from tests.e2e.chaos_scale import LONG, SHORT, chaos_scale


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, SHORT), ("short", SHORT), ("long", LONG), (" LONG ", LONG)],
)
def test_the_scale_follows_the_environment(value: str | None, expected: object) -> None:
    env = {} if value is None else {"EMBEDSTREAM_CHAOS": value}
    assert chaos_scale(env) == expected


def test_an_unknown_scale_is_named() -> None:
    with pytest.raises(ValueError, match="EMBEDSTREAM_CHAOS must be short or long, got 'longer'"):
        chaos_scale({"EMBEDSTREAM_CHAOS": "longer"})


def test_the_long_form_is_larger_in_every_dimension() -> None:
    smaller = [n for n in SHORT.__dataclass_fields__ if getattr(LONG, n) <= getattr(SHORT, n)]
    assert smaller == [], (SHORT, LONG)
