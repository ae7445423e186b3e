"""The shared provider budget (`engine/budget_shared.py`) of several members on one store, on a
`VirtualLoop` (its sleeps and timeouts take no real time): leases within the fleet's slots, a
release waking a waiting member, the shared gate and lane reservations, a killed member's slots
coming back, and a member on its own share while the store is down or slow."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from embedstream.core.budget import Lease, LeaseWait
from embedstream.core.configured import ONLINE_LANE
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.policy import BatchLimits
from embedstream.core.targets import LaneTarget
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_shared import LEASE_TTL_S, STORE_TIMEOUT_S, SharedBudget
from embedstream.errors import Reason, TransientError
from embedstream.ops.metrics import Metrics
from embedstream.testing.budget import MemoryBudgetStore
from embedstream.testing.virtual_loop import VirtualLoop


def run(test: Callable[[asyncio.AbstractEventLoop], Awaitable[None]]) -> None:
    loop = VirtualLoop()
    try:
        loop.run_until_complete(test(loop))
    finally:
        loop.close()


def member(
    store: MemoryBudgetStore,
    loop: asyncio.AbstractEventLoop,
    name: str,
    *,
    limit: int = 4,
    role: str = "processor",
    online_target: bool = False,
    metrics: Metrics | None = None,
) -> SharedBudget:
    targets = {Priority.ONLINE: LaneTarget(0.1, 2048, start_items=64)} if online_target else None
    governor = Governor(
        max_concurrency=limit,
        clock=loop.time,
        lanes=default_lanes(0.1, online=ONLINE_LANE),
        targets=targets,
    )
    return SharedBudget(
        store.link(),
        governor,
        member=name,
        role=role,
        monotonic=loop.time,
        observer=None if metrics is None else metrics.budget,
    )


def store_of(loop: asyncio.AbstractEventLoop) -> MemoryBudgetStore:
    return MemoryBudgetStore(lambda: int(loop.time() * 1000))


async def lease(budget: SharedBudget, lane: Priority = Priority.HIGH) -> Lease | LeaseWait:
    assert budget.admit(lane, 1, 10) is None  # the fleet decides: ask it
    return await budget.ask(lane, 1, 10)


def test_two_members_hold_no_more_than_the_fleets_slots_and_a_release_wakes_the_waiter() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        a, b = member(store, loop, "a"), member(store, loop, "b")
        await a.open()
        await b.open()
        held = [await lease(a) for _ in range(4)]
        assert all(isinstance(h, Lease) and h.id for h in held)
        waiting = await lease(b)
        assert isinstance(waiting, LeaseWait) and waiting.reason == "slots"
        assert b.plan.free_slots(Priority.HIGH) == 0  # the plan knows the fleet is full
        woke = asyncio.create_task(b.woken(waiting))
        await asyncio.sleep(0)
        started = loop.time()
        a.release(Priority.HIGH, held[0], 0.05)  # type: ignore[arg-type]
        await woke
        assert loop.time() - started < waiting.seconds  # woken by the release, not the timer
        assert isinstance(await b.ask(Priority.HIGH, 1, 10), Lease)
        assert store.ledger.snapshot(int(loop.time() * 1000)).in_flight == (0, 4, 0, 0)
        await a.close()
        await b.close()
        assert store.ledger.leases == {}  # leaving gives every lease back

    run(scenario)


def test_a_killed_members_slots_come_back_within_the_lease_time() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        killed, alive = member(store, loop, "killed"), member(store, loop, "alive")
        for _ in range(4):
            await lease(killed)  # never opened: no heartbeat renews its leases, as if SIGKILLed
        await alive.open()
        killed_at = loop.time()
        answer = await lease(alive)
        while isinstance(answer, LeaseWait):
            await alive.woken(answer)
            answer = await alive.ask(Priority.HIGH, 1, 10)
        assert LEASE_TTL_S <= loop.time() - killed_at <= LEASE_TTL_S + 0.3
        await alive.close()

    run(scenario)


def test_a_429_met_by_one_member_holds_the_other_until_its_retry_after() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        a, b = member(store, loop, "a"), member(store, loop, "b")
        await a.open()
        await b.open()
        a.failed(TransientError(Reason.RATE_LIMITED, "429", retry_after=2.0))
        await asyncio.sleep(0.01)  # the gate reaches the store in the background
        answer = await lease(b)
        assert isinstance(answer, LeaseWait) and answer.reason == "gate"
        assert 1.9 <= answer.seconds <= 2.0
        assert 1.9 <= b.plan.blocked_for() <= 2.0  # b cuts no batch meanwhile
        await a.close()
        await b.close()

    run(scenario)


def test_an_online_replica_keeps_slots_and_caps_the_calls_of_every_processor() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        gateway = member(store, loop, "gw", limit=8, role="gateway", online_target=True)
        processor = member(store, loop, "proc", limit=8)
        await gateway.open()
        await processor.open()
        assert processor.plan.lane_slots(Priority.LOW) == 7  # high keeps one at all times
        gateway.plan.saw(Priority.ONLINE)  # a request arrives at the replica
        await asyncio.sleep(0.6)  # a heartbeat of each
        assert processor.plan.lane_slots(Priority.LOW) == 6  # 1 more kept for online
        assert processor.plan.call_cap(Priority.LOW, 2048) == 64  # the replica's target steers
        roster = processor.roster
        assert roster is not None
        assert [(u.member, u.role) for u in roster.members] == [
            ("gw", "gateway"),
            ("proc", "processor"),
        ]
        await gateway.close()
        await processor.close()

    run(scenario)


def test_a_member_keeps_to_its_share_while_the_store_is_down_and_rejoins_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        metrics = Metrics()
        a, b = member(store, loop, "a", metrics=metrics), member(store, loop, "b")
        await a.open()
        await b.open()
        await asyncio.sleep(0.6)  # a heartbeat: each has seen the other
        store.down = True
        answer = await lease(a)
        assert isinstance(answer, Lease) and answer.id  # decided alone, nothing lost
        assert a.on_own and a.plan.capacity == 2  # 4 slots over the 2 members last seen
        assert a.admit(Priority.HIGH, 1, 10) is not None  # on its own it leases at the cut
        assert _sample(metrics, "embedstream_budget_on_own_share") == 1.0
        await asyncio.sleep(2.0)  # heartbeats fail meanwhile: one warning, not one a beat
        store.down = False
        await asyncio.sleep(0.6)
        assert not a.on_own and a.plan.capacity == 4
        assert _sample(metrics, "embedstream_budget_on_own_share") == 0.0
        # the heartbeat told the store of the leases taken alone: the fleet counts them
        assert answer.id in store.ledger.leases
        await a.close()
        await b.close()

    with caplog.at_level(logging.WARNING, logger="embedstream.engine.budget_shared"):
        run(scenario)
    warnings = [r.getMessage() for r in caplog.records if "(member a)" in r.getMessage()]
    assert sum("out of reach" in w for w in warnings) == 1
    assert sum("back on the fleet" in w for w in warnings) == 1


def test_a_store_slower_than_the_timeout_counts_as_out_of_reach() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        a = member(store, loop, "a")
        await a.open()
        store.delay_s = 1.0
        started = loop.time()
        answer = await lease(a)
        assert isinstance(answer, Lease) and a.on_own
        assert loop.time() - started == pytest.approx(STORE_TIMEOUT_S)  # never waits it out
        store.delay_s = 0.0
        await a.close()

    run(scenario)


def _sample(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def test_a_batcher_whose_slots_are_all_held_elsewhere_plans_again_when_one_is_freed() -> None:
    """Its own events (an item added, a call of its own ending) never come while its work
    waits for slots the rest of the fleet holds: the budget wakes it."""

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        other, mine = member(store, loop, "other"), member(store, loop, "mine")
        await other.open()
        sent: list[float] = []

        async def dispatch(key: BucketKey, items: list[Pending[int]], reason: str) -> None:
            sent.append(loop.time())

        limits = BatchLimits(max_items=8, max_tokens=10_000, max_wait_s=0.0, scale_factor=8)
        batcher: Batcher[int] = Batcher(limits, dispatch, budget=mine, clock=loop.time)
        runner = asyncio.create_task(batcher.run())
        await asyncio.sleep(0.01)
        held = [await lease(other) for _ in range(4)]  # the fleet's 4 slots, all elsewhere
        await asyncio.sleep(0.6)  # mine's heartbeat shows them
        batcher.add(BucketKey(Priority.HIGH, "m", "float", None), 1, 7)
        await asyncio.sleep(2.0)
        assert sent == []  # nothing free
        freed_at = loop.time()
        other.release(Priority.HIGH, held[0], 0.01)  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert len(sent) == 1 and sent[0] - freed_at < 0.1
        batcher.drain()
        await runner
        await other.close()

    run(scenario)


def test_a_members_own_release_coming_round_is_not_counted_as_a_call_ending_elsewhere() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        store = store_of(loop)
        a, b = member(store, loop, "a"), member(store, loop, "b")
        await a.open()
        await b.open()
        mine = [await lease(a) for _ in range(2)]
        for _ in range(2):
            await lease(b)
        await asyncio.sleep(0.6)  # a heartbeat: a sees b's two calls
        fleet = a.plan.fleet
        assert fleet is not None and fleet.others_in_flight[Priority.HIGH] == 2
        a.release(Priority.HIGH, mine[0], 0.01)  # type: ignore[arg-type]
        await asyncio.sleep(0.01)  # its release message has come round
        fleet = a.plan.fleet
        assert fleet is not None and fleet.others_in_flight[Priority.HIGH] == 2  # b's, still
        await a.close()
        await b.close()

    run(scenario)
