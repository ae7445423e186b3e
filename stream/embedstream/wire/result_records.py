"""Every record kind of the results topic, typed: how the processor writes documents' outputs
and how a reader (the store writer) decodes and validates any record it finds there.

| kind | key | value |
|---|---|---|
| :class:`PlainResult` | request id | a result without ``type`` (:class:`EmbedResult`) |
| :class:`ChunkResult` | doc_id | ``{"type": "chunk", ...}``, one per chunk of a version |
| :class:`DocumentComplete` | doc_id | ``{"type": "complete", ...}`` after all chunks of a version |
| :class:`DocumentIncomplete` | doc_id | ``{"type": "incomplete", "missing": [seq], ...}`` |
| :class:`DocumentDeleted` | doc_id | null (a tombstone) |

Every record the processor writes names its index generation (``embedstream.core.generations``):
``index_generation`` in the value, 8 lower-case hex digits; a tombstone, whose value is null,
in the header ``embedstream.index_generation``. Records without one (written by an embedstream
before generations, or by hand) decode with ``index_generation`` None.

:func:`decode_output` raises nothing but :class:`InvalidEvent`; embeddings sent as base64 are
decoded with the one codec (:mod:`embedstream.wire.vectors`), so every decoded record holds
its vector as a float list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire import result_fields as field
from embedstream.wire.events import INDEX_GENERATION, MAX_ID_CHARS, EmbedResult
from embedstream.wire.headers import BACKFILL_HEADER, INDEX_GENERATION_HEADER
from embedstream.wire.json_bytes import record_json
from embedstream.wire.result_fields import MAX_VERSION_CHARS
from embedstream.wire.vectors import Vector

# A plain result is the result event that exists today; one type, not two.
PlainResult = EmbedResult

CHUNK = "chunk"
COMPLETE = "complete"
INCOMPLETE = "incomplete"


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """The embedding of one chunk of one version of a document."""

    doc_id: str
    version: str
    chunk_seq: int
    chunk_count: int
    span: tuple[int, int]  # [start, end) in the document's text
    embedding: Vector  # decoded records always hold a float list
    model: str
    dimensions: int
    tokens: int
    cached: bool
    metadata: dict[str, Any] | None
    attempts: int
    latency_ms: float
    text: str | None = None  # only when the processor is set to include chunk text
    index_generation: str | None = None
    backfill: bool = False  # written by the backfill lane: carried in a header, not the value

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> bytes:
        return record_json(self.fields())

    def fields(self) -> dict[str, Any]:
        """The record as the JSON value holds it (and a registry format's encoder starts from)."""
        doc: dict[str, Any] = {
            "type": CHUNK,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_seq": self.chunk_seq,
            "chunk_count": self.chunk_count,
            "span": self.span,
            "embedding": self.embedding,
            "model": self.model,
            "dimensions": self.dimensions,
            "usage": {"tokens": self.tokens},
            "cached": self.cached,
            "metadata": self.metadata,
            "attempts": self.attempts,
            "latency_ms": round(self.latency_ms, 3),
        }
        if self.text is not None:
            doc["text"] = self.text
        if self.index_generation is not None:
            doc[INDEX_GENERATION] = self.index_generation
        return doc


@dataclass(frozen=True, slots=True)
class DocumentComplete:
    """Every chunk of this version was written before this record."""

    doc_id: str
    version: str
    chunk_count: int
    metadata: dict[str, Any] | None
    index_generation: str | None = None
    backfill: bool = False  # written by the backfill lane: carried in a header, not the value

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> bytes:
        return record_json(self.fields())

    def fields(self) -> dict[str, Any]:
        doc = {
            "type": COMPLETE,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_count": self.chunk_count,
            "metadata": self.metadata,
        }
        return _with_generation(doc, self.index_generation)


@dataclass(frozen=True, slots=True)
class DocumentIncomplete:
    """Some chunks of this version were dead-lettered; ``missing`` names them, ascending."""

    doc_id: str
    version: str
    chunk_count: int
    missing: tuple[int, ...]
    metadata: dict[str, Any] | None
    index_generation: str | None = None
    backfill: bool = False  # written by the backfill lane: carried in a header, not the value

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> bytes:
        return record_json(self.fields())

    def fields(self) -> dict[str, Any]:
        doc = {
            "type": INCOMPLETE,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_count": self.chunk_count,
            "missing": self.missing,
            "metadata": self.metadata,
        }
        return _with_generation(doc, self.index_generation)


@dataclass(frozen=True, slots=True)
class DocumentDeleted:
    """A tombstone: the document is gone (every version)."""

    doc_id: str
    index_generation: str | None = None  # carried in a header: the value is null
    backfill: bool = False  # written by the backfill lane (a header too)

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> None:
        return None  # a tombstone's value is null

    def headers(self) -> list[tuple[str, bytes]]:
        if self.index_generation is None:
            return []
        return [(INDEX_GENERATION_HEADER, self.index_generation.encode())]


def _with_generation(doc: dict[str, Any], generation: str | None) -> dict[str, Any]:
    if generation is not None:
        doc[INDEX_GENERATION] = generation
    return doc


OutputRecord = PlainResult | ChunkResult | DocumentComplete | DocumentIncomplete | DocumentDeleted
DocumentRecord = ChunkResult | DocumentComplete | DocumentIncomplete | DocumentDeleted


def decode_output(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
) -> OutputRecord:
    """Parse and validate one results-topic record (its key, a JSON value and its headers)."""
    backfill = _from_backfill(headers)
    if value is None:
        generation = field.header_generation(headers)
        return DocumentDeleted(_key_text(key), generation, backfill)
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(Reason.INVALID_JSON, f"value is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEvent(
            Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(doc).__name__}"
        )
    return output_of(key, doc, backfill=backfill)


