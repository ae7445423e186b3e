"""A throwaway Confluent-compatible Schema Registry for tests (aiohttp, in-memory).

The subset of the REST API that serializers and embedstream use: register a schema under a
subject, get a schema by id, get a subject's version, list subjects. Switches for the failure
cases a real registry shows rarely: answer every request with a status (503), answer slowly,
stop listening (connection refused) and listen again on the same port, require credentials.
Test kit: the runtime never imports it.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass(frozen=True, slots=True)
class StoredSchema:
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[dict[str, Any], ...] = ()

    def body(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":  # as Confluent's registry: no schemaType for Avro
            doc["schemaType"] = self.schema_type
        if self.references:
            doc["references"] = list(self.references)
        return doc


@dataclass
class TestRegistry:
    """``prefix`` puts the API under a path, e.g. ``/apis/ccompat/v7`` as Apicurio does."""

    __test__ = False  # not a pytest test class

    prefix: str = ""
    # The switches, set by tests at any time:
    answer_status: int | None = None  # answer every request with this status (e.g. 503)
    delay_s: float = 0.0  # wait this long before answering
    authorization: str | None = None  # if set, the Authorization header required (else 401)
    # What the server saw:
    paths: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_id: dict[int, StoredSchema] = {}
        self._ids: dict[tuple[str, str, str], int] = {}  # (type, text, refs) -> id
        self._subjects: dict[str, list[int]] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    async def start(self, port: int = 0) -> str:
        app = web.Application(middlewares=[self._switches])
        p = self.prefix
        app.router.add_post(p + "/subjects/{subject}/versions", self._register)
        app.router.add_get(p + "/schemas/ids/{id}", self._by_id_handler)
        app.router.add_get(p + "/subjects/{subject}/versions/{version}", self._version)
        app.router.add_get(p + "/subjects", self._list_subjects)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await self.listen(port)
        return self.url

    async def listen(self, port: int | None = None) -> None:
        """Accept connections (again, on the same port after :meth:`refuse`)."""
        assert self._runner is not None, "start() first"
        if port is not None:
            self.port = port or _free_port()
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()

    async def refuse(self) -> None:
        """Stop listening: connections to the port are refused until :meth:`listen`."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> TestRegistry:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = "AVRO",
        references: tuple[dict[str, Any], ...] = (),
    ) -> int:
        """Register directly (no HTTP); the same schema text gets the same id everywhere."""
        key = (schema_type, schema, orjson.dumps(list(references)).decode())
        schema_id = self._ids.get(key)
        if schema_id is None:
            schema_id = self._ids[key] = len(self._by_id) + 1
            self._by_id[schema_id] = StoredSchema(schema_id, schema_type, schema, references)
        versions = self._subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    @web.middleware
    async def _switches(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.paths.append(f"{request.method} {request.path}")
        self.authorizations.append(request.headers.get("Authorization"))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.answer_status is not None:
            return _error(self.answer_status, 50003, "switched to fail")
        wanted = self.authorization
        if wanted is not None and request.headers.get("Authorization") != wanted:
            return _error(401, 40101, "Unauthorized")
        response: web.StreamResponse = await handler(request)
        return response

    async def _register(self, request: web.Request) -> web.Response:
        try:
            doc = orjson.loads(await request.read())
            schema = doc["schema"]
            schema_type = doc.get("schemaType") or "AVRO"
            references = tuple(doc.get("references") or ())
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return _error(422, 42201, "Invalid schema")
        schema_id = self.register(request.match_info["subject"], schema, schema_type, references)
        return _json({"id": schema_id})

    async def _by_id_handler(self, request: web.Request) -> web.Response:
        found = self._by_id.get(_int(request.match_info["id"]))
        if found is None:
            return _error(404, 40403, "Schema not found")
        return _json(found.body())

    async def _version(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        versions = self._subjects.get(subject)
        if not versions:
            return _error(404, 40401, "Subject not found")
        wanted = request.match_info["version"]
        number = len(versions) if wanted in ("latest", "-1") else _int(wanted)
        if not 1 <= number <= len(versions):
            return _error(404, 40402, "Version not found")
        found = self._by_id[versions[number - 1]]
        return _json({"subject": subject, "version": number, "id": found.schema_id} | found.body())

    async def _list_subjects(self, _: web.Request) -> web.Response:
        return _json(sorted(self._subjects))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _json(doc: object, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(doc), status=status, content_type="application/vnd.schemaregistry.v1+json"
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"error_code": code, "message": message}, status)
