"""The online lane of a processor on Apache Kafka, through the official `openai` SDK: the
provider's vectors in OpenAI's shapes beside Kafka work, through a rebalance, and 429s at
once under overload with no Kafka work lost."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import openai
import pytest
from embedsim import SimulatorConfig
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.app_online_thread import THREAD_NAME, OnlineThread
from embedstream.core import configured
from embedstream.core.lanes import Priority
from embedstream.core.tracing import NULL_TRACER
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.kafka.admin import topic_names
from embedstream.ops.metrics import Metrics
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
async def sdk(settings: Settings) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{settings.http_port}/v1", api_key="sk-rag", max_retries=0
    )
    try:
        yield client
    finally:
        await client.close()


def online_settings(bootstrap: str, prefix: str, url: str, **values: Any) -> Settings:
    return settings_for(
        bootstrap, prefix, url, http_port=free_port(), http_api_keys="rag:sk-rag", **values
    )


def online_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name == THREAD_NAME}


@pytest.mark.parametrize("own_thread", [False, True], ids=["on-the-loop", "online-thread"])
async def test_callers_get_the_providers_vectors_beside_kafka_work(
    bootstrap: str, unique_prefix: str, own_thread: bool
) -> None:
    """The same answers, metrics and Kafka results with the lane on the processor's loop and
    on a thread of its own (online_thread); either way the processor's governor counts the
    lane's calls: right after an answer, the Kafka lanes' calls are capped for it."""
    async with SimulatorServer() as simulator:
        settings = online_settings(bootstrap, unique_prefix, simulator.url, max_batch_size=256,
                                   online_thread=own_thread)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        backlog = [request(f"low-{i}", f"bulk text {i}") for i in range(3000)]
        model = settings.model
        async with running_service(settings) as service, sdk(settings) as client:
            await publish(bootstrap, names.requests_low, backlog)
            texts = [f"query number {i}" for i in range(600)]  # more than one call
            floats = await client.embeddings.create(
                model=model, input=texts, encoding_format="float"
            )
            # The SDK asks for base64 unless told otherwise, and decodes it.
            decoded = await client.embeddings.create(model=model, input="what is a lane?")
            governor = service.processor.parts.governor
            capped = governor.call_cap(Priority.LOW, 2048)  # the lane active: low cut for it
            threads_while_serving = online_threads()
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
            sample = service.metrics.registry.get_sample_value
            online_200 = sample(
                "embedstream_online_requests_total", {"key": "rag", "status": "200"}
            )
            online_items = sample("embedstream_item_wait_seconds_count", {"lane": "online"})
            await eventually(lambda: governor.lane_in_flight(Priority.ONLINE) == 0)
        assert capped <= 256
        assert threads_while_serving == ({THREAD_NAME} if own_thread else set())
        assert online_threads() == set()  # stopped with the processor
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


async def test_the_lane_keeps_serving_through_a_rebalance(
    bootstrap: str, unique_prefix: str
) -> None:
    async with SimulatorServer() as simulator:
        settings = online_settings(bootstrap, unique_prefix, simulator.url)
        other = settings_for(bootstrap, unique_prefix, simulator.url)  # same group, no lane
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        answered: list[int] = []
        failures: list[BaseException] = []
        stop = asyncio.Event()
        more = asyncio.Event()

        async def query(client: openai.AsyncOpenAI) -> None:
            while not stop.is_set():
                try:
                    got = await client.embeddings.create(
                        model=settings.model, input=f"q{len(answered)}", encoding_format="float"
                    )
                    answered.append(len(got.data))
                    more.set()
                except openai.APIError as exc:
                    failures.append(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.02)

        async with running_service(settings) as first, sdk(settings) as client:
            querying = asyncio.create_task(query(client))
            await asyncio.wait_for(more.wait(), 10)  # serving before the group changes
            await publish(
                bootstrap, names.requests_low, [request(f"r{i}", "t") for i in range(200)]
            )
            before = len(answered)
            async with running_service(other):  # joins: the group rebalances
                during = len(answered)
                await wait_for_ids(bootstrap, names.results, {f"r{i}" for i in range(200)}, 60)
            after_leave = len(answered)
            more.clear()
            await asyncio.wait_for(more.wait(), 10)  # still answering after the member left
            stop.set()
            await querying
            assert first.processor.joined
        assert failures == []
        assert before > 0 and during >= before and len(answered) > after_leave


async def test_overload_answers_429_at_once_and_loses_no_kafka_work(
    bootstrap: str, unique_prefix: str
) -> None:
    async with SimulatorServer() as simulator:
        settings = online_settings(bootstrap, unique_prefix, simulator.url, online_timeout_s=1.0)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = {f"k{i}" for i in range(300)}
        async with running_service(settings), sdk(settings) as client:
            await client.embeddings.create(model=settings.model, input="warm")
            simulator.set_faults(rate_limit_for_s=4.0)  # every call 429s with retry-after
            await publish(bootstrap, names.requests_low, [request(i, i) for i in sorted(ids)])
            # The first call to meet the window closes the gate for the whole retry-after.
            await eventually(lambda: simulator.stats.rejected_429 > 0, timeout_s=10)
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(openai.RateLimitError) as caught:
                await client.embeddings.create(model=settings.model, input="now please")
            waited = loop.time() - started
            seen = await wait_for_ids(bootstrap, names.results, ids, timeout_s=60)
        assert waited < settings.online_timeout_s  # answered at once, not at the deadline
        assert int(caught.value.response.headers["retry-after"]) >= 1
        assert set(seen) == ids and all(len(v) == 1 for v in seen.values())
        lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
        assert lag == {names.requests_low: 0}


async def test_sink_search_embeds_the_question_through_an_online_lane() -> None:
    import uuid

    from embedsim.model import expected_vector as provider_vector
    from embedstream.app_serve import Gateway
    from embedstream.app_store import search_store
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
                    "online_url": f"http://127.0.0.1:{gateway.online.port}/v1",
                })  # fmt: skip
                hits = await search_store(searcher, "alpha text", 2)
                answered = gateway.metrics.registry.get_sample_value(
                    "embedstream_online_requests_total", {"key": "anonymous", "status": "200"}
                )
            finally:
                gateway.stop()
                await serving
    assert [hit.doc_id for hit in hits] == ["alpha", "beta"]
    assert answered == 1.0


async def test_the_lanes_thread_answers_what_is_in_flight_when_the_processor_stops(
    bootstrap: str, unique_prefix: str
) -> None:
    """The processor stops the lane twice over (stop accepting, then stop): a request already
    sent still gets its vector; a second stop must not cut the lane's drain short."""
    async with SimulatorServer(SimulatorConfig(base_ms=600)) as simulator:
        settings = online_settings(bootstrap, unique_prefix, simulator.url)
        governor = configured.governor(settings, SYSTEM_CLOCK.monotonic)
        lane = OnlineThread(settings, governor, Metrics(), NULL_TRACER)
        await lane.start(settings.http_host, settings.http_port)
        async with sdk(settings) as client:
            asking = asyncio.create_task(
                client.embeddings.create(model=settings.model, input="in flight")
            )
            await eventually(lambda: simulator.stats.calls > 0)
            await lane.stop_accepting()
            await lane.stop_accepting()
            await lane.stop()
            answer = await asking
        assert len(answer.data) == 1 and online_threads() == set()
