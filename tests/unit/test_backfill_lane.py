"""The backfill lane below low: it takes what the other lanes leave, with no share of its own
beyond one call at a time (the rule's floor), its calls capped while an upper lane held to a
target is active, and in the batcher low's calls go first while the backfill keeps moving
(fake time; the batcher on a virtual loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import pairwise

from embedstream.core import configured
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.core.reservations import Reservations
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_local import LocalBudget
from embedstream.settings import load_settings
from embedstream.testing.virtual_loop import VirtualLoop

ON, H, L, B = Priority.ONLINE, Priority.HIGH, Priority.LOW, Priority.BACKFILL


def test_the_backfill_is_the_lowest_lane_and_labelled_so() -> None:
    assert max(Priority) is B
    assert B.label == "backfill"


def test_while_low_is_active_the_backfill_holds_one_slot() -> None:
    rule = Reservations(default_lanes(0.1))
    assert rule.slot_cap(B, 8, now=0.0) == 7  # everyone idle: all but high's one
    rule.saw(L, 0.0)
    assert rule.slot_cap(B, 8, now=0.5) == 1  # low keeps every slot but the floor
    assert rule.slot_cap(L, 8, now=0.5) == 7  # low itself still leaves high its one
    assert rule.slot_cap(B, 8, now=2.0) == 7  # low quiet for longer than recent_s


def test_low_goes_first_and_the_backfill_still_gets_its_one_call() -> None:
    rule = Reservations(default_lanes(0.1))
    rule.saw(L, 0.0)
    in_flight = {H: 0, L: 0, B: 0}
    picks = []
    for _ in range(8):
        lane = rule.pick({L, B}, in_flight, 8, 0.0)
        if lane is None:
            break
        in_flight[lane] += 1
        picks.append(lane)
    # Low first up to its cap (7 of 8: high keeps one); then the backfill's floor takes the
    # last slot: never starved, never more than one call while low is active.
    assert picks == [L] * 7 + [B]
    assert rule.pick({B}, {**in_flight, L: 6}, 8, 0.0) is None  # its one call is out


def test_the_backfill_earns_no_share_against_a_busy_low_lane() -> None:
    rule = Reservations(default_lanes(0.5))
    rule.saw(L, 0.0)
    # Both always ready, a slot always free for either: low every time (no credit builds up).
    assert [rule.pick({L, B}, {L: 0, B: 0}, 4, 0.0) for _ in range(20)] == [L] * 20


def test_alone_the_backfill_uses_the_budget_the_others_leave() -> None:
    governor = Governor(max_concurrency=4, clock=lambda: 0.0)
    while governor.pick({B}) is B:
        governor.started(B)
    assert governor.lane_in_flight(B) == 3  # high keeps its one slot, as from low
    assert governor.pick({H}) is H


def test_a_lane_target_caps_the_backfill_calls_too() -> None:
    now = [0.0]
    settings = load_settings(env={}, overrides={"http_port": 8080, "max_concurrency": 8})
    governor = configured.governor(settings, lambda: now[0])
    assert governor.call_cap(B, 2048) == 2048
    governor.saw(ON)
    assert governor.call_cap(B, 2048) == 256  # online active: every lower lane's calls shrink
    now[0] = 5.0
    assert governor.call_cap(B, 2048) == 2048


Dispatched = list[tuple[Priority, int, float]]


def run_batcher(items: Sequence[tuple[Priority, float]], call_s: float) -> Dispatched:
    """Items (lane, arrival) through a batcher with 4 slots and calls of `call_s` virtual
    seconds; each dispatch as (lane, inputs, start time)."""
    loop = VirtualLoop()
    dispatched: Dispatched = []

    async def main() -> None:
        async def dispatch(key: BucketKey, batch: list[Pending[int]], reason: FlushReason) -> None:
            dispatched.append((key.priority, len(batch), round(loop.time(), 6)))
            await asyncio.sleep(call_s)

        limits = BatchLimits(max_items=8, max_tokens=10_000, max_wait_s=0.05, scale_factor=8)
        governor = Governor(max_concurrency=4, clock=loop.time, lanes=default_lanes(0.1))
        batcher: Batcher[int] = Batcher(
            limits, dispatch, budget=LocalBudget(governor), clock=loop.time
        )
        runner = asyncio.create_task(batcher.run())
        for n, (lane, arrival) in enumerate(sorted(items, key=lambda i: i[1])):
            await asyncio.sleep(max(0.0, arrival - loop.time()))
            batcher.add(BucketKey(lane, "m", "float", None), 1, n)
        batcher.drain()
        await runner

    loop.run_until_complete(main())
    loop.close()
    return dispatched


def test_in_the_batcher_the_backfill_has_one_call_out_while_low_works() -> None:
    low = [(L, 0.001 * i) for i in range(400)]  # a low backlog, seen first
    backfill = [(B, 0.0005)] * 600
    dispatched = run_batcher(low + backfill, call_s=0.1)
    last_low = max(t for lane, _, t in dispatched if lane is L)
    backfill_starts = [t for lane, _, t in dispatched if lane is B]
    during_low = [t for t in backfill_starts if t < last_low]
    # While low has work, the backfill moves, one call at a time: never two out at once.
    assert len(during_low) >= 5, "the backfill starved while low was active"
    assert all(b - a >= 0.1 - 1e-9 for a, b in pairwise(during_low))
    # Low keeps three calls out to the backfill's one (high keeps the fourth slot).
    low_calls = sum(1 for lane, _, t in dispatched if lane is L)
    assert low_calls >= 3 * len(during_low) - 3
    assert sum(n for lane, n, _ in dispatched if lane is B) == 600
    # Once low has been quiet for its recent_s, the backfill takes the slots low left.
    after = [t for t in backfill_starts if t > last_low + 1.0]
    assert len(after) > len(set(after)), "alone, the backfill should run calls side by side"
