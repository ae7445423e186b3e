"""The batcher's fill rule, and the benchmarks' before arm of it (`baselines.without_fill_rule`),
on a fake clock: items arriving at 1,000/s while a call is out wait for batch-mates with the
rule, and go one call each without it."""

from __future__ import annotations

import asyncio

from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.engine import batcher as batcher_module
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_local import LocalBudget
from embedstream.testing import FakeClock
from embedstream.tools.bench.baselines import without_fill_rule

CALL_S = 0.04
KEY = BucketKey(Priority.LOW, "m", "float", None)


async def call_sizes() -> list[int]:
    """Items 1 ms apart for 400 ms on a provider whose calls take 40 ms (the fake clock's),
    the due calls cut after each arrival: the size of each call."""
    clock = FakeClock()
    limits = BatchLimits(max_items=256, max_tokens=100_000, max_wait_s=0.05, scale_factor=500.0)
    governor = Governor(max_concurrency=8, clock=clock, min_low_share=0.0)
    out: list[tuple[float, asyncio.Event]] = []  # calls in flight: when each ends
    sizes: list[int] = []

    async def dispatch(key: BucketKey, items: list[Pending[int]], reason: FlushReason) -> None:
        sizes.append(len(items))
        done = asyncio.Event()
        out.append((clock() + CALL_S, done))
        await done.wait()

    batcher: Batcher[int] = Batcher(limits, dispatch, budget=LocalBudget(governor), clock=clock)
    for i in range(400):
        clock.advance(0.001)
        for ends, done in [c for c in out if c[0] <= clock()]:
            out.remove((ends, done))
            done.set()
        for _ in range(3):
            await asyncio.sleep(0)
        batcher.add(KEY, 30, i)
        batcher.launch_due()
        await asyncio.sleep(0)
    for _, done in out:
        done.set()
    batcher.abandon()
    await asyncio.sleep(0)
    return sizes


async def test_the_fill_rule_makes_fewer_fuller_calls_than_its_before_arm() -> None:
    rule = vars(batcher_module)["fill_target"]  # the name the batcher calls
    with without_fill_rule():
        before = await call_sizes()
    assert vars(batcher_module)["fill_target"] is rule  # restored on the way out
    after = await call_sizes()
    assert min(sum(before), sum(after)) > 350  # nearly every item sent in both
    # Once the first calls' latency is known, a slot freeing takes one item without the rule;
    # with it, the next items wait for batch-mates (the arrival rate fills a call meanwhile).
    assert before[8:14] == [1] * 6
    assert min(after[8:14]) >= 2 and len(after) < len(before)
