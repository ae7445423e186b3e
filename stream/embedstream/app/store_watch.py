"""A processor following its store's migrations: the composition of the dual-write and the
backfill lane (`core/migration.py`, `kafka/backfill/feed.py`).

With ``store_dsn`` set, a processor reads the store's registry of index generations at start
and every ``WATCH_INTERVAL_S`` after: while the store keeps two generations, every document
version and delete of the live stream is written for both; while one is being filled (a
``new`` one, `embedstream migrate start`), the backfill lane re-embeds the documents topic for
it: each document's latest version (the topic read ahead once, `kafka/backfill/read_ahead.py`),
asking the store before each poll's documents which it holds already (`stores/pgholdings.py`).
Nothing to restart: a migration started, cut over or cancelled is followed within seconds.
A store that cannot be read keeps the processor as it was (and says so in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from embedstream.app.batch_jobs import BatchJobs
from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import Intake
from embedstream.core.lanes import InputLane
from embedstream.core.migration import DualWrites, KeptGeneration, StoreGenerations
from embedstream.engine.schema_decoders import SchemaDecoders
from embedstream.errors import EmbedStreamError
from embedstream.kafka.backfill.feed import BackfillFeed, Backfills, SharedEngine, backfill_group
from embedstream.kafka.backfill.read_ahead import read_ahead
from embedstream.kafka.client.clients import connection_for, make_backfill_consumer
from embedstream.kafka.client.topics import TopicNames
from embedstream.kafka.consumption.admission import Admission
from embedstream.ops.migration_metrics import MigrationMetrics
from embedstream.settings import Settings
from embedstream.stores.configured import store_config
from embedstream.stores.generations import Registry
from embedstream.stores.pgholdings import GenerationHoldings
from embedstream.stores.pgvector import PgVectorStore

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 5.0  # how soon a processor follows `migrate start`, `cutover`, `cancel`
SAMPLE_S = 1.0  # the backfill's progress metrics


def store_generations(registry: Registry) -> StoreGenerations:
    """What the processors follow of a registry: every generation it keeps, the new one."""
    kept = tuple(
        KeptGeneration(g.generation, frozenset(i for i in (g.id, g.alias) if i is not None))
        for g in registry.generations
    )
    new = registry.in_state("new")
    planned: dict[str, int] = {}
    via = "sync"
    if new is not None and new.plan:
        planned = {k: int(v) for k, v in new.plan.items() if k in ("documents", "tokens")}
        via = "batch" if new.plan.get("via") == "batch" else "sync"
    return StoreGenerations(kept, None if new is None else new.generation, planned, via)


def registry_reader(settings: Settings) -> Callable[[], Awaitable[Registry]]:
    """Reads the store's registry as it is now, over one connection kept open."""
    store = PgVectorStore(store_config(settings), create=False)

    async def read() -> Registry:
        async with store.session.transaction("read the generations"):
            return await store.load()

    return read


