"""The online lane beside the Kafka lanes on Apache Kafka, through the official `openai` SDK:
`embedstream serve` and a processor, each with an engine of its own (as the processes of
`embedstream run` with http_port are), on one provider budget (the ledger their supervisor
holds, here held by the test). The provider's vectors in OpenAI's shapes beside Kafka work; an
online request on the gateway keeps slots and caps the processor's calls; a 429 the
processor meets answers online callers 429 at once; no Kafka work lost."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.app.gateway import Gateway
from embedstream.core.lanes import Priority
from embedstream.engine.budget_socket import LedgerServer
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import Settings
from embedstream.testing import eventually
from embedstream.tools.embedded import free_port

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    publish,
    read_topic,
    request,
    running_service,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


def close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b, strict=True)
    )


@contextlib.asynccontextmanager
async def lanes(
    bootstrap: str, prefix: str, url: str, tmp_path: Path, **values: Any
) -> AsyncIterator[tuple[Settings, Gateway, Settings]]:
    """A gateway (the online lane) and a processor's settings, on one ledger."""
    ledger = LedgerServer(tmp_path / "budget.sock")
    await ledger.start()
    common = {"budget_url": ledger.url, **values}
    online = settings_for(bootstrap, prefix, url, http_port=free_port(),
                          http_api_keys="rag:sk-rag", **common)  # fmt: skip
    processor = settings_for(bootstrap, prefix, url, **common)
    gateway = Gateway(online)
    started = asyncio.Event()
    serving = asyncio.create_task(gateway.run(started))
    await started.wait()
    try:
        yield online, gateway, processor
    finally:
        gateway.stop()
        await serving
        await ledger.stop()


@contextlib.asynccontextmanager
async def sdk(settings: Settings) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{settings.http_port}/v1", api_key="sk-rag", max_retries=0
    )
    try:
        yield client
    finally:
        await client.close()


