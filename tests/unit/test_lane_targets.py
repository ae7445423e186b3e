"""Lanes held to a latency target: the lower lanes' call size steered by the upper lane's own
latency, beside the adaptive concurrency limit (fake time)."""

from __future__ import annotations

import pytest
from embedstream.core import configured
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.reservations import LaneTerms
from embedstream.core.targets import LaneTarget
from embedstream.settings import load_settings

ON, H, L = Priority.ONLINE, Priority.HIGH, Priority.LOW


@pytest.mark.parametrize(
    ("observed", "caps"),
    [
        # (latency s, time s) per answer -> the cap after each (target 0.1, from 256 of 2048)
        ([(0.2, 0.0)], [128]),  # over the target: halved
        ([(0.2, 0.0), (0.2, 0.1)], [128, 128]),  # within the cooldown: answers to old calls
        ([(0.2, 0.0), (0.2, 0.3)], [128, 64]),  # after it: halved again
        ([(0.2, 0.0), (0.2, 0.3), (0.2, 0.6), (0.2, 0.9)], [128, 64, 32, 32]),  # the floor
        ([(0.07, 0.0)], [256]),  # between half the target and the target: held
        ([(0.04, 0.0), (0.04, 0.1)], [384, 512]),  # well under: grows back a sixteenth
    ],
)
def test_the_cap_follows_the_upper_lanes_latency(
    observed: list[tuple[float, float]], caps: list[int]
) -> None:
    target = LaneTarget(0.1, 2048, start_items=256)
    seen = []
    for latency, now in observed:
        target.observe(latency, now)
        seen.append(target.lower_call_items)
    assert seen == caps


def test_the_cap_never_passes_the_batch_limit() -> None:
    target = LaneTarget(0.1, 300, start_items=256)
    for i in range(10):
        target.observe(0.01, float(i))
    assert target.lower_call_items == 300


@pytest.mark.parametrize(
    "bad",
    [{"target_s": 0.0}, {"floor_items": 0}, {"floor_items": 5000}, {"relax": 1.0}],
)
def test_bad_targets_are_refused(bad: dict[str, float]) -> None:
    values: dict[str, float] = {"target_s": 0.1, "max_items": 2048, "start_items": 256} | bad
    with pytest.raises(ValueError):
        LaneTarget(**values)  # type: ignore[arg-type]


def test_a_slow_online_lane_cuts_the_kafka_lanes_calls_only_while_it_is_active() -> None:
    now = [0.0]
    governor = Governor(
        max_concurrency=8,
        clock=lambda: now[0],
        lanes=default_lanes(0.1, online=LaneTerms(reserved_slots=2, lower_call_items=256)),
        targets={ON: LaneTarget(0.1, 2048, start_items=256)},
    )
    governor.saw(ON)
    assert governor.call_cap(L, 2048) == 256 and governor.call_cap(H, 2048) == 256
    governor.started(ON)
    governor.finished(ON, 0.3)  # its oldest item took 300 ms
    assert governor.call_cap(L, 2048) == 128
    now[0] = 5.0  # online idle: nothing held back
    assert governor.call_cap(L, 2048) == 2048


def test_the_lane_target_and_the_adaptive_limit_each_keep_to_their_knob() -> None:
    """Slow online items cut the lower calls' size and leave the concurrency limit alone;
    slow calls (per target_latency_ms) lower the limit and leave the size alone."""
    settings = load_settings(env={}, overrides={
        "http_port": 8080, "target_latency_ms": 1000,
        "max_concurrency": 8, "max_batch_size": 2048,
    })  # fmt: skip
    now = [0.0]
    governor = configured.governor(settings, lambda: now[0])
    governor.saw(ON)
    governor.on_success(0.05, {})  # fast calls: the limit stays
    for step in range(6):  # halved from 1,024 to its floor of 32
        now[0] = step * 0.5
        governor.started(ON)
        governor.finished(ON, 0.4)  # online items wait 400 ms: over its 100 ms target
        governor.saw(ON)
    assert governor.call_cap(L, 2048) == 32
    assert governor.limit.limit == 8
    governor.on_success(2.0, {})  # a call slower than target_latency_ms: overload
    assert governor.limit.limit < 8
    assert governor.call_cap(L, 2048) == 32  # the size is the target's, not the limit's


def test_the_settings_hold_the_online_lane_alone_to_a_target() -> None:
    plain = configured.lane_targets(load_settings(env={}))
    assert plain == {}  # no online lane
    served = configured.lane_targets(load_settings(env={}, overrides={"http_port": 8080}))
    assert list(served) == [ON]  # the high lane has a process of its own instead (high_process)
    assert served[ON].target_s == 0.1 and served[ON].lower_call_items == 256
    off = configured.lane_targets(
        load_settings(env={}, overrides={"http_port": 8080, "online_target_ms": 0})
    )
    assert off == {}
