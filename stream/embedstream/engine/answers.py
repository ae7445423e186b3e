"""What a provider's answer means: a success's raw body parsed into vectors (orjson, bulk
float32 decoding, one finiteness test per vector), a failure's status classified as permanent,
transient or provider-wide. Both request paths of the embedder use these rules."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import orjson

from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    RequestRefused,
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
    # Base64 strings kept as they are, by (length, padding): their float count, found once.
    counted: dict[tuple[int, int], int] = {}
    for entry in data:
        index = entry.get("index") if isinstance(entry, dict) else None
        if (
            (type(index) is not int and (not isinstance(index, int) or isinstance(index, bool)))
            or not 0 <= index < len(vectors)
            or vectors[index] is not None
        ):
            raise TransientError(Reason.MALFORMED_RESPONSE, f"bad or repeated index {index!r}")
        embedding = entry.get("embedding")
        if as_base64 and type(embedding) is str:
            # (its length, and its padding as base64_float_count counts it)
            padding = 2 if embedding.endswith("==") else 1 if embedding.endswith("=") else 0
            shape = (len(embedding), padding)
            length = counted.get(shape)
            if length is None:
                length = counted[shape] = _base64_floats(embedding)
            vector: list[float] | str = embedding  # untouched
        else:
            vector, length = _vector(embedding, as_base64)
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
    status: int,
    message: str,
    headers: Mapping[str, str],
    call: BatchCall | None = None,
    body: bytes = b"",
) -> EmbedStreamError:
    """Map an HTTP error answer (status >= 400) to permanent / transient / provider-wide,
    keeping retry-after; ``headers`` are looked up without case, ``body`` is the answer's."""
    refused = _refused_request(status, message, call, body)
    if refused is not None:
        return refused
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
    text, _, _ = error_fields(body)
    if text:
        message += f" - {text}"
    return message[:1024]


def error_fields(body: bytes) -> tuple[str | None, str | None, str | None]:
    """The message, param and code of an error body: OpenAI's ``{"error": {...}}``, or the
    flat shapes of vLLM and TEI; None for each one it lacks."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    error = document.get("error", document) if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return None, None, None
    fields = [error.get(name) for name in ("message", "param", "code")]
    message, param, code = (v[:1024] if isinstance(v, str) and v else None for v in fields)
    return message, param, code


# How providers say a model takes no `dimensions`: OpenAI and Azure ("This model does not
# support specifying dimensions."), vLLM ("... does not support matryoshka representation").
_DIMENSION_REFUSALS = ("specifying dimensions", "matryoshka")
# The request fields other than `input` a 400 may be about, as its message quotes them
# ('dimensions', `encoding_format`); a message that names `input` is about the inputs.
_FIELDS = ("dimensions", "encoding_format", "model", "user", "input_type", "task")
_QUOTED_FIELD = re.compile("['\"`](" + "|".join(_FIELDS) + ")['\"`]")
_NAMES_INPUT = re.compile(r"\binputs?\b", re.IGNORECASE)


def _refused_request(
    status: int, message: str, call: BatchCall | None, body: bytes
) -> RequestRefused | None:
    """A refusal of the request rather than of an input: a 404 naming the call's model, or a
    400/422 naming a field other than `input` (its `param`, or its message quoting one).
    None for anything else: a 400 about inputs, or naming nothing, is split to find them."""
    text, param, code = error_fields(body)
    said = text or message
    if status == 404:
        model = call.model if call is not None else None
        if code == "model_not_found" or param == "model" or (model and model in said):
            return RequestRefused(
                Reason.UNKNOWN_MODEL, f"the provider does not serve model {model!r}: {said}",
                status=404, provider_message=said, param="model", code=code or "model_not_found",
            )  # fmt: skip
        return None
    if status not in (400, 422):
        return None
    lowered = said.lower()
    if (
        call is not None
        and call.dimensions is not None
        and any(words in lowered for words in _DIMENSION_REFUSALS)
    ):
        # The model cannot shorten its vectors: every input of this call (one bucket, one
        # `dimensions`) would fail alike, so there is nothing to split.
        return RequestRefused(
            Reason.UNSUPPORTED_DIMENSIONS,
            f"the provider refused dimensions={call.dimensions} for this model: {said}",
            status=status, provider_message=said, param="dimensions", code=code,
        )  # fmt: skip
    if param is None and not _NAMES_INPUT.search(said):
        quoted = _QUOTED_FIELD.search(said)
        param = quoted.group(1) if quoted else None
    if param is None or param.startswith("input"):
        return None
    return RequestRefused(
        Reason.REJECTED, f"provider rejected the request's {param} ({status}): {said}",
        status=status, provider_message=said, param=param, code=code,
    )  # fmt: skip


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None
