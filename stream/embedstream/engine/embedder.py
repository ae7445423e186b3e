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

import os
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import orjson

from embedstream.core import configured
from embedstream.engine.answers import classify_status, parse_body, status_message
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.lean_http import JsonPoster, PostFailed
from embedstream.errors import (
    EmbedStreamError,
    Reason,
    RequestRefused,
    TransientError,
)
from embedstream.settings import Settings, header_secrets

if TYPE_CHECKING:  # the SDK is imported when its path is taken: 2 s of start-up otherwise
    import openai
    from openai import AsyncOpenAI


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
        # Credentials in the URL (a gateway's user:password@): aiohttp refuses them beside an
        # Authorization header, so such a URL keeps the SDK's path, which has always sent them.
        if sdk or _has_userinfo(base_url or os.environ.get("OPENAI_BASE_URL")):
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
        import openai

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
                dimensions=openai.omit if call.dimensions is None else call.dimensions,
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
            raise self._scrubbed(
                classify_status(answer.status, message, answer.headers, call, answer.body)
            )
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
            if isinstance(error, RequestRefused):  # nor online callers
                error.provider_message = error.provider_message.replace(secret, "***")
        error.args = (error.message,)
        return error


def _sdk_client(
    base_url: str | None,
    key: str,
    timeout_s: float,
    headers: dict[str, str],
    azure: AzureTarget | None,
) -> AsyncOpenAI:
    from openai import AsyncAzureOpenAI, AsyncOpenAI

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


def _has_userinfo(url: str | None) -> bool:
    return bool(url) and "@" in urllib.parse.urlsplit(url or "").netloc


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


def classify(exc: openai.APIError, call: BatchCall | None = None) -> EmbedStreamError:
    """Map an SDK error to permanent / transient / provider-wide, keeping retry-after."""
    import openai

    message = _safe_message(exc)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(Reason.TIMEOUT, "embeddings call timed out")
    if isinstance(exc, openai.APIConnectionError):
        return TransientError(Reason.CONNECTION, f"cannot reach the provider: {message}")
    if isinstance(exc, openai.APIStatusError):
        return classify_status(
            exc.status_code, message, exc.response.headers, call, exc.response.content
        )
    return TransientError(Reason.MALFORMED_RESPONSE, message)


def _safe_message(exc: openai.APIError) -> str:
    # The client's message quotes the response body, never our request headers (the key).
    return str(getattr(exc, "message", None) or exc)[:1024]
