"""The online lane's HTTP listener (aiohttp; the online lane's only HTTP module).

Routes, in OpenAI's shapes so the official SDKs work with their base URL pointed here:

    POST /v1/embeddings   embed `input` (callers authenticate with `Authorization: Bearer`)
    GET  /v1/models       the models callers may name
    GET  /readyz          200 while the lane serves, 503 (with why) while it cannot
    GET  /healthz         200 while the process runs

A listener of its own, apart from the ops port: the two face different callers. Stopping
first closes the listener and refuses new requests, then answers those in flight.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from embedstream.core.clock import Clock
from embedstream.core.costmodel import CostModels
from embedstream.core.governor import Governor
from embedstream.core.tokens import TokenCounter
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.callers import CallerIntake
from embedstream.errors import ConfigError
from embedstream.online.keys import CallerKeys
from embedstream.online.lane import LaneBuffer, OnlineLane, OnlineObserver
from embedstream.settings import Settings, online_keys
from embedstream.wire.openai import ApiProblem, models_response, parse_embeddings_request

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
JSON = "application/json"
# In-flight requests get this long to be answered once stopping began (the drain answers them
# sooner: the lane's deadline is online_timeout_s).
SHUTDOWN_GRACE_S = 5.0


class OnlineServer:
    def __init__(
        self,
        lane: OnlineLane,
        keys: CallerKeys,
        *,
        max_body_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._lane = lane
        self._keys = keys
        self._max_body_bytes = max_body_bytes
        self._ssl = ssl_context
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._port: int | None = None
        self._stopping = False

    def make_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self._max_body_bytes, middlewares=[self._errors_in_openai_shape]
        )
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (port 0 picks a free one: :attr:`port`)."""
        # handler_cancellation: a caller that disconnects cancels its handler, and with it the
        # inputs not yet sent (aiohttp lets handlers run on by default).
        runner = web.AppRunner(
            self.make_app(), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S,
            handler_cancellation=True,
        )  # fmt: skip
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=self._ssl)
        try:
            await site.start()
        except OSError as exc:  # the port is taken, the address is not ours: one line
            await runner.cleanup()
            raise ConfigError(
                "http_port", f"cannot listen on {host}:{port}: {exc.strerror}"
            ) from None
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._site = runner, site
        self._port = int(runner.addresses[0][1])
        scheme = "https" if self._ssl is not None else "http"
        log.info("online lane listening on %s://%s:%d/v1", scheme, host, self._port)

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("online server not started")
        return self._port

    async def stop_accepting(self) -> None:
        """Close the listener; requests that arrive on open connections get a 503."""
        self._stopping = True
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def stop(self) -> None:
        """Answer what is in flight (callers still waiting get a 503), then close."""
        await self.stop_accepting()
        self._lane.fail_waiting()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @web.middleware
    async def _errors_in_openai_shape(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiProblem as problem:
            return _problem_response(problem)
        except web.HTTPRequestEntityTooLarge:
            return _problem_response(
                ApiProblem(
                    413,
                    f"the request body is over {self._max_body_bytes} bytes "
                    "(http_max_body_bytes); send fewer or shorter inputs per request",
                    code="request_too_large",
                )
            )
        except web.HTTPException as exc:  # 404 for an unknown route, 405 for a wrong method
            if exc.status < 400:
                raise
            return _problem_response(ApiProblem(exc.status, exc.reason, code=None))

    async def _embeddings(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        if self._stopping:
            raise ApiProblem(
                503, "embedstream is stopping", error_type="server_error", code="stopping",
                retry_after_s=1,
            )  # fmt: skip
        parsed = parse_embeddings_request(await request.read())
        body = await self._lane.embed(parsed, caller, request.headers.get("traceparent"))
        return web.Response(body=body, content_type=JSON)

    async def _models(self, request: web.Request) -> web.Response:
        self._caller(request)
        return web.Response(body=models_response(self._lane.models), content_type=JSON)

    async def _readyz(self, request: web.Request) -> web.Response:
        ready = self._lane.ready and not self._stopping
        reason = "stopping" if self._stopping else "provider unusable"
        body = {"ready": True} if ready else {"ready": False, "reason": reason}
        return web.Response(body=orjson.dumps(body), status=200 if ready else 503,
                            content_type=JSON)  # fmt: skip

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def _caller(self, request: web.Request) -> str:
        name = self._keys.name_of(request.headers.get("Authorization"))
        if name is None:
            raise ApiProblem(
                401,
                "Incorrect or missing API key: send `Authorization: Bearer <key>` with a key "
                "of http_api_keys.",
                error_type="authentication_error",
                code="invalid_api_key",
            )
        return name


def _problem_response(problem: ApiProblem) -> web.Response:
    headers = {}
    if problem.retry_after_s is not None:
        headers["Retry-After"] = str(int(problem.retry_after_s))
    return web.Response(
        body=problem.body(), status=problem.status, content_type=JSON, headers=headers
    )


def ssl_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    """The server's TLS context, when a certificate is configured."""
    if not certfile or not keyfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


def build_online_server(
    settings: Settings,
    intake: CallerIntake,
    governor: Governor,
    buffer: LaneBuffer,
    cost: CostModels,
    *,
    clock: Clock,
    token_counter: TokenCounter,
    observer: OnlineObserver | None = None,
    tracer: Tracer = NULL_TRACER,
) -> OnlineServer:
    """The online lane in front of an engine (the processor's, or `serve`'s own)."""
    lane = OnlineLane(
        settings, intake, governor, buffer, cost,
        clock=clock, token_counter=token_counter, observer=observer, tracer=tracer,
    )  # fmt: skip
    file = Path(settings.http_api_keys_file) if settings.http_api_keys_file else None
    keys = CallerKeys(online_keys(settings), file=file, clock=clock.monotonic)
    if observer is not None:
        observer.declare_keys(keys.names)
    return OnlineServer(
        lane,
        keys,
        max_body_bytes=settings.http_max_body_bytes,
        ssl_context=ssl_context(settings.http_ssl_certfile, settings.http_ssl_keyfile),
    )
