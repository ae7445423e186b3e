"""Kafka end to end: one processor, built by `embedstream.app.processor.build_service` in this
process, between a broker and the provider under test.

- **backlog**: N events published to the 4 partitions of the low-priority topic before the
  processor starts, drained from its assignment to the last result acknowledged; bound X_phys.
- **Poisson**: events published at Poisson arrival times (fixed in advance) while a reader
  follows the results topic; latency runs from each event's *scheduled* publication to its
  result arriving at the reader, so a publisher or processor that falls behind pays for it.

The broker is the embedded one (Tansu, from the `embedded` extra) unless `--bootstrap` names
an Apache Kafka cluster. Every scenario uses topics of its own, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import orjson

from embedstream.kafka.client.admin import (
    TopicNames,
    TopicSpec,
    create_topics,
    delete_topics,
    load_topic_specs,
    topic_names,
)
from embedstream.kafka.client.clients import (
    connection_for,
    make_reader,
    partitions_of,
    producer_for,
)
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, validate
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.figures import Row, latency_percentiles
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.running import running_processor as running_processor
from embedstream.tools.bench.scenarios import GRACE_S, summary
from embedstream.tools.bench.timeline import (
    Timeline,
)
from embedstream.tools.bench.workload import make_texts, poisson_arrivals

PUBLISH_CHUNK = 5000
WAVE_S = 0.002  # the Poisson publisher wakes at least this often


@dataclass(frozen=True)
class KafkaBroker:
    bootstrap: str
    embedded: bool

    @property
    def name(self) -> str:
        return "embedded broker" if self.embedded else f"Kafka at {self.bootstrap}"

    def settings(self, base: Settings, prefix: str) -> Settings:
        """``base`` pointed at this broker, with topics and group of its own: topics named by
        a --config file are never used (the bench creates and deletes its topics)."""
        settings = dataclasses.replace(
            base,
            bootstrap_servers=self.bootstrap,
            topic_prefix=prefix,
            topic_requests_high=None,
            topic_requests_low=None,
            topic_retry=None,
            topic_results=None,
            topic_dlq=None,
            group_id=prefix + "group",
            metrics_port=0,
            heartbeat_interval_ms=1000,
        )
        if self.embedded:
            # The embedded broker holds each fetch for fetch_max_wait_ms and each join for
            # about half the session timeout: keep both short (as the demo does).
            settings = dataclasses.replace(settings, fetch_max_wait_ms=10, session_timeout_ms=6000)
        validate(settings)
        return settings


def unique_prefix(scenario: str) -> str:
    return f"bench.{uuid.uuid4().hex[:8]}.{scenario}."


@contextlib.asynccontextmanager
async def scenario_topics(
    settings: Settings, specs: Sequence[TopicSpec] | None = None
) -> AsyncIterator[TopicNames]:
    """The scenario's topics (the packaged layout unless ``specs``), deleted afterwards."""
    specs = list(specs or load_topic_specs(settings.topic_prefix))
    await create_topics(connection_for(settings), specs)
    try:
        yield topic_names(settings.topic_prefix)
    finally:
        with contextlib.suppress(Exception):  # best effort: the run's figures are what matter
            await delete_topics(connection_for(settings), [spec.name for spec in specs])


async def publish(settings: Settings, topic: str, texts: Sequence[str], id_prefix: str) -> None:
    """Every text as a request event, in big producer batches, all acknowledged."""
    producer = producer_for(connection_for(settings), linger_ms=20, max_batch_size=1_048_576)
    await producer.start()
    try:
        for start in range(0, len(texts), PUBLISH_CHUNK):
            sends = []
            for i in range(start, min(start + PUBLISH_CHUNK, len(texts))):
                key = f"{id_prefix}{i}"
                value = orjson.dumps({"id": key, "text": texts[i]})
                sends.append(await producer.send(topic, value, key=key.encode()))
            await asyncio.gather(*sends)
    finally:
        await producer.stop()


