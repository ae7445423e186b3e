"""The governor's lanes as the settings configure them: high's guard, the online lane's
reservation, and the picks they give (fake time)."""

from __future__ import annotations

from embedstream.core import configured
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.reservations import LaneTerms
from embedstream.settings import load_settings

ON, H, L = Priority.ONLINE, Priority.HIGH, Priority.LOW


def test_a_guarded_high_lane_keeps_two_slots_while_high_is_recent() -> None:
    now = [0.0]
    guarded = LaneTerms(idle_slots=1, reserved_slots=2, lower_call_items=512, min_share=0.1)
    lanes = {**default_lanes(0.1), H: guarded}
    governor = Governor(max_concurrency=8, clock=lambda: now[0], lanes=lanes)
    for _ in range(6):
        assert governor.pick({L}) is L
        governor.started(L)
    assert governor.pick({L}) is L  # no high yet: low takes a 7th slot
    governor.started(L)
    governor.finished(L)
    governor.saw(H)
    assert governor.pick({L}) is None  # 6 low in flight: the rest is high's
    assert governor.lane_slots(L) == 6
    assert governor.call_cap(L, 2048) == 512
    assert governor.pick({H, L}) is H
    now[0] = 2.0  # high traffic over
    assert governor.call_cap(L, 2048) == 2048
    assert governor.pick({L}) is L


def test_without_a_guard_high_keeps_one_slot_and_full_calls() -> None:
    governor = Governor(max_concurrency=8, clock=lambda: 0.0)
    governor.saw(H)
    assert governor.lane_slots(L) == 7
    assert governor.call_cap(L, 2048) == 2048


def test_the_settings_give_the_governor_its_lanes() -> None:
    clock = lambda: 0.0  # noqa: E731
    plain = configured.governor(load_settings(env={}), clock)
    assert plain.reservations.terms[H].reserved_slots == 1
    assert plain.reservations.terms[ON].reserved_slots == 0  # no online lane served
    online = configured.governor(load_settings(env={"EMBEDSTREAM_HTTP_PORT": "8080"}), clock)
    assert online.reservations.terms[ON] == configured.ONLINE_LANE


def test_online_callers_take_the_slots_the_kafka_lanes_leave() -> None:
    now = [0.0]
    settings = load_settings(env={}, overrides={"http_port": 8080, "max_concurrency": 8})
    governor = configured.governor(settings, lambda: now[0])
    while governor.pick({L}) is L:
        governor.started(L)
    assert governor.lane_in_flight(L) == 7  # alone, low leaves high its one slot
    governor.saw(ON)
    assert governor.pick({ON}) is ON  # the slot low left
    governor.started(ON)
    governor.finished(L)
    assert governor.pick({L}) is None  # low is at its cap of 8 - 1 - 1 while online is active
    assert governor.call_cap(L, 2048) == 256
    assert governor.pick({ON, L}) is ON
