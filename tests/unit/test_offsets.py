from __future__ import annotations

import random

import pytest
from embedstream.core.offsets import PartitionOffsets
from hypothesis import given
from hypothesis import strategies as st


def test_nothing_tracked_means_nothing_to_commit() -> None:
    assert PartitionOffsets().to_commit() is None


def test_commits_the_lowest_unfinished_offset() -> None:
    tracker = PartitionOffsets()
    for offset in (10, 11, 12, 15):  # gaps happen (compaction, transaction markers)
        tracker.track(offset)
    tracker.complete(11)
    tracker.complete(12)
    assert tracker.to_commit() == 10
    tracker.complete(10)
    assert tracker.to_commit() == 15
    tracker.complete(15)
    assert tracker.to_commit() == 16
    tracker.mark_committed(16)
    assert tracker.to_commit() is None
    assert tracker.pending == 0


def test_rejects_out_of_order_tracking() -> None:
    tracker = PartitionOffsets()
    tracker.track(5)
    with pytest.raises(ValueError):
        tracker.track(5)


@given(st.integers(min_value=1, max_value=200), st.randoms(use_true_random=False))
def test_never_commits_past_an_unfinished_offset(n: int, rng: random.Random) -> None:
    tracker = PartitionOffsets()
    offsets = sorted(rng.sample(range(n * 3), n))
    for offset in offsets:
        tracker.track(offset)
    order = list(offsets)
    rng.shuffle(order)
    done: set[int] = set()
    for offset in order:
        tracker.complete(offset)
        done.add(offset)
        safe = tracker.to_commit()
        assert safe is not None
        # every tracked offset below the commit point is finished
        assert all(o in done for o in offsets if o < safe)
        unfinished = [o for o in offsets if o not in done]
        assert safe == (min(unfinished) if unfinished else offsets[-1] + 1)


def test_oldest_timestamp_follows_the_commit_point() -> None:
    tracker = PartitionOffsets()
    tracker.track(0, 1_000)
    tracker.track(1, 2_000)
    assert tracker.oldest_timestamp_ms() == 1_000
    tracker.complete(1)
    assert tracker.oldest_timestamp_ms() == 1_000
    tracker.complete(0)
    assert tracker.oldest_timestamp_ms() is None


def test_pending_bytes_count_unfinished_records_only() -> None:
    tracker = PartitionOffsets()
    for offset, size in ((0, 100), (1, 50), (2, 25)):
        tracker.track(offset, size=size)
    tracker.complete(1)
    assert tracker.pending_bytes == 125  # finished records free their bytes at once
    tracker.complete(1)  # a repeat changes nothing
    tracker.complete(0)
    tracker.complete(2)
    assert tracker.pending_bytes == 0


def test_held_bytes_count_against_an_unfinished_record_until_released() -> None:
    tracker = PartitionOffsets()
    tracker.track(0, size=100)
    tracker.track(1, size=50)
    tracker.hold_bytes(1, 5_000)  # its result, waiting for the broker's ack
    assert tracker.pending_bytes == 5_150
    tracker.hold_bytes(1, -5_000)  # acked
    assert tracker.pending_bytes == 150
    tracker.hold_bytes(0, 7_000)
    tracker.complete(0)  # finishing frees what it held with it
    assert tracker.pending_bytes == 50
    tracker.hold_bytes(0, -7_000)  # a release after the finish changes nothing
    tracker.hold_bytes(0, 7_000)  # nor does a hold on a finished record
    assert tracker.pending_bytes == 50
    tracker.hold_bytes(1, -80)  # never below nothing for a record
    assert tracker.pending_bytes == 0
    tracker.complete(1)
    assert tracker.pending_bytes == 0


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=30),
    completed_first=st.sets(st.integers(min_value=0, max_value=29), max_size=10),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_completing_a_batch_is_the_same_as_one_by_one(
    sizes: list[int], completed_first: set[int], seed: int
) -> None:
    """`complete_all` (a call's results at once) leaves every figure as `complete` for each
    would, finished records and repeats included."""
    one, batch = PartitionOffsets(), PartitionOffsets()
    for tracker in (one, batch):
        for offset, size in enumerate(sizes):
            tracker.track(offset, size=size)
        for offset in sorted(completed_first):
            tracker.complete(offset)
    order = list(range(len(sizes))) * 2  # each one twice: a repeat changes nothing
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    for offset in order[:half]:
        one.complete(offset)
    batch.complete_all(order[:half])
    assert (batch.pending, batch.pending_bytes, batch.safe_offset()) == (
        one.pending, one.pending_bytes, one.safe_offset()
    )  # fmt: skip
    for offset in order[half:]:
        one.complete(offset)
    batch.complete_all(order[half:])
    assert (batch.pending, batch.pending_bytes, batch.safe_offset()) == (0, 0, len(sizes))
    assert (one.pending, one.pending_bytes) == (0, 0)


def test_bytes_held_for_outputs_count_until_released() -> None:
    tracker = PartitionOffsets()
    tracker.track(0, size=100)
    tracker.hold_written(5_000)  # results waiting for the broker's ack
    assert tracker.pending_bytes == 5_100
    tracker.hold_written(-5_000)
    tracker.complete(0)
    assert tracker.pending_bytes == 0
