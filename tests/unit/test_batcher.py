"""The batcher shell driven step by step with a fake clock: what it cuts, and when."""

from __future__ import annotations

import asyncio

import pytest
from embedstream.core.costmodel import CallCost, CostModels, cost_key
from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.limits import ProviderLimits, batch_violations
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_local import LocalBudget
from embedstream.testing import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

KEYS = [
    BucketKey(Priority.HIGH, "m1", "float", None),
    BucketKey(Priority.LOW, "m1", "float", None),
    BucketKey(Priority.LOW, "m2", "float", None),
    BucketKey(Priority.LOW, "m1", "base64", 64),
]
LIMITS = BatchLimits(max_items=8, max_tokens=200, max_wait_s=0.05, scale_factor=4.0)
PROVIDER = ProviderLimits(8, 200, 200, frozenset({"float", "base64"}))

Arrival = tuple[float, int, int]  # (gap since previous arrival in s, key index, tokens)


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[BucketKey, list[Pending[int]], FlushReason, float]] = []

    def __call__(
        self, key: BucketKey, items: list[Pending[int]], reason: FlushReason, now: float
    ) -> None:
        self.batches.append((key, list(items), reason, now))


async def _never_finishes(key: BucketKey, items: list[Pending[int]], reason: FlushReason) -> None:
    await asyncio.Event().wait()


async def drive(
    arrivals: list[Arrival], cost: CostModels | None = None
) -> tuple[Recorder, dict[int, float], FakeClock]:
    """Add items at their (fake) arrival times, calling launch_due whenever it asked to be."""
    clock = FakeClock()
    governor = Governor(max_concurrency=10**6, clock=clock, min_low_share=0.0)
    batcher: Batcher[int] = Batcher(
        LIMITS, _never_finishes, budget=LocalBudget(governor), clock=clock, cost=cost
    )
    recorder = Recorder()
    batcher.on_flush = recorder
    arrived: dict[int, float] = {}
    due: float | None = None
    for index, (gap, key_index, tokens) in enumerate(arrivals):
        target = clock.now + gap
        while due is not None and clock.now + due <= target:
            clock.advance(due)
            due = batcher.launch_due()
        clock.now = target
        batcher.add(KEYS[key_index], tokens, index)
        arrived[index] = clock.now
        # Items arriving at the same instant are added together, as one fetch is.
        if index + 1 == len(arrivals) or arrivals[index + 1][0] > 0:
            due = batcher.launch_due()
    while due is not None:
        clock.advance(due)
        due = batcher.launch_due()
    assert batcher.buffered == 0
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()
    return recorder, arrived, clock


arrivals_strategy = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=0.03),
        st.integers(min_value=0, max_value=len(KEYS) - 1),
        st.integers(min_value=1, max_value=120),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(arrivals_strategy)
def test_batches_keep_limits_never_mix_buckets_and_flush_within_max_wait(
    arrivals: list[Arrival],
) -> None:
    recorder, arrived, _ = asyncio.run(drive(arrivals))
    flushed = [p.payload for _, items, _, _ in recorder.batches for p in items]
    assert sorted(flushed) == list(range(len(arrivals)))  # each item exactly once
    for key, items, _, now in recorder.batches:
        assert all(arrivals[p.payload][1] == KEYS.index(key) for p in items)
        assert batch_violations(PROVIDER, [p.tokens for p in items], key.encoding_format) == []
        for pending in items:
            assert now - arrived[pending.payload] <= LIMITS.max_wait_s + 1e-9


def test_a_lone_item_goes_out_at_once() -> None:
    recorder, _, _ = asyncio.run(drive([(0.0, 0, 5)]))
    [(_, items, reason, now)] = recorder.batches
    assert (len(items), reason, now) == (1, "time", 0.0)


def test_a_backlog_forms_full_batches() -> None:
    recorder, _, _ = asyncio.run(drive([(0.0, 1, 1)] * 40))
    assert [(len(items), reason) for _, items, reason, _ in recorder.batches] == [(8, "size")] * 5


