"""`embedstream verify` for documents, on synthetic record lists: each contract breach is named."""

from __future__ import annotations

from typing import Any

import pytest
from embedstream.tools.verify import build_report
from embedstream.tools.verify.document_checks import ChunkLetter, PublishedEvent, check_documents
from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    DocumentRecord,
)


def chunk(doc: str, version: str, seq: int, count: int) -> ChunkResult:
    return ChunkResult(doc, version, seq, count, (0, 1), [1.0], "m", 1, 1, False, None, 1, 0.0)


def done(doc: str, version: str, count: int) -> DocumentComplete:
    return DocumentComplete(doc, version, count, None)


def partial(doc: str, version: str, count: int, *missing: int) -> DocumentIncomplete:
    return DocumentIncomplete(doc, version, count, missing, None)


def whole(doc: str, version: str, count: int) -> list[DocumentRecord]:
    return [*(chunk(doc, version, s, count) for s in range(count)), done(doc, version, count)]


def v(doc: str, version: str, offset: int = 0) -> PublishedEvent:
    return PublishedEvent(doc, version, ("t", 0, offset))


def delete(doc: str) -> PublishedEvent:
    return PublishedEvent(doc, None)


GOOD_LETTERS = [ChunkLetter("d", "1", 1)]

# (name, published, outputs, expected lost, expected violation fragments, duplicates)
CASES: list[tuple[str, list[PublishedEvent], list[DocumentRecord], list[str], list[str], int]] = [
    ("whole", [v("d", "1")], whole("d", "1", 3), [], [], 0),
    ("empty text: complete with 0 chunks", [v("d", "1")], [done("d", "1", 0)], [], [], 0),
    (
        "grow then shrink then delete",
        [v("d", "1"), v("d", "2"), v("d", "3"), delete("d")],
        [*whole("d", "1", 2), *whole("d", "2", 4), *whole("d", "3", 1), DocumentDeleted("d")],
        [], [], 0,
    ),
    (
        "incomplete naming its dead-lettered chunk",
        [v("d", "1")],
        [chunk("d", "1", 0, 3), chunk("d", "1", 2, 3), partial("d", "1", 3, 1)],
        [], [], 0,
    ),
    ("no final record", [v("d", "1")], whole("d", "1", 2)[:-1], ["d@1"],
     ["d@1: 2 chunk records after the last final"], 0),
    ("nothing at all", [v("d", "1"), delete("d")], [], ["d@1", "d (delete)"], [], 0),
    ("a chunk missing", [v("d", "1")], [chunk("d", "1", 0, 2), done("d", "1", 2)], [],
     ["d@1: complete without chunks [1]"], 0),
    ("a chunk twice", [v("d", "1")], [chunk("d", "1", 0, 1), chunk("d", "1", 0, 1),
                                      done("d", "1", 1)], [], [], 1),
    ("a final twice", [v("d", "1")], [*whole("d", "1", 1), done("d", "1", 1)], [], [], 1),
    (
        "a redelivered run (at-least-once replays a suffix)",
        [v("d", "1"), v("d", "2")],
        [*whole("d", "1", 1), *whole("d", "2", 1), *whole("d", "2", 1)],
        [], [], 2,
    ),
    (
        "a run cut off by a crash, then a replay from the version before",
        [v("d", "1"), v("d", "2")],
        [*whole("d", "1", 2), chunk("d", "2", 0, 2),
         *whole("d", "1", 2), *whole("d", "2", 2)],
        [], [], 1 + 2 + 1,  # the cut-off chunk; v1 again (2 chunks, its final)
    ),
    (
        "a run cut off by a crash, then a replay from the tombstone before",
        [v("d", "1"), delete("d"), v("d", "2")],
        [*whole("d", "1", 1), DocumentDeleted("d"), chunk("d", "2", 0, 2),
         DocumentDeleted("d"), *whole("d", "2", 2)],
        [], [], 1 + 1,  # the cut-off chunk; the tombstone again
    ),
    (
        "a run cut off by a crash, then a replay from an empty version before",
        [v("d", "1"), v("d", "2")],
        [done("d", "1", 0), chunk("d", "2", 0, 2), done("d", "1", 0), *whole("d", "2", 2)],
        [], [], 1 + 1,
    ),
    (
        "a cut-off run never finished is lost",
        [v("d", "1"), v("d", "2")],
        [*whole("d", "1", 1), chunk("d", "2", 0, 2), *whole("d", "1", 1)],
        ["d@2"], [], 1 + 2,
    ),
    ("chunk after its final", [v("d", "1")], [chunk("d", "1", 0, 2), done("d", "1", 2),
                                              chunk("d", "1", 1, 2)], [],
     ["complete without chunks [1]", "after the last final"], 0),
    (
        "versions interleaved",
        [v("d", "1"), v("d", "2")],
        [chunk("d", "1", 0, 1), chunk("d", "2", 0, 1), done("d", "1", 1), done("d", "2", 1)],
        [], ["d: chunks of versions 1 and 2 interleave"], 0,
    ),
    ("chunk_count disagrees", [v("d", "1")], [chunk("d", "1", 0, 2), chunk("d", "1", 1, 2),
                                              done("d", "1", 3)], [],
     ["chunk_count [2], final 3", "complete without chunks [2]"], 0),
    ("incomplete names a written chunk", [v("d", "1")],
     [chunk("d", "1", 0, 2), chunk("d", "1", 1, 2), partial("d", "1", 2, 1)], [],
     ["chunks [1] written and named missing"], 0),
    ("incomplete forgets a chunk", [v("d", "1")], [chunk("d", "1", 0, 3), partial("d", "1", 3, 1)],
     [], ["chunks [2] neither written nor named missing"], 0),
    ("incomplete without a dead letter", [v("d", "2")],
     [chunk("d", "2", 0, 2), partial("d", "2", 2, 1)], [], ["missing chunks [1] have no dead"], 0),
    (
        "tombstone before the version published before it",
        [v("d", "1"), delete("d")],
        [DocumentDeleted("d"), *whole("d", "1", 1)],
        ["d (delete)"], ["d: the tombstone is out of order"], 0,
    ),
    (
        "tombstone cuts into a version's chunks",
        [v("d", "1"), delete("d")],
        [chunk("d", "1", 0, 2), DocumentDeleted("d"), chunk("d", "1", 1, 2), done("d", "1", 2)],
        ["d (delete)"], ["d@1: chunks without a final record before the tombstone",
                         "complete without chunks [0]", "d: the tombstone is out of order"], 0,
    ),
    ("final of a version never published", [v("d", "1")], [*whole("d", "1", 1),
                                                            *whole("d", "9", 1)], [],
     ["d@9: a final record of a version never sent"], 0),
    ("outputs of a document never published", [], whole("x", "1", 1), [],
     ["x@1: a final record of a version never sent"], 0),
    ("a version dead-lettered whole expects nothing", [v("d", "1", offset=5), v("d", "2", 6)],
     whole("d", "2", 1), [], [], 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("published", "outputs", "lost", "violations", "duplicates"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_breach_of_the_output_contract_is_named(
    published: list[PublishedEvent],
    outputs: list[DocumentRecord],
    lost: list[str],
    violations: list[str],
    duplicates: int,
) -> None:
    report = check_documents(
        published, outputs, chunk_letters=GOOD_LETTERS, dead_lettered=[("t", 0, 5)]
    )
    assert list(report.lost) == lost
    assert len(report.violations) == len(violations), report.violations
    for found, fragment in zip(report.violations, violations, strict=True):
        assert fragment in found
    assert report.duplicates == duplicates
    assert report.ok is (not lost and not violations)


def test_counts_and_verdict_fold_into_the_verify_report() -> None:
    published = [v("a", "1"), v("b", "1"), delete("b")]
    outputs = [*whole("a", "1", 2), *whole("b", "1", 1), done("b", "1", 1), DocumentDeleted("b")]
    documents = check_documents(published, outputs, chunk_letters=[])
    assert (documents.documents, documents.versions, documents.tombstones) == (2, 2, 1)
    assert (documents.chunk_records, documents.complete, documents.deleted) == (3, 3, 1)
    assert documents.duplicates == 1 and documents.ok
    # The documents' duplicates share --max-duplicates with the plain results'.
    strict = build_report({}, [], [], documents=documents)
    tolerant = build_report({}, [], [], documents=documents, max_duplicates=1)
    assert not strict.ok and tolerant.ok
    assert "3 chunks, 3 complete, 0 incomplete, 1 deleted, 1 duplicates" in tolerant.summary()
    json: dict[str, Any] = tolerant.to_json()
    assert json["documents"]["complete"] == 3
    broken = check_documents([v("c", "1")], [], chunk_letters=[])
    report = build_report({}, [], [], documents=broken, max_duplicates=10)
    assert not report.ok and "documents lost: c@1" in report.summary()
