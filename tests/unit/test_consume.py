"""`embedstream consume` record formatting: documents' records and tombstones print as JSON."""

from __future__ import annotations

import orjson
import pytest
from embedstream.testing.kafka import FakeRecord
from embedstream.tools.consume import is_document_record, outcome
from embedstream.wire import chunk_headers
from embedstream.wire.result_records import DocumentComplete, DocumentIncomplete


def record(key: bytes | None, value: bytes | None, headers: tuple = ()) -> FakeRecord:  # type: ignore[type-arg]
    return FakeRecord("t.results", 0, 7, key, value, headers)


CHUNK = orjson.dumps({"type": "chunk", "doc_id": "d", "version": "1", "chunk_seq": 0})
PLAIN = orjson.dumps({"id": "r1", "embedding": [0.5]})
COMPLETE = DocumentComplete("d", "1", 1, None).encode()
INCOMPLETE = DocumentIncomplete("d", "1", 3, (1,), {"k": 1}).encode()


@pytest.mark.parametrize(
    ("key", "value", "printed", "is_document"),
    [
        (b"d", None, {"type": "deleted", "doc_id": "d"}, True),  # a tombstone used to crash
        (b"d", CHUNK, orjson.loads(CHUNK), True),
        (
            b"d",
            COMPLETE,
            {"type": "complete", "doc_id": "d", "version": "1", "chunk_count": 1, "metadata": None},
            True,
        ),
        (b"d", INCOMPLETE, orjson.loads(INCOMPLETE), True),
        (b"r1", PLAIN, {"id": "r1", "embedding": [0.5]}, False),
        (b"x", b"{not json", {"key": "x", "value": "{not json"}, False),
        (None, b"[1]", {"key": None, "value": "[1]"}, False),
    ],
)
def test_each_results_record_prints_as_one_json_object(
    key: bytes | None, value: bytes | None, printed: dict[str, object], is_document: bool
) -> None:
    assert outcome(record(key, value), dead_letter=False) == printed
    assert is_document_record(record(key, value), dead_letter=False) is is_document


def test_a_dead_letter_is_a_documents_when_it_names_a_doc_id() -> None:
    chunk_letter = record(b"d", b'{"text": "x"}', tuple(chunk_headers("d", "1", 2)))
    plain_letter = record(b"r", b'{"id": "r"}')
    assert is_document_record(chunk_letter, dead_letter=True)
    assert not is_document_record(plain_letter, dead_letter=True)
    printed = outcome(chunk_letter, dead_letter=True)
    assert printed["headers"]["embedstream.doc.chunk_seq"] == "2"
    assert printed["key"] == "d" and printed["offset"] == 7