def test_sparse_arrivals_each_go_out_at_once() -> None:
    recorder, arrived, _ = asyncio.run(drive([(0.02, 1, 3)] * 5))
    assert [len(items) for _, items, _, _ in recorder.batches] == [1] * 5
    assert [now for *_, now in recorder.batches] == list(arrived.values())


def test_tokens_trigger_cuts_before_the_budget_is_passed() -> None:
    # Calls that cost the same whatever their size: splitting gains nothing, so the limits
    # alone decide the cuts.
    flat = CostModels(CallCost(base_s=0.05, per_token_s=0.0, per_item_s=0.0))
    recorder, _, _ = asyncio.run(drive([(0.0, 1, 1)] + [(0.0, 1, 90)] * 3, flat))
    # 1 + 90 + 90 fits in 200; the next 90 would not: cut at 3, the rest goes alone.
    # 1 + 90 + 90 fits in 200, 1 + 90 * 3 would not: the fewest calls are two, each as big.
    assert [len(items) for _, items, _, _ in recorder.batches] == [2, 2]
    assert [reason for _, _, reason, _ in recorder.batches] == ["tokens", "tokens"]


async def test_high_item_never_queues_behind_more_than_one_low_batch() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=2, clock=clock, min_low_share=0.0)
    batcher: Batcher[int] = Batcher(
        LIMITS, _never_finishes, budget=LocalBudget(governor), clock=clock
    )
    recorder = Recorder()
    batcher.on_flush = recorder
    for i in range(40):
        batcher.add(KEYS[1], 1, i)
    batcher.launch_due()
    assert [k.priority for k, *_ in recorder.batches] == [Priority.LOW]  # low holds 1 of 2 slots
    batcher.add(KEYS[0], 1, 100)
    batcher.launch_due()
    assert [k.priority for k, *_ in recorder.batches] == [Priority.LOW, Priority.HIGH]
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


async def test_low_lane_keeps_its_minimum_share_while_both_are_backlogged() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=1, clock=clock, min_low_share=0.25)
    finished = asyncio.Event()

    async def quick(key: BucketKey, items: list[Pending[int]], reason: FlushReason) -> None:
        finished.set()

    batcher: Batcher[int] = Batcher(LIMITS, quick, budget=LocalBudget(governor), clock=clock)
    recorder = Recorder()
    batcher.on_flush = recorder
    for i in range(8 * 20):
        batcher.add(KEYS[0], 1, i)
        batcher.add(KEYS[1], 1, 1000 + i)
    for _ in range(20):
        batcher.launch_due()
        await asyncio.sleep(0)  # let the call finish and free the slot
        await asyncio.sleep(0)
    lanes = [k.priority for k, *_ in recorder.batches]
    assert len(lanes) == 20
    assert lanes.count(Priority.LOW) == 5  # a quarter of the calls
    assert "LOW, LOW" not in ", ".join(p.name for p in lanes)


async def test_high_item_is_not_held_for_batch_mates_while_low_work_goes_out() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=4, clock=clock, min_low_share=0.0)
    lag = {Priority.HIGH: 100, Priority.LOW: 0}  # high backlog in Kafka: its timer would wait
    batcher: Batcher[int] = Batcher(
        LIMITS,
        _never_finishes,
        budget=LocalBudget(governor),
        clock=clock,
        backlog=lambda lane: lag[lane],
    )
    recorder = Recorder()
    batcher.on_flush = recorder
    for i in range(40):
        batcher.add(KEYS[1], 1, i)
    batcher.add(KEYS[0], 1, 100)
    batcher.launch_due()
    first_key, first_items, first_reason, _ = recorder.batches[0]
    assert first_key.priority is Priority.HIGH
    assert [p.payload for p in first_items] == [100]
    assert first_reason == "priority"
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