class StoreWatch:
    """Keeps the dual-writes and the backfill in step with the store's generations."""

    def __init__(
        self,
        read: Callable[[], Awaitable[Registry]],
        dual_writes: DualWrites,
        backfills: Backfills | None,
        *,
        metrics: MigrationMetrics | None = None,
        interval_s: float | None = None,
    ) -> None:
        """``backfills``: None without a documents topic (a migration's backfill then has no
        source: said once)."""
        self._read = read
        self.dual_writes = dual_writes
        self.backfills = backfills
        self._metrics = metrics
        self._interval_s = WATCH_INTERVAL_S if interval_s is None else interval_s
        self._failing = False
        self._read_once = False
        self._unsourced: str | None = None

    def keeps(self, generation_id: str) -> bool:
        """The store keeps this index generation, as it was read last (a backfill's batch jobs
        of one it dropped are abandoned); True until it has been read once."""
        if not self._read_once:
            return True
        kept = self.dual_writes.generations.kept
        return any(generation_id in k.ids for k in kept)

    async def refresh(self) -> None:
        """Read the registry once and follow it."""
        try:
            generations = store_generations(await self._read())
        except (EmbedStreamError, OSError) as exc:
            if not self._failing:
                log.warning("cannot read the store's generations (%s); going on as before", exc)
            self._failing = True
            return
        if self._failing:
            log.info("the store's generations are readable again")
        self._failing = False
        self._read_once = True
        if generations != self.dual_writes.generations:
            ids = ", ".join(k.generation.id for k in generations.kept) or "none"
            log.info("the store keeps generations %s; filling %s", ids,
                     generations.filling.id if generations.filling else "none")  # fmt: skip
            self.dual_writes.follow(generations)
            if self._metrics is not None:
                planned = generations.planned
                self._metrics.set_plan(planned.get("documents", 0), planned.get("tokens", 0))
        filling = generations.filling
        if self.backfills is not None:
            await self.backfills.follow(filling, via_batch=generations.via == "batch")
        elif filling is not None and self._unsourced != filling.id:
            self._unsourced = filling.id
            log.warning(
                "generation %s is being filled but topic_documents is not set: no backfill "
                "(only the live stream's versions reach it)",
                filling.id,
            )

    async def run(self, stopping: asyncio.Event) -> None:
        """Follow the store until ``stopping``; then stop the backfill (what it read is
        finished and committed within drain_timeout_s, beside the processor's own drain)."""
        loop = asyncio.get_running_loop()
        next_read = loop.time() + self._interval_s
        try:
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), min(SAMPLE_S, self._interval_s))
                if stopping.is_set():
                    break
                if loop.time() >= next_read:
                    next_read = loop.time() + self._interval_s
                    await self.refresh()
                if self._metrics is not None and self.backfills is not None:
                    b = self.backfills
                    self._metrics.sample(b.lag, b.read, loop.time())
        finally:
            if self.backfills is not None:
                await self.backfills.close()


def store_watch(
    settings: Settings,
    names: TopicNames,
    dual_writes: DualWrites,
    engine: SharedEngine,
    intake_of: Callable[[IndexGeneration], Intake],
    decoders: SchemaDecoders | None,
    metrics: MigrationMetrics,
    batch: BatchJobs | None = None,
) -> StoreWatch:
    """A processor's watch of its store (``store_dsn``), with a backfill when
    ``topic_documents`` names its source; ``batch``: the processor's batch jobs (a migration
    started ``--via batch`` backfills through them)."""
    documents = names.documents
    if documents is None:
        return StoreWatch(registry_reader(settings), dual_writes, None, metrics=metrics)

    def feed_of(generation: IndexGeneration, via_batch: bool = False) -> BackfillFeed:
        group = backfill_group(settings.group_id, generation.id)
        admission = Admission(
            intake_of(generation), names, max_delay_ms=int(settings.retry_backoff_cap_ms),
            decoders=decoders, max_event_bytes=settings.max_event_bytes,
            max_document_bytes=settings.max_document_bytes, lane=InputLane.BACKFILL,
        )  # fmt: skip
        consumer = make_backfill_consumer(settings, group)
        holdings = GenerationHoldings(store_config(settings), generation.id)
        lane = None
        if via_batch and batch is not None:
            lane = batch.backfill_lane(generation, engine.clock)
        elif via_batch:
            log.error("generation %s was started --via batch, but this processor runs no batch "
                      "jobs (provider_profile %s): its backfill goes through sync calls",
                      generation.id, settings.provider_profile)  # fmt: skip
        connection, client_id = connection_for(settings), f"{settings.client_id}-read-ahead"
        return BackfillFeed(
            generation, consumer, documents, admission, engine, holdings=holdings,
            count_skipped=metrics.count_skipped,
            read_ahead=lambda: read_ahead(connection, documents, client_id=client_id),
            batch=lane,
        )  # fmt: skip

    backfills = Backfills(feed_of)
    return StoreWatch(registry_reader(settings), dual_writes, backfills, metrics=metrics)
