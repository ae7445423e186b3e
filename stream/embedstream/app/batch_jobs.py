"""A processor's batch jobs (`kafka/batchjobs/`), composed: the lane that routes work to jobs
(with ``batch_topics`` or ``batch_after_s``), a backfill's lane (a migration started
``--via batch``), and the watcher that submits the jobs, polls them and writes their outcomes
through the processor's own engine and outcomes.

Built when the settings ask for batch jobs, or when the processor follows a store whose
migrations may go through them (``store_dsn`` with a provider that takes batch jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from embedstream.core import batch_configured, configured
from embedstream.core.batch_routing import BatchRouting
from embedstream.core.batch_terms import takes_batch_jobs
from embedstream.core.chunker import ChunkingRules
from embedstream.core.clock import Clock
from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import Intake
from embedstream.core.lanes import BucketKey, InputLane, Pending, Priority
from embedstream.core.policy import FlushReason
from embedstream.engine.batch_api import BatchApi, BatchApiTarget
from embedstream.engine.batcher import Batcher
from embedstream.engine.bounded import bounded
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.schema_decoders import SchemaDecoders
from embedstream.errors import ConfigError
from embedstream.kafka.batchjobs.former import JobFormer
from embedstream.kafka.batchjobs.inputs import kafka_records
from embedstream.kafka.batchjobs.job_file import LineBodies
from embedstream.kafka.batchjobs.lane import BatchLane
from embedstream.kafka.batchjobs.records import JobsReader
from embedstream.kafka.batchjobs.replay import ReplayParts
from embedstream.kafka.batchjobs.steps import JobSteps, StepParts
from embedstream.kafka.batchjobs.watcher import JobWatcher
from embedstream.kafka.batchjobs.writer import JobCommits
from embedstream.kafka.client.clients import (
    connection_for,
    consumer_for,
    make_transactional_producer,
)
from embedstream.kafka.client.protocols import Producer, TransactionalProducer
from embedstream.kafka.client.topics import TopicNames, configured_topics
from embedstream.kafka.consumption.admission import Admission
from embedstream.kafka.outputs.changelog_writer import kafka_state_reader
from embedstream.kafka.outputs.document_runs import DocumentFlow
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.result_writer import DirectWriter, ResultWriter
from embedstream.kafka.outputs.work import WorkItem
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings
from embedstream.wire.batch_jobs import JobStream

log = logging.getLogger(__name__)

WATCHER_STOP_S = 2.0  # a job step still running at a stop: cancelled after this


def batch_wanted(settings: Settings) -> bool:
    """The processor runs batch jobs: asked for, or a store's migration may ask. ConfigError
    for a provider without them, or a batch_topics entry that is not a low request topic."""
    routing = batch_configured.batch_routing(settings)
    low = configured_topics(settings).low
    for topic in sorted(routing.topics):
        if topic not in low:
            raise ConfigError(
                "batch_topics",
                f"lists {topic}, which is not a low-lane request topic ({', '.join(low)}): "
                "a documents topic goes through batch jobs by a migration (--via batch)",
            )
    store = settings.store_dsn is not None and takes_batch_jobs(
        settings.provider_profile, settings.generic_batch_api
    )
    return routing.enabled or store


def jobs_group(settings: Settings) -> str:
    return f"{settings.group_id}.batchjobs"


def generation_doc(generation: IndexGeneration) -> dict[str, object]:
    rules = generation.chunking
    return {"id": generation.id, "model": generation.model, "dimensions": generation.dimensions,
            "max_tokens": rules.max_tokens, "overlap_tokens": rules.overlap_tokens,
            "min_tokens": rules.min_tokens}  # fmt: skip


def generation_of(doc: dict[str, object]) -> IndexGeneration:
    dims = doc.get("dimensions")
    rules = ChunkingRules(int(str(doc["max_tokens"])), int(str(doc["overlap_tokens"])),
                          int(str(doc["min_tokens"])))  # fmt: skip
    return IndexGeneration(str(doc["model"]), None if dims is None else int(str(dims)), rules)


@dataclass(frozen=True, slots=True)
class ProcessorParts:
    """What the batch jobs take of the processor being built."""

    settings: Settings
    names: TopicNames
    result_writer: ResultWriter
    outcomes: KafkaOutcomes
    batcher: Batcher[WorkItem]
    cache: EmbeddingCache | None
    intake: Intake
    intake_of: Callable[[IndexGeneration], Intake]
    decoders: SchemaDecoders | None
    producer: Producer
    metrics: Metrics
    clock: Clock


@dataclass
class BatchJobs:
    """The processor's batch lane, its backfills' lanes, and its watcher."""

    routing: BatchRouting
    former: JobFormer
    reader: JobsReader
    watcher: JobWatcher
    api: BatchApi
    lane: BatchLane | None  # the low lane's (None: no low work goes to jobs)

    def backfill_lane(self, generation: IndexGeneration, clock: Clock) -> BatchLane:
        """A migration's backfill, batched whole (started ``--via batch``)."""
        return BatchLane(self.former, self.reader, self.routing, clock,
                         lane=InputLane.BACKFILL, generation=generation_doc(generation),
                         whole_backfill=True, counter=None)  # fmt: skip

    async def run(self, stopping: asyncio.Event, started: asyncio.Event) -> None:
        """The watcher, from the processor's clients' start until its stop."""
        ready = asyncio.ensure_future(started.wait())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({ready, stop}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if stopping.is_set():
            stop.cancel()
            await self.api.close()
            return
        task = asyncio.create_task(self.watcher.run())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            self.watcher.stop()
            if not await bounded(task, WATCHER_STOP_S, "the batch jobs watcher's stop"):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await self.api.close()


def build_batch_jobs(
    p: ProcessorParts, submit: Callable[[list[WorkItem]], Awaitable[None]]
) -> BatchJobs:
    """``submit``: the processor's entry to its engine (the cache, then the batcher)."""
    settings, names, clock = p.settings, p.names, p.clock
    assert names.batch_jobs is not None
    routing = batch_configured.batch_routing(settings)
    limits = configured.provider_limits(settings)
    kafka = connection_for(settings)
    topic = names.batch_jobs
    group = settings.group_id
    reader = JobsReader(kafka_state_reader(kafka, settings.client_id), topic, group)
    direct = DirectWriter(p.producer, clock)
    former = JobFormer(
        p.result_writer, topic, group, batch_configured.job_limits(settings), clock, direct
    )
    lane = None
    if routing.topics or routing.after_s is not None:
        waiting = lambda: p.batcher.buffered_in(Priority.LOW)  # noqa: E731
        round_of_calls = settings.max_concurrency * configured.batch_limits(settings).max_items
        lane = BatchLane(former, reader, routing, clock, sync_waiting=waiting,
                         counter=p.metrics.batch, warmup_items=round_of_calls)  # fmt: skip
        _follow_pace(p.batcher, lane)
    api = BatchApi(BatchApiTarget.from_settings(settings), settings.request_timeout_s)
    plain: dict[str, Admission] = {}

    def admission_of(stream: JobStream) -> Admission:
        key = stream.key()
        if key not in plain:
            generation = stream.generation
            backfill = generation is not None
            intake = p.intake if generation is None else p.intake_of(generation_of(generation))
            plain[key] = Admission(
                intake, names, max_delay_ms=int(settings.retry_backoff_cap_ms),
                decoders=p.decoders, max_event_bytes=settings.max_event_bytes,
                max_document_bytes=settings.max_document_bytes,
                lane=InputLane.BACKFILL if backfill else None,
            )  # fmt: skip
        return plain[key]

    def documents_of(resubmit: Callable[[WorkItem], None]) -> DocumentFlow:
        flow = DocumentFlow(p.result_writer, p.metrics, include_text=settings.include_chunk_text,
                            generations=p.outcomes.documents.generations)  # fmt: skip
        flow.bind(resubmit)
        return flow

    read_records = kafka_records(kafka, settings.client_id)
    replay = ReplayParts(
        p.outcomes, documents_of, submit, p.cache, read_records, clock, settings.max_attempts,
        configured.backoff(settings), _LineCounts(p.metrics),
    )  # fmt: skip

    def transactional(q: int) -> TransactionalProducer:
        return make_transactional_producer(settings, f"embedstream-{group}-batchjobs-{q}")

    exactly_once = settings.delivery == "exactly_once"
    commits = JobCommits(direct, transactional if exactly_once else None)
    azure = settings.provider_profile == "azure"
    bodies = LineBodies(limits.wire_format, settings.extra_body_map,
                        settings.azure_deployment if azure else None)  # fmt: skip
    step_parts = StepParts(
        api, commits, topic, group, read_records, admission_of, bodies, p.cache, replay, clock,
        batch_configured.refusal_backoff(settings), p.metrics.batch,
    )  # fmt: skip
    steps = JobSteps(step_parts)
    consumer = consumer_for(
        kafka, group_id=jobs_group(settings), client_id=f"{settings.client_id}-batch-jobs",
        enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
    )  # fmt: skip
    watcher = JobWatcher(
        consumer, topic, steps, commits, clock, poll_s=settings.batch_poll_s,
        form_s=settings.batch_form_s, enqueued_limit=settings.batch_enqueued_tokens or None,
        gauges=p.metrics.batch, group=group,
    )  # fmt: skip
    return BatchJobs(routing, former, reader, watcher, api, lane)


def _follow_pace(batcher: Batcher[WorkItem], lane: BatchLane) -> None:
    """The low lane's sync pace: every call the batcher cuts (its `on_flush` observer)."""
    before = batcher.on_flush

    def on_flush(
        key: BucketKey, items: list[Pending[WorkItem]], reason: FlushReason, now: float
    ) -> None:
        if before is not None:
            before(key, items, reason, now)
        lane.sent(key.priority, len(items))

    batcher.on_flush = on_flush


class _LineCounts:
    """What a job's lines came to, on the processor's metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def count_lines(self, outcome: str, count: int) -> None:
        self._metrics.batch.count_lines(outcome, count)

    def count_retry(self, reason: str) -> None:
        self._metrics.count_retry(reason)

    def count_dead_letter(self, reason: str) -> None:
        self._metrics.count_dead_letter(reason)
