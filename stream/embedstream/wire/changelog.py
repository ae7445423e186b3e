"""The chunk changelog's records: the chunk id, the chunk value Kafka Connect reads without
custom code, and the state record that remembers each document's chunk counts.

| record | key | value |
|---|---|---|
| a chunk of a complete version | its chunk id | Connect's JSON envelope: schema and payload |
| a chunk that no longer exists | its chunk id | null (a tombstone) |
| a document's state | ``<input topic>/<partition>/<doc_id>`` | ``{"chunk_counts": {id: n}}`` |
| a deleted document's state | the same | null |

The chunk id is a UUIDv5 (as its 36-character string) of the index generation, the doc_id and
the chunk_seq: every sink takes it as a row or document id as it is (Elasticsearch and
OpenSearch any string up to 512 bytes, Qdrant only a UUID or an unsigned integer, a JDBC table
a text or uuid column), whatever the length of the doc_id; the same chunk of the same
generation always gets the same id, so a replay upserts the same row; two generations never
share one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.vectors import Vector, base64_floats

# Fixed for ever: changing it changes every chunk id, so every store keyed by them.
CHUNK_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "embedstream:chunk")


def chunk_id(index_generation: str, doc_id: str, chunk_seq: int) -> str:
    """The chunk's stable id. The name hashed is unambiguous: the generation has no newline
    and chunk_seq is the digits after the last one, so any doc_id fits between."""
    return str(uuid.uuid5(CHUNK_ID_NAMESPACE, f"{index_generation}\n{doc_id}\n{chunk_seq}"))


# Connect's names for semantic types the Debezium JDBC sink maps to PostgreSQL: an array of
# float64 named DoubleVector is written to a pgvector `vector` column (CAST(? AS vector)),
# a string named Json to json/jsonb. Other sinks see an array of doubles and a string.
DOUBLE_VECTOR = "io.debezium.data.DoubleVector"
JSON_TEXT = "io.debezium.data.Json"

CONNECT_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "name": "io.embedstream.ChangelogChunk",
    "optional": False,
    "fields": [
        {"field": "chunk_id", "type": "string", "optional": False},
        {"field": "doc_id", "type": "string", "optional": False},
        {"field": "version", "type": "string", "optional": False},
        {"field": "chunk_seq", "type": "int32", "optional": False},
        {"field": "span_start", "type": "int32", "optional": False},
        {"field": "span_end", "type": "int32", "optional": False},
        {"field": "model", "type": "string", "optional": False},
        {"field": "dimensions", "type": "int32", "optional": False},
        {"field": "index_generation", "type": "string", "optional": False},
        {"field": "metadata", "type": "string", "optional": True, "name": JSON_TEXT},
        {"field": "text", "type": "string", "optional": True},
        {
            "field": "embedding",
            "type": "array",
            "items": {"type": "double", "optional": False},
            "optional": False,
            "name": DOUBLE_VECTOR,
        },
    ],
}
_SCHEMA_JSON = orjson.dumps(CONNECT_SCHEMA)


@dataclass(frozen=True, slots=True)
class ChangelogChunk:
    """One chunk of a complete document version, as the changelog carries it."""

    doc_id: str
    version: str
    chunk_seq: int
    span: tuple[int, int]  # [start, end) in the document's text
    embedding: Vector
    model: str
    dimensions: int
    index_generation: str
    metadata: Mapping[str, Any] | None
    text: str | None = None  # with include_chunk_text

    @property
    def chunk_id(self) -> str:
        return chunk_id(self.index_generation, self.doc_id, self.chunk_seq)

    @property
    def key(self) -> bytes:
        return self.chunk_id.encode()

    def payload(self) -> dict[str, Any]:
        """The record's fields, as the schemas name them: the vector as floats (a base64 one
        decoded), the metadata as JSON text (Connect has no free-form object type)."""
        embedding = self.embedding
        floats = base64_floats(embedding).tolist() if isinstance(embedding, str) else embedding
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_seq": self.chunk_seq,
            "span_start": self.span[0],
            "span_end": self.span[1],
            "model": self.model,
            "dimensions": self.dimensions,
            "index_generation": self.index_generation,
            "metadata": None if self.metadata is None else orjson.dumps(self.metadata).decode(),
            "text": self.text,
            "embedding": floats,
        }


def connect_json(chunk: ChangelogChunk) -> bytes:
    """The value as Connect's JsonConverter reads it with ``schemas.enable=true``: the schema
    (the same bytes every time) beside the payload."""
    return b'{"schema":' + _SCHEMA_JSON + b',"payload":' + orjson.dumps(chunk.payload()) + b"}"


# --------------------------------------------------------------------------- state records


def state_key(topic: str, partition: int, doc_id: str) -> bytes:
    """Topic names have no '/', so the doc_id is everything after the second one."""
    return f"{topic}/{partition}/{doc_id}".encode()


def state_key_prefix(topic: str, partition: int) -> bytes:
    """What the state keys of one input partition's documents begin with."""
    return f"{topic}/{partition}/".encode()


def state_doc_id(key: bytes, prefix: bytes) -> str:
    """The doc_id of a state key that begins with ``prefix``."""
    try:
        return key[len(prefix) :].decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent(Reason.INVALID_UTF8, "a changelog state key is not UTF-8") from None


def encode_state(counts: Mapping[str, int]) -> bytes:
    return orjson.dumps({"chunk_counts": dict(counts)})


def decode_state(value: bytes) -> dict[str, int]:
    """The chunk counts by index generation; InvalidEvent if it is not a state record."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(Reason.INVALID_JSON, f"state is not JSON: {exc}") from None
    counts = doc.get("chunk_counts") if isinstance(doc, dict) else None
    if not isinstance(counts, dict) or not all(type(n) is int and n >= 0 for n in counts.values()):
        raise InvalidEvent(Reason.INVALID_RESULT, "state must hold chunk_counts: {id: n >= 0}")
    return counts
