"""aiohttp routes of the simulator's Batch API: ``/v1/files`` and ``/v1/batches`` (Azure's
``/openai/files`` and ``/openai/batches`` with an ``api-version``), as OpenAI answers them. The
rules are in ``batch_files.py``, ``batch_input.py`` and ``batches.py``; this module reads
requests, authenticates them and writes the answers.

Routes:
    POST   /v1/files                  upload (multipart: file, purpose)
    GET    /v1/files                  list (``?purpose=``)
    GET    /v1/files/{id}             one file
    DELETE /v1/files/{id}
    GET    /v1/files/{id}/content     its bytes
    POST   /v1/batches                create (input_file_id, endpoint, completion_window, metadata)
    GET    /v1/batches                list, newest first (``?after=``, ``?limit=``)
    GET    /v1/batches/{id}
    POST   /v1/batches/{id}/cancel

Only the openai and azure flavors have them (the others answer 404, as those servers do). The
Batch API has a pool of its own at the provider: the embeddings rate limits do not apply.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from embedsim.batch_files import FileStore
from embedsim.batches import BatchBook, Vectors
from embedsim.config import SimulatorConfig
from embedsim.errors import ApiError, authenticate, invalid_request, not_found
from embedsim.model import Stats
from embedsim.responses import error_response, json_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BatchApi:
    def __init__(
        self,
        config: Callable[[], SimulatorConfig],
        wall: Callable[[], float],
        vectors: Vectors,
        stats: Stats,
        seed: int,
    ) -> None:
        """``config`` reads the simulator's settings as they are now; ``wall`` is the Unix
        clock the batches' times are on."""
        self._config = config
        self._wall = wall
        self.files = FileStore(random.Random(f"ids-{seed}"))
        self.book = BatchBook(
            self.files, random.Random(f"lines-{seed}"), vectors, stats.served_batch
        )
        self._stats = stats

    def register(self, app: web.Application) -> None:
        for root in ("/v1", "/openai"):
            add = app.router
            add.add_post(f"{root}/files", self._route(self._upload))
            add.add_get(f"{root}/files", self._route(self._list_files))
            add.add_get(f"{root}/files/{{file_id}}", self._route(self._file))
            add.add_delete(f"{root}/files/{{file_id}}", self._route(self._delete_file))
            add.add_get(f"{root}/files/{{file_id}}/content", self._route(self._content))
            add.add_post(f"{root}/batches", self._route(self._create))
            add.add_get(f"{root}/batches", self._route(self._list_batches))
            add.add_get(f"{root}/batches/{{batch_id}}", self._route(self._batch))
            add.add_post(f"{root}/batches/{{batch_id}}/cancel", self._route(self._cancel))

    def advance(self) -> None:
        """Bring every batch to now (before /stats answers)."""
        self.book.advance(self._config(), self._wall())

    def _route(self, handler: Handler) -> Handler:
        async def answer(request: web.Request) -> web.StreamResponse:
            config = self._config()
            try:
                self._check_route(request, config)
                authenticate(config, request.headers)
                return await handler(request)
            except ApiError as error:
                return error_response(error, config.flavor_rules)

        return answer

    @staticmethod
    def _check_route(request: web.Request, config: SimulatorConfig) -> None:
        azure_route = request.path.startswith("/openai/")
        if config.flavor not in ("openai", "azure") or azure_route != (config.flavor == "azure"):
            raise not_found(f"no route {request.path} on a {config.flavor} server")
        if azure_route and not request.query.get("api-version"):
            raise ApiError(404, "Resource not found", error_type="invalid_request_error",
                           code="404")  # fmt: skip

    # -- files ---------------------------------------------------------------------------

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        try:
            form = await request.post()
        except ValueError as exc:  # not multipart, or above the body limit
            raise invalid_request(f"Expected a multipart upload: {exc}", param=None,
                                  code=None) from None  # fmt: skip
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, web.FileField):
            raise invalid_request("Missing the 'file' part.", param="file",
                                  code="missing_required_parameter")  # fmt: skip
        if not isinstance(purpose, str):
            raise invalid_request("Missing 'purpose'.", param="purpose",
                                  code="missing_required_parameter")  # fmt: skip
        content = upload.file.read()
        stored = self.files.upload(upload.filename, purpose, content, self._wall())
        return json_response(stored.to_json())

    async def _list_files(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.files.listed(request.query.get("purpose")))

    async def _file(self, request: web.Request) -> web.StreamResponse:
        self.advance()
        return json_response(self.files.get(request.match_info["file_id"]).to_json())

    async def _delete_file(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.files.delete(request.match_info["file_id"]))

    async def _content(self, request: web.Request) -> web.StreamResponse:
        self.advance()
        stored = self.files.get(request.match_info["file_id"])
        return web.Response(body=stored.content, content_type="application/octet-stream")

    # -- batches -------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            raise invalid_request("The request body must be a JSON object.", param=None,
                                  code=None)  # fmt: skip
        config, now = self._config(), self._wall()
        self.book.advance(config, now)  # (the enqueued tokens of the batches before it)
        batch = self.book.create(body, config, now)
        self._stats.batches += 1
        self.book.advance(config, now)
        return json_response(batch.to_json())

    async def _list_batches(self, request: web.Request) -> web.StreamResponse:
        limit_text = request.query.get("limit", "20")
        if not limit_text.isdigit():
            raise invalid_request(f"Invalid 'limit': {limit_text!r}.", param="limit",
                                  code="invalid_value")  # fmt: skip
        listed = self.book.listed(
            request.query.get("after"), int(limit_text), self._config(), self._wall()
        )
        return json_response(listed)

    async def _batch(self, request: web.Request) -> web.StreamResponse:
        batch = self.book.get(request.match_info["batch_id"], self._config(), self._wall())
        return json_response(batch.to_json())

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self.book.cancel(request.match_info["batch_id"], self._config(), self._wall())
        return json_response(batch.to_json())
