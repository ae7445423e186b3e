"""What `migrate status` says of the backfill's source: none, not readable, holding every
lacking document, or lacking some (named, with what to do), under the new generation."""

from __future__ import annotations

import pytest
from embedstream.app.migrate import source_said, status_lines
from embedstream.core.backfill_source import Unsourced
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import IndexGeneration
from embedstream.stores.generations import StoredGeneration
from embedstream.stores.pgmigrate import GenerationStatus

PAD = "          "


@pytest.mark.parametrize(
    ("lacking", "topic", "found", "said"),
    [
        (150, None, None, "backfill source: none (topic_documents is not set): its 150 lacking "
         "documents come only from the live stream (a new version, or a delete)"),
        (3, "docs", "no broker", "backfill source: could not read the documents topic docs: "
         "no broker"),
        (3, "docs", Unsourced(3, 0, ()), "backfill source: the documents topic docs holds "
         "every lacking document"),
        (3, "docs", Unsourced(3, 2, ("a", "c")), "backfill source: the documents topic docs "
         "lacks 2 of the 3 lacking (a, c): never backfilled; publish them with `embedstream "
         "produce --documents`, or cut over with --allow-missing"),
        (1_200, "docs", Unsourced(1_200, 1_001, ("a", "b")), "backfill source: the documents "
         "topic docs lacks 1,001 of the 1,200 lacking (a, b, ...): never backfilled; publish "
         "them with `embedstream produce --documents`, or cut over with --allow-missing"),
    ],
)  # fmt: skip
def test_the_source_line(
    lacking: int, topic: str | None, found: Unsourced | str | None, said: str
) -> None:
    assert source_said(lacking, topic, found) == [PAD + said]


def test_the_source_lines_go_under_the_new_generation() -> None:
    rules = ChunkingRules(40, 0, 0)
    new = StoredGeneration("b", IndexGeneration("model-b", 8, rules), 8, "new")
    active = StoredGeneration("a", IndexGeneration("model-a", None, rules), 8, "active")
    found = [GenerationStatus(new, 2, 2, lacking=3, extra=0), GenerationStatus(active, 5, 5)]
    lines = status_lines(found, [PAD + "the source"])
    assert [line.split()[:2] for line in lines[:1] + lines[3:4]] == [["b", "new"], ["a", "active"]]
    assert "lacking 3, extra 0" in lines[1]
    assert lines[2] == PAD + "the source"
    assert len(lines) == 5
