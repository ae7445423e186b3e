"""Holds of partitions while the schema registry is out: doubling, capped, Retry-After, reset."""

from __future__ import annotations

from embedstream.core.holdback import HoldBacks


def test_holds_double_up_to_the_cap_and_end_by_themselves() -> None:
    holds: HoldBacks[str] = HoldBacks(first_s=0.5, max_s=4.0)
    waits = []
    now = 0.0
    for _ in range(5):
        waits.append(holds.hold("p0", now))
        assert holds.held(now) == {"p0"}
        now += waits[-1]
        assert holds.held(now) == set()  # ended: the partition reads again
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_retry_after_is_honoured_within_the_cap() -> None:
    holds: HoldBacks[str] = HoldBacks(first_s=0.5, max_s=10.0)
    assert holds.hold("p0", 0.0, retry_after_s=3.0) == 3.0
    assert holds.hold("p1", 0.0, retry_after_s=60.0) == 10.0
    assert holds.held(5.0) == {"p1"}


def test_a_new_outage_starts_again_from_the_short_wait() -> None:
    holds: HoldBacks[str] = HoldBacks(first_s=0.5, max_s=4.0)
    for now in (0.0, 0.5, 1.5):
        holds.hold("p0", now)
    assert holds.hold("p0", 100.0) == 0.5  # long after the last hold ended
