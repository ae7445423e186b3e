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

from embedstream.app.gateway import Gateway
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.errors import env_var
from embedstream.settings import Settings
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.hosts import scrape, settle, tree_cpu_s
from embedstream.tools.bench.kafka_figures import Drain
from embedstream.tools.bench.kafka_flood import POLL_S
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.online_figures import (
    Callers,
    FrontCpu,
    front_cpu_row,
    online_rows,
)
from embedstream.tools.bench.processes import ProcessorProcess
from embedstream.tools.bench.remote_callers import CallersChild
from embedstream.tools.bench.scaleout import member_environment
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.workload import make_texts
from embedstream.tools.embedded import free_port

FRONT_REQUESTS = 2_000


async def _arm(
    ctx: BenchContext, broker: KafkaBroker, texts: Sequence[str], rate: float, arm: str
) -> tuple[Drain, Callers | None]:
    """One drain on topics of its own by `embedstream run` in a process of its own (with the
    online lane on, for the "lane" arm: `serve` and the processor as its lane processes),
    from the backlog's publication, once the group has settled, to its last result; ``arm``:
    "alone", "lane" or "direct"."""
    settings = broker.settings(ctx.settings, unique_prefix("online"))
    http_port = free_port() if arm == "lane" else 0
    async with scenario_topics(settings) as names:
        await ctx.reset_provider_stats()
        provider_before = ctx.provider.cpu_s() if ctx.provider is not None else None
        env = member_environment(settings) | {env_var("http_port"): str(http_port)}
        proc = ProcessorProcess(f"online-{arm}", env, ctx.log_dir)
        bound_s = GRACE_S + len(texts) / 500.0
        url = _url(settings, ctx.settings, arm, http_port)
        # The callers run in a process of their own, as a RAG service does.
        callers = CallersChild(url, settings.model, rate if arm != "alone" else 0.0, bound_s)
        label = f"online {rate:g}/s, {arm}: {len(texts):,} low"
        progress = _Progress()
        proc.start_nowait()
        try:
            await proc.wait_started()
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await settle(session, [proc.metrics_url], names.requests_low, 4)
                async with (
                    callers,
                    reporting(ctx.progress, label, len(texts), "items", progress.done),
                ):
                    cpu_before = tree_cpu_s(proc.pid)
                    callers.begin(time.monotonic() + 0.05)
                    start = time.perf_counter()
                    # Published once the group has settled: the drain runs beside the callers.
                    await publish(settings, names.requests_low, texts, "low-")
                    await progress.until(session, proc.metrics_url, len(texts), bound_s)
                    seconds = time.perf_counter() - start
                    cpu = tree_cpu_s(proc.pid) - cpu_before
                    figures = await callers.finish()
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.stop)
    provider_after = ctx.provider.cpu_s() if ctx.provider is not None else None
    provider_cpu = (
        provider_after - provider_before
        if provider_after is not None and provider_before is not None
        else None
    )
    drain = Drain(int(progress.results), seconds, int(progress.calls), int(progress.inputs),
                  cpu, provider_cpu, len(texts))  # fmt: skip
    if arm == "alone":
        return drain, None
    return drain, Callers(figures.latencies_s, figures.sent, figures.failed, seconds)


class _Progress:
    """A processor's results, calls and inputs from its /metrics, while it drains."""

    def __init__(self) -> None:
        self.results = self.calls = self.inputs = 0.0

    def done(self) -> float:
        return self.results

    async def until(
        self, session: aiohttp.ClientSession, url: str, items: int, bound_s: float
    ) -> None:
        deadline = time.monotonic() + bound_s
        while self.results < items and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            snapshot = await scrape(session, url)
            if snapshot is not None:
                self.results = snapshot.results.get("low", 0.0)
                self.calls, self.inputs = snapshot.batch_size.count, snapshot.batch_size.sum


def _url(settings: Settings, engine: Settings, arm: str, http_port: int) -> str:
    if arm == "lane":
        return f"http://127.0.0.1:{http_port}/v1/embeddings"
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
    ctx: BenchContext, broker: KafkaBroker, low_items: int, rate: float
) -> list[ScenarioResult]:
    """The drain alone, with callers through the lane, with callers straight to the provider,
    each by `embedstream run` in a process of its own (its lanes as processes with the online
    lane on); then the front's CPU per request."""
    texts = make_texts(low_items, tokens=ctx.tokens, seed=ctx.seed)
    alone, _ = await _arm(ctx, broker, texts, rate, "alone")
    ctx.progress.end(f"{alone.per_s:,.0f} items/s")
    lane, lane_callers = await _arm(ctx, broker, texts, rate, "lane")
    ctx.progress.end(f"{lane.per_s:,.0f} items/s")
    direct, direct_callers = await _arm(ctx, broker, texts, rate, "direct")
    ctx.progress.end(f"{direct.per_s:,.0f} items/s")
    assert lane_callers is not None and direct_callers is not None
    rows = online_rows(alone, (lane, lane_callers), (direct, direct_callers), rate, broker.name)
    ctx.progress.begin("online front: CPU per request", None, "requests")
    front = await front_cpu(ctx.settings)
    rows.append(front_cpu_row(front))
    ctx.progress.end(rows[-1].scenario)
    return [ScenarioResult(row) for row in rows]
