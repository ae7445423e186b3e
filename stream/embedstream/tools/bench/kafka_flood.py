"""Two Kafka scenarios of issue 20, each an A/B in one run on one broker.

- **flood**: a low backlog drained by one processor, once alone and once while high events
  arrive (Poisson) on the high topic: the high latency from each event's scheduled
  publication to its result acknowledged by the broker, and the low drain rate beside the
  drain alone.
- **floor**: the same records read twice, by a bare aiokafka loop (decode, one result-sized
  ``send()`` per record, commit per poll; no embedding) and by embedstream's processor: the
  CPU µs per item of each, in this process, and their ratio.

The rows are built by the pure ``kafka_figures``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from embedstream.kafka.client.clients import (
    connection_for,
    consumer_for,
    make_producer,
    partitions_of,
)
from embedstream.kafka.client.topics import TopicSpec, load_topic_specs
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, validate
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.figures import Row
from embedstream.tools.bench.kafka_figures import (
    Drain,
    flood_rows,
    floor_rows,
    latency_row,
    spans,
    stage_rows,
)
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.remote_publisher import PublisherChild
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.timeline import Timeline
from embedstream.tools.bench.workload import make_texts

POLL_S = 0.01
LOOP_PROBE_S = 0.005
HIGH_ANSWER_WAIT_S = 5.0  # after the drain, for the high events already published


def lane_results(metrics: Metrics, lane: str) -> float:
    return metrics.results_counted(lane)


@dataclass(frozen=True, slots=True)
class Flooded:
    """One drain with its high traffic: the drain, and each high request's moments."""

    drain: Drain
    high_moments: dict[str, dict[str, float]]  # id -> moment -> monotonic s, "scheduled" first
    high_published: int
    loop_lags_s: list[float]  # how late a 5 ms sleep of the bench's loop woke, during the drain

    @property
    def high_latencies_s(self) -> list[float]:
        """From each high request's scheduled publication to its result acknowledged."""
        return [t["acked"] - t["scheduled"] for t in self.high_moments.values() if "acked" in t]


async def _drain(
    ctx: BenchContext,
    broker: KafkaBroker,
    texts: Sequence[str],
    high_rate: float,
    label: str,
    overrides: Mapping[str, object] | None = None,
) -> Flooded:
    """One drain on topics of its own, with ``overrides`` of the settings."""
    settings = broker.settings(ctx.settings, unique_prefix("flood"))
    if overrides:
        settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
        validate(settings)
    # The high latency ends when the broker acknowledged the result (noted by the processor's
    # producer): a reader in this process fell seconds behind 20,000 low results and
    # measured itself. The high requests' other moments (fetched, call, written) say where
    # their time went.
    timeline = Timeline()
    async with scenario_topics(settings) as names:
        await publish(settings, names.requests_low, texts, "low-")
        backend = TimedBackend(ctx.embedder(settings))
        metrics = Metrics()
        cpu = CpuMeter(ctx.provider_cpu())
        await ctx.reset_provider_stats()

        def done() -> float:
            return lane_results(metrics, "low")

        bound_s = GRACE_S + len(texts) / 500.0
        # High events come from a process of their own, as from any producer: on this
        # loop, their publication waited for the drain's turns (the bench's own tail).
        publisher = PublisherChild(settings, names.requests_high, high_rate, bound_s)
        for _, request_id, text in publisher.plan:
            timeline.ids_by_text[text] = request_id
        async with (
            publisher,
            reporting(ctx.progress, label, len(texts), "items", done),
            running_processor(settings, backend, metrics, timeline=timeline),
        ):
            backend.restart()
            cpu.start()
            loop = asyncio.get_running_loop()
            start = loop.time()
            lags: list[float] = []
            probe = asyncio.create_task(_probe_loop(lags))
            publisher.begin(start)
            deadline = start + bound_s
            while done() < len(texts) and loop.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)
            seconds = loop.time() - start
            cpu.stop()
            probe.cancel()
            published = await publisher.finish()
            await _wait_for_acks(timeline, list(published))
    sent = {}
    for offset, request_id, _ in publisher.plan:
        if request_id in published:
            sent[request_id] = start + offset
            timeline.note(request_id, "published", published[request_id])
    for request_id, due in sent.items():
        timeline.note(request_id, "scheduled", due)
    drain = Drain(int(done()), seconds, backend.calls, backend.inputs, cpu.client_s,
                  cpu.provider_s, len(texts))  # fmt: skip
    return Flooded(drain, timeline.only(list(sent)), len(sent), lags)


