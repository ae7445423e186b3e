"""Calls shared by weight between the sources of a bucket (core/lanes.py Bucket with
core/shares.py): what each call takes, item by item."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from embedstream.core.governor import Governor
from embedstream.core.lanes import Bucket, BucketKey, Pending, Priority, Source
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_local import LocalBudget
from embedstream.testing import FakeClock
from embedstream.tools.bench.baselines import calls_fifo
from hypothesis import given
from hypothesis import strategies as st

KEY = BucketKey(Priority.LOW, "m", "float", None)
Item = tuple[Source, int]  # (its source, its place in that source's order)


def filled(adds: list[tuple[Source, int]], weights: dict[str, float] | None = None) -> Bucket[Item]:
    """A bucket given `count` items of each source in turn; arrivals in that order."""
    bucket: Bucket[Item] = Bucket(KEY, weights)
    seen: Counter[Source] = Counter()
    for source, count in adds:
        for _ in range(count):
            bucket.add(Pending(1, float(sum(seen.values())), (source, seen[source])), source)
            seen[source] += 1
    return bucket


def sources_of(items: list[Pending[Item]]) -> Counter[Source]:
    return Counter(p.payload[0] for p in items)


@pytest.mark.parametrize(
    ("adds", "weights", "calls", "expected"),
    [
        # A has 500 buffered, B gets 1: B's item is in the next call.
        ([("a", 500), ("b", 1)], {}, [256], [{"a": 255, "b": 1}]),
        ([("a", 500), ("b", 1)], {}, [2], [{"a": 1, "b": 1}]),
        # Both have work: 1:1, then 3:1 by weight, call after call.
        ([("a", 500), ("b", 500)], {}, [100, 100], [{"a": 50, "b": 50}] * 2),
        ([("a", 500), ("b", 500)], {"a": 3}, [64, 64, 64], [{"a": 48, "b": 16}] * 3),
        # An idle source's share goes to the others: b runs out, a takes the rest.
        ([("a", 500), ("b", 10)], {}, [40, 40], [{"a": 30, "b": 10}, {"a": 40}]),
        ([("a", 50), ("b", 10), ("c", 50)], {}, [60], [{"a": 25, "b": 10, "c": 25}]),
        # One source: first in, first out, the whole call.
        ([("a", 30)], {}, [8, 30], [{"a": 8}, {"a": 22}]),
        ([(None, 30)], {}, [8], [{None: 8}]),
    ],
)
def test_each_call_takes_its_inputs_by_weighted_deficit(
    adds: list[tuple[Source, int]],
    weights: dict[str, float],
    calls: list[int],
    expected: list[dict[Source, int]],
) -> None:
    bucket = filled(adds, weights)
    assert [sources_of(bucket.take(size)) for size in calls] == expected


def test_the_token_counts_are_those_of_the_items_the_call_takes() -> None:
    bucket: Bucket[int] = Bucket(KEY)
    for i in range(10):
        bucket.add(Pending(10, float(i), i), "a")
    bucket.add(Pending(99, 10.0, 99), "b")
    assert bucket.token_counts(4) == [10, 99, 10, 10]  # the policy sizes the call it will cut
    assert [p.tokens for p in bucket.take(4)] == [10, 99, 10, 10]
    assert bucket.oldest_arrival == 3.0


def test_a_source_back_from_idle_has_no_credit_to_collect() -> None:
    bucket = filled([("a", 300), ("b", 5)])
    assert sources_of(bucket.take(100)) == {"a": 95, "b": 5}  # b is now idle; a goes on alone
    assert sources_of(bucket.take(100)) == {"a": 100}
    for i in range(200):
        bucket.add(Pending(1, 1000.0 + i, ("b", 5 + i)), "b")
    # b joins at a's level: an even split from here, not a burst of b to catch up.
    assert sources_of(bucket.take(100)) == {"a": 50, "b": 50}


@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 20)), max_size=12),
    st.lists(st.integers(1, 30), min_size=1, max_size=12),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from([0.5, 1.0, 3.0])),
)
def test_order_within_a_source_never_changes_and_nothing_is_lost(
    adds: list[tuple[str, int]], takes: list[int], weights: dict[str, float]
) -> None:
    bucket = filled([(s, n) for s, n in adds], weights)
    total = sum(n for _, n in adds)
    out: list[Item] = []
    for size in takes:
        before = len(bucket)
        batch = bucket.take(size)
        assert len(batch) == min(size, before) and len(bucket) == before - len(batch)
        out += [p.payload for p in batch]
    out += [p.payload for p in bucket.take(total)]
    assert len(bucket) == 0 and len(out) == total
    for source in "abc":
        places = [place for s, place in out if s == source]
        assert places == sorted(places) == list(range(len(places)))


def test_dropping_items_keeps_the_order_of_what_is_left() -> None:
    bucket = filled([("a", 10), ("b", 10)])
    dropped = bucket.drop_where(lambda item: item[0] == "b" or item[1] % 2 == 1)
    assert len(dropped) == 15 and len(bucket) == 5
    assert [p.payload for p in bucket.take(10)] == [
        ("a", 0),
        ("a", 2),
        ("a", 4),
        ("a", 6),
        ("a", 8),
    ]


async def test_the_batcher_shares_calls_but_never_mixes_buckets() -> None:
    """Two sources over two models: every call has one key, and a trickle of each model rides
    that model's next call."""
    clock = FakeClock()
    limits = BatchLimits(max_items=10, max_tokens=10_000, max_wait_s=0.0, scale_factor=4.0)
    calls: list[tuple[BucketKey, list[Item]]] = []

    async def dispatch(key: BucketKey, items: list[Pending[Item]], reason: FlushReason) -> None:
        calls.append((key, [p.payload for p in items]))

    governor = Governor(max_concurrency=2, clock=clock, min_low_share=0.0)
    batcher: Batcher[Item] = Batcher(limits, dispatch, budget=LocalBudget(governor), clock=clock)
    other = KEY._replace(model="m2")
    for i in range(40):
        batcher.add(KEY, 1, ("a", i), "a")
        batcher.add(other, 1, ("a", 100 + i), "a")  # places of m2's items: from 100
    batcher.add(KEY, 1, ("b", 0), "b")
    batcher.add(other, 1, ("b", 100), "b")
    batcher.launch_due()  # one slot for low (one kept for high): the first call of KEY
    for _ in range(12):
        await asyncio.sleep(0)
        batcher.launch_due()
    assert {key for key, _ in calls} == {KEY, other}
    for key, trickle in ((KEY, ("b", 0)), (other, ("b", 100))):
        of_key = [items for k, items in calls if k == key]
        assert trickle in of_key[0]  # in the first call of its bucket
    for key, items in calls:  # never an item of another bucket
        assert all((place >= 100) == (key == other) for _, place in items)


