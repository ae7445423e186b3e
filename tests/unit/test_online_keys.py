"""Callers' keys: looked up by digest, read again from their file when it changes (fake time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from embedstream.online.keys import ANONYMOUS, RECHECK_S, CallerKeys
from embedstream.testing import FakeClock


def test_without_keys_everyone_is_anonymous() -> None:
    keys = CallerKeys({}, clock=FakeClock())
    assert not keys.required
    assert keys.name_of(None) == ANONYMOUS


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Bearer sk-1", "rag"),
        ("bearer sk-2", "idx"),
        ("Bearer  sk-1 ", "rag"),
        ("Bearer sk-3", None),
        ("Bearer ", None),
        ("sk-1", None),
        ("Basic sk-1", None),
        (None, None),
    ],
)
def test_a_key_names_its_caller(header: str | None, name: str | None) -> None:
    keys = CallerKeys({"sk-1": "rag", "sk-2": "idx"}, clock=FakeClock())
    assert keys.name_of(header) == name


def test_keys_from_a_file_rotate_and_a_broken_file_keeps_the_last_good_keys(
    tmp_path: Path,
) -> None:
    file = tmp_path / "keys"
    file.write_text("rag:sk-old\n")
    clock = FakeClock()
    keys = CallerKeys({"sk-old": "rag"}, file=file, clock=clock)
    file.write_text("rag:sk-new\n")
    assert keys.name_of("Bearer sk-old") == "rag"  # not looked at again yet
    clock.advance(RECHECK_S)
    assert keys.name_of("Bearer sk-new") == "rag"
    assert keys.name_of("Bearer sk-old") is None
    file.write_text("broken line without a colon\n")
    clock.advance(RECHECK_S)
    assert keys.name_of("Bearer sk-new") == "rag"  # kept
    file.unlink()
    clock.advance(RECHECK_S)
    assert keys.name_of("Bearer sk-new") == "rag"  # a file gone for a moment keeps them too
