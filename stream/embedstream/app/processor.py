"""The composition root: builds every part of a processor and hands it over ready-made.

`build_service` is the one place that knows how the pieces fit, built part by part: the
outputs (`build_outputs`: the results writer, documents, changelog, outcomes), the engine
(batcher and batch-call path), the consumption (commits, rebalance handling, admission, the
processor), the store's watch, metrics, health and the ops server. `run_service` adds the
fail-fast broker and topic checks and signals.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embedstream.app.batch_jobs import BatchJobs, ProcessorParts, batch_wanted, build_batch_jobs
from embedstream.app.service import Service
from embedstream.core import batch_configured, configured
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
from embedstream.engine.schema_decoders import SchemaDecoders
from embedstream.errors import ConfigError
from embedstream.kafka.backfill.feed import BackfillDirect, Backfills, SharedEngine
from embedstream.kafka.batchjobs.writer import JobOutputsRouter
from embedstream.kafka.client.admin import require_topics
from embedstream.kafka.client.clients import (
    broker_probe,
    check_broker,
    connection_for,
    make_consumer,
    make_producer,
    make_transactional_producer,
)
from embedstream.kafka.client.protocols import Consumer, Producer, TransactionalProducer
from embedstream.kafka.client.topics import (
    BATCH_JOBS_KEY,
    TopicNames,
    configured_topics,
    topic_settings,
)
from embedstream.kafka.consumption.attribution import AttributedAdmission, Sources
from embedstream.kafka.consumption.commits import OffsetCommitter
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.consumption.fetcher import Fetcher
from embedstream.kafka.consumption.handoff import Handoff
from embedstream.kafka.consumption.processor_loop import Parts, Processor
from embedstream.kafka.outputs.changelog_writer import (
    ChunkChangelog,
    ChunkCountsLoader,
    StateReader,
    kafka_state_reader,
)
from embedstream.kafka.outputs.document_runs import DocumentFlow
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.partitions import Assignment
from embedstream.kafka.outputs.result_writer import DirectWriter, ResultWriter, Writer
from embedstream.kafka.outputs.transactions import PartitionTransactions
from embedstream.kafka.outputs.work import WorkItem
from embedstream.ops.collector import collector_for_throughput
from embedstream.ops.health import Health
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer
from embedstream.ops.task_stacks import log_task_stacks
from embedstream.ops.tracer import build_tracer
from embedstream.settings import Settings

if TYPE_CHECKING:
    from embedstream.app.store_watch import StoreWatch

log = logging.getLogger(__name__)

__all__ = ["Service", "build_service", "default_backend", "run_service"]


def default_backend(settings: Settings) -> EmbeddingBackend:
    return OpenAIEmbedder.from_settings(settings)


def _store_watch_of(settings: Settings) -> Callable[..., StoreWatch]:
    """`store_watch.store_watch`, imported only with ``store_dsn`` set: the store's driver is
    the pgvector extra, which a processor without a store does not need."""
    try:
        from embedstream.app.store_watch import store_watch
    except ImportError as exc:
        raise ConfigError(
            "store_dsn",
            f"is set but the PostgreSQL driver is not installed ({exc.name}): "
            "pip install 'embedstream[pgvector]'",
        ) from exc
    return store_watch


@dataclass(frozen=True, slots=True)
class Outputs:
    """What a processor writes with: the results writer over its producer (or, exactly-once,
    over each input partition's transaction), the documents' flow and chunk changelog, and
    the outcome writers every finished item goes through."""

    transactions: PartitionTransactions | None
    result_writer: ResultWriter
    changelog: ChunkChangelog | None
    documents: DocumentFlow
    dual_writes: DualWrites | None
    intake_of: Callable[[IndexGeneration], Intake]
    outcomes: KafkaOutcomes
    wants_batch: bool


def build_outputs(
    settings: Settings,
    names: TopicNames,
    producer: Producer,
    metrics: Metrics,
    clock: Clock,
    token_counter: TokenCounter,
    transactional_producer: Callable[[str], TransactionalProducer] | None,
    state_reader: StateReader | None,
) -> Outputs:
    transactions: PartitionTransactions | None = None
    writer: Writer = DirectWriter(producer, clock)
    if settings.delivery == "exactly_once":
        transactions = PartitionTransactions(
            settings.group_id,
            transactional_producer or (lambda tid: make_transactional_producer(settings, tid)),
        )
        writer = BackfillDirect(transactions, writer)
    # The bulk lanes' processor runs the batch jobs (ConfigError: a provider with none).
    wants_batch = batch_wanted(settings) and settings.input_lanes != "high"
    if wants_batch:  # a batch job's outputs go to the job (kafka/batchjobs/writer.py)
        exactly_once = settings.delivery == "exactly_once"
        writer = JobOutputsRouter(writer, DirectWriter(producer, clock), exactly_once)
    result_writer = ResultWriter(writer, names, clock)
    changelog = None
    if names.changelog is not None and names.changelog_state is not None:
        read = state_reader or kafka_state_reader(connection_for(settings), settings.client_id)
        changelog = ChunkChangelog(
            result_writer, names.changelog, ChunkCountsLoader(read, names.changelog_state)
        )
    limits = configured.provider_limits(settings)

    def intake_of(generation: IndexGeneration) -> Intake:
        return Intake(settings_of(settings, generation), limits, token_counter)

    # A migration's dual writes and backfill are the documents' work: a bulk processor's.
    dual_writes = (
        DualWrites(intake_of) if settings.store_dsn and settings.input_lanes != "high" else None
    )
    documents = DocumentFlow(
        result_writer, metrics, include_text=settings.include_chunk_text,
        generations=GenerationIds(chunking_rules(settings, limits), settings.model),
        changelog=changelog, dual_writes=dual_writes,
    )  # fmt: skip
    outcomes = KafkaOutcomes(result_writer, metrics, documents, clock)
    return Outputs(
        transactions,
        result_writer,
        changelog,
        documents,
        dual_writes,
        intake_of,
        outcomes,
        wants_batch,
    )


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
    of its own), built part by part: its outputs, its engine, its consumption, and (with
    `store_dsn`) its watch of the store. `consumer`, `producer` and `transactional_producer`
    (by transactional id, exactly-once) default to aiokafka clients for `settings`; unit
    tests pass the in-memory fakes of `embedstream.testing.kafka`. Every part reads time from
    `clock`. `state_reader` reads the chunk changelog's state topic (with `topic_changelog`)."""
    metrics = metrics or Metrics()
    metrics.batch.set_prices(batch_configured.prices(settings))  # the cost by price tier
    backend = backend or default_backend(settings)
    names = configured_topics(settings)  # ConfigError if a topic has two roles
    consumer = consumer or make_consumer(settings)
    producer = producer or make_producer(settings)
    out = build_outputs(
        settings, names, producer, metrics, clock, token_counter, transactional_producer,
        state_reader,
    )  # fmt: skip
    assignment = Assignment(names.lane_of)
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
        settings, backend, out.outcomes, clock=clock, observer=metrics, cache=cache,
        backlog=backlog, tracer=tracer, budget=budget,
    )  # fmt: skip
    batcher = engine.batcher
    waiting = WaitingRetries(batcher, clock)
    out.documents.bind(waiting.hold_or_submit)
    intake = Intake(settings, configured.provider_limits(settings), token_counter)
    registry = registry_client(settings) if uses_registry(settings) else None
    decoders = None if registry is None else schema_decoders(settings, registry)
    batch: BatchJobs | None = None
    if out.wants_batch:
        parts = ProcessorParts(
            settings, names, out.result_writer, out.outcomes, batcher, cache, intake, out.intake_of,
            decoders, producer, metrics, clock,
        )  # fmt: skip
        batch = build_batch_jobs(parts, lambda items: processor.submit(items))
    committer = OffsetCommitter(consumer, assignment.offsets(), out.transactions)
    handoff = Handoff(
        assignment, batcher, waiting, out.result_writer, committer, out.transactions,
        drain_timeout_s=settings.drain_timeout_s, consumer=consumer, clock=clock,
        chunk_counts=None if out.changelog is None else out.changelog.loader,
        batch_jobs=None if batch is None else batch.lane,
    )  # fmt: skip
    admission = AttributedAdmission(
        intake, names, max_delay_ms=int(settings.retry_backoff_cap_ms), decoders=decoders,
        max_event_bytes=settings.max_event_bytes, max_document_bytes=settings.max_document_bytes,
        sources=Sources(names, names.inputs), observer=metrics, tracer=tracer,
    )  # fmt: skip
    processor = Processor(
        Parts(
            settings=settings, topics=input_topics_of(settings, names), consumer=consumer,
            producer=producer, assignment=assignment,
            fetcher=Fetcher(consumer, assignment, settings), admission=admission,
            outcomes=out.outcomes, batcher=batcher, caller=engine.caller,
            governor=engine.governor, waiting=waiting, committer=committer, handoff=handoff,
            transactions=out.transactions, cache=cache, clock=clock, tracer=tracer,
            batch_lane=None if batch is None else batch.lane,
        )
    )  # fmt: skip
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
    if out.dual_writes is not None:
        watch = _watch(settings, names, out, processor, waiting, decoders, metrics, batch)
        if watch.backfills is not None:
            backfills.append(watch.backfills)
    health = Health(processor, metrics, broker_probe(producer), registry_outage=registry_outage)
    ops_server = OpsServer(metrics, health.readiness) if settings.metrics_port else None
    return Service(
        processor, health, ops_server, registry, result_schema, metrics, watch, batch=batch
    )