def results_total(metrics: Metrics) -> float:
    return metrics.results_counted("high", "low")


async def kafka_backlog(ctx: BenchContext, broker: KafkaBroker, items: int) -> ScenarioResult:
    settings = broker.settings(ctx.settings, unique_prefix("backlog"))
    texts = make_texts(items, tokens=ctx.tokens, seed=ctx.seed)
    async with scenario_topics(settings) as names:
        ctx.progress.begin("kafka publish", None, "events")
        started = time.perf_counter()
        await publish(settings, names.requests_low, texts, "backlog-")
        ctx.progress.end(f"{items:,} events in {time.perf_counter() - started:.1f} s")
        backend = TimedBackend(ctx.embedder(settings))
        metrics = Metrics()
        cpu = CpuMeter(ctx.provider_cpu())
        await ctx.reset_provider_stats()

        def done() -> float:
            return results_total(metrics)

        async with (
            reporting(ctx.progress, f"kafka backlog {items:,}", items, "items", done),
            running_processor(settings, backend, metrics),
        ):
            backend.restart()  # the drain starts with the assignment
            cpu.start()
            start = time.perf_counter()
            deadline = start + GRACE_S + items / 500.0
            # The count is a Prometheus counter: watch it as an outside observer would.
            while done() < items and time.perf_counter() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            seconds = time.perf_counter() - start
            cpu.stop()
    finished = int(done())
    bound = ctx.model.physical_bound(ctx.tokens) if ctx.model else None
    row = Row(
        scenario=f"kafka backlog {items:,}",
        kind="kafka-backlog",
        items=finished,
        seconds=seconds,
        bound_per_s=bound,
        latency=None,
        calls=backend.calls,
        inputs=backend.inputs,
        client_cpu_s=cpu.client_s,
        provider_cpu_s=cpu.provider_s,
        failed=items - finished,
        note=f"{broker.name}, 4 partitions, one processor; assignment to last result",
    )
    ctx.progress.end(summary(row))
    return ScenarioResult(row, backend.timeline(), backend.sizes_and_latencies_ms())


@dataclass(frozen=True)
class PoissonVariant:
    """One arm of the Kafka Poisson A/B: settings changed, the results producer's linger."""

    label: str = ""
    overrides: tuple[tuple[str, object], ...] = ()
    result_linger_ms: int | None = None


