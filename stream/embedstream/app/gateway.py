"""The composition root of `embedstream serve`: the online lane in front of an engine of its
own, with no Kafka at all. A batching, caching gateway to any OpenAI-compatible provider:
its callers' texts are batched together, answered from the cache where it knows them, and
sent within the provider's limits and the budget of the settings.

It serves while it can reach the provider, whatever a broker is doing; SIGTERM stops it
accepting, answers what is in flight (within `drain_timeout_s`), then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

from embedstream.core.clock import Clock
from embedstream.core.tokens import TokenCounter, estimate_tokens
from embedstream.core.tracing import Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.build import Engine, build_budget, build_engine
from embedstream.engine.cache import build_cache
from embedstream.engine.callers import CallerIntake, CallerRequest, Callers
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.online.server import OnlineServer, build_online_server
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer
from embedstream.ops.task_stacks import log_task_stacks
from embedstream.ops.tracer import build_tracer
from embedstream.settings import Settings, validate_online

log = logging.getLogger(__name__)

DEFAULT_PORT = 8080  # `serve` with http_port unset (0)


@dataclass(frozen=True, slots=True)
class GatewayReadiness:
    """`serve`'s /readyz on the ops port: the provider is all it needs."""

    provider_usable: bool

    @property
    def ready(self) -> bool:
        return self.provider_usable

    def checks(self) -> dict[str, bool]:
        return {"provider_usable": self.provider_usable}

    def reasons(self) -> list[str]:
        return [] if self.provider_usable else ["provider_usable"]

    def messages(self) -> list[str]:
        return [] if self.provider_usable else ["provider unusable"]

    def details(self) -> dict[str, str]:
        return {}


class Gateway:
    """The engine, its online listener and the ops server, run together until stopped."""

    def __init__(
        self,
        settings: Settings,
        backend: EmbeddingBackend | None = None,
        *,
        metrics: Metrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
        token_counter: TokenCounter = estimate_tokens,
        port: int | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """`port`: where to listen instead of http_port (0: a free one, as tests want);
        `tracer`: instead of the one the settings build (tests: an in-memory exporter)."""
        self.settings = settings
        self.port = settings.http_port or DEFAULT_PORT if port is None else port
        validate_online(settings, self.port)
        self.metrics = metrics or Metrics()
        self._backend = backend or OpenAIEmbedder.from_settings(settings)
        self._cache = build_cache(settings, self.metrics)
        callers = Callers()
        self._tracer = tracer or build_tracer(settings)
        budget = build_budget(settings, clock, role="gateway", observer=self.metrics.budget)
        self._engine: Engine[CallerRequest] = build_engine(
            settings, self._backend, callers, clock=clock, observer=self.metrics,
            cache=self._cache, keep=_still_awaited, tracer=self._tracer, budget=budget,
        )  # fmt: skip
        callers.attach(self._engine.batcher)
        self._callers = callers
        self.online: OnlineServer = build_online_server(
            settings, CallerIntake(self._engine.batcher, self._cache), self._engine.governor,
            self._engine.batcher, self._engine.cost, clock=clock, token_counter=token_counter,
            observer=self.metrics.online, tracer=self._tracer,
        )  # fmt: skip
        governor = self._engine.governor
        self.ops_server = (
            OpsServer(self.metrics, lambda: GatewayReadiness(governor.provider_usable))
            if settings.metrics_port
            else None
        )
        self._stopping = asyncio.Event()
        self._abort = asyncio.Event()  # a second stop: no more draining

    def stop(self) -> None:
        if self._stopping.is_set():
            self._abort.set()
        self._stopping.set()

    async def run(self, started: asyncio.Event | None = None) -> None:
        s = self.settings
        batcher = self._engine.batcher
        runner = asyncio.create_task(batcher.run())
        try:
            if self.ops_server is not None:
                await self.ops_server.start(s.metrics_host, s.metrics_port)
            await self.online.start(s.http_host, self.port)
            if started is not None:
                started.set()
            await self._stopping.wait()
            await self.online.stop_accepting()
            batcher.drain()
            abort = asyncio.ensure_future(self._abort.wait())
            await asyncio.wait(
                {runner, abort}, timeout=s.drain_timeout_s, return_when="FIRST_COMPLETED"
            )
            abort.cancel()
            if not runner.done():
                log.warning("drain cut short: failing the requests still waiting")
                self._engine.caller.abandon_holds()
                self._callers.give_up_waiting()
                self._callers.abandoned(batcher.abandon())
        finally:
            await self.online.stop()
            if not runner.done():
                runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
            if self.ops_server is not None:
                await self.ops_server.stop()
            if self._cache is not None:
                await self._cache.close()
            await self._backend.close()
            await asyncio.to_thread(self._tracer.close)


async def run_gateway(settings: Settings, *, handle_signals: bool = True) -> None:
    """`embedstream serve`: until SIGINT/SIGTERM (a second one stops at once)."""
    gateway = Gateway(settings)
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _on_signal, gateway, sig)
        loop.add_signal_handler(signal.SIGUSR1, log_task_stacks)
    log.info("embedstream serve starting: %s", settings.describe())
    try:
        await gateway.run()
    finally:
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
    log.info("embedstream serve stopped cleanly")


def _on_signal(gateway: Gateway, sig: signal.Signals) -> None:
    log.info("received %s: answering the requests in flight, then exiting", sig.name)
    gateway.stop()


def _still_awaited(request: CallerRequest) -> bool:
    return not request.future.done()