def _watch(
    settings: Settings,
    names: TopicNames,
    out: Outputs,
    processor: Processor,
    waiting: WaitingRetries,
    decoders: SchemaDecoders | None,
    metrics: Metrics,
    batch: BatchJobs | None,
) -> StoreWatch:
    """The processor's watch of its store's generations (dual writes, the backfill lane)."""
    assert out.dual_writes is not None
    store_watch = _store_watch_of(settings)
    shared = SharedEngine(
        processor.batcher, waiting, out.result_writer, out.documents, processor.submit,
        live_held=lambda: processor.held, provider_usable=lambda: processor.provider_ok,
        clock=processor.parts.clock, items_limit=settings.buffered_items_limit,
        max_poll=settings.max_poll_records, drain_timeout_s=settings.drain_timeout_s,
        commit_interval_s=settings.commit_interval_ms / 1000.0,
    )  # fmt: skip
    watch = store_watch(
        settings, names, out.dual_writes, shared, out.intake_of, decoders, metrics.migration,
        batch,
    )  # fmt: skip
    if batch is not None:  # a migration cancelled: its jobs are abandoned
        batch.watcher.keeps = watch.keeps
    return watch


def input_topics_of(settings: Settings, names: TopicNames) -> list[str]:
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
    batch_wanted(settings)  # as does asking for batch jobs of a provider that takes none
    batch_configured.prices(settings)  # and a token_prices that does not parse
    # Before anything is consumed: one line naming bootstrap_servers, or the missing topics.
    await check_broker(settings)
    await require_topics(connection_for(settings), _required_topics(settings))
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


def _required_topics(settings: Settings) -> dict[str, str]:
    """Every topic the processor reads or writes: the batch jobs topic when it runs jobs."""
    required = topic_settings(settings)
    if batch_wanted(settings):
        required.update(topic_settings(settings, [BATCH_JOBS_KEY]))
    return required


def _on_signal(service: Service, sig: signal.Signals) -> None:
    log.info(
        "received %s: finishing in-flight work, then exiting (again to stop at once)", sig.name
    )
    service.stop()