def _from_backfill(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    return any(name == BACKFILL_HEADER for name, _ in headers or ())


def output_of(
    key: bytes | None,
    doc: dict[str, Any],
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    *,
    backfill: bool | None = None,
) -> OutputRecord:
    """Validate one results-topic record already decoded to its fields (from JSON, or from a
    registry format by ``wire/formats/results.py``), and its headers."""
    if backfill is None:
        backfill = _from_backfill(headers)
    kind = doc.get("type")
    record: OutputRecord
    if kind is None:
        record = _plain(doc)
        own_key = record.id
    elif kind == CHUNK:
        record = _chunk(doc)
        own_key = record.doc_id
    elif kind == COMPLETE:
        record = DocumentComplete(
            doc_id=field.doc_id(doc),
            version=field.version(doc),
            chunk_count=field.count(doc),
            metadata=field.metadata(doc),
            index_generation=field.generation(doc),
        )
        own_key = record.doc_id
    elif kind == INCOMPLETE:
        record = _incomplete(doc)
        own_key = record.doc_id
    else:
        raise InvalidEvent(Reason.UNKNOWN_RECORD_TYPE, f"unknown record type {str(kind)[:40]!r}")
    # Outputs of one document are ordered only because they share the key: a record keyed by
    # something else may have overtaken (or fallen behind) its siblings.
    if key is not None and key != own_key.encode():
        raise InvalidEvent(Reason.KEY_MISMATCH, "the record's key is not its id / doc_id")
    if backfill and not isinstance(record, PlainResult):
        record = dataclasses.replace(record, backfill=True)
    return record


def _key_text(key: bytes | None) -> str:
    if not key:
        raise InvalidEvent(Reason.MISSING_KEY, "a tombstone without a key names no document")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent(Reason.INVALID_UTF8, "a tombstone's key is not UTF-8") from None
    if len(text) > MAX_ID_CHARS:
        raise InvalidEvent(Reason.INVALID_ID, f"key is longer than {MAX_ID_CHARS} characters")
    return text


def _plain(doc: dict[str, Any]) -> PlainResult:
    embedding, dimensions = field.embedding(doc)
    return PlainResult(
        id=field.string(doc, "id", MAX_ID_CHARS),
        model=field.string(doc, "model", MAX_VERSION_CHARS),
        embedding=embedding,
        dimensions=dimensions,
        tokens=field.tokens(doc),
        metadata=field.metadata(doc),
        attempts=field.integer(doc, "attempts", 0),
        latency_ms=field.latency(doc),
        cached=field.boolean(doc, "cached", default=False),
        index_generation=field.generation(doc),
    )


def _chunk(doc: dict[str, Any]) -> ChunkResult:
    count = field.count(doc)
    seq = field.integer(doc, "chunk_seq", 0)
    if seq >= count:
        field.invalid(f"chunk_seq {seq} is not below chunk_count {count}")
    embedding, dimensions = field.embedding(doc)
    text = doc.get("text")
    if text is not None and not isinstance(text, str):
        field.invalid("field 'text' must be a string")
    return ChunkResult(
        doc_id=field.doc_id(doc),
        version=field.version(doc),
        chunk_seq=seq,
        chunk_count=count,
        span=field.span(doc),
        embedding=embedding,
        model=field.string(doc, "model", MAX_VERSION_CHARS),
        dimensions=dimensions,
        tokens=field.tokens(doc),
        cached=field.boolean(doc, "cached"),
        metadata=field.metadata(doc),
        attempts=field.integer(doc, "attempts", 0),
        latency_ms=field.latency(doc),
        text=text,
        index_generation=field.generation(doc),
    )


def _incomplete(doc: dict[str, Any]) -> DocumentIncomplete:
    count = field.count(doc)
    missing = doc.get("missing")
    if not isinstance(missing, list) or not missing:
        field.invalid("field 'missing' must be a non-empty list of chunk_seq")
    if not all(type(seq) is int and 0 <= seq < count for seq in missing):
        field.invalid(f"field 'missing' must hold chunk_seq values in [0, {count})")
    if len(set(missing)) != len(missing):
        field.invalid("field 'missing' repeats a chunk_seq")
    return DocumentIncomplete(
        doc_id=field.doc_id(doc),
        version=field.version(doc),
        chunk_count=count,
        missing=tuple(sorted(missing)),
        metadata=field.metadata(doc),
        index_generation=field.generation(doc),
    )
