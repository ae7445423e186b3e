"""Calls follow the shares on the in-memory cluster: of two low topics, the trickle's items
ride the call after they are read, however much the flood has buffered (counted in calls)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import orjson
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.testing import eventually, vector_for
from embedstream.testing.backends import texts_of
from embedstream.testing.kafka import FakeCluster
from embedstream.tools.bench.baselines import calls_fifo

from tests.unit.harness import NAMES, Harness, item_bound, running

FLOOD, TRICKLE = "t.flood", "t.trickle"


class OneCallAtATime:
    """A provider whose calls each wait to be let through: the test steps them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.let_through = asyncio.Semaphore(0)

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append(texts_of(call))
        await self.let_through.acquire()
        return BatchOutcome([vector_for(t) for t in call.texts], 2, len(call.texts), 0.0)

    async def close(self) -> None:
        return None


def cluster() -> FakeCluster:
    return FakeCluster({NAMES.requests_high: 1, FLOOD: 1, TRICKLE: 1, NAMES.retry: 1,
                        NAMES.results: 1, NAMES.dead_letters: 1})  # fmt: skip


def publish(h: Harness, topic: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        value = orjson.dumps({"id": f"{topic}-{i}", "text": f"{topic} {i}"})
        h.cluster.produce(topic, value, f"{topic}-{i}".encode())


async def calls_of(*, fifo: bool = False, **settings: Any) -> list[tuple[str, ...]]:
    """One flood item in a held call; 48 more of the flood buffered, then 48 of the trickle;
    every call let through one at a time. The texts of each call, in order."""
    backend = OneCallAtATime()
    async with running(backend, cluster=cluster(), topic_requests_low=f"{FLOOD},{TRICKLE}",
                       max_batch_size=8, max_concurrency=2, **item_bound(400),
                       **settings) as h:  # fmt: skip
        batcher = h.service.processor.parts.batcher
        if fifo:
            calls_fifo(batcher)
        publish(h, FLOOD, 1)
        await eventually(lambda: len(backend.calls) == 1)
        publish(h, FLOOD, 48, start=1)
        await eventually(lambda: batcher.buffered == 48)
        publish(h, TRICKLE, 48)
        await eventually(lambda: batcher.buffered == 96)
        made = 1
        while batcher.buffered:  # 97 items: 13 calls of 8 at most (the first of one), or more
            made += 1
            backend.let_through.release()
            await eventually(functools.partial(made_at_least, backend, made))
        for _ in range(2):  # the calls still held
            backend.let_through.release()
        await h.engine_idle()
    return backend.calls


def made_at_least(backend: OneCallAtATime, calls: int) -> bool:
    return len(backend.calls) >= calls


def topics_of(call: tuple[str, ...]) -> list[str]:
    return [text.split()[0] for text in call]


async def test_the_trickle_rides_the_next_call() -> None:
    calls = await calls_of()
    assert topics_of(calls[0]) == [FLOOD]  # held while the rest was read
    assert topics_of(calls[1]).count(TRICKLE) == 4  # the very next call: half of it
    # Inside one topic the order is that of its partition.
    trickle = [text for call in calls for text in call if text.startswith(TRICKLE)]
    assert trickle == [f"{TRICKLE} {i}" for i in range(48)]


async def test_weights_split_the_calls() -> None:
    calls = await calls_of(source_weights=f"{FLOOD}=3")
    for call in calls[1:7]:  # while both have work: 6 of the flood, 2 of the trickle
        assert topics_of(call).count(TRICKLE) == 2 and len(call) == 8


async def test_without_shares_the_trickle_waits_for_the_whole_flood() -> None:
    calls = await calls_of(fifo=True)
    first = next(i for i, call in enumerate(calls) if TRICKLE in topics_of(call))
    assert first == 7  # behind six calls of the flood's 48: what the shares remove


async def test_a_trickle_beside_a_flood_gets_a_call_of_its_own() -> None:
    """One flood item in a held call, 200 more buffered, then one trickle item: the next call
    carries the trickle item alone (seated among 7 flood items it would take as long as
    they do); the flood's calls follow, full."""
    backend = OneCallAtATime()
    settings: dict[str, Any] = {
        "max_batch_size": 8,
        "max_concurrency": 2,
        **item_bound(400),
    }
    lanes = f"{FLOOD},{TRICKLE}"
    async with running(backend, cluster=cluster(), topic_requests_low=lanes, **settings) as h:
        batcher = h.service.processor.parts.batcher
        publish(h, FLOOD, 1)
        await eventually(lambda: len(backend.calls) == 1)
        publish(h, FLOOD, 200, start=1)
        await eventually(lambda: batcher.buffered == 200)
        publish(h, TRICKLE, 1)
        await eventually(lambda: batcher.buffered == 201)
        backend.let_through.release()
        await eventually(functools.partial(made_at_least, backend, 2))
        second = backend.calls[1]
        backend.let_through.release()
        await eventually(functools.partial(made_at_least, backend, 3))
        third = backend.calls[2]
        for _ in range(40):
            backend.let_through.release()
        await h.engine_idle()
    assert second == (f"{TRICKLE} 0",)
    assert topics_of(third) == [FLOOD] * 8
