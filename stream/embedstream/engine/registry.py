"""The Schema Registry client: schemas by id (cached, concurrent misses coalesced) and schema
registration, over the Confluent-compatible REST API (Confluent, Apicurio's ``/apis/ccompat/v7``,
Redpanda, Karapace).

Each failure is classified once, here: an id the registry does not know is the record's fault
(:class:`InvalidEvent` ``unknown_schema``, dead-letter it); a registry that is unreachable,
slow, failing (5xx, 429) or refusing our credentials is an outage of the input
(:class:`RegistryUnavailable`: pause and retry, never dead-letter). No retries of our own: the
caller's outage handling is the one retry loop. Credentials never appear in a message.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import aiohttp
import orjson

from embedstream.core.lru import TtlLru
from embedstream.errors import InvalidEvent, Reason, RegistryUnavailable
from embedstream.wire.formats import RegistrySchema, SchemaReference

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json;q=0.9"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# A reference chain deeper than this is a cycle, not a schema.
MAX_REFERENCE_DEPTH = 16


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """How to reach the registry. ``url`` may carry ``user:password@``; it is split off into
    basic auth and never shown."""

    url: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    cache_size: int = 1000  # schemas kept by id (an id's schema never changes)
    unknown_ttl_s: float = 30.0  # how long a 404 for an id is believed without asking again

    def __repr__(self) -> str:
        # Only the address without user info, and whether each secret is set.
        secrets = {
            "password": self.password,
            "bearer_token": self.bearer_token,
            "ssl_keyfile_password": self.ssl_keyfile_password,
        }
        shown = ", ".join(f"{name}={'***' if value else None}" for name, value in secrets.items())
        return f"RegistryConfig(url={_without_userinfo(self.url)!r}, {shown})"

    def __post_init__(self) -> None:
        if self.bearer_token and (self.username or self.password):
            raise ValueError("registry: basic auth or a bearer token, not both")
        if self.timeout_s <= 0 or self.cache_size < 1:
            raise ValueError("registry: timeout_s must be > 0 and cache_size >= 1")


class RegistryClient:
    def __init__(
        self,
        config: RegistryConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urlsplit(config.url)
        username, password = config.username, config.password
        if parts.username is not None:
            username = username or unquote(parts.username)
            password = password or unquote(parts.password or "")
        # The address without credentials: the only form of the URL that is ever shown.
        self.base_url = _without_userinfo(config.url).rstrip("/")
        self._headers = {"Accept": _ACCEPT}
        if config.bearer_token:
            self._headers["Authorization"] = f"Bearer {config.bearer_token}"
        elif username is not None:
            pair = f"{username}:{password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        self._config = config
        self._clock = clock
        self._ssl = _ssl_context(config)
        self._session: aiohttp.ClientSession | None = None
        self._schemas: TtlLru[int, RegistrySchema] = TtlLru(config.cache_size, 0)
        self._unknown: TtlLru[int, InvalidEvent] = TtlLru(config.cache_size, config.unknown_ttl_s)
        self._pending: dict[int, asyncio.Future[RegistrySchema]] = {}  # id -> its one request
        self.requests = 0  # HTTP requests sent: the tests see caching and coalescing by it

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def schema(self, schema_id: int) -> RegistrySchema:
        """The schema of an id, with its references resolved; asks the registry once per id."""
        now = self._clock()
        cached = self._schemas.get(schema_id, now)
        if cached is not None:
            return cached
        unknown = self._unknown.get(schema_id, now)
        if unknown is not None:
            raise InvalidEvent(unknown.reason, unknown.message)
        task = self._pending.get(schema_id)
        if task is None:
            task = asyncio.ensure_future(self._load(schema_id))
            self._pending[schema_id] = task
            task.add_done_callback(lambda done: self._finished(schema_id, done))
        # Shielded: one caller cancelled (its partition revoked) must not cancel the request
        # that other callers of the same id wait for.
        return await asyncio.shield(task)

    async def _load(self, schema_id: int) -> RegistrySchema:
        try:
            found = await self._fetch(schema_id)
        except InvalidEvent as exc:
            self._unknown.put(schema_id, exc, self._clock())
            raise
        self._schemas.put(schema_id, found, self._clock())
        return found

    def _finished(self, schema_id: int, task: asyncio.Future[RegistrySchema]) -> None:
        self._pending.pop(schema_id, None)
        if not task.cancelled():
            task.exception()  # every waiter may be gone: retrieved, so asyncio does not warn

    async def register(self, subject: str, schema_type: str, schema: str) -> int:
        """Register a schema under a subject (idempotent in the registry); its id."""
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        doc = await self._request("POST", f"/subjects/{quote(subject, safe='')}/versions", body)
        schema_id = doc.get("id")
        if not isinstance(schema_id, int):
            raise RegistryUnavailable(
                Reason.REGISTRY_MALFORMED_RESPONSE, f"registry answered no id for {subject}"
            )
        return schema_id

    async def _fetch(self, schema_id: int) -> RegistrySchema:
        doc = await self._request("GET", f"/schemas/ids/{schema_id}", unknown=schema_id)
        schema_type, text, references = _schema_fields(doc, f"schema {schema_id}")
        resolved = await self._references(references, f"schema {schema_id}", depth=0)
        return RegistrySchema(schema_id, schema_type, text, tuple(resolved))

    async def _references(
        self, references: list[Any], what: str, depth: int
    ) -> list[SchemaReference]:
        """The referenced schemas, each after its own references (dependencies first)."""
        if depth > MAX_REFERENCE_DEPTH:
            raise InvalidEvent(Reason.INVALID_SCHEMA, f"{what}: references nest too deep")
        resolved: list[SchemaReference] = []
        for reference in references:
            try:
                name, subject, version = (reference[key] for key in ("name", "subject", "version"))
            except (TypeError, KeyError):
                raise InvalidEvent(Reason.INVALID_SCHEMA, f"{what}: malformed reference") from None
            path = f"/subjects/{quote(str(subject), safe='')}/versions/{version}"
            doc = await self._request("GET", path, unknown=what)
            _, text, nested = _schema_fields(doc, f"{what} reference {name}")
            resolved.extend(await self._references(nested, what, depth + 1))
            resolved.append(SchemaReference(str(name), text))
        return resolved

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, unknown: object = None
    ) -> dict[str, Any]:
        """One call; a 404 with ``unknown`` set is that schema's InvalidEvent."""
        url = self.base_url + path
        where = f"{method} {self.base_url}{path}"
        headers = dict(self._headers)
        data = None
        if body is not None:
            headers["Content-Type"] = _CONTENT_TYPE
            data = orjson.dumps(body)
        session = self._open()
        self.requests += 1
        try:
            async with session.request(
                method, url, data=data, headers=headers, ssl=self._ssl
            ) as response:
                status = response.status
                payload = await response.read()
                retry_after = _retry_after(response.headers.get("Retry-After"))
        except TimeoutError:
            raise RegistryUnavailable(
                Reason.REGISTRY_TIMEOUT, f"{where}: no answer in {self._config.timeout_s} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise RegistryUnavailable(
                Reason.REGISTRY_UNREACHABLE, f"{where}: {type(exc).__name__}: {exc}"
            ) from None
        if status == 404 and unknown is not None:
            label = f"schema id {unknown}" if isinstance(unknown, int) else str(unknown)
            raise InvalidEvent(
                Reason.UNKNOWN_SCHEMA, f"the registry does not know {label} ({where}: 404)"
            )
        if status in (401, 403):
            raise RegistryUnavailable(Reason.REGISTRY_AUTH, f"{where}: {status}, check credentials")
        if status >= 500 or status == 429:
            raise RegistryUnavailable(
                Reason.REGISTRY_ERROR, f"{where}: {status}", retry_after=retry_after
            )
        if status >= 400:
            # A request of ours the registry refuses (e.g. 409/422: the result schema breaks the
            # subject's compatibility rule): nothing a retry changes; say what it said.
            raise RegistryRejected(status, f"{where}: {status} {_message(payload)}")
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            raise RegistryUnavailable(
                Reason.REGISTRY_MALFORMED_RESPONSE, f"{where}: {status} and no JSON object"
            )
        return doc

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self._config.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session


