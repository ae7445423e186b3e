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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Sequence

import aiohttp
import orjson

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
from embedstream.tools.bench.online_figures import Callers, FrontCpu, front_cpu_row, online_rows
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.workload import make_texts, poisson_arrivals
from embedstream.tools.embedded import free_port

ARRAY_EVERY = 10  # one request in ten carries an array
ARRAY_INPUTS = 16
ANSWER_WAIT_S = 10.0  # after the drain, for the requests already sent
FRONT_REQUESTS = 2_000


class OnlineCallers:
    """Requests at Poisson times from a start until stopped, each on its own task (an open
    loop: a slow answer delays nobody else). Texts and times are made before the drain."""

    def __init__(self, url: str, model: str, rate: float, seconds: float) -> None:
        self._url = url
        arrivals = poisson_arrivals(rate, seconds, seed=11) if rate > 0 else []
        texts = make_texts(len(arrivals) * ARRAY_INPUTS, seed=11)
        rng = random.Random(11)
        self._plan: list[tuple[float, bytes]] = []
        for i, offset in enumerate(arrivals):
            many = rng.randrange(ARRAY_EVERY) == 0
            chosen = texts[i * ARRAY_INPUTS : (i + 1) * ARRAY_INPUTS] if many else texts[i]
            body = {"model": model, "input": chosen, "encoding_format": "base64"}
            self._plan.append((offset, orjson.dumps(body)))
        self.latencies_s: list[float] = []
        self.failed = 0
        self.sent = 0
        self._inflight: set[asyncio.Task[None]] = set()

    async def run(self, session: aiohttp.ClientSession, start: float) -> None:
        loop = asyncio.get_running_loop()
        for offset, body in self._plan:
            due = start + offset
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            task = asyncio.create_task(self._one(session, body, due))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            self.sent += 1

    async def settle(self, within_s: float) -> None:
        """Wait for the requests already sent (a bounded time); the rest count as failed."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=within_s)
        for task in list(self._inflight):
            task.cancel()

    async def _one(self, session: aiohttp.ClientSession, body: bytes, due: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
            async with session.post(self._url, data=body, headers=headers) as answer:
                await answer.read()
                ok = answer.status == 200
        except (aiohttp.ClientError, asyncio.CancelledError):
            ok = False
        if ok:
            self.latencies_s.append(loop.time() - due)
        else:
            self.failed += 1


async def _arm(
    ctx: BenchContext, broker: KafkaBroker, texts: Sequence[str], rate: float, arm: str
) -> tuple[Drain, Callers | None]:
    """One drain on topics of its own; ``arm``: "alone", "lane" or "direct"."""
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
        callers = None
        if arm != "alone":
            url = _url(settings, ctx.settings, arm)
            callers = OnlineCallers(url, settings.model, rate, bound_s)
        label = f"online {rate:g}/s, {arm}: {len(texts):,} low"
        async with (
            aiohttp.ClientSession() as session,
            reporting(ctx.progress, label, len(texts), "items", done),
            running_processor(settings, backend, metrics),
        ):
            backend.restart()
            cpu.start()
            loop = asyncio.get_running_loop()
            start = loop.time()
            calling = None
            if callers is not None:
                calling = asyncio.create_task(callers.run(session, start + 0.05))
            while done() < len(texts) and loop.time() < start + bound_s:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)
            seconds = loop.time() - start
            cpu.stop()
            if calling is not None and callers is not None:
                calling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await calling
                await callers.settle(ANSWER_WAIT_S)
    drain = Drain(int(done()), seconds, backend.calls, backend.inputs, cpu.client_s,
                  cpu.provider_s, len(texts))  # fmt: skip
    if callers is None:
        return drain, None
    return drain, Callers(callers.latencies_s, callers.sent, callers.failed, seconds)


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
    ctx: BenchContext, broker: KafkaBroker, low_items: int, rate: float
) -> list[ScenarioResult]:
    """The drain alone, with callers through the lane, with callers straight to the provider;
    then the front's CPU per request."""
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
