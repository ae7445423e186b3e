"""Fetching follows the shares on the in-memory cluster: of two low topics, the flooded one is
paused at its share of the lane's buffer and the other keeps being read."""

from __future__ import annotations

from typing import Any

import orjson
from aiokafka import TopicPartition
from embedstream.testing import eventually
from embedstream.testing.kafka import FakeCluster

from tests.unit.harness import NAMES, GatedBackend, Harness, item_bound, running

FLOOD, TRICKLE = "t.flood", "t.trickle"


def cluster() -> FakeCluster:
    return FakeCluster({NAMES.requests_high: 1, FLOOD: 1, TRICKLE: 1, NAMES.retry: 1,
                        NAMES.results: 1, NAMES.dead_letters: 1})  # fmt: skip


def publish(h: Harness, topic: str, count: int, text: str) -> None:
    for i in range(count):
        value = orjson.dumps({"id": f"{topic}-{i}", "text": f"{text} {i}"})
        h.cluster.produce(topic, value, f"{topic}-{i}".encode())


def held(h: Harness, topic: str) -> int:
    state = h.service.processor.parts.assignment.get(TopicPartition(topic, 0))
    assert state is not None
    return state.offsets.pending


async def shares_of(**settings: Any) -> tuple[int, int, bool]:
    """A trickle of 5, a flood of 300, 10 more of the trickle, none ever answered. What each
    holds once the trickle is read, and whether the flood is paused. (The lane's 80 counts
    each item's bytes too, about 1.03 an item here: a flood at its weighted share of 60 leaves
    the trickle room for 15 items, not 20.)"""
    backend = GatedBackend()  # SLOW texts are never answered: the flood stays held
    async with running(backend, cluster=cluster(), topic_requests_low=f"{FLOOD},{TRICKLE}",
                       **item_bound(100), max_poll_records=10, **settings) as h:  # fmt: skip
        publish(h, TRICKLE, 5, "SLOW trickle")  # the trickle has work when the flood comes
        await eventually(lambda: held(h, TRICKLE) == 5)
        publish(h, FLOOD, 300, "SLOW")
        await eventually(lambda: held(h, FLOOD) >= 30)
        await h.service.processor.parts.outcomes.flush()
        publish(h, TRICKLE, 10, "SLOW trickle later")
        # Without shares the flood fills the lane to 80 and the lane pauses whole: the
        # trickle's later records would never be read.
        await eventually(lambda: held(h, TRICKLE) == 15)
        state = h.service.processor.parts.assignment.get(TopicPartition(FLOOD, 0))
        assert state is not None
        result = held(h, FLOOD), held(h, TRICKLE), state.paused
        backend.gate.set()
    return result


async def test_the_flood_pauses_at_its_share_and_the_trickle_is_read() -> None:
    flood, trickle, flood_paused = await shares_of()
    assert trickle == 15  # all read, though the flood has 260 more to give
    assert flood_paused
    assert flood <= 40 + 10  # its share of the lane's 80, and one fetch over it


async def test_weights_give_the_flood_more_of_the_buffer() -> None:
    flood, trickle, _ = await shares_of(source_weights=f"{FLOOD}=3")
    assert trickle == 15
    assert flood >= 50  # beyond the equal share of 40: 3/4 of what the trickle leaves


async def test_an_idle_trickle_keeps_room_and_its_next_record_is_read() -> None:
    """The trickle has nothing when the flood comes: the flood still stops one poll short of
    the lane's limit (80), so the trickle's next record is read at once. Without that room
    the lane pauses whole at its limit and the record waits for half the lane to drain,
    never here (the flood is never answered)."""
    backend = GatedBackend()
    async with running(backend, cluster=cluster(), topic_requests_low=f"{FLOOD},{TRICKLE}",
                       **item_bound(100), max_poll_records=10) as h:  # fmt: skip
        publish(h, FLOOD, 300, "SLOW")
        state = h.service.processor.parts.assignment.get(TopicPartition(FLOOD, 0))
        assert state is not None
        await eventually(lambda: state.paused and held(h, FLOOD) >= 60)
        await h.fetch_turns(3)
        assert held(h, FLOOD) < 80  # its share: the lane's 80 less one poll kept for the trickle
        publish(h, TRICKLE, 1, "SLOW trickle")
        await eventually(lambda: held(h, TRICKLE) == 1)
        backend.gate.set()
