"""The provider's Batch API, as OpenAI serves it: upload a JSONL file (``/files``, purpose
``batch``), create a batch of it (``/batches``, with ``metadata``), ask its status, find it
again by its metadata (``GET /batches``, newest first), cancel it, download its output and error
files (streamed to disk: a 50,000-line output is hundreds of MB).

Azure OpenAI serves the same API under ``<endpoint>/openai/files`` and ``/openai/batches`` with
an ``api-version`` and an ``api-key`` header. Over one aiohttp session of its own, beside the
embedder's (the Batch API has a rate-limit pool of its own). Every failure is an
:class:`~embedstream.errors.EmbedStreamError`, classified as the embedder classifies a call's.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import orjson

from embedstream.engine.answers import classify_status, status_message
from embedstream.errors import EmbedStreamError, Reason, TransientError
from embedstream.settings import Settings

ENDPOINT = "/v1/embeddings"
WINDOW = "24h"
LIST_PAGE = 100
DOWNLOAD_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the provider says of a batch."""

    id: str
    status: str
    created_at: int
    metadata: Mapping[str, str] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None
    error_codes: tuple[str, ...] = ()
    error_message: str | None = None
    completed: int = 0
    failed: int = 0
    total: int = 0

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> BatchInfo:
        errors = (doc.get("errors") or {}).get("data") or []
        counts = doc.get("request_counts") or {}
        return cls(
            id=str(doc["id"]), status=str(doc["status"]), created_at=int(doc["created_at"]),
            metadata=dict(doc.get("metadata") or {}), output_file_id=doc.get("output_file_id"),
            error_file_id=doc.get("error_file_id"),
            error_codes=tuple(str(e.get("code")) for e in errors if isinstance(e, dict)),
            error_message=next((str(e.get("message")) for e in errors if isinstance(e, dict)),
                               None),
            completed=int(counts.get("completed") or 0), failed=int(counts.get("failed") or 0),
            total=int(counts.get("total") or 0),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class BatchApiTarget:
    """Where the Batch API answers, and how to authenticate."""

    root: str  # .../v1, or <azure endpoint>/openai
    headers: Mapping[str, str]
    query: Mapping[str, str] = field(default_factory=dict)  # Azure's api-version

    @classmethod
    def from_settings(cls, settings: Settings) -> BatchApiTarget:
        key = settings.api_key or "unused"
        extra = settings.extra_header_map
        if settings.provider_profile == "azure" and settings.azure_endpoint:
            root = f"{settings.azure_endpoint.rstrip('/')}/openai"
            return cls(root, {"api-key": key, **extra},
                       {"api-version": settings.azure_api_version})  # fmt: skip
        base = settings.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return cls(base.rstrip("/"), {"Authorization": f"Bearer {key}", **extra})


class BatchApi:
    def __init__(self, target: BatchApiTarget, timeout_s: float) -> None:
        self._target = target
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s,
                                              sock_read=timeout_s)  # fmt: skip
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _url(self, path: str, **query: str) -> str:
        params = {**self._target.query, **{k: v for k, v in query.items() if v}}
        tail = f"?{urllib.parse.urlencode(params)}" if params else ""
        return f"{self._target.root}{path}{tail}"

    async def _call(self, method: str, url: str, **options: Any) -> bytes:
        session = self._session or self._open()
        headers = {**self._target.headers, **options.pop("headers", {})}
        try:
            async with session.request(method, url, headers=headers, **options) as answer:
                body = await answer.read()
                if answer.status >= 400:
                    message = status_message(answer.status, body)
                    raise classify_status(answer.status, message, answer.headers)
                return body
        except TimeoutError:
            raise TransientError(Reason.TIMEOUT, f"batch API {method} timed out") from None
        except aiohttp.ClientError as exc:
            raise TransientError(Reason.CONNECTION, f"cannot reach the batch API: {exc}") from None

    def _open(self) -> aiohttp.ClientSession:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _json(self, method: str, url: str, **options: Any) -> dict[str, Any]:
        body = await self._call(method, url, **options)
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise TransientError(Reason.MALFORMED_RESPONSE, f"batch API: {exc}") from None
        if not isinstance(doc, dict):
            raise TransientError(Reason.MALFORMED_RESPONSE, "batch API: not an object")
        return doc

    async def upload(self, file: BinaryIO, filename: str) -> str:
        """Upload a job's file; its id."""
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", file, filename=filename, content_type="application/jsonl")
        doc = await self._json("POST", self._url("/files"), data=form)
        return str(doc["id"])

    async def create(self, file_id: str, metadata: Mapping[str, str]) -> BatchInfo:
        body = {"input_file_id": file_id, "endpoint": ENDPOINT, "completion_window": WINDOW,
                "metadata": dict(metadata)}  # fmt: skip
        doc = await self._json("POST", self._url("/batches"), data=orjson.dumps(body),
                               headers={"Content-Type": "application/json"})  # fmt: skip
        return BatchInfo.of(doc)

    async def retrieve(self, batch_id: str) -> BatchInfo:
        return BatchInfo.of(await self._json("GET", self._url(f"/batches/{batch_id}")))

    async def cancel(self, batch_id: str) -> BatchInfo:
        return BatchInfo.of(await self._json("POST", self._url(f"/batches/{batch_id}/cancel")))

    async def find(self, metadata: Mapping[str, str], since_s: int) -> BatchInfo | None:
        """The newest batch carrying all of ``metadata``, among those created since
        ``since_s`` (Unix seconds): a job submitted just before a crash."""
        after: str | None = None
        while True:
            url = self._url("/batches", limit=str(LIST_PAGE), after=after or "")
            page = await self._json("GET", url)
            data = [BatchInfo.of(d) for d in page.get("data") or []]
            for info in data:
                if all(info.metadata.get(k) == v for k, v in metadata.items()):
                    return info
            if not data or not page.get("has_more") or data[-1].created_at < since_s:
                return None
            after = data[-1].id

    async def download(self, file_id: str, destination: Path) -> int:
        """A file's content, written to ``destination``; its size."""
        session = self._session or self._open()
        size = 0
        url = self._url(f"/files/{file_id}/content")
        try:
            async with session.get(url, headers=dict(self._target.headers)) as answer:
                if answer.status >= 400:
                    body = await answer.read()
                    raise classify_status(answer.status, status_message(answer.status, body),
                                          answer.headers)  # fmt: skip
                with destination.open("wb") as out:
                    async for chunk in answer.content.iter_chunked(DOWNLOAD_CHUNK):
                        out.write(chunk)
                        size += len(chunk)
        except TimeoutError:
            raise TransientError(Reason.TIMEOUT, "batch file download timed out") from None
        except aiohttp.ClientError as exc:
            raise TransientError(Reason.CONNECTION, f"batch file download: {exc}") from None
        return size

    async def delete_file(self, file_id: str) -> None:
        with contextlib.suppress(EmbedStreamError):  # one left behind expires (30 days)
            await self._call("DELETE", self._url(f"/files/{file_id}"))
