"""aiohttp shell around the pure model: routing, queuing for capacity, sleeping, stats.

Routes:
    POST /v1/embeddings       OpenAI-compatible embeddings (every flavor but azure)
    POST /openai/deployments/{deployment}/embeddings?api-version=...   the azure flavor's
    GET  /v1/models           the advertised models, OpenAI's list format (and /v1/models/{id})
    /v1/files, /v1/batches    the Batch API (batch_routes.py; azure: /openai/files, ...)
    GET  /healthz             200 "ok"
    GET  /stats               counters (see model.Stats)
    POST /admin/reset-stats   zero the counters
    GET  /admin/faults        current settings
    POST /admin/faults        change settings live, e.g. {"error_rate": 0.5}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from embedsim.batch_routes import BatchApi
from embedsim.cli import DEFAULT_HOST, DEFAULT_PORT
from embedsim.cli import add_cli_arguments as add_cli_arguments
from embedsim.cli import config_from_args as config_from_args
from embedsim.config import SimulatorConfig
from embedsim.errors import ApiError, authenticate, invalid_request, server_error
from embedsim.limits import RateLimits
from embedsim.local_model import VectorSource, WordLlamaVectors
from embedsim.model import CallRecord, Stats, decide_faults, latency_s
from embedsim.protocol import (
    EmbeddingRequest,
    build_response,
    check_rejected_texts,
    find_model,
    flaky_failure,
    model_list,
    parse_request,
)
from embedsim.responses import error_response, json_response, route_of, url_host

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
OffLoop = Callable[..., Awaitable[Any]]  # asyncio.to_thread's shape: (function, *args)

# A call with more inputs than this is parsed, built and encoded on a worker thread: on the
# event loop, a 2,048-input call's own work (its tokens counted, 2,048 vectors hashed and
# encoded: some 60 ms) held every other call's answer meanwhile, so a small call beside a
# flood of big ones had a tail (P99 ~260 ms) that a real provider, computing on other
# hardware, does not give it. On a thread, the loop gets the interpreter back within its
# switch interval (5 ms). Small calls stay inline: the hop costs more than their work.
OFF_LOOP_INPUTS = 64
OFF_LOOP_BODY_BYTES = 64 * 1024

# A full request (2048 inputs, 300k tokens) can be several MB; aiohttp's default is 1 MB. A
# batch's input file may be 200 MB (and a little more, to be refused as OpenAI refuses it).
_MAX_BODY_BYTES = 256 * 1024 * 1024


class SimulatorServer:
    """A simulated OpenAI-compatible embeddings provider on a local port.

    ``sleep`` and ``clock`` are injectable so tests can control latency, hangs and
    rate-limit timing without real waiting, and ``wall`` (Unix time) the batches' lives;
    ``rng`` defaults to
    ``random.Random(config.seed)`` and drives every fault decision; ``off_loop`` runs a big
    call's own work (``asyncio.to_thread`` by default).
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        rng: random.Random | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        off_loop: OffLoop = asyncio.to_thread,
        wall: Clock = time.time,
    ) -> None:
        self._config = config or SimulatorConfig()
        self._rng = rng or random.Random(self._config.seed)
        self._sleep = sleep
        self._clock = clock
        self._off_loop = off_loop
        self.stats = Stats()
        self._capacity = asyncio.Semaphore(self._config.capacity)
        self._limits = RateLimits(self._config, clock)
        self._handlers: set[asyncio.Task[object]] = set()
        self._flaky_failures: dict[str, int] = {}
        self.calls: list[CallRecord] = []  # filled when config.record_calls is set
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        # A real model's vectors (model_backend "wordllama"); None: the hash vectors.
        self._vectors: VectorSource | None = (
            WordLlamaVectors() if self._config.model_backend == "wordllama" else None
        )
        self.batches = BatchApi(
            lambda: self._config, wall, self._batch_vectors, self.stats, self._config.seed
        )

    # ----------------------------------------------------------------- lifecycle

    async def start(self, host: str = DEFAULT_HOST, port: int = 0) -> None:
        """Listen on ``host:port``; port 0 picks a free port (see :attr:`url`)."""
        if self._runner is not None:
            raise RuntimeError("simulator already started")
        if isinstance(self._vectors, WordLlamaVectors):
            # Loaded before listening: a missing extra fails the start, not the first call.
            await asyncio.to_thread(self._vectors.load)
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound_port = runner.addresses[0][1]
        self._url = f"http://{url_host(host)}:{bound_port}"
        # The rate-limit window counts from start, not from construction.
        self._limits.apply(self._config, window_changed=True)

    async def stop(self) -> None:
        """Stop listening. Calls still running (hung ones included) are cancelled."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for task in list(self._handlers):
            task.cancel()
        await runner.cleanup()

    async def __aenter__(self) -> SimulatorServer:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def root_url(self) -> str:
        """``http://host:port`` without a path, for /stats and /admin routes."""
        if self._url is None:
            raise RuntimeError("simulator not started")
        return self._url

    @property
    def url(self) -> str:
        """Base URL for ``openai.AsyncOpenAI(base_url=...)``: ``http://host:port/v1``."""
        return f"{self.root_url}/v1"

    # ----------------------------------------------------------------- control

    @property
    def config(self) -> SimulatorConfig:
        return self._config

    def set_faults(self, **changes: object) -> SimulatorConfig:
        """Change settings live (any SimulatorConfig field except ``capacity``).

        Setting ``rate_limit_for_s`` (re)starts the 429 window from now; 0 ends it.
        Raises ValueError for unknown fields or invalid values.
        """
        for fixed in ("capacity", "flavor", "model_backend"):
            if fixed in changes and changes[fixed] != getattr(self._config, fixed):
                raise ValueError(f"{fixed} cannot change while the simulator runs")
        new = self._config.replace(**changes)
        self._limits.apply(new, window_changed="rate_limit_for_s" in changes)
        self._config = new
        return new

    def reset_stats(self) -> None:
        self.stats.reset()

    # ----------------------------------------------------------------- HTTP

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_BODY_BYTES)
        app.router.add_post("/v1/embeddings", self._handle_embeddings)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", self._handle_embeddings)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_get("/v1/models/{model}", self._handle_model)
        app.router.add_get("/healthz", self._handle_healthz)
        app.router.add_get("/stats", self._handle_stats)
        app.router.add_post("/admin/reset-stats", self._handle_reset_stats)
        app.router.add_get("/admin/faults", self._handle_get_faults)
        app.router.add_post("/admin/faults", self._handle_set_faults)
        self.batches.register(app)
        return app

    def _batch_vectors(self, request: EmbeddingRequest) -> list[list[float]] | None:
        """A batch line's vectors: the real model's, or None (the hash vectors)."""
        if self._vectors is None:
            return None
        return self._vectors.vectors(request.inputs, request.dimensions)

    async def _handle_embeddings(self, request: web.Request) -> web.Response:
        self.stats.calls += 1
        received_at = self._clock()
        self.stats.arrive(received_at, self._config.capacity)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        inputs: list[str] = []
        fields: dict[str, object] = {}  # what the call asked, for the call log
        try:
            response = await self._serve_embeddings(request, inputs, fields)
            self._record(received_at, inputs, 200, None, request, fields)
            return response
        except ApiError as error:
            self.stats.record_error(error.status)
            retry_after = error.headers.get("retry-after")
            self._record(
                received_at, inputs, error.status,
                float(retry_after) if retry_after else None, request, fields,
            )  # fmt: skip
            return error_response(error, self._config.flavor_rules)
        finally:
            self.stats.depart(self._clock(), self._config.capacity)
            if task is not None:
                self._handlers.discard(task)

    def _record(
        self,
        received_at: float,
        inputs: list[str],
        status: int,
        retry_after: float | None,
        request: web.Request | None = None,
        fields: dict[str, object] | None = None,
    ) -> None:
        if self._config.record_calls:
            self.calls.append(
                CallRecord(
                    received_at, tuple(inputs), status, retry_after,
                    path=request.path_qs if request is not None else "",
                    headers={k.lower(): v for k, v in (request.headers if request else {}).items()},
                    fields=fields or {},
                )
            )  # fmt: skip

    async def _serve_embeddings(
        self, request: web.Request, inputs: list[str], fields: dict[str, object]
    ) -> web.Response:
        config = self._config  # one consistent view for the whole call
        deployment = route_of(request, config.flavor_rules)
        body = await request.read()
        # Parsed once (counting a big call's tokens is most of the simulator's own CPU), but
        # a malformed body is refused only after the key and the rate limit, as providers do.
        parsed: EmbeddingRequest | None = None
        refusal: ApiError | None = None
        try:
            if len(body) > OFF_LOOP_BODY_BYTES:
                parsed = await self._off_loop(parse_request, body, config, deployment)
            else:
                parsed = parse_request(body, config, deployment)
            inputs.extend(parsed.inputs)  # what was asked, for the call log
        except ApiError as error:
            refusal = error
        if config.record_calls:
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
                fields.update((k, v) for k, v in orjson.loads(body).items() if k != "input")
        authenticate(config, request.headers)
        self._limits.check_rate()
        if parsed is None:
            assert refusal is not None
            raise refusal
        announced = self._limits.check_quotas(parsed.total_tokens)
        check_rejected_texts(config, parsed)
        if flaky_failure(config, parsed, self._flaky_failures):
            raise server_error()
        faults = decide_faults(config, len(parsed.inputs), self._rng)
        if faults.fail:
            raise server_error()
        if faults.hang:
            # Outside the capacity gate: a hung connection should not starve healthy calls.
            await self._sleep(config.hang_s)
        async with self._capacity:
            self.stats.enter()
            try:
                # The simulator's own work is part of the modelled latency, not added to it:
                # eight 2,048-input calls ending together were otherwise built one after
                # another on this one event loop (calls took 1.8 s where the model says 1.3).
                started = self._clock()
                vectors = None
                if self._vectors is not None:  # a real model: CPU-bound, off the loop
                    vectors = await asyncio.to_thread(
                        self._vectors.vectors, parsed.inputs, parsed.dimensions
                    )
                if len(parsed.inputs) > OFF_LOOP_INPUTS:
                    payload = await self._off_loop(_encoded_answer, parsed, faults.order, vectors)
                else:
                    payload = _encoded_answer(parsed, faults.order, vectors)
                spent = self._clock() - started
                await self._sleep(max(0.0, latency_s(config, parsed) - spent))
            finally:
                self.stats.leave()
        self.stats.record_served(parsed)
        response = web.Response(body=payload, content_type="application/json")
        response.headers.update(announced)
        return response

    async def _handle_models(self, request: web.Request) -> web.Response:
        try:
            authenticate(self._config, request.headers)
        except ApiError as error:
            return error_response(error, self._config.flavor_rules)
        return json_response(model_list(self._config))

    async def _handle_model(self, request: web.Request) -> web.Response:
        try:
            authenticate(self._config, request.headers)
            return json_response(find_model(request.match_info["model"], self._config))
        except ApiError as error:
            return error_response(error, self._config.flavor_rules)

    async def _handle_healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _handle_stats(self, request: web.Request) -> web.Response:
        self.batches.advance()  # batches ended since the last look count their lines
        return json_response(self.stats.to_json())

    async def _handle_reset_stats(self, request: web.Request) -> web.Response:
        self.reset_stats()
        return json_response(self.stats.to_json())

    async def _handle_get_faults(self, request: web.Request) -> web.Response:
        return json_response(self._config.to_json())

    async def _handle_set_faults(self, request: web.Request) -> web.Response:
        try:
            changes = orjson.loads(await request.read())
            if not isinstance(changes, dict):
                raise ValueError("body must be a JSON object of settings")
            config = self.set_faults(**changes)
        except (ValueError, TypeError) as error:  # orjson.JSONDecodeError is a ValueError
            error_body = invalid_request(str(error), param=None, code="invalid_value")
            return json_response(error_body.body(), status=error_body.status)
        return json_response(config.to_json())


# --------------------------------------------------------------------------- CLI


async def serve_forever(
    config: SimulatorConfig, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
) -> None:
    """Run the simulator until cancelled."""
    server = SimulatorServer(config)
    await server.start(host, port)
    if config.flavor == "azure":
        where = f"{server.root_url} (azure_endpoint; /openai/deployments/NAME/embeddings)"
    else:
        where = server.url
    log.info("embeddings simulator (%s flavor) listening on %s", config.flavor, where)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def _encoded_answer(
    parsed: EmbeddingRequest, order: Sequence[int], vectors: Sequence[list[float]] | None
) -> bytes:
    """The 200 body of a call, as bytes (on a worker thread for a big call)."""
    return orjson.dumps(build_response(parsed, order, vectors))