class RegistryRejected(Exception):
    """The registry refused a request of ours (4xx other than 401/403/404): a configuration
    problem, e.g. a result schema incompatible with its subject's versions."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _schema_fields(doc: dict[str, Any], what: str) -> tuple[str, str, list[Any]]:
    text = doc.get("schema")
    schema_type = doc.get("schemaType") or "AVRO"  # the API omits it for Avro
    references = doc.get("references") or []
    if not isinstance(text, str) or not isinstance(schema_type, str):
        raise RegistryUnavailable(
            Reason.REGISTRY_MALFORMED_RESPONSE, f"{what}: the registry's answer has no schema"
        )
    if not isinstance(references, list):
        raise InvalidEvent(Reason.INVALID_SCHEMA, f"{what}: references is not a list")
    return schema_type.upper(), text, references


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _ssl_context(config: RegistryConfig) -> ssl.SSLContext | bool:
    if not (config.ssl_cafile or config.ssl_certfile):
        return True  # aiohttp's default verification for https
    context = ssl.create_default_context(cafile=config.ssl_cafile)
    if config.ssl_certfile:
        context.load_cert_chain(
            config.ssl_certfile, config.ssl_keyfile, password=config.ssl_keyfile_password
        )
    return context


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _message(payload: bytes) -> str:
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload[:200].decode("utf-8", "replace")
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])[:500]
    return ""