async def test_a_shallow_backlog_is_spread_over_the_idle_slots() -> None:
    # 50 waiting callers, 8 idle slots, calls of 40 ms + 0.02 ms/token, 30 tokens each: 8 calls
    # of 6-7 finish in ~44 ms where 2 calls of 32 + 18 would take ~59 ms.
    clock = FakeClock()
    limits = BatchLimits(max_items=256, max_tokens=100_000, max_wait_s=0.05, scale_factor=64.0)
    cost = CostModels(CallCost(base_s=0.04, per_token_s=2e-5, per_item_s=0.0))
    governor = Governor(max_concurrency=8, clock=clock)
    batcher: Batcher[int] = Batcher(
        limits, _never_finishes, budget=LocalBudget(governor), clock=clock, cost=cost
    )
    recorder = Recorder()
    batcher.on_flush = recorder
    for i in range(50):
        batcher.add(KEYS[0], 30, i)
    # The idle slots can take all 50 at once: no backlog, so no wait for batch-mates (nobody
    # else would come: each caller awaits its own vector), and every piece goes now.
    batcher.launch_due()
    sizes = [len(items) for _, items, _, _ in recorder.batches]
    assert sum(sizes) == 50
    assert len(sizes) == 8
    assert max(sizes) - min(sizes) <= 1
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


async def test_items_the_free_slots_cannot_take_are_the_backlog_behind_them() -> None:
    """depth = buffered beyond what the lane's free slots take at once, plus the lag."""
    clock = FakeClock()
    limits = BatchLimits(max_items=4, max_tokens=1000, max_wait_s=0.05, scale_factor=64.0)
    governor = Governor(max_concurrency=2, clock=clock)
    lag = {Priority.HIGH: 0, Priority.LOW: 100}
    batcher: Batcher[int] = Batcher(
        limits, _never_finishes, budget=LocalBudget(governor), clock=clock, backlog=lag.__getitem__
    )
    for i in range(10):
        batcher.add(KEYS[0], 1, i)  # high lane: 2 free slots take 8 at once
    assert batcher.depth(Priority.HIGH) == 10 - 1 - 2 * 4
    governor.started(Priority.HIGH)
    governor.started(Priority.HIGH)  # no free slot: everything buffered is backlog
    assert batcher.depth(Priority.HIGH) == 10 - 1
    assert batcher.depth(Priority.LOW) == 100  # the lag counts whatever the slots


async def test_each_dispatch_teaches_the_cost_model() -> None:
    clock = FakeClock()

    async def takes_a_while(key: BucketKey, items: list[Pending[int]], r: FlushReason) -> None:
        clock.advance(0.1 + 0.001 * sum(p.tokens for p in items))

    cost = CostModels()
    batcher: Batcher[int] = Batcher(
        LIMITS, takes_a_while, max_concurrency=1, clock=clock, cost=cost
    )
    for i in range(8 * 20):  # batches of 8 items of 1, 5, 10 or 25 tokens each
        batcher.add(KEYS[1], (1, 5, 10, 25)[i // 8 % 4], i)
    batcher.drain()
    await batcher.run()
    fit = cost.fit(cost_key(KEYS[1]))
    assert fit.observations == 20
    for tokens in (8, 80, 200):
        assert fit.cost().latency(tokens, 8) == pytest.approx(0.1 + 0.001 * tokens, rel=0.05)
    assert cost.fit(cost_key(KEYS[0])) is fit  # the high lane shares what the low one learnt
    assert cost.fit(cost_key(KEYS[2])).observations == 0  # another model learnt nothing


async def test_dispatch_durations_are_not_observed_when_the_caller_reports_calls() -> None:
    clock = FakeClock()

    async def slow(key: BucketKey, items: list[Pending[int]], r: FlushReason) -> None:
        clock.advance(0.5)

    cost = CostModels()
    batcher: Batcher[int] = Batcher(LIMITS, slow, clock=clock, cost=cost, observe_dispatch=False)
    runner = asyncio.create_task(batcher.run())
    batcher.add(KEYS[1], 3, 0)
    batcher.drain()
    await runner
    assert cost.fit(cost_key(KEYS[1])).observations == 0
