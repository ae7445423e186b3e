"""One kept-alive aiohttp session that POSTs a ready body and hands back the raw answer.

The embedder's lean request path (``engine/embedder.py``) builds the URL, the headers and the
orjson body itself; this module only moves bytes, so its one foreign library stays behind one
small surface: :class:`JsonPoster` answers ``(status, headers, body)`` for any HTTP status and
turns every transport failure into :class:`PostFailed` (timeout or connection), never into an
aiohttp exception. Timeouts follow what the openai SDK's ``timeout=`` does with httpx: the
connect (including the wait for a pooled connection) and each read are bounded, not the
whole call, so a long call that keeps sending is not cut.

Proxies: like httpx under the SDK, HTTP(S)_PROXY / NO_PROXY from the environment are
honoured, but read once per URL, not per request: aiohttp's ``trust_env`` reads them and
~/.netrc in a worker thread on every request, which tripled the client's CPU per call.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import aiohttp

# As many connections as the openai SDK allows (httpx Limits(max_connections=1000)).
MAX_CONNECTIONS = 1000


class PostFailed(Exception):
    """No HTTP answer: ``kind`` says whether the call timed out or the provider was out of reach
    (refused, reset, closed mid-body, DNS)."""

    def __init__(self, kind: Literal["timeout", "connection"], detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive (aiohttp's CIMultiDictProxy)
    body: bytes


class JsonPoster:
    """POSTs bodies over one session, opened on the first call (inside the running loop)."""

    def __init__(self, timeout_s: float, *, env_proxies: bool = True) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._env_proxies = env_proxies
        self._proxies: dict[str, str | None] = {}  # by URL
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, limit_per_host=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    def _proxy(self, url: str) -> str | None:
        if url not in self._proxies:
            self._proxies[url] = env_proxy(url) if self._env_proxies else None
        return self._proxies[url]

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        session = self._session or self._open()
        proxy = self._proxy(url)
        try:
            async with session.post(url, data=body, headers=headers, proxy=proxy) as response:
                raw = await response.read()
                return Answer(response.status, response.headers, raw)
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
            raise PostFailed("timeout", str(exc) or "timed out") from None
        except aiohttp.ClientError as exc:
            raise PostFailed("connection", str(exc) or type(exc).__name__) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def env_proxy(url: str) -> str | None:
    """The proxy HTTP(S)_PROXY names for ``url``, unless NO_PROXY exempts its host."""
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme)
    if proxy is None or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy
