"""A fetch's items handed over in runs (`Batcher.add_all`, `Bucket.add_all`,
`WaitingRetries.hold_or_submit_all`): the same buffer as adding them one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka import TopicPartition
from embedstream.core.lanes import Bucket, BucketKey, InputLane, Pending, Priority, Source
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.engine.batcher import Batcher
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.testing import FakeClock
from embedstream.wire import EmbedRequest
from hypothesis import given
from hypothesis import strategies as st

LIMITS = BatchLimits(max_items=8, max_tokens=200, max_wait_s=0.05, scale_factor=4.0)
HIGH = BucketKey(Priority.HIGH, "m", "float", None)
LOW = BucketKey(Priority.LOW, "m", "float", None)
SOURCES: list[Source] = ["a", "b", None]


async def _dispatch(key: BucketKey, items: list[Pending[int]], reason: FlushReason) -> None:
    return None


def _contents(batcher: Batcher[int]) -> dict[BucketKey, list[Pending[int]]]:
    return {key: list(bucket) for key, bucket in batcher._buckets.items()}


@given(
    runs=st.lists(
        st.tuples(
            st.sampled_from([HIGH, LOW]),
            st.sampled_from(SOURCES),
            st.lists(st.integers(min_value=1, max_value=50), max_size=6),
        ),
        max_size=8,
    )
)
def test_add_all_buffers_what_add_would(runs: list[tuple[BucketKey, Source, list[int]]]) -> None:
    clock = FakeClock()
    one: Batcher[int] = Batcher(LIMITS, _dispatch, clock=clock)
    many: Batcher[int] = Batcher(LIMITS, _dispatch, clock=clock)
    payload = 0
    for key, source, tokens in runs:
        entries = []
        for count in tokens:
            one.add(key, count, payload, source)
            entries.append((count, payload))
            payload += 1
        many.add_all(key, source, entries)
        clock.advance(0.01)
    assert _contents(many) == _contents(one)
    assert many.buffered == one.buffered == payload
    for lane in Priority:
        assert many.buffered_in(lane) == one.buffered_in(lane)
        now = clock.now
        # (the same to the last bits or so: n / tc added once, not 1 / tc n times)
        assert many._arrivals[lane].per_s(now) == pytest.approx(one._arrivals[lane].per_s(now))


def test_a_bucket_of_two_sources_takes_a_run_item_by_item() -> None:
    one: Bucket[int] = Bucket(LOW)
    many: Bucket[int] = Bucket(LOW)
    first = [Pending(1, 0.0, i) for i in range(3)]
    second = [Pending(1, 1.0, i) for i in range(3, 6)]
    for item in first:
        one.add(item, "a")
    for item in second:
        one.add(item, "b")
    many.add_all(first, "a")
    many.add_all(second, "b")  # a second source: the shared path, not the fast one
    assert list(many) == list(one)
    assert many.take(6) == one.take(6)


def _item(
    state: PartitionState, offset: int, priority: Priority, source: str, due: int
) -> WorkItem:
    request = EmbedRequest(f"r{offset}", "text")
    return WorkItem(
        id=request.id, text=request.text, tokens=3, request=request,
        origin=Origin(state.tp.topic, state.tp.partition, offset), raw=b"{}",
        priority=priority, partition=state, timestamp_ms=0, model="m",
        encoding_format="float", not_before_ms=due, source=source,
    )  # fmt: skip


async def test_a_fetch_goes_to_the_batcher_in_runs_and_retries_not_due_wait() -> None:
    clock = FakeClock()
    added: list[tuple[BucketKey, Source, list[str]]] = []

    class Noting(Batcher[WorkItem]):
        def add_all(
            self, key: BucketKey, source: Source, entries: Sequence[tuple[int, WorkItem]]
        ) -> None:
            added.append((key, source, [item.id for _, item in entries]))
            super().add_all(key, source, entries)

    batcher = Noting(LIMITS, _dispatch, clock=clock)  # type: ignore[arg-type]
    waiting = WaitingRetries(batcher, clock)
    state = PartitionState(TopicPartition("t", 0), InputLane.LOW)
    later = clock.wall_ms() + 60_000
    items = [
        _item(state, 0, Priority.LOW, "t", 0),
        _item(state, 1, Priority.LOW, "t", 0),
        _item(state, 2, Priority.LOW, "t", later),  # a retry not due yet: it waits
        _item(state, 3, Priority.LOW, "u", 0),
        _item(state, 4, Priority.HIGH, "u", 0),
        _item(state, 5, Priority.HIGH, "u", 0),
    ]
    waiting.hold_or_submit_all(items)
    assert added == [
        (LOW, "t", ["r0", "r1"]), (LOW, "u", ["r3"]), (HIGH, "u", ["r4", "r5"])
    ]  # fmt: skip
    assert len(waiting) == 1 and batcher.buffered == 5
    waiting.hold_or_submit_all([])  # nothing: no run
    assert len(added) == 3
    await asyncio.sleep(0)
