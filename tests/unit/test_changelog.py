"""The chunk changelog's pure parts: chunk ids, what a complete version replaces, the value
Kafka Connect reads and the state record."""

from __future__ import annotations

import uuid

import orjson
import pytest
from embedstream.core.chunk_ids import ChunkCounts
from embedstream.errors import InvalidEvent
from embedstream.wire.changelog import (
    CONNECT_SCHEMA,
    DOUBLE_VECTOR,
    ChangelogChunk,
    chunk_id,
    connect_json,
    decode_state,
    encode_state,
    state_doc_id,
    state_key,
    state_key_prefix,
)
from embedstream.wire.vectors import encode_base64


def test_a_chunk_id_is_a_stable_uuid_of_generation_doc_and_seq() -> None:
    first = chunk_id("0a1b2c3d", "handbook/leave.md", 3)
    assert first == chunk_id("0a1b2c3d", "handbook/leave.md", 3)  # a replay upserts it
    assert uuid.UUID(first).version == 5 and len(first) == 36
    others = {
        chunk_id("ffffffff", "handbook/leave.md", 3),  # another generation never shares it
        chunk_id("0a1b2c3d", "handbook/leave.md", 4),
        chunk_id("0a1b2c3d", "handbook/leave.md\n3", 3),  # a newline in a doc_id is no escape
        chunk_id("0a1b2c3d", "handbook/leave.md\n", 33),
    }
    assert first not in others and len(others) == 4
    assert len(chunk_id("0a1b2c3d", "x" * 10_000, 0)) == 36  # whatever the doc_id's length


@pytest.mark.parametrize(
    ("before", "count", "gone", "after"),
    [
        ({}, 3, range(3, 3), {"g": 3}),  # a new document: nothing to tombstone
        ({"g": 3}, 5, range(5, 5), {"g": 5}),  # grown: upserts only
        ({"g": 5}, 2, range(2, 5), {"g": 2}),  # shrunk: chunks 2..4 are gone
        ({"g": 4}, 0, range(0, 4), {"g": 0}),  # emptied: all of them
        ({"h": 7}, 2, range(2, 2), {"h": 7, "g": 2}),  # another generation is left alone
    ],
)
def test_a_complete_version_tombstones_the_chunks_it_no_longer_has(
    before: dict[str, int], count: int, gone: range, after: dict[str, int]
) -> None:
    counts = ChunkCounts({"d": before} if before else {})
    change = counts.replacing("d", "g", count)
    assert change.gone == gone and change.counts == after
    assert counts.of("d") == before  # nothing kept until it is written
    counts.keep("d", change.counts)
    assert counts.of("d") == after
    assert counts.forget("d") == after and counts.of("d") == {} and len(counts) == 0


@pytest.mark.parametrize("base64", [False, True])
def test_the_value_is_connects_json_envelope_with_a_double_vector(base64: bool) -> None:
    floats = [0.25, -0.5, 0.125]
    chunk = ChangelogChunk(
        "d1", "v2", 1, (10, 42), encode_base64(floats) if base64 else floats, "m", 3,
        "0a1b2c3d", {"lang": "en"}, text=None,
    )  # fmt: skip
    value = orjson.loads(connect_json(chunk))
    assert value["schema"] == CONNECT_SCHEMA
    payload = value["payload"]
    assert payload == {
        "chunk_id": chunk_id("0a1b2c3d", "d1", 1),
        "doc_id": "d1",
        "version": "v2",
        "chunk_seq": 1,
        "span_start": 10,
        "span_end": 42,
        "model": "m",
        "dimensions": 3,
        "index_generation": "0a1b2c3d",
        "metadata": '{"lang":"en"}',
        "text": None,
        "embedding": floats,
    }
    assert chunk.key == payload["chunk_id"].encode()
    # Every payload field is declared, with a Connect type JsonConverter knows.
    fields = {f["field"]: f for f in CONNECT_SCHEMA["fields"]}
    assert set(fields) == set(payload)
    known = {"string", "int32", "array"}
    assert {f["type"] for f in fields.values()} <= known
    assert fields["embedding"]["name"] == DOUBLE_VECTOR
    assert fields["embedding"]["items"]["type"] == "double"


def test_state_records_round_trip_and_name_their_partition() -> None:
    key = state_key("embed.requests.low", 3, "a/b/c")
    prefix = state_key_prefix("embed.requests.low", 3)
    assert key.startswith(prefix) and not key.startswith(state_key_prefix("embed.requests.low", 31))
    assert state_doc_id(key, prefix) == "a/b/c"
    assert decode_state(encode_state({"0a1b2c3d": 4})) == {"0a1b2c3d": 4}


@pytest.mark.parametrize(
    "value", [b"not json", b"[]", b'{"chunk_counts": [1]}', b'{"chunk_counts": {"g": -1}}']
)
def test_a_malformed_state_record_is_refused(value: bytes) -> None:
    with pytest.raises(InvalidEvent):
        decode_state(value)
