"""Calls an OpenAI-compatible /v1/embeddings endpoint (or an Azure OpenAI deployment) and
classifies every failure.

The only module that imports ``openai``. The client's own retries are off: retrying is the
pipeline's job (retry topic, backoff), so a retry is never doubled nor hidden from metrics.
The response body is parsed here (orjson, bulk float32 decoding, one finiteness test per
vector), not by the client's models: on large responses that parsing is most of our CPU.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import openai
import orjson
from openai import AsyncAzureOpenAI, AsyncOpenAI, omit

from embedstream.core import configured
from embedstream.core.lanes import BucketKey
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
    http_reason,
)
from embedstream.settings import Settings, header_secrets


@dataclass(frozen=True, slots=True)
class BatchCall:
    model: str
    texts: Sequence[str]
    encoding_format: str
    dimensions: int | None
    # Provider-specific fields, one value for the whole call (a bucket never mixes them).
    user: str | None = None
    input_type: str | None = None
    task: str | None = None

    @classmethod
    def for_bucket(cls, key: BucketKey, texts: Sequence[str]) -> BatchCall:
        return cls(
            key.model, texts, key.encoding_format, key.dimensions,
            key.user, key.input_type, key.task,
        )  # fmt: skip

    def parameters(self) -> dict[str, str]:
        """The provider-specific fields this call sets, as request body fields."""
        fields = {"user": self.user, "input_type": self.input_type, "task": self.task}
        return {name: value for name, value in fields.items() if value is not None}


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


@dataclass(frozen=True, slots=True)
class AzureTarget:
    """Where an Azure OpenAI deployment answers: <endpoint>/openai/deployments/<deployment>.
    Without a deployment, each call's model names it (the Azure client puts it in the URL)."""

    endpoint: str
    deployment: str | None
    api_version: str


class OpenAIEmbedder:
    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEmbedder:
        azure = None
        if settings.provider_profile == "azure" and settings.azure_endpoint:
            azure = AzureTarget(
                settings.azure_endpoint, settings.azure_deployment, settings.azure_api_version
            )
        return cls(
            base_url=settings.base_url,
            api_key=settings.api_key,
            timeout_s=settings.request_timeout_s,
            wire_format=configured.provider_limits(settings).wire_format,
            extra_headers=settings.extra_header_map,
            extra_body=settings.extra_body_map,
            azure=azure,
        )

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float,
        wire_format: str = "base64",
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, object] | None = None,
        azure: AzureTarget | None = None,
    ) -> None:
        # Providers may quote the key, or a gateway key of extra_headers, back in an error.
        self._secrets = [api_key] if api_key else []
        self._secrets += header_secrets(extra_headers or {})
        self._secrets.sort(key=len, reverse=True)  # a secret holding another goes first
        self._wire_format: Literal["float", "base64"] = (
            "float" if wire_format == "float" else "base64"
        )
        self._extra_body = dict(extra_body or {})
        # The simulator and many self-hosted servers need no key; the client insists on one.
        key = api_key or "unused"
        headers = dict(extra_headers or {})
        self._client: AsyncOpenAI
        if azure is not None:
            # Deployment URLs, the api-version query parameter and the `api-key` header.
            self._client = AsyncAzureOpenAI(
                azure_endpoint=azure.endpoint,
                azure_deployment=azure.deployment,
                api_version=azure.api_version,
                api_key=key,
                max_retries=0,
                timeout=timeout_s,
                default_headers=headers,
            )
        else:
            self._client = AsyncOpenAI(
                base_url=base_url,
                api_key=key,
                max_retries=0,
                timeout=timeout_s,
                default_headers=headers,
            )

    async def close(self) -> None:
        await self._client.close()

    async def embed(self, call: BatchCall) -> BatchOutcome:
        started = time.perf_counter()
        try:
            # The client still builds the request, authenticates, times out and classifies
            # errors, but does not parse: its response models cost a quarter of the client's
            # CPU on large responses. The texts go in `extra_body`, which takes precedence
            # over `input` and skips the client's per-string type walk (as costly as the
            # parsing). base64 on the wire where the provider takes it: a quarter of the
            # bytes of a float list, and what the client asks for by default too.
            raw = await self._client.embeddings.with_raw_response.create(
                model=call.model,
                input=[],
                encoding_format=self._wire_format,
                dimensions=omit if call.dimensions is None else call.dimensions,
                extra_body={**self._extra_body, **call.parameters(), "input": list(call.texts)},
            )
            body = raw.content
        except openai.APIError as exc:
            error = classify(exc, call)
            for secret in self._secrets:
                if secret in error.message:
                    # Keys quoted back must not reach logs or dead letters.
                    error.message = error.message.replace(secret, "***")
            error.args = (error.message,)
            raise error from None
        latency = time.perf_counter() - started
        headers = {k.lower(): v for k, v in raw.headers.items() if k.lower().startswith(_HINTS)}
        return parse_body(call, body, latency, headers)


