"""The happy path end to end on Apache Kafka: every request gets exactly one correct result."""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path

import aiohttp
import pytest
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.engine.budget_socket import LedgerServer
from embedstream.kafka.client.admin import topic_names
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


async def test_every_request_gets_exactly_one_correct_result(
    bootstrap: str, unique_prefix: str
) -> None:
    async with SimulatorServer() as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, max_batch_size=64, metrics_port=free_port()
        )
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
            lanes = set(service.processor.lane_by_partition().values())
            assert lanes == {"high", "low", "retry"}
            await asyncio.sleep(1.5)  # a health sample after the last results
            exposition = await _get(settings, "/metrics")
            labels = f'lane="high",partition="0",topic="{names.requests_high}"'
            assert f"embedstream_consumer_lag{{{labels}}}" in exposition
            assert _sample(exposition, 'embedstream_results_total{lane="high"}') == N // 5
            assert _sample(exposition, 'embedstream_results_total{lane="low"}') == N - N // 5
            assert _sample(exposition, "embedstream_batch_size_count") < N / 4
            assert await _get(settings, "/readyz", status_only=True) == "200"
        await _check_results(bootstrap, unique_prefix, settings, texts, simulator)


async def test_a_high_and_a_bulk_processor_split_the_topics_and_every_request_gets_one_result(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    """input_lanes: one member of the group reads the high topics, another every other one,
    both on one provider budget (the ledger a supervisor holds, here in the test)."""
    async with SimulatorServer() as simulator:
        ledger = LedgerServer(tmp_path / "budget.sock")
        await ledger.start()
        common = {"max_batch_size": 64, "budget_url": ledger.url, "max_concurrency": 4}
        high_settings = settings_for(bootstrap, unique_prefix, simulator.url, input_lanes="high",
                                     metrics_port=free_port(), **common)  # fmt: skip
        bulk_settings = settings_for(bootstrap, unique_prefix, simulator.url, input_lanes="bulk",
                                     metrics_port=free_port(), **common)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(high_settings)
        texts = _texts(N)
        ids = list(texts)
        high = [request(i, texts[i]) for i in ids[: N // 5]]
        low = [request(i, texts[i]) for i in ids[N // 5 :]]
        try:
            async with (
                running_service(high_settings) as high_service,
                running_service(bulk_settings) as bulk_service,
            ):
                await publish(bootstrap, names.requests_high, high)
                await publish(bootstrap, names.requests_low, low)
                seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=180)
                assert set(seen) == set(ids)
                high_lanes = set(high_service.processor.lane_by_partition().values())
                bulk_lanes = set(bulk_service.processor.lane_by_partition().values())
                assert (high_lanes, bulk_lanes) == ({"high"}, {"low", "retry"})
                high_metrics = await _get(high_settings, "/metrics")
                bulk_metrics = await _get(bulk_settings, "/metrics")
                assert _sample(high_metrics, 'embedstream_results_total{lane="high"}') == N // 5
                assert _sample(bulk_metrics, 'embedstream_results_total{lane="low"}') == N - N // 5
                assert _sample(bulk_metrics, "embedstream_budget_members") == 2.0
                assert set(ledger.ledger.members) and len(ledger.ledger.members) == 2
        finally:
            await ledger.stop()
        assert simulator.stats.peak_received <= 4  # one budget: 4 slots between them
        await _check_results(bootstrap, unique_prefix, high_settings, texts, simulator)


async def _check_results(
    bootstrap: str,
    prefix: str,
    settings: Settings,
    texts: dict[str, str],
    simulator: SimulatorServer,
) -> None:
    names = topic_names(prefix)
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
