"""Calls an OpenAI-compatible /v1/embeddings endpoint (or an Azure OpenAI deployment) and
classifies every failure.

Two request paths, one behaviour. The lean path (the default) posts an orjson body with one
pre-built header set over a kept-alive aiohttp session (``engine/lean_http.py``): about a
sixth of the client CPU per call of the openai SDK, whose request building and httpx
transport cost ~2.5 ms per single-text call. The SDK path (``sdk=True``) stays for what needs
the SDK; its own retries are off: retrying is the pipeline's job (retry topic, backoff), so a
retry is never doubled nor hidden from metrics. Both paths classify failures by the same
rules (:func:`classify_status`) and parse the raw response body here (orjson, bulk float32
decoding, one finiteness test per vector), not with the SDK's models.

The only module that imports ``openai``.
"""

from __future__ import annotations

import math
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import openai
import orjson
from openai import AsyncAzureOpenAI, AsyncOpenAI, omit

from embedstream.core import configured
from embedstream.core.lanes import BucketKey
from embedstream.engine.lean_http import JsonPoster, PostFailed
from embedstream.errors import (
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
    http_reason,
)
from embedstream.settings import Settings, header_secrets
from embedstream.wire.vectors import base64_float_count, base64_floats, encode_base64


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
    def from_settings(cls, settings: Settings, *, sdk: bool = False) -> OpenAIEmbedder:
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
            sdk=sdk,
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
        sdk: bool = False,
    ) -> None:
        # Providers may quote the key, or a gateway key of extra_headers, back in an error.
        self._secrets = [api_key] if api_key else []
        self._secrets += header_secrets(extra_headers or {})
        self._secrets.sort(key=len, reverse=True)  # a secret holding another goes first
        self._wire_format: Literal["float", "base64"] = (
            "float" if wire_format == "float" else "base64"
        )
        self._extra_body = dict(extra_body or {})
        # The simulator and many self-hosted servers need no key; the SDK insists on one, and
        # the lean path sends the same "Bearer unused" (a gateway's header may replace it).
        key = api_key or "unused"
        headers = dict(extra_headers or {})
        self._client: AsyncOpenAI | None = None
        self._poster: JsonPoster | None = None
        if sdk:
            self._client = _sdk_client(base_url, key, timeout_s, headers, azure)
            return
        self._poster = JsonPoster(timeout_s)
        self._headers = _lean_headers(key, headers, azure is not None)
        self._azure = azure
        self._url = _lean_url(base_url, azure)
        self._urls: dict[str, str] = {}  # Azure without a deployment: one URL per model

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._poster is not None:
            await self._poster.close()

    async def embed(self, call: BatchCall) -> BatchOutcome:
        if self._poster is not None:
            return await self._embed_lean(self._poster, call)
        assert self._client is not None
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
            raise self._scrubbed(classify(exc, call)) from None
        latency = time.perf_counter() - started
        headers = {k.lower(): v for k, v in raw.headers.items() if k.lower().startswith(_HINTS)}
        return parse_body(call, body, latency, headers)

    async def _embed_lean(self, poster: JsonPoster, call: BatchCall) -> BatchOutcome:
        # The body the SDK sends for the call above: extra_body over the named fields, the
        # call's own fields over extra_body, the texts last.
        fields: dict[str, object] = {"model": call.model, "encoding_format": self._wire_format}
        if call.dimensions is not None:
            fields["dimensions"] = call.dimensions
        if self._extra_body:
            fields.update(self._extra_body)
        if call.user is not None or call.input_type is not None or call.task is not None:
            fields.update(call.parameters())
        texts = call.texts
        fields["input"] = texts if isinstance(texts, list | tuple) else list(texts)
        body = orjson.dumps(fields)
        url = self._url if self._url is not None else self._azure_url(call.model)
        started = time.perf_counter()
        try:
            answer = await poster.post(url, self._headers, body)
        except PostFailed as exc:
            if exc.kind == "timeout":
                raise TransientError(Reason.TIMEOUT, "embeddings call timed out") from None
            raise self._scrubbed(
                TransientError(Reason.CONNECTION, f"cannot reach the provider: {exc.detail}")
            ) from None
        if answer.status >= 400:
            message = status_message(answer.status, answer.body)
            raise self._scrubbed(classify_status(answer.status, message, answer.headers, call))
        latency = time.perf_counter() - started
        headers = {k.lower(): v for k, v in answer.headers.items() if k.lower().startswith(_HINTS)}
        return parse_body(call, answer.body, latency, headers)

    def _azure_url(self, model: str) -> str:
        url = self._urls.get(model)
        if url is None:
            assert self._azure is not None
            url = self._urls[model] = _azure_url(self._azure, model)
        return url

    def _scrubbed(self, error: EmbedStreamError) -> EmbedStreamError:
        for secret in self._secrets:
            if secret in error.message:
                # Keys quoted back must not reach logs or dead letters.
                error.message = error.message.replace(secret, "***")
        error.args = (error.message,)
        return error


