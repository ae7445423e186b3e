"""The fleet ledger's rule (`core/ledger.py`), to the millisecond: leases and their expiry, the
lanes' reservations across members, the shared gate and pace, heartbeats and members."""

from __future__ import annotations

import pytest
from embedstream.core.governor import default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.ledger import (
    SLOT_RECHECK_MS,
    AskTerms,
    Denied,
    FleetLedger,
    Granted,
    lease_id,
    lease_lane,
    lease_member,
)
from embedstream.core.reservations import LaneTerms, Reservations

ONLINE = LaneTerms(reserved_slots=2, lower_call_items=256)


def terms(limit: int = 8, *, ttl_ms: int = 3000, **rates: float) -> AskTerms:
    table = Reservations(default_lanes(0.1, online=ONLINE)).slot_table(limit)
    return AskTerms(limit, tuple(table), (1000, 1000, 1000, 1000), ttl_ms, **rates)


class Fleet:
    def __init__(self) -> None:
        self.ledger = FleetLedger()
        self.serial = 0

    def ask(
        self, now: int, lane: Priority, member: str = "a", tokens: int = 10, **kw: object
    ) -> tuple[str, Granted | Denied]:
        self.serial += 1
        name = lease_id(lane, member, self.serial)
        return name, self.ledger.ask(now, member, name, tokens, kw.pop("t", None) or terms())  # type: ignore[arg-type]


def test_a_lease_names_its_lane_and_member() -> None:
    name = lease_id(Priority.BACKFILL, "host:12:ab", 7)
    assert (lease_lane(name), lease_member(name)) == (3, "host:12:ab")
    with pytest.raises(ValueError, match="may not contain"):
        lease_id(Priority.LOW, "a|b", 1)


def test_the_fleet_never_holds_more_leases_than_the_limit_and_a_release_frees_one() -> None:
    fleet = Fleet()
    low = [fleet.ask(0, Priority.LOW, member=m)[0] for m in "abcdabc"]
    _, eighth_low = fleet.ask(0, Priority.LOW, member="d")  # high keeps one slot at all times
    assert isinstance(eighth_low, Denied) and eighth_low.reason == "slots"
    assert isinstance(fleet.ask(0, Priority.HIGH, member="d")[1], Granted)
    _, ninth = fleet.ask(1, Priority.HIGH, member="c")
    assert isinstance(ninth, Denied) and ninth.reason == "slots"
    assert ninth.wait_ms == SLOT_RECHECK_MS
    assert ninth.snapshot.in_flight == (0, 1, 7, 0)
    fleet.ledger.release(2, low[3])
    _, tenth = fleet.ask(2, Priority.HIGH, member="c")
    assert isinstance(tenth, Granted) and tenth.snapshot.in_flight == (0, 2, 6, 0)


def test_an_online_request_on_any_member_keeps_two_slots_from_every_processor() -> None:
    fleet = Fleet()
    fleet.ask(0, Priority.ONLINE, member="gateway")  # online is active fleet-wide from now
    answers = [fleet.ask(10, Priority.LOW, member=f"proc{i % 3}")[1] for i in range(6)]
    # 8 slots: 2 kept for online while it is active, 1 for high at all times
    assert [isinstance(a, Granted) for a in answers] == [True] * 5 + [False]
    assert isinstance(fleet.ask(20, Priority.ONLINE, member="gateway")[1], Granted)
    fleet2 = Fleet()
    fleet2.ask(0, Priority.ONLINE, member="gateway")
    fleet2.ledger.release(0, next(iter(fleet2.ledger.leases)))
    for _ in range(5):
        fleet2.ask(1, Priority.LOW, member="proc")
    assert isinstance(fleet2.ask(1000, Priority.LOW, member="proc")[1], Denied)  # 1000: active
    assert isinstance(fleet2.ask(1001, Priority.LOW, member="proc")[1], Granted)  # 1001: not


def test_a_lease_nobody_renews_expires_at_its_time_to_live() -> None:
    fleet = Fleet()
    for _ in range(8):
        fleet.ask(0, Priority.LOW, member="killed")
    assert isinstance(fleet.ask(2999, Priority.LOW, member="alive")[1], Denied)
    answer = fleet.ask(3000, Priority.LOW, member="alive")[1]
    assert isinstance(answer, Granted) and answer.snapshot.in_flight == (0, 0, 1, 0)


def test_a_heartbeat_renews_the_leases_it_lists_drops_the_others_and_remakes_lost_ones() -> None:
    fleet = Fleet()
    kept, _ = fleet.ask(0, Priority.LOW, member="m")
    lost, _ = fleet.ask(0, Priority.LOW, member="m")
    roster = fleet.ledger.heartbeat(2500, "m", "processor", 3000, [kept], [], {})
    assert roster.snapshot.in_flight == (0, 0, 1, 0)  # `lost`'s release never arrived
    assert fleet.ledger.leases[kept] == 5500
    # the store restarted empty: the next beat puts the member's leases back
    fleet.ledger = FleetLedger()
    roster = fleet.ledger.heartbeat(2600, "m", "processor", 3000, [kept, lost], [], {})
    assert roster.snapshot.in_flight == (0, 0, 2, 0)
    assert [(u.member, u.role, u.in_flight) for u in roster.members] == [
        ("m", "processor", (0, 0, 2, 0))
    ]


