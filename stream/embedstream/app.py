"""The composition root: builds every part of a processor and hands it over ready-made.

`build_service` is the one place that knows how the pieces fit: Kafka clients, the engine
(batcher and batch-call path), the outcome writers, commits, rebalance handling, metrics,
health and the ops server. `run_service` adds the fail-fast broker and topic checks and
signals.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from embedstream.app_service import Service
from embedstream.core import configured
from embedstream.core.clock import Clock
from embedstream.core.generations import GenerationIds, IndexGeneration
from embedstream.core.intake import Intake, chunking_rules, settings_of
from embedstream.core.lanes import Priority
from embedstream.core.migration import DualWrites
from embedstream.core.tokens import TokenCounter, estimate_tokens
from embedstream.core.tracing import Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.bounded import bounded
from embedstream.engine.build import Engine, build_budget, build_engine
from embedstream.engine.cache import build_cache, undersized_warning
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.engine.formats import registry_client, schema_decoders, uses_registry
from embedstream.engine.result_schema import ResultSchemaRegistration
from embedstream.errors import ConfigError
from embedstream.kafka.admin import require_topics
from embedstream.kafka.attribution import AttributedAdmission, Sources
from embedstream.kafka.backfill import BackfillDirect, Backfills, SharedEngine
from embedstream.kafka.changelog import (
    ChunkChangelog,
    ChunkCountsLoader,
    StateReader,
    kafka_state_reader,
)
from embedstream.kafka.clients import (
    broker_probe,
    check_broker,
    connection_for,
    make_consumer,
    make_producer,
    make_transactional_producer,
)
from embedstream.kafka.commits import OffsetCommitter
from embedstream.kafka.documents import DocumentFlow
from embedstream.kafka.fetcher import Fetcher
from embedstream.kafka.handoff import Handoff
from embedstream.kafka.outcomes import KafkaOutcomes
from embedstream.kafka.partitions import Assignment
from embedstream.kafka.processor import Parts, Processor
from embedstream.kafka.protocols import Consumer, Producer, TransactionalProducer
from embedstream.kafka.sink import DirectWriter, Sink, Writer
from embedstream.kafka.topics import TopicNames, configured_topics, topic_settings
from embedstream.kafka.transactions import PartitionTransactions
from embedstream.kafka.waiting import WaitingRetries
from embedstream.kafka.work import WorkItem
from embedstream.ops.collector import collector_for_throughput
from embedstream.ops.health import Health
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer
from embedstream.ops.task_stacks import log_task_stacks
from embedstream.ops.tracer import build_tracer
from embedstream.settings import Settings

if TYPE_CHECKING:
    from embedstream.app_backfill import StoreWatch

log = logging.getLogger(__name__)

__all__ = ["Service", "build_service", "default_backend", "run_service"]


def default_backend(settings: Settings) -> EmbeddingBackend:
    return OpenAIEmbedder.from_settings(settings)


def _store_watch_of(settings: Settings) -> Callable[..., StoreWatch]:
    """`app_backfill.store_watch`, imported only with ``store_dsn`` set: the store's driver is
    the pgvector extra, which a processor without a store does not need."""
    try:
        from embedstream.app_backfill import store_watch
    except ImportError as exc:
        raise ConfigError(
            "store_dsn",
            f"is set but the PostgreSQL driver is not installed ({exc.name}): "
            "pip install 'embedstream[pgvector]'",
        ) from exc
    return store_watch


def build_service(
    settings: Settings,
    backend: EmbeddingBackend | None = None,
    *,
    metrics: Metrics | None = None,
    token_counter: TokenCounter = estimate_tokens,
    consumer: Consumer | None = None,
    producer: Producer | None = None,
    transactional_producer: Callable[[str], TransactionalProducer] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    tracer: Tracer | None = None,
    state_reader: StateReader | None = None,
) -> Service:
    """Every part of one processor (the Kafka lanes; the online lane is `serve`'s, a process
    of its own). `consumer`, `producer` and `transactional_producer` (by transactional id,
    exactly-once) default to aiokafka clients for `settings`; unit tests pass the in-memory
    fakes of `embedstream.testing.kafka`. Every part reads time from `clock`. `state_reader`
    reads the chunk changelog's state topic (with `topic_changelog`)."""
    metrics = metrics or Metrics()
    backend = backend or default_backend(settings)
    names = configured_topics(settings)  # ConfigError if a topic has two roles
    inputs = _inputs(settings, names)
    consumer = consumer or make_consumer(settings)
    producer = producer or make_producer(settings)
    assignment = Assignment(names.lane_of)
    transactions: PartitionTransactions | None = None
    writer: Writer = DirectWriter(producer, clock)
    if settings.delivery == "exactly_once":
        transactions = PartitionTransactions(
            settings.group_id,
            transactional_producer or (lambda tid: make_transactional_producer(settings, tid)),
        )
        writer = BackfillDirect(transactions, writer)
    sink = Sink(writer, names, clock)
    changelog = None
    if names.changelog is not None and names.changelog_state is not None:
        read = state_reader or kafka_state_reader(connection_for(settings), settings.client_id)
        loader = ChunkCountsLoader(read, names.changelog_state)
        changelog = ChunkChangelog(sink, names.changelog, loader)
    limits = configured.provider_limits(settings)
    generations = GenerationIds(chunking_rules(settings, limits), settings.model)

    def intake_of(generation: IndexGeneration) -> Intake:
        return Intake(settings_of(settings, generation), limits, token_counter)

    # A migration's dual writes and backfill are the documents' work: a bulk processor's.
    dual_writes = (
        DualWrites(intake_of) if settings.store_dsn and settings.input_lanes != "high" else None
    )
    documents = DocumentFlow(
        sink,
        metrics,
        include_text=settings.include_chunk_text,
        generations=generations,
        changelog=changelog,
        dual_writes=dual_writes,
    )
    outcomes = KafkaOutcomes(sink, metrics, documents, clock)
    cache = build_cache(settings, metrics)
    if (warning := undersized_warning(settings)) is not None:
        log.warning("%s", warning)
    tracer = tracer or build_tracer(settings)  # tests pass one on an in-memory exporter
    backfills: list[Backfills] = []  # (made once the engine is)

    def backlog(lane: Priority) -> int:
        if lane is Priority.BACKFILL:
            return sum(b.lag for b in backfills)
        return assignment.lag_of(lane)

    budget = build_budget(settings, clock, role="processor", observer=metrics.budget)
    engine: Engine[WorkItem] = build_engine(
        settings, backend, outcomes, clock=clock, observer=metrics, cache=cache,
        backlog=backlog, tracer=tracer, budget=budget,
    )  # fmt: skip
    batcher = engine.batcher
    waiting = WaitingRetries(batcher, clock)
    documents.bind(waiting.hold_or_submit)
    committer = OffsetCommitter(consumer, assignment.offsets(), transactions)
    handoff = Handoff(
        assignment, batcher, waiting, sink, committer, transactions,
        drain_timeout_s=settings.drain_timeout_s, consumer=consumer, clock=clock,
        chunk_counts=None if changelog is None else changelog.loader,
    )  # fmt: skip
    intake = Intake(settings, limits, token_counter)
    registry = registry_client(settings) if uses_registry(settings) else None
    decoders = None if registry is None else schema_decoders(settings, registry)
    admission = AttributedAdmission(
        intake, names, max_delay_ms=int(settings.retry_backoff_cap_ms), decoders=decoders,
        max_event_bytes=settings.max_event_bytes, max_document_bytes=settings.max_document_bytes,
        sources=Sources(names, names.inputs), observer=metrics, tracer=tracer,
    )  # fmt: skip
    processor = Processor(
        Parts(
            settings=settings,
            topics=inputs,
            consumer=consumer,
            producer=producer,
            assignment=assignment,
            fetcher=Fetcher(consumer, assignment, settings),
            admission=admission,
            outcomes=outcomes,
            batcher=batcher,
            caller=engine.caller,
            governor=engine.governor,
            waiting=waiting,
            committer=committer,
            handoff=handoff,
            transactions=transactions,
            cache=cache,
            clock=clock,
            tracer=tracer,
        )
    )
    result_schema = (
        None
        if registry is None or settings.output_format == "json"
        else ResultSchemaRegistration(
            settings, registry, names.results, changelog_topic=names.changelog
        )
    )

    def registry_outage() -> Exception | None:
        if result_schema is not None and result_schema.outage is not None:
            return result_schema.outage
        return None if decoders is None else decoders.outage

    watch = None
    if dual_writes is not None:
        store_watch = _store_watch_of(settings)
        shared = SharedEngine(
            batcher, waiting, sink, documents, processor.submit,
            live_held=lambda: processor.held, provider_usable=lambda: processor.provider_ok,
            clock=clock, items_limit=settings.buffered_items_limit,
            max_poll=settings.max_poll_records, drain_timeout_s=settings.drain_timeout_s,
            commit_interval_s=settings.commit_interval_ms / 1000.0,
        )  # fmt: skip
        watch = store_watch(
            settings, names, dual_writes, shared, intake_of, decoders, metrics.migration
        )
        if watch.backfills is not None:
            backfills.append(watch.backfills)
    health = Health(processor, metrics, broker_probe(producer), registry_outage=registry_outage)
    ops_server = OpsServer(metrics, health.readiness) if settings.metrics_port else None
    return Service(processor, health, ops_server, registry, result_schema, metrics, watch)