def _sdk_client(
    base_url: str | None,
    key: str,
    timeout_s: float,
    headers: dict[str, str],
    azure: AzureTarget | None,
) -> AsyncOpenAI:
    if azure is not None:
        # Deployment URLs, the api-version query parameter and the `api-key` header.
        return AsyncAzureOpenAI(
            azure_endpoint=azure.endpoint,
            azure_deployment=azure.deployment,
            api_version=azure.api_version,
            api_key=key,
            max_retries=0,
            timeout=timeout_s,
            default_headers=headers,
        )
    return AsyncOpenAI(
        base_url=base_url, api_key=key, max_retries=0, timeout=timeout_s, default_headers=headers
    )


_DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's, as is the OPENAI_BASE_URL fallback


def _lean_url(base_url: str | None, azure: AzureTarget | None) -> str | None:
    """The embeddings URL, or None when it depends on the call's model (Azure, no deployment)."""
    if azure is None:
        base = base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL
        return f"{base.rstrip('/')}/embeddings"
    if azure.deployment is None:
        return None
    return _azure_url(azure, azure.deployment, quote=False)  # the SDK does not quote it either


def _azure_url(azure: AzureTarget, deployment: str, *, quote: bool = True) -> str:
    """Where the Azure SDK sends an embeddings call: the deployment's path and api-version."""
    name = urllib.parse.quote(deployment, safe="") if quote else deployment
    query = urllib.parse.urlencode({"api-version": azure.api_version})
    return f"{azure.endpoint.rstrip('/')}/openai/deployments/{name}/embeddings?{query}"


def _lean_headers(key: str, extra: Mapping[str, str], azure: bool) -> dict[str, str]:
    """The SDK's headers that matter: JSON both ways, the key as the SDK sends it (Azure's
    `api-key`, else a bearer token), and extra_headers over them, names compared without case."""
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        "User-Agent": "embedstream",
        **({"api-key": key} if azure else {"Authorization": f"Bearer {key}"}),
    }
    for name, value in extra.items():
        for existing in [h for h in headers if h.lower() == name.lower()]:
            del headers[existing]
        headers[name] = value
    return headers


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


def classify(exc: openai.APIError, call: BatchCall | None = None) -> EmbedStreamError:
    """Map an SDK error to permanent / transient / provider-wide, keeping retry-after."""
    message = _safe_message(exc)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(Reason.TIMEOUT, "embeddings call timed out")
    if isinstance(exc, openai.APIConnectionError):
        return TransientError(Reason.CONNECTION, f"cannot reach the provider: {message}")
    if isinstance(exc, openai.APIStatusError):
        return classify_status(exc.status_code, message, exc.response.headers, call)
    return TransientError(Reason.MALFORMED_RESPONSE, message)


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


def _safe_message(exc: openai.APIError) -> str:
    # The client's message quotes the response body, never our request headers (the key).
    return str(getattr(exc, "message", None) or exc)[:1024]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except ValueError:
        return None
    return None
