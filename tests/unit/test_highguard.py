"""The high guard: what the low lane leaves to high while high traffic is recent (fake time)."""

from __future__ import annotations

import pytest
from embedstream.core import configured
from embedstream.core.governor import Governor
from embedstream.core.highguard import HighGuard
from embedstream.core.lanes import Priority
from embedstream.settings import load_settings


@pytest.mark.parametrize(
    ("last_high", "now", "share", "slots", "cap", "items"),
    [
        (None, 0.0, 0.1, 8, 7, 2048),  # no high traffic yet: the scheduler's own rule
        (0.0, 0.5, 0.1, 8, 6, 512),  # recent: two slots kept, smaller low calls
        (0.0, 1.0, 0.1, 8, 6, 512),  # the window's edge counts as recent
        (0.0, 1.5, 0.1, 8, 7, 2048),  # over: back to the scheduler's rule
        (0.0, 0.5, 0.9, 8, 8, 512),  # low's share wins over the reservation
        (0.0, 0.5, 0.1, 2, 1, 512),  # never under one low slot
        (0.0, 0.5, 0.0, 1, 1, 512),
    ],
)
def test_the_guard_by_time(
    last_high: float | None, now: float, share: float, slots: int, cap: int, items: int
) -> None:
    guard = HighGuard(recent_s=1.0, reserved_slots=2, low_call_items=512)
    if last_high is not None:
        guard.saw_high(last_high)
    assert guard.low_slot_cap(slots, share, now) == cap
    assert guard.low_call_cap(2048, now) == items
    assert guard.low_call_cap(100, now) == 100  # never above the batch limit


def test_an_older_sighting_does_not_move_the_window_back() -> None:
    guard = HighGuard(recent_s=1.0)
    guard.saw_high(5.0)
    guard.saw_high(2.0)
    assert guard.active(5.9)


@pytest.mark.parametrize("bad", [{"recent_s": -1.0}, {"reserved_slots": 0}, {"low_call_items": 0}])
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HighGuard(**bad)  # type: ignore[arg-type]


def test_the_governor_keeps_two_slots_for_high_while_high_is_recent() -> None:
    now = [0.0]
    governor = Governor(max_concurrency=8, clock=lambda: now[0], high_guard=HighGuard())
    for _ in range(6):
        assert governor.pick(False, True) is Priority.LOW
        governor.started(Priority.LOW)
    assert governor.pick(False, True) is Priority.LOW  # no high yet: low takes a 7th slot
    governor.started(Priority.LOW)
    governor.finished(Priority.LOW)
    governor.saw_high()
    assert governor.pick(False, True) is None  # 6 low in flight: the rest is high's
    assert governor.lane_slots(Priority.LOW) == 6
    assert governor.low_call_cap(2048) == 512
    assert governor.pick(True, True) is Priority.HIGH
    now[0] = 2.0  # high traffic over
    assert governor.low_call_cap(2048) == 2048
    assert governor.pick(False, True) is Priority.LOW


def test_without_a_guard_nothing_changes() -> None:
    governor = Governor(max_concurrency=8, clock=lambda: 0.0)
    governor.saw_high()
    assert governor.lane_slots(Priority.LOW) == 7
    assert governor.low_call_cap(2048) == 2048


def test_the_high_guard_setting_gives_the_governor_its_guard() -> None:
    clock = lambda: 0.0  # noqa: E731
    assert configured.governor(load_settings(env={}), clock).high_guard is None
    guarded = configured.governor(load_settings(env={"EMBEDSTREAM_HIGH_GUARD": "true"}), clock)
    assert isinstance(guarded.high_guard, HighGuard)
