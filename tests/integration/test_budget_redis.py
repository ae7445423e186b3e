"""The fleet budget's Redis store against a real `redis-server`: its Lua scripts decide exactly
as the reference rule (`core/ledger.FleetLedger`) does, answer for answer, on the same clock."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from embedstream.core.budget import Lease, LeaseWait
from embedstream.core.configured import ONLINE_LANE
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.ledger import AskTerms, FleetLedger, lease_id
from embedstream.core.reservations import LaneTerms, Reservations
from embedstream.engine.budget_redis import RedisBudgetStore
from embedstream.engine.budget_shared import LEASE_TTL_S, SharedBudget
from embedstream.engine.redis_link import RedisLink
from embedstream.testing import eventually
from embedstream.testing.redis import RedisServer

MEMBERS = ("proc-a", "proc-b", "gate-c")


def _terms(rng: random.Random, limit: int) -> AskTerms:
    lanes = default_lanes(0.1, online=LaneTerms(reserved_slots=2, lower_call_items=256))
    table = Reservations(lanes).slot_table(limit)
    rpm = rng.choice([None, None, 600.0, 90.0])
    tpm = rng.choice([None, None, 50_000.0, 4_000.0])
    rpm_burst = rng.choice([None, None, 5.0])
    tpm_burst = rng.choice([None, None, 700.0])
    return AskTerms(
        limit, tuple(table), (1000, 1000, 1000, 1000), 2000, rpm, tpm, rpm_burst, tpm_burst
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_the_lua_store_decides_exactly_as_the_reference_ledger(
    redis_server: RedisServer, seed: int
) -> None:
    rng = random.Random(seed)
    link = RedisLink(redis_server.url, timeout_s=5.0)
    store = RedisBudgetStore(link, f"equivalence-{seed}")
    frozen = f"embedstream:budget:{{equivalence-{seed}}}:frozen_clock"
    ledger = FleetLedger()
    now = 1_000_000
    held: dict[str, list[str]] = {member: [] for member in MEMBERS}
    serial = 0
    terms = _terms(rng, 8)
    decided = {"granted": 0, "slots": 0, "gate": 0, "rates": 0, "room": 0}
    try:
        for _ in range(400):
            now += rng.choice([0, 0, 1, 3, 20, 150, 700, 2500])
            redis_server.command("SET", frozen, str(now))
            op = rng.random()
            member = rng.choice(MEMBERS)
            if op < 0.5:
                if rng.random() < 0.05:
                    terms = _terms(rng, rng.choice([4, 8, 16]))
                serial += 1
                name = lease_id(rng.choice(list(Priority)), member, serial)
                tokens = rng.choice([1, 50, 800, 3000])
                expected = ledger.ask(now, member, name, tokens, terms)
                got = await store.ask(member, name, tokens, terms)
                assert got == expected, (now, name)
                if hasattr(got, "go_in_ms"):
                    held[member].append(name)
                    decided["granted"] += 1
                else:
                    decided[got.reason] += 1
                    # Held by the pace kept for an upper lane (nothing else blocks the fleet).
                    decided["room"] += got.reason == "rates" and got.snapshot.blocked_ms == 0
            elif op < 0.75 and held[member]:
                name = held[member].pop(rng.randrange(len(held[member])))
                assert await store.release(name) == ledger.release(now, name)
            elif op < 0.9:
                kept = [name for name in held[member] if rng.random() < 0.8]
                held[member] = kept
                active = [lane for lane in range(4) if rng.random() < 0.3]
                caps = {0: rng.choice([32, 64, 256])} if rng.random() < 0.4 else {}
                role = "gateway" if member.startswith("gate") else "processor"
                expected_roster = ledger.heartbeat(now, member, role, 2000, kept, active, caps)
                got_roster = await store.heartbeat(member, role, 2000, kept, active, caps)
                assert got_roster == expected_roster, now
            elif op < 0.96:
                span = rng.choice([100, 1000, 3000])
                ledger.block(now, span)
                await store.block(span)
            else:
                ledger.leave(member)
                await store.leave(member)
                held[member] = []
    finally:
        await store.close()
    # The sequence exercised every kind of answer, so the equality above means something.
    assert decided["granted"] > 20 and decided["slots"] >= 3
    assert decided["gate"] + decided["rates"] > 5
    assert decided["room"] >= 2, decided


def _member(url: str, name: str, namespace: str, limit: int = 4) -> SharedBudget:
    governor = Governor(
        max_concurrency=limit, clock=time.monotonic, lanes=default_lanes(0.1, online=ONLINE_LANE)
    )
    link = RedisLink(url, timeout_s=1.0)
    return SharedBudget(
        RedisBudgetStore(link, namespace), governor, member=name, role="processor",
        monotonic=time.monotonic,
    )  # fmt: skip


async def _lease(budget: SharedBudget) -> Lease | LeaseWait:
    assert budget.admit(Priority.HIGH, 1, 10) is None
    return await budget.ask(Priority.HIGH, 1, 10)


async def test_a_release_on_one_member_wakes_a_member_waiting_for_a_slot_at_once(
    redis_server: RedisServer,
) -> None:
    a = _member(redis_server.url, "a", "wake")
    b = _member(redis_server.url, "b", "wake")
    await a.open()
    await b.open()
    try:
        held = [await _lease(a) for _ in range(4)]
        waiting = await _lease(b)
        assert isinstance(waiting, LeaseWait) and waiting.reason == "slots"
        await asyncio.sleep(0.05)  # b's subscription is in place
        woke = asyncio.create_task(b.woken(waiting))
        started = time.monotonic()
        a.release(Priority.HIGH, held[0], 0.01)  # type: ignore[arg-type]
        await woke
        assert time.monotonic() - started < 0.2  # the release's message, not the recheck
        assert isinstance(await b.ask(Priority.HIGH, 1, 10), Lease)
    finally:
        await a.close()
        await b.close()


async def test_redis_stopped_and_restarted_under_a_member_loses_nothing(
    redis_server: RedisServer,
) -> None:
    a = _member(redis_server.url, "a", "outage")
    await a.open()
    try:
        first = await _lease(a)
        assert isinstance(first, Lease) and not a.on_own
        redis_server.stop()
        started = time.monotonic()
        second = await _lease(a)
        assert isinstance(second, Lease) and a.on_own  # decided alone, at once
        assert time.monotonic() - started < 1.0
        redis_server.start()  # empty: persistence is off, as after a crash
        await eventually(lambda: not a.on_own, timeout_s=5.0, poll_s=0.05)
        # both leases, the fleet's and the one taken alone, are in the new Redis
        keys = "embedstream:budget:{outage}:leases"
        assert redis_server.command("ZCARD", keys) == 2
        a.release(Priority.HIGH, first, 0.01)
        a.release(Priority.HIGH, second, 0.01)
        await asyncio.sleep(0.2)
        assert redis_server.command("ZCARD", keys) == 0
    finally:
        await a.close()


async def test_the_slots_of_a_member_that_stopped_beating_come_back_within_the_lease_time(
    redis_server: RedisServer,
) -> None:
    killed = _member(redis_server.url, "killed", "kill")
    alive = _member(redis_server.url, "alive", "kill")
    await killed.open()
    await alive.open()
    try:
        for _ in range(4):
            assert isinstance(await _lease(killed), Lease)
        for task in killed._tasks:  # as a SIGKILL would: no heartbeat, no goodbye
            task.cancel()
        killed_at = time.monotonic()
        answer = await _lease(alive)
        while isinstance(answer, LeaseWait):
            await alive.woken(answer)
            answer = await alive.ask(Priority.HIGH, 1, 10)
        assert time.monotonic() - killed_at <= LEASE_TTL_S + 1.0
    finally:
        await alive.close()
