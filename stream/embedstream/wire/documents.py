"""Every record kind of the results topic, typed: how the processor writes documents' outputs
and how a reader (the store writer) decodes and validates any record it finds there.

| kind | key | value |
|---|---|---|
| :class:`PlainResult` | request id | a result without ``type`` (:class:`EmbedResult`) |
| :class:`ChunkResult` | doc_id | ``{"type": "chunk", ...}``, one per chunk of a version |
| :class:`DocumentComplete` | doc_id | ``{"type": "complete", ...}`` after all chunks of a version |
| :class:`DocumentIncomplete` | doc_id | ``{"type": "incomplete", "missing": [seq], ...}`` |
| :class:`DocumentDeleted` | doc_id | null (a tombstone) |

:func:`decode_output` raises nothing but :class:`InvalidEvent`; embeddings sent as base64 are
decoded with the one codec (:mod:`embedstream.wire.vectors`), so every decoded record holds
its vector as a float list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.events import MAX_ID_CHARS, EmbedResult
from embedstream.wire.json_bytes import record_json
from embedstream.wire.vectors import Vector, all_finite, base64_floats

# A plain result is the result event that exists today; one type, not two.
PlainResult = EmbedResult

CHUNK = "chunk"
COMPLETE = "complete"
INCOMPLETE = "incomplete"
MAX_VERSION_CHARS = 512


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
        return doc


@dataclass(frozen=True, slots=True)
class DocumentComplete:
    """Every chunk of this version was written before this record."""

    doc_id: str
    version: str
    chunk_count: int
    metadata: dict[str, Any] | None

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> bytes:
        return record_json(self.fields())

    def fields(self) -> dict[str, Any]:
        return {
            "type": COMPLETE,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_count": self.chunk_count,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class DocumentIncomplete:
    """Some chunks of this version were dead-lettered; ``missing`` names them, ascending."""

    doc_id: str
    version: str
    chunk_count: int
    missing: tuple[int, ...]
    metadata: dict[str, Any] | None

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> bytes:
        return record_json(self.fields())

    def fields(self) -> dict[str, Any]:
        return {
            "type": INCOMPLETE,
            "doc_id": self.doc_id,
            "version": self.version,
            "chunk_count": self.chunk_count,
            "missing": self.missing,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class DocumentDeleted:
    """A tombstone: the document is gone (every version)."""

    doc_id: str

    @property
    def key(self) -> bytes:
        return self.doc_id.encode()

    def encode(self) -> None:
        return None  # a tombstone's value is null


OutputRecord = PlainResult | ChunkResult | DocumentComplete | DocumentIncomplete | DocumentDeleted
DocumentRecord = ChunkResult | DocumentComplete | DocumentIncomplete | DocumentDeleted


def decode_output(key: bytes | None, value: bytes | None) -> OutputRecord:
    """Parse and validate one results-topic record (its key and a JSON value)."""
    if value is None:
        return DocumentDeleted(doc_id=_key_text(key))
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(Reason.INVALID_JSON, f"value is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEvent(
            Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(doc).__name__}"
        )
    return output_of(key, doc)


def output_of(key: bytes | None, doc: dict[str, Any]) -> OutputRecord:
    """Validate one results-topic record already decoded to its fields (from JSON, or from a
    registry format by ``wire/formats/results.py``)."""
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
            doc_id=_doc_id(doc),
            version=_version(doc),
            chunk_count=_count(doc),
            metadata=_metadata(doc),
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
    embedding, dimensions = _embedding(doc)
    return PlainResult(
        id=_string(doc, "id", MAX_ID_CHARS),
        model=_string(doc, "model", MAX_VERSION_CHARS),
        embedding=embedding,
        dimensions=dimensions,
        tokens=_tokens(doc),
        metadata=_metadata(doc),
        attempts=_int(doc, "attempts", 0),
        latency_ms=_latency(doc),
        cached=_bool(doc, "cached", default=False),
    )


def _chunk(doc: dict[str, Any]) -> ChunkResult:
    count = _count(doc)
    seq = _int(doc, "chunk_seq", 0)
    if seq >= count:
        _invalid(f"chunk_seq {seq} is not below chunk_count {count}")
    embedding, dimensions = _embedding(doc)
    text = doc.get("text")
    if text is not None and not isinstance(text, str):
        _invalid("field 'text' must be a string")
    return ChunkResult(
        doc_id=_doc_id(doc),
        version=_version(doc),
        chunk_seq=seq,
        chunk_count=count,
        span=_span(doc),
        embedding=embedding,
        model=_string(doc, "model", MAX_VERSION_CHARS),
        dimensions=dimensions,
        tokens=_tokens(doc),
        cached=_bool(doc, "cached"),
        metadata=_metadata(doc),
        attempts=_int(doc, "attempts", 0),
        latency_ms=_latency(doc),
        text=text,
    )


def _incomplete(doc: dict[str, Any]) -> DocumentIncomplete:
    count = _count(doc)
    missing = doc.get("missing")
    if not isinstance(missing, list) or not missing:
        _invalid("field 'missing' must be a non-empty list of chunk_seq")
    if not all(type(seq) is int and 0 <= seq < count for seq in missing):
        _invalid(f"field 'missing' must hold chunk_seq values in [0, {count})")
    if len(set(missing)) != len(missing):
        _invalid("field 'missing' repeats a chunk_seq")
    return DocumentIncomplete(
        doc_id=_doc_id(doc),
        version=_version(doc),
        chunk_count=count,
        missing=tuple(sorted(missing)),
        metadata=_metadata(doc),
    )


def _invalid(message: str) -> NoReturn:
    raise InvalidEvent(Reason.INVALID_RESULT, message)


def _string(doc: dict[str, Any], name: str, limit: int) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        _invalid(f"field '{name}' must be a non-empty string")
    if len(value) > limit:
        _invalid(f"field '{name}' is longer than {limit} characters")
    return value


def _doc_id(doc: dict[str, Any]) -> str:
    return _string(doc, "doc_id", MAX_ID_CHARS)


def _version(doc: dict[str, Any]) -> str:
    return _string(doc, "version", MAX_VERSION_CHARS)


def _int(doc: dict[str, Any], name: str, minimum: int) -> int:
    value = doc.get(name)
    if type(value) is not int or value < minimum:  # bool is an int subclass: not a count
        _invalid(f"field '{name}' must be an integer >= {minimum}")
    return value


def _count(doc: dict[str, Any]) -> int:
    return _int(doc, "chunk_count", 0)


def _bool(doc: dict[str, Any], name: str, default: bool | None = None) -> bool:
    value = doc.get(name, default)
    if not isinstance(value, bool):
        _invalid(f"field '{name}' must be true or false")
    return value


def _tokens(doc: dict[str, Any]) -> int:
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        _invalid("field 'usage' must be an object with 'tokens'")
    return _int(usage, "tokens", 0)


def _latency(doc: dict[str, Any]) -> float:
    value = doc.get("latency_ms")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        _invalid("field 'latency_ms' must be a number >= 0")
    return float(value)


def _metadata(doc: dict[str, Any]) -> dict[str, Any] | None:
    value = doc.get("metadata")
    if value is not None and not isinstance(value, dict):
        _invalid("field 'metadata' must be an object or null")
    return value


def _span(doc: dict[str, Any]) -> tuple[int, int]:
    value = doc.get("span")
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(type(end) is int for end in value)
        or not 0 <= value[0] <= value[1]
    ):
        _invalid("field 'span' must be [start, end] with 0 <= start <= end")
    return value[0], value[1]


def _embedding(doc: dict[str, Any]) -> tuple[list[float], int]:
    """The vector as floats (base64 decoded by the one codec) and its checked dimensions."""
    value = doc.get("embedding")
    if isinstance(value, str):
        try:
            floats = base64_floats(value).tolist()
        except ValueError as exc:
            raise InvalidEvent(Reason.INVALID_RESULT, f"field 'embedding': {exc}") from None
    elif isinstance(value, list):
        floats = value
    else:
        raise InvalidEvent(
            Reason.INVALID_RESULT, "field 'embedding' must be a float list or base64"
        )
    try:
        # The one-sum test, then per value: finite values near 1e308 can overflow a sum.
        finite = all_finite(floats) or all(math.isfinite(x) for x in floats)
    except TypeError:
        _invalid("field 'embedding' must hold only numbers")
    if not floats or not finite:
        _invalid("field 'embedding' must be a non-empty vector of finite numbers")
    dimensions = _int(doc, "dimensions", 1)
    if dimensions != len(floats):
        _invalid(f"field 'dimensions' is {dimensions} but the embedding has {len(floats)}")
    return floats, dimensions
