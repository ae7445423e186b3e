"""The store writer's composition root (`embedstream sink`): the results topic into a store.

`build_store_writer` wires the consumer of its own group, the dead-letter writer, the store,
metrics, health and the ops server around
:class:`embedstream.kafka.consumption.store_feed.StoreFeed`;
`run_store_writer` adds the fail-fast broker and topic checks and the signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

from embedstream.engine.backend import BatchCall
from embedstream.engine.client import BatchingClient
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.engine.formats import framed_outputs, registry_client
from embedstream.engine.registry import RegistryClient
from embedstream.errors import ConfigError, EmbedStreamError
from embedstream.kafka.client.admin import require_topics
from embedstream.kafka.client.clients import (
    broker_probe,
    check_broker,
    connection_for,
    make_producer,
    make_store_consumer,
)
from embedstream.kafka.client.protocols import Consumer, Producer
from embedstream.kafka.client.topics import configured_topics, topic_settings
from embedstream.kafka.consumption.store_feed import RecordStore, StoreFeed
from embedstream.kafka.outputs.result_writer import DirectWriter, ResultWriter
from embedstream.ops.server import OpsServer, StoreReadiness
from embedstream.ops.store_metrics import StoreMetrics
from embedstream.settings import Settings
from embedstream.settings.rules import require_store
from embedstream.stores.base import SearchHit
from embedstream.stores.configured import store_config
from embedstream.stores.generations import StoredGeneration
from embedstream.stores.pgvector import GenerationMoved, PgVectorStore
from embedstream.wire.vectors import Vector, decode_base64

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 3.0
SEARCH_ATTEMPTS = 3  # a cutover between embedding the question and reading the rows: again


def require_store_model(settings: Settings) -> None:
    """The store writer knows the model of its vectors: no first result decides it."""
    if not settings.store_model:
        raise ConfigError(
            "store_model",
            "embedstream sink needs the model of the store's vectors (its first generation: "
            "the processors' model)",
        )


class StoreWriter:
    """A store feed with its health loop and ops server: what `embedstream sink` runs."""

    def __init__(
        self,
        settings: Settings,
        feed: StoreFeed,
        producer: Producer,
        metrics: StoreMetrics,
        registry: RegistryClient | None = None,
    ) -> None:
        self.settings = settings
        self._registry = registry  # reads framed results (a registry output_format)
        self.feed = feed
        self.metrics = metrics
        # Its /readyz asks this writer afresh on every request.
        self.ops_server = OpsServer(metrics, self.readiness) if settings.metrics_port else None
        self._producer = producer
        self._probe = broker_probe(producer)
        self.broker_reachable = True
        self._shown: set[tuple[str, int]] = set()

    @property
    def metrics_port(self) -> int | None:
        return self.ops_server.port if self.ops_server is not None else None

    def readiness(self) -> StoreReadiness:
        return StoreReadiness(
            joined_group=self.feed.joined.is_set(),
            broker_reachable=self.broker_reachable,
            store_problem=self.feed.store_problem,
        )

    def stop(self) -> None:
        self.feed.stop()

    async def run(self) -> None:
        if self.ops_server is not None:
            try:
                await self.ops_server.start(self.settings.metrics_host, self.settings.metrics_port)
            except BaseException:  # a port taken: the one-line error, no client left open
                await self.feed.close_unstarted()
                await self._producer.stop()
                raise
        await self._producer.start()
        health = asyncio.create_task(self._health())
        try:
            await self.feed.run()
        finally:
            health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await health
            await self._producer.stop()
            if self._registry is not None:
                await self._registry.close()
            if self.ops_server is not None:
                await self.ops_server.stop()

    async def _health(self) -> None:
        while True:
            self.sample()
            reachable = False
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._probe(), PROBE_TIMEOUT_S)
                reachable = True
            if reachable != self.broker_reachable:
                log.warning("broker %s", "reachable again" if reachable else "unreachable")
            self.broker_reachable = reachable
            await asyncio.sleep(HEALTH_INTERVAL_S)

    def sample(self) -> None:
        lag = self.feed.lag_by_partition()
        shown = {(tp.topic, tp.partition) for tp in lag}
        for tp, offsets in lag.items():
            self.metrics.set_lag(tp.topic, tp.partition, offsets)
        for topic, partition in self._shown - shown:
            self.metrics.forget_partition(topic, partition)
        self._shown = shown
        self.metrics.set_ready(self.readiness().ready)


def build_store_writer(
    settings: Settings,
    store: RecordStore | None = None,
    *,
    metrics: StoreMetrics | None = None,
    consumer: Consumer | None = None,
    producer: Producer | None = None,
) -> StoreWriter:
    """Every part of one store writer; unit tests pass the fakes of `embedstream.testing`."""
    metrics = metrics or StoreMetrics()
    names = configured_topics(settings)
    store = store or PgVectorStore(store_config(settings))
    producer = producer or make_producer(settings)
    # Results in a registry output_format (plain, chunks and final records alike) are framed.
    registry = None if settings.output_format == "json" else registry_client(settings)
    feed = StoreFeed(
        consumer or make_store_consumer(settings),
        store,
        ResultWriter(DirectWriter(producer, SYSTEM_CLOCK), names, SYSTEM_CLOCK),
        names.results,
        metrics,
        batch_max=settings.store_batch_max,
        framed=None if registry is None else framed_outputs(settings, registry),
    )
    return StoreWriter(settings, feed, producer, metrics, registry)


async def run_store_writer(settings: Settings, *, handle_signals: bool = True) -> StoreWriter:
    """Run until SIGINT/SIGTERM (or `writer.stop()`): the batch in hand is written and
    committed, then the process exits 0."""
    require_store(settings)
    require_store_model(settings)
    configured_topics(settings)
    await check_broker(settings)
    await require_topics(
        connection_for(settings), topic_settings(settings, ["results", "dead_letters"])
    )
    writer = build_store_writer(settings)
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _on_signal, writer, sig)
    log.info("embedstream sink starting: %s", settings.describe())
    try:
        await writer.run()
    finally:
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    log.info("embedstream sink stopped cleanly")
    return writer


def _on_signal(writer: StoreWriter, sig: signal.Signals) -> None:
    log.info("received %s: finishing the batch in hand, then exiting", sig.name)
    writer.stop()


async def init_store(settings: Settings) -> str:
    """`embedstream sink init`: create the tables now; returns what was done, in one line."""
    require_store_model(settings)
    dims = settings.store_dimensions
    if dims is None:
        raise ConfigError("store_dimensions", "sink init needs the vector size of the tables")
    assert settings.store_model is not None
    async with PgVectorStore(store_config(settings)) as store:
        active = await store.init(settings.store_model, dims)
    return (
        f"table {settings.store_schema}.{settings.store_table} ready: generation {active.id} "
        f"active ({active.said}), index {settings.store_index}"
    )


@dataclass(frozen=True, slots=True)
class OnlineLaneAddress:
    """An online lane (`embedstream serve`, or `run`'s) to embed questions through:
    http://host:port/v1, and the key its callers send."""

    url: str
    api_key: str | None = None


async def search_store(
    settings: Settings, question: str, k: int, online: OnlineLaneAddress | None = None
) -> list[SearchHit]:
    """`embedstream sink search`: embed the question with the active generation's model (and
    dimensions), then the k nearest searchable chunks of that same generation."""
    async with PgVectorStore(store_config(settings), create=False) as store:
        for _ in range(SEARCH_ATTEMPTS):
            active = store.active
            if active is None or active.size is None:
                raise EmbedStreamError(
                    f"table {settings.store_schema}.{settings.store_table} has no vectors yet; "
                    "run `embedstream sink` (or `embedstream sink init`) first"
                )
            floats = await embed_query(settings, question, active, online)
            try:
                return await store.search(floats, k, generation_id=active.id)
            except GenerationMoved:
                continue  # the store has just been cut over (or rolled back): embed again
        raise EmbedStreamError("the store's active generation kept changing; try again")


async def embed_query(
    settings: Settings,
    text: str,
    generation: StoredGeneration,
    online: OnlineLaneAddress | None = None,
) -> list[float]:
    """``text`` as a vector of ``generation``: its model, and its dimensions when it asked for
    some (a model's own size is not asked: not every provider takes ``dimensions``). Through
    an ``online`` lane when given (the question shares the processors' provider budget as
    its top lane), else with a client of its own on the configured provider."""
    dimensions = generation.generation.dimensions
    vector = await _embed(settings, text, generation.model, dimensions, online)
    floats = decode_base64(vector) if isinstance(vector, str) else vector
    if generation.size is not None and len(floats) != generation.size:
        raise EmbedStreamError(
            f"the provider gave {len(floats)} dimensions for model {generation.model!r}; "
            f"generation {generation.id} holds {generation.size}"
        )
    return floats


async def _embed(
    settings: Settings,
    text: str,
    model: str,
    dimensions: int | None,
    online: OnlineLaneAddress | None,
) -> Vector:
    if online is not None:
        lane = OpenAIEmbedder(
            base_url=online.url,
            api_key=online.api_key,
            timeout_s=settings.request_timeout_s,
            wire_format="float",
        )
        try:
            outcome = await lane.embed(BatchCall(model, [text], "float", dimensions))
        finally:
            await lane.close()
        return outcome.vectors[0]
    async with BatchingClient(settings=settings) as client:
        return await client.submit(
            text, model=model, dimensions=dimensions, encoding_format="float"
        )
