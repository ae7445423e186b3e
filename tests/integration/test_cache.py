"""The embedding cache on real servers: Apache Kafka, `redis-server` and the simulator.

Hits and misses through the processor and `BatchingClient`, TTL expiry, a model or dimensions
change never serving an old vector, Redis stopped mid-run (nothing lost, nothing wrong, calls
fall back) and restarted (hits resume).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.core.cachekeys import cache_key, provider_identity
from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES, MemoryTier, RedisTier
from embedstream.engine.client import BatchingClient
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import Settings
from embedstream.testing.redis import RedisServer
from embedstream.tools.embedded import free_port
from embedstream.wire import decode_base64

from tests.integration.helpers import (
    create_all_topics,
    publish,
    request,
    running_service,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

MODEL = "text-embedding-3-small"
DIMS = 256  # the simulator's default
ONE_ENTRY = SIZING_ENTRY_BYTES  # a byte bound that keeps one vector in the in-process tier


def cache_settings(
    bootstrap: str, prefix: str, simulator: SimulatorServer, redis: RedisServer, **more: Any
) -> Settings:
    values: dict[str, Any] = {
        "cache": "redis",
        "cache_url": redis.url,
        "cache_max_bytes": ONE_ENTRY,  # the in-process tier holds almost nothing: hits from Redis
        "max_batch_size": 64,
        **more,
    }
    return settings_for(bootstrap, prefix, simulator.url, **values)


async def produce_and_collect(
    settings: Settings, texts: dict[str, str], timeout_s: float = 60.0
) -> dict[str, list[dict[str, Any]]]:
    names = topic_names(settings.topic_prefix)
    await publish(
        settings.bootstrap_servers,
        names.requests_low,
        [request(request_id, text) for request_id, text in texts.items()],
    )
    return await wait_for_ids(settings.bootstrap_servers, names.results, set(texts), timeout_s)


def check_results(found: dict[str, list[dict[str, Any]]], texts: dict[str, str]) -> list[bool]:
    """Each id has exactly one result, carrying its own text's vector; its cached flags."""
    flags = []
    for request_id, text in texts.items():
        [result] = found[request_id]
        assert result["embedding"] == expected_vector(MODEL, text, DIMS), request_id
        flags.append(result["cached"])
    return flags


