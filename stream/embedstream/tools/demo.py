"""`embedstream demo`: the whole pipeline on one machine with nothing installed but the wheel.

Starts the embedded broker and the simulated provider on free loopback ports (or uses a real
endpoint when OPENAI_API_KEY / OPENAI_BASE_URL are set), creates the topics, runs a processor,
publishes sample texts to both priorities at a steady rate, waits for every result and prints
a summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from dataclasses import dataclass

import orjson

from embedstream.app import build_service, default_backend
from embedstream.config import Settings, load_settings
from embedstream.kafka.admin import TopicNames, configured_specs, configured_topics, create_topics
from embedstream.kafka.clients import connection_for, make_producer, make_reader, partitions_of
from embedstream.kafka.processor import Processor
from embedstream.ops.metrics import CACHE_TIERS, Metrics
from embedstream.tools.embedded import EmbeddedBroker
from embedstream.tools.simulator.model import SimulatorConfig
from embedstream.tools.simulator.server import SimulatorServer
from embedstream.wire import decode_result

WORDS = [
    "stream",
    "batch",
    "token",
    "vector",
    "kafka",
    "offset",
    "latency",
    "backlog",
    "partition",
    "consumer",
    "embedding",
    "search",
    "retrieval",
    "document",
    "query",
    "model",
    "provider",
    "window",
    "priority",
    "lane",
    "budget",
    "signal",
    "river",
    "harbor",
    "lantern",
    "meadow",
    "orbit",
    "quartz",
    "velvet",
    "ember",
    "summit",
    "canyon",
]
WAVE_S = 0.05  # publish in small waves, as an ingestion pipeline would


def sample_texts(n: int, seed: int = 7) -> list[str]:
    """Mixed lengths: mostly short queries, some paragraphs, a few long documents."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        roll = rng.random()
        words = rng.randint(3, 12) if roll < 0.6 else rng.randint(40, 120) if roll < 0.95 else 600
        texts.append(f"#{i} " + " ".join(rng.choice(WORDS) for _ in range(words)))
    return texts


@dataclass
class Summary:
    items: int
    seconds: float
    p50_ms: float
    p99_ms: float
    api_calls: int = 0
    mean_batch: float = 0.0
    cache: str = "off"

    def render(self) -> str:
        return (
            f"items         {self.items}\n"
            f"items/s       {self.items / self.seconds:,.0f}\n"
            f"latency P50   {self.p50_ms:,.0f} ms (end to end)\n"
            f"latency P99   {self.p99_ms:,.0f} ms\n"
            f"API calls     {self.api_calls}\n"
            f"mean batch    {self.mean_batch:,.1f} inputs/call\n"
            f"cache         {self.cache}"
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_demo(
    items: int = 3000, timeout_s: float = 300.0, rate: float = 2000.0, metrics_port: int = 0
) -> int:
    broker = EmbeddedBroker()
    await broker.start()
    simulator: SimulatorServer | None = None
    real_endpoint = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    try:
        overrides: dict[str, object] = {
            "bootstrap_servers": broker.bootstrap,
            "topic_prefix": "demo.",
            "group_id": "embedstream-demo",
            # The embedded broker holds each fetch for fetch_max_wait_ms and each join for
            # about half the session timeout: keep both short.
            "fetch_max_wait_ms": 10,
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 1000,
            "metrics_port": metrics_port,
        }
        if not real_endpoint:
            config = SimulatorConfig(base_ms=20.0, per_token_ms=0.002, capacity=8)
            simulator = SimulatorServer(config)
            await simulator.start()
            overrides["base_url"] = simulator.url
        settings = load_settings(env=os.environ, overrides=overrides)
        where = "a real endpoint" if real_endpoint else f"the simulator at {settings.base_url}"
        print(f"embedded broker at {broker.bootstrap}; embeddings from {where}", file=sys.stderr)
        await create_topics(connection_for(settings), configured_specs(settings))
        metrics = Metrics()
        service = build_service(settings, default_backend(settings), metrics=metrics)
        run_task = asyncio.create_task(service.run())
        try:
            summary = await asyncio.wait_for(
                _drive(settings, service.processor, items, rate), timeout_s
            )
        finally:
            service.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run_task, 30)
        calls = metrics.registry.get_sample_value("embedstream_batch_size_count") or 0.0
        inputs = metrics.registry.get_sample_value("embedstream_batch_size_sum") or 0.0
        summary.api_calls = int(calls)
        summary.mean_batch = inputs / max(calls, 1.0)
        summary.cache = _cache_summary(settings, metrics)
        print(summary.render())
        return 0
    finally:
        if simulator is not None:
            await simulator.stop()
        broker.stop()


def _cache_summary(settings: Settings, metrics: Metrics) -> str:
    if settings.cache == "off":
        return "off (EMBEDSTREAM_CACHE=memory or redis turns it on)"
    value = metrics.registry.get_sample_value
    hits = sum(value("embedstream_cache_hits_total", {"tier": t}) or 0.0 for t in CACHE_TIERS)
    misses = value("embedstream_cache_misses_total") or 0.0
    saved = value("embedstream_cache_tokens_saved_total") or 0.0
    return f"{hits:,.0f} hits of {hits + misses:,.0f} look-ups, {saved:,.0f} tokens saved"


async def _drive(settings: Settings, processor: Processor, n: int, rate: float) -> Summary:
    names = configured_topics(settings)
    await asyncio.wait_for(processor.assigned.wait(), 60)
    started = time.monotonic()
    collector = asyncio.create_task(_collect(settings, names.results, n))
    await _publish(settings, names, sample_texts(n), rate)
    latencies = await collector
    elapsed = time.monotonic() - started
    return Summary(n, elapsed, percentile(latencies, 0.5), percentile(latencies, 0.99))


async def _publish(settings: Settings, names: TopicNames, texts: list[str], rate: float) -> None:
    """One in five requests is interactive (high priority); the rest is bulk."""
    producer = make_producer(settings)
    await producer.start()
    try:
        per_wave = max(1, int(rate * WAVE_S))
        futures = []
        for start in range(0, len(texts), per_wave):
            for i in range(start, min(start + per_wave, len(texts))):
                topic = names.requests_high if i % 5 == 0 else names.requests_low
                value = orjson.dumps({"id": f"demo-{i}", "text": texts[i]})
                futures.append(await producer.send(topic, value, key=f"demo-{i}".encode()))
            await asyncio.sleep(WAVE_S)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _collect(settings: Settings, topic: str, n: int) -> list[float]:
    consumer = make_reader(
        connection_for(settings), isolation_level="read_uncommitted", fetch_max_wait_ms=10
    )
    await consumer.start()
    try:
        consumer.assign(await partitions_of(consumer, topic))
        await consumer.seek_to_beginning()
        latencies: dict[str, float] = {}
        while len(latencies) < n:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    doc = decode_result(record.value)
                    latencies[doc["id"]] = float(doc["latency_ms"])
        return list(latencies.values())
    finally:
        await consumer.stop()