def _inputs(settings: Settings, names: TopicNames) -> list[str]:
    """The input topics of ``settings.input_lanes``."""
    if settings.input_lanes == "high":
        return list(names.high)
    if settings.input_lanes == "bulk":
        return [topic for topic in names.inputs if topic not in names.high]
    return list(names.inputs)


async def run_service(
    settings: Settings,
    backend: EmbeddingBackend | None = None,
    *,
    handle_signals: bool = True,
    started: asyncio.Event | None = None,
) -> Service:
    """Run one group member until SIGINT/SIGTERM (or `service.stop()`), then drain and exit.

    A second signal stops the drain at once; unfinished work is not committed (re-read later).
    """
    configured_topics(settings)  # a topic setting at fault fails before any connection
    # Before anything is consumed: one line naming bootstrap_servers, or the missing topics.
    await check_broker(settings)
    await require_topics(connection_for(settings), topic_settings(settings))
    backend = backend or default_backend(settings)
    service = build_service(settings, backend)
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _on_signal, service, sig)
        loop.add_signal_handler(signal.SIGUSR1, log_task_stacks)  # where is it waiting?
    log.info("embedstream starting: %s", settings.describe())
    if started is not None:
        started.set()
    try:
        with collector_for_throughput():  # the process is the processor's (ops/collector.py)
            await service.run()
    finally:
        closing_s = service.processor.closing.step_s()
        await bounded(backend.close(), closing_s, "the provider client's close")
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
    log.info("embedstream stopped cleanly")
    return service


def _on_signal(service: Service, sig: signal.Signals) -> None:
    log.info(
        "received %s: finishing in-flight work, then exiting (again to stop at once)", sig.name
    )
    service.stop()
