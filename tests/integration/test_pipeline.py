"""The happy path end to end on Apache Kafka: every request gets exactly one correct result."""

from __future__ import annotations

import asyncio
import math
import random

import aiohttp
import pytest
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.app_high_thread import SNAPSHOT_EVERY_S
from embedstream.kafka.admin import topic_names
from embedstream.settings import Settings
from embedstream.tools.embedded import free_port

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    publish,
    read_topic,
    request,
    running_processor,
    running_service,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

N = 5000


async def _get(settings: Settings, path: str, *, status_only: bool = False) -> str:
    url = f"http://127.0.0.1:{settings.metrics_port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return str(response.status) if status_only else await response.text()


def _sample(exposition: str, series: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not exported")


def _texts(n: int) -> dict[str, str]:
    rng = random.Random(11)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "kafka",
        "vector",
        "batch",
        "lag",
        "window",
        "token",
    ]
    return {
        f"id-{i}": " ".join(rng.choices(words, k=rng.randint(1, 60))) + f" {i}" for i in range(n)
    }


@pytest.mark.parametrize("high_thread", [False, True], ids=["one-processor", "high-thread"])
async def test_every_request_gets_exactly_one_correct_result(
    bootstrap: str, unique_prefix: str, high_thread: bool
) -> None:
    async with SimulatorServer() as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, max_batch_size=64, metrics_port=free_port(),
            high_thread=high_thread,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = _texts(N)
        ids = list(texts)
        high = [request(i, texts[i]) for i in ids[: N // 5]]
        low = [request(i, texts[i]) for i in ids[N // 5 :]]
        async with running_service(settings) as service:
            await publish(bootstrap, names.requests_high, high)
            await publish(bootstrap, names.requests_low, low)
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=180)
            assert set(seen) == set(ids)
            main_lanes = set(service.processor.lane_by_partition().values())
            if high_thread:  # the group gave the high topic to the thread's member, all of it
                assert service.high is not None and main_lanes == {"low", "retry"}
                await asyncio.sleep(2 * SNAPSHOT_EVERY_S)
                high_partitions = service.high.snapshot.lanes
                assert set(high_partitions.values()) == {"high"}
                assert {tp.topic for tp in high_partitions} == {names.requests_high}
            else:
                assert service.high is None and main_lanes == {"high", "low", "retry"}
            await asyncio.sleep(1.5)  # a health sample after the last results
            exposition = await _get(settings, "/metrics")
            # the health loop reports both processors' partitions
            labels = f'lane="high",partition="0",topic="{names.requests_high}"'
            assert f"embedstream_consumer_lag{{{labels}}}" in exposition
            assert _sample(exposition, 'embedstream_results_total{lane="high"}') == N // 5
            assert _sample(exposition, 'embedstream_results_total{lane="low"}') == N - N // 5
            assert _sample(exposition, "embedstream_batch_size_count") < N / 4
            assert await _get(settings, "/readyz", status_only=True) == "200"
        # After a clean stop, read everything once more: no duplicates, correct vectors.
        records = await read_topic(bootstrap, names.results)
        assert len(records) == N
        for record in records:
            import orjson

            doc = orjson.loads(record.value)
            assert record.key == doc["id"].encode()
            expected = expected_vector(settings.model, texts[doc["id"]], doc["dimensions"])
            assert doc["attempts"] == 1
            assert all(
                math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
                for a, b in zip(doc["embedding"], expected, strict=True)
            )
        lag = await committed_lag(
            bootstrap, settings.group_id, [names.requests_high, names.requests_low]
        )
        assert lag == {names.requests_high: 0, names.requests_low: 0}
        assert simulator.stats.calls < N / 4  # batching happened


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
async def test_results_can_be_compressed(bootstrap: str, unique_prefix: str, codec: str) -> None:
    """compression_type applies to every record produced; consumers read them as usual."""
    async with SimulatorServer() as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, compression_type=codec, max_batch_size=64
        )
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = _texts(300)
        async with running_processor(settings):
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            seen = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=60)
        assert set(seen) == set(texts)
        for request_id, docs in seen.items():
            expected = expected_vector(settings.model, texts[request_id], docs[0]["dimensions"])
            assert math.isclose(docs[0]["embedding"][0], expected[0], rel_tol=1e-5)
