"""Request, result and failure events: their JSON and their validation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.vectors import Vector

MAX_ID_CHARS = 512
ENCODING_FORMATS = ("float", "base64")
# Provider-specific request fields passed on to the provider where its profile takes them
# (core/limits.py). Each value is part of the bucket key, so it stays short.
REQUEST_PARAMETERS = ("user", "input_type", "task")
MAX_PARAMETER_CHARS = 512
# The output records' field naming their index generation (embedstream.core.generations).
INDEX_GENERATION = "index_generation"


class EmbedRequest(NamedTuple):
    # A NamedTuple rather than a frozen dataclass (immutable all the same): one is built per
    # record read, and a frozen dataclass's fields cost a call each to set.
    id: str
    text: str
    model: str | None = None
    encoding_format: str | None = None
    dimensions: int | None = None
    metadata: dict[str, Any] | None = None
    deadline_ms: int | None = None
    user: str | None = None  # the end user, for the provider's abuse monitoring
    input_type: str | None = None  # e.g. "query" / "passage" (NVIDIA NIM, Azure)
    task: str | None = None  # e.g. "retrieval.query" (Jina)

    def parameters(self) -> tuple[str, ...]:
        """The provider-specific fields this request sets."""
        if self.user is None and self.input_type is None and self.task is None:
            return ()  # most requests: no generator to run per request
        return tuple(name for name in REQUEST_PARAMETERS if getattr(self, name) is not None)


def decode_request(raw: bytes | None, *, max_bytes: int = 1_048_576) -> EmbedRequest:
    """Parse and validate one request event value."""
    return request_from_doc(event_object(raw, max_bytes=max_bytes))


def event_object(raw: bytes | None, *, max_bytes: int) -> dict[str, Any]:
    """One event value as a JSON object: size, UTF-8, JSON and object checked, in that order."""
    if raw is None:
        raise InvalidEvent(Reason.EMPTY_VALUE, "record has no value")
    if len(raw) > max_bytes:
        raise InvalidEvent(Reason.OVERSIZED, f"value is {len(raw)} bytes, limit {max_bytes}")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # orjson refuses any input that is not UTF-8 as a whole before parsing it, so the
        # UTF-8 check costs a decode only here, on the error path, and still comes first.
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise InvalidEvent(
                Reason.INVALID_UTF8, f"value is not UTF-8: {bad.reason} at byte {bad.start}"
            ) from None
        raise InvalidEvent(Reason.INVALID_JSON, f"value is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEvent(
            Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(doc).__name__}"
        )
    return doc


def request_from_doc(doc: dict[str, Any]) -> EmbedRequest:
    """Validate one request given as a JSON-equivalent dict (a JSON event, or a registry
    record after field mapping, see ``wire/field_mapping.py``)."""
    if len(doc) == 2:  # most requests: an id and a text, no optional field to look for
        # (EmbedRequest(id, text), without the call of its generated __new__)
        return _tuple_new(EmbedRequest, (_id(doc), _text(doc), *_NO_OPTIONAL_FIELDS))
    return EmbedRequest(
        id=_id(doc),
        text=_text(doc),
        model=optional_str_field(doc, "model"),
        encoding_format=encoding_format_field(doc),
        dimensions=dimensions_field(doc),
        metadata=metadata_field(doc),
        deadline_ms=deadline_field(doc),
        user=parameter_field(doc, "user"),
        input_type=parameter_field(doc, "input_type"),
        task=parameter_field(doc, "task"),
    )


_tuple_new = tuple.__new__
_NO_OPTIONAL_FIELDS = (None,) * 8  # EmbedRequest's fields after id and text


def _id(doc: dict[str, Any]) -> str:
    if "id" not in doc:
        raise InvalidEvent(Reason.MISSING_ID, "field 'id' is required")
    value = doc["id"]
    if not isinstance(value, str) or not value:
        raise InvalidEvent(Reason.INVALID_ID, "field 'id' must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise InvalidEvent(
            Reason.INVALID_ID, f"field 'id' is longer than {MAX_ID_CHARS} characters"
        )
    return value


def _text(doc: dict[str, Any]) -> str:
    if "text" not in doc:
        raise InvalidEvent(Reason.MISSING_TEXT, "field 'text' is required")
    value = doc["text"]
    if not isinstance(value, str):
        raise InvalidEvent(Reason.INVALID_TEXT, "field 'text' must be a string")
    if not value or value.isspace():  # (`not value.strip()`, without a copy of the text)
        raise InvalidEvent(Reason.EMPTY_TEXT, "field 'text' is empty or only whitespace")
    return value


def optional_str_field(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"invalid_{name}", f"field '{name}' must be a non-empty string")
    return value


def parameter_field(doc: dict[str, Any], name: str) -> str | None:
    value = optional_str_field(doc, name)
    if value is not None and len(value) > MAX_PARAMETER_CHARS:
        raise InvalidEvent(
            f"invalid_{name}", f"field '{name}' is longer than {MAX_PARAMETER_CHARS} characters"
        )
    return value


def encoding_format_field(doc: dict[str, Any]) -> str | None:
    value = doc.get("encoding_format")
    if value is None:
        return None
    if value not in ENCODING_FORMATS:
        raise InvalidEvent(
            Reason.INVALID_ENCODING_FORMAT,
            f"field 'encoding_format' must be float or base64, got {value!r}",
        )
    return str(value)


def dimensions_field(doc: dict[str, Any]) -> int | None:
    value = doc.get("dimensions")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidEvent(
            Reason.INVALID_DIMENSIONS, "field 'dimensions' must be a positive integer"
        )
    return value


def metadata_field(doc: dict[str, Any]) -> dict[str, Any] | None:
    value = doc.get("metadata")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEvent(Reason.INVALID_METADATA, "field 'metadata' must be an object")
    return value


def deadline_field(doc: dict[str, Any]) -> int | None:
    value = doc.get("deadline")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return int(parsed.timestamp() * 1000)
    raise InvalidEvent(
        Reason.INVALID_DEADLINE,
        "field 'deadline' must be epoch milliseconds or RFC 3339 with offset",
    )


def encode_request(request: EmbedRequest) -> bytes:
    doc: dict[str, Any] = {"id": request.id, "text": request.text}
    for name in ("model", "encoding_format", "dimensions", "metadata", *REQUEST_PARAMETERS):
        value = getattr(request, name)
        if value is not None:
            doc[name] = value
    if request.deadline_ms is not None:
        doc["deadline"] = request.deadline_ms
    return orjson.dumps(doc)


@dataclass(frozen=True, slots=True)
class EmbedResult:
    id: str
    model: str
    embedding: Vector
    dimensions: int
    tokens: int
    metadata: dict[str, Any] | None
    attempts: int
    latency_ms: float
    cached: bool = False  # served from the embedding cache: no provider call was made
    index_generation: str | None = None  # see embedstream.core.generations

    def encode(self) -> bytes:
        return result_json(
            self.id, self.model, self.embedding, self.dimensions, self.tokens, self.metadata,
            self.attempts, self.latency_ms, self.cached, self.index_generation,
        )  # fmt: skip


def result_json(
    id: str,
    model: str,
    embedding: Vector,
    dimensions: int,
    tokens: int,
    metadata: dict[str, Any] | None,
    attempts: int,
    latency_ms: float,
    cached: bool = False,
    index_generation: str | None = None,
) -> bytes:
    """The JSON of the :class:`EmbedResult` of these fields (written without building one)."""
    doc: dict[str, Any] = {
        "id": id,
        "model": model,
        "embedding": embedding,
        "dimensions": dimensions,
        "usage": {"tokens": tokens},
        "metadata": metadata,
        "attempts": attempts,
        # (a whole number of ms, as the Kafka path's always is, needs no rounding: round()
        # with digits costs more than the rest of the fields)
        "latency_ms": (
            latency_ms
            if isinstance(latency_ms, float) and latency_ms.is_integer()
            else round(latency_ms, 3)
        ),
        "cached": cached,
    }
    if index_generation is not None:
        doc[INDEX_GENERATION] = index_generation
    return memoryview(orjson.dumps(doc)).tobytes()  # record_json(doc), without its call


def decode_result(raw: bytes) -> dict[str, Any]:
    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("result is not an object")
    return doc


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an item was dead-lettered, and where it came from."""

    error_class: str
    reason: str
    message: str
    attempts: int
    source_topic: str
    source_partition: int
    source_offset: int
    first_failure_ms: int
    last_failure_ms: int
