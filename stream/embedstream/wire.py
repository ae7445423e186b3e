"""Every topic-facing format in one place: events, header names and the vector codec.

Requests in, results out, retry records and dead letters with their headers; JSON via orjson,
vectors as float lists or base64 of little-endian float32. Pure: no I/O. Decoding a request or
reading embedstream's own headers raises nothing but :class:`InvalidEvent`, whose ``reason``
the dead-letter headers carry, so one malformed record is parked without stopping the stream.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from embedstream.errors import InvalidEvent, Reason

MAX_ID_CHARS = 512
ENCODING_FORMATS = ("float", "base64")
# Provider-specific request fields passed on to the provider where its profile takes them
# (core/limits.py). Each value is part of the bucket key, so it stays short.
REQUEST_PARAMETERS = ("user", "input_type", "task")
MAX_PARAMETER_CHARS = 512


@dataclass(frozen=True, slots=True)
class EmbedRequest:
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
        return tuple(name for name in REQUEST_PARAMETERS if getattr(self, name) is not None)


def decode_request(raw: bytes | None, *, max_bytes: int = 1_048_576) -> EmbedRequest:
    """Parse and validate one request event value."""
    if raw is None:
        raise InvalidEvent(Reason.EMPTY_VALUE, "record has no value")
    if len(raw) > max_bytes:
        raise InvalidEvent(Reason.OVERSIZED, f"value is {len(raw)} bytes, limit {max_bytes}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent(
            Reason.INVALID_UTF8, f"value is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(Reason.INVALID_JSON, f"value is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEvent(
            Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(doc).__name__}"
        )
    return EmbedRequest(
        id=_id(doc),
        text=_text(doc),
        model=_optional_str(doc, "model"),
        encoding_format=_encoding_format(doc),
        dimensions=_dimensions(doc),
        metadata=_metadata(doc),
        deadline_ms=_deadline(doc),
        user=_parameter(doc, "user"),
        input_type=_parameter(doc, "input_type"),
        task=_parameter(doc, "task"),
    )


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
    if not value.strip():
        raise InvalidEvent(Reason.EMPTY_TEXT, "field 'text' is empty or only whitespace")
    return value


def _optional_str(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"invalid_{name}", f"field '{name}' must be a non-empty string")
    return value


def _parameter(doc: dict[str, Any], name: str) -> str | None:
    value = _optional_str(doc, name)
    if value is not None and len(value) > MAX_PARAMETER_CHARS:
        raise InvalidEvent(
            f"invalid_{name}", f"field '{name}' is longer than {MAX_PARAMETER_CHARS} characters"
        )
    return value


def _encoding_format(doc: dict[str, Any]) -> str | None:
    value = doc.get("encoding_format")
    if value is None:
        return None
    if value not in ENCODING_FORMATS:
        raise InvalidEvent(
            Reason.INVALID_ENCODING_FORMAT,
            f"field 'encoding_format' must be float or base64, got {value!r}",
        )
    return str(value)


def _dimensions(doc: dict[str, Any]) -> int | None:
    value = doc.get("dimensions")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidEvent(
            Reason.INVALID_DIMENSIONS, "field 'dimensions' must be a positive integer"
        )
    return value


def _metadata(doc: dict[str, Any]) -> dict[str, Any] | None:
    value = doc.get("metadata")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEvent(Reason.INVALID_METADATA, "field 'metadata' must be an object")
    return value


def _deadline(doc: dict[str, Any]) -> int | None:
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

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "id": self.id,
                "model": self.model,
                "embedding": self.embedding,
                "dimensions": self.dimensions,
                "usage": {"tokens": self.tokens},
                "metadata": self.metadata,
                "attempts": self.attempts,
                "latency_ms": round(self.latency_ms, 3),
                "cached": self.cached,
            }
        )


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


# --------------------------------------------------------------------------- headers

Headers = list[tuple[str, bytes]]
HEADER_PREFIX = "embedstream."
# Dead letters.
ERROR_CLASS = HEADER_PREFIX + "error.class"
ERROR_REASON = HEADER_PREFIX + "error.reason"
ERROR_MESSAGE = HEADER_PREFIX + "error.message"
ERROR_ATTEMPTS = HEADER_PREFIX + "error.attempts"
SOURCE_TOPIC = HEADER_PREFIX + "source.topic"
SOURCE_PARTITION = HEADER_PREFIX + "source.partition"
SOURCE_OFFSET = HEADER_PREFIX + "source.offset"
FAILURE_FIRST = HEADER_PREFIX + "failure.first"
FAILURE_LAST = HEADER_PREFIX + "failure.last"
# Retry records.
RETRY_ATTEMPTS = HEADER_PREFIX + "retry.attempts"
RETRY_NOT_BEFORE = HEADER_PREFIX + "retry.not_before"
RETRY_FIRST_ERROR = HEADER_PREFIX + "retry.first_error"
RETRY_FIRST_FAILURE = HEADER_PREFIX + "retry.first_failure"
PRIORITY = HEADER_PREFIX + "priority"
ENQUEUED_AT = HEADER_PREFIX + "enqueued_at"
# On a result whose text was cut to the per-input limit: the token estimate before cutting.
TRUNCATED_FROM = HEADER_PREFIX + "truncated_from_tokens"

MAX_MESSAGE_BYTES = 1024


def dead_letter_headers(failure: Failure) -> Headers:
    message = failure.message.encode("utf-8")[:MAX_MESSAGE_BYTES]
    pairs = {
        ERROR_CLASS: failure.error_class,
        ERROR_REASON: failure.reason,
        ERROR_MESSAGE: message.decode("utf-8", "ignore"),
        ERROR_ATTEMPTS: str(failure.attempts),
        SOURCE_TOPIC: failure.source_topic,
        SOURCE_PARTITION: str(failure.source_partition),
        SOURCE_OFFSET: str(failure.source_offset),
        FAILURE_FIRST: rfc3339(failure.first_failure_ms),
        FAILURE_LAST: rfc3339(failure.last_failure_ms),
    }
    return [(name, value.encode("utf-8")) for name, value in pairs.items()]


@dataclass(frozen=True, slots=True)
class RetryState:
    """What a retry record carries besides the original request (all from its headers)."""

    attempts: int = 0  # calls already made for this request
    not_before_ms: int = 0  # earliest time to call again
    first_error: str | None = None
    first_failure_ms: int | None = None
    high_priority: bool = False
    enqueued_at_ms: int | None = None  # when the request first entered Kafka

    def headers(self) -> Headers:
        pairs = [
            (RETRY_ATTEMPTS, str(self.attempts)),
            (RETRY_NOT_BEFORE, str(self.not_before_ms)),
            (RETRY_FIRST_ERROR, self.first_error or ""),
            (RETRY_FIRST_FAILURE, str(self.first_failure_ms or 0)),
            (PRIORITY, "high" if self.high_priority else "low"),
        ]
        if self.enqueued_at_ms is not None:
            pairs.append((ENQUEUED_AT, str(self.enqueued_at_ms)))
        return [(name, value.encode("utf-8")[:MAX_MESSAGE_BYTES]) for name, value in pairs]


def read_retry_state(headers: Iterable[tuple[str, bytes | None]] | None) -> RetryState:
    """embedstream's headers of any input record (absent on a fresh request).

    Raises InvalidEvent (reason ``invalid_headers``) when one of them is present but not what
    embedstream writes, so the record is dead-lettered instead of crashing the fetch loop.
    """
    found = headers_dict(headers)
    if not any(name.startswith(HEADER_PREFIX) for name in found):
        return RetryState()
    first_failure = _header_int(found, RETRY_FIRST_FAILURE)
    return RetryState(
        attempts=_header_int(found, RETRY_ATTEMPTS) or 0,
        not_before_ms=_header_int(found, RETRY_NOT_BEFORE) or 0,
        first_error=found.get(RETRY_FIRST_ERROR) or None,
        first_failure_ms=first_failure or None,
        high_priority=_priority(found),
        enqueued_at_ms=_header_int(found, ENQUEUED_AT),
    )


# Epoch milliseconds up to the year 10000, attempts up to a few billion: anything larger is not
# something embedstream wrote.
_MAX_HEADER_INT = 253_402_300_800_000


def _header_int(found: Mapping[str, str], name: str) -> int | None:
    text = found.get(name)
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or int(text) > _MAX_HEADER_INT:
        raise InvalidEvent(
            Reason.INVALID_HEADERS,
            f"header {name} must be a non-negative integer, got {text!r:.40}",
        )
    return int(text)


def _priority(found: Mapping[str, str]) -> bool:
    value = found.get(PRIORITY, "low")
    if value not in ("high", "low"):
        raise InvalidEvent(
            Reason.INVALID_HEADERS, f"header {PRIORITY} must be high or low, got {value!r:.40}"
        )
    return value == "high"


def rfc3339(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def headers_dict(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Kafka headers (a sequence of (str, bytes)) as a dict of strings (the last value wins)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or ()}


# --------------------------------------------------------------------------- vectors

Vector = list[float] | str  # a float list, or base64 of little-endian float32

_LITTLE_ENDIAN = sys.byteorder == "little"


def encode_base64(vector: Iterable[float]) -> str:
    """OpenAI's base64 encoding: little-endian float32 bytes, base64-encoded."""
    floats = array("f", vector)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return base64.b64encode(floats.tobytes()).decode("ascii")


