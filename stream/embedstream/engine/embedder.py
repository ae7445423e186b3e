"""Calls an OpenAI-compatible /v1/embeddings endpoint and classifies every failure.

The only module that imports ``openai``. The client's own retries are off: retrying is the
pipeline's job (retry topic, backoff), so a retry is never doubled nor hidden from metrics.
"""

from __future__ import annotations

import base64
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import openai
from openai import AsyncOpenAI, Omit, omit

from embedstream.config import Settings
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
    http_reason,
)


@dataclass(frozen=True, slots=True)
class BatchCall:
    model: str
    texts: Sequence[str]
    encoding_format: str
    dimensions: int | None


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    vectors: list[list[float] | str]  # in input order; base64 strings when asked for base64
    dimensions: int
    total_tokens: int
    latency_s: float
    headers: Mapping[str, str] = field(default_factory=dict)  # rate-limit hints for the gate


class EmbeddingBackend(Protocol):
    async def embed(self, call: BatchCall) -> BatchOutcome: ...

    async def close(self) -> None: ...


class OpenAIEmbedder:
    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEmbedder:
        return cls(
            base_url=settings.base_url,
            api_key=settings.api_key,
            timeout_s=settings.request_timeout_s,
        )

    def __init__(self, *, base_url: str | None, api_key: str | None, timeout_s: float) -> None:
        self._secret = api_key
        self._client = AsyncOpenAI(
            base_url=base_url,
            # The simulator and many self-hosted servers need no key; the client insists on one.
            api_key=api_key or "unused",
            max_retries=0,
            timeout=timeout_s,
        )

    async def close(self) -> None:
        await self._client.close()

    async def embed(self, call: BatchCall) -> BatchOutcome:
        started = time.perf_counter()
        create = self._client.embeddings.with_raw_response.create
        try:
            if call.encoding_format == "base64":
                raw = await create(
                    model=call.model,
                    input=list(call.texts),
                    encoding_format="base64",
                    dimensions=_dims(call.dimensions),
                )
            else:
                # Left unset, the client asks for base64 on the wire and decodes it to floats:
                # a quarter of the bytes of a JSON float list.
                raw = await create(
                    model=call.model, input=list(call.texts), dimensions=_dims(call.dimensions)
                )
            response = raw.parse()
        except openai.APIError as exc:
            error = classify(exc)
            if self._secret and self._secret in error.message:
                # Providers may quote the key back; it must not reach logs or dead letters.
                error.message = error.message.replace(self._secret, "***")
                error.args = (error.message,)
            raise error from None
        except (ValueError, TypeError) as exc:  # a body the client cannot parse
            raise TransientError(Reason.MALFORMED_RESPONSE, f"unreadable response: {exc}") from exc
        latency = time.perf_counter() - started
        headers = {k.lower(): v for k, v in raw.headers.items() if k.lower().startswith(_HINTS)}
        return _outcome(call, response, latency, headers)


def _dims(dimensions: int | None) -> int | Omit:
    return omit if dimensions is None else dimensions


_HINTS = ("retry-after", "x-ratelimit-")


def _outcome(
    call: BatchCall, response: object, latency: float, headers: Mapping[str, str]
) -> BatchOutcome:
    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != len(call.texts):
        got = len(data) if isinstance(data, list) else "no"
        raise TransientError(
            Reason.MALFORMED_RESPONSE, f"expected {len(call.texts)} vectors, got {got}"
        )
    vectors: list[list[float] | str | None] = [None] * len(call.texts)
    for entry in data:
        index = getattr(entry, "index", None)
        if (
            not isinstance(index, int)
            or not 0 <= index < len(vectors)
            or vectors[index] is not None
        ):
            raise TransientError(Reason.MALFORMED_RESPONSE, f"bad or repeated index {index!r}")
        vectors[index] = _checked_vector(entry.embedding, call)
    dims = _dimensions_of(vectors[0])
    usage = getattr(response, "usage", None)
    tokens = int(getattr(usage, "total_tokens", 0) or 0)
    return BatchOutcome([v for v in vectors if v is not None], dims, tokens, latency, headers)


def _checked_vector(vector: object, call: BatchCall) -> list[float] | str:
    if isinstance(vector, str):
        return vector
    if not isinstance(vector, list) or not vector:
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding is not a non-empty list")
    if call.dimensions is not None and len(vector) != call.dimensions:
        raise TransientError(
            Reason.MALFORMED_RESPONSE, f"expected {call.dimensions} dimensions, got {len(vector)}"
        )
    if not all(math.isfinite(x) for x in vector):
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding contains NaN or infinity")
    return vector


def _dimensions_of(vector: list[float] | str | None) -> int:
    if isinstance(vector, str):
        return len(base64.b64decode(vector)) // 4  # little-endian float32
    return len(vector or [])


def classify(exc: openai.APIError) -> EmbedStreamError:
    """Map a client error to permanent / transient / provider-wide, keeping retry-after."""
    message = _safe_message(exc)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(Reason.TIMEOUT, "embeddings call timed out")
    if isinstance(exc, openai.APIConnectionError):
        return TransientError(Reason.CONNECTION, f"cannot reach the provider: {message}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = _retry_after(exc)
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
    return TransientError(Reason.MALFORMED_RESPONSE, message)


def _safe_message(exc: openai.APIError) -> str:
    # The client's message quotes the response body, never our request headers (the key).
    return str(getattr(exc, "message", None) or exc)[:1024]


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None