_HINTS = ("retry-after", "x-ratelimit-")


def parse_body(
    call: BatchCall, body: bytes, latency: float, headers: Mapping[str, str]
) -> BatchOutcome:
    """The outcome of a call from the raw response body; TransientError if it is malformed."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise TransientError(Reason.MALFORMED_RESPONSE, f"unreadable response: {exc}") from None
    return _outcome(call, document, latency, headers)


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
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    size = len(text) // 4 * 3 - padding
    if not text or len(text) % 4 or size % 4:
        raise TransientError(
            Reason.MALFORMED_RESPONSE, f"base64 embedding of {len(text)} characters is no float32"
        )
    return size // 4


def _decoded(text: str) -> list[float]:
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error as exc:
        raise TransientError(Reason.MALFORMED_RESPONSE, f"bad base64 embedding: {exc}") from None
    floats = array("f", raw)
    if _BIG_ENDIAN:
        floats.byteswap()  # the wire format is little-endian float32
    vector = floats.tolist()
    _check_finite(vector)
    return vector


def _encoded(vector: list[float]) -> str:
    floats = array("f", vector)
    if _BIG_ENDIAN:
        floats.byteswap()
    return base64.b64encode(floats.tobytes()).decode("ascii")


_BIG_ENDIAN = sys.byteorder == "big"


def _check_finite(vector: list[float]) -> None:
    """One sum per vector instead of a test per float: NaN and infinity survive a sum, and a
    sum of finite floats overflows only near 1e308, where the per-float test decides."""
    try:
        finite = math.isfinite(sum(vector)) or all(math.isfinite(x) for x in vector)
    except (TypeError, OverflowError):  # a string, null, list... or an int past float range
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding holds a non-number") from None
    if not finite:
        raise TransientError(Reason.MALFORMED_RESPONSE, "embedding contains NaN or infinity")


def classify(exc: openai.APIError, call: BatchCall | None = None) -> EmbedStreamError:
    """Map a client error to permanent / transient / provider-wide, keeping retry-after."""
    message = _safe_message(exc)
    if _refuses_dimensions(exc, message, call):
        # The model cannot shorten its vectors: every input of this call (one bucket, one
        # `dimensions`) would fail alike, so there is nothing to split.
        return PermanentItemError(
            Reason.UNSUPPORTED_DIMENSIONS,
            f"the provider refused dimensions={call.dimensions if call else None} for this "
            f"model: {message}",
        )
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


# How providers say a model takes no `dimensions`: OpenAI and Azure ("This model does not
# support specifying dimensions."), vLLM ("... does not support matryoshka representation").
_DIMENSION_REFUSALS = ("specifying dimensions", "matryoshka")


def _refuses_dimensions(exc: openai.APIError, message: str, call: BatchCall | None) -> bool:
    if call is None or call.dimensions is None or not isinstance(exc, openai.APIStatusError):
        return False
    lowered = message.lower()
    return exc.status_code == 400 and any(words in lowered for words in _DIMENSION_REFUSALS)


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