def base64_floats(encoded: str) -> array[float]:
    """The float32 values of a base64 vector, decoded in bulk. Raises ValueError if malformed."""
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"invalid base64 ({exc})") from None
    if len(data) % 4:
        raise ValueError(f"base64 payload of {len(data)} bytes is not a float32 array")
    floats = array("f")
    floats.frombytes(data)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats


def float32_bytes(vector: Vector) -> bytes:
    """A vector (float list or base64) as little-endian float32 bytes: how the cache stores it."""
    if isinstance(vector, str):
        return base64.b64decode(vector, validate=True)
    floats = array("f", vector)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats.tobytes()


def vector_from_float32(data: bytes, encoding_format: str) -> Vector:
    """Inverse of :func:`float32_bytes`, in the encoding a request asked for. Raises ValueError
    for bytes that are not a float32 array."""
    if not data or len(data) % 4:
        raise ValueError(f"{len(data)} bytes are not a float32 array")
    if encoding_format == "base64":
        return base64.b64encode(data).decode("ascii")
    floats = array("f")
    floats.frombytes(data)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats.tolist()


def decode_base64(encoded: str) -> list[float]:
    """Inverse of :func:`encode_base64`."""
    return base64_floats(encoded).tolist()


def base64_dimensions(encoded: str) -> int:
    """How many float32 values a base64 vector holds, without decoding it."""
    padding = encoded[-2:].count("=")
    return (len(encoded) * 3 // 4 - padding) // 4


def all_finite(values: Iterable[float]) -> bool:
    """True when no value is NaN or infinite: one sum instead of a check per float (NaN and
    infinity propagate through a sum; finite float32 values cannot overflow a double)."""
    return math.isfinite(sum(values))
