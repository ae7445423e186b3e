"""A text wanted by two processes at the same time is paid once (issue 43), through claims in
a real `redis-server`: the first to cut a call claims the text, the other watches for its
vector instead of sending it; a claim whose call failed lets the other send it. Bulk lanes
(low, backfill) only: online and high callers wait for no other process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from embedsim.config import SimulatorConfig
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.core.cachekeys import cache_key, provider_identity
from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.cache_tiers import CLAIM_SUFFIX
from embedstream.engine.client import BatchingClient
from embedstream.testing import eventually
from embedstream.testing.redis import RedisServer

pytestmark = pytest.mark.integration

MODEL = "text-embedding-3-small"
DIMS = 256  # the simulator's default


async def test_a_text_two_processes_send_at_once_is_paid_once(redis_server: RedisServer) -> None:
    # Each call takes 300 ms: the second process cuts its call while the first one's runs.
    async with SimulatorServer(SimulatorConfig(base_ms=300)) as simulator:
        options: dict[str, Any] = {
            "base_url": simulator.url, "model": MODEL, "cache": "redis",
            "cache_url": redis_server.url, "max_wait_ms": 0,
        }  # fmt: skip
        # Two clients, each with a cache of its own (as two processes have): Redis between.
        async with BatchingClient(**options) as one, BatchingClient(**options) as other:
            first = asyncio.ensure_future(one.embed("the same text", priority="low"))
            await eventually(lambda: simulator.stats.in_flight == 1, 10, 0.01)
            second = asyncio.ensure_future(other.embed("the same text", priority="low"))
            assert await first == expected_vector(MODEL, "the same text", DIMS)
            assert await second == expected_vector(MODEL, "the same text", DIMS)
            # Another text, both at once: whichever claims it first sends it.
            both = await asyncio.gather(
                one.embed("another", priority="low"), other.embed("another", priority="low")
            )
            assert list(both) == [expected_vector(MODEL, "another", DIMS)] * 2
    assert simulator.stats.inputs == 2  # each text once
    # Every claim ended with its vector.
    assert not any(claimed(redis_server, simulator, t) for t in ("the same text", "another"))


async def test_when_the_claiming_process_stops_mid_call_the_other_sends_the_text(
    redis_server: RedisServer,
) -> None:
    """The first process is closed while its call runs (the call abandoned): its claim ends
    without a vector, and the process that waited for it sends the text itself."""
    async with SimulatorServer(SimulatorConfig(base_ms=1000)) as simulator:
        options: dict[str, Any] = {
            "base_url": simulator.url, "model": MODEL, "cache": "redis",
            "cache_url": redis_server.url, "max_wait_ms": 0,
        }  # fmt: skip
        async with BatchingClient(**options) as other:
            one = BatchingClient(**options)
            one.start()
            first = one.submit("a text left halfway", priority="low")
            await eventually(lambda: simulator.stats.in_flight == 1, 10, 0.01)
            second = asyncio.ensure_future(other.embed("a text left halfway", priority="low"))
            cache = other._cache
            assert cache is not None
            await eventually(lambda: len(cache.in_flight) == 1, 10, 0.01)
            await one.close(timeout_s=0.01)  # gives up on its call
            assert first.done() and first.exception() is not None
            assert await second == expected_vector(MODEL, "a text left halfway", DIMS)
    assert simulator.stats.calls == 2
    assert not claimed(redis_server, simulator, "a text left halfway")


def claimed(redis: RedisServer, simulator: SimulatorServer, text: str) -> bool:
    provider = provider_identity(simulator.url, "openai")
    key = cache_key(provider, BucketKey(Priority.LOW, MODEL, "float", None), text)
    return bool(redis.command("EXISTS", key + CLAIM_SUFFIX))
