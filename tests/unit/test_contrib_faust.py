"""The faust adapter: ordered, bounded, one outcome per event, malformed events never stop it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest
from embedstream.contrib.faust import EmbedOutcome, embed_events
from embedstream.engine.backend import BatchCall
from embedstream.engine.client import BatchingClient
from embedstream.errors import EmbedStreamError, PermanentItemError
from embedstream.testing import RecordingBackend, eventually, vector_for


def request(i: int, text: str | None = None, **extra: Any) -> bytes:
    return orjson.dumps({"id": f"r{i}", "text": text or f"text number {i}", **extra})


async def events_of(values: Iterable[Any]) -> AsyncIterator[Any]:
    for value in values:
        await asyncio.sleep(0)
        yield value


async def collect(stream: AsyncIterator[EmbedOutcome]) -> list[EmbedOutcome]:
    return [outcome async for outcome in stream]


async def test_outcomes_come_in_input_order_with_their_vectors_and_are_batched() -> None:
    backend = RecordingBackend(latency_s=0.01)
    texts = [f"text number {i}" for i in range(200)]
    values: list[Any] = []
    for i, text in enumerate(texts):  # every input shape a faust stream may yield
        doc = {"id": f"r{i}", "text": text, "metadata": {"n": i}}
        values.append([orjson.dumps(doc), orjson.dumps(doc).decode(), doc][i % 3])
    async with BatchingClient(backend, model="m", max_wait_ms=20) as client:
        outcomes = await collect(embed_events(events_of(values), client))
    assert [o.request_id for o in outcomes] == [f"r{i}" for i in range(200)]
    assert all(o.ok and o.error is None and o.reason is None for o in outcomes)
    results = [o.result for o in outcomes if o.result is not None]
    assert [r.embedding for r in results] == [vector_for(t) for t in texts]
    assert [r.metadata for r in results] == [{"n": i} for i in range(200)]
    assert {(r.attempts, r.model, r.dimensions) for r in results} == {(1, "m", 2)}
    assert all(r.latency_ms >= 0 and r.tokens > 0 for r in results)
    assert len(backend.calls) < 200 / 4


async def test_request_fields_reach_the_batch() -> None:
    backend = RecordingBackend()
    async with BatchingClient(backend, model="m", max_wait_ms=5) as client:
        values = [request(1, model="other", dimensions=8, encoding_format="float")]
        [outcome] = await collect(embed_events(events_of(values), client))
    assert outcome.result is not None and outcome.result.model == "other"
    assert backend.calls == [BatchCall("other", ["text number 1"], "float", 8)]


async def test_malformed_events_yield_error_outcomes_and_the_stream_goes_on() -> None:
    backend = RecordingBackend()
    values: list[Any] = [
        request(0),
        b"{not json",
        orjson.dumps({"text": "no id"}),
        request(3),
        {"id": "r4"},  # missing text: the id is kept to key the error
        None,
        b"\xff\xfe",
        "[1, 2]",
        42,
        {"id": "r9", "text": "x", "metadata": {"bad": object()}},
        request(10, text="   "),
        request(11, deadline=1),  # long expired
        request(12),
    ]
    async with BatchingClient(backend, max_wait_ms=5) as client:
        outcomes = await collect(embed_events(events_of(values), client))
    assert [(o.request_id, o.reason) for o in outcomes] == [
        ("r0", None),
        (None, "invalid_json"),
        (None, "missing_id"),
        ("r3", None),
        ("r4", "missing_text"),
        (None, "empty_value"),
        (None, "invalid_utf8"),
        (None, "not_an_object"),
        (None, "not_an_object"),
        ("r9", "invalid_json"),
        ("r10", "empty_text"),
        ("r11", "deadline_exceeded"),
        ("r12", None),
    ]
    assert all((o.result is None) == (o.error is not None) for o in outcomes)
    assert sum(len(c.texts) for c in backend.calls) == 3


async def test_a_provider_error_fails_only_its_own_item() -> None:
    def fail(call: BatchCall) -> EmbedStreamError | None:
        if any("poison" in t for t in call.texts):
            return PermanentItemError("rejected", "provider rejected the input (400)")
        return None

    backend = RecordingBackend(latency_s=0.005, fail=fail)
    values = [request(i, text="poison" if i == 7 else None) for i in range(20)]
    async with BatchingClient(backend, max_wait_ms=20) as client:
        outcomes = await collect(embed_events(events_of(values), client))
    assert [o.request_id for o in outcomes] == [f"r{i}" for i in range(20)]
    failed = [o for o in outcomes if not o.ok]
    assert [(o.request_id, o.reason) for o in failed] == [("r7", "rejected")]
    assert failed[0].error == "provider rejected the input (400)"


async def test_never_more_than_max_pending_events_outstanding() -> None:
    yielded = 0
    received = 0
    peak = 0

    async def instrumented() -> AsyncIterator[bytes]:
        nonlocal yielded, peak
        for i in range(60):
            yielded += 1
            peak = max(peak, yielded - received)
            yield request(i)

    backend = RecordingBackend(latency_s=0.02)
    async with BatchingClient(backend, max_wait_ms=5) as client:
        async for outcome in embed_events(instrumented(), client, max_pending=5):
            assert outcome.ok
            received += 1
            assert yielded - received <= 5
            await asyncio.sleep(0)  # a consumer that gives the loop a turn per outcome
    assert received == 60
    assert peak == 5  # the bound is reached (concurrency happened) and never exceeded
    assert len(backend.calls) < 60


async def test_an_error_from_the_stream_propagates_after_earlier_outcomes() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield request(0)
        yield request(1)
        raise RuntimeError("broker gone")

    seen: list[str | None] = []
    async with BatchingClient(RecordingBackend(), max_wait_ms=5) as client:
        with pytest.raises(RuntimeError, match="broker gone"):
            async for outcome in embed_events(broken(), client):
                seen.append(outcome.request_id)
    assert seen == ["r0", "r1"]


async def test_max_pending_must_be_positive() -> None:
    async with BatchingClient(RecordingBackend()) as client:
        with pytest.raises(ValueError, match="max_pending"):
            await anext(embed_events(events_of([]), client, max_pending=0))


async def test_with_a_faust_agent_events_are_acked_only_after_their_outcome() -> None:
    faust = pytest.importorskip("faust")
    # faust-streaming 0.15 has no memory:// transport; test_context() never connects anyway.
    app = faust.App(
        "t",
        broker="kafka://localhost:1",
        store="memory://",
        value_serializer="raw",
    )
    requests_topic = app.topic("embed.requests", value_serializer="raw")
    backend = RecordingBackend(latency_s=0.01)
    client = BatchingClient(backend, model="m", max_wait_ms=20)
    outcomes: list[EmbedOutcome] = []
    put: list[Any] = []  # the faust events, in the order they were put
    acked_when_handled: list[list[bool]] = []

    async def embed_agent(stream: Any) -> None:
        async for outcome in embed_events(stream, client):
            acked_when_handled.append([event.message.acked for event in put])
            outcomes.append(outcome)

    embed = app.agent(requests_topic)(embed_agent)

    client.start()
    try:
        async with embed.test_context() as agent:
            for i in range(30):
                put.append(await agent.put(request(i)))
            put.append(await agent.put(b"{oops"))
            await eventually(lambda: len(outcomes) == 31 and put[-1].message.acked)
    finally:
        await client.close()
    assert [o.request_id for o in outcomes] == [f"r{i}" for i in range(30)] + [None]
    assert outcomes[-1].reason == "invalid_json"
    results = [o.result for o in outcomes if o.result is not None]
    assert [r.embedding for r in results] == [vector_for(f"text number {i}") for i in range(30)]
    assert len(backend.calls) < 30
    # When outcome k is handled, exactly the k events before it are acked: its own event and
    # the ones read ahead are not (a crash now would redeliver them).
    for k, acked in enumerate(acked_when_handled):
        assert acked == [j < k for j in range(len(acked))]
    assert any(len(acked) > k + 1 for k, acked in enumerate(acked_when_handled))  # read ahead
    assert all(event.message.acked for event in put)
