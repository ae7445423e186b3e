"""The backfill's source against what a new generation lacks: the documents topic folded as
compaction leaves it, and the lacking documents it does not hold."""

from __future__ import annotations

import pytest
from embedstream.core.backfill_source import HeldDocuments, Unsourced, unsourced


@pytest.mark.parametrize(
    ("records", "held"),
    [
        ([], set()),
        ([(b"a", True), (b"b", True)], {"a", "b"}),
        ([(b"a", True), (b"a", False)], set()),  # a tombstone removes the key
        ([(b"a", True), (b"a", False), (b"a", True)], {"a"}),  # published again after
        ([(b"a", False)], set()),  # a tombstone of a key never seen
        ([(b"a", True), (b"a", True)], {"a"}),  # versions: the key once
        ([(None, True), (b"b", True)], {"b"}),  # no key: not a document of the topic
        ([("d\u00e9".encode(), True)], {"d\u00e9"}),  # keys are UTF-8 doc_ids
    ],
)
def test_the_topic_holds_the_latest_record_of_each_key(
    records: list[tuple[bytes | None, bool]], held: set[str]
) -> None:
    documents = HeldDocuments()
    for key, has_value in records:
        documents.read(key, has_value)
    assert documents.ids == held


@pytest.mark.parametrize(
    ("lacking", "held", "shown", "expected"),
    [
        ([], set(), 5, Unsourced(0, 0, ())),
        (["a", "b"], {"a", "b", "c"}, 5, Unsourced(2, 0, ())),
        (["a", "b", "c"], {"b"}, 5, Unsourced(3, 2, ("a", "c"))),
        (["a", "b", "c", "d"], set(), 2, Unsourced(4, 4, ("a", "b"))),  # the first few named
        (["x"], {"y"}, 5, Unsourced(1, 1, ("x",))),
    ],
)
def test_the_lacking_documents_the_source_does_not_hold(
    lacking: list[str], held: set[str], shown: int, expected: Unsourced
) -> None:
    assert unsourced(lacking, held, shown) == expected
