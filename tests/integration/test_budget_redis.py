"""The fleet budget's Redis store against a real `redis-server`: its Lua scripts decide exactly
as the reference rule (`core/ledger.FleetLedger`) does, answer for answer, on the same clock."""

from __future__ import annotations

import random

import pytest
from embedstream.core.governor import default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.ledger import AskTerms, FleetLedger, lease_id
from embedstream.core.reservations import LaneTerms, Reservations
from embedstream.engine.budget_redis import RedisBudgetStore
from embedstream.engine.redis_link import RedisLink
from embedstream.testing.redis import RedisServer

MEMBERS = ("proc-a", "proc-b", "gate-c")


def _terms(rng: random.Random, limit: int) -> AskTerms:
    lanes = default_lanes(0.1, online=LaneTerms(reserved_slots=2, lower_call_items=256))
    table = Reservations(lanes).slot_table(limit)
    rpm = rng.choice([None, None, 600.0, 90.0])
    tpm = rng.choice([None, None, 50_000.0, 4_000.0])
    return AskTerms(limit, tuple(table), (1000, 1000, 1000, 1000), 2000, rpm, tpm)


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
    decided = {"granted": 0, "slots": 0, "gate": 0, "rates": 0}
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
    assert decided["granted"] > 20 and decided["slots"] > 5
    assert decided["gate"] + decided["rates"] > 5
