"""The backfill's rule of which document versions its generation already holds (pure)."""

from __future__ import annotations

import pytest
from embedstream.core.backfill_skips import Held, ReadVersion, SkipReason, sent, skips

COMPLETE, LIVE = SkipReason.COMPLETE, SkipReason.LIVE


def reads(*events: str) -> list[ReadVersion]:
    """``"a@v1"`` a version, ``"a@"`` a delete."""
    out = []
    for event in events:
        doc_id, version = event.split("@")
        out.append(ReadVersion(doc_id, version or None))
    return out


CASES = [
    # (what was read, what the store holds complete, live marks, written before, expected)
    ("held at that version", ["a@v1"], {"a": "v1"}, set(), set(), [COMPLETE]),
    ("held at an older version", ["a@v2"], {"a": "v1"}, set(), set(), [None]),
    ("held at a version read later", ["a@v1"], {"a": "v2"}, set(), set(), [None]),
    ("not held at all", ["a@v1"], {}, set(), set(), [None]),
    ("marked live", ["a@v1"], {}, {"a"}, set(), [LIVE]),
    ("marked live wins over complete", ["a@v1"], {"a": "v1"}, {"a"}, set(), [LIVE]),
    ("live, even after this backfill wrote it", ["a@v1"], {}, {"a"}, {"a"}, [LIVE]),
    ("a delete is never skipped", ["a@"], {"a": "v1"}, {"a"}, set(), [None]),
    # An older version sent this poll may reach the store after its answer: the newer one
    # held complete must be written again, after it.
    ("older version first, same poll", ["a@v1", "a@v2"], {"a": "v2"}, set(), set(),
     [None, None]),
    ("a delete first, same poll", ["a@", "a@v1"], {"a": "v1"}, set(), set(), [None, None]),
    ("sent in an earlier poll", ["a@v2"], {"a": "v2"}, set(), {"a"}, [None]),
    ("skipped, then its delete", ["a@v1", "a@"], {"a": "v1"}, set(), set(), [COMPLETE, None]),
    ("the same version twice", ["a@v1", "a@v1"], {"a": "v1"}, set(), set(),
     [COMPLETE, COMPLETE]),
    ("others are independent", ["a@v1", "b@v1", "c@v9", "d@v1"], {"a": "v1", "c": "v9"},
     {"d"}, {"c"}, [COMPLETE, None, None, LIVE]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("events", "complete", "live", "written", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_which_versions_are_skipped(
    events: list[str],
    complete: dict[str, str],
    live: set[str],
    written: set[str],
    expected: list[SkipReason | None],
) -> None:
    assert skips(reads(*events), Held(complete, frozenset(live)), frozenset(written)) == expected


def test_nothing_held_skips_nothing() -> None:
    read = reads("a@v1", "b@", "c@v3")
    assert skips(read, Held(), frozenset()) == [None, None, None]


def test_what_was_sent_is_what_was_not_skipped() -> None:
    read = reads("a@v1", "b@v1", "c@", "d@v2")
    decided = skips(read, Held({"a": "v1"}, frozenset({"d"})), frozenset())
    assert sent(read, decided) == {"b", "c"}