async def test_a_second_processor_answers_repeats_from_redis_and_sends_only_new_texts(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    settings = cache_settings(
        bootstrap, unique_prefix, simulator, redis_server, metrics_port=free_port()
    )
    await create_all_topics(settings)
    first = {f"a-{i}": f"document number {i}" for i in range(200)}
    async with running_service(settings):
        found = await produce_and_collect(settings, first)
    assert check_results(found, first) == [False] * 200
    assert simulator.stats.inputs == 200
    # Another member (its own memory tier) re-ingests them with 10% changed.
    edited = {i: " (edited)" if i % 10 == 0 else "" for i in range(200)}
    second = {f"b-{i}": f"document number {i}{edited[i]}" for i in range(200)}
    async with running_service(settings) as service:
        found = await produce_and_collect(settings, second)
        metrics = await _metrics(service.metrics_port)
    flags = check_results(found, second)
    assert flags == [i % 10 != 0 for i in range(200)]
    assert simulator.stats.inputs == 220  # only the 20 edited texts were sent
    assert _sample(metrics, 'embedstream_cache_hits_total{tier="redis"}') == 180
    assert _sample(metrics, "embedstream_cache_misses_total") == 20


async def test_vectors_expire_after_the_ttl(
    simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    options: dict[str, Any] = {
        "base_url": simulator.url,
        "model": MODEL,
        "cache": "redis",
        "cache_url": redis_server.url,
        "cache_ttl_s": 1.0,
    }
    async with BatchingClient(**options) as client:
        await client.embed(["short-lived"])
    key = cache_key(
        provider_identity(simulator.url, "openai"),
        BucketKey(Priority.LOW, MODEL, "float", None),
        "short-lived",
    )
    remaining_ms = redis_server.command("PTTL", key)
    assert isinstance(remaining_ms, int) and 0 < remaining_ms <= 1000
    async with BatchingClient(**options) as client:  # a fresh memory tier: Redis answers
        await client.embed(["short-lived"])
    assert simulator.stats.inputs == 1
    await asyncio.sleep(1.2)  # past the TTL (Redis expires the key itself)
    assert redis_server.command("EXISTS", key) == 0
    async with BatchingClient(**options) as client:
        [vector] = await client.embed(["short-lived"])
    assert simulator.stats.inputs == 2
    assert vector == expected_vector(MODEL, "short-lived", DIMS)


async def test_a_model_or_dimensions_change_never_serves_an_old_vector(
    simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    async with BatchingClient(
        base_url=simulator.url, model=MODEL, cache="redis", cache_url=redis_server.url
    ) as client:
        small = await client.embed("same text", dimensions=8)
        larger = await client.embed("same text", dimensions=16)
        other = await client.embed("same text", dimensions=8, model="other-model")
        assert simulator.stats.inputs == 3
        again = await client.embed("same text", dimensions=8, encoding_format="base64")
        assert simulator.stats.inputs == 3  # this one was cached
    assert small == expected_vector(MODEL, "same text", 8)
    assert larger == expected_vector(MODEL, "same text", 16)
    assert other == expected_vector("other-model", "same text", 8)
    assert isinstance(again, str) and decode_base64(again) == small


async def test_a_client_whose_redis_is_down_embeds_from_the_provider(
    simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    redis_server.stop()
    async with BatchingClient(
        base_url=simulator.url,
        model=MODEL,
        cache="redis",
        cache_url=redis_server.url,
        cache_max_bytes=ONE_ENTRY,
    ) as client:
        vectors = await client.embed(["one", "two", "one"])
    assert vectors == [expected_vector(MODEL, t, DIMS) for t in ["one", "two", "one"]]


async def test_vectors_computed_while_redis_was_down_or_paused_reach_it_once_it_answers(
    simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    """Vectors computed during an outage and in the pause just after Redis came back used to
    stay in the memory tier only: another process paid for them again."""
    options: dict[str, Any] = {
        "base_url": simulator.url,
        "model": MODEL,
        "cache": "redis",
        "cache_url": redis_server.url,
        "cache_max_bytes": ONE_ENTRY,
    }
    down = [f"while down {i}" for i in range(20)]
    back = [f"just after the restart {i}" for i in range(20)]
    cache = EmbeddingCache(
        provider_identity(simulator.url, "openai"),
        MemoryTier(0, max_bytes=ONE_ENTRY),
        RedisTier(redis_server.url, 0, 0.25),
    )
    redis_server.stop()
    async with BatchingClient(**options, embedding_cache=cache) as client:
        await client.embed(down)
        await cache.flush()  # the look-up and the write failed: Redis is paused
        redis_server.start()  # same port, empty
        await client.embed(back)  # within the pause: Redis is not asked
        for _ in range(200):  # no more traffic: written once the pause is over
            if redis_server.command("DBSIZE") == 40:
                break
            await asyncio.sleep(0.02)
        assert redis_server.command("DBSIZE") == 40
    served = simulator.stats.inputs
    async with BatchingClient(**options) as other:  # another process: only Redis knows them
        vectors = await other.embed(down + back)
    assert simulator.stats.inputs == served
    assert vectors == [expected_vector(MODEL, t, DIMS) for t in down + back]


async def test_redis_stopped_mid_run_loses_nothing_and_hits_resume_after_a_restart(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, redis_server: RedisServer
) -> None:
    port = free_port()
    settings = cache_settings(bootstrap, unique_prefix, simulator, redis_server, metrics_port=port)
    await create_all_topics(settings)
    async with running_service(settings):
        warm = {f"warm-{i}": f"text {i}" for i in range(100)}
        assert check_results(await produce_and_collect(settings, warm), warm) == [False] * 100
        await _until_redis_holds(redis_server, 100)  # no write of the warm-up still under way

        redis_server.stop()
        during = {f"down-{i}": f"text {i}" for i in range(50)}
        during |= {f"down-new-{i}": f"new text {i}" for i in range(50)}
        served_before = simulator.stats.inputs
        found = await produce_and_collect(settings, during)
        # Every request answered, each with its own text's vector: from the provider, but for
        # the one entry the in-process tier holds (cache_max_bytes=ONE_ENTRY).
        flags = check_results(found, during)
        from_memory = sum(flags[:50])
        assert from_memory <= 1 and flags[50:] == [False] * 50
        assert simulator.stats.inputs - served_before >= 99
        # Ready with Redis down (a loaded machine may make the broker probe flap: retry that).
        assert await _eventually_ready(port)
        metrics = await _metrics(port)
        assert _sample(metrics, 'embedstream_cache_errors_total{operation="get"}') >= 1

        redis_server.start()  # same port, empty (no persistence)
        await asyncio.sleep(1.1)  # past the pause after the last failure
        refill = {f"refill-{i}": f"after restart {i}" for i in range(50)}
        assert check_results(await produce_and_collect(settings, refill), refill) == [False] * 50
        # Written to Redis in the background, just after the results: the refill, and the
        # vectors computed while Redis was down (kept for it, not only in memory). A text the
        # in-process tier answered was not computed, so there is nothing of it to write.
        expected = 50 + 100 - from_memory
        assert await _until_redis_holds(redis_server, expected), f"{from_memory} from memory"
        repeat = {f"repeat-{i}": f"after restart {i}" for i in range(50)}
        served_before = simulator.stats.inputs
        assert check_results(await produce_and_collect(settings, repeat), repeat) == [True] * 50
        assert simulator.stats.inputs == served_before


async def _until_redis_holds(redis_server: RedisServer, keys: int, timeout_s: float = 5.0) -> bool:
    for _ in range(int(timeout_s / 0.02)):
        if redis_server.command("DBSIZE") == keys:
            return True
        await asyncio.sleep(0.02)
    return bool(redis_server.command("DBSIZE") == keys)


async def _eventually_ready(port: int, timeout_s: float = 10.0) -> bool:
    url = f"http://127.0.0.1:{port}/readyz"
    async with aiohttp.ClientSession() as session:
        for _ in range(int(timeout_s / 0.2)):
            async with session.get(url) as response:
                if response.status == 200:
                    return True
            await asyncio.sleep(0.2)
    return False


async def _metrics(port: int | None) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


def _sample(exposition: str, series: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not exported")
