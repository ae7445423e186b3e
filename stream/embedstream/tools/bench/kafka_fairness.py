"""kafka-fairness (issue 21): two sources of one low lane on one broker, in one run.

Source A is a low topic with a backlog published at once; source B is a second low topic of
the same lane, fed at a steady rate. Four measurements, each on topics of its own with one
processor: B alone, A alone, A with B (calls shared by weight, the default), and A with B
again with every bucket one FIFO (``baselines.calls_fifo``: the baseline; the fetch-side
shares stay on). B's latency runs from each event's scheduled publication to its
result acknowledged by the broker (noted by the processor's producer); A's drain from the
assignment to its last result. The rows are built by the pure ``fairness_figures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence

import orjson

from embedstream.kafka.client.clients import make_producer
from embedstream.kafka.client.topics import configured_specs
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, validate
from embedstream.tools.bench.baselines import calls_fifo
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.fairness_figures import Arm, Trickle, fairness_rows
from embedstream.tools.bench.kafka_figures import Drain
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.timeline import Timeline
from embedstream.tools.bench.workload import make_texts

POLL_S = 0.02
ANSWER_WAIT_S = 10.0  # after the publishing ends, for B's events already published


def _settings(ctx: BenchContext, broker: KafkaBroker) -> tuple[Settings, str, str]:
    """Settings on topics of their own, the low lane fed by topics A and B."""
    settings = broker.settings(ctx.settings, unique_prefix("fair"))
    a, b = settings.topic_prefix + "source-a", settings.topic_prefix + "source-b"
    settings = dataclasses.replace(settings, topic_requests_low=f"{a},{b}")
    validate(settings)
    return settings, a, b


async def _run(
    ctx: BenchContext,
    broker: KafkaBroker,
    texts: Sequence[str],
    b_rate: float,
    b_seconds: float,
    label: str,
    *,
    fifo: bool = False,
) -> tuple[Drain | None, Trickle | None]:
    """One measurement: A's backlog of ``texts`` (none: B alone, for ``b_seconds``) and B at
    ``b_rate`` (0: A alone) until A is drained."""
    settings, a_topic, b_topic = _settings(ctx, broker)
    timeline = Timeline()
    sent: dict[str, float] = {}
    async with scenario_topics(settings, configured_specs(settings)):
        if texts:
            await publish(settings, a_topic, texts, "a-")
        backend = TimedBackend(ctx.embedder(settings))
        metrics = Metrics()
        cpu = CpuMeter(ctx.provider_cpu())
        await ctx.reset_provider_stats()

        def b_acked() -> int:
            return sum(1 for i in sent if "acked" in timeline.moments.get(i, {}))

        def a_done() -> float:
            value = metrics.registry.get_sample_value
            return (value("embedstream_results_total", {"lane": "low"}) or 0.0) - b_acked()

        total = len(texts) if texts else int(b_rate * b_seconds)
        progress = a_done if texts else b_acked
        async with (
            reporting(ctx.progress, label, total, "items", progress),
            running_processor(settings, backend, metrics, timeline=timeline) as service,
        ):
            if fifo:
                calls_fifo(service.processor.parts.batcher)
            backend.restart()
            cpu.start()
            loop = asyncio.get_running_loop()
            start = loop.time()
            trickle = None
            if b_rate > 0:
                stop_after = None if texts else b_seconds
                trickle = asyncio.create_task(
                    _publish_steadily(settings, b_topic, b_rate, start, sent, timeline, stop_after)
                )
            if texts:
                deadline = start + GRACE_S + len(texts) / 500.0
                while a_done() < len(texts) and loop.time() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(POLL_S)
            elif trickle is not None:
                await trickle
            seconds = loop.time() - start
            cpu.stop()
            # A's count now: later, one of B's results may be counted by the metric before
            # its acknowledgement is noted, and would pass for one of A's missing.
            done = int(a_done())
            if trickle is not None:
                trickle.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await trickle
                await _wait_for_acks(timeline, list(sent))
    drain = None
    if texts:
        drain = Drain(done, seconds, backend.calls, backend.inputs, cpu.client_s,
                      cpu.provider_s, len(texts))  # fmt: skip
    measured = None
    if b_rate > 0:
        acked = {i: timeline.moments.get(i, {}).get("acked") for i in sent}
        latencies = [at - sent[i] for i, at in acked.items() if at is not None]
        measured = Trickle(latencies, len(sent), seconds, timeline.only(list(sent)))
    return drain, measured


async def _publish_steadily(
    settings: Settings,
    topic: str,
    rate: float,
    start: float,
    sent: dict[str, float],
    timeline: Timeline,
    stop_after_s: float | None,
) -> None:
    """B's events every 1/rate s from ``start`` (until cancelled, or ``stop_after_s``);
    ``sent`` gets each id's scheduled time once it is handed to the producer."""
    loop = asyncio.get_running_loop()
    producer = make_producer(settings, linger_ms=1)
    await producer.start()
    try:
        texts = make_texts(1000, seed=11)
        i = 0
        while stop_after_s is None or i < rate * stop_after_s:
            due = start + 0.05 + i / rate
            await asyncio.sleep(max(0.0, due - loop.time()))
            request_id = f"b-{i}"
            text = f"{request_id} {texts[i % len(texts)]}"  # unique: the timeline's calls find it
            timeline.ids_by_text[text] = request_id
            value = orjson.dumps({"id": request_id, "text": text})
            await producer.send(topic, value, key=request_id.encode())
            sent[request_id] = due
            timeline.note(request_id, "scheduled", due)
            timeline.note(request_id, "published")
            i += 1
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()


async def _wait_for_acks(timeline: Timeline, ids: Sequence[str]) -> None:
    deadline = time.monotonic() + ANSWER_WAIT_S
    while time.monotonic() < deadline:
        if all("acked" in timeline.moments.get(i, {}) for i in ids):
            return
        await asyncio.sleep(POLL_S)


async def kafka_fairness(
    ctx: BenchContext, broker: KafkaBroker, a_items: int, b_rate: float, b_seconds: float
) -> list[ScenarioResult]:
    texts = make_texts(a_items, tokens=ctx.tokens, seed=ctx.seed)
    _, b_alone = await _run(
        ctx, broker, (), b_rate, b_seconds, f"kafka fairness: B {b_rate:g}/s alone"
    )
    assert b_alone is not None
    ctx.progress.end(f"P99 {1000 * (b_alone.p99_s or 0.0):,.0f} ms")
    a_alone, _ = await _run(ctx, broker, texts, 0.0, 0.0, f"kafka fairness: A {a_items:,} alone")
    assert a_alone is not None
    ctx.progress.end(f"{a_alone.per_s:,.0f} items/s")
    arms = []
    for label, fifo in (("shares", False), ("calls FIFO", True)):
        step = f"kafka fairness: A with B, {label}"
        drain, trickle = await _run(ctx, broker, texts, b_rate, b_seconds, step, fifo=fifo)
        assert drain is not None and trickle is not None
        arms.append(Arm(label, drain, trickle))
        ctx.progress.end(
            f"A {drain.per_s:,.0f} items/s, B P99 {1000 * (trickle.p99_s or 0):,.0f} ms"
        )
    rows = fairness_rows(a_alone, b_alone, arms, b_rate, broker.name)
    return [ScenarioResult(row) for row in rows]
