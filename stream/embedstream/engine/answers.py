"""What a provider's answer means: a success's raw body parsed into vectors (orjson, bulk
float32 decoding, one finiteness test per vector), a failure's status classified as permanent,
transient or provider-wide. Both request paths of the embedder use these rules."""

from __future__ import annotations

import math
from collections.abc import Mapping

import orjson

from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
    http_reason,
)
from embedstream.wire.vectors import base64_float_count, base64_floats, encode_base64


def parse_body(
    call: BatchCall, body: bytes, latency: float, headers: Mapping[str, str]
) -> BatchOutcome:
    """The outcome of a call from the raw response body; TransientError if it is malformed."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise TransientError(Reason.MALFORMED_RESPONSE, f"unreadable response: {exc}") from None
    return _outcome(call, document, latency, headers)


def outcome_of(call: BatchCall, document: object) -> BatchOutcome:
    """The outcome of an answer already parsed (a batch job's output line's body)."""
    return _outcome(call, document, 0.0, {})


def _outcome(
    call: BatchCall, document: object, latency: float, headers: Mapping[str, str]
) -> BatchOutcome:
    doc = document if isinstance(document, dict) else {}
    data = doc.get("data")
    if not isinstance(data, list) or len(data) != len(call.texts):
        got = len(data) if isinstance(data, list) else "no"
        raise TransientError(
            Reason.MALFORMED_RESPONSE, f"expected {len(call.texts)} vectors, got {got}"
        )
    as_base64 = call.encoding_format == "base64"
    vectors: list[list[float] | str | None] = [None] * len(call.texts)
    dims = call.dimensions
    for entry in data:
        index = entry.get("index") if isinstance(entry, dict) else None
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < len(vectors)
            or vectors[index] is not None
        ):
            raise TransientError(Reason.MALFORMED_RESPONSE, f"bad or repeated index {index!r}")
        vector, length = _vector(entry.get("embedding"), as_base64)
        if dims is None:
            dims = length  # no dimensions asked: the first vector sets them for the rest
        elif length != dims:
            raise TransientError(
                Reason.MALFORMED_RESPONSE, f"expected {dims} dimensions, got {length}"
            )
        vectors[index] = vector
    usage = doc.get("usage")
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0
    return BatchOutcome([v for v in vectors if v is not None], dims or 0, tokens, latency, headers)


def _vector(embedding: object, as_base64: bool) -> tuple[list[float] | str, int]:
    """One checked vector in the asked format, and its length."""
    if isinstance(embedding, str):
        length = _base64_floats(embedding)
        return (embedding if as_base64 else _decoded(embedding)), length  # base64: untouched
    if not isinstance(embedding, list) or not embedding:
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding is not a non-empty list")
    _check_finite(embedding)
    if as_base64:  # a provider that ignored the format: give the caller what it asked for
        return _encoded(embedding), len(embedding)
    return embedding, len(embedding)


def _base64_floats(text: str) -> int:
    """How many float32 a base64 string holds, from its length alone (no decoding)."""
    try:
        return base64_float_count(text)
    except ValueError as exc:
        raise TransientError(Reason.MALFORMED_RESPONSE, f"base64 embedding: {exc}") from None


def _decoded(text: str) -> list[float]:
    try:
        vector = base64_floats(text).tolist()
    except ValueError as exc:
        raise TransientError(Reason.MALFORMED_RESPONSE, f"bad base64 embedding: {exc}") from None
    _check_finite(vector)
    return vector


def _encoded(vector: list[float]) -> str:
    return encode_base64(vector)


def _check_finite(vector: list[float]) -> None:
    """One sum per vector instead of a test per float: NaN and infinity survive a sum, and a
    sum of finite floats overflows only near 1e308, where the per-float test decides."""
    try:
        finite = math.isfinite(sum(vector)) or all(math.isfinite(x) for x in vector)
    except (TypeError, OverflowError):  # a string, null, list... or an int past float range
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding holds a non-number") from None
    if not finite:
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding contains NaN or infinity")


def classify_status(
    status: int, message: str, headers: Mapping[str, str], call: BatchCall | None = None
) -> EmbedStreamError:
    """Map an HTTP error answer (status >= 400) to permanent / transient / provider-wide,
    keeping retry-after; ``headers`` are looked up without case."""
    if _refuses_dimensions(status, message, call):
        # The model cannot shorten its vectors: every input of this call (one bucket, one
        # `dimensions`) would fail alike, so there is nothing to split.
        return PermanentItemError(
            Reason.UNSUPPORTED_DIMENSIONS,
            f"the provider refused dimensions={call.dimensions if call else None} for this "
            f"model: {message}",
        )
    retry_after = _retry_after(headers)
    if status in (401, 403):
        return ProviderWideError(Reason.AUTH, f"provider refused the key ({status}): {message}")
    if status == 404:
        return ProviderWideError(Reason.NOT_FOUND, f"model or endpoint not found: {message}")
    if status == 429:
        return TransientError(Reason.RATE_LIMITED, message, retry_after=retry_after)
    if status in (408, 409) or status >= 500:
        return TransientError(http_reason(status), message, retry_after=retry_after)
    if status in (400, 413, 422):
        return PermanentItemError(
            Reason.REJECTED, f"provider rejected the input ({status}): {message}"
        )
    return TransientError(http_reason(status), message, retry_after=retry_after)


def status_message(status: int, body: bytes) -> str:
    """The SDK's message for an error answer: the status and the body's error message."""
    message = f"Error code: {status}"
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return message
    error = document.get("error", document) if isinstance(document, dict) else None
    text = error.get("message") if isinstance(error, dict) else None
    if isinstance(text, str) and text:
        message += f" - {text}"
    return message[:1024]


# How providers say a model takes no `dimensions`: OpenAI and Azure ("This model does not
# support specifying dimensions."), vLLM ("... does not support matryoshka representation").
_DIMENSION_REFUSALS = ("specifying dimensions", "matryoshka")


def _refuses_dimensions(status: int, message: str, call: BatchCall | None) -> bool:
    if call is None or call.dimensions is None:
        return False
    lowered = message.lower()
    return status == 400 and any(words in lowered for words in _DIMENSION_REFUSALS)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None
