"""Kafka work naming a model the provider does not serve waits, and only that model's work:
the other model's requests are embedded meanwhile, nothing is dead-lettered, the processor
stays ready, and the waiting requests are embedded once the provider serves their model.
On the real broker, in front of a vLLM-flavoured simulator that serves one model.

Before issue 42, the provider's 404 for one model counted as refusing everyone: every
model's calls were held, fetching paused and /readyz said "provider unusable".
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from embedsim import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import topic_names

from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    request,
    running_service,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


async def test_an_unknown_model_pauses_its_own_requests_only(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(flavor="vllm", served_model="served")
    async with SimulatorServer(config) as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url, provider_profile="vllm",
                                model="served", max_concurrency=2, max_batch_size=16)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        waiting = {f"w{i}" for i in range(100)}
        served = {f"s{i}" for i in range(100)}
        records = []
        for i in range(100):
            records.append(request(f"w{i}", f"waits {i}", model="deployed-later"))
            records.append(request(f"s{i}", f"served {i}"))
        async with running_service(settings) as service:
            await publish(bootstrap, names.requests_high, records)
            got = await wait_for_ids(bootstrap, names.results, served, timeout_s=30)
            ready_meanwhile = service.processor.provider_ok
            await asyncio.sleep(3.0)  # the waiting model asks again on its backoff meanwhile
            refused = simulator.stats.errors.get("404", 0)
            early = waiting & set(await _ids(bootstrap, names.results))
            simulator.set_faults(served_model=None)  # the model is deployed: any name served
            later = await wait_for_ids(bootstrap, names.results, waiting, timeout_s=30)
            dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.5)
    assert served <= set(got)
    assert ready_meanwhile
    assert early == set()
    assert waiting <= set(later)
    assert dead == []
    assert 1 <= refused <= 12  # one held batch asks again, not one call per batch


async def _ids(bootstrap: str, topic: str) -> list[str]:
    return [orjson.loads(r.value)["id"] for r in await read_topic(bootstrap, topic, idle_s=0.5)]