async def test_with_calls_unshared_a_bucket_is_one_fifo() -> None:
    """The benchmark's baseline (`calls_fifo`): the trickle waits behind the flood."""
    clock = FakeClock()
    limits = BatchLimits(max_items=10, max_tokens=10_000, max_wait_s=0.0, scale_factor=4.0)
    governor = Governor(max_concurrency=100, clock=clock, min_low_share=0.0)
    batcher: Batcher[Item] = Batcher(limits, _ignore, budget=LocalBudget(governor), clock=clock)
    calls_fifo(batcher)
    seen: list[list[Item]] = []
    batcher.on_flush = lambda key, items, reason, now: seen.append([p.payload for p in items])
    for i in range(40):
        batcher.add(KEY, 1, ("a", i), "a")
    batcher.add(KEY, 1, ("b", 0), "b")
    batcher.drain()
    batcher.launch_due()
    assert ("b", 0) in seen[-1] and ("b", 0) not in seen[0]


async def _ignore(key: BucketKey, items: list[Pending[Item]], reason: FlushReason) -> None:
    return None


def test_the_trickle_is_taken_alone_in_its_own_order() -> None:
    bucket = filled([("a", 500), ("b", 3), ("c", 2)])
    assert bucket.trickle_count() == 5
    taken = bucket.take_trickle(4)
    assert [p.payload for p in taken] == [("b", 0), ("b", 1), ("b", 2), ("c", 0)]
    assert len(bucket) == 501
    assert [p.payload for p in bucket.take_trickle(8)] == [("c", 1)]
    assert bucket.trickle_count() == 0 and bucket.take_trickle(8) == []
    assert sources_of(bucket.take(8)) == {"a": 8}  # one source left: the fast path


def test_comparable_backlogs_have_no_trickle() -> None:
    bucket = filled([("a", 50), ("b", 40)])
    assert bucket.trickle_count() == 0
    assert filled([("a", 50)]).trickle_count() == 0
