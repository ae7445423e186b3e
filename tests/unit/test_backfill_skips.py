"""The backfill's rule of which document versions its generation already holds (pure), and
the store's answers it decides from (none when the store cannot say in time)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from embedstream.core.backfill_skips import (
    Held,
    ReadVersion,
    SentDocuments,
    SkipReason,
    sent,
    skips,
)
from embedstream.errors import Reason, StoreError
from embedstream.kafka.backfill.holdings import StoreAnswers
from embedstream.testing.virtual_loop import VirtualLoop

COMPLETE, LIVE, SUPERSEDED = SkipReason.COMPLETE, SkipReason.LIVE, SkipReason.SUPERSEDED


def reads(*events: str) -> list[ReadVersion]:
    """``"a@v1"`` a version, ``"a@"`` a delete; a trailing ``!``: a later record of the
    document was read ahead (superseded)."""
    out = []
    for event in events:
        doc_id, version = event.rstrip("!").split("@")
        out.append(ReadVersion(doc_id, version or None, superseded=event.endswith("!")))
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
    # A later record of the document in the topic replaces the version: nothing sent for it.
    ("superseded", ["a@v1!"], {}, set(), set(), [SUPERSEDED]),
    ("superseded before live or complete", ["a@v1!"], {"a": "v1"}, {"a"}, set(), [SUPERSEDED]),
    ("superseded, even after this backfill wrote it", ["a@v1!"], {}, set(), {"a"},
     [SUPERSEDED]),
    # Nothing was sent for the superseded one: the latest, held complete, is skipped too.
    ("superseded, then the latest held", ["a@v1!", "a@v2"], {"a": "v2"}, set(), set(),
     [SUPERSEDED, COMPLETE]),
    ("superseded, then the latest", ["a@v1!", "a@v2"], {}, set(), set(), [SUPERSEDED, None]),
    ("a superseded delete is still done", ["a@!", "a@v2"], {}, set(), set(), [None, None]),
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


class FlakyStore:
    """Answers from a list: a Held, an error to raise, or None to never answer."""

    def __init__(self, *answers: Held | Exception | None) -> None:
        self.answers = list(answers)
        self.asked: list[list[str]] = []
        self.closed = False

    async def held(self, doc_ids: Sequence[str]) -> Held:
        self.asked.append(list(doc_ids))
        answer = self.answers.pop(0)
        if answer is None:
            await asyncio.Event().wait()  # hangs: only the timeout ends it
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, Held)
        return answer

    async def close(self) -> None:
        self.closed = True


def test_a_store_that_cannot_answer_holds_nothing_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    known = Held({"a": "v1"})
    down = StoreError(Reason.STORE_UNAVAILABLE, "cannot connect", retriable=True)
    store = FlakyStore(known, down, OSError("reset"), None, known)
    answers = StoreAnswers(store, "0b663aff", timeout_s=5.0)

    async def ask() -> list[Held]:
        got = [await answers.held(["a"]) for _ in range(5)]
        assert await answers.held([]) == Held()  # nothing to ask
        await answers.close()
        return got

    loop = VirtualLoop()  # the hang's timeout passes in virtual time
    with caplog.at_level(logging.INFO, logger="embedstream.kafka.backfill.holdings"):
        got = loop.run_until_complete(ask())
    loop.close()
    # An error, a broken connection, no answer in time: nothing held, everything embedded.
    assert got == [known, Held(), Held(), Held(), known]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "cannot ask the store" in said[0] and "again" in said[1]
    assert len(store.asked) == 5 and store.closed


async def test_without_a_store_nothing_is_held() -> None:
    assert await StoreAnswers(None, "0b663aff").held(["a"]) == Held()


def test_past_its_bound_every_document_counts_as_sent_and_nothing_held_is_skipped() -> None:
    written = SentDocuments(limit=3)
    assert not written.add_all(["a", "b", "c"]) and "a" in written and "z" not in written
    held = Held({"z": "v1"})
    assert skips(reads("z@v1"), held, written) == [COMPLETE]
    assert written.add_all(["d"])  # the fourth fills it: the ids are dropped
    assert len(written) == 0 and "z" in written and not written.add_all(["e"])
    assert skips(reads("z@v1"), held, written) == [None]  # embedded again: safe, bounded
    assert skips(reads("y@v2"), Held({}, frozenset({"y"})), written) == [LIVE]  # live: any order