def test_a_429_on_one_member_holds_every_member_until_its_retry_after() -> None:
    fleet = Fleet()
    fleet.ledger.block(100, 1500)
    _, answer = fleet.ask(1599, Priority.HIGH, member="other")
    assert isinstance(answer, Denied) and (answer.reason, answer.wait_ms) == ("gate", 1)
    assert answer.snapshot.blocked_ms == 1
    assert isinstance(fleet.ask(1600, Priority.HIGH, member="other")[1], Granted)


def test_the_tokens_per_minute_are_the_fleets_paced_like_one_process() -> None:
    fleet = Fleet()
    t = terms(tpm=6000.0)  # 100 tokens a second, a minute's burst
    _, first = fleet.ask(0, Priority.LOW, member="a", tokens=5000, t=t)
    assert isinstance(first, Granted) and first.go_in_ms == 0
    _, second = fleet.ask(0, Priority.LOW, member="b", tokens=2000, t=t)
    assert isinstance(second, Granted) and second.go_in_ms == 10_000  # 1000 tokens of debt
    _, third = fleet.ask(5000, Priority.LOW, member="c", tokens=1, t=t)
    assert isinstance(third, Denied) and (third.reason, third.wait_ms) == ("rates", 5000)
    assert isinstance(fleet.ask(10_000, Priority.LOW, member="c", tokens=1, t=t)[1], Granted)


def test_the_lower_call_cap_is_the_smallest_a_live_member_steers_to() -> None:
    ledger = FleetLedger()
    ledger.heartbeat(0, "g1", "gateway", 3000, [], [0], {0: 64})
    roster = ledger.heartbeat(0, "g2", "gateway", 3000, [], [0], {0: 128})
    assert roster.snapshot.lower_call_items == (64, 0, 0, 0)
    assert roster.snapshot.members == 2
    roster = ledger.heartbeat(3000, "g2", "gateway", 3000, [], [0], {0: 128})  # g1 expired
    assert roster.snapshot.lower_call_items == (128, 0, 0, 0)
    assert roster.snapshot.members == 1


def test_a_member_leaving_gives_its_slots_back_at_once() -> None:
    fleet = Fleet()
    for _ in range(8):
        fleet.ask(0, Priority.LOW, member="leaving")
    fleet.ledger.leave("leaving")
    assert isinstance(fleet.ask(1, Priority.LOW, member="other")[1], Granted)


def test_the_backfill_keeps_one_slot_while_low_is_active() -> None:
    fleet = Fleet()
    fleet.ask(0, Priority.LOW, member="a")
    assert isinstance(fleet.ask(1, Priority.BACKFILL, member="b")[1], Granted)
    _, second = fleet.ask(2, Priority.BACKFILL, member="b")
    assert isinstance(second, Denied) and second.reason == "slots"


def test_a_lower_lane_takes_no_pace_debt_while_an_upper_lane_is_active() -> None:
    """The buckets' debt is a queue: a low call taking 4,000 tokens of debt would hold the
    online caller behind it for 40 s. While online is active the low call waits instead,
    reserving nothing, and the online call goes at once."""
    t = terms(tpm=6000.0, tpm_burst=1000.0)  # 100 tokens a second, 1,000 at once
    alone = Fleet()
    _, low = alone.ask(0, Priority.LOW, member="a", tokens=5000, t=t)
    assert isinstance(low, Granted) and low.go_in_ms == 40_000  # nobody above: the FIFO pace
    fleet = Fleet()
    fleet.ask(0, Priority.ONLINE, member="gateway", tokens=100, t=t)  # online is active
    _, low = fleet.ask(1, Priority.LOW, member="a", tokens=5000, t=t)
    # A call larger than the burst waits for a full bucket, then goes with the rest as debt.
    assert isinstance(low, Denied) and (low.reason, low.wait_ms) == ("rates", 999)  # 900.1 held
    _, small = fleet.ask(1, Priority.LOW, member="a", tokens=500, t=t)  # fits: goes, no debt
    assert isinstance(small, Granted) and small.go_in_ms == 0
    _, online = fleet.ask(2, Priority.ONLINE, member="gateway", tokens=300, t=t)
    assert isinstance(online, Granted) and online.go_in_ms == 0
    _, high = fleet.ask(3, Priority.HIGH, member="b", tokens=900, t=t)  # below online too
    assert isinstance(high, Denied) and (high.reason, high.wait_ms) == ("rates", 7997)
    # Online and high quiet past their recent window (1 s): low queues in the FIFO again.
    _, later = fleet.ask(2500, Priority.LOW, member="a", tokens=5000, t=t)
    assert isinstance(later, Granted) and later.go_in_ms == 46_500
