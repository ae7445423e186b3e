"""The online lane's judgement before queueing: answer now, or queue (tables)."""

from __future__ import annotations

import dataclasses

import pytest
from embedstream.core.costmodel import CallCost
from embedstream.core.keylimits import KeyLimits
from embedstream.core.shedding import LaneLoad, Shed, expected_wait_s, judge

COST = CallCost(base_s=0.1, per_token_s=0.0, per_item_s=0.0)  # every call 100 ms
IDLE = LaneLoad(
    queued_items=0, in_flight_calls=0, slots=2, max_items=100, blocked_s=0.0,
    provider_usable=True, max_queued_items=1000,
)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "items", "wait"),
    [
        ({}, 1, 0.1),  # one call
        ({}, 200, 0.1),  # two calls over two slots: one wave
        ({}, 201, 0.2),  # three calls: two waves
        ({"queued_items": 300}, 1, 0.2),  # four calls with the items ahead
        ({"in_flight_calls": 2}, 1, 0.2),  # every slot busy: one more wave
        ({"blocked_s": 2.0}, 1, 2.1),  # the gate first
    ],
)
def test_expected_wait(changes: dict[str, object], items: int, wait: float) -> None:
    load = dataclasses.replace(IDLE, **changes)  # type: ignore[arg-type]
    assert expected_wait_s(load, items, items, COST) == pytest.approx(wait)


@pytest.mark.parametrize(
    ("changes", "items", "deadline", "expected"),
    [
        ({}, 1, 1.0, None),
        ({"blocked_s": 5.0}, 1, 1.0, (429, 5)),  # a 429's cooldown outlasts the deadline
        ({"blocked_s": 0.5}, 1, 1.0, None),  # ... or not
        ({"queued_items": 2000}, 1, 100.0, (429, 1)),  # the lane's bound on waiting items
        ({"queued_items": 5000, "max_queued_items": 10_000}, 1, 1.0, (429, 3)),  # 26 waves
        ({"provider_usable": False}, 1, 1.0, (503, 1)),
        ({"provider_usable": False, "blocked_s": 3.2}, 1, 1.0, (503, 4)),
    ],
)
def test_judge(
    changes: dict[str, object], items: int, deadline: float, expected: tuple[int, int] | None
) -> None:
    load = dataclasses.replace(IDLE, **changes)  # type: ignore[arg-type]
    shed = judge(load, items, items, COST, deadline)
    if expected is None:
        assert shed is None
    else:
        assert isinstance(shed, Shed)
        assert (shed.status, shed.retry_after_s) == expected
        assert shed.message


def test_key_limits_count_requests_and_inputs_per_key() -> None:
    limits = KeyLimits({"indexer": {"requests_per_s": 2, "inputs_per_s": 10}})
    assert limits.admit("rag", 10_000, 0.0) == 0  # a name without limits
    assert limits.admit("indexer", 4, 0.0) == 0
    assert limits.admit("indexer", 4, 0.0) == 0  # two requests, eight inputs
    assert limits.admit("indexer", 1, 0.0) == pytest.approx(0.5)  # the third request waits
    assert limits.admit("indexer", 9, 0.5) == pytest.approx(0.2)  # inputs: 7 of 9 there
    assert limits.admit("indexer", 7, 0.5) == 0  # a refusal counted nothing


def test_a_request_larger_than_a_seconds_allowance_goes_when_the_bucket_is_full() -> None:
    limits = KeyLimits({"indexer": {"inputs_per_s": 10}})
    assert limits.admit("indexer", 50, 0.0) == 0  # full bucket: it goes, and owes 40
    assert limits.admit("indexer", 1, 1.0) == pytest.approx(3.1)  # paid back first
    assert limits.admit("indexer", 1, 5.1) == 0