async def kafka_poisson(
    ctx: BenchContext,
    broker: KafkaBroker,
    rate: float,
    seconds: float,
    *,
    variant: PoissonVariant = PoissonVariant(),
    timeline: Timeline | None = None,
) -> ScenarioResult:
    settings = broker.settings(ctx.settings, unique_prefix("poisson"))
    if variant.overrides:
        settings = dataclasses.replace(settings, **dict(variant.overrides))  # type: ignore[arg-type]
        validate(settings)
    arrivals = poisson_arrivals(rate, seconds, seed=ctx.seed)
    texts = make_texts(len(arrivals), tokens=ctx.tokens, seed=ctx.seed)
    warm_up = [f"warm-up {k}" for k in range(2 * settings.max_concurrency)]
    backend = TimedBackend(ctx.embedder(settings))
    cpu = CpuMeter(ctx.provider_cpu())
    ids = [f"poisson-{i}" for i in range(len(texts))]
    if timeline is not None:
        timeline.ids_by_text.update(zip(texts, ids, strict=True))
    async with (
        scenario_topics(settings) as names,
        ResultReader(settings, names.results) as reader,
        running_processor(
            settings, backend, Metrics(), timeline=timeline,
            result_linger_ms=variant.result_linger_ms,
        ),
    ):  # fmt: skip
        await publish(settings, names.requests_low, warm_up, "warm-up-")
        await reader.wait_for([f"warm-up-{k}" for k in range(len(warm_up))], GRACE_S)
        backend.restart()
        await ctx.reset_provider_stats()
        cpu.start()
        label = f"kafka poisson {rate:,.0f}/s{variant.label}"
        count = lambda: float(len(reader.received))  # noqa: E731
        async with reporting(ctx.progress, label, len(texts) + len(warm_up), "items", count):
            loop = asyncio.get_running_loop()
            start = loop.time() + 0.05
            deadlines = [start + a for a in arrivals]
            await _publish_on_schedule(
                settings, names.requests_low, texts, ids, deadlines, timeline
            )
            await reader.wait_for(ids, GRACE_S)
        cpu.stop()
    latencies = [reader.received[i] - d for i, d in zip(ids, deadlines, strict=True)
                 if i in reader.received]  # fmt: skip
    last = max((reader.received[i] for i in ids if i in reader.received), default=start)
    if timeline is not None:
        for request_id, due, read in zip(ids, deadlines, map(reader.received.get, ids),
                                         strict=True):  # fmt: skip
            timeline.note(request_id, "scheduled", due)
            if read is not None:
                timeline.note(request_id, "read", read)
    row = Row(
        scenario=f"kafka poisson {rate:,.0f}/s{variant.label}",
        kind="kafka-poisson",
        items=len(latencies),
        seconds=last - start,
        bound_per_s=ctx.model.open_loop_bound(rate, ctx.tokens) if ctx.model else None,
        latency=latency_percentiles(latencies),
        calls=backend.calls,
        inputs=backend.inputs,
        client_cpu_s=cpu.client_s,
        provider_cpu_s=cpu.provider_s,
        failed=len(ids) - len(latencies),
        offered_per_s=rate,
        note=f"{broker.name}; latency from the scheduled publication to the result read",
    )
    ctx.progress.end(summary(row))
    return ScenarioResult(row, backend.timeline(), backend.sizes_and_latencies_ms())


async def _publish_on_schedule(
    settings: Settings,
    topic: str,
    texts: Sequence[str],
    ids: Sequence[str],
    deadlines: Sequence[float],
    timeline: Timeline | None = None,
) -> None:
    """Send each event at its deadline (those already due at once), acks awaited at the end."""
    loop = asyncio.get_running_loop()
    producer = producer_for(connection_for(settings), linger_ms=1)
    await producer.start()
    try:
        sends = []
        i = 0
        while i < len(texts):
            now = loop.time()
            if deadlines[i] > now:
                await asyncio.sleep(min(deadlines[i] - now, WAVE_S))
                continue
            while i < len(texts) and deadlines[i] <= now:
                value = orjson.dumps({"id": ids[i], "text": texts[i]})
                sends.append(await producer.send(topic, value, key=ids[i].encode()))
                if timeline is not None:
                    timeline.note(ids[i], "published")
                i += 1
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


class ResultReader:
    """Follows the results topic from its start, noting when each id's result arrived."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self._consumer = make_reader(
            connection_for(settings), isolation_level="read_uncommitted", fetch_max_wait_ms=10
        )
        self._topic = topic
        self._task: asyncio.Task[None] | None = None
        self.received: dict[str, float] = {}
        self._arrived: list[str] = []  # ids received since the waiter last looked
        self._changed = asyncio.Event()

    async def __aenter__(self) -> ResultReader:
        await self._consumer.start()
        self._consumer.assign(await partitions_of(self._consumer, self._topic))
        await self._consumer.seek_to_beginning()
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            now = loop.time()
            for records in batches.values():
                for record in records:
                    if record.key is not None:
                        key = record.key.decode()
                        if key not in self.received:  # at-least-once: a repeat is no news
                            self.received[key] = now
                            self._arrived.append(key)
            if batches:
                self._changed.set()

    async def wait_for(self, ids: Sequence[str], timeout_s: float) -> bool:
        """True once every id has a result; False after ``timeout_s`` of no new result."""
        missing = set(ids) - self.received.keys()
        self._arrived = []
        while missing:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout_s)
            except TimeoutError:
                return False
            missing.difference_update(self._arrived)
            self._arrived = []
        return True