async def _probe_loop(lags: list[float]) -> None:
    """How late the event loop (the processor's, the publisher's, this bench's) runs a task
    that asked to wake in 5 ms: a wait every high request pays at each of its steps."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time()
        await asyncio.sleep(LOOP_PROBE_S)
        lags.append(max(0.0, loop.time() - asked - LOOP_PROBE_S))


async def _wait_for_acks(timeline: Timeline, ids: Sequence[str]) -> None:
    deadline = time.monotonic() + HIGH_ANSWER_WAIT_S
    while time.monotonic() < deadline:
        if all("acked" in timeline.moments.get(i, {}) for i in ids):
            return
        await asyncio.sleep(POLL_S)


async def kafka_flood(
    ctx: BenchContext,
    broker: KafkaBroker,
    low_items: int,
    high_rate: float,
    *,
    stages: bool = False,
) -> list[ScenarioResult]:
    """The drain alone, then with high traffic; ``stages``: a row per stage of the high
    requests' way (published, fetched, call, written, acked)."""
    texts = make_texts(low_items, tokens=ctx.tokens, seed=ctx.seed)
    alone = await _drain(ctx, broker, texts, 0.0, f"kafka flood {low_items:,} alone")
    ctx.progress.end(f"{alone.drain.per_s:,.0f} items/s")
    flooded = await _drain(
        ctx, broker, texts, high_rate, f"kafka flood {low_items:,} + high {high_rate:g}/s"
    )
    rows = flood_rows(alone.drain, flooded.drain, flooded.high_latencies_s,
                      flooded.high_published, high_rate, broker.name)  # fmt: skip
    ctx.progress.end(rows[1].scenario)
    if stages:
        label = f"  {rows[2].scenario}"
        rows += stage_rows(flooded.high_moments, label, flooded.drain.seconds, last="acked")
        seconds = flooded.drain.seconds
        processor = spans(flooded.high_moments, "published", "acked")
        rows += [
            latency_row(f"{label}: published -> acked", processor, seconds,
                        "the processor's part (and the publisher's producer)"),
            latency_row(f"{label}: event loop lag", flooded.loop_lags_s, seconds,
                        "how late a 5 ms sleep woke, sampled through the drain"),
        ]  # fmt: skip
    return [ScenarioResult(row) for row in rows]


# --------------------------------------------------------------------------- floor


def result_sized_value(request_id: str, dimensions: int, model: str) -> bytes:
    """A record the size of embedstream's result for a base64 vector of ``dimensions``."""
    vector = base64.b64encode(bytes(4 * dimensions)).decode()
    return orjson.dumps({"id": request_id, "model": model, "embedding": vector,
                         "dimensions": dimensions, "usage": {"tokens": 30}, "metadata": None,
                         "attempts": 1, "latency_ms": 41.0})  # fmt: skip


async def _bare_loop(
    settings: Settings, source: str, target: str, items: int, dimensions: int
) -> Drain:
    """Read ``source`` from its start, write one result-sized record per request with one
    ``send()`` each, commit after each poll's acks; CPU and time from the first poll."""
    consumer = consumer_for(
        connection_for(settings),
        group_id=settings.topic_prefix + "floor",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_records=settings.max_poll_records,
    )
    producer = make_producer(settings)
    await consumer.start()
    await producer.start()
    try:
        consumer.assign(await partitions_of(consumer, source))
        cpu = CpuMeter()
        cpu.start()
        started = time.perf_counter()
        done = 0
        deadline = started + GRACE_S + items / 500.0
        while done < items and time.perf_counter() < deadline:
            batches = await consumer.getmany(timeout_ms=100)
            acks = []
            for records in batches.values():
                for record in records:
                    request = orjson.loads(record.value) if record.value else {}
                    request_id = str(request.get("id", ""))
                    value = result_sized_value(request_id, dimensions, settings.model)
                    acks.append(await producer.send(target, value, key=record.key))
            await asyncio.gather(*acks)
            done += len(acks)
            if batches:
                await consumer.commit({tp: rs[-1].offset + 1 for tp, rs in batches.items()})
        seconds = time.perf_counter() - started
        cpu.stop()
    finally:
        await producer.stop()
        await consumer.stop()
    return Drain(done, seconds, 0, 0, cpu.client_s, None, items)


async def _embedstream_drain(
    ctx: BenchContext, settings: Settings, items: int, label: str
) -> Drain:
    backend = TimedBackend(ctx.embedder(settings))
    metrics = Metrics()
    cpu = CpuMeter(ctx.provider_cpu())
    await ctx.reset_provider_stats()

    def done() -> float:
        return lane_results(metrics, "low")

    async with (
        reporting(ctx.progress, label, items, "items", done),
        running_processor(settings, backend, metrics),
    ):
        backend.restart()
        cpu.start()
        started = time.perf_counter()
        deadline = started + GRACE_S + items / 500.0
        while done() < items and time.perf_counter() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)
        seconds = time.perf_counter() - started
        cpu.stop()
    return Drain(int(done()), seconds, backend.calls, backend.inputs, cpu.client_s,
                 cpu.provider_s, items)  # fmt: skip


async def kafka_floor(
    ctx: BenchContext, broker: KafkaBroker, items: int, dimensions: int
) -> list[ScenarioResult]:
    settings = broker.settings(ctx.settings, unique_prefix("floor"))
    specs = load_topic_specs(settings.topic_prefix)
    floor_out = TopicSpec("floor", settings.topic_prefix + "floor.results", 4, 1, {})
    texts = make_texts(items, tokens=ctx.tokens, seed=ctx.seed)
    async with scenario_topics(settings, [*specs, floor_out]) as names:
        await publish(settings, names.requests_low, texts, "floor-")
        ctx.progress.begin(f"kafka floor {items:,}: bare loop", None, "items")
        floor = await _bare_loop(settings, names.requests_low, floor_out.name, items, dimensions)
        ctx.progress.end(f"{floor.per_s:,.0f} items/s")
        ours = await _embedstream_drain(ctx, settings, items, f"kafka floor {items:,}: ours")
    rows: list[Row] = floor_rows(floor, ours, broker.name)
    ctx.progress.end(rows[1].scenario)
    return [ScenarioResult(row) for row in rows]
