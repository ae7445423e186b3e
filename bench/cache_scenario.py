"""The embedding cache scenario: ingest a set of texts, then re-ingest it with some changed.

Through the Kafka processor (the ingestion path the cache is for: one look-up per fetch, hits
written as results at once), on a real Apache Kafka broker, with a real `redis-server` and the
simulator in a process of its own (so its CPU is not the processor's). Each pass publishes
its requests first, then starts a processor and times it from its assignment to the last
result: the first pass with an empty cache, the second (a new processor, so only Redis
remembers) with the same texts but `changed_share` of them edited. `bench/bench_cache.py` is
its command line; `run_cache_scenario` is what a bench command calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import aiohttp
import orjson
from embedstream.app.processor import build_service, default_backend
from embedstream.kafka.client.admin import (
    create_topics,
    delete_topics,
    list_topics,
    load_topic_specs,
    topic_names,
)
from embedstream.kafka.client.clients import connection_for, producer_for
from embedstream.ops.metrics import CACHE_TIERS, Metrics
from embedstream.settings import Settings, load_settings
from embedstream.testing.redis import RedisServer
from embedstream.tools.embedded import free_port

# The provider: bench_batching's latency model (40 ms a call, 0.02 ms a token, 0.05 ms an
# input, 8 calls at once), so a call costs what a nearby hosted endpoint would; and, as hosted
# APIs have, a tokens-per-minute budget, announced in x-ratelimit-* headers (which the
# processor paces to) with one second of burst. 3M TPM is about a mid usage tier of OpenAI's
# small embedding model; with `provider_tpm=0` the provider is limited by latency alone.
PROVIDER_TPM = 3_000_000
SIMULATOR_ARGS = ("--base-ms", "40", "--per-token-ms", "0.02", "--per-input-ms", "0.05",
                  "--capacity", "8")  # fmt: skip
_VOCABULARY = "the a of and to in is for on with stream kafka vector batch token index document"
WORDS = (*_VOCABULARY.split(), "search", "query", "retry", "offset", "latency", "cache", "text")


@dataclass(frozen=True, slots=True)
class PassResult:
    name: str
    items: int
    seconds: float
    calls: int  # provider calls served
    inputs: int  # texts the provider embedded
    tokens: int  # tokens the provider counted
    hits: int
    misses: int
    redis_cpu_s: float
    process_cpu_s: float  # this process: the processor and its clients

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds

    @property
    def hit_ratio(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


@dataclass(frozen=True, slots=True)
class CacheScenario:
    first: PassResult
    second: PassResult
    changed_share: float
    provider_tpm: float

    def render(self) -> str:
        a, b = self.first, self.second
        rows = [
            ("items", f"{a.items:,}", f"{b.items:,}", ""),
            ("seconds", f"{a.seconds:.1f}", f"{b.seconds:.1f}", f"{b.seconds / a.seconds:.2f}x"),
            ("items/s", f"{a.items_per_s:,.0f}", f"{b.items_per_s:,.0f}",
             f"{b.items_per_s / a.items_per_s:.1f}x"),
            ("provider calls", f"{a.calls:,}", f"{b.calls:,}", _ratio(b.calls, a.calls)),
            ("texts sent", f"{a.inputs:,}", f"{b.inputs:,}", _ratio(b.inputs, a.inputs)),
            ("tokens sent", f"{a.tokens:,}", f"{b.tokens:,}", _ratio(b.tokens, a.tokens)),
            ("cache hit ratio", f"{a.hit_ratio:.1%}", f"{b.hit_ratio:.1%}", ""),
            ("Redis CPU s", f"{a.redis_cpu_s:.2f}", f"{b.redis_cpu_s:.2f}", ""),
            ("Redis CPU / wall time", f"{a.redis_cpu_s / a.seconds:.1%}",
             f"{b.redis_cpu_s / b.seconds:.1%}", ""),
            ("Redis CPU ms / 1,000 items", f"{1e6 * a.redis_cpu_s / a.items:.1f}",
             f"{1e6 * b.redis_cpu_s / b.items:.1f}", ""),
            ("processor CPU s", f"{a.process_cpu_s:.1f}", f"{b.process_cpu_s:.1f}",
             _ratio(b.process_cpu_s, a.process_cpu_s)),
        ]  # fmt: skip
        lines = [
            f"| | first pass (empty cache) | second pass ({self.changed_share:.0%} changed) "
            "| second / first |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {name} | {x} | {y} | {r} |" for name, x, y, r in rows]
        return "\n".join(lines)


def _ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.1%}" if baseline else "n/a"


def make_texts(items: int, changed_share: float, seed: int) -> tuple[list[str], list[str]]:
    """The first pass's texts (mixed lengths, all distinct) and the second's: the same, with
    exactly `changed_share` of them (chosen at random) edited."""
    rng = random.Random(seed)
    first = []
    for i in range(items):
        roll = rng.random()
        words = rng.randint(4, 16) if roll < 0.6 else rng.randint(30, 100) if roll < 0.92 else 300
        first.append(f"doc {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)))
    changed = set(rng.sample(range(items), round(items * changed_share)))
    second = [t + " (revised)" if i in changed else t for i, t in enumerate(first)]
    return first, second


async def run_cache_scenario(
    bootstrap: str,
    *,
    items: int = 100_000,
    changed_share: float = 0.1,
    seed: int = 7,
    provider_tpm: float = PROVIDER_TPM,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> CacheScenario:
    """Both passes against the broker at `bootstrap`; its topics are deleted afterwards."""
    first_texts, second_texts = make_texts(items, changed_share, seed)
    prefix = f"bench.cache.{uuid.uuid4().hex[:8]}."
    with RedisServer() as redis, _simulator(provider_tpm) as base_url:
        settings = load_settings(
            env={},
            overrides={
                "bootstrap_servers": bootstrap, "topic_prefix": prefix,
                "group_id": prefix + "group", "base_url": base_url, "metrics_port": 0,
                "encoding_format": "base64", "max_concurrency": 8, "log_level": "WARNING",
                "cache": "redis", "cache_url": redis.url,
            },
        )  # fmt: skip
        await create_topics(connection_for(settings), load_topic_specs(prefix))
        try:
            progress(f"first pass: {items:,} texts, empty cache")
            first = await _one_pass("first", settings, first_texts, redis, base_url)
            progress(f"second pass: {changed_share:.0%} of the texts changed")
            second = await _one_pass("second", settings, second_texts, redis, base_url)
        finally:
            await delete_topics(bootstrap, await list_topics(bootstrap, prefix))
    return CacheScenario(first, second, changed_share, provider_tpm)


async def _one_pass(
    name: str, settings: Settings, texts: list[str], redis: RedisServer, base_url: str
) -> PassResult:
    await _publish(settings, name, texts)
    before = await _simulator_stats(base_url)
    redis_before, cpu_before = redis.cpu_seconds(), time.process_time()
    metrics = Metrics()
    service = build_service(settings, default_backend(settings), metrics=metrics)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.processor.assigned.wait(), 60)
        started = time.perf_counter()
        while _results(metrics) < len(texts):
            if task.done():
                task.result()  # the processor failed: say why
            await asyncio.sleep(0.01)
        seconds = time.perf_counter() - started
    finally:
        service.stop()
        await asyncio.wait_for(task, 60)
    after = await _simulator_stats(base_url)
    value = metrics.registry.get_sample_value
    return PassResult(
        name=name,
        items=len(texts),
        seconds=seconds,
        calls=after["calls"] - before["calls"],
        inputs=after["inputs"] - before["inputs"],
        tokens=after["tokens"] - before["tokens"],
        hits=int(sum(value("embedstream_cache_hits_total", {"tier": t}) or 0 for t in CACHE_TIERS)),
        misses=int(value("embedstream_cache_misses_total") or 0),
        redis_cpu_s=redis.cpu_seconds() - redis_before,
        process_cpu_s=time.process_time() - cpu_before,
    )


def _results(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value
    return sum(value("embedstream_results_total", {"lane": lane}) or 0 for lane in ("high", "low"))


async def _publish(settings: Settings, pass_name: str, texts: list[str]) -> None:
    topic = topic_names(settings.topic_prefix).requests_low
    producer = producer_for(settings.bootstrap_servers, linger_ms=20, max_batch_size=1_048_576)
    await producer.start()
    try:
        for start in range(0, len(texts), 5000):
            sends = []
            for i in range(start, min(start + 5000, len(texts))):
                key = f"{pass_name}-{i}"
                value = orjson.dumps({"id": key, "text": texts[i]})
                sends.append(await producer.send(topic, value, key=key.encode()))
            await asyncio.gather(*sends)
    finally:
        await producer.stop()


@contextlib.contextmanager
def _simulator(tpm: float) -> Iterator[str]:
    """`embedstream simulate` in a process of its own; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "embedstream", "simulate", "--port", str(port),
               *SIMULATOR_ARGS]  # fmt: skip
    if tpm > 0:
        command += ["--rate-limit-tpm", str(tpm), "--rate-limit-burst-s", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the simulator exited at start")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError("the simulator did not start")


async def _simulator_stats(base_url: str) -> dict[str, int]:
    url = base_url.removesuffix("/v1") + "/stats"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        stats = await response.json()
    return {k: int(stats[k]) for k in ("calls", "inputs", "tokens")}
