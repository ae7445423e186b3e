"""The results topic's record kinds: round trips, the contract's field names, and a reason
code for every malformed record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from embedstream.errors import InvalidEvent, Reason
from embedstream.wire import (
    INDEX_GENERATION_HEADER,
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
    PlainResult,
    decode_output,
    encode_base64,
)

# Values exact in float32, so base64 round trips compare equal.
FLOATS = [0.5, -1.25, 3.0, 0.0]

CHUNK = ChunkResult(
    doc_id="doc-1",
    version="v7",
    chunk_seq=1,
    chunk_count=3,
    span=(10, 42),
    embedding=FLOATS,
    model="m",
    dimensions=4,
    tokens=9,
    cached=False,
    metadata={"lang": "en"},
    attempts=1,
    latency_ms=12.5,
)
COMPLETE = DocumentComplete(doc_id="doc-1", version="v7", chunk_count=3, metadata=None)
INCOMPLETE = DocumentIncomplete(
    doc_id="doc-1", version="v7", chunk_count=3, missing=(0, 2), metadata={"a": 1}
)
PLAIN = PlainResult(
    id="r-1",
    model="m",
    embedding=FLOATS,
    dimensions=4,
    tokens=3,
    metadata=None,
    attempts=2,
    latency_ms=4.0,
    cached=True,
)


GENERATION = "0a1b2c3d"


@pytest.mark.parametrize(
    "record",
    [CHUNK, replace(CHUNK, text="the chunk"), COMPLETE, INCOMPLETE, PLAIN,
     replace(CHUNK, index_generation=GENERATION), replace(COMPLETE, index_generation=GENERATION),
     replace(INCOMPLETE, index_generation=GENERATION), replace(PLAIN, index_generation=GENERATION)],
    ids=["chunk", "chunk-text", "complete", "incomplete", "plain", "chunk-generation",
         "complete-generation", "incomplete-generation", "plain-generation"],
)  # fmt: skip
def test_round_trip(record: OutputRecord) -> None:
    key = record.id if isinstance(record, PlainResult) else record.doc_id
    value = record.encode()
    assert value is not None
    assert decode_output(key.encode(), value) == record
    assert decode_output(None, value) == record  # the key is checked only when present


def test_tombstone_round_trip() -> None:
    deleted = DocumentDeleted("doc-1")
    records: list[OutputRecord] = [deleted]
    assert [record.encode() for record in records] == [None]
    assert decode_output(deleted.key, None) == deleted
    named = DocumentDeleted("doc-1", GENERATION)
    assert named.headers() == [(INDEX_GENERATION_HEADER, GENERATION.encode())]
    assert decode_output(named.key, None, [("other", b"x"), *named.headers()]) == named


@pytest.mark.parametrize("value", [b"0A1B2C3D", b"0a1b2c3", b"0a1b2c3d4", b"", None])
def test_a_tombstone_with_a_malformed_generation_header_is_invalid(value: bytes | None) -> None:
    with pytest.raises(InvalidEvent) as caught:
        decode_output(b"doc-1", None, [(INDEX_GENERATION_HEADER, value)])
    assert caught.value.reason == Reason.INVALID_RESULT


def test_base64_embedding_decoded_by_the_codec() -> None:
    doc = orjson.loads(CHUNK.encode())
    doc["embedding"] = encode_base64(FLOATS)
    record = decode_output(b"doc-1", orjson.dumps(doc))
    assert isinstance(record, ChunkResult)
    assert record.embedding == FLOATS


@pytest.mark.parametrize(
    ("record", "fields"),
    [
        (CHUNK, ["type", "doc_id", "version", "chunk_seq", "chunk_count", "span", "embedding",
                 "model", "dimensions", "usage", "cached", "metadata", "attempts", "latency_ms"]),
        (COMPLETE, ["type", "doc_id", "version", "chunk_count", "metadata"]),
        (INCOMPLETE, ["type", "doc_id", "version", "chunk_count", "missing", "metadata"]),
        (replace(COMPLETE, index_generation=GENERATION),
         ["type", "doc_id", "version", "chunk_count", "metadata", "index_generation"]),
        (replace(PLAIN, index_generation=GENERATION),
         ["id", "model", "embedding", "dimensions", "usage", "metadata", "attempts",
          "latency_ms", "cached", "index_generation"]),
    ],
)  # fmt: skip
def test_contract_field_names(record: OutputRecord, fields: list[str]) -> None:
    value = record.encode()
    assert value is not None
    assert list(orjson.loads(value)) == fields


def test_chunk_text_only_when_set() -> None:
    with_text = replace(CHUNK, text="hello")
    assert orjson.loads(with_text.encode())["text"] == "hello"
    assert "text" not in orjson.loads(CHUNK.encode())
    assert orjson.loads(CHUNK.encode())["span"] == [10, 42]


def _chunk(**changes: Any) -> bytes:
    doc = orjson.loads(CHUNK.encode())
    for name, value in changes.items():
        if value is _DROP:
            del doc[name]
        else:
            doc[name] = value
    return orjson.dumps(doc)


def _final(kind: str, **changes: Any) -> bytes:
    record = COMPLETE if kind == "complete" else INCOMPLETE
    doc = orjson.loads(record.encode() or b"")
    doc.update(changes)
    return orjson.dumps(doc)


_DROP = object()


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, None, Reason.MISSING_KEY),
        (b"", None, Reason.MISSING_KEY),
        (b"\xff", None, Reason.INVALID_UTF8),
        (b"doc-1", b"{not json", Reason.INVALID_JSON),
        (b"doc-1", b"[1]", Reason.NOT_AN_OBJECT),
        (b"doc-1", b'{"type":"chunky"}', Reason.UNKNOWN_RECORD_TYPE),
        (b"other", CHUNK.encode(), Reason.KEY_MISMATCH),
        (b"doc-1", PLAIN.encode(), Reason.KEY_MISMATCH),
        (None, _chunk(doc_id=""), Reason.INVALID_RESULT),
        (None, _chunk(doc_id=_DROP), Reason.INVALID_RESULT),
        (None, _chunk(version=7), Reason.INVALID_RESULT),
        (None, _chunk(chunk_seq=3), Reason.INVALID_RESULT),
        (None, _chunk(chunk_seq=-1), Reason.INVALID_RESULT),
        (None, _chunk(chunk_seq=True), Reason.INVALID_RESULT),
        (None, _chunk(chunk_count=_DROP), Reason.INVALID_RESULT),
        (None, _chunk(span=[5, 2]), Reason.INVALID_RESULT),
        (None, _chunk(span=[1]), Reason.INVALID_RESULT),
        (None, _chunk(span=[0, 1.5]), Reason.INVALID_RESULT),
        (None, _chunk(embedding=[]), Reason.INVALID_RESULT),
        (None, _chunk(embedding=["x", 1, 2, 3]), Reason.INVALID_RESULT),
        (None, _chunk(embedding=[1e308, 1e308, 1e308, 1e308]), None),
        (None, _chunk(embedding={"a": 1}), Reason.INVALID_RESULT),
        (None, _chunk(embedding="not base64!"), Reason.INVALID_RESULT),
        (None, _chunk(embedding="AAAA"), Reason.INVALID_RESULT),  # 3 bytes: no float32
        (None, _chunk(dimensions=5), Reason.INVALID_RESULT),
        (None, _chunk(model=None), Reason.INVALID_RESULT),
        (None, _chunk(usage={"tokens": -1}), Reason.INVALID_RESULT),
        (None, _chunk(usage=3), Reason.INVALID_RESULT),
        (None, _chunk(cached="no"), Reason.INVALID_RESULT),
        (None, _chunk(metadata=[1]), Reason.INVALID_RESULT),
        (None, _chunk(latency_ms=-1), Reason.INVALID_RESULT),
        (None, _chunk(text=5), Reason.INVALID_RESULT),
        (None, _chunk(index_generation="ABCDEF01"), Reason.INVALID_RESULT),
        (None, _chunk(index_generation=12345678), Reason.INVALID_RESULT),
        (None, _chunk(index_generation="abc"), Reason.INVALID_RESULT),
        (None, _final("complete", index_generation="not-hex!"), Reason.INVALID_RESULT),
        (None, _final("complete", chunk_count=-1), Reason.INVALID_RESULT),
        (None, _final("complete", version=""), Reason.INVALID_RESULT),
        (None, _final("incomplete", missing=[]), Reason.INVALID_RESULT),
        (None, _final("incomplete", missing=[3]), Reason.INVALID_RESULT),
        (None, _final("incomplete", missing=[1, 1]), Reason.INVALID_RESULT),
        (None, _final("incomplete", missing="0"), Reason.INVALID_RESULT),
        (None, b'{"id":"r","model":"m","embedding":[1.0],"dimensions":1}', Reason.INVALID_RESULT),
    ],
)
def test_malformed_records(key: bytes | None, value: bytes | None, reason: str | None) -> None:
    if reason is None:  # valid: huge but finite values are not mistaken for infinity
        decode_output(key, value)
        return
    with pytest.raises(InvalidEvent) as caught:
        decode_output(key, value)
    assert caught.value.reason == reason


def test_incomplete_missing_sorted() -> None:
    record = decode_output(None, _final("incomplete", missing=[2, 0]))
    assert isinstance(record, DocumentIncomplete)
    assert record.missing == (0, 2)


def test_complete_of_an_empty_document() -> None:
    record = decode_output(b"doc-1", _final("complete", chunk_count=0))
    assert record == DocumentComplete("doc-1", "v7", 0, None)