async def test_callers_get_the_providers_vectors_beside_kafka_work(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    """The gateway's answers, metrics and the processor's Kafka results; the two share the
    budget: right after an online answer, the processor's low calls are capped for it."""
    async with (
        SimulatorServer() as simulator,
        lanes(bootstrap, unique_prefix, simulator.url, tmp_path, max_batch_size=256) as (
            settings,
            gateway,
            processor_settings,
        ),
    ):
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        backlog = [request(f"low-{i}", f"bulk text {i}") for i in range(3000)]
        model = settings.model
        async with running_service(processor_settings) as service, sdk(settings) as client:
            await publish(bootstrap, names.requests_low, backlog)
            texts = [f"query number {i}" for i in range(600)]  # more than one call
            floats = await client.embeddings.create(
                model=model, input=texts, encoding_format="float"
            )
            # The SDK asks for base64 unless told otherwise, and decodes it.
            decoded = await client.embeddings.create(model=model, input="what is a lane?")
            plan = service.processor.parts.governor
            # the online lane is active in the fleet: the processor's low calls are cut for it
            await eventually(lambda: plan.call_cap(Priority.LOW, 2048) <= 256, timeout_s=3)
            assert plan.lane_slots(Priority.LOW) <= processor_settings.max_concurrency - 1
            short = await client.embeddings.create(model=model, input="short", dimensions=64)
            ids = await client.embeddings.create(model=model, input=[[10, 20, 30], [40]])
            raw = await client.embeddings.with_raw_response.create(
                model=model, input="raw", encoding_format="base64"
            )
            direct = openai.AsyncOpenAI(base_url=simulator.url, api_key="x", max_retries=0)
            from_provider = await direct.embeddings.create(
                model=model, input=[[10, 20, 30], [40]], encoding_format="float"
            )
            await direct.close()
            seen = await wait_for_ids(
                bootstrap, names.results, {f"low-{i}" for i in range(3000)}, timeout_s=120
            )
            # The pace learnt the provider's count from the calls' usage: the simulator
            # counts words and punctuation, under our bytes / 3 estimate.
            ratio = plan.calibration.ratio
            assert ratio is not None and 0.2 < ratio < 0.9, ratio
            sample = gateway.metrics.registry.get_sample_value
            online_200 = sample(
                "embedstream_online_requests_total", {"key": "rag", "status": "200"}
            )
            online_items = sample("embedstream_item_wait_seconds_count", {"lane": "online"})
        dims = 256  # the simulator's default
        assert [d.index for d in floats.data] == list(range(600))
        for text, datum in zip(texts, floats.data, strict=True):
            assert close(datum.embedding, expected_vector(model, text, dims))
        assert close(decoded.data[0].embedding, expected_vector(model, "what is a lane?", dims))
        assert close(short.data[0].embedding, expected_vector(model, "short", 64))
        pairs = zip(ids.data, from_provider.data, strict=True)
        assert [close(a.embedding, b.embedding) for a, b in pairs] == [True, True]
        body = raw.parse()
        vector = np.frombuffer(base64.b64decode(str(body.data[0].embedding)), dtype="<f4")
        assert close(vector.tolist(), expected_vector(model, "raw", dims))
        assert floats.usage.prompt_tokens > 600
        assert online_200 == 5
        assert online_items == 605  # every input went through the online lane's own buckets
        assert len(seen) == 3000
        results = await read_topic(bootstrap, names.results)
        assert len(results) == 3000  # online answers never go to Kafka
        assert all(not r.key.startswith(b"online") for r in results)
        # one budget: the provider never had more calls than the 4 slots between the two
        assert simulator.stats.peak_received <= processor_settings.max_concurrency


async def test_a_429_the_processor_meets_answers_online_callers_429_at_once(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    """The 429 gate is the budget's: the processor's call meets the provider's rate limit,
    and the gateway, which made no call, refuses its callers at once instead of waiting out
    its deadline; no Kafka work is lost."""
    async with (
        SimulatorServer() as simulator,
        lanes(bootstrap, unique_prefix, simulator.url, tmp_path, online_timeout_s=1.0) as (
            settings,
            _,
            processor_settings,
        ),
    ):
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = {f"k{i}" for i in range(300)}
        async with running_service(processor_settings), sdk(settings) as client:
            await client.embeddings.create(model=settings.model, input="warm")
            simulator.set_faults(rate_limit_for_s=4.0)  # every call 429s with retry-after
            await publish(bootstrap, names.requests_low, [request(i, i) for i in sorted(ids)])
            # The first call to meet the window closes the gate for the whole retry-after.
            await eventually(lambda: simulator.stats.rejected_429 > 0, timeout_s=10)
            await asyncio.sleep(0.1)  # the gate reaches the ledger
            calls_before = simulator.stats.calls
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(openai.RateLimitError) as caught:
                await client.embeddings.create(model=settings.model, input="now please")
            waited = loop.time() - started
            online_calls = simulator.stats.calls - calls_before
            seen = await wait_for_ids(bootstrap, names.results, ids, timeout_s=60)
        assert waited < settings.online_timeout_s  # answered at once, not at the deadline
        assert int(caught.value.response.headers["retry-after"]) >= 1
        assert online_calls <= 1  # the gateway held its call: the fleet's gate was closed
        assert set(seen) == ids and all(len(v) == 1 for v in seen.values())
        lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
        assert lag == {names.requests_low: 0}


async def test_sink_search_embeds_the_question_through_an_online_lane() -> None:
    import uuid

    from embedsim.model import expected_vector as provider_vector
    from embedstream.app.gateway import Gateway
    from embedstream.app.store_writer import OnlineLaneAddress, search_store
    from embedstream.settings import load_settings
    from embedstream.stores.pgvector import PgStoreConfig, PgVectorStore
    from embedstream.testing.postgres import PostgresUnavailable, start_postgres
    from embedstream.wire import ChunkResult

    try:
        postgres = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    table = f"t_{uuid.uuid4().hex[:12]}"
    with postgres:
        config = PgStoreConfig(dsn=postgres.dsn, table=table, model="m")
        async with PgVectorStore(config) as store:
            chunks = [
                ChunkResult(doc, "v1", 0, 1, (0, 5), provider_vector("m", text, 256), "m", 256,
                            1, False, None, 1, 1.0, text)
                for doc, text in (("alpha", "alpha text"), ("beta", "beta text"))
            ]  # fmt: skip
            await store.apply(chunks)
        async with SimulatorServer() as simulator:
            lane_settings = load_settings(env={}, overrides={"base_url": simulator.url})
            gateway = Gateway(lane_settings, port=0)
            started = asyncio.Event()
            serving = asyncio.create_task(gateway.run(started))
            await started.wait()
            try:
                searcher = load_settings(env={}, overrides={
                    "store_dsn": postgres.dsn, "store_table": table, "store_model": "m",
                    # Nothing listens here: the question must go through the online lane.
                    "base_url": f"http://127.0.0.1:{free_port()}/v1",
                })  # fmt: skip
                lane = OnlineLaneAddress(f"http://127.0.0.1:{gateway.online.port}/v1")
                hits = await search_store(searcher, "alpha text", 2, lane)
                answered = gateway.metrics.registry.get_sample_value(
                    "embedstream_online_requests_total", {"key": "anonymous", "status": "200"}
                )
            finally:
                gateway.stop()
                await serving
    assert [hit.doc_id for hit in hits] == ["alpha", "beta"]
    assert answered == 1.0
