"""The online scenario (issue 28): online callers beside a low backlog drained through Kafka,
three arms in one run on one broker and one provider.

- **through the online lane**: the callers post to the processor's own
  `POST /v1/embeddings` (http_port), sharing its provider budget as the top lane;
- **straight to the provider**: the same callers post to the provider while the processor
  drains, as an online service does today;
- **the drain alone**.

The callers arrive at Poisson times (one text each, one in ten an array of 16); each request's
latency runs from its scheduled time to its answer. Then the HTTP front's own CPU per request
beside an in-process `BatchingClient` call. The rows are built by the pure ``online_figures``.
With ``stages`` (``--timeline``), a row per stage of the lane's requests: the callers note
when each was scheduled and answered, the processor's tracer when the lane took it, when the
provider call carrying it started and ended and when the lane answered (bench/timeline.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from embedstream.app_serve import Gateway
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, validate
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.kafka_figures import Drain
from embedstream.tools.bench.kafka_flood import POLL_S, lane_results
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.model import Row
from embedstream.tools.bench.online_figures import (
    Callers,
    FrontCpu,
    front_cpu_row,
    online_rows,
    online_stage_rows,
)
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.remote_callers import CallerFigures, CallersChild
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.timeline import Timeline, TimelineTracer
from embedstream.tools.bench.workload import make_texts
from embedstream.tools.embedded import free_port

FRONT_REQUESTS = 2_000


async def _arm(
    ctx: BenchContext,
    broker: KafkaBroker,
    texts: Sequence[str],
    rate: float,
    arm: str,
    timeline: Timeline | None = None,
) -> tuple[Drain, Callers | None]:
    """One drain on topics of its own; ``arm``: "alone", "lane" or "direct". ``timeline``:
    the lane's requests' moments are noted there."""
    settings = broker.settings(ctx.settings, unique_prefix("online"))
    if arm == "lane":
        settings = dataclasses.replace(settings, http_port=free_port())
        validate(settings)
    async with scenario_topics(settings) as names:
        await publish(settings, names.requests_low, texts, "low-")
        backend = TimedBackend(ctx.embedder(settings))
        metrics = Metrics()
        cpu = CpuMeter(ctx.provider_cpu())
        await ctx.reset_provider_stats()

        def done() -> float:
            return lane_results(metrics, "low")

        bound_s = GRACE_S + len(texts) / 500.0
        url = _url(settings, ctx.settings, arm)
        # The callers run in a process of their own, as a RAG service does: in this one,
        # their client side waited for the drain's turns of this event loop in both arms.
        callers = CallersChild(url, settings.model, rate if arm != "alone" else 0.0, bound_s)
        label = f"online {rate:g}/s, {arm}: {len(texts):,} low"
        tracer = TimelineTracer(timeline) if timeline is not None else None
        async with (
            callers,
            reporting(ctx.progress, label, len(texts), "items", done),
            running_processor(settings, backend, metrics, tracer=tracer),
        ):
            backend.restart()
            cpu.start()
            loop = asyncio.get_running_loop()
            start = loop.time()
            callers.begin(time.monotonic() + 0.05)
            while done() < len(texts) and loop.time() < start + bound_s:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)
            seconds = loop.time() - start
            cpu.stop()
            figures = await callers.finish()
    drain = Drain(int(done()), seconds, backend.calls, backend.inputs, cpu.client_s,
                  cpu.provider_s, len(texts))  # fmt: skip
    if timeline is not None:
        _note_callers(timeline, figures)
    if arm == "alone":
        return drain, None
    return drain, Callers(figures.latencies_s, figures.sent, figures.failed, seconds)


def _note_callers(timeline: Timeline, figures: CallerFigures) -> None:
    """The callers' moments beside the processor's, by request number."""
    for number, scheduled, answered in figures.answered:
        timeline.note(str(number), "scheduled", scheduled)
        timeline.note(str(number), "answered", answered)


def _url(settings: Settings, engine: Settings, arm: str) -> str:
    if arm == "lane":
        return f"http://127.0.0.1:{settings.http_port}/v1/embeddings"
    return f"{(engine.base_url or '').rstrip('/')}/embeddings"


class _Instant:
    """A provider that answers at once: what is left is the front's own work."""

    async def embed(self, call: BatchCall) -> BatchOutcome:
        return BatchOutcome([[0.0, 1.0]] * len(call.texts), 2, len(call.texts), 0.0)

    async def close(self) -> None:
        return None


async def front_cpu(settings: Settings, requests: int = FRONT_REQUESTS) -> FrontCpu:
    """CPU per sequential request: over HTTP to a `serve` gateway (client and server in this
    process), and as an in-process `BatchingClient.embed`, the cache off in both."""
    plain = dataclasses.replace(settings, cache="off", metrics_port=0)
    gateway = Gateway(plain, _Instant(), port=0)
    started = asyncio.Event()
    serving = asyncio.create_task(gateway.run(started))
    await started.wait()
    url = f"http://127.0.0.1:{gateway.online.port}/v1/embeddings"
    try:
        async with aiohttp.ClientSession() as session:
            http_s = await _cpu_of(requests, lambda i: _post(session, url, f"question {i}"))
    finally:
        gateway.stop()
        await serving
    async with BatchingClient(_Instant(), settings=plain) as client:
        local_s = await _cpu_of(requests, lambda i: client.embed(f"question {i}"))
    return FrontCpu(requests, http_s, local_s)


async def _post(session: aiohttp.ClientSession, url: str, text: str) -> None:
    async with session.post(url, json={"input": text}) as answer:
        await answer.read()


async def _cpu_of(requests: int, call: Callable[[int], Awaitable[object]]) -> float:
    for i in range(min(100, requests)):  # warm: connections, caches of the interpreter
        await call(i)
    started = time.process_time()
    for i in range(requests):
        await call(i)
    return time.process_time() - started


async def kafka_online(
    ctx: BenchContext, broker: KafkaBroker, low_items: int, rate: float, stages: bool = False
) -> list[ScenarioResult]:
    """The drain alone, with callers through the lane, with callers straight to the provider;
    then the front's CPU per request. ``stages``: a row per stage of the lane's requests."""
    texts = make_texts(low_items, tokens=ctx.tokens, seed=ctx.seed)
    alone, _ = await _arm(ctx, broker, texts, rate, "alone")
    ctx.progress.end(f"{alone.per_s:,.0f} items/s")
    timeline = Timeline() if stages else None
    lane, lane_callers = await _arm(ctx, broker, texts, rate, "lane", timeline)
    ctx.progress.end(f"{lane.per_s:,.0f} items/s")
    direct, direct_callers = await _arm(ctx, broker, texts, rate, "direct")
    ctx.progress.end(f"{direct.per_s:,.0f} items/s")
    assert lane_callers is not None and direct_callers is not None
    rows = online_rows(alone, (lane, lane_callers), (direct, direct_callers), rate, broker.name)
    if timeline is not None:
        label = f"online {rate:g}/s beside {low_items:,} low: the lane's requests"
        answered = {n: t for n, t in timeline.moments.items() if "answered" in t}
        stage: list[Row] = online_stage_rows(answered, label, lane.seconds)
        rows[3:3] = stage  # after the lane's callers' row
    ctx.progress.begin("online front: CPU per request", None, "requests")
    front = await front_cpu(ctx.settings)
    rows.append(front_cpu_row(front))
    ctx.progress.end(rows[-1].scenario)
    return [ScenarioResult(row) for row in rows]
